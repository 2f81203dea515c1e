"""``python -m qwen36 stage``: put the model into the stack's bucket once, so boots take the fast path.

    python -m qwen36 stage [--from-hf | --from-file PATH] [--stack S] [--bucket B] [--object O]

The bucket comes from ``pulumi stack output modelBucket``, the object name from the stack config
(``models/<modelRepo>/<modelFile>``, ``infra.model_cache.model_object_name``). The config is read from
``Pulumi.<stack>.yaml`` through ``infra.config.parse_config``, which fills in the same defaults as
``Pulumi.yaml`` and runs the same validation as ``pulumi up``; no Pulumi login is needed for it.

The expected sha256 is ``modelSha256`` when set; otherwise, from the hub, the file's LFS sha256 (read
by the same ``qwen36/fetch.py`` code the VM runs); otherwise, for a local file, its computed hash. The
upload is resumable (an interrupted run continues from the bytes GCS already holds), the object gets
``sha256`` and ``size`` as custom metadata, and its crc32c is checked against the local file. An object
that already holds the same sha256 and size is left alone.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qwen36 import fetch

if TYPE_CHECKING:
    from google.cloud import storage
    from rich.progress import Progress

    from infra.config import StackConfig

# GCS takes resumable chunks in multiples of 256 KiB; 16 MiB keeps a lost chunk cheap to resend.
# https://cloud.google.com/storage/docs/performing-resumable-uploads#chunked-upload
DEFAULT_CHUNK_MIB = 16
PULUMI_TIMEOUT_S = 120
STACK_OUTPUT_BUCKET = "modelBucket"

Say = Callable[[str], None]


class StageError(Exception):
    """A one-line reason the model was not staged; ``exit_code`` follows fetch.py's (4 = bad content)."""

    def __init__(self, message: str, exit_code: int = fetch.EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Target:
    bucket: str
    name: str

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.name}"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "qwen36-mtp-l4"


# ------------------------------------------------------------------------------ stack and config


def _pulumi(args: list[str], what: str) -> str:
    """Run the Pulumi CLI; a missing CLI or stack is a StageError naming the flag that avoids it."""
    command = "pulumi " + " ".join(args)
    if shutil.which("pulumi") is None:
        raise StageError(f"the Pulumi CLI is not installed, so {what} is unknown; pass it explicitly")
    try:
        done = subprocess.run(
            ["pulumi", *args], capture_output=True, text=True, timeout=PULUMI_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise StageError(f"`{command}` took over {PULUMI_TIMEOUT_S} s; pass {what} explicitly") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        reason = detail[-1] if detail else f"exit {done.returncode}"
        raise StageError(f"`{command}` failed ({reason}); pass {what} explicitly")
    return done.stdout.strip()


def selected_stack(stack: str | None) -> str:
    return stack or _pulumi(["stack", "--show-name"], "the stack (--stack NAME)")


def stack_bucket(stack: str) -> str:
    return _pulumi(["stack", "output", STACK_OUTPUT_BUCKET, "--stack", stack], "the bucket (--bucket NAME)")


def load_stack_config(stack: str, project_dir: Path) -> StackConfig:
    import yaml

    from infra.config import PROJECT, ConfigError, parse_config

    path = project_dir / f"Pulumi.{stack}.yaml"
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise StageError(f"no {path.name} in {project_dir}: is {stack!r} a stack of this project?") from None
    except yaml.YAMLError as exc:
        raise StageError(f"{path.name} is not valid YAML: {exc}") from None
    raw = document.get("config") or {}
    ours = {key: value for key, value in raw.items() if key.startswith(f"{PROJECT}:")}
    try:
        return parse_config(ours)
    except ConfigError as exc:
        raise StageError(f"{path.name}: {exc}") from None


def object_name_for(cfg: StackConfig) -> str:
    try:
        from infra.model_cache import model_object_name
    except ImportError:
        # The same formula, for a checkout without the Pulumi program's modules installed.
        return f"models/{cfg.model_repo}/{cfg.model_file}"
    return model_object_name(cfg)


# ---------------------------------------------------------------------------------------- staging


def stage(
    cfg: StackConfig,
    target: Target,
    from_file: Path | None,
    cache_dir: Path,
    chunk_size: int,
    say: Say,
    progress: Progress | None = None,
) -> str:
    """Stage the model; returns "already staged", "uploaded" or "resumed"."""
    import google_crc32c

    from qwen36 import stage_gcs

    client = stage_gcs.storage_client()
    bucket = stage_gcs.readable_bucket(client, target.bucket)
    crc = google_crc32c.Checksum()
    if from_file is not None:
        path, sha256, size = _local_source(cfg, target, bucket, from_file, crc, say, progress)
        if path is None:
            return "already staged"
    else:
        sha256, size = _hub_expectation(cfg)
        done, why = stage_gcs.staged_state(bucket, target.name, sha256, size)
        say(f"{target.uri}: {why}")
        if done:
            return "already staged"
        path = cache_dir / "models" / cfg.model_repo / cfg.model_file
        with _task(progress, "download from huggingface", size) as update:
            fetch.fetch_hf(
                cfg.model_repo, cfg.model_revision, cfg.model_file, str(path), sha256, size, callback=update
            )
        say(f"{path}: sha256 {sha256} verified (kept for reruns; delete it once staged to free the space)")
        with _task(progress, "crc32c of the download", size) as update:
            _crc_file(path, crc, update)
    crc32c = base64.b64encode(crc.digest()).decode("ascii")
    with _task(progress, f"upload to {target.uri}", size) as update:
        return stage_gcs.upload(
            client, bucket, target, path, sha256, size, crc32c, cache_dir, chunk_size, say, update
        )


def _hub_expectation(cfg: StackConfig) -> tuple[str, int]:
    label = f"{cfg.model_repo}@{cfg.model_revision}/{cfg.model_file}"
    try:
        hub = fetch.hf_resolve(cfg.model_repo, cfg.model_revision, cfg.model_file)
        return fetch.expected_from_hub(hub, cfg.model_sha256, cfg.model_size_bytes or None, label)
    except fetch.VerifyError as exc:
        raise StageError(f"{exc} (modelSha256/modelSizeBytes in the stack config)", exc.exit_code) from None
    except fetch.FetchError as exc:
        raise StageError(str(exc), exc.exit_code) from None


def _local_source(
    cfg: StackConfig,
    target: Target,
    bucket: storage.Bucket,
    path: Path,
    crc: Any,
    say: Say,
    progress: Progress | None,
) -> tuple[Path | None, str, int]:
    """Check a local file against the config; ``None`` for the path when the bucket already has it."""
    from qwen36 import stage_gcs

    try:
        size = path.stat().st_size
    except OSError as exc:
        raise StageError(f"cannot read {path}: {exc.strerror}") from None
    if cfg.model_size_bytes and size != cfg.model_size_bytes:
        raise StageError(
            f"{path}: expected {cfg.model_size_bytes} bytes (modelSizeBytes), the file has {size}",
            fetch.EXIT_VERIFY,
        )
    expected = cfg.model_sha256
    if expected:
        done, why = stage_gcs.staged_state(bucket, target.name, expected, size)
        say(f"{target.uri}: {why}")
        if done:
            return None, expected, size
    with _task(progress, "sha256 of the file", size) as update:
        actual = fetch.sha256_file(str(path), update, also=[crc])
    if expected and actual != expected:
        raise StageError(
            f"{path}: expected sha256 {expected} (modelSha256), the file has {actual}; not uploading it",
            fetch.EXIT_VERIFY,
        )
    if not expected:
        say(f"{path}: no modelSha256 in the stack config; staging its computed sha256 {actual}")
        done, why = stage_gcs.staged_state(bucket, target.name, actual, size)
        say(f"{target.uri}: {why}")
        if done:
            return None, actual, size
    return path, actual, size


def _crc_file(path: Path, crc: Any, update: fetch.ProgressCallback) -> None:
    total = path.stat().st_size
    done = 0
    with path.open("rb") as handle:
        while block := handle.read(fetch.HASH_BLOCK):
            crc.update(block)
            done += len(block)
            update(done, total)


# -------------------------------------------------------------------------------------- progress


@contextmanager
def _task(progress: Progress | None, label: str, total: int) -> Iterator[fetch.ProgressCallback]:
    if progress is None:
        yield lambda done, total: None
        return
    task = progress.add_task(label, total=total)

    def update(done: int, _total: int) -> None:
        progress.update(task, completed=done)

    try:
        yield update
    finally:
        progress.stop_task(task)


def _progress() -> Progress:
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )


# ------------------------------------------------------------------------------------------- CLI


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "stage",
        help="put the model into the stack's GCS bucket (resumable, verified, idempotent)",
        description="Put the model into the stack's GCS bucket so the VM fetches it at GCS speed.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--from-hf", action="store_true", help="download it from the hub first (default)")
    source.add_argument("--from-file", type=Path, metavar="PATH", help="upload a local GGUF instead")
    parser.add_argument("--stack", help="Pulumi stack (default: the selected one)")
    parser.add_argument("--bucket", help="bucket name (default: `pulumi stack output modelBucket`)")
    parser.add_argument("--object", help="object name (default: models/<modelRepo>/<modelFile>)")
    parser.add_argument("--project-dir", type=Path, default=Path.cwd(), help="where Pulumi.yaml lives")
    parser.add_argument("--cache-dir", type=Path, help="downloads and upload state (~/.cache/qwen36-mtp-l4)")
    parser.add_argument("--chunk-mib", type=int, default=DEFAULT_CHUNK_MIB, help="upload chunk size, MiB")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(f"stage: {line}", file=sys.stderr, flush=True)

    try:
        if args.chunk_mib <= 0:
            raise StageError(f"--chunk-mib {args.chunk_mib}: must be a positive number of MiB")
        stack = selected_stack(args.stack)
        cfg = load_stack_config(stack, args.project_dir)
        target = Target(args.bucket or stack_bucket(stack), args.object or object_name_for(cfg))
        cache_dir = args.cache_dir or default_cache_dir()
        with _progress() as progress:
            outcome = stage(
                cfg, target, args.from_file, cache_dir, args.chunk_mib * 1024 * 1024, say, progress
            )
    except (StageError, fetch.FetchError) as exc:
        say(f"error: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        say("interrupted; rerun the same command to resume")
        return fetch.EXIT_INTERRUPTED
    print(f"stage: {target.uri}: {outcome}", flush=True)
    return 0
