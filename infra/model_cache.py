"""The same-region GCS bucket that caches the GGUF, so a boot pulls it at GCS speed, not the hub's.

It outlives ``pulumi destroy`` by default: re-fetching 22 GB from Hugging Face costs minutes on
every fresh deploy, while storing it costs cents a month. So that the next ``pulumi up`` of the
stack finds it again, the bucket has a fixed name per project, stack and region and is adopted
(``import_``) when it already exists.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from infra.config import StackConfig
from qwen36.cache_probe import CacheProbe, probe_model_cache

MODELS_PREFIX = "models"
# Bucket names: 3-63 characters of [a-z0-9._-], starting and ending with a letter or digit.
# https://cloud.google.com/storage/docs/buckets#naming
MAX_BUCKET_NAME = 63
_BUCKET_UNSAFE = re.compile(r"[^a-z0-9-]+")
_DIGEST_CHARS = 8


def model_object_name(cfg: StackConfig) -> str:
    """The object that holds the model inside the bucket: ``models/<repo>/<file>``."""
    return f"{MODELS_PREFIX}/{cfg.model_repo}/{cfg.model_file}"


def model_bucket_name(project: str, deployment: str, region: str) -> str:
    """``<project>-<deployment>-<region>``; project ids are globally unique, so the name is free.

    Domain-scoped project ids (``example.com:proj``) lose their ':' and '.'; a name over 63
    characters is cut and ends in a digest of the whole, so that two long names stay distinct.
    """
    full = _BUCKET_UNSAFE.sub("-", f"{project}-{deployment}-{region}".lower()).strip("-")
    if len(full) <= MAX_BUCKET_NAME:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:_DIGEST_CHARS]
    return f"{full[: MAX_BUCKET_NAME - _DIGEST_CHARS - 1].rstrip('-')}-{digest}"


def kept_bucket(project: str, bucket: str) -> str | None:
    """The import id of a bucket of this name that an earlier deployment kept, if there is one.

    Listing needs only storage.buckets.list, which creating the bucket needs anyway. A failed
    listing is not caught: without it the program cannot tell adopting from creating, and a guess
    would fail later at the create with a 409. (The Cloud Storage API it calls is on in every new
    project: https://cloud.google.com/service-usage/docs/enabled-service#default)
    """
    listed = gcp.storage.get_buckets(project=project, prefix=bucket)
    return bucket if any(b.name == bucket for b in listed.buckets or []) else None


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
        # Only a kept bucket is adopted: its inputs then match what created it (forceDestroy false).
        adopt = kept_bucket(args.project, bucket_name) if keep else None
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
