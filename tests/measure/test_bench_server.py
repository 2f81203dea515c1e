"""`bench` against the real pinned llama-server on CPU: figures, acceptance, keys and failures."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from qwen36.errors import Exit
from qwen36.measure.bench import run_bench
from qwen36.measure.client import Client
from qwen36.measure.workloads import WORKLOAD_NAMES, WORKLOADS
from tests.harness.server import free_port
from tests.measure.servers import TEST_KEY, CliRun, count_completions, serve, validate

# Short runs: the figures only show the tool works (reps 1, few tokens, two cores).
QUICK = ("--reps", "1", "--max-tokens", "16")
KILL_AFTER = 3
KILL_WAIT_S = 60.0


def _error_line(run: CliRun) -> str:
    lines = run.err.strip().splitlines()
    assert lines, "no error line printed"
    assert lines[-1].startswith(("bench: error: ", "load: error: ", "tune: error: "))
    return lines[-1]


def test_agreeing_mtp_heads_report_acceptance_for_every_workload(
    cli: Callable[..., CliRun], llama_server_bin: Path, tiny_mtp_model_agreeing: Path, tmp_path: Path
) -> None:
    with serve(llama_server_bin, tiny_mtp_model_agreeing, tmp_path, spec_draft_n_max=2) as server:
        run = cli("bench", "--url", server.base_url, *QUICK, "--json", "--png", str(tmp_path / "bench.png"))
    assert run.code == 0, run.err
    if importlib.util.find_spec("matplotlib") is None:
        assert "--png needs matplotlib" in run.err
    else:
        assert (tmp_path / "bench.png").read_bytes().startswith(b"\x89PNG")
    doc = run.json()
    validate(doc, "bench.schema.json")
    assert doc["complete"] and doc["completed"] == doc["planned"] == len(WORKLOAD_NAMES)
    assert [w["name"] for w in doc["workloads"]] == list(WORKLOAD_NAMES)
    for workload in doc["workloads"]:
        assert workload["draft_n"] > 0
        assert workload["acceptance"] > 0
        assert workload["decode_tps"] > 0 and workload["prompt_tps"] > 0 and workload["wall_s"] > 0
        assert workload["acceptance"] == pytest.approx(
            workload["draft_n_accepted"] / workload["draft_n"], abs=1e-4
        )
    slowest = min(doc["workloads"], key=lambda w: w["decode_tps"])
    assert doc["summary"]["min_workload"] == slowest["name"]
    assert doc["summary"]["min_decode_tps"] == slowest["decode_tps"]
    print(run.out)


def test_table_and_markdown_for_a_model_without_mtp_say_na(
    cli: Callable[..., CliRun], llama_server_bin: Path, gemma_model: Path, tmp_path: Path
) -> None:
    markdown = tmp_path / "bench.md"
    with serve(llama_server_bin, gemma_model, tmp_path, spec_draft_n_max=0) as server:
        run = cli("bench", "--url", server.base_url, *QUICK, "--markdown", str(markdown))
    assert run.code == 0, run.err
    print(run.out)
    rows = [
        line for line in run.out.splitlines() if any(line.strip("│┃ ").startswith(n) for n in WORKLOAD_NAMES)
    ]
    assert len(rows) == len(WORKLOAD_NAMES)
    assert all("n/a" in row for row in rows)
    assert "minimum (" in run.out
    assert "no draft_n" in run.err and "--spec-type draft-mtp" in run.err
    text = markdown.read_text()
    md_rows = [
        line for line in text.splitlines() if line.split("|")[1:2] in ([f" {n} "] for n in WORKLOAD_NAMES)
    ]
    assert len(md_rows) == len(WORKLOAD_NAMES)
    assert all(row.split("|")[3].strip() == "n/a" for row in md_rows)
    assert "**minimum (" in text


def test_api_key_right_wrong_and_missing(
    cli: Callable[..., CliRun],
    llama_server_bin: Path,
    tiny_mtp_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    one = ("--workloads", "chat", *QUICK)
    with serve(llama_server_bin, tiny_mtp_model, tmp_path, api_key=TEST_KEY) as server:
        right = cli("bench", "--url", server.base_url, "--api-key", TEST_KEY, *one)
        wrong = cli("bench", "--url", server.base_url, "--api-key", "not-the-key", *one)
        missing = cli("bench", "--url", server.base_url, *one)
        monkeypatch.setenv("QWEN36_API_KEY", TEST_KEY)
        monkeypatch.setenv("QWEN36_URL", server.base_url)
        from_env = cli("bench", *one)
    assert right.code == 0, right.err
    assert from_env.code == 0, from_env.err
    assert wrong.code == Exit.DENIED and "rejected the API key (401)" in _error_line(wrong)
    assert missing.code == Exit.DENIED and "wants an API key (401)" in _error_line(missing)
    assert "QWEN36_API_KEY" in _error_line(missing)


def test_no_server_and_timeout_give_one_line_each(
    cli: Callable[..., CliRun], llama_server_bin: Path, tiny_mtp_model_agreeing: Path, tmp_path: Path
) -> None:
    nobody = cli("bench", "--url", f"http://127.0.0.1:{free_port()}", *QUICK)
    assert nobody.code == Exit.UNREACHABLE and "no server answers at" in _error_line(nobody)
    # The agreeing model never stops early ("aaaa..."): 300 tokens take several times 20 ms.
    with serve(llama_server_bin, tiny_mtp_model_agreeing, tmp_path) as server:
        slow = cli(
            "bench", "--url", server.base_url, "--reps", "1", "--max-tokens", "300", "--timeout", "0.02"
        )
    assert slow.code == Exit.UNREACHABLE and "no answer within 0.02 s" in _error_line(slow)


def test_server_killed_mid_run_keeps_partial_results(
    cli: Callable[..., CliRun], llama_server_bin: Path, tiny_mtp_model: Path, tmp_path: Path
) -> None:
    with serve(llama_server_bin, tiny_mtp_model, tmp_path) as server:

        def kill_after_some_requests() -> None:
            deadline = time.monotonic() + KILL_WAIT_S
            while count_completions(server.log_text()) < KILL_AFTER and time.monotonic() < deadline:
                time.sleep(0.01)
            assert server.proc is not None
            server.proc.kill()

        killer = threading.Thread(target=kill_after_some_requests)
        killer.start()
        run = cli("bench", "--url", server.base_url, "--reps", "2", "--max-tokens", "64", "--json")
        killer.join()
    assert run.code == 1
    doc = run.json()
    validate(doc, "bench.schema.json")
    assert doc["error"]["kind"] == "server_died"
    assert 0 < doc["completed"] < doc["planned"] and not doc["complete"]
    assert doc["summary"]["min_decode_tps"] is not None
    line = _error_line(run)
    assert "stopped answering mid-run" in line and "partial results" in line


# Enough tokens per request that the one-token difference between timings and /metrics stays
# well under the 1 % the headline is held to (1/200 = 0.5 %).
NOISY_MAX_TOKENS = 200
NOISY_WORKLOADS = 3
NOISY_REPS = 2
NOISY_REQUEST_TIMEOUT_S = 120.0


def _metrics(base_url: str) -> dict[str, float]:
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    values = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:") and " " in line:
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_headline_equals_the_servers_metrics_under_a_noisy_neighbour(
    llama_server_bin: Path, tiny_mtp_model_agreeing: Path, tmp_path: Path
) -> None:
    """The token-weighted headline is /metrics' own quotient while another process loads the CPU."""
    # The neighbour: a busy loop on the same two cores as the server, for the whole measurement.
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with serve(llama_server_bin, tiny_mtp_model_agreeing, tmp_path, spec_draft_n_max=2) as server:
            before = _metrics(server.base_url)
            with Client(server.base_url, None, timeout_s=NOISY_REQUEST_TIMEOUT_S) as client:
                result = run_bench(
                    client, WORKLOADS[:NOISY_WORKLOADS], reps=NOISY_REPS, max_tokens=NOISY_MAX_TOKENS,
                    warmup=False,
                )  # fmt: skip
            after = _metrics(server.base_url)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert result.error is None and result.completed == NOISY_WORKLOADS * NOISY_REPS
    tokens = after["llamacpp:tokens_predicted_total"] - before.get("llamacpp:tokens_predicted_total", 0)
    seconds = after["llamacpp:tokens_predicted_seconds_total"] - before.get(
        "llamacpp:tokens_predicted_seconds_total", 0
    )
    server_rate = tokens / seconds
    timed_tokens = sum(w.predicted_n for w in result.measured)
    assert result.weighted_tps is not None and result.mean_tps is not None and result.minimum is not None
    print(
        f"/metrics {server_rate:.2f} tok/s ({tokens:.0f} tokens), headline {result.weighted_tps:.2f}, "
        f"mean of requests {result.mean_tps:.2f}, min {result.minimum.decode_tps:.2f}; "
        f"timings count {timed_tokens} tokens"
    )
    assert result.weighted_tps == pytest.approx(server_rate, rel=0.01)
    # At most one token a request apart (timings were seen to count one fewer than /metrics).
    assert 0 <= tokens - timed_tokens <= result.completed
