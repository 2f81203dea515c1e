"""What the front door costs a request on loopback: its added time to first token, what 100 named keys
in its set add to that, and its CPU per 1,000 streamed tokens, against the same real llama-server.

    .venv/bin/python bench/door_overhead.py [--pairs 40] [--stream-tokens 512]

One pinned llama-server (CPU, the tiny agreeing MTP model, the product's arguments) behind three
paths: direct; a door with the program's key only (``one key``); a door whose key set (in a loopback
Secret Manager fake) holds 100 named keys, reached with one of them (``100 keys``). Each door runs as
on Cloud Run (``python -m door``, its own process) with the group up (the fake Compute API) and its
metrics on (a fake Monitoring), warmed first, so no wake, no look at the group and no key read is in
the figures. Each client keeps one warm keep-alive connection.

Time to first token (a streaming chat request of 8 tokens, sent to the first content delta read) is
measured in pairs: each round runs direct, one key and 100 keys once, in a shuffled order, so drift
on the shared cores falls on both sides of a pair. Reported: the median of the paired differences
(door - direct, 100 keys - one key) with their interquartile range. Then ``--stream-tokens`` streams
through the 100-key door: the door process's CPU time (utime + stime from /proc) per 1,000 streamed
tokens, the figure that sizes its Cloud Run CPU.

On 2 shared cores the server, the doors and the client compete for CPU, so these are upper bounds of
what the door adds next to a GPU server; the one-way VPC hop of the real path is not in them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
import timeit
from contextlib import ExitStack
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import httpx  # noqa: E402

from door import keyset  # noqa: E402
from door.keys import KeyState  # noqa: E402
from infra.config import StackConfig  # noqa: E402
from infra.server_args import server_args  # noqa: E402
from tests.compute_fake.group import FakeGroup, FakeMember, GroupState  # noqa: E402
from tests.compute_fake.server import fake_compute_api  # noqa: E402
from tests.door.conftest import DoorProcess, start_door  # noqa: E402
from tests.door.google_fakes import FakeGoogle, fake_google  # noqa: E402
from tests.harness.models import tiny_mtp_model  # noqa: E402
from tests.harness.server import LlamaServer, free_port  # noqa: E402
from tests.idle.vm_fakes import FakeMetadata, fake_metadata  # noqa: E402

KEY = "bench-door-key-0123456789"
TTFT_TOKENS = 8
THROUGHPUT_RUNS = 3
NAMED_KEYS = 100
KEYS_SECRET = "projects/p/secrets/bench-door-keys"  # noqa: S105 (a secret's name)


def _ask(tokens: int) -> dict[str, object]:
    return {
        "messages": [{"role": "user", "content": "Say a"}],
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
    }


DROPS: list[str] = []


def stream_once(client: httpx.Client, base: str, tokens: int) -> tuple[float, int]:
    """(time to first content delta, characters received). llama-server b11434 sometimes closes a
    kept-alive connection as a request arrives on it: that request is sent again (and counted)."""
    try:
        return _stream(client, base, tokens)
    except httpx.RemoteProtocolError:
        DROPS.append(base)
        return _stream(client, base, tokens)


def _stream(client: httpx.Client, base: str, tokens: int) -> tuple[float, int]:
    sent = time.perf_counter()
    first = 0.0
    chars = 0
    with client.stream("POST", f"{base}/v1/chat/completions", json=_ask(tokens)) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[6:]).get("choices") or []:
                text = (choice.get("delta") or {}).get("content") or ""
                if text:
                    first = first or time.perf_counter()
                    chars += len(text)
    return first - sent, chars


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def key_set(n: int) -> tuple[bytes, list[str]]:
    """Contract B's payload with ``n`` named keys, and the keys."""
    keys, entries = [], []
    for i in range(n):
        key = "qk-" + secrets.token_urlsafe(32)
        salt = secrets.token_hex(16)
        digest = hashlib.sha256(bytes.fromhex(salt) + key.encode()).hexdigest()
        entries.append(
            {"name": f"user-{i:03d}", "salt": salt, "hash": digest, "created": "2026-12-02T00:00:00Z"}
        )
        keys.append(key)
    return json.dumps({"version": 1, "keys": entries}).encode(), keys


def match_cost(payload: bytes, key: str, program: str) -> tuple[float, float, float]:
    """In the door's own code: microseconds to recognise a key already seen (one SHA-256 and a
    lookup) in the 100-key set and with the program's key alone, and to check a new key against all
    100 entries (the first request with it after each read of the set)."""
    many = KeyState(program, keyset.parse(payload), 0.0)
    one = KeyState(program, {}, 0.0)
    many.match(key)
    one.match(program)
    n = 20000
    seen = timeit.timeit(lambda: many.match(key), number=n) / n * 1e6
    alone = timeit.timeit(lambda: one.match(program), number=n) / n * 1e6
    fresh = timeit.timeit(lambda: KeyState(program, many.entries, 0.0).match(key), number=200) / 200 * 1e6
    return seen, alone, fresh


def spread(values: list[float]) -> str:
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{median * 1000:+.2f} ms (IQR {q1 * 1000:+.2f} to {q3 * 1000:+.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--stream-tokens", type=int, default=512)
    args = parser.parse_args(argv)
    rng = random.Random(0)
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
        fake = FakeGoogle()
        payload, named = key_set(NAMED_KEYS)
        fake.add_version(KEYS_SECRET, payload)
        google = stack.enter_context(fake_google(fake))
        metadata = stack.enter_context(fake_metadata(FakeMetadata()))
        env = {
            "QWEN36_DOOR_API_KEY": KEY,
            "QWEN36_DOOR_PROJECT": "p",
            "QWEN36_DOOR_REGION": "us-central1",
            "QWEN36_DOOR_GROUP": group.name,
            "QWEN36_DOOR_UPSTREAM_PORT": str(port),
            "QWEN36_DOOR_COMPUTE_URL": f"{compute}/compute/v1",
            "QWEN36_DOOR_METADATA_URL": metadata,
            "QWEN36_DOOR_MONITORING_URL": f"{google}/v3",
            "QWEN36_DOOR_SECRET_MANAGER_URL": f"{google}/v1",
            "QWEN36_DOOR_METRICS_INTERVAL_S": "5",
        }

        def door(extra: dict[str, str]) -> DoorProcess:
            started = start_door({**env, **extra})
            stack.callback(lambda: (started.proc.terminate(), started.proc.wait(timeout=15)))
            return started

        one, many = door({}), door({"QWEN36_DOOR_KEYS_SECRET": KEYS_SECRET})

        def client(key: str) -> httpx.Client:
            return stack.enter_context(httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=120))

        clients = {
            "direct": (client(KEY), llama.base_url),
            "one key": (client(KEY), one.url),
            "100 keys": (client(named[57]), many.url),
        }
        for http, base in clients.values():
            stream_once(http, base, TTFT_TOKENS)  # warm: connections, the look at the group, the keys
        ttft: dict[str, list[float]] = {name: [] for name in clients}
        for _ in range(args.pairs):
            order = list(clients)
            rng.shuffle(order)
            for name in order:
                http, base = clients[name]
                ttft[name].append(stream_once(http, base, TTFT_TOKENS)[0])
        http, base = clients["100 keys"]
        door_cpu = 0.0
        door_tokens = 0
        for _ in range(THROUGHPUT_RUNS):
            before = cpu_s(many.proc.pid)
            _, chars = stream_once(http, base, args.stream_tokens)
            door_cpu += cpu_s(many.proc.pid) - before
            door_tokens += chars

    added = [d - s for d, s in zip(ttft["one key"], ttft["direct"], strict=True)]
    keys_cost = [m - o for m, o in zip(ttft["100 keys"], ttft["one key"], strict=True)]
    print(
        f"Door overhead on loopback ({args.pairs} interleaved rounds of {TTFT_TOKENS}-token streams; "
        f"{THROUGHPUT_RUNS} streams of {args.stream_tokens} tokens through the 100-key door)\n"
    )
    print("| path | TTFT median (ms) |")
    print("|---|---|")
    for name, values in ttft.items():
        print(f"| {name} | {statistics.median(values) * 1000:.1f} |")
    print(f"\nthe door's added TTFT (one key - direct, paired): {spread(added)}")
    print(f"100 keys in the set (100 keys - one key, paired): {spread(keys_cost)}")
    print(f"door CPU: {door_cpu / max(door_tokens, 1) * 1e6:.0f} ms per 1,000 streamed tokens")
    seen, alone, fresh = match_cost(payload, named[57], KEY)
    print(
        f"key check in-process: {seen:.1f} us for a key seen before among 100 ({alone:.1f} us with the "
        f"program's key alone), {fresh:.0f} us for a new key against all 100 entries"
    )
    if DROPS:
        print(f"connections llama-server dropped before answering (sent again): {len(DROPS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
