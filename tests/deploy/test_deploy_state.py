"""What scripts/deploy.sh sets up outlives it: in a fresh shell, the README's next commands reach the
same backend and stack and can open its secrets, with no variable exported by hand.

The CLIs are stand-ins at the machine's boundary (tests/deploy/pulumi_stub.py models Pulumi's
documented backend, stack-selection and secrets rules, each with its link; gcloud_stub.sh answers
the KMS and auth calls); the script itself runs for real under bash.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
STUBS = Path(__file__).resolve().parent
PROJECT_ID = "acme-llm"
KMS = f"gcpkms://projects/{PROJECT_ID}/locations/global/keyRings/qwen36-mtp-l4/cryptoKeys/pulumi-secrets"
# The commands the README gives after a deploy (read the key, the URL, change a setting, stop the bill).
POST_DEPLOY_COMMANDS = (
    "pulumi stack output apiKey --show-secrets",
    "pulumi stack output apiBaseUrl",
    "pulumi config set idleStopMinutes 60",
    "pulumi destroy --yes",
)


class World:
    def __init__(self, tmp: Path) -> None:
        self.home = tmp / "home"
        self.repo = tmp / "repo"
        self.bin = tmp / "bin"
        self.log = tmp / "pulumi.jsonl"
        for folder in (self.home / ".config" / "gcloud", self.repo / "scripts", self.bin):
            folder.mkdir(parents=True)
        (self.home / ".config" / "gcloud" / "application_default_credentials.json").write_text("{}")
        for name in ("Pulumi.yaml", "Pulumi.dev.yaml", "scripts/deploy.sh"):
            shutil.copy(ROOT / name, self.repo / name)
        (self.bin / "pulumi").write_text(
            f'#!/bin/sh\nexec {sys.executable} {STUBS / "pulumi_stub.py"} "$@"\n', encoding="utf-8"
        )
        (self.bin / "pulumi").chmod(0o755)
        (self.bin / "gcloud").symlink_to(STUBS / "gcloud_stub.sh")
        # The policy pack's venv, there already (deploy.sh would make it with pip otherwise).
        pack_python = self.repo / "policy" / ".venv" / "bin" / "python"
        pack_python.parent.mkdir(parents=True)
        pack_python.write_text("#!/bin/sh\n")
        pack_python.chmod(0o755)

    def env(self) -> dict[str, str]:
        """A fresh login environment: nothing but what any new terminal has."""
        return {
            "HOME": str(self.home),
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "PULUMI_STUB_LOG": str(self.log),
            "GCLOUD_STUB_STATE": str(self.home / ".gcloud-stub"),
            "GCLOUD_STUB_PROJECT": PROJECT_ID,
            "GCLOUD_STUB_LOG": str(self.home / "gcloud.log"),
            # The preflight has its own tests (tests/check), and so has the command's install
            # (tests/test_console_script.py); here only the state matters.
            "QWEN36_SKIP_CHECK": "1",
            "QWEN36_SKIP_CLI": "1",
        }

    def shell(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=self.repo,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def calls(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def stack_config(self) -> dict:
        return yaml.safe_load((self.repo / "Pulumi.dev.yaml").read_text())


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_a_fresh_shell_reaches_the_deployed_stack_and_its_secrets(world: World) -> None:
    deploy = world.shell("bash scripts/deploy.sh dev")
    assert deploy.returncode == 0, deploy.stderr
    up = world.calls()[-1]
    assert up["argv"][:2] == ["up", "--yes"] and up["rc"] == 0
    assert world.stack_config()["secretsprovider"] == KMS
    assert world.stack_config()["config"]["gcp:project"] == PROJECT_ID

    start = len(world.calls())
    for command in POST_DEPLOY_COMMANDS:
        done = world.shell(command)  # each in its own new shell
        assert done.returncode == 0, (command, done.stderr)
    later = world.calls()[start:]
    assert len(later) == len(POST_DEPLOY_COMMANDS)
    for call in later:
        assert call["backend"] == up["backend"] == "file://~/.qwen36-mtp-l4/state"
        assert call["stack"] == "dev"
    assert {call.get("secrets") for call in later} - {None} == {"gcpkms"}


def test_a_passphrase_stack_is_what_a_fresh_shell_cannot_open(world: World) -> None:
    """The control: the failure the issue saw (a passphrase exported only inside the script)."""
    init = world.shell("PULUMI_CONFIG_PASSPHRASE=x pulumi stack init dev")
    assert init.returncode == 0, init.stderr
    done = world.shell("pulumi stack output apiKey --show-secrets")
    assert done.returncode != 0
    assert "passphrase must be set" in done.stderr


def test_a_stack_of_the_earlier_script_moves_to_the_kms_key(world: World) -> None:
    passphrase = world.home / ".qwen36-mtp-l4" / "passphrase"
    passphrase.parent.mkdir(parents=True)
    passphrase.write_text("old secret\n")
    made = world.shell(f"PULUMI_CONFIG_PASSPHRASE_FILE={passphrase} pulumi stack init dev")
    assert made.returncode == 0, made.stderr
    assert "encryptionsalt" in world.stack_config()

    deploy = world.shell("bash scripts/deploy.sh dev")
    assert deploy.returncode == 0, deploy.stderr
    assert "moving stack dev's secrets" in deploy.stdout
    assert world.stack_config()["secretsprovider"] == KMS
    assert "encryptionsalt" not in world.stack_config()
    assert world.shell("pulumi stack output apiKey --show-secrets").returncode == 0


def test_without_a_project_the_script_says_which_command_sets_one(world: World) -> None:
    env = world.env() | {"GCLOUD_STUB_PROJECT": ""}
    done = subprocess.run(
        ["bash", "scripts/deploy.sh", "dev"],
        cwd=world.repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3  # qwen36/errors.py Exit.CONFIG
    assert "gcloud config set project" in done.stderr


def test_the_kms_key_is_made_once(world: World) -> None:
    for _ in range(2):
        done = world.shell("bash scripts/deploy.sh dev")
        assert done.returncode == 0, done.stderr
    calls = (world.home / "gcloud.log").read_text().splitlines()
    assert sum(call.startswith("kms keys create pulumi-secrets") for call in calls) == 1
