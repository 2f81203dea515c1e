"""llama-server's time from start to its first /health 200, with the model file in tmpfs, at two
file sizes: the fixed part of a load (process, CUDA context, KV cache, warm-up) and the part that
grows with the file, and from them the deployed file's load.

Every server runs the production flag list (``infra.server_args.server_args``: ``--load-mode none``,
every layer on the GPU, ctx 56320, MTP); only the model path, host and port differ. The sizes are
interleaved, so drift in the machine hits both alike. ``bench/gpu/load_time.sh`` builds the server
and writes the two files.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from infra.config import StackConfig
from infra.server_args import server_args
from tests.harness.server import LlamaServer

LOAD_TIMEOUT_S = 300.0
GIB = 1024**3
# The deployed file, unsloth's Qwen3.6-35B-A3B UD-Q4_K_XL: ~22 GB.
DEPLOYED_GIB = 20.5


def time_to_healthy(binary: Path, model: Path) -> float:
    flags = server_args(StackConfig(), model_path=str(model), api_key_file=None, host="127.0.0.1")
    with LlamaServer(flags, binary=binary) as server:
        server.wait_healthy(timeout=LOAD_TIMEOUT_S)
        return time.monotonic() - server.started_at


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--server", type=Path, required=True, help="the llama-server binary")
    parser.add_argument("--model", type=Path, action="append", required=True, help="twice: two sizes")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    sizes = {model: model.stat().st_size / GIB for model in args.model}
    seconds: dict[Path, list[float]] = {model: [] for model in args.model}
    # The machine's first start pays the driver's and the GPU's first use, as a VM's first start
    # after its boot does: timed and reported on its own, never mixed into the medians.
    first = time_to_healthy(args.server, args.model[0])
    print(f"first start: {args.model[0].name} {sizes[args.model[0]]:.2f} GiB -> {first:.2f} s", flush=True)
    for rep in range(args.reps):
        for model in args.model if rep % 2 == 0 else reversed(args.model):
            seconds[model].append(time_to_healthy(args.server, model))
            said = f"{model.name} {sizes[model]:.2f} GiB -> {seconds[model][-1]:.2f} s"
            print(f"rep {rep + 1}: {said}", flush=True)
    print("\nTime from start to the first /health 200, model in tmpfs, production flags")
    print("| file | GiB | median s | min-max s |\n|---|---|---|---|")
    for model, values in seconds.items():
        print(f"| {model.name} | {sizes[model]:.2f} | {statistics.median(values):.2f} | "
              f"{min(values):.2f}-{max(values):.2f} |")  # fmt: skip
    (small, big) = sorted(args.model, key=lambda m: sizes[m])
    median = {model: statistics.median(values) for model, values in seconds.items()}
    per_gib = (median[big] - median[small]) / (sizes[big] - sizes[small])
    fixed = median[small] - per_gib * sizes[small]
    first_extra = first - median[args.model[0]]
    deployed = fixed + per_gib * DEPLOYED_GIB
    print(f"\nfixed {fixed:.2f} s + {per_gib:.3f} s/GiB ({1 / per_gib:.2f} GiB/s): "
          f"{DEPLOYED_GIB} GiB -> {deployed:.1f} s; a first start after boot "
          f"{first_extra:+.2f} s -> {deployed + first_extra:.1f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
