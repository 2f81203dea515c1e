"""What the front door costs a request on loopback: its added time to first token and its cost on a
stream's throughput, against the same real llama-server reached directly.

    .venv/bin/python bench/door_overhead.py [--runs 20] [--stream-tokens 512]

Both paths talk to one pinned llama-server (CPU, the tiny agreeing MTP model, the product's
arguments) from a client with a warm keep-alive connection. The door runs as it does on Cloud Run
(``python -m door``, its own process) with the group "up" (the fake Compute API, one RUNNING member
at 127.0.0.1) and its metrics on (a fake Monitoring), after one warm-up request, so no wake and no
look at the group is in the figures. Measured:

* time to first token: from the client sending a streaming chat request (8 tokens) to the first
  content delta it reads; direct and through the door alternate, ``--runs`` each; the door's added
  TTFT is the difference of the medians;
* stream throughput: a ``--stream-tokens`` stream, tokens per second as the client sees them between
  its first and last content delta (one token is one "a" here), three runs each way; and the door
  process's CPU time (utime+stime from /proc) per 1,000 streamed tokens, the figure that sizes its
  Cloud Run CPU.

On 2 shared cores the server, the door and the client compete for CPU, so these are upper bounds of
what the door adds next to a GPU server; the one-way VPC hop of the real path is not in them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import httpx  # noqa: E402

from infra.config import StackConfig  # noqa: E402
from infra.server_args import server_args  # noqa: E402
from tests.compute_fake.group import FakeGroup, FakeMember, GroupState  # noqa: E402
from tests.compute_fake.server import fake_compute_api  # noqa: E402
from tests.door.conftest import start_door  # noqa: E402
from tests.door.google_fakes import FakeGoogle, fake_google  # noqa: E402
from tests.harness.models import tiny_mtp_model  # noqa: E402
from tests.harness.server import LlamaServer, free_port  # noqa: E402
from tests.idle.vm_fakes import FakeMetadata, fake_metadata  # noqa: E402

KEY = "bench-door-key-0123456789"
TTFT_TOKENS = 8
THROUGHPUT_RUNS = 3


def _ask(tokens: int) -> dict[str, object]:
    return {
        "messages": [{"role": "user", "content": "Say a"}],
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
    }


def stream_once(client: httpx.Client, base: str, tokens: int) -> tuple[float, float, int]:
    """(time to first content delta, seconds from first to last delta, characters received)."""
    sent = time.perf_counter()
    first = last = 0.0
    chars = 0
    with client.stream("POST", f"{base}/v1/chat/completions", json=_ask(tokens)) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[6:]).get("choices") or []:
                text = (choice.get("delta") or {}).get("content") or ""
                if text:
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    chars += len(text)
    return first - sent, last - first, chars


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--stream-tokens", type=int, default=512)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="door-bench-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        key_file = root / "key"
        key_file.write_text(KEY + "\n")
        model = tiny_mtp_model(root, agree=True)
        port = free_port()
        cfg = StackConfig()
        llama = stack.enter_context(
            LlamaServer(
                server_args(
                    cfg, model_path=str(model), api_key_file=str(key_file), host="127.0.0.1", port=port
                ),
                port=port,
            )
        )
        llama.wait_healthy()
        vm = FakeMember("qwen36-dev-x1b2", "us-central1-b", network_ip="127.0.0.1")
        group = FakeGroup(
            timeline=[(0.0, GroupState(members=[vm], target_size=1))], project="p", region="us-central1"
        )
        compute = stack.enter_context(fake_compute_api(group))
        google = stack.enter_context(fake_google(FakeGoogle()))
        metadata = stack.enter_context(fake_metadata(FakeMetadata()))
        door = start_door(
            {
                "QWEN36_DOOR_API_KEY": KEY,
                "QWEN36_DOOR_PROJECT": "p",
                "QWEN36_DOOR_REGION": "us-central1",
                "QWEN36_DOOR_GROUP": group.name,
                "QWEN36_DOOR_UPSTREAM_PORT": str(port),
                "QWEN36_DOOR_COMPUTE_URL": f"{compute}/compute/v1",
                "QWEN36_DOOR_METADATA_URL": metadata,
                "QWEN36_DOOR_MONITORING_URL": f"{google}/v3",
                "QWEN36_DOOR_METRICS_INTERVAL_S": "5",
            }
        )
        stack.callback(lambda: (door.proc.terminate(), door.proc.wait(timeout=15)))
        headers = {"Authorization": f"Bearer {KEY}"}
        client = stack.enter_context(httpx.Client(headers=headers, timeout=120))
        paths = {"direct": llama.base_url, "door": door.url}
        for base in paths.values():
            stream_once(client, base, TTFT_TOKENS)  # warm: connections, the door's look at the group
        ttft: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(args.runs):
            for name, base in paths.items():
                ttft[name].append(stream_once(client, base, TTFT_TOKENS)[0])
        rate: dict[str, list[float]] = {name: [] for name in paths}
        door_cpu = 0.0
        door_tokens = 0
        for _ in range(THROUGHPUT_RUNS):
            for name, base in paths.items():
                before = cpu_s(door.proc.pid)
                _, span, chars = stream_once(client, base, args.stream_tokens)
                if name == "door":
                    door_cpu += cpu_s(door.proc.pid) - before
                    door_tokens += chars
                rate[name].append((chars - 1) / span if span > 0 else 0.0)

    def q(values: list[float], p: float) -> float:
        return (
            statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]
            if len(values) > 1
            else values[0]
        )

    print(
        f"Door overhead on loopback ({args.runs} TTFT runs of {TTFT_TOKENS} tokens, "
        f"{THROUGHPUT_RUNS} streams of {args.stream_tokens} tokens each way)\n"
    )
    print("| path | TTFT median (ms) | TTFT p90 (ms) | stream tok/s (median) |")
    print("|---|---|---|---|")
    for name in paths:
        print(
            f"| {name} | {statistics.median(ttft[name]) * 1000:.1f} | {q(ttft[name], 90) * 1000:.1f} "
            f"| {statistics.median(rate[name]):.0f} |"
        )
    added = (statistics.median(ttft["door"]) - statistics.median(ttft["direct"])) * 1000
    cost = 1 - statistics.median(rate["door"]) / statistics.median(rate["direct"])
    print(
        f"\nadded TTFT: {added:.1f} ms (median); throughput cost: {cost * 100:.1f} % of tok/s; "
        f"door CPU: {door_cpu / max(door_tokens, 1) * 1e6:.0f} ms per 1,000 streamed tokens"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
