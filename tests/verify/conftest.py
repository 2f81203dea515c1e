"""One world for every ``qwen36 verify`` test of this folder: the real door (``python -m door``) in
front of the real pinned llama-server on loopback, the fake Compute API as the group (a resize to 0
stops the server, to 1 starts it: tests/door/conftest.py's member), the GCS emulator with the
bucket, Cloud Logging's entries.list (logging_fake.py), and a stub ``pulumi`` on PATH
(pulumi_stub.py) in a project folder with its own HOME.

Each test sets the stage it needs (``World.stage``): the group running or at 0, the member's boot
report and serial console, the verdict, the log entries, the stack's secrets provider and what a
preview proposes; the door and the servers stay up for the module.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from gcp_storage_emulator.server import create_server

from infra import boot_protocol
from infra.config import StackConfig
from infra.server_args import server_args
from tests.boot.world import create_bucket
from tests.compute_fake.group import FakeGroup, FakeMember, GroupState
from tests.compute_fake.server import fake_compute_api
from tests.door.conftest import ALIAS, API_KEY, GROUP, PROJECT, REGION, VM_ACCOUNT, Member, start_door
from tests.door.google_fakes import FakeGoogle, Signer, fake_google
from tests.harness import models
from tests.harness.server import free_port
from tests.idle.vm_fakes import FakeMetadata, fake_metadata
from tests.verify.logging_fake import FakeLogging, fake_logging

REPO = Path(__file__).resolve().parents[2]
STUB = Path(__file__).with_name("pulumi_stub.py")
MODEL_OBJECT = "models/unsloth/Qwen3.6-35B-A3B-GGUF/Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf"
KMS = "gcpkms://projects/acme-llm-test/locations/global/keyRings/qwen36/cryptoKeys/state"
READY = (
    "llama-server healthy 92 s after boot; fetch-from=gcs fetch-mb-s=1692.3 fetch-slices=32 fetch-s=13.0 "
    "load-s=6.5 ready-s=92.4; flags=mtp2/fusion-on/gpu-sampling verdict={verdict} calibrate-s={calibrate} "
    "decode-tps=96.4 acceptance=0.8120"
)


def journal(*lines: str) -> str:
    """Serial-console lines as GCE shows a startup script's output (each line of the script prefixed,
    https://cloud.google.com/compute/docs/instances/startup-scripts/linux#viewing-output), in
    startup/lib.sh's ``log`` and ``phase_report`` format (``<utc> qwen36: ...``)."""
    prefix = "Dec  1 09:00:00 qwen36-dev-x1b2 google_metadata_script_runner[812]: startup-script: "
    return "".join(f"{prefix}2026-12-01T09:00:00Z qwen36: {line}\n" for line in lines)


ECC_REBOOT = journal(
    "phase=driver GPU visible: NVIDIA L4, driver 580.95.05",
    "phase=ecc ECC disabled for the next boot on GPU-1b2c; rebooting",
    "ECC reboot path: from the reboot request to this boot's ECC check took 71 s",
    "phase=ecc ECC Disabled on GPU-1b2c",
)
ECC_RESET = journal("phase=ecc ECC disabled on GPU-1b2c by a GPU reset in 9 s, no reboot")


def ready_report(boot_id: str, when: datetime, *, verdict: str = "verdict", calibrate: int = 0) -> str:
    detail = READY.format(verdict=verdict, calibrate=calibrate)
    return boot_protocol.format_report(boot_protocol.Report("ready", when, boot_id, detail))


def verdict_doc(writer: str) -> dict[str, Any]:
    """A verdict as startup/calibrate.py writes it (``Result.verdict``), trimmed to what is read."""
    return {
        "schema": 1,
        "key": {
            "llama_cpp_build": 11434,
            "model_sha256": "0" * 64,
            "gpu_name": "NVIDIA L4",
            "driver_version": "580.95.05",
            "ecc_mode": "Disabled",
            "ctx_size": 32768,
        },
        "date": "2026-12-01T09:01:30Z",
        "writer": writer,
        "winner": {"name": "mtp2/fusion-on/gpu-sampling", "tok_s": 96.4, "acceptance": 0.812},
        "candidates": [],
        "stale": None,
        "others": [],
    }


@dataclass
class World:
    group: FakeGroup
    member: Member
    logging: FakeLogging
    gcs: str
    project_dir: Path
    home: Path
    stub_dir: Path
    bin_dir: Path
    door_url: str
    compute_url: str
    logging_url: str
    plain_args: list[str]
    thinking_args: list[str]
    thinking_model: Path
    door_log: list[str]

    def stage(
        self,
        *,
        running: bool,
        current: FakeMember | None = None,
        woken: FakeMember | None = None,
        thinking: bool = True,
        secrets: str = KMS,
        preview: str | None = None,
        entries: list[dict[str, Any]] | None = None,
        verdict: dict[str, Any] | None = None,
        outputs: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
    ) -> str:
        """Sets the stage; returns the bucket (a fresh one, holding ``verdict`` if given)."""
        self.member.stop()
        self.member.args = self.thinking_args if thinking else self.plain_args
        members = [current] if running and current is not None else []
        self.group.timeline = [(0.0, GroupState(members=members, target_size=1 if running else 0))]
        self.group.new_member = woken or FakeMember(
            "qwen36-dev-w0k3", "us-central1-c", network_ip="127.0.0.1"
        )
        self.group.calls.clear()
        if running:
            self.member.start_now()
            assert self.member.server is not None
            self.member.server.wait_healthy()
        self.logging.entries = list(entries or [])
        self.logging.requests.clear()
        bucket = f"verify-{uuid.uuid4().hex[:12]}"
        create_bucket(self.gcs, bucket)
        if verdict is not None:
            import calibrate

            store = calibrate.VerdictStore(
                calibrate.Gcs(self.gcs, lambda: None), bucket, f"{MODEL_OBJECT}.verdict.json"
            )
            store.save(verdict, "0")
        document: dict[str, Any] = {"config": {"gcp:project": PROJECT, **(config or {})}}
        if secrets.startswith("gcpkms://"):
            document = {"secretsprovider": secrets, "encryptedkey": "c3R1Yg==", **document}
        else:
            document = {"encryptionsalt": "v1:stub", **document}
        import yaml

        (self.project_dir / "Pulumi.dev.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
        base = {
            "apiBaseUrl": f"{self.door_url}/v1",
            "webUiUrl": f"{self.door_url}/",
            "apiKey": API_KEY,
            "region": REGION,
            "groupName": GROUP,
            "modelBucket": bucket,
            "modelGcsUri": f"gs://{bucket}/{MODEL_OBJECT}",
            "autostop": {"project": PROJECT, "region": REGION, "group": GROUP, "size": 1, "url": None,
                         "timeoutMinutes": 20, "idleStopMinutes": 30},
        }  # fmt: skip
        (self.stub_dir / "outputs.json").write_text(json.dumps({**base, **(outputs or {})}))
        (self.stub_dir / "calls.jsonl").write_text("")
        steps = self.stub_dir / "preview.txt"
        steps.unlink(missing_ok=True)
        if preview is not None:
            steps.write_text(preview)
        return bucket

    def calls(self) -> list[dict[str, Any]]:
        text = (self.stub_dir / "calls.jsonl").read_text()
        return [json.loads(line) for line in text.splitlines()]

    def argv(self, *extra: str) -> list[str]:
        return [
            "verify", "--stack", "dev", "--project-dir", str(self.project_dir),
            "--compute-endpoint", self.compute_url, "--logging-endpoint", f"{self.logging_url}/v2",
            "--anonymous", "--poll-seconds", "0.1", *extra,
        ]  # fmt: skip


def member_vm(name: str, zone: str, report: str | None, serial: str) -> FakeMember:
    return FakeMember(
        name,
        zone,
        network_ip="127.0.0.1",
        guest_attributes={boot_protocol.KEY_REPORT: report} if report else {},
        serial=serial,
    )


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_mtp_model_agreeing: Path,
    llama_server_bin: Path,
) -> Iterator[World]:
    root = tmp_path_factory.mktemp("verify")
    key_file = root / "llama-api-key"
    key_file.write_text(API_KEY + "\n")
    thinking_model = models.tiny_mtp_model(root, agree=True, thinking=True)
    llama_port = free_port()

    def args(model: Path) -> list[str]:
        return server_args(
            StackConfig(),
            model_path=str(model),
            api_key_file=str(key_file),
            host="127.0.0.1",
            port=llama_port,
        )

    thinking_args, plain_args = args(thinking_model), args(tiny_mtp_model_agreeing)
    member = Member(thinking_args, llama_server_bin, llama_port, boot_s=0.3)
    vm = FakeMember("qwen36-dev-x1b2", "us-central1-b", network_ip="127.0.0.1")
    group = FakeGroup(
        timeline=[(0.0, GroupState(members=[], target_size=0))],
        project=PROJECT,
        region=REGION,
        name=GROUP,
        new_member=vm,
        on_resize=member.on_resize,
    )
    logging = FakeLogging()
    gcs_port = free_port()
    gcs = create_server("127.0.0.1", gcs_port, in_memory=True)
    gcs.start()
    home, project_dir, stub_dir, bin_dir = (root / n for n in ("home", "project", "stub", "bin"))
    for folder in (home / ".config" / "gcloud", project_dir, stub_dir, bin_dir):
        folder.mkdir(parents=True)
    (home / ".config" / "gcloud" / "application_default_credentials.json").write_text("{}")
    (project_dir / "Pulumi.yaml").write_text(
        "name: qwen36-mtp-l4\nruntime: python\nbackend:\n  url: file://~/.qwen36-mtp-l4/state\n"
    )
    stacks = home / ".qwen36-mtp-l4" / "state" / ".pulumi" / "stacks" / "qwen36-mtp-l4"
    stacks.mkdir(parents=True)
    (stacks / "dev.json").write_text("{}")
    wrapper = bin_dir / "pulumi"
    wrapper.write_text(f'#!/bin/sh\nVERIFY_STUB_DIR={stub_dir} exec {sys.executable} {STUB} "$@"\n')
    wrapper.chmod(0o755)
    google, metadata = FakeGoogle(signers=[Signer.new()]), FakeMetadata()
    with (
        fake_compute_api(group) as compute_url,
        fake_google(google) as google_url,
        fake_metadata(metadata) as metadata_url,
        fake_logging(logging) as logging_url,
    ):
        env = {
            "QWEN36_DOOR_API_KEY": API_KEY,
            "QWEN36_DOOR_PROJECT": PROJECT,
            "QWEN36_DOOR_REGION": REGION,
            "QWEN36_DOOR_GROUP": GROUP,
            # Straight to the server, no relay: a stopped member refuses the connection, as a deleted
            # VM's address does, and the door looks again (door/app.py _Unreachable).
            "QWEN36_DOOR_UPSTREAM_PORT": str(llama_port),
            "QWEN36_DOOR_MODEL_ALIAS": ALIAS,
            "QWEN36_DOOR_COMPUTE_URL": f"{compute_url}/compute/v1",
            "QWEN36_DOOR_METADATA_URL": metadata_url,
            "QWEN36_DOOR_MONITORING_URL": f"{google_url}/v3",
            "QWEN36_DOOR_CERTS_URL": f"{google_url}/oauth2/v3/certs",
            "QWEN36_DOOR_STOP_AUDIENCES": "https://qwen36-door-123456789012.us-central1.run.app",
            "QWEN36_DOOR_STOP_SERVICE_ACCOUNT": VM_ACCOUNT,
            "QWEN36_DOOR_HEALTH_POLL_S": "0.1",
            "QWEN36_DOOR_HEARTBEAT_S": "0.3",
            "QWEN36_DOOR_STREAM_GRACE_S": "0.2",
            "QWEN36_DOOR_PROBE_CACHE_S": "0.3",
            "QWEN36_DOOR_METRICS_INTERVAL_S": "0.5",
            "QWEN36_DOOR_WAKE_BOUND_S": "30",
            "QWEN36_DOOR_RETRY_AFTER_S": "7",
        }
        door = start_door(env)
        try:
            yield World(
                group, member, logging, f"http://127.0.0.1:{gcs_port}", project_dir, home, stub_dir, bin_dir,
                door.url, compute_url, logging_url, plain_args, thinking_args, thinking_model, door.log,
            )  # fmt: skip
        finally:
            door.proc.terminate()
            try:
                door.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                door.proc.kill()
            member.close()
            gcs.stop()


@pytest.fixture
def env(world: World, monkeypatch: pytest.MonkeyPatch) -> World:
    """The test's shell: the stub first on PATH, the world's HOME, the emulator for GCS, and a
    passphrase a fresh shell would not have."""
    monkeypatch.setenv("PATH", f"{world.bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("HOME", str(world.home))
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", world.gcs)
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "in-this-shell-only")
    monkeypatch.setenv("XDG_CACHE_HOME", str(world.home / ".cache"))
    monkeypatch.delenv("QWEN36_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    return world
