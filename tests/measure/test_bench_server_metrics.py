"""`bench` prints the server's own acceptance and decode rate (its /metrics, read with the API key
before and after the run) beside its per-request figures, against the real pinned llama-server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.measure.servers import TEST_KEY, CliRun, serve, validate

QUICK = ("--reps", "1", "--max-tokens", "16", "--workloads", "chat,math")


def test_bench_prints_the_servers_acceptance_and_decode_rate(
    cli: Callable[..., CliRun], llama_server_bin: Path, tiny_mtp_model_agreeing: Path, tmp_path: Path
) -> None:
    with serve(
        llama_server_bin, tiny_mtp_model_agreeing, tmp_path, spec_draft_n_max=2, api_key=TEST_KEY
    ) as server:
        table = cli("bench", "--url", server.base_url, "--api-key", TEST_KEY, *QUICK)
        machine = cli("bench", "--url", server.base_url, "--api-key", TEST_KEY, *QUICK, "--json")
    assert table.code == 0, table.err
    line = next(x for x in table.out.splitlines() if x.startswith("server /metrics over this run:"))
    assert "acceptance 100.0 %" in line and "since it started: acceptance 100.0 %" in line, line
    doc = machine.json()
    validate(doc, "bench.schema.json")
    server = doc["server"]
    # Every draft of the agreeing model is accepted, by the server's count as by the timings'.
    assert server["run_acceptance"] == 1.0 and server["lifetime_acceptance"] == 1.0
    assert server["run_drafted"] >= sum(w["draft_n"] for w in doc["workloads"]) > 0
    assert server["run_decode_tps"] > 0
    assert server["run_decode_tps"] == pytest.approx(doc["summary"]["weighted_decode_tps"], rel=0.35)
