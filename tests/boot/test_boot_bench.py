"""bench/boot_bench.py keeps working: one path, both scripts, at a small time scale. Figures only;
no speed is asserted here (the table is the bench's output, not a test's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.boot.durations import Durations

BENCH = Path(__file__).resolve().parents[2] / "bench" / "boot_bench.py"
TIMEOUT_S = 300


def test_the_boot_bench_runs_ours_and_the_original_on_one_path() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--scale", "0.02", "--only", "restart, same host"],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("| restart, same host |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    d = Durations()
    assert cells[1] == f"GCS -> tmpfs {d.gcs_ram:g} + load (tmpfs) {d.load_ram:g}"
    assert cells[3] == f"load (cold pd-ssd) {d.load_disk_cold:g}"
    assert float(cells[5]) > 0
