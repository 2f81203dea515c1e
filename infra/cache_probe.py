"""Which path the VM's model step will take, looked up at ``pulumi up`` with the deployer's credentials.

The VM takes the GCS path (startup/model.sh) for an object whose metadata does not contradict the
stack: a sha256 equal to the pinned one (or none: the VM then ties it to the hub's LFS sha256 after the
serve and completes the metadata), and a stored size matching the object's. Anything else sends it to
Hugging Face. Looking is best effort: no credentials, a missing
bucket or a slow API give an answer with a reason, never an error that stops the deployment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from infra.cold_start import COLD_START_HUB, COLD_START_STOCK, COLD_START_TOOLING

if TYPE_CHECKING:
    from google.cloud import storage

# A new member's cold start with the model from the bucket (the tooling image, or the stock image
# where none is baked) and from the hub (infra/cold_start.py).
COLD_START_GCS = f"{COLD_START_TOOLING}, {COLD_START_STOCK} on the stock image"
COLD_START_HF = COLD_START_HUB
COLD_START_UNKNOWN = f"{COLD_START_GCS} if the model is staged, else {COLD_START_HF}"
# A preview must not hang on the storage API: one bounded attempt.
PROBE_TIMEOUT_S = 15.0
STAGE_HINT = "run `qwen36 stage` to stage it, or let the VM self-stage it after its first boot"

CachePath = Literal["gcs", "huggingface", "unknown"]


@dataclass(frozen=True)
class CacheProbe:
    path: CachePath
    reason: str
    expected_cold_start: str

    def summary(self) -> str:
        return f"model from {self.path}: {self.reason}; expected cold start {self.expected_cold_start}"


def _hf(reason: str) -> CacheProbe:
    return CacheProbe("huggingface", reason, COLD_START_HF)


def _unknown(reason: str) -> CacheProbe:
    return CacheProbe("unknown", reason, COLD_START_UNKNOWN)


def probe_model_cache(
    bucket: str, object_name: str, expected_sha256: str, client: storage.Client | None = None
) -> CacheProbe:
    """Look for the staged model; ``expected_sha256`` may be empty (the hub's LFS sha256 is then used)."""
    uri = f"gs://{bucket}/{object_name}"
    try:
        from google.api_core import exceptions
        from google.auth import exceptions as auth_exceptions
        from google.cloud import storage
    except ImportError as exc:
        return _unknown(f"google-cloud-storage is not installed ({exc.name})")
    try:
        client = client or storage.Client()
        handle = client.bucket(bucket)
        blob = handle.get_blob(object_name, timeout=PROBE_TIMEOUT_S, retry=None)
        # GCS answers 404 for a missing bucket too; on a first deploy the bucket does not exist yet.
        if blob is None and not handle.exists(timeout=PROBE_TIMEOUT_S, retry=None):
            raise exceptions.NotFound(f"bucket {bucket}")
    except auth_exceptions.DefaultCredentialsError:
        return _unknown("no Google credentials to look in the bucket with")
    except exceptions.NotFound:
        return _hf(f"bucket gs://{bucket} does not exist yet; {STAGE_HINT}")
    except exceptions.Forbidden:
        return _unknown(f"the deployer's credentials cannot read {uri}")
    except (exceptions.GoogleAPIError, auth_exceptions.GoogleAuthError, OSError) as exc:
        return _unknown(f"could not look at {uri} ({exc.__class__.__name__})")
    if blob is None:
        return _hf(f"{uri} is not staged; {STAGE_HINT}")
    return _judge(uri, blob.size, blob.metadata or {}, expected_sha256)


def _judge(uri: str, size: int | None, metadata: dict[str, str], expected: str) -> CacheProbe:
    """The checks startup/model.sh makes on the VM (gcs_judge): the preview promises no path it won't take."""
    found_sha = metadata.get("sha256", "")
    found_size = metadata.get("size", "")
    if found_size and found_size != str(size):
        return _hf(
            f"{uri} holds {size} bytes but its metadata says {found_size} (a truncated upload); restage it"
        )
    if expected and found_sha != expected:
        return _hf(f"{uri} has sha256 {found_sha}, the stack expects {expected}; restage it")
    gigabytes = (size or 0) / 1e9
    if not found_sha:
        return CacheProbe(
            "gcs",
            f"{uri} ({gigabytes:.1f} GB) has no sha256 metadata: the VM serves it once it passed its "
            "CRC32C, checks it against the hub's LFS sha256 after the serve and completes the metadata",
            COLD_START_GCS,
        )
    return CacheProbe(
        "gcs", f"{uri} is staged ({gigabytes:.1f} GB, sha256 {found_sha[:12]}…)", COLD_START_GCS
    )
