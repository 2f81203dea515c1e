"""The documented rules of the values the stack config passes to GCE, the hub or a shell, one
function each, with the rule's link. ``infra/config.py`` calls them where each key is read; each
raises ``ValueError`` with what is allowed, and the config turns that into the key's one line.

Plain functions and numbers (no pydantic, no Pulumi), so the policy rules and the CLI can share them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

# A project id: 6-30 characters of lowercase letters, digits and hyphens, starting with a letter,
# not ending with a hyphen, never containing a restricted string such as google, null, undefined or
# ssl. https://cloud.google.com/resource-manager/docs/creating-managing-projects#before_you_begin
# Older projects may carry a domain prefix ("example.com:my-project"), which the APIs accept in a path.
# https://cloud.google.com/resource-manager/docs/creating-managing-projects#identifying_projects
_PROJECT_ID_RE = re.compile(r"^(?:[a-z0-9][a-z0-9.-]{0,61}[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_RESTRICTED_IN_PROJECT_IDS = ("google", "null", "undefined", "ssl")

# Image and image-family names follow RFC 1035: 1-63 characters, a lowercase letter first, then
# lowercase letters, digits and hyphens, not ending with a hyphen.
# https://cloud.google.com/compute/docs/reference/rest/v1/images (name, family)
_RFC1035_RE = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")

# A hub revision is a branch or tag name, or a commit's 40 hex digits
# (https://huggingface.co/docs/huggingface_hub/guides/download#from-specific-version). Branch and
# tag names are git refs (https://git-scm.com/docs/git-check-ref-format): no space, control
# character, '~^:?*[\', no '..', '@{' or '//', not ending in '/', '.' or '.lock'. The value is also
# pasted into the boot script (quoted), so we allow only the plain subset: letters, digits and
# '._/-', starting with a letter or digit; refs/pr/N (a pull request's head) fits it.
_REVISION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")

ALL_IPV4 = ipaddress.IPv4Network("0.0.0.0/0")
# The address blocks that are not the public internet (IANA's special-purpose registry: private,
# shared, loopback, link-local, documentation, benchmarking, multicast, reserved), so "the public
# internet" is every other address. https://www.iana.org/assignments/iana-ipv4-special-registry
NOT_PUBLIC = tuple(
    ipaddress.IPv4Network(cidr)
    for cidr in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
        "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
        "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    )
)  # fmt: skip
PUBLIC_IPV4_ADDRESSES = ALL_IPV4.num_addresses - sum(
    n.num_addresses for n in ipaddress.collapse_addresses(NOT_PUBLIC)
)
# The most public addresses sourceRanges may admit without allowPublicInternet: one /8's worth,
# 2**24 addresses, ~0.45 % of the public IPv4 space. Why there: a /8 is the largest block IANA ever
# handed one organization, so no list of one user's own clients (offices, VPNs, a cloud region's
# egress ranges) needs more; past it the list is a share of the internet, where scanners that sweep
# all of IPv4 in minutes (masscan, zmap) find the port just the same. The exact cover it replaces
# was bypassed by leaving one address out (issue 29: 0.0.0.0/0 minus 8.8.8.8/32 as 32 CIDRs).
MAX_PRIVATE_SHARE_ADDRESSES = 2**24
# A VPC firewall rule takes at most 5,000 source ranges ("Source IP ranges per firewall rule",
# the system limits of https://cloud.google.com/firewall/docs/quotas#per_firewall_rule).
MAX_FIREWALL_SOURCE_RANGES = 5000
# Cloud Armor matches at most 10 ranges per rule (infra/fleet.py splits the list into such rules)
# and a project holds at most 200 rules across its global security policies by default (the
# SECURITY_POLICY_RULES quota, https://cloud.google.com/armor/quotas); the fleet's policy adds one
# default-deny rule, and we keep the rest of the quota for nothing else, so 199 allow rules.
ARMOR_RANGES_PER_RULE = 10
ARMOR_RULES_PER_PROJECT = 200
MAX_ARMOR_SOURCE_RANGES = (ARMOR_RULES_PER_PROJECT - 1) * ARMOR_RANGES_PER_RULE


def check_project_id(value: str, *, new_project_rules: bool = True) -> str:
    """A project id as the Resource Manager documents it. ``new_project_rules``: refuse the restricted
    strings too (Google's own image projects, e.g. google-containers, predate that rule)."""
    bare = value.rpartition(":")[2]
    if not _PROJECT_ID_RE.fullmatch(value):
        raise ValueError(
            "must be a project id: 6-30 lowercase letters, digits and hyphens, starting with a letter "
            "and not ending with a hyphen (https://cloud.google.com/resource-manager/docs/"
            "creating-managing-projects)"
        )
    if new_project_rules:
        for word in _RESTRICTED_IN_PROJECT_IDS:
            if word in bare:
                raise ValueError(f"a project id cannot contain the restricted string {word!r}")
    return value


# Regions are named <continent>-<area><number> (https://cloud.google.com/compute/docs/regions-zones).
_REGION_RE = re.compile(r"[a-z]+-[a-z]+[0-9]+")


def check_region(value: str) -> str:
    if not _REGION_RE.fullmatch(value):
        raise ValueError(
            "must be a region name such as 'us-central1' (https://cloud.google.com/compute/docs/regions-zones)"
        )
    return value


def check_rfc1035(value: str, what: str) -> str:
    if not _RFC1035_RE.fullmatch(value):
        raise ValueError(
            f"must be {what}: 1-63 lowercase letters, digits and hyphens, starting with a letter and "
            "not ending with a hyphen (RFC 1035; https://cloud.google.com/compute/docs/reference/rest/v1/images)"
        )
    return value


def check_revision(value: str) -> str:
    if COMMIT_RE.fullmatch(value):
        return value
    if (
        not _REVISION_RE.fullmatch(value)
        or ".." in value
        or "//" in value
        or value.endswith(("/", ".", ".lock"))
    ):
        raise ValueError(
            "must be a hub branch or tag name (letters, digits, '.', '_', '/', '-'; no '..') or a "
            "commit's 40 hex digits (https://git-scm.com/docs/git-check-ref-format)"
        )
    return value


def parse_cidr(cidr: str) -> ipaddress.IPv4Network:
    """One sourceRanges entry: an IPv4 address or ``address/prefix``; a netmask (``/255.0.0.0``) or
    host bits set are refused, so what reaches the firewall is exactly what was written."""
    try:
        network = ipaddress.ip_network(cidr, strict=True)
    except ValueError as exc:
        raise ValueError(f"{cidr!r} is not a CIDR range such as '203.0.113.7/32' ({exc})") from None
    if network.version != 4:
        raise ValueError(f"{cidr!r}: only IPv4 ranges are supported (the VM has an IPv4 address)")
    _, slash, prefix = cidr.partition("/")
    if slash and not (prefix.isascii() and prefix.isdigit()):
        raise ValueError(f"{cidr!r}: write the prefix length, e.g. {str(network)!r}, not a netmask")
    assert isinstance(network, ipaddress.IPv4Network)
    return network


def public_addresses(ranges: Sequence[str]) -> int:
    """How many public IPv4 addresses the union of ``ranges`` admits (overlaps counted once)."""
    networks = []
    for cidr in ranges:
        try:
            networks.append(parse_cidr(cidr))
        except ValueError:
            continue  # refused by its own validator
    union = list(ipaddress.collapse_addresses(networks))
    admitted = sum(n.num_addresses for n in union)
    for block in ipaddress.collapse_addresses(NOT_PUBLIC):
        admitted -= sum(overlap.num_addresses for n in union if (overlap := _overlap(n, block)) is not None)
    return admitted


def _overlap(a: ipaddress.IPv4Network, b: ipaddress.IPv4Network) -> ipaddress.IPv4Network | None:
    if a.subnet_of(b):
        return a
    if b.subnet_of(a):
        return b
    return None


def exposes_public_internet(ranges: Sequence[str]) -> bool:
    """Whether ``ranges`` admit more than one /8's worth of public addresses (MAX_PRIVATE_SHARE_ADDRESSES)."""
    return public_addresses(ranges) > MAX_PRIVATE_SHARE_ADDRESSES


def covers_public_internet(ranges: Sequence[str]) -> bool:
    """Whether the union of ``ranges`` holds every public IPv4 address."""
    return public_addresses(ranges) == PUBLIC_IPV4_ADDRESSES


def check_range_count(ranges: Sequence[str], *, fleet: bool) -> None:
    limit, where, link = (
        (
            MAX_ARMOR_SOURCE_RANGES,
            "Cloud Armor policy",
            "199 rules of 10; https://cloud.google.com/armor/quotas",
        )
        if fleet
        else (MAX_FIREWALL_SOURCE_RANGES, "firewall rule", "https://cloud.google.com/firewall/docs/quotas")
    )
    if len(ranges) > limit:
        raise ValueError(
            f"{len(ranges)} ranges are more than one {where} takes ({limit}: {link}); merge them into "
            "fewer, larger CIDR ranges"
        )
