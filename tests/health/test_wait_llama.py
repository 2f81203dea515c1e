"""``python -m qwen36 wait`` against the real pinned llama-server, as the Pulumi gate runs it."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from infra.boot_protocol import KEY_REPORT
from infra.config import StackConfig
from infra.server_args import server_args
from tests.compute_fake.group import FakeGroup, FakeMember, GroupState, report
from tests.compute_fake.server import fake_compute_api
from tests.harness.server import LlamaServer, free_port

pytestmark = pytest.mark.llama

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "wait-test-key-9876543210"
# The wait starts first and meets a closed port before the server is started.
LATE_START_S = 1.5
CLI_TIMEOUT_S = 180
FIRST_LINE_TIMEOUT_S = 60


def _group(member: FakeMember) -> FakeGroup:
    return FakeGroup(
        timeline=[(0, GroupState(members=[member]))], clock=time.monotonic, project="acme-llm-test"
    )


def _wait_argv(url: str, endpoint: str, group: FakeGroup, timeout_minutes: float) -> list[str]:
    return [
        sys.executable, "-m", "qwen36", "wait",
        "--mode", "http", "--url", url,
        "--project", group.project, "--region", group.region, "--group", group.name,
        "--timeout-minutes", str(timeout_minutes),
        "--poll-seconds", "0.1",
        "--compute-endpoint", endpoint, "--anonymous",
    ]  # fmt: skip


@contextmanager
def _wait_process(argv: list[str], api_key: str | None) -> Iterator[subprocess.Popen[str]]:
    env = {k: v for k, v in os.environ.items() if k != "QWEN36_API_KEY"}
    if api_key is not None:
        env["QWEN36_API_KEY"] = api_key
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def _first_line(proc: subprocess.Popen[str]) -> str:
    """The wait's first progress line (bounded: the CLI's imports take a few seconds)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], FIRST_LINE_TIMEOUT_S)
    assert ready, f"no progress line within {FIRST_LINE_TIMEOUT_S}s"
    return proc.stdout.readline()


def _states(stdout: str) -> list[str]:
    """The http state of each progress line, e.g. ["unreachable", "loading", "ok"]."""
    return [line.split("http ", 1)[1].split(" ", 1)[0] for line in stdout.splitlines() if "; http " in line]


def test_wait_sees_refused_then_loading_then_ready_with_gemma_started_late(
    gemma_model: Path, llama_server_bin: Path, tmp_path: Path
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(API_KEY)
    port = free_port()
    cfg = StackConfig(spec_draft_n_max=0)
    args = server_args(
        cfg, model_path=str(gemma_model), api_key_file=str(key_file), host="127.0.0.1", port=port
    )
    group = _group(
        FakeMember(
            "qwen36-dev-x1",
            "europe-west4-a",
            guest_attributes={KEY_REPORT: report("server", 1, "waiting for /health")},
        )
    )
    with (
        fake_compute_api(group) as endpoint,
        _wait_process(_wait_argv(f"http://127.0.0.1:{port}", endpoint, group, 3), API_KEY) as waiter,
    ):
        first = _first_line(waiter)
        assert "http unreachable (connection refused)" in first, first
        time.sleep(LATE_START_S)
        assert waiter.poll() is None, "the wait must not succeed while nothing listens"
        with LlamaServer(args, binary=llama_server_bin, port=port):
            rest, stderr = waiter.communicate(timeout=CLI_TIMEOUT_S)
        stdout = first + rest
    assert waiter.returncode == 0, stderr
    states = _states(stdout)
    assert states[0] == "unreachable"
    assert "loading" in states
    assert states[-1] == "ok"
    assert states.index("unreachable") < states.index("loading") < states.index("ok")
    assert "ready after" in stdout and "API key accepted" in stdout
    assert API_KEY not in stdout + stderr


def test_wrong_api_key_is_not_ready_and_never_printed(
    tiny_mtp_model: Path, llama_server_bin: Path, tmp_path: Path
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(API_KEY)
    wrong = "not-the-key-5555"
    args = server_args(
        StackConfig(), model_path=str(tiny_mtp_model), api_key_file=str(key_file), host="127.0.0.1"
    )
    group = _group(
        FakeMember(
            "qwen36-dev-x1",
            "europe-west4-a",
            guest_attributes={KEY_REPORT: report("ready", 1, "llama-server healthy")},
            serial="startup-script: qwen36: phase=ready\n",
        )
    )
    with LlamaServer(args, binary=llama_server_bin) as srv:
        srv.wait_healthy()
        with (
            fake_compute_api(group) as endpoint,
            _wait_process(_wait_argv(srv.base_url, endpoint, group, 0.05), wrong) as waiter,
        ):
            stdout, stderr = waiter.communicate(timeout=CLI_TIMEOUT_S)
    assert waiter.returncode == 1
    # One error line on stderr; the diagnosis above it on stdout (pulumi up shows both).
    (line,) = stderr.splitlines()
    assert line.startswith("wait: error: llama-server is not ready: ")
    assert "key-rejected" in stdout and "startup-script: qwen36: phase=ready" in stdout
    assert "gcloud compute instances get-serial-port-output" in stdout
    assert wrong not in stdout + stderr and API_KEY not in stdout + stderr
