"""``qwen36 stage``: put the model into the stack's bucket once, so boots take the fast path.

    qwen36 stage [--from-hf | --from-file PATH] [--stack S] [--bucket B] [--object O]

The bucket comes from ``pulumi stack output modelBucket``, the object name from the stack config
(``models/<modelRepo>/<modelFile>``, ``infra.model_cache.model_object_name``). The config is read from
``Pulumi.<stack>.yaml`` through ``infra.config.parse_config``, which fills in the same defaults as
``Pulumi.yaml`` and runs the same validation as ``pulumi up``; no Pulumi login is needed for it.

The expected sha256 is ``modelSha256`` when set; otherwise, from the hub, the file's LFS sha256 (the
same ``X-Linked-Etag`` the VM reads). A local file (``--from-file``) must be a GGUF of
``modelArchitecture``, and without ``modelSha256`` its size and sha256 must match the hub's record of
the pinned revision when the hub answers (its hash becomes the one the VM trusts); ``--force`` is
the named way past these two checks, never past a pinned ``modelSha256``/``modelSizeBytes``. The hub download
is huggingface_hub's. The upload is resumable (an interrupted run continues from the bytes GCS already
holds), the object gets ``sha256`` and ``size`` as custom metadata, and its crc32c is checked against
the local file. An object that already holds the same sha256, size and (when the local file is at
hand) CRC32C is left alone; one whose CRC32C differs from the verified file is replaced: that is how a
bad cache object is repaired.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qwen36.argtypes import stack_name
from qwen36.errors import Exit, UsageError
from qwen36.stage_common import (
    EXIT_INTERRUPTED,
    EXIT_VERIFY,
    ProgressCallback,
    Say,
    StageError,
    Target,
)

if TYPE_CHECKING:
    from rich.progress import Progress

    from infra.config import StackConfig

# GCS takes resumable chunks in multiples of 256 KiB; 16 MiB keeps a lost chunk cheap to resend.
# https://cloud.google.com/storage/docs/performing-resumable-uploads#chunked-upload
DEFAULT_CHUNK_MIB = 16
# A chunk is held in memory while it is sent.
MAX_CHUNK_MIB = 1024
PULUMI_TIMEOUT_S = 120
STACK_OUTPUT_BUCKET = "modelBucket"
HASH_BLOCK = 8 * 1024 * 1024
HUB_TIMEOUT_S = 30.0


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "qwen36-mtp-l4"


# ------------------------------------------------------------------------------ stack and config


def _pulumi(args: list[str], what: str) -> str:
    """Run the Pulumi CLI; a missing CLI or stack is a StageError naming the flag that avoids it."""
    command = "pulumi " + " ".join(args)
    if shutil.which("pulumi") is None:
        raise StageError(
            f"the Pulumi CLI is not installed, so {what} is unknown; pass it explicitly", Exit.MISSING_TOOL
        )
    try:
        done = subprocess.run(
            ["pulumi", *args], capture_output=True, text=True, timeout=PULUMI_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise StageError(
            f"`{command}` took over {PULUMI_TIMEOUT_S} s; pass {what} explicitly", Exit.UNREACHABLE
        ) from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        reason = detail[-1] if detail else f"exit {done.returncode}"
        raise StageError(f"`{command}` failed ({reason}); pass {what} explicitly", Exit.NOT_FOUND)
    return done.stdout.strip()


def selected_stack(stack: str | None) -> str:
    return stack or _pulumi(["stack", "--show-name"], "the stack (--stack NAME)")


def stack_bucket(stack: str) -> str:
    return _pulumi(["stack", "output", STACK_OUTPUT_BUCKET, "--stack", stack], "the bucket (--bucket NAME)")


def load_stack_config(stack: str, project_dir: Path) -> StackConfig:
    from infra.config import PROJECT, ConfigError, parse_config
    from qwen36.stack_file import read_config

    if not project_dir.is_dir():
        raise UsageError(f"--project-dir {project_dir}: not a directory (the folder holding Pulumi.yaml)")
    path = project_dir / f"Pulumi.{stack}.yaml"
    try:
        raw = read_config(path)
    except FileNotFoundError:
        raise StageError(
            f"no {path.name} in {project_dir}: is {stack!r} a stack of this project?", Exit.NOT_FOUND
        ) from None
    except OSError as exc:
        raise StageError(f"cannot read {path}: {exc}", Exit.CONFIG) from None
    ours = {key: value for key, value in raw.items() if str(key).startswith(f"{PROJECT}:")}
    try:
        return parse_config(ours)
    except ConfigError as exc:
        raise StageError(f"{path.name}: {exc}", Exit.CONFIG) from None


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
    force: bool = False,
) -> str:
    """Stage the model; returns "already staged", "uploaded" or "resumed"."""
    from qwen36 import stage_gcs

    client = stage_gcs.storage_client()
    bucket = stage_gcs.readable_bucket(client, target.bucket)
    if from_file is not None:
        path, sha256, size, crc32c = _local_source(cfg, from_file, say, progress, force)
    else:
        sha256, size = _hub_expectation(cfg)
        done, why = stage_gcs.staged_state(bucket, target.name, sha256, size)
        say(f"{target.uri}: {why}")
        if done:
            return "already staged"
        path = _hub_download(cfg, cache_dir / "models" / cfg.model_repo)
        actual, crc32c = _hash_file(path, progress, "sha256 + crc32c of the download")
        if actual != sha256:
            path.unlink(missing_ok=True)
            raise StageError(
                f"{path}: the hub sent sha256 {actual}, expected {sha256}; deleted it", EXIT_VERIFY
            )
        _check_gguf(cfg, path, force)
        say(f"{path}: sha256 {sha256} verified (kept for reruns; delete it once staged to free the space)")
    done, why = stage_gcs.staged_state(bucket, target.name, sha256, size, crc32c)
    say(f"{target.uri}: {why}")
    if done:
        return "already staged"
    with _task(progress, f"upload to {target.uri}", size) as update:
        return stage_gcs.upload(
            client, bucket, target, path, sha256, size, crc32c, cache_dir, chunk_size, say, update
        )


def _hub_expectation(cfg: StackConfig) -> tuple[str, int]:
    """The file's LFS sha256 and size from the hub, checked against modelSha256/modelSizeBytes."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    label = f"{cfg.model_repo}@{cfg.model_revision}/{cfg.model_file}"
    endpoint = os.environ.get("HF_ENDPOINT") or None
    url = hf_hub_url(cfg.model_repo, cfg.model_file, revision=cfg.model_revision, endpoint=endpoint)
    failures: tuple[type[Exception], ...] = (HfHubHTTPError, OSError, *_hub_transport_errors())
    try:
        meta = get_hf_file_metadata(url, timeout=HUB_TIMEOUT_S, endpoint=endpoint)
    except (EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError):
        raise StageError(
            f"{label} is not on the hub (modelRepo/modelFile/modelRevision)", Exit.NOT_FOUND
        ) from None
    except failures as exc:
        # huggingface_hub 2.x speaks httpx2: an unreachable hub raises its errors, not OSError.
        raise StageError(
            f"cannot read {label} from the hub ({type(exc).__name__}: {exc}); check the network "
            "(or HF_ENDPOINT) and rerun",
            Exit.UNREACHABLE,
        ) from None
    found = (meta.etag or "").lower()
    if len(found) != 64 or any(c not in "0123456789abcdef" for c in found):
        if not cfg.model_sha256:
            raise StageError(f"{label}: the hub gives no LFS sha256 (etag {meta.etag!r}); set modelSha256")
        found = cfg.model_sha256
    if cfg.model_sha256 and found != cfg.model_sha256:
        raise StageError(
            f"{label}: expected sha256 {cfg.model_sha256}, the hub says {found} "
            "(modelSha256 in the stack config)",
            EXIT_VERIFY,
        )
    size = meta.size or 0
    if cfg.model_size_bytes and size and size != cfg.model_size_bytes:
        raise StageError(
            f"{label}: expected {cfg.model_size_bytes} bytes, the hub says {size} "
            "(modelSizeBytes in the stack config)",
            EXIT_VERIFY,
        )
    return found, size or cfg.model_size_bytes


def _hub_transport_errors() -> tuple[type[Exception], ...]:
    """The HTTP errors huggingface_hub's own client raises (httpx2 in 2.x; httpx before)."""
    found: list[type[Exception]] = []
    for name in ("httpx2", "httpx"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        found.append(module.HTTPError)
    return tuple(found)


def _hub_download(cfg: StackConfig, local_dir: Path) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError

    try:
        local_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StageError(
            f"cannot create the cache directory {local_dir}: {exc.strerror} (--cache-dir)", Exit.LOCAL_IO
        ) from None
    failures: tuple[type[Exception], ...] = (HfHubHTTPError, OSError, *_hub_transport_errors())
    try:
        where = hf_hub_download(
            cfg.model_repo,
            cfg.model_file,
            revision=cfg.model_revision,
            local_dir=local_dir,
            endpoint=os.environ.get("HF_ENDPOINT") or None,
        )
    except failures as exc:
        raise StageError(f"the hub download stopped ({exc}); rerun to resume it", Exit.UNREACHABLE) from None
    return Path(where)


def _check_gguf(cfg: StackConfig, path: Path, force: bool) -> None:
    """The file must be a GGUF of the configured architecture: llama-server would refuse anything
    else on the VM, after the whole upload and a boot."""
    from qwen36.gguf_header import NotGguf, architecture

    try:
        found = architecture(path)
    except NotGguf as exc:
        problem = f"{path} is not a GGUF model file ({exc})"
    except OSError as exc:
        raise StageError(f"cannot read {path}: {exc.strerror}", Exit.LOCAL_IO) from None
    else:
        if found == cfg.model_architecture:
            return
        problem = (
            f"{path} is a GGUF of architecture {found!r}, not {cfg.model_architecture!r} (modelArchitecture)"
        )
    if force:
        return
    raise StageError(f"{problem}; not uploading it (--force stages it anyway)", EXIT_VERIFY)


def _check_against_hub(cfg: StackConfig, path: Path, size: int, sha256: str, say: Say, force: bool) -> None:
    """Without a pinned modelSha256 the staged file's hash becomes the one the VM trusts: it must be
    the hub's file of the pinned revision, whenever the hub can say so."""
    label = f"{cfg.model_repo}@{cfg.model_revision}/{cfg.model_file}"
    try:
        hub_sha, hub_size = _hub_expectation(cfg)
    except StageError as exc:
        if exc.exit_code == Exit.UNREACHABLE:
            _check_default_model_size(cfg, path, size, force)
            say(f"cannot compare {path} with the hub's {label} ({exc.message}); staging its own sha256")
            return
        if force:
            say(f"{exc.message}; staging {path} anyway (--force)")
            return
        raise StageError(f"{exc.message}; pin modelSha256, or pass --force", exc.exit_code) from None
    problems = []
    if hub_size and size != hub_size:
        problems.append(f"{size} bytes, the hub's file has {hub_size}")
    if sha256 != hub_sha:
        problems.append(f"sha256 {sha256}, the hub's is {hub_sha}")
    if not problems:
        say(f"{path}: matches the hub's {label} (sha256 {sha256})")
        return
    if force:
        say(f"{path}: differs from the hub's {label} ({'; '.join(problems)}); staging it anyway (--force)")
        return
    raise StageError(
        f"{path} is not the hub's {label}: {'; '.join(problems)}; stage that file, pin its sha256 as "
        "modelSha256, or pass --force",
        EXIT_VERIFY,
    )


def _local_source(
    cfg: StackConfig, path: Path, say: Say, progress: Progress | None, force: bool = False
) -> tuple[Path, str, int, str]:
    """A local file checked against the config: (path, sha256, size, crc32c)."""
    if not path.is_file():
        what = "a directory" if path.is_dir() else "not a readable file"
        raise UsageError(f"--from-file {path}: {what}; pass the .gguf file itself")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise StageError(f"cannot read {path}: {exc.strerror}", Exit.LOCAL_IO) from None
    _check_gguf(cfg, path, force)
    if cfg.model_size_bytes and size != cfg.model_size_bytes:
        raise StageError(
            f"{path}: expected {cfg.model_size_bytes} bytes (modelSizeBytes), the file has {size}",
            EXIT_VERIFY,
        )
    actual, crc32c = _hash_file(path, progress, "sha256 + crc32c of the file")
    expected = cfg.model_sha256
    if expected and actual != expected:
        raise StageError(
            f"{path}: expected sha256 {expected} (modelSha256), the file has {actual}; not uploading it",
            EXIT_VERIFY,
        )
    if not expected:
        _check_against_hub(cfg, path, size, actual, say, force)
    return path, actual, size, crc32c


def _check_default_model_size(cfg: StackConfig, path: Path, size: int, force: bool) -> None:
    """Where nothing pins the file and the hub cannot be asked, the default model's known size
    (infra/config.py NOMINAL_MODEL_BYTES) is the last check: a file far from it is not that model
    (issue 29: a 73-byte GGUF went up as it, exit 0)."""
    from infra.config import DEFAULT_MODEL_SIZE_TOLERANCE, NOMINAL_MODEL_BYTES

    if not cfg.default_model or cfg.model_size_bytes or force:
        return
    if abs(size - NOMINAL_MODEL_BYTES) > DEFAULT_MODEL_SIZE_TOLERANCE * NOMINAL_MODEL_BYTES:
        raise StageError(
            f"{path} has {size} bytes; the default model {cfg.model_file} has about "
            f"{NOMINAL_MODEL_BYTES / 1e9:.1f} GB, so this is not it; stage that file, or pass --force",
            EXIT_VERIFY,
        )


def _hash_file(path: Path, progress: Progress | None, label: str) -> tuple[str, str]:
    """sha256 (hex) and CRC32C (base64, as GCS reports it) in one read."""
    import google_crc32c

    sha = hashlib.sha256()
    crc = google_crc32c.Checksum()
    total = path.stat().st_size
    done = 0
    try:
        with _task(progress, label, total) as update, path.open("rb") as handle:
            while block := handle.read(HASH_BLOCK):
                sha.update(block)
                crc.update(block)
                done += len(block)
                update(done, total)
    except OSError as exc:
        raise StageError(f"cannot read {path}: {exc.strerror}", Exit.LOCAL_IO) from None
    return sha.hexdigest(), base64.b64encode(crc.digest()).decode("ascii")


# -------------------------------------------------------------------------------------- progress


@contextmanager
def _task(progress: Progress | None, label: str, total: int) -> Iterator[ProgressCallback]:
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


# Bucket names: 3-63 characters (222 with dots, 63 a part) of lowercase letters, digits, '-', '_'
# and '.', starting and ending with a letter or digit, not an IP address, never starting "goog".
# https://cloud.google.com/storage/docs/buckets#naming
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")


def bucket_name(text: str) -> str:
    parts = text.split(".")
    if (
        not _BUCKET_RE.fullmatch(text)
        or any(not 1 <= len(p) <= 63 for p in parts)
        or ("." not in text and len(text) > 63)
        or text.startswith("goog")
        or re.fullmatch(r"[0-9.]+", text)
    ):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a bucket name: 3-63 lowercase letters, digits, '-', '_' or '.', starting "
            "and ending with a letter or digit (https://cloud.google.com/storage/docs/buckets#naming)"
        )
    return text


def object_name(text: str) -> str:
    """An object name the VM's path and `gcloud storage` take as it is: at most 1024 bytes, no control
    character, no wildcard ('*?[]#'), no leading '/', no '.' or '..' part.
    https://cloud.google.com/storage/docs/objects#naming"""
    parts = text.split("/")
    if (
        not text
        or len(text.encode("utf-8", "surrogatepass")) > 1024
        or any(not c.isprintable() or c in "*?[]#\\" for c in text)
        or text.startswith("/")
        or any(p in (".", "..", "") for p in parts)
    ):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an object name for the model: a relative path such as "
            "models/owner/name/file.gguf, without '.', '..' or empty parts, control characters or "
            "wildcards (https://cloud.google.com/storage/docs/objects#naming)"
        )
    return text


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "stage",
        help="put the model into the stack's GCS bucket (resumable, verified, idempotent)",
        description="Put the model into the stack's GCS bucket so the VM fetches it at GCS speed.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--from-hf", action="store_true", help="download it from the hub first (default)")
    source.add_argument("--from-file", type=Path, metavar="PATH", help="upload a local GGUF instead")
    parser.add_argument("--stack", type=stack_name, help="Pulumi stack (default: the selected one)")
    parser.add_argument(
        "--bucket", type=bucket_name, help="bucket name (default: `pulumi stack output modelBucket`)"
    )
    parser.add_argument(
        "--object", type=object_name, help="object name (default: models/<modelRepo>/<modelFile>)"
    )
    parser.add_argument("--project-dir", type=Path, default=Path.cwd(), help="where Pulumi.yaml lives")
    parser.add_argument("--cache-dir", type=Path, help="downloads and upload state (~/.cache/qwen36-mtp-l4)")
    parser.add_argument(
        "--chunk-mib", type=_chunk_mib, default=DEFAULT_CHUNK_MIB, help="upload chunk size, MiB (1-1024)"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="stage a --from-file that is not a GGUF of modelArchitecture, or that the hub's record "
        "contradicts (never past a pinned modelSha256)",
    )
    parser.set_defaults(func=run)


def _chunk_mib(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of MiB") from None
    if not 1 <= value <= MAX_CHUNK_MIB:
        raise argparse.ArgumentTypeError(
            f"--chunk-mib {text}: must be a positive number of MiB up to {MAX_CHUNK_MIB}"
        )
    return value


def run(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(f"stage: {line}", file=sys.stderr, flush=True)

    try:
        stack = selected_stack(args.stack)
        cfg = load_stack_config(stack, args.project_dir)
        target = Target(args.bucket or stack_bucket(stack), args.object or object_name_for(cfg))
        cache_dir = args.cache_dir or default_cache_dir()
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StageError(
                f"cannot create the cache directory {cache_dir}: {exc.strerror} (--cache-dir)", Exit.LOCAL_IO
            ) from None
        with _progress() as progress:
            outcome = stage(
                cfg,
                target,
                args.from_file,
                cache_dir,
                args.chunk_mib * 1024 * 1024,
                say,
                progress,
                force=args.force,
            )
    except KeyboardInterrupt:
        say("interrupted; rerun the same command to resume")
        return EXIT_INTERRUPTED
    print(f"stage: {target.uri}: {outcome}", flush=True)
    return 0
