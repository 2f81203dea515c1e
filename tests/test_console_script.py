"""The ``qwen36`` command works as pasted from any shell: pyproject.toml declares it, and
scripts/install_cli.sh (run by scripts/deploy.sh) installs it into the project's venv and links it
from a directory on PATH. Installed here into a throwaway venv, offline, and run from elsewhere."""

from __future__ import annotations

import re
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


def test_pyproject_declares_the_command() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {"qwen36": "qwen36.__main__:main"}
    assert build_parser().prog == "qwen36"
    deploy = (ROOT / "scripts" / "deploy.sh").read_text()
    assert re.search(r"^\s*scripts/install_cli\.sh\b", deploy, re.M), "deploy.sh must install the command"


@pytest.mark.slow
def test_install_cli_puts_a_working_qwen36_on_path(tmp_path: Path) -> None:
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
    for argv, expected in ((["--help"], "usage: qwen36 "), (["wake", "--help"], "usage: qwen36 wake")):
        run = subprocess.run(
            ["bash", "-c", 'qwen36 "$@"', "qwen36", *argv],
            cwd=elsewhere,
            env=shell,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.startswith(expected), run.stdout
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
