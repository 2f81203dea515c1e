"""`load --fleet` against two real llama-servers behind a local load-balancer stand-in: a member
killed mid-run shows up as counted errors, the run goes on on the survivor, nothing is dropped, and
the servers over time come from a stand-in of the Compute API."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.fleet.lb_standin import Group, compute_api, load_balancer, managed_instance
from tests.measure.servers import CliRun, count_completions, serve, validate

CLIENTS = 4
REQUESTS = 24
KILL_AFTER = 6
# One thread per server: two servers share the test machine's two cores.
THREADS = 1
KILL_WAIT_S = 60.0


def test_killed_member_is_counted_and_the_run_goes_on(
    cli: Callable[..., CliRun], llama_server_bin: Path, tiny_mtp_model: Path, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    group = Group(
        [managed_instance("qwen36-dev-a", running=True), managed_instance("qwen36-dev-b", running=True)]
    )
    with (
        serve(llama_server_bin, tiny_mtp_model, tmp_path / "a", parallel=2, threads=THREADS) as a,
        serve(llama_server_bin, tiny_mtp_model, tmp_path / "b", parallel=2, threads=THREADS) as b,
        load_balancer([a.base_url, b.base_url]) as lb,
        compute_api(group) as compute,
    ):

        def kill_b_midway() -> None:
            deadline = time.monotonic() + KILL_WAIT_S
            while count_completions(b.log_text()) < KILL_AFTER // 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert b.proc is not None
            b.proc.kill()
            with group.lock:
                group.members[1] = managed_instance("qwen36-dev-b", running=False)

        killer = threading.Thread(target=kill_b_midway)
        killer.start()
        run = cli(
            "load", "--url", lb.url, "--clients", str(CLIENTS), "--requests", str(REQUESTS),
            "--max-tokens", "16",
            "--group", "qwen36-dev", "--region", "us-central1", "--project", "acme-llm",
            "--servers-poll", "0.5",
            "--compute-endpoint", compute, "--anonymous", "--json",
        )  # fmt: skip
        killer.join()
        completed = count_completions(a.log_text()) + count_completions(b.log_text())
    doc = run.json()
    print({k: doc[k] for k in ("wall_s", "aggregate_decode_tps", "latency_s", "errors", "sent")})
    validate(doc, "load.schema.json")
    # Every request sent reached the balancer and came back counted, as a success or an error.
    assert doc["accounted"] is True
    assert doc["sent"] == REQUESTS == lb.received["POST /v1/chat/completions"]
    assert doc["stopped_early"] is None
    failed = doc["errors"].get("member_failed", 0)
    assert failed >= 1 and set(doc["errors"]) == {"member_failed"}, doc["errors"]
    assert doc["succeeded"] + failed == REQUESTS
    assert lb.statuses["POST /v1/chat/completions 502"] == failed
    assert lb.statuses["POST /v1/chat/completions 200"] == doc["succeeded"] <= completed
    assert "does not retry" in doc["error_messages"]["member_failed"]
    assert run.code == 1 and "requests failed" in run.err
    # The survivor kept serving after the kill.
    assert doc["succeeded"] > KILL_AFTER
    servers = doc["fleet"]["servers"]
    assert servers[0]["running"] == 2 and servers[-1]["running"] == 1
    assert servers[-1]["members"] == 2 and servers[-1]["healthy"] == 1
    assert (doc["fleet"]["running_min"], doc["fleet"]["running_max"]) == (1, 2)
    assert all(s["error"] is None for s in servers)
    assert group.calls == len(servers)
    assert (
        doc["latency_s"]["p50"]
        <= doc["latency_s"]["p90"]
        <= doc["latency_s"]["p99"]
        <= doc["latency_s"]["max"]
    )


def test_single_server_run_has_no_fleet_part(
    cli: Callable[..., CliRun], llama_server_bin: Path, tiny_mtp_model: Path, tmp_path: Path
) -> None:
    with serve(llama_server_bin, tiny_mtp_model, tmp_path) as server:
        run = cli("load", "--url", server.base_url, "--requests", "2", "--max-tokens", "8", "--json")
    assert run.code == 0, run.err
    doc = run.json()
    validate(doc, "load.schema.json")
    assert doc["fleet"] is None


def test_group_needs_its_region_and_project(cli: Callable[..., CliRun]) -> None:
    run = cli("load", "--url", "http://127.0.0.1:9", "--requests", "1", "--group", "qwen36-dev")
    assert run.code != 0 and "--region and --project" in run.err


def test_fleet_report_without_a_server() -> None:
    from qwen36.measure import report
    from qwen36.measure.fleet_size import ServerCount
    from qwen36.measure.load import LoadResult, ServerSample

    result = LoadResult(
        url="http://203.0.113.10", clients=2, max_tokens=8, duration_limit_s=None, request_limit=2, fleet=True
    )
    result.servers += [
        ServerSample(0.0, count=ServerCount(members=2, running=2, healthy=None)),
        ServerSample(15.0, error="PermissionDenied: 403 compute.instanceGroupManagers.get"),
        ServerSample(30.0, count=ServerCount(members=3, running=3, healthy=2)),
    ]
    doc = report.load_json(result)
    validate(doc, "load.schema.json")
    assert (doc["fleet"]["running_min"], doc["fleet"]["running_max"]) == (2, 3)
    assert doc["fleet"]["servers"][1] == {
        "t_s": 15.0, "members": None, "running": None, "healthy": None,
        "error": "PermissionDenied: 403 compute.instanceGroupManagers.get",
    }  # fmt: skip
    assert "servers running (min / max) | 2 / 3" in report.load_markdown(result)
