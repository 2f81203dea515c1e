"""qwen36/fetch.py against the local hub: resolve redirects, LFS sha256, ranges, resume, refusals."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qwen36 import fetch
from tests.cache.conftest import REPO_ROOT, Blob, run_fetch, start_fetch
from tests.cache.hf_server import HfServer

REPO = "unsloth/Some-Model-GGUF"
FILE = "Some-Model-UD-Q4_K_XL.gguf"
# Bounded waits for the subprocess tests.
STALL_WAIT_S = 30.0
POLL_S = 0.05


def _hf_args(dest: Path, *extra: str) -> tuple[str, ...]:
    return ("hf", "--repo", REPO, "--revision", "main", "--file", FILE, "--dest", str(dest), *extra)


def _wait_for(predicate: object, what: str, timeout: float = STALL_WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(POLL_S)
    raise AssertionError(f"timed out waiting for {what}")


def _checkpointed_bytes(dest: Path) -> int:
    try:
        state = json.loads(Path(str(dest) + ".partial.json").read_text())
    except (OSError, ValueError):
        return 0
    return sum(done for _start, _end, done in state["slices"])


@pytest.mark.parametrize("slices", [1, 4])
def test_download_follows_the_redirect_and_verifies_the_lfs_sha256(
    hub: HfServer, small_file: Blob, tmp_path: Path, slices: int
) -> None:
    hub.add_file(REPO, FILE, small_file.path)
    dest = tmp_path / "model.gguf"

    done = run_fetch(*_hf_args(dest, "--slices", str(slices)))

    assert done.returncode == 0, done.stderr
    assert dest.read_bytes() == small_file.path.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf"]
    assert done.stdout.strip().endswith(f"verified sha256 {small_file.sha256}"), "the hub's LFS sha256"
    resolves = [e for e in hub.log if "/resolve/" in e.path]
    assert [(e.method, e.status) for e in resolves] == [("HEAD", 302)]
    pieces = fetch.plan_pieces(small_file.size, slices)
    ranges = hub.cdn_requests()
    assert sorted(e.range for e in ranges) == sorted(f"bytes={p.start}-{p.end - 1}" for p in pieces)
    assert all(e.status == 206 for e in ranges)


def test_hub_token_goes_to_the_hub_only(
    small_file: Blob, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with HfServer(cdn_host="localhost") as hub:
        hub.add_file(REPO, FILE, small_file.path)
        monkeypatch.setenv("HF_ENDPOINT", hub.base_url)
        monkeypatch.setenv("HF_TOKEN", "hf_secret")

        done = run_fetch(*_hf_args(tmp_path / "m.gguf"))

    assert done.returncode == 0, done.stderr
    assert {e.authorization for e in hub.log if "/resolve/" in e.path} == {"Bearer hf_secret"}
    assert hub.cdn_requests(), "the download went to the CDN host"
    assert {e.authorization for e in hub.cdn_requests()} == {""}


def test_configured_sha256_that_disagrees_with_the_hub_is_refused_before_downloading(
    hub: HfServer, small_file: Blob, tmp_path: Path
) -> None:
    hub.add_file(REPO, FILE, small_file.path)
    wrong = "cd" * 32

    done = run_fetch(*_hf_args(tmp_path / "m.gguf", "--sha256", wrong))

    assert done.returncode == fetch.EXIT_VERIFY
    assert f"expected sha256 {wrong}, the hub says {small_file.sha256}" in done.stderr
    assert hub.cdn_requests() == []


def test_missing_file_on_the_hub_is_not_found(hub: HfServer, tmp_path: Path) -> None:
    done = run_fetch(*_hf_args(tmp_path / "m.gguf"))

    assert done.returncode == fetch.EXIT_NOT_FOUND
    assert f"resolve {REPO}@main/{FILE}: HTTP 404" in done.stderr


def test_transient_cdn_errors_are_retried(hub: HfServer, small_file: Blob, tmp_path: Path) -> None:
    hub.add_file(REPO, FILE, small_file.path)
    hub.fail_next(2, status=503)
    dest = tmp_path / "m.gguf"

    done = run_fetch(*_hf_args(dest, "--slices", "1"))

    assert done.returncode == 0, done.stderr
    assert [e.status for e in hub.cdn_requests()] == [503, 503] + [206] * len(
        fetch.plan_pieces(small_file.size, 1)
    )
    fetch.verify_file(str(dest), small_file.sha256, small_file.size)


def test_plain_git_file_needs_an_explicit_sha256(hub: HfServer, small_file: Blob, tmp_path: Path) -> None:
    hub.add_file(REPO, FILE, small_file.path, lfs=False)

    without = run_fetch(*_hf_args(tmp_path / "a.gguf"))
    with_sha = run_fetch(*_hf_args(tmp_path / "b.gguf", "--sha256", small_file.sha256))

    assert without.returncode == fetch.EXIT_VERIFY
    assert "the hub gives no LFS sha256" in without.stderr
    assert with_sha.returncode == 0, with_sha.stderr
    assert (tmp_path / "b.gguf").read_bytes() == small_file.path.read_bytes()


@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGTERM])
def test_interrupted_download_resumes_where_it_stopped(
    hub: HfServer, small_file: Blob, tmp_path: Path, stop_signal: signal.Signals
) -> None:
    hub.add_file(REPO, FILE, small_file.path)
    dest = tmp_path / "model.gguf"
    first_part = small_file.size // 2
    hub.stall_after(first_part)

    process = start_fetch(*_hf_args(dest, "--slices", "1"))
    try:
        assert hub.stalled.wait(STALL_WAIT_S), "the download never reached the stall point"
        # A killed process keeps what its last checkpoint recorded (every few seconds); wait for the
        # one that holds every byte sent, so the resumed range is known exactly.
        _wait_for(lambda: _checkpointed_bytes(dest) >= first_part, "a checkpoint of the bytes sent")
        process.send_signal(stop_signal)
        _, stderr = process.communicate(timeout=STALL_WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    hub.release()
    if stop_signal == signal.SIGTERM:
        assert process.returncode == fetch.EXIT_INTERRUPTED
        assert "rerun to continue" in stderr
    assert not dest.exists(), "an unfinished download is never at the model path"
    served_before = hub.bytes_served

    done = run_fetch(*_hf_args(dest, "--slices", "1"))

    assert done.returncode == 0, done.stderr
    assert dest.read_bytes() == small_file.path.read_bytes()
    piece = next(p for p in fetch.plan_pieces(small_file.size, 1) if p.start <= first_part < p.end)
    resumed = hub.cdn_requests()[
        -(1 + len([p for p in fetch.plan_pieces(small_file.size, 1) if p.start > first_part]))
    ]
    assert resumed.range == f"bytes={first_part}-{piece.end - 1}"
    assert resumed.if_range, "the resumed range is conditional on the file being unchanged"
    assert hub.bytes_served - served_before == small_file.size - first_part


def test_file_changed_on_the_hub_mid_download_is_never_taken(
    hub: HfServer, small_file: Blob, other_small_file: Blob, tmp_path: Path
) -> None:
    hub.add_file(REPO, FILE, small_file.path)
    dest = tmp_path / "model.gguf"
    hub.stall_after(small_file.size // 3)
    process = start_fetch(*_hf_args(dest, "--slices", "1"))
    try:
        assert hub.stalled.wait(STALL_WAIT_S)
        hub.replace(REPO, FILE, other_small_file.path)
        hub.release()
        _, stderr = process.communicate(timeout=STALL_WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()

    # The retried range carries the old ETag in If-Range, gets the whole new file (200) and starts
    # again; the new bytes do not match the sha256 the download began with, so nothing is kept.
    assert process.returncode == fetch.EXIT_VERIFY, stderr
    assert "the file changed since the partial download began" in stderr
    assert f"expected sha256 {small_file.sha256}, content has {other_small_file.sha256}" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert 200 in [e.status for e in hub.cdn_requests()]


def test_library_call_reports_progress(hub: HfServer, small_file: Blob, tmp_path: Path) -> None:
    hub.add_file(REPO, FILE, small_file.path)
    seen: list[tuple[int, int]] = []

    result = fetch.fetch_hf(
        REPO, "main", FILE, str(tmp_path / "m.gguf"), callback=lambda d, t: seen.append((d, t))
    )

    assert result.sha256 == small_file.sha256
    assert seen[-1] == (small_file.size, small_file.size)


def test_hf_server_runs_as_a_process(small_file: Blob, tmp_path: Path) -> None:
    """The boot-script tests start the stand-in as a process; it must print its URL and serve."""
    server = subprocess.Popen(
        [
            sys.executable,
            str(REPO_ROOT / "tests/cache/hf_server.py"),
            "--file",
            f"{REPO}:{FILE}:{small_file.path}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        base_url = server.stdout.readline().strip()
        done = run_fetch(*_hf_args(tmp_path / "m.gguf"), env={"HF_ENDPOINT": base_url})
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert done.returncode == 0, done.stderr


def test_interrupted_sliced_download_resumes_every_range(
    hub: HfServer, small_file: Blob, tmp_path: Path
) -> None:
    hub.add_file(REPO, FILE, small_file.path)
    dest = tmp_path / "model.gguf"
    first_part = small_file.size // 2
    hub.stall_after(first_part)

    process = start_fetch(*_hf_args(dest, "--slices", "4"))
    try:
        assert hub.stalled.wait(STALL_WAIT_S)
        _wait_for(lambda: _checkpointed_bytes(dest) >= first_part, "a checkpoint of the bytes sent")
        process.kill()
        process.communicate(timeout=STALL_WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    hub.release()
    served_before = hub.bytes_served

    done = run_fetch(*_hf_args(dest, "--slices", "4"))

    assert done.returncode == 0, done.stderr
    assert dest.read_bytes() == small_file.path.read_bytes()
    assert hub.bytes_served - served_before == small_file.size - first_part, "no byte fetched twice"
