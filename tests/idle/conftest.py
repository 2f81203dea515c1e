"""Fixtures for the autostop tests: the real llama-server with the product's arguments, the cloud
fakes on loopback, and the watcher run as its own process (as systemd runs it on the VM)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from infra.config import StackConfig
from infra.server_args import server_args
from tests.compute_fake.group import FakeGroup, FakeMember, GroupState
from tests.compute_fake.server import fake_compute_api
from tests.harness.server import LlamaServer, free_port
from tests.idle.vm_fakes import FakeLogging, FakeMetadata, fake_logging, fake_metadata

API_KEY = "idle-test-key-0123456789"
WATCHER = Path(__file__).resolve().parents[2] / "startup" / "idle_watch.py"
EXIT_TIMEOUT_S = 10.0
# The VM's image runs Python 3.10 (Ubuntu 22.04); a test run may point this at one to prove it.
VM_PYTHON = os.environ.get("QWEN36_VM_PYTHON", sys.executable)


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "llama-api-key"
    path.write_text(API_KEY + "\n")
    path.chmod(0o600)
    return path


def production_server(model: Path, key_file: Path, binary: Path) -> LlamaServer:
    """llama-server with the argument list the VM renders, but for the model, key path and port."""
    args = server_args(
        StackConfig(), model_path=str(model), api_key_file=str(key_file), host="127.0.0.1", port=free_port()
    )
    return LlamaServer(args, binary=binary)


@pytest.fixture(scope="module")
def llama(tiny_mtp_model_agreeing: Path, key_file: Path, llama_server_bin: Path) -> Iterator[LlamaServer]:
    with production_server(tiny_mtp_model_agreeing, key_file, llama_server_bin) as srv:
        srv.wait_healthy()
        yield srv


def idle_group(*members: FakeMember, target_size: int = 1) -> FakeGroup:
    """The group ``FakeMetadata``'s VM is a member of, as it stands until a resize changes it."""
    return FakeGroup(
        timeline=[(0.0, GroupState(members=list(members), target_size=target_size))],
        project="acme-llm-test",
        region="us-central1",
        new_member=FakeMember("qwen36-dev-x1b2", "us-central1-b"),
    )


@dataclass
class Cloud:
    group: FakeGroup
    metadata: FakeMetadata
    logging: FakeLogging
    compute_url: str
    metadata_url: str
    logging_url: str


@pytest.fixture
def cloud() -> Iterator[Cloud]:
    group, md, sink = idle_group(), FakeMetadata(), FakeLogging()
    with fake_compute_api(group) as compute, fake_metadata(md) as meta, fake_logging(sink) as logs:
        yield Cloud(group, md, sink, f"{compute}/compute/v1", meta, logs)


@dataclass
class WatcherProcess:
    proc: subprocess.Popen[str]
    started: float
    lines: list[str] = field(default_factory=list)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_exit(self, timeout: float = EXIT_TIMEOUT_S) -> int:
        return self.proc.wait(timeout=timeout)

    def running(self) -> bool:
        return self.proc.poll() is None


def start_watcher(
    cloud: Cloud,
    metrics_url: str,
    key_file: Path | None,
    tmp_path: Path,
    *,
    idle_s: float,
    poll_s: float = 0.1,
    stop_attempts: int = 3,
    retry_pause_s: float = 0.2,
) -> WatcherProcess:
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("6b1c0f4e-4d55-4a3c-9f0e-0d1a2b3c4d5e\n")
    argv = [
        # -E -s -S: no PYTHONPATH, no site-packages: the watcher runs on the standard library and
        # vm_agent.py from its own directory, as on the VM (-I would drop that directory too).
        VM_PYTHON, "-E", "-s", "-S", str(WATCHER),
        "--metrics-url", metrics_url,
        "--idle-minutes", repr(idle_s / 60),
        "--poll-seconds", repr(poll_s),
        "--report-interval-seconds", "0.5",
        "--stop-attempts", str(stop_attempts),
        "--retry-pause-seconds", repr(retry_pause_s),
        "--metadata-url", cloud.metadata_url,
        "--compute-url", cloud.compute_url,
        "--logging-url", cloud.logging_url,
        "--boot-id-file", str(boot_id),
    ]  # fmt: skip
    if key_file is not None:
        argv += ["--key-file", str(key_file)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watcher = WatcherProcess(proc, time.monotonic())
    threading.Thread(target=watcher._pump, daemon=True).start()
    return watcher


@pytest.fixture
def watchers() -> Iterator[list[WatcherProcess]]:
    """Collects the watchers a test starts and kills any still running at its end."""
    started: list[WatcherProcess] = []
    yield started
    for w in started:
        if w.running():
            w.proc.terminate()
            w.proc.wait(timeout=EXIT_TIMEOUT_S)


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
