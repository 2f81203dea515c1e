"""scripts/deploy.sh runs the preflight before anything else touches Pulumi, and stops on a blocker.

The script runs for real under bash, in a copy of the repo's layout; ``pulumi`` and ``gcloud`` are
stubs on PATH that log their arguments, and the venv's python is a stub standing for the check (whose
own behaviour tests/check/test_check.py shows): it logs its arguments and exits with the code asked.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from qwen36.check import pulumi_version
from qwen36.errors import Exit

ROOT = Path(__file__).resolve().parents[2]
LOGGER = '#!/usr/bin/env bash\nprintf "%s\\n" "$(basename "$0") $*" >>"$CALLS"\n'
# `pulumi version` prints the version alone (tests/deploy/pulumi_stub.py); $PULUMI_VERSION overrides it.
VERSION = (
    '#!/usr/bin/env bash\nif [[ "$1" == version ]]; then echo "${PULUMI_VERSION:-v3.210.0}"; exit 0; fi\n'
)


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
        bin_dir / "pulumi": VERSION
        + LOGGER.removeprefix("#!/usr/bin/env bash\n")
        + 'if [[ "$1 $2" == "config get" ]]; then echo acme-llm; fi\n'
        + 'if [[ "$1" == up ]]; then exit "${UP_EXIT:-0}"; fi\n',
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


def deploy(repo: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    calls = repo.parent / "calls.log"
    calls.write_text("")
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "deploy.sh"), *args, "dev"],
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


def closing_line(done: subprocess.CompletedProcess[str]) -> str:
    (line,) = done.stderr.splitlines()
    assert " [deploy] error: " in line, line
    return line.split(" [deploy] error: ", 1)[1]


def test_a_check_that_could_not_read_everything_stops_the_deploy(repo: Path) -> None:
    done, calls = deploy(repo, CHECK_EXIT="12")
    assert done.returncode == Exit.UNCHECKED
    assert closing_line(done) == (
        "the preflight could not read every fact (the UNREAD lines above), so it cannot say the deploy "
        "would pass; fix them and rerun, or deploy anyway: scripts/deploy.sh --skip-check dev"
    )
    assert not any(call.startswith("pulumi") and "version" not in call for call in calls)


def test_skip_check_by_name_deploys_anyway(repo: Path) -> None:
    done, calls = deploy(repo, "--skip-check", CHECK_EXIT="12")
    assert done.returncode == 0, done.stderr
    assert not any(call.startswith("python") for call in calls)
    assert "[deploy] skipping the preflight (--skip-check)" in done.stdout
    assert calls[-1] == "pulumi up --yes --policy-pack policy"


@pytest.mark.parametrize("value", ["0", "", "false"])
def test_qwen36_skip_check_0_runs_the_check(repo: Path, value: str) -> None:
    done, calls = deploy(repo, CHECK_EXIT="1", QWEN36_SKIP_CHECK=value)
    assert done.returncode == 1
    assert "python -m qwen36 check --stack dev" in calls


def test_a_skip_setting_that_is_neither_1_nor_0_is_a_usage_error(repo: Path) -> None:
    done, calls = deploy(repo, QWEN36_SKIP_CHECK="maybe")
    assert (done.returncode, closing_line(done)) == (Exit.USAGE, "QWEN36_SKIP_CHECK='maybe': give 1 or 0")
    assert calls == []


@pytest.mark.parametrize("code", [Exit.MISSING_TOOL, Exit.NOT_FOUND, Exit.UNREACHABLE])
def test_the_checks_own_code_ends_the_deploy(repo: Path, code: int) -> None:
    done, _ = deploy(repo, CHECK_EXIT=str(int(code)))
    assert done.returncode == code
    assert closing_line(done) == "the preflight stopped the deploy (its error above); fix it, then rerun"


TOO_OLD = (
    "the Pulumi CLI is {v}; the deploy needs v3.174.0 or later (import-then-update of the kept VPC, subnet "
    "and bucket): https://www.pulumi.com/docs/install/"
)


@pytest.mark.parametrize(
    ("version", "line"),
    [
        ("v3.173.9", TOO_OLD.format(v="v3.173.9")),
        ("v2.999.0", TOO_OLD.format(v="v2.999.0")),
        (
            "warning: junk",
            "`pulumi version` printed 'warning: junk', not a version; reinstall the Pulumi CLI: "
            "https://www.pulumi.com/docs/install/",
        ),
    ],
)
def test_a_pulumi_older_than_the_minimum_stops_before_anything(repo: Path, version: str, line: str) -> None:
    done, calls = deploy(repo, PULUMI_VERSION=version)
    assert (done.returncode, closing_line(done)) == (Exit.MISSING_TOOL, line)
    assert calls == []


@pytest.mark.parametrize("version", ["v3.174.0", "v3.210.0", "v4.0.0", "v3.175.0-alpha.1746123456"])
def test_the_minimum_pulumi_and_later_deploy(repo: Path, version: str) -> None:
    done, calls = deploy(repo, PULUMI_VERSION=version, CHECK_EXIT="0")
    assert done.returncode == 0, done.stderr
    assert calls[-1] == "pulumi up --yes --policy-pack policy"


def test_deploy_sh_and_the_check_hold_the_same_minimum() -> None:
    script = (ROOT / "scripts" / "deploy.sh").read_text()
    (bound,) = re.findall(r"^PULUMI_MIN=(\S+)$", script, re.M)
    assert "v" + bound == pulumi_version.minimum()


def test_an_unusable_home_is_one_line_and_a_stop(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "a-file"
    home.write_text("")
    done, calls = deploy(repo, HOME=str(home))
    assert done.returncode == Exit.LOCAL_IO
    assert closing_line(done) == (
        f"cannot create {home}/.qwen36-mtp-l4/state for the stack's state (HOME={home} is not writable?); "
        "set HOME to a folder of yours"
    )
    assert calls == []
    done, calls = deploy(repo, HOME="")
    assert done.returncode == Exit.LOCAL_IO
    assert closing_line(done).startswith("HOME (unset) is not a folder")


def test_a_refused_gcloud_call_is_one_line_and_6(repo: Path) -> None:
    gcloud = repo.parent / "bin" / "gcloud"
    gcloud.write_text(
        LOGGER
        + 'case "$1 $2 $3" in\n'
        + '  "kms keys describe" | "kms keyrings describe") exit 1 ;;\n'
        # gcloud's answer for a missing role (the API's PERMISSION_DENIED, as gcloud prints it).
        + '  "kms keyrings create") echo "ERROR: (gcloud.kms.keyrings.create) PERMISSION_DENIED: Permission'
        " 'cloudkms.keyRings.create' denied on resource 'projects/acme-llm/locations/global' (or it may not"
        ' exist)." >&2; exit 1 ;;\n' + "esac\n"
    )
    done, calls = deploy(repo, CHECK_EXIT="0")
    assert done.returncode == Exit.DENIED
    assert closing_line(done) == (
        "creating the KMS key ring qwen36-mtp-l4 was refused (gcloud: ERROR: (gcloud.kms.keyrings.create) "
        "PERMISSION_DENIED: Permission 'cloudkms.keyRings.create' denied on resource "
        "'projects/acme-llm/locations/global' (or it may not exist).); ask for roles/cloudkms.admin and "
        "roles/serviceusage.serviceUsageAdmin on acme-llm, or have an owner run: gcloud kms keyrings create "
        "qwen36-mtp-l4 --project=acme-llm --location=global"
    )
    assert not any(call.startswith("pulumi up") for call in calls)


def test_a_failed_pulumi_up_ends_in_one_line_and_1_not_255(repo: Path) -> None:
    done, calls = deploy(repo, CHECK_EXIT="0", UP_EXIT="255")
    assert done.returncode == Exit.FAILED
    assert calls[-1] == "pulumi up --yes --policy-pack policy"
    assert closing_line(done) == (
        "`pulumi up --yes` failed (pulumi's exit 255; its errors are above); fix what they name, then rerun "
        "scripts/deploy.sh dev"
    )
