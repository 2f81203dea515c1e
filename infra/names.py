"""The names this program derives for GCE and IAM from the stack's name, within their length rules."""

from __future__ import annotations

import hashlib
import re

# Service-account ids: 6-30 characters. https://cloud.google.com/iam/docs/service-accounts-create
MAX_ACCOUNT_ID = 30
_NAME_UNSAFE = re.compile(r"[^a-z0-9-]+")
_HASH_SUFFIX = re.compile(r"-[0-9a-f]{8}$")


def deployment_name(stack: str, *, max_length: int = 30) -> str:
    """A GCE-safe name for this stack's resources, e.g. ``qwen36-dev``, distinct for every stack name.

    Service-account ids allow 6-30 characters of ``[a-z0-9-]``, starting with a letter and not
    ending with '-', the tightest rule among the names we derive, so one slug fits them all.
    https://cloud.google.com/iam/docs/service-accounts-create#creating

    A stack name that is already such a slug and fits is used as it is. Any other (upper case, other
    characters, too long) gets ``-<8 hex>`` of its sha256, so ``Dev`` and ``dev``, or two long names
    alike in their first characters, never share resource names. A name kept as it is never ends in
    ``-<8 hex>`` (one that does is hashed too), so the two forms cannot meet; two hashed names meet
    only if their sha256 prefixes collide (one chance in 2**32).
    """
    slug = _NAME_UNSAFE.sub("-", stack.lower()).strip("-") or "stack"
    plain = f"qwen36-{slug}"
    if slug == stack and len(plain) <= max_length and not _HASH_SUFFIX.search(plain):
        return plain
    digest = hashlib.sha256(stack.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    head = plain[: max_length - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}"


def suffixed_id(deployment: str, suffix: str, *, max_length: int = MAX_ACCOUNT_ID) -> str:
    """``deployment`` + ``suffix`` (``-door``, ``-bake``) as a service-account id of at most 30 characters.

    A name that fits is the two joined. A longer one keeps its head and ends with ``-<8 hex>`` of the
    whole deployment name's sha256 before the suffix: cutting the name's tail would cut its own hash
    (a hashed deployment name ends with it), which left 3 hex digits, a 1/4096 chance that two long
    stack names of one project share the door's or the builder's account."""
    if len(deployment) + len(suffix) <= max_length:
        return deployment + suffix
    digest = hashlib.sha256(deployment.encode("utf-8")).hexdigest()[:8]
    head = deployment[: max_length - len(suffix) - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}{suffix}"
