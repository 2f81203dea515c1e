"""The ``qwen36`` command works as pasted from any shell: pyproject.toml declares it, and
scripts/install_cli.sh (run by scripts/deploy.sh) installs it into the project's venv and links it
from a directory on PATH. Installed here into a throwaway venv, offline, and run from elsewhere."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from qwen36.__main__ import build_parser

ROOT = Path(__file__).resolve().parent.parent
INSTALL_TIMEOUT_S = 240
RUN_TIMEOUT_S = 60
CALIBRATE_TIMEOUT_S = 240
SCRIPT_CASES = {
    "29 tune --sweep calibrate with a failing server",
    "29 stage --bucket Bad_Bucket!",
    "29 wake outputs size 100",
    "29 bench /metrics metrics-html",
    "29 exposure 0.0.0.0/1",
    "29 wait door 401",
    "unknown command",
}


def test_pyproject_declares_the_command() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {"qwen36": "qwen36.__main__:main"}
    assert build_parser().prog == "qwen36"


def test_deploy_installs_the_command_before_the_preflight_runs_in_its_venv(tmp_path: Path) -> None:
    """scripts/deploy.sh runs scripts/install_cli.sh (which makes the venv the preflight runs in)
    first; pulumi, gcloud and the venv's python are stubs that log their arguments."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("scripts/deploy.sh", "scripts/install_cli.sh", "Pulumi.dev.yaml"):
        shutil.copy(ROOT / name, repo / name)
    logger = '#!/usr/bin/env bash\nprintf "%s\\n" "$(basename "$0") $*" >>"$CALLS"\n'
    stubs = {
        tmp_path / "bin" / "gcloud": logger,
        tmp_path / "bin" / "pulumi": logger
        + 'if [[ "$1 $2" == "config get" ]]; then echo acme; fi\n'
        + 'if [[ "$1" == "version" ]]; then echo v3.210.0; fi\n',
        repo / ".venv" / "bin" / "python": logger + 'if [[ "$*" == "-m qwen36 check"* ]]; then exit 1; fi\n',
        repo / ".venv" / "bin" / "qwen36": logger,
    }
    for path, text in stubs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755)
    calls = tmp_path / "calls.log"
    home = tmp_path / "home"
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "deploy.sh"), "dev"],
        env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(home), "CALLS": str(calls)},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # the stub check blocks
    logged = calls.read_text().splitlines()
    pip = [i for i, c in enumerate(logged) if c.startswith("python -m pip install")]
    check = logged.index("python -m qwen36 check --stack dev")
    assert pip and max(pip) < check, logged
    assert any("--editable ." in logged[i] for i in pip), logged
    assert (home / ".local" / "bin" / "qwen36").resolve() == (repo / ".venv" / "bin" / "qwen36").resolve()


def subcommands() -> list[str]:
    """Every command the parser offers (its subparsers' names)."""
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(action.choices)


def _qwen36(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float = RUN_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", 'qwen36 "$@"', "qwen36", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_every_command_is_listed() -> None:
    assert set(subcommands()) >= {"check", "stage", "bench", "load", "tune", "wait", "tunnel", "ssh", "logs"}


@pytest.mark.slow
def test_install_cli_puts_a_working_qwen36_on_path(
    tmp_path: Path, llama_server_bin: Path, tiny_mtp_model: Path
) -> None:
    venv = tmp_path / "venv"
    bin_dir = tmp_path / "bin"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=RUN_TIMEOUT_S)
    # The pinned dependencies come from the suite's own venv (nothing is downloaded): a .pth puts
    # its site-packages on the new venv's path, so pip finds requirements.txt satisfied.
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "suite-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "VENV": str(venv),
        "QWEN36_BIN_DIR": str(bin_dir),
        "PIP_NO_INDEX": "1",
        # pip stores PIP_<OPTION> in the option's destination (pip/_internal/cli/parser.py), so 0
        # turns build isolation off: setuptools and wheel come from the suite's venv, offline.
        "PIP_NO_BUILD_ISOLATION": "0",
    }
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install_cli.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{bin_dir} is not on your PATH" in done.stdout
    assert (bin_dir / "qwen36").resolve() == (venv / "bin" / "qwen36").resolve()

    # A fresh shell elsewhere, with the link's directory on PATH and no venv activated.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shell = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    # Everything --help offers, each through the installed script (issue 29: `tune --sweep
    # calibrate` imported `startup`, which the package did not hold).
    helps = [(["--help"], "usage: qwen36 ")] + [
        ([name, "--help"], f"usage: qwen36 {name}") for name in subcommands()
    ]
    for argv, expected in helps:
        run = _qwen36(argv, cwd=elsewhere, env=shell)
        assert run.returncode == 0, run.stderr
        assert run.stdout.startswith(expected), run.stdout
    # A representative run of the one command that reads another room: the boot's calibration,
    # against the real pinned llama-server and the tiny model, from the installed command.
    run = _qwen36(
        ["tune", "--sweep", "calibrate", "--launcher", "local", "--server-bin", str(llama_server_bin),
         "--model", str(tiny_mtp_model), "--set", "threads=1", "--max-tokens", "16", "--budget", "60",
         "--gpu", "cpu", "none", "N/A"],
        cwd=elsewhere, env=shell, timeout=CALIBRATE_TIMEOUT_S,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "winner: " in run.stdout and "internal error" not in run.stderr, run.stdout + run.stderr
    # Some of the bad-input sweep's cases, through the installed script (its own interpreter and
    # imports, not this process's): each ends in its code and one line, as from `python -m`.
    from tests.cli import sweep

    chosen = [c for c in sweep.cases() if c.name in SCRIPT_CASES]
    assert len(chosen) == len(SCRIPT_CASES)
    outcomes = [sweep.run_case(case, script=bin_dir / "qwen36") for case in chosen]
    assert [(o.case.name, o.verdicts) for o in outcomes if o.verdicts] == []
    # The editable install runs this checkout's code.
    origin = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import qwen36; print(qwen36.__file__)"],
        cwd=elsewhere,
        env=shell,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=True,
    )
    assert Path(origin.stdout.strip()).parent == ROOT / "qwen36"
