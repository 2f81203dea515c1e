"""scripts/deploy.sh runs the preflight before anything else touches Pulumi, and stops on a blocker.

The script runs for real under bash, in a copy of the repo's layout; ``pulumi`` and ``gcloud`` are
stubs on PATH that log their arguments, and the venv's python is a stub standing for the check (whose
own behaviour tests/check/test_check.py shows): it logs its arguments and exits with the code asked.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOGGER = '#!/usr/bin/env bash\nprintf "%s\\n" "$(basename "$0") $*" >>"$CALLS"\n'


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "deploy.sh", repo / "scripts" / "deploy.sh")
    shutil.copy(ROOT / "Pulumi.dev.yaml", repo / "Pulumi.dev.yaml")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stubs = {
        bin_dir / "gcloud": LOGGER,
        # `config get gcp:project` answers, so the script needs nothing from gcloud's config.
        bin_dir / "pulumi": LOGGER + 'if [[ "$1 $2" == "config get" ]]; then echo acme-llm; fi\n',
        repo / ".venv" / "bin" / "python": LOGGER
        + 'echo "BLOCK quota GPUS_ALL_REGIONS: limit 0 (the stub check)"\nexit "${CHECK_EXIT:-0}"\n',
        # The policy pack's venv, there already: the script then makes none.
        repo / "policy" / ".venv" / "bin" / "python": LOGGER,
    }
    for path, text in stubs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755)
    return repo


def deploy(repo: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    calls = repo.parent / "calls.log"
    calls.write_text("")
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "deploy.sh"), "dev"],
        env={
            "PATH": f"{repo.parent / 'bin'}:/usr/bin:/bin",
            "HOME": str(repo.parent / "home"),
            "CALLS": str(calls),
            "QWEN36_STATE_DIR": str(repo.parent / "state"),
            # The stub venv stands for the installed one (tests/test_console_script.py installs it).
            "QWEN36_SKIP_CLI": "1",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, calls.read_text().splitlines()


def test_a_blocker_stops_the_deploy_before_any_pulumi_command(repo: Path) -> None:
    done, calls = deploy(repo, CHECK_EXIT="1")
    assert done.returncode == 1
    assert calls == [
        "gcloud auth application-default print-access-token",
        "python -m qwen36 check --stack dev",
    ]
    assert "BLOCK quota GPUS_ALL_REGIONS: limit 0 (the stub check)" in done.stdout
    assert done.stderr.rstrip().endswith(
        "[deploy] error: the preflight found what would stop the deploy (the BLOCK lines above); fix them, "
        "then rerun"
    )


def test_a_clear_check_goes_on_to_pulumi_up(repo: Path) -> None:
    done, calls = deploy(repo, CHECK_EXIT="0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls[:2] == [
        "gcloud auth application-default print-access-token",
        "python -m qwen36 check --stack dev",
    ]
    assert calls[-1] == "pulumi up --yes --policy-pack policy"
    assert not any(call.startswith("pulumi") for call in calls[:2])


def test_the_check_can_be_skipped_on_purpose(repo: Path) -> None:
    done, calls = deploy(repo, CHECK_EXIT="1", QWEN36_SKIP_CHECK="1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not any(call.startswith("python") for call in calls)
    assert calls[-1] == "pulumi up --yes --policy-pack policy"


def test_without_the_venv_the_check_runs_on_python3(repo: Path) -> None:
    python3 = repo.parent / "bin" / "python3"
    shutil.move(repo / ".venv" / "bin" / "python", python3)
    shutil.rmtree(repo / ".venv")
    done, calls = deploy(repo, CHECK_EXIT="1")
    assert done.returncode == 1
    assert calls[-1] == "python3 -m qwen36 check --stack dev"
