"""The figures behind the model path's choices, measured on this machine with loopback stand-ins.

    .venv/bin/python bench/fetch_bench.py [--size-mib 192] [--repeat 2]

1. Hash rates: CRC32C (google-crc32c, SSE4.2) against SHA-256 (hashlib) over the same bytes: why the
   transfer is checked by CRC32C before the serve and the sha256 runs after it.
2. Write rates: tmpfs (/dev/shm) against the disk under the temp dir (with fsync): why the model goes
   to RAM.
3. Ranged reads from gcp-storage-emulator in its own process: one stream against sliced reads
   (google-cloud-storage's transfer_manager, the same ranged-read scheme `gcloud storage cp` uses),
   and huggingface_hub's download from the hub stand-in (tests/cache/hf_server.py). The emulator serves
   one request at a time, so on loopback slicing shows correctness, not speed; on a g2-standard-8 the
   limit is the NIC's 16 Gbps (tests/boot/durations.py).

No hand-written transfer code is left on the VM (qwen36/fetch.py, 1,262 lines, was removed): every
row here times a tool, so there is nothing of ours to justify beyond the choice of tool and target.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

MIB = 1024 * 1024
BUCKET = "bench"
OBJECT = "models/bench/model.gguf"
HF_REPO = "bench/model"
HF_FILE = "model.gguf"
START_TIMEOUT_S = 30.0
POLL_S = 0.1
SLICES = 8


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(url: str, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).close()  # noqa: S310 (loopback)
            return
        except OSError as exc:
            if getattr(exc, "code", None):  # any HTTP answer means it is up
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(POLL_S)


@contextmanager
def process(args: list[str], url: str, what: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        _wait(url, what)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def rate(size: int, seconds: float) -> str:
    return f"{size / MIB / seconds:,.0f} MiB/s"


def best(repeat: int, run: Callable[[], float]) -> float:
    return min(run() for _ in range(repeat))


def hash_rates(data: bytes, repeat: int) -> list[tuple[str, float]]:
    import google_crc32c

    def crc() -> float:
        started = time.perf_counter()
        google_crc32c.Checksum(data).digest()
        return time.perf_counter() - started

    def sha() -> float:
        started = time.perf_counter()
        hashlib.sha256(data).digest()
        return time.perf_counter() - started

    return [
        (f"CRC32C (google-crc32c, {google_crc32c.implementation})", best(repeat, crc)),
        ("SHA-256 (hashlib, one core)", best(repeat, sha)),
    ]


def write_rates(data: bytes, repeat: int, disk_dir: Path) -> list[tuple[str, float]]:
    def write(directory: Path) -> Callable[[], float]:
        def run() -> float:
            path = directory / "qwen36-write-bench"
            started = time.perf_counter()
            with path.open("wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            elapsed = time.perf_counter() - started
            path.unlink()
            return elapsed

        return run

    rows = [("disk (temp dir, fsync)", best(repeat, write(disk_dir)))]
    shm = Path("/dev/shm")  # noqa: S108 (a tmpfs is the point of this row)
    if shm.is_dir():
        rows.insert(0, ("tmpfs (/dev/shm)", best(repeat, write(shm))))
    return rows


def transfer_rates(source: Path, size: int, repeat: int, workdir: Path) -> list[tuple[str, float]]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage
    from google.cloud.storage import transfer_manager
    from huggingface_hub import hf_hub_download

    rows = []
    port = _free_port()
    gcs = f"http://127.0.0.1:{port}"
    emulator = [sys.executable, "-m", "gcp_storage_emulator", "start", "--port", str(port), "--in-memory"]
    with process(emulator, gcs, "the storage emulator"):
        os.environ["STORAGE_EMULATOR_HOST"] = gcs
        client = storage.Client(project="bench", credentials=AnonymousCredentials())
        bucket = client.create_bucket(BUCKET)
        blob = bucket.blob(OBJECT)
        blob.upload_from_filename(str(source))
        blob.reload()

        def one_stream() -> float:
            dest = workdir / "one.gguf"
            started = time.perf_counter()
            blob.download_to_filename(str(dest), checksum="crc32c")
            elapsed = time.perf_counter() - started
            dest.unlink()
            return elapsed

        def sliced() -> float:
            dest = workdir / "sliced.gguf"
            started = time.perf_counter()
            transfer_manager.download_chunks_concurrently(
                blob, str(dest), chunk_size=-(-size // SLICES), max_workers=SLICES, crc32c_checksum=True
            )
            elapsed = time.perf_counter() - started
            dest.unlink()
            return elapsed

        rows.append(("emulator, one stream, CRC32C checked", best(repeat, one_stream)))
        rows.append((f"emulator, {SLICES} ranged reads, CRC32C checked", best(repeat, sliced)))
    hub_args = [
        sys.executable, str(REPO_ROOT / "tests/cache/hf_server.py"), "--cdn-host", "localhost",
        "--file", f"{HF_REPO}:{HF_FILE}:{source}",
    ]  # fmt: skip
    stand_in = subprocess.Popen(hub_args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert stand_in.stdout is not None
        hub = stand_in.stdout.readline().strip()  # printed once its files are in place

        def hub_download() -> float:
            dest = workdir / "hub"
            started = time.perf_counter()
            hf_hub_download(HF_REPO, HF_FILE, local_dir=dest, endpoint=hub)
            elapsed = time.perf_counter() - started
            subprocess.run(["rm", "-rf", str(dest)], check=True)
            return elapsed

        rows.append(("hub stand-in, huggingface_hub", best(repeat, hub_download)))
    finally:
        stand_in.terminate()
        stand_in.wait(timeout=10)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=192, help="bytes per measurement")
    parser.add_argument("--repeat", type=int, default=2, help="best of this many runs")
    args = parser.parse_args(argv)
    size = args.size_mib * MIB
    data = random.Random(36).randbytes(size)
    with tempfile.TemporaryDirectory(prefix="fetch-bench-") as tmp:
        workdir = Path(tmp)
        source = workdir / "source.gguf"
        source.write_bytes(data)
        sections = [
            ("hash", hash_rates(data, args.repeat)),
            ("write", write_rates(data, args.repeat, workdir)),
            ("transfer", transfer_rates(source, size, args.repeat, workdir)),
        ]
    print(f"{args.size_mib} MiB, best of {args.repeat}, {os.cpu_count()} CPUs\n")
    print("| what | measured | rate |")
    print("|---|---|---|")
    for section, rows in sections:
        for label, seconds in rows:
            print(f"| {section}: {label} | {seconds:.2f} s | {rate(size, seconds)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
