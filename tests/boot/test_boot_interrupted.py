"""A boot cut off at any step (power loss, preemption) and booted again converges: one serving
container, one checked model file in RAM, no second ECC reboot, nothing partial left behind."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pytest

from tests.boot.sandbox import Sandbox
from tests.boot.world import MODEL_FILE, Model, SandboxFactory
from tests.cache.hf_server import HfServer

MAX_ARMED_BOOTS = 3
MAX_RECOVERY_BOOTS = 4
STALL_AFTER_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Cut:
    name: str
    phase: str | None = None
    call: str | None = None
    hub_stall: bool = False
    cached: bool = True


CUTS = [
    Cut("boot-start", phase="boot"),
    Cut("after-ecc-off-before-marker", call="nvidia-smi -e 0"),
    Cut("after-ecc-marker-before-reboot", phase="ecc"),
    Cut("prepare-start", phase="prepare"),
    Cut("after-docker-install", call="apt-get -o DPkg::Lock::Timeout=600 -y -q install docker.io"),
    Cut("after-image-pull", call="docker pull"),
    Cut("model-start", phase="model"),
    Cut("mid-huggingface-download", hub_stall=True, cached=False),
    Cut("api-key-start", phase="api-key"),
    Cut("after-secret-read", call="gcloud secrets"),
    Cut("after-container-created", call="docker run"),
    Cut("at-ready-before-self-staging", phase="ready", cached=False),
]


def _armed_boots(sandbox: Sandbox, cut: Cut, hub: HfServer) -> None:
    """Boot with the cut armed until one boot is actually cut (some points come only on boot 2)."""
    for _ in range(MAX_ARMED_BOOTS):
        if cut.hub_stall:
            hub.stall_after(STALL_AFTER_BYTES)
            try:
                result = sandbox.boot(kill_when=hub.stalled.is_set)
            finally:
                hub.release()
        else:
            result = sandbox.boot(kill_at_phase=cut.phase, kill_at_call=cut.call)
        if result.killed:
            assert result.phases[-1:] != ["failed"], result.log
            return
    raise AssertionError(f"no boot reached {cut}")


@pytest.mark.slow
@pytest.mark.parametrize("cut", CUTS, ids=[c.name for c in CUTS])
def test_boot_cut_off_then_booted_again_converges(
    make_sandbox: SandboxFactory, model: Model, hub: HfServer, cut: Cut
) -> None:
    sandbox = make_sandbox(cached=cut.cached)
    _armed_boots(sandbox, cut, hub)
    if cut.hub_stall:
        assert any(sandbox.ram_dir.rglob("*.incomplete")), "the cut came mid-download"
    for _ in range(MAX_RECOVERY_BOOTS):
        result = sandbox.boot()
        if result.rc == 0 and not result.rebooted:
            break
    assert result.rc == 0 and result.phases[-1] == "ready", result.log
    assert sandbox.health() == 200

    assert [p.name for p in sandbox.ram_files()] == [".sha256-checked", MODEL_FILE]
    assert hashlib.sha256((sandbox.ram_dir / MODEL_FILE).read_bytes()).hexdigest() == model.sha256
    assert not [p for p in sandbox.model_files() if p.name.endswith(".partial")]
    assert list(sandbox.containers()) == ["llama-server"]
    assert sandbox.containers()["llama-server"]["running"]
    assert {e["sha256"] for e in sandbox.loads() if e["event"] == "healthy"} == {model.sha256}
    logs = "".join(b.log for b in sandbox.boots)
    assert "is already in use" not in logs, "no second container with the same name was attempted"
    assert sum(len(b.commands("reboot")) for b in sandbox.boots) <= 1, "ECC costs one reboot at most"
    if not cut.cached:
        assert "self-staged gs://" in logs

    # And the boot after that takes the fast path: the cache into RAM, no hub, no reboot, no pull.
    hub_before = len(hub.cdn_requests())
    quiet = sandbox.boot()
    assert quiet.rc == 0 and quiet.phases[-1] == "ready", quiet.log
    assert not [a for a in quiet.commands("docker") if a[0] == "pull"] and not quiet.commands("reboot")
    assert any(d.startswith("fetched from the GCS cache") for d in quiet.details("model")), quiet.log
    assert len(hub.cdn_requests()) == hub_before
