"""Each defect of issue 21's report, as a test: the command, the input, the exact line, the exit code.

On today's main every one of these ends in a traceback, a vaguer line, a run that never ends or
an exit 0 (the sweep's "before" table counts them); here each is one line on stderr and the code of
its cause (qwen36/errors.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from qwen36.__main__ import main
from qwen36.errors import Exit
from tests.cli.standins import HTML, completion, fake_llama, fake_pulumi
from tests.compute_fake.group import HANG, FakeGroup, Fault
from tests.compute_fake.server import fake_compute_api
from tests.compute_fake.shapes import quota_blocked_group

ROOT = Path(__file__).resolve().parents[2]
WHERE = ["--project", "acme-llm-test", "--region", "us-central1", "--group", "qwen36-dev"]
CLI_TIMEOUT_S = 60


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine without pulumi, gcloud or Google credentials, in an empty folder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sh").symlink_to("/bin/sh")
    (bin_dir / "cat").symlink_to(Path("/bin/cat") if Path("/bin/cat").exists() else Path("/usr/bin/cat"))
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("QWEN36_URL", raising=False)
    monkeypatch.delenv("QWEN36_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    return bin_dir


def _one_line(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    # Progress bars (rich, transient) leave blank lines; notes are not errors.
    lines = [line for line in captured.err.splitlines() if line.strip() and not line.startswith("note: ")]
    assert len(lines) == 1, captured.err
    return code, lines[0]


# --- tunnel, ssh, logs, wake and status on every failure path ---------------------------------


@pytest.mark.parametrize("verb", ["status", "wake", "tunnel", "ssh", "logs"])
def test_stack_without_the_pulumi_cli(bare: Path, capsys: pytest.CaptureFixture[str], verb: str) -> None:
    assert _one_line(capsys, verb, "--stack", "dev") == (
        Exit.MISSING_TOOL,
        f"{verb}: error: the pulumi CLI is not on PATH; pass --project, --region and --group instead",
    )


@pytest.mark.parametrize("verb", ["status", "wake", "tunnel"])
def test_unknown_stack(bare: Path, capsys: pytest.CaptureFixture[str], verb: str) -> None:
    fake_pulumi(bare, fail="error: no stack named 'nope' found")
    code, line = _one_line(capsys, verb, "--stack", "nope")
    assert code == Exit.NOT_FOUND
    assert line.startswith(f"{verb}: error: `pulumi stack output ")
    assert line.endswith(
        "failed (error: no stack named 'nope' found); check the stack name (`pulumi stack ls`), or pass "
        "--project, --region and --group"
    )


def test_stack_with_no_outputs(bare: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake_pulumi(bare, outputs={})
    assert _one_line(capsys, "status", "--stack", "dev") == (
        Exit.NOT_FOUND,
        "status: error: stack dev has no 'autostop' output; run `pulumi up` first",
    )
    assert _one_line(capsys, "tunnel", "--stack", "dev") == (
        Exit.NOT_FOUND,
        "tunnel: error: stack dev has no region or groupName output; run `pulumi up` first, or pass "
        "--project, --region and --group",
    )


@pytest.mark.parametrize("verb", ["status", "wake", "tunnel"])
def test_no_credentials(bare: Path, capsys: pytest.CaptureFixture[str], verb: str) -> None:
    assert _one_line(capsys, verb, *WHERE) == (
        Exit.NO_CREDENTIALS,
        f"{verb}: error: no usable Google application-default credentials (File {bare.parent}/none.json "
        "was not found.); run `gcloud auth application-default login`",
    )


def test_status_of_a_quota_blocked_group(capsys: pytest.CaptureFixture[str]) -> None:
    """Shown on main as ``starting: qwen36-ujzd is , action CREATING``."""
    group = quota_blocked_group("acme-llm-test")
    with fake_compute_api(group) as endpoint:
        assert main(["status", *WHERE, "--compute-endpoint", endpoint, "--anonymous"]) == 0
    assert capsys.readouterr().out == (
        "quota-blocked: qwen36-ujzd: GCE cannot create it: quota PREEMPTIBLE_NVIDIA_L4_GPUS exceeded "
        "(Quota 'PREEMPTIBLE_NVIDIA_L4_GPUS' exceeded. Limit: 0.0 in region us-central1.); it will not "
        "start until the limit is raised (console: IAM & Admin > Quotas)\n"
    )


# --- NaN, negative and out-of-range numbers -----------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["load", "--url", "http://127.0.0.1:9", "--duration", "nan"],
            "load: error: argument --duration: 'nan' is not a finite number (see qwen36 load --help)",
        ),
        (
            ["wait", "--mode", "http", "--url", "http://x", *WHERE, "--timeout-minutes", "nan"],
            "wait: error: argument --timeout-minutes: 'nan' is not a finite number (see qwen36 wait --help)",
        ),
        (
            ["wait", "--mode", "http", "--url", "http://x", *WHERE, "--timeout-minutes", "-1"],
            "wait: error: argument --timeout-minutes: '-1' is not a positive number (see qwen36 wait --help)",
        ),
        (
            ["tune", "--memory-limit", "inf"],
            "tune: error: argument --memory-limit: 'inf' is not a positive size such as 512M or 2G "
            "(see qwen36 tune --help)",
        ),
    ],
)
def test_bad_numbers_are_refused_before_anything_runs(
    bare: Path, capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    assert _one_line(capsys, *argv) == (Exit.USAGE, line)


def test_wake_size_minus_one_never_reaches_the_api(capsys: pytest.CaptureFixture[str]) -> None:
    group = FakeGroup(project="acme-llm-test", region="us-central1")
    with fake_compute_api(group) as endpoint:
        code, line = _one_line(
            capsys, "wake", *WHERE, "--size", "-1", "--compute-endpoint", endpoint, "--anonymous"
        )
    assert (code, line) == (
        Exit.USAGE,
        "wake: error: argument --size: '-1' is not between 1 and 8 (see qwen36 wake --help)",
    )
    assert group.calls == []


# --- bench, load and tune ----------------------------------------------------------------------


def test_bench_url_with_another_scheme(bare: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Reported on main as ``http://ftp://x``."""
    assert _one_line(capsys, "bench", "--url", "ftp://x") == (
        Exit.USAGE,
        "bench: error: --url 'ftp://x': only http:// and https:// URLs are served here",
    )


def test_bench_on_an_html_answer(bare: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with fake_llama(HTML, "text/html") as url:
        code, line = _one_line(capsys, "bench", "--url", url, "--reps", "1")
    assert (code, line) == (
        Exit.FAILED,
        "bench: error: the server answered 200 with text/html, not JSON "
        "('<!doctype html><html><head><title>Sign in</title></head><bod'): point --url at a llama-server",
    )


def test_bench_on_timings_that_are_not_numbers(bare: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with fake_llama(completion({"predicted_per_second": "fast"})) as url:
        code, line = _one_line(capsys, "bench", "--url", url, "--reps", "1")
    assert (code, line) == (
        Exit.FAILED,
        "bench: error: the server's 'timings' are not positive numbers "
        '({"predicted_per_second": "fast"}): point --url at a llama-server',
    )


@pytest.mark.parametrize(
    ("flag", "why"),
    [
        ("--json", "is a directory; name a file in it"),
        ("--markdown", "is a directory; name a file in it"),
        ("--png", "does not end in .png (the file is written under exactly this name)"),
    ],
)
def test_output_aimed_at_a_directory_is_refused_before_the_run(
    bare: Path, capsys: pytest.CaptureFixture[str], flag: str, why: str
) -> None:
    """On main --json/--markdown crashed after the whole run and --png <dir> exited 0 writing <dir>.png."""
    folder = bare.parent / "out"
    folder.mkdir()
    with fake_llama(completion()) as url:
        code, line = _one_line(capsys, "bench", "--url", url, flag, str(folder))
    assert (code, line) == (
        Exit.USAGE,
        f"bench: error: argument {flag}: '{folder}' {why} (see qwen36 bench --help)",
    )
    assert not Path(f"{folder}.png").exists()


def test_a_report_that_cannot_be_written_at_the_end_is_kept(
    bare: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = bare.parent / "reports"
    reports.mkdir()
    target = reports / "bench.json"

    def folder_goes_away() -> None:
        if reports.exists():
            reports.rmdir()

    with fake_llama(completion(), on_chat=folder_goes_away) as url:
        code, line = _one_line(capsys, "bench", "--url", url, "--reps", "1", "--json", str(target))
    assert code == Exit.LOCAL_IO
    prefix = f"bench: error: could not write {target} (No such file or directory): kept as "
    assert line.startswith(prefix)
    kept = Path(line.removeprefix(prefix))
    assert kept.parent == bare.parent / "cache" / "qwen36-mtp-l4" / "reports"
    assert json.loads(kept.read_text())["schema"] == "qwen36-bench/1"


def test_tune_server_bin_and_config(bare: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = bare.parent / "m.gguf"
    model.write_bytes(b"GGUF")
    local = ("tune", "--launcher", "local", "--model", str(model))
    assert _one_line(capsys, *local, "--server-bin", str(bare.parent)) == (
        Exit.USAGE,
        f"tune: error: --server-bin {bare.parent}: a directory; pass the llama-server binary itself",
    )
    assert _one_line(capsys, *local, "--server-bin", str(bare / "llama-server")) == (
        Exit.USAGE,
        f"tune: error: --server-bin {bare / 'llama-server'}: no such file",
    )
    assert _one_line(capsys, *local, "--ctx-min", "9000", "--ctx-max", "8192") == (
        Exit.USAGE,
        "tune: error: --ctx-min 9000 is above --ctx-max 8192",
    )
    bad = bare.parent / "Pulumi.bad.yaml"
    bad.write_text("config: [unclosed\n")
    code, line = _one_line(capsys, *local, "--server-bin", "/bin/sh", "--config", str(bad))
    assert code == Exit.CONFIG
    assert line.startswith(f"tune: error: {bad.name} is not valid YAML (while parsing a flow sequence")


# --- Ctrl-C: one line and 130, after what the command started is stopped ---------------------


def test_ctrl_c_while_status_waits_on_the_api() -> None:
    group = FakeGroup(project="acme-llm-test", region="us-central1")
    group.faults.append(Fault("GET", "", HANG, times=100))
    with fake_compute_api(group) as endpoint:
        # The CLI's imports take a few seconds on a loaded machine: interrupt once it has called.
        code, err = _interrupt_when(
            ["status", *WHERE, "--compute-endpoint", endpoint, "--anonymous"], lambda: bool(group.calls)
        )
    assert (code, err) == (Exit.INTERRUPTED, "status: error: interrupted (Ctrl-C)\n")


def test_ctrl_c_in_tune_stops_the_server_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "server.pid"
    server = tmp_path / "llama-server"
    server.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 300\n")
    server.chmod(0o755)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    argv = ["tune", "--launcher", "local", "--model", str(model), "--server-bin", str(server)]
    argv += ["--sweep", "ctx", "--ctx-min", "8192", "--ctx-max", "8192"]
    code, err = _interrupt_when(argv, pid_file.exists)
    assert code == Exit.INTERRUPTED
    assert err.splitlines()[-1] == "tune: error: interrupted (Ctrl-C)"
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the server tune started is still running"


def _interrupt_when(argv: list[str], ready: Callable[[], bool]) -> tuple[int, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "qwen36", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + CLI_TIMEOUT_S
    while not ready() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.02)
    time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=CLI_TIMEOUT_S)
    return process.returncode, err


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose (its parent, the CLI, has exited).
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def test_the_gates_door_look_without_the_key_is_refused_before_anything_runs(
    bare: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("QWEN36_API_KEY", raising=False)
    argv = ["wait", "--mode", "guest-attributes", *WHERE, "--timeout-minutes", "1"]
    assert _one_line(capsys, *argv, "--door-url", "https://qwen36-door-1.us-central1.run.app") == (
        Exit.USAGE,
        "wait: error: --door-url needs the API key in QWEN36_API_KEY: the door admits nothing without it",
    )
    assert _one_line(capsys, *argv, "--door-url", "qwen36-door-1.us-central1.run.app") == (
        Exit.USAGE,
        "wait: error: argument --door-url: 'qwen36-door-1.us-central1.run.app': give an http:// or https:// "
        "URL (see qwen36 wait --help)",
    )


@pytest.mark.parametrize(
    ("launcher", "line"),
    [
        (["--launcher", "local"], "tune: error: no llama-server on PATH: pass --server-bin"),
        (
            ["--launcher", "docker"],
            "tune: error: the docker launcher needs docker on PATH (tune runs on the VM), "
            "or --launcher local",
        ),
    ],
)
@pytest.mark.parametrize("sweep", [[], ["--sweep", "calibrate"]])
def test_tune_and_its_calibration_name_a_missing_server_the_same_way(
    bare: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    launcher: list[str],
    line: str,
    sweep: list[str],
) -> None:
    """The calibration used to raise ValueError here: exit 70, "internal error"."""
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    argv = ["tune", *sweep, *launcher, "--model", str(model)]
    assert _one_line(capsys, *argv) == (Exit.MISSING_TOOL, line)
