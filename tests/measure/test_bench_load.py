"""`load` against the real llama-server: four clients on four slots, every request accounted for."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

from qwen36.errors import Exit
from tests.measure.servers import TEST_KEY, CliRun, count_completions, serve, validate

SLOTS = 4
REQUESTS = 12
# Four slots share the context: room for each slot's prompt and its tokens.
SLOT_CTX = 4096
KILL_AFTER = 6
KILL_WAIT_S = 60.0


def _accounted(doc: dict) -> None:
    assert doc["accounted"] is True
    assert doc["sent"] == doc["succeeded"] + sum(doc["errors"].values())


def test_four_clients_on_four_slots(
    cli: Callable[..., CliRun], llama_server_bin: Path, tiny_mtp_model: Path, tmp_path: Path
) -> None:
    with serve(llama_server_bin, tiny_mtp_model, tmp_path, parallel=SLOTS, ctx_size=SLOT_CTX) as server:
        run = cli(
            "load", "--url", server.base_url, "--clients", str(SLOTS), "--requests", str(REQUESTS),
            "--max-tokens", "32", "--json",
        )  # fmt: skip
        log = server.log_text()
    assert run.code == 0, run.err
    doc = run.json()
    validate(doc, "load.schema.json")
    _accounted(doc)
    assert doc["sent"] == doc["succeeded"] == REQUESTS and doc["errors"] == {}
    # The server really finished as many requests as the client counted.
    assert count_completions(log) == REQUESTS
    assert doc["aggregate_decode_tps"] > 0
    per_request = doc["per_request_decode_tps"]
    assert 0 < per_request["min"] <= per_request["mean"] <= per_request["max"]
    latency = doc["latency_s"]
    assert 0 < latency["p50"] <= latency["p95"] <= latency["max"]
    print(doc)


def test_duration_bound_and_table(
    cli: Callable[..., CliRun], llama_server_bin: Path, tiny_mtp_model: Path, tmp_path: Path
) -> None:
    with serve(llama_server_bin, tiny_mtp_model, tmp_path, parallel=SLOTS, ctx_size=SLOT_CTX) as server:
        json_path = tmp_path / "load.json"
        started = time.monotonic()
        run = cli(
            "load", "--url", server.base_url, "--clients", str(SLOTS), "--duration", "1.5",
            "--max-tokens", "16", "--json", str(json_path),
        )  # fmt: skip
        elapsed = time.monotonic() - started
    assert run.code == 0, run.err
    assert "aggregate decode tok/s" in run.out and "latency s (p50 / p95 / max)" in run.out
    doc = json.loads(json_path.read_text())
    validate(doc, "load.schema.json")
    _accounted(doc)
    assert doc["sent"] >= SLOTS
    assert elapsed < 30


def test_every_request_is_accounted_for_when_the_server_dies(
    cli: Callable[..., CliRun], llama_server_bin: Path, tiny_mtp_model: Path, tmp_path: Path
) -> None:
    with serve(llama_server_bin, tiny_mtp_model, tmp_path, parallel=SLOTS, ctx_size=SLOT_CTX) as server:

        def kill_midway() -> None:
            deadline = time.monotonic() + KILL_WAIT_S
            while count_completions(server.log_text()) < KILL_AFTER and time.monotonic() < deadline:
                time.sleep(0.01)
            assert server.proc is not None
            server.proc.kill()

        killer = threading.Thread(target=kill_midway)
        killer.start()
        run = cli(
            "load", "--url", server.base_url, "--clients", str(SLOTS), "--requests", "40",
            "--max-tokens", "48", "--json",
        )  # fmt: skip
        killer.join()
    assert run.code == 1
    doc = run.json()
    validate(doc, "load.schema.json")
    _accounted(doc)
    assert KILL_AFTER <= doc["succeeded"] < doc["sent"] <= 40
    assert doc["errors"].get("server_died", 0) > 0
    assert doc["stopped_early"] == "server_died"
    assert "stopped answering mid-run" in doc["error_messages"]["server_died"]
    assert "requests failed" in run.err.strip().splitlines()[-1]


def test_wrong_key_counts_every_request_as_unauthorized(
    cli: Callable[..., CliRun], llama_server_bin: Path, tiny_mtp_model: Path, tmp_path: Path
) -> None:
    with serve(llama_server_bin, tiny_mtp_model, tmp_path, api_key=TEST_KEY) as server:
        run = cli(
            "load",
            "--url",
            server.base_url,
            "--api-key",
            "nope",
            "--clients",
            "2",
            "--requests",
            "5",
            "--json",
        )
    assert run.code == Exit.DENIED
    doc = run.json()
    validate(doc, "load.schema.json")
    # Both clients' first requests were refused; nothing more was sent once the key was known bad.
    assert doc["sent"] == 2 and doc["succeeded"] == 0 and doc["errors"] == {"unauthorized": 2}
    assert doc["stopped_early"] == "unauthorized"
