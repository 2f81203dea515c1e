"""The patch's effect on one forward pass of an MTP verify-sized batch, with llama-bench.

``llama-bench -p N -n 0`` times the model on a batch of N tokens, which for N = 3 is the verify
step of ``--spec-draft-n-max 2`` without the server around it, so a difference of a percent is
visible over many repetitions. N = 1 is the control: the patch changes nothing there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

PATCH_ENV = "GGML_CUDA_DISABLE_MOE_VERIFY_FUSION"
BENCH_TIMEOUT_S = 300
ARMS = {"patch on": {}, "patch off": {PATCH_ENV: "1"}}


def bench(binary: Path, model: Path, n_tokens: int, reps: int, env: dict[str, str]) -> float:
    """Mean tok/s of ``reps`` passes over a batch of ``n_tokens`` (llama-bench's avg_ts)."""
    cmd = [str(binary), "-m", str(model), "-p", str(n_tokens), "-n", "0", "-r", str(reps)]
    cmd += ["-ngl", "99", "-fa", "1", "-o", "json"]
    out = subprocess.run(
        cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S, check=True
    )
    (result,) = json.loads(out.stdout)
    return float(result["avg_ts"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes", default="1,3", help="batch sizes (tokens), comma-separated")
    parser.add_argument("--runs", type=int, default=4, help="llama-bench processes per arm and size")
    parser.add_argument("--reps", type=int, default=200, help="repetitions inside each process")
    args = parser.parse_args(argv)
    binary = args.bin_dir / "llama-bench"
    results: dict[str, dict[str, list[float]]] = {}
    print(
        f"Verify-batch A/B: llama-bench -p N -n 0 -r {args.reps}, {args.runs} processes per arm, ABBA order"
    )
    print(f"{'N':>3s} {'patch on tok/s (runs)':<40s} {'patch off tok/s (runs)':<40s} {'delta':>8s}")
    for size in (int(s) for s in args.sizes.split(",")):
        runs: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for i in range(args.runs):
            order = list(ARMS) if i % 2 == 0 else list(reversed(ARMS))
            for arm in order:
                runs[arm].append(bench(binary, args.model, size, args.reps, ARMS[arm]))
        results[str(size)] = runs
        on, off = (statistics.mean(runs[arm]) for arm in ARMS)
        cells = [
            f"{statistics.mean(runs[arm]):7.1f} ({', '.join(f'{v:.1f}' for v in runs[arm])})" for arm in ARMS
        ]
        print(f"{size:3d} {cells[0]:<40s} {cells[1]:<40s} {100.0 * (on / off - 1.0):+7.2f}%")
    (args.out / "verify_ab.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
