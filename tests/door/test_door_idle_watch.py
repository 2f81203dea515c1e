"""The idle stop end to end with a door: the VM's real watcher (startup/idle_watch.py, its own
process, standard library only) reads the real llama-server's /metrics, and when idle asks the real
door, with an ID token from its metadata server; the door verifies it and resizes the group. The
watcher itself calls no Compute method (with a door its account has none). A request the door is
still serving (here a UI poll the relay holds back, which llama-server does not count as use) gets
the stop refused, and the watcher's window starts again."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import httpx
import pytest

from tests.door.conftest import AUTH, VM_ACCOUNT, World, WorldFactory, wait_for
from tests.door.google_fakes import Signer
from tests.idle.conftest import VM_PYTHON, WATCHER
from tests.idle.vm_fakes import FakeLogging, FakeMetadata, fake_logging, fake_metadata

pytestmark = pytest.mark.llama

AUDIENCE = "https://qwen36-door-123456789012.us-central1.run.app"
IDLE_S = 1.0
EXIT_TIMEOUT_S = 30.0


def _watch(
    world: World, key_file: Path, metadata_url: str, logging_url: str, tmp_path: Path
) -> subprocess.Popen[str]:
    assert world.member.server is not None
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("6b1c0f4e-4d55-4a3c-9f0e-0d1a2b3c4d5e\n")
    argv = [
        VM_PYTHON, "-E", "-s", "-S", str(WATCHER),
        "--metrics-url", f"{world.member.server.base_url}/metrics", "--key-file", str(key_file),
        "--idle-minutes", repr(IDLE_S / 60), "--poll-seconds", "0.1", "--report-interval-seconds", "0.5",
        "--stop-attempts", "2", "--retry-pause-seconds", "0.2",
        "--metadata-url", metadata_url, "--compute-url", "http://127.0.0.1:9/compute/v1",
        "--logging-url", logging_url, "--boot-id-file", str(boot_id),
        "--door-url", world.url, "--door-audience", AUDIENCE,
    ]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize("busy", [False, True])
def test_the_watcher_asks_the_door_which_stops_the_group(
    make_world: WorldFactory, signer: Signer, door_key_file: Path, tmp_path: Path, busy: bool
) -> None:
    world = make_world(size=1)
    vm = FakeMetadata(identity=lambda audience: signer.token(audience=audience, email=VM_ACCOUNT))
    sink = FakeLogging()
    poll: list[int] = []
    if busy:
        # A UI poll the relay holds for 3 s: the door serves it, llama-server counts it as no use.
        world.relay.response_delay_s = 3.0
        threading.Thread(
            target=lambda: poll.append(httpx.get(f"{world.url}/props", headers=AUTH, timeout=30).status_code),
            daemon=True,
        ).start()
        wait_for(
            lambda: httpx.get(f"{world.url}/health", headers=AUTH).json()["busy"] == 1, 5, "the held poll"
        )
    with fake_metadata(vm) as metadata_url, fake_logging(sink) as logging_url:
        watcher = _watch(world, door_key_file, metadata_url, logging_url, tmp_path)
        try:
            output, _ = watcher.communicate(timeout=EXIT_TIMEOUT_S)
        finally:
            if watcher.poll() is None:
                watcher.kill()
    assert watcher.returncode == 0, output
    assert "the door resized group qwen36-dev to 0" in output
    (resize,) = world.group.resizes()
    assert resize.query["size"] == ["0"]
    assert resize.headers.get("User-Agent", "").startswith("python-httpx"), (
        "the door made it, not the watcher"
    )
    assert set(vm.audiences) == {AUDIENCE}
    # Its Compute URL is a closed port: any Compute call would have shown up as a failure here.
    assert "could not be read" not in output and "stop attempt" not in output, output
    (entry,) = sink.entries
    assert entry["jsonPayload"]["via"] == "door"
    if busy:
        assert "the door refused" in output and "the idle window starts again" in output, output
        assert poll == [200]
    else:
        assert "the door refused" not in output
