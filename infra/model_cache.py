"""The same-region GCS bucket that caches the GGUF, so a boot pulls it at GCS speed, not the hub's.

It outlives ``pulumi destroy`` by default: re-fetching 22 GB from Hugging Face costs minutes on
every fresh deploy, while storing it costs cents a month. So that the next ``pulumi up`` of the
stack finds it again, the bucket has a fixed name per project, stack and region and is adopted
(``import_``) whenever it already exists and carries this stack's labels, whatever
``keepModelBucket`` says now (it may have been true when the bucket was kept). An import whose
inputs differ succeeds and then updates the bucket to the program's inputs (Pulumi's import
option, https://www.pulumi.com/docs/iac/concepts/options/import/, since pulumi/pulumi#19339).
A bucket of that name without our labels is refused with a message: it is not ours to adopt,
nor to empty on destroy.

Bucket names are global and public, so the name carries a digest of the project id, never the
id itself. https://cloud.google.com/storage/docs/buckets#naming
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from infra.cache_probe import CacheProbe, probe_model_cache
from infra.config import StackConfig

MODELS_PREFIX = "models"
# The verdict object's name after the model's; its temporary copies add VERDICT_TEMP_INFIX + an id.
VERDICT_SUFFIX = ".verdict.json"
VERDICT_TEMP_INFIX = ".tmp-"
# Bucket names: 3-63 characters of [a-z0-9._-], starting and ending with a letter or digit, not
# starting with "goog" and not containing "google" or a close misspelling.
# https://cloud.google.com/storage/docs/buckets#naming
MAX_BUCKET_NAME = 63
_BUCKET_UNSAFE = re.compile(r"[^a-z0-9-]+")
_GOOGLE_LIKE = re.compile(r"g[o0]{2}g[l1]e")
_RESERVED_PREFIX = "goog"
_SAFE_PREFIX = "qwen36-"
# 12 hex digits (48 bits) of the project's sha256: unique among any number of projects we will meet.
_DIGEST_CHARS = 12
# A cache: an overwritten or deleted 22 GB object is not worth keeping (billed) for the default
# 7 days of soft delete. https://cloud.google.com/storage/docs/soft-delete
SOFT_DELETE_RETENTION_S = 0
# The labels that say a bucket is this stack's (infra's labels: app, stack).
OWNER_LABELS = ("app", "stack")


def model_object_name(cfg: StackConfig) -> str:
    """The object that holds the model inside the bucket: ``models/<repo>/<file>``."""
    return f"{MODELS_PREFIX}/{cfg.model_repo}/{cfg.model_file}"


def verdict_object_name(cfg: StackConfig) -> str:
    """The calibration verdict, next to the model it was measured with (startup/calibrate.py)."""
    return f"{model_object_name(cfg)}{VERDICT_SUFFIX}"


def model_bucket_name(project: str, deployment: str, region: str) -> str:
    """``<deployment>-<region>-<digest of the project>``, e.g. ``qwen36-dev-us-central1-1f2e3d4c5b6a``.

    The project id stays out of the public name; its digest keeps the name unique per project
    (deployment and region keep it unique per stack). A readable part that would push the name
    past 63 characters is cut, "google"-like words are dropped, and a name that would start with
    "goog" gets our prefix.
    """
    digest = hashlib.sha256(project.encode()).hexdigest()[:_DIGEST_CHARS]
    readable = _BUCKET_UNSAFE.sub("-", f"{deployment}-{region}".lower())
    readable = _GOOGLE_LIKE.sub("g", readable).strip("-")
    if readable.startswith(_RESERVED_PREFIX):
        readable = _SAFE_PREFIX + readable
    readable = readable[: MAX_BUCKET_NAME - _DIGEST_CHARS - 1].rstrip("-")
    return f"{readable}-{digest}" if readable else f"{_SAFE_PREFIX}{digest}"


class BucketNotOursError(ValueError):
    pass


def existing_bucket(project: str, bucket: str, owner: Mapping[str, str]) -> str | None:
    """The import id of this stack's bucket when it exists (kept by an earlier deployment), else None.

    Raises :class:`BucketNotOursError` when a bucket of that name exists in the project without
    the ``owner`` labels. Listing needs only storage.buckets.list, which creating the bucket needs
    anyway. A failed listing is not caught: without it the program cannot tell adopting from
    creating, and a guess would fail later at the create with a 409. (The Cloud Storage API it
    calls is on in every new project: https://cloud.google.com/service-usage/docs/enabled-service#default)
    """
    listed = gcp.storage.get_buckets(project=project, prefix=bucket)
    found = next((b for b in listed.buckets or [] if b.name == bucket), None)
    if found is None:
        return None
    labels = dict(found.labels or {})
    wanted = {key: owner[key] for key in OWNER_LABELS if key in owner}
    mismatched = {key: labels.get(key) for key, value in wanted.items() if labels.get(key) != value}
    if mismatched:
        shown = ", ".join(f"{k}={v}" for k, v in wanted.items())
        have = ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "none"
        raise BucketNotOursError(
            f"bucket gs://{bucket} already exists in project {project} but is not this stack's "
            f"(it lacks the labels {shown}; its labels: {have}). The program neither adopts nor "
            f"empties a bucket it did not make: delete or rename that bucket, or deploy this "
            f"stack under another stack name."
        )
    return bucket


@dataclass
class ModelCacheArgs:
    cfg: StackConfig
    project: str
    deployment: str
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


class ModelCache(pulumi.ComponentResource):
    """A private bucket: uniform access (no object ACLs) and public access prevention enforced."""

    bucket: gcp.storage.Bucket
    bucket_name: pulumi.Output[str]
    model_object: str
    model_uri: pulumi.Output[str]
    probe: CacheProbe

    def __init__(self, name: str, args: ModelCacheArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:ModelCache", name, None, opts)
        cfg = args.cfg
        keep = cfg.keep_model_bucket
        bucket_name = model_bucket_name(args.project, args.deployment, cfg.region)
        # Adopted whenever it exists, kept or not: it was kept when keepModelBucket was true then.
        adopt = existing_bucket(args.project, bucket_name, args.labels)
        self.bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            project=args.project,
            name=bucket_name,
            location=cfg.region.upper(),
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            # A kept bucket is only dropped from the state (retain_on_delete), never emptied; an
            # opted-out one must go even with the model in it, or destroy would fail.
            force_destroy=not keep,
            soft_delete_policy=gcp.storage.BucketSoftDeletePolicyArgs(
                retention_duration_seconds=SOFT_DELETE_RETENTION_S
            ),
            labels=dict(args.labels),
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=list(args.depends_on), retain_on_delete=keep, import_=adopt
            ),
        )
        self.bucket_name = self.bucket.name
        self.model_object = model_object_name(cfg)
        self.model_uri = self.bucket.name.apply(lambda bucket: f"gs://{bucket}/{self.model_object}")
        # Looked up with the deployer's credentials, best effort: tells the preview which path the
        # VM's model step will take (the bucket's name is fixed, so it is known before it exists).
        self.probe = probe_model_cache(bucket_name, self.model_object, cfg.model_sha256)
        pulumi.log.info(f"model cache: {self.probe.summary()}", resource=self)
        self.register_outputs(
            {
                "bucket_name": self.bucket_name,
                "model_uri": self.model_uri,
                "cache_path": self.probe.path,
                "cache_note": self.probe.summary(),
            }
        )
