"""GCE's naming rules: resource names, labels, network tags."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from infra.policy.core import MAX_GCE_NAME, PolicyContext, Resource, _instances

_RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _bad_gce_name(name: str, most: int) -> bool:
    """Not a GCE name: at most ``most`` characters, RFC 1035 (a lowercase letter, then letters,
    digits and '-', not ending in '-')."""
    return len(name) > most or not _RFC1035.match(name)


# The provider's name_prefix takes up to 54 characters, but past 37 it appends a shortened suffix
# "more prone to collisions" (pulumi-gcp RegionInstanceTemplate.name_prefix, from
# terraform-provider-google-beta): a replacement template could then clash with the old one.
MAX_NAME_PREFIX = 37
# https://cloud.google.com/compute/docs/labeling-resources#requirements (ASCII here: GCE also
# takes international lowercase letters, which no name of ours uses).
MAX_LABELS = 64
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")


def gce_names_valid(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """Compute Engine names are RFC 1035 names of 1-63 characters; a template's namePrefix at most 37."""
    if not resource.type.startswith("gcp:compute/"):
        return
    name = resource.inputs.get("name")
    if isinstance(name, str) and _bad_gce_name(name, MAX_GCE_NAME):
        yield f"name {name!r} is not an RFC 1035 name of 1-{MAX_GCE_NAME} characters"
    prefix = resource.inputs.get("namePrefix")
    if isinstance(prefix, str) and (
        len(prefix) > MAX_NAME_PREFIX or not re.match(r"^[a-z][-a-z0-9]*$", prefix)
    ):
        yield f"namePrefix {prefix!r} must be lowercase RFC 1035 and at most {MAX_NAME_PREFIX} characters"


def labels_valid(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """Labels: at most 64; keys start with a lowercase letter; keys and values at most 63 of [a-z0-9_-]."""
    labels = resource.inputs.get("labels")
    if not isinstance(labels, Mapping):
        return
    if len(labels) > MAX_LABELS:
        yield f"{len(labels)} labels, more than {MAX_LABELS}"
    for key, value in labels.items():
        if not _LABEL_KEY.match(str(key)):
            yield f"label key {key!r} is not 1-63 of [a-z0-9_-] starting with a letter"
        if isinstance(value, str) and not _LABEL_VALUE.match(value):
            yield f"label {key}={value!r}: a value is at most 63 of [a-z0-9_-]"


@_instances
def network_tags_valid(inputs: Mapping[str, Any]) -> Iterator[str]:
    """Network tags are RFC 1035 names of 1-63 characters."""
    for tag in inputs.get("tags") or []:
        if isinstance(tag, str) and _bad_gce_name(tag, MAX_GCE_NAME):
            yield f"network tag {tag!r} is not an RFC 1035 name of 1-{MAX_GCE_NAME} characters"
