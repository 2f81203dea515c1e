"""Cloud Storage's and Secret Manager's rules: a private bucket, a secret kept out of plain inputs."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from infra.policy.core import LOCAL_COMMAND, PolicyContext, Resource

BUCKET = "gcp:storage/bucket:Bucket"
SECRET_VERSION = "gcp:secretmanager/secretVersion:SecretVersion"  # noqa: S105 (a type token)
RANDOM_PASSWORD = "random:index/randomPassword:RandomPassword"  # noqa: S105 (a type token)


def private_bucket(resource: Resource, _: PolicyContext) -> Iterator[str]:
    if resource.type != BUCKET:
        return
    if resource.inputs.get("uniformBucketLevelAccess") is not True:
        yield "uniformBucketLevelAccess must be true"
    if resource.inputs.get("publicAccessPrevention") != "enforced":
        yield "publicAccessPrevention must be 'enforced'"


def secret_stays_secret(resource: Resource, ctx: PolicyContext) -> Iterator[str]:
    if resource.type in {SECRET_VERSION, RANDOM_PASSWORD}:
        return
    for path, value in _strings(resource.inputs, ""):
        if resource.type == LOCAL_COMMAND and path.startswith("environment."):
            # The health gate's own process on the deployer's machine; Pulumi keeps it encrypted in state.
            continue
        if any(secret and secret in value for secret in ctx.secrets):
            yield f"a secret value appears in plain text at {path or '<inputs>'}"


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")


# https://cloud.google.com/storage/docs/buckets#naming
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
_GOOGLE_LIKE = re.compile(r"g[o0]{2}g[l1]e")


def valid_bucket_name(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """GCS's naming rules, which GCS checks only at create time.
    https://cloud.google.com/storage/docs/buckets#naming"""
    if resource.type != BUCKET:
        return
    name = resource.inputs.get("name")
    if not isinstance(name, str):
        yield "no fixed bucket name: a later deploy could not find (adopt) the kept bucket"
        return
    if not _BUCKET_NAME.match(name) or ".." in name:
        yield f"bucket name {name!r} is not 3-63 characters of [a-z0-9._-] starting and ending alphanumeric"
    if name.startswith("goog"):
        yield f"bucket name {name!r} starts with 'goog'"
    if _GOOGLE_LIKE.search(name):
        yield f"bucket name {name!r} contains 'google' or a close misspelling"


SECRET = "gcp:secretmanager/secret:Secret"  # noqa: S105 (a type token)
# Soft delete: 0 (off) or 7-90 days. https://cloud.google.com/storage/docs/soft-delete
SOFT_DELETE_RANGE_S = (7 * 86400, 90 * 86400)
# https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets/create (secretId)
_SECRET_ID = re.compile(r"^[A-Za-z0-9_-]{1,255}$")


def soft_delete_retention_valid(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """A bucket's soft-delete retention is 0 (off) or between 7 and 90 days."""
    if resource.type != BUCKET:
        return
    seconds = (resource.inputs.get("softDeletePolicy") or {}).get("retentionDurationSeconds")
    low, high = SOFT_DELETE_RANGE_S
    if seconds is not None and seconds != 0 and not low <= seconds <= high:
        yield f"softDeletePolicy.retentionDurationSeconds {seconds:g} is neither 0 nor {low}-{high}"


def secret_id_valid(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """A Secret Manager secret id is 1-255 characters of [A-Za-z0-9_-]."""
    secret_id = resource.inputs.get("secretId") if resource.type == SECRET else None
    if isinstance(secret_id, str) and not _SECRET_ID.match(secret_id):
        yield f"secretId {secret_id!r} is not 1-255 characters of [A-Za-z0-9_-]"
