"""Decode tok/s of the pinned llama-server on one GPU: CPU vs GPU sampling, MTP, and the patch A/B.

Every server runs with the production flag list from ``infra.server_args.server_args`` (only the
model path, loopback host and port differ); the variants change the stack config, never a flag.
Greedy output must be byte-identical across every variant and both patch arms, or this exits 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from infra.config import PROJECT, StackConfig, parse_config
from infra.server_args import server_args
from tests.harness.server import LlamaServer

# Loading ~5 GB without mmap onto the GPU takes a few seconds; this bounds a hung start.
LOAD_TIMEOUT_S = 180.0
REQUEST_TIMEOUT_S = 120.0
NVIDIA_SMI_TIMEOUT_S = 20.0
WARMUP_TOKENS = 16
PATCH_ENV = "GGML_CUDA_DISABLE_MOE_VERIFY_FUSION"
PATCH_LOG_MARK = "moe-verify-fusion patch"
# Measured servers keep the default log level; only the probe asks for info lines from ggml.
VERBOSE_ENV = {"LLAMA_ARG_LOG_VERBOSITY": "4"}
PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain step by step how to compute the derivative of x^3 * sin(x).",
    "def fibonacci(n):\n    ",
    "List five practical tips for keeping a sourdough starter alive.",
)
# name -> stack config keys (Pulumi spelling) that differ from the production defaults.
VARIANTS: dict[str, dict[str, str]] = {
    "plain": {"specDraftNMax": "0", "backendSampling": "false"},
    "gpu-sampling": {"specDraftNMax": "0", "backendSampling": "true"},
    "mtp": {"backendSampling": "false"},
    "mtp+gpu-sampling": {},
}


def stack_config(overrides: dict[str, str]) -> StackConfig:
    return parse_config({f"{PROJECT}:{key}": value for key, value in overrides.items()})


@dataclass
class Run:
    name: str
    tok_s: list[float] = field(default_factory=list)
    texts: dict[int, str] = field(default_factory=dict)
    drafts: int = 0
    accepted: int = 0
    mismatched_rounds: int = 0

    @property
    def digest(self) -> str:
        joined = "\x00".join(self.texts[i] for i in sorted(self.texts))
        return hashlib.sha256(joined.encode()).hexdigest()[:16]


def complete(client: httpx.Client, base: str, prompt: str, n_predict: int) -> dict:
    body = {
        "prompt": prompt,
        "n_predict": n_predict,
        "temperature": 0.0,
        "cache_prompt": False,
        "ignore_eos": True,
        "seed": 1,
    }
    response = client.post(f"{base}/completion", json=body)
    response.raise_for_status()
    return response.json()


def serve_and_measure(
    name: str, cfg: StackConfig, args: argparse.Namespace, rounds: int, env: dict[str, str] | None = None
) -> Run:
    flags = server_args(cfg, model_path=str(args.model), api_key_file=None, host="127.0.0.1")
    run = Run(name)
    with LlamaServer(flags, binary=args.bin_dir / "llama-server", env=env) as server:
        server.wait_healthy(timeout=LOAD_TIMEOUT_S)
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
            # A first full-length request runs slower (allocations, graph captures): discarded.
            complete(client, server.base_url, PROMPTS[0], WARMUP_TOKENS)
            complete(client, server.base_url, PROMPTS[-1], args.n_predict)
            for _ in range(rounds):
                for i, prompt in enumerate(PROMPTS):
                    result = complete(client, server.base_url, prompt, args.n_predict)
                    timings = result["timings"]
                    run.tok_s.append(float(timings["predicted_per_second"]))
                    run.drafts += int(timings.get("draft_n", 0))
                    run.accepted += int(timings.get("draft_n_accepted", 0))
                    text = result["content"]
                    if i in run.texts and run.texts[i] != text:
                        run.mismatched_rounds += 1
                    run.texts.setdefault(i, text)
            if name == "mtp+gpu-sampling":
                features_ok(client, server.base_url, args.out)
        (args.out / f"server-{name}.log").write_text(server.log_text()[-20000:])
    return run


def fused_path_ran(cfg: StackConfig, args: argparse.Namespace, env: dict[str, str]) -> bool:
    """Whether the patch's one-time log line appears (ggml's info lines need log verbosity 4)."""
    flags = server_args(cfg, model_path=str(args.model), api_key_file=None, host="127.0.0.1")
    with LlamaServer(flags, binary=args.bin_dir / "llama-server", env={**env, **VERBOSE_ENV}) as server:
        server.wait_healthy(timeout=LOAD_TIMEOUT_S)
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
            complete(client, server.base_url, PROMPTS[0], WARMUP_TOKENS)
        return PATCH_LOG_MARK in server.log_text()


def features_ok(client: httpx.Client, base: str, out: Path) -> None:
    """Requests that must still succeed with GPU sampling on (some fall back to CPU sampling)."""
    chat = f"{base}/v1/chat/completions"
    messages = [{"role": "user", "content": "Give me a JSON object describing a cat."}]
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    checks = {
        "sampled": {"messages": messages, "max_tokens": 32, "temperature": 0.8, "top_p": 0.9, "seed": 7},
        "json_schema": {
            "messages": messages,
            "max_tokens": 64,
            "response_format": {"type": "json_schema", "json_schema": {"name": "cat", "schema": schema}},
        },
        "logprobs": {"messages": messages, "max_tokens": 16, "logprobs": True, "top_logprobs": 3},
        "tool_call": {"messages": messages, "max_tokens": 32, "tools": [tool]},
    }
    report: dict[str, str] = {}
    for name, body in checks.items():
        response = client.post(chat, json=body)
        report[name] = f"HTTP {response.status_code}"
        if response.status_code == 200 and name == "json_schema":
            content = response.json()["choices"][0]["message"]["content"]
            try:
                json.loads(content)
                report[name] += ", valid JSON"
            except json.JSONDecodeError:
                report[name] += ", not JSON (cut at max_tokens?)"
        if response.status_code == 200 and name == "logprobs":
            has = bool(response.json()["choices"][0].get("logprobs"))
            report[name] += ", logprobs present" if has else ", NO logprobs"
    stream = {"messages": messages, "max_tokens": 16, "stream": True}
    with client.stream("POST", chat, json=stream) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        done = lines[-1:] == ["data: [DONE]"]
        report["stream"] = f"HTTP {response.status_code}, {len(lines)} events, done={done}"
    (out / "features.json").write_text(json.dumps(report, indent=2))
    print("GPU-sampling feature checks (MTP + GPU sampling server):")
    for name, verdict in report.items():
        print(f"  {name:12s} {verdict}")


def gpu_name() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown GPU"
    return out.stdout.strip() or "unknown GPU"


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f}  {min(values):7.1f}-{max(values):<7.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2, help="passes over the prompts per variant")
    parser.add_argument("--ab-runs", type=int, default=4, help="server runs per patch arm")
    parser.add_argument("--ab-rounds", type=int, default=3, help="passes over the prompts per A/B run")
    parser.add_argument("--n-predict", type=int, default=256)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    gpu = gpu_name()
    started = time.monotonic()

    runs = [serve_and_measure(name, stack_config(over), args, args.rounds) for name, over in VARIANTS.items()]
    by_name = {run.name: run for run in runs}
    # GPU sampling must not change greedy output: compare within the same MTP setting. Across MTP
    # settings the verify step's batch of 3 may round differently from batch 1 (shown, not required).
    reference = {name: by_name["mtp" if name.startswith("mtp") else "plain"].digest for name in by_name}
    print(f"\nDecode tok/s on {gpu}: llama-server, production flags, {args.n_predict} greedy tokens,")
    print(f"{len(PROMPTS)} prompts x {args.rounds} rounds, no prompt cache; model: {args.model.name}")
    print(f"{'variant':18s} {'median':>7s}  {'min-max':<15s} {'drafts acc/made':>15s}  output sha256[:16]")
    for run in runs:
        drafts = f"{run.accepted}/{run.drafts}" if run.drafts else "-"
        same = "same" if run.digest == reference[run.name] else "DIFFERS"
        print(f"{run.name:18s} {spread(run.tok_s)} {drafts:>15s}  {run.digest} ({same} as CPU sampling)")
    mtp_same = by_name["mtp"].digest == by_name["plain"].digest
    print(f"MTP output {'identical to' if mtp_same else 'differs from'} plain decoding (informational)")

    prod = stack_config({})
    envs = {"patch on": {}, "patch off": {PATCH_ENV: "1"}}
    ran = {arm: fused_path_ran(prod, args, env) for arm, env in envs.items()}
    print(f"\nFused small-batch path logged: patch on {ran['patch on']}, patch off {ran['patch off']}")
    arms: dict[str, list[Run]] = {"patch on": [], "patch off": []}
    for i in range(args.ab_runs):
        # ABBA order, so a slow drift over the session does not favour one arm.
        order = ("patch on", "patch off") if i % 2 == 0 else ("patch off", "patch on")
        for arm in order:
            name = f"mtp+gpu-sampling-{arm.replace(' ', '-')}-{i}"
            arms[arm].append(serve_and_measure(name, prod, args, args.ab_rounds, env=envs[arm]))
    print(f"\nPatch A/B (same binary, {PATCH_ENV}=1 for off), MTP + GPU sampling,", end=" ")
    print(f"{args.ab_runs} server runs each:")
    means: dict[str, float] = {}
    for arm, arm_runs in arms.items():
        per_run = [statistics.median(r.tok_s) for r in arm_runs]
        means[arm] = statistics.mean(per_run)
        digests = {r.digest for r in arm_runs}
        print(
            f"  {arm:9s} run medians {', '.join(f'{v:.1f}' for v in per_run)}  mean {means[arm]:.1f}"
            f"  min-max {min(per_run):.1f}-{max(per_run):.1f}  sha {','.join(sorted(digests))}"
        )
    delta = 100.0 * (means["patch on"] / means["patch off"] - 1.0)
    print(f"  delta (on vs off): {delta:+.2f} %")

    ab_runs = arms["patch on"] + arms["patch off"]
    equal = all(r.digest == reference[r.name] and r.mismatched_rounds == 0 for r in runs) and all(
        r.digest == by_name["mtp+gpu-sampling"].digest and r.mismatched_rounds == 0 for r in ab_runs
    )
    print(f"\nGreedy output: GPU = CPU sampling, patch on = off, every round alike: {equal}")
    print(f"measured in {time.monotonic() - started:.0f}s")
    summary = {
        "gpu": gpu,
        "model": args.model.name,
        "n_predict": args.n_predict,
        "variants": [asdict(r) | {"digest": r.digest} for r in runs],
        "ab": {arm: [asdict(r) | {"digest": r.digest} for r in rs] for arm, rs in arms.items()},
        "ab_delta_percent": delta,
        "fused_path_logged": ran,
        "greedy_identical": equal,
        "mtp_equals_plain": mtp_same,
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
