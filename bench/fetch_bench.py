"""Throughput of the VM's model fetch (qwen36/fetch.py) on loopback, beside the disk's write rate.

    .venv/bin/python bench/fetch_bench.py [--size-mib 192] [--slices 8] [--repeat 2]

Prints the download rate with one stream and with sliced ranges, from gcp-storage-emulator and from
the hub stand-in (tests/cache/hf_server.py), each to the last byte written and to the verified rename;
then the sha256 rate and this machine's disk write rate (a Python write of the same size with fsync,
and ``dd conv=fsync``) as the ceiling. Both servers run in their own processes. The emulator serves
one request at a time and copies the whole object for each request, so its figures show the emulator,
not the fetch; the threaded stand-in shows the fetch itself. The sha256 runs alongside the download
(it follows the written prefix), so on a 2-core machine the servers, the streams and the hash share
two CPUs: these figures show where the limit is here, not what GCS gives a g2-standard-8.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from qwen36 import fetch  # noqa: E402

MIB = 1024 * 1024
BUCKET = "bench"
OBJECT = "models/bench/model.gguf"
HF_REPO = "bench/model"
HF_FILE = "model.gguf"
EMULATOR_START_S = 30.0
POLL_S = 0.1
DD_TIMEOUT_S = 600


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_until_serving(url: str, what: str) -> None:
    deadline = time.monotonic() + EMULATOR_START_S
    while True:
        try:
            fetch.request("GET", url + "/", timeout=1).close()
            return
        except fetch.FetchError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(POLL_S)


@contextmanager
def hub_stand_in(source: Path) -> Iterator[str]:
    """tests/cache/hf_server.py in its own process: threaded, reading ranges from disk."""
    process = subprocess.Popen(
        [
            sys.executable,
            str(REPO_ROOT / "tests/cache/hf_server.py"),
            "--file",
            f"{HF_REPO}:{HF_FILE}:{source}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        _wait_until_serving(url, "the hub stand-in")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextmanager
def emulator() -> Iterator[str]:
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gcp_storage_emulator",
            "start",
            "--port",
            str(port),
            "--in-memory",
            "-q",
            "--default-bucket",
            BUCKET,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_serving(url, "the storage emulator")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def write_random(path: Path, size: int) -> None:
    rng = random.Random(0)
    with path.open("wb") as handle:
        for _ in range(size // MIB):
            handle.write(rng.randbytes(MIB))


def disk_write_python(path: Path, size: int) -> float:
    block = os.urandom(8 * MIB)
    started = time.perf_counter()
    with path.open("wb") as handle:
        for _ in range(size // len(block)):
            handle.write(block)
        handle.flush()
        os.fsync(handle.fileno())
    elapsed = time.perf_counter() - started
    path.unlink()
    return size / elapsed


def disk_write_dd(source: Path, path: Path, size: int) -> float | None:
    """dd copying the random source (zeros would flatter a compressing filesystem)."""
    if shutil.which("dd") is None:
        return None
    started = time.perf_counter()
    done = subprocess.run(
        ["dd", f"if={source}", f"of={path}", "bs=8M", f"count={size // (8 * MIB)}", "conv=fsync"],
        capture_output=True,
        timeout=DD_TIMEOUT_S,
        check=False,
    )
    elapsed = time.perf_counter() - started
    path.unlink(missing_ok=True)
    return size / elapsed if done.returncode == 0 else None


def timed_fetch(dest: Path, slices: int, source: str) -> tuple[float, float]:
    """Seconds to the last byte on disk, and to the verified rename."""
    finished: list[float] = []

    def on_progress(done: int, total: int) -> None:
        if done == total and not finished:
            finished.append(time.perf_counter())

    dest.unlink(missing_ok=True)
    started = time.perf_counter()
    if source == "gcs":
        fetch.fetch_gcs(BUCKET, OBJECT, str(dest), slices=slices, callback=on_progress)
    else:
        fetch.fetch_hf(HF_REPO, "main", HF_FILE, str(dest), slices=slices, callback=on_progress)
    verified = time.perf_counter()
    return (finished[0] if finished else verified) - started, verified - started


def _best(workdir: Path, slices: int, source: str, repeat: int) -> tuple[float, float]:
    runs = [timed_fetch(workdir / "model.gguf", slices, source) for _ in range(repeat)]
    size = (workdir / "model.gguf").stat().st_size
    return size / min(r[0] for r in runs), size / min(r[1] for r in runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--size-mib", type=int, default=192, help="object size (the emulator holds it in RAM)"
    )
    parser.add_argument("--slices", type=int, default=fetch.DEFAULT_SLICES)
    parser.add_argument("--repeat", type=int, default=2, help="runs per mode; the best is reported")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args(argv)
    size = args.size_mib * MIB
    workdir = Path(tempfile.mkdtemp(prefix="fetch-bench-", dir=args.dir))
    try:
        source = workdir / "source.gguf"
        write_random(source, size)
        sha256 = fetch.sha256_file(str(source))
        modes = (("single stream", 1), (f"sliced ({args.slices} ranges)", args.slices))
        rows = []
        with emulator() as url:
            os.environ["STORAGE_EMULATOR_HOST"] = url
            fetch.upload_gcs(BUCKET, OBJECT, str(source), sha256)
            rows += [
                ("emulator, " + label, *_best(workdir, slices, "gcs", args.repeat)) for label, slices in modes
            ]
        with hub_stand_in(source) as url:
            os.environ["HF_ENDPOINT"] = url
            rows += [
                ("hub stand-in, " + label, *_best(workdir, slices, "hf", args.repeat))
                for label, slices in modes
            ]
        started = time.perf_counter()
        fetch.sha256_file(str(source))
        hash_rate = size / (time.perf_counter() - started)
        python_write = disk_write_python(workdir / "write.bin", size)
        dd_write = disk_write_dd(source, workdir / "dd.bin", size)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    cpus = os.cpu_count()
    print(f"qwen36/fetch.py on loopback: {args.size_mib} MiB file, {cpus} CPUs (best of {args.repeat})")
    print(f"{'mode':<38}{'download MB/s':>15}{'with verify MB/s':>19}")
    for label, download, total in rows:
        print(f"{label:<38}{download / 1e6:>15.0f}{total / 1e6:>19.0f}")
    print(f"{'sha256 (hashlib)':<38}{hash_rate / 1e6:>15.0f}")
    print(f"{'disk write, python + fsync':<38}{python_write / 1e6:>15.0f}")
    if dd_write is not None:
        print(f"{'disk write, dd conv=fsync':<38}{dd_write / 1e6:>15.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
