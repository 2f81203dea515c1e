"""The guest-attribute ration of startup/lib.sh under the awk the VM runs.

GCE documents about 10 writes a minute with bursts of 3 a second, and may drop what goes over
(https://cloud.google.com/compute/docs/metadata/manage-guest-attributes; infra/boot_protocol.py).
The script keeps one write at least SCRIPT_MIN_GAP_S after another. Ubuntu's awk is mawk 1.3.4,
which reads ``printf "...", a > 0 ? a : 0`` as a redirection into a file named ``0``: the pause was
then never applied. So the ration runs here under mawk, and under gawk where it is installed.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from infra import boot_protocol
from infra.boot_script import LIB_PATH, lib_variables
from tests.boot.metadata_server import MetadataServer
from tests.boot.rate import measure

TIME_SCALE = 0.2
REPORTS = 4
# Of the scaled gap: what is left after the arrival jitter of one curl against the next.
GAP_TOLERANCE = 0.75
AWKS = ("mawk", "gawk")
STARTUP = LIB_PATH.parent
# awk, its options (a quoted -F separator, continued lines), then the quoted program.
_AWK_PROGRAM = re.compile(r"\bawk\b(?:-F'[^']*'|\\\n|[^'\n])*'([^']*)'")
_PRINT_WITH_GT = re.compile(r"\bprintf?\b[^;{}\n]*>[^;{}\n]*")
# The one redirection meant as one: ga_decide keeps the ledger's recent lines.
MEANT = {"print > kept"}


def lib_script(tmp_path: Path, body: str) -> Path:
    variables = "".join(f"{k}='{v}'\n" for k, v in lib_variables().items())
    script = tmp_path / "lib_run.sh"
    script.write_text(f"{variables}\n{LIB_PATH.read_text()}\n{body}\n")
    return script


def run_under(awk: str, tmp_path: Path, body: str, metadata_url: str = "http://127.0.0.1:9") -> str:
    found = shutil.which(awk)
    if found is None:
        pytest.skip(f"{awk} is not installed here")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "awk").symlink_to(found)
    work = tmp_path / "cwd"
    work.mkdir()
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "QWEN36_STATE_DIR": str(tmp_path / "state"),
        "QWEN36_METADATA_URL": metadata_url,
        "QWEN36_TIME_SCALE": repr(TIME_SCALE),
        "QWEN36_BOOT_ID": "spacing-test",
    }
    done = subprocess.run(
        ["bash", str(lib_script(tmp_path, body))],
        env=env, cwd=work, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # mawk's reading of the old line: a file named 0 where the script runs.
    assert sorted(p.name for p in work.iterdir()) == [], "awk wrote a file in the working directory"
    return done.stdout


@pytest.mark.parametrize("awk", AWKS)
def test_a_write_right_after_another_is_told_to_wait_the_gap(awk: str, tmp_path: Path) -> None:
    body = (
        'mkdir -p "${GA_LEDGER%/*}"\n'
        'printf "%s %s\\n" "$(ga_clock)" boot >"$GA_LEDGER"\n'
        "ga_decide step driver\n"
        # An empty ledger: no pause at all.
        ': >"$GA_LEDGER"\n'
        "ga_decide step driver\n"
    )
    lines = run_under(awk, tmp_path, body).splitlines()
    assert len(lines) == 2, lines
    verdict, pause = lines[0].split()
    gap = boot_protocol.SCRIPT_MIN_GAP_S * TIME_SCALE
    assert verdict == "write" and 0.5 * gap < float(pause) <= gap, lines
    assert lines[1] == "write 0.000"


@pytest.mark.parametrize("awk", AWKS)
def test_reports_in_a_row_reach_the_metadata_server_one_gap_apart(awk: str, tmp_path: Path) -> None:
    body = "".join(f'phase_report step p{i} "report {i}"\n' for i in range(REPORTS))
    with MetadataServer() as metadata:
        run_under(awk, tmp_path, body, metadata.url)
        writes = list(metadata.writes)
    assert [w.value.split(" ", 1)[0] for w in writes] == [f"p{i}" for i in range(REPORTS)]
    gaps = [(b.t - a.t) / TIME_SCALE for a, b in itertools.pairwise(writes)]
    assert min(gaps) >= GAP_TOLERANCE * boot_protocol.SCRIPT_MIN_GAP_S, gaps
    rate = measure(writes, TIME_SCALE)
    assert rate.peak_per_second <= boot_protocol.GUEST_ATTR_BURST_PER_SECOND, rate


def printed_comparisons(text: str) -> list[str]:
    """print/printf statements of the awk programs in ``text`` with a ">" among their arguments."""
    return [
        hit.group(0).strip()
        for program in _AWK_PROGRAM.findall(text)
        for hit in _PRINT_WITH_GT.finditer(program)
        if hit.group(0).strip() not in MEANT
    ]


def test_no_awk_program_of_the_startup_scripts_prints_a_comparison() -> None:
    scripts = {path.name: path.read_text() for path in sorted(STARTUP.glob("*.sh"))}
    # The check sees the programs, the ledger's redirection among them, and the old line.
    assert sum(len(_AWK_PROGRAM.findall(text)) for text in scripts.values()) >= 10
    assert "print > kept" in " ".join(p for text in scripts.values() for p in _AWK_PROGRAM.findall(text))
    old = """awk -v x=1 'BEGIN {\n  printf "write %.3f\\n", pause > 0 ? pause : 0\n}'"""
    assert printed_comparisons(old) == ['printf "write %.3f\\n", pause > 0 ? pause : 0']
    assert {name: printed_comparisons(text) for name, text in scripts.items()} == {
        name: [] for name in scripts
    }
