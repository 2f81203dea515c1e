"""The door as it runs on Cloud Run, on loopback: ``python -m door`` as its own process, in front of
the real pinned llama-server (the product's arguments, the tiny agreeing MTP model: greedy "aaaa"),
with the fake Compute API (tests/compute_fake) as the group, the idle tests' fake metadata server,
and fake Monitoring and signing keys (google_fakes).

The "member" is the llama-server process: a resize to 1 starts it after ``boot_s`` (the cold start,
compressed), a resize to 0 stops it, as the group creates and deletes the VM. The door reaches it at
the member's ``networkIP`` (127.0.0.1) through a relay (relay.py) that counts upstream requests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from infra.config import StackConfig
from infra.server_args import server_args
from tests.compute_fake.group import FakeGroup, FakeMember, GroupState
from tests.compute_fake.server import fake_compute_api
from tests.door.google_fakes import VM_ACCOUNT_ID, FakeGoogle, Signer, fake_google
from tests.door.relay import Relay
from tests.harness.server import LlamaServer, free_port
from tests.idle.vm_fakes import FakeMetadata, fake_metadata

REPO = Path(__file__).resolve().parents[2]
API_KEY = "door-test-key-0123456789"
WRONG_KEY = "door-test-key-0123456788"
ALIAS = StackConfig().alias
PROJECT, REGION, GROUP = "acme-llm-test", "us-central1", "qwen36-dev"
VM_ACCOUNT = "qwen36-dev-vm@acme-llm-test.iam.gserviceaccount.com"
START_TIMEOUT_S = 20.0
AUTH = {"Authorization": f"Bearer {API_KEY}"}


def ask(max_tokens: int = 8, *, stream: bool = False) -> dict[str, object]:
    return {
        "model": ALIAS,
        "messages": [{"role": "user", "content": "Say a"}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
    }


def streamed_text(lines: Iterable[str]) -> str:
    """The content of an OpenAI-style SSE stream's chunks (comments and [DONE] skipped)."""
    out = []
    for line in lines:
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices") or []:
                out.append((choice.get("delta") or {}).get("content") or "")
    return "".join(out)


@dataclass
class Member:
    """The llama-server a resize brings up (after ``boot_s``) and takes down."""

    args: list[str]
    binary: Path
    port: int
    boot_s: float = 0.0
    server: LlamaServer | None = None
    starts: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _timers: list[threading.Timer] = field(default_factory=list)

    def start_now(self) -> None:
        with self._lock:
            if self.server is not None and self.server.exit_code() is None:
                return
            self.server = LlamaServer(self.args, binary=self.binary, port=self.port).start()
            self.starts += 1

    def on_resize(self, size: int) -> None:
        if size >= 1:
            timer = threading.Timer(self.boot_s, self.start_now)
            self._timers.append(timer)
            timer.start()
        else:
            self.stop()

    def stop(self) -> None:
        with self._lock:
            if self.server is not None:
                self.server.__exit__(None, None, None)
                self.server = None

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self.stop()


@dataclass
class DoorProcess:
    proc: subprocess.Popen[str]
    url: str
    log: list[str] = field(default_factory=list)

    def pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line.rstrip("\n"))

    def recent(self) -> dict[str, object]:
        reply = httpx.get(f"{self.url}/_qwen36/recent", headers=AUTH, timeout=10)
        reply.raise_for_status()
        body: dict[str, object] = reply.json()
        return body


@dataclass
class World:
    group: FakeGroup
    member: Member
    relay: Relay
    google: FakeGoogle
    metadata: FakeMetadata
    signer: Signer
    door: DoorProcess

    @property
    def url(self) -> str:
        return self.door.url

    def compute_calls(self) -> list[str]:
        return [f"{c.method} {c.path}" for c in self.group.calls]


def start_door(env: dict[str, str], command: list[str] | None = None, cwd: Path | None = None) -> DoorProcess:
    """``python -m door`` from the repo, or ``command`` in ``cwd`` (the extracted archive)."""
    port = free_port()
    full = {**os.environ, **env, "PORT": str(port), "QWEN36_DOOR_HOST": "127.0.0.1"}
    if command is None:
        full["PYTHONPATH"] = str(REPO)
    else:
        full.pop("PYTHONPATH", None)
    proc = subprocess.Popen(
        command or [sys.executable, "-m", "door"],
        cwd=cwd or REPO,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    door = DoorProcess(proc, f"http://127.0.0.1:{port}")
    threading.Thread(target=door.pump, daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the door exited {proc.returncode}:\n" + "\n".join(door.log))
        try:
            if httpx.get(f"{door.url}/health", timeout=1).status_code == 200:
                return door
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError("the door did not answer /health:\n" + "\n".join(door.log))


@pytest.fixture(scope="session")
def signer() -> Signer:
    return Signer.new()


@pytest.fixture(scope="module")
def door_key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("door-key") / "llama-api-key"
    path.write_text(API_KEY + "\n")
    return path


WorldFactory = Callable[..., World]


@pytest.fixture
def make_world(
    tiny_mtp_model_agreeing: Path, door_key_file: Path, llama_server_bin: Path, signer: Signer
) -> Iterator[WorldFactory]:
    """``make_world(size=0, boot_s=1.0, **door_env)``: the group at ``size`` (at 1 the member is up
    before the door starts), the door started with the settings the test names; ``server_flags`` are
    added to llama-server's product arguments, ``model`` replaces the tiny agreeing model."""
    stack: list[Callable[[], None]] = []

    def make(
        size: int = 0,
        boot_s: float = 0.5,
        command: list[str] | None = None,
        cwd: Path | None = None,
        binary: Path | None = None,
        server_flags: tuple[str, ...] = (),
        model: Path | None = None,
        **door_env: str,
    ) -> World:
        llama_port = free_port()
        args = server_args(
            StackConfig(),
            model_path=str(model or tiny_mtp_model_agreeing),
            api_key_file=str(door_key_file),
            host="127.0.0.1",
            port=llama_port,
        ) + list(server_flags)
        member = Member(args, binary or llama_server_bin, llama_port, boot_s)
        stack.append(member.close)
        relay = Relay(llama_port)
        stack.append(relay.close)
        vm = FakeMember("qwen36-dev-x1b2", "us-central1-b", network_ip="127.0.0.1")
        group = FakeGroup(
            timeline=[(0.0, GroupState(members=[vm] if size else [], target_size=size))],
            project=PROJECT,
            region=REGION,
            name=GROUP,
            new_member=vm,
            on_resize=member.on_resize,
        )
        if size:
            member.start_now()
            assert member.server is not None
            member.server.wait_healthy()
        google = FakeGoogle(signers=[signer])
        metadata = FakeMetadata()
        compute_cm, google_cm, meta_cm = fake_compute_api(group), fake_google(google), fake_metadata(metadata)
        compute_url, google_url, metadata_url = (
            compute_cm.__enter__(),
            google_cm.__enter__(),
            meta_cm.__enter__(),
        )
        for cm in (compute_cm, google_cm, meta_cm):
            stack.append(lambda cm=cm: cm.__exit__(None, None, None))
        env = {
            "QWEN36_DOOR_API_KEY": API_KEY,
            "QWEN36_DOOR_PROJECT": PROJECT,
            "QWEN36_DOOR_REGION": REGION,
            "QWEN36_DOOR_GROUP": GROUP,
            "QWEN36_DOOR_UPSTREAM_PORT": str(relay.port),
            "QWEN36_DOOR_MODEL_ALIAS": ALIAS,
            "QWEN36_DOOR_COMPUTE_URL": f"{compute_url}/compute/v1",
            "QWEN36_DOOR_METADATA_URL": metadata_url,
            "QWEN36_DOOR_MONITORING_URL": f"{google_url}/v3",
            "QWEN36_DOOR_CERTS_URL": f"{google_url}/oauth2/v3/certs",
            "QWEN36_DOOR_SECRET_MANAGER_URL": f"{google_url}/v1",
            "QWEN36_DOOR_STOP_AUDIENCES": "https://qwen36-door-123456789012.us-central1.run.app",
            "QWEN36_DOOR_STOP_SERVICE_ACCOUNT": VM_ACCOUNT,
            "QWEN36_DOOR_STOP_SERVICE_ACCOUNT_ID": VM_ACCOUNT_ID,
            "QWEN36_DOOR_HEALTH_POLL_S": "0.1",
            "QWEN36_DOOR_HEARTBEAT_S": "0.3",
            "QWEN36_DOOR_STREAM_GRACE_S": "0.2",
            "QWEN36_DOOR_PROBE_CACHE_S": "0.3",
            "QWEN36_DOOR_METRICS_INTERVAL_S": "0.5",
            "QWEN36_DOOR_WAKE_BOUND_S": "30",
            "QWEN36_DOOR_RETRY_AFTER_S": "7",
            **{f"QWEN36_DOOR_{k.upper()}": v for k, v in door_env.items()},
        }
        door = start_door(env, command, cwd)

        def stop_door() -> None:
            door.proc.terminate()
            try:
                door.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                door.proc.kill()
                door.proc.wait(timeout=5)

        stack.append(stop_door)
        return World(group, member, relay, google, metadata, signer, door)

    yield make
    for close in reversed(stack):
        close()


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
