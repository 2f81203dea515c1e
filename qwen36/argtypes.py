"""argparse ``type=`` functions that refuse what would make a command hang or misbehave later:
NaN and infinity (``float("nan")`` compares false with everything, so ``--duration nan`` never
ends), negative counts, out-of-range ports and sizes, and output paths that cannot be written
(checked before a run, so its results are not lost at the end).

Each raises ``argparse.ArgumentTypeError``, which the parser turns into its one usage line.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path

STDOUT = "-"


def _number(text: str, kind: Callable[[str], float | int]) -> float | int:
    try:
        value = kind(text)
    except (ValueError, OverflowError):
        noun = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive_float(text: str) -> float:
    value = float(_number(text, float))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value


def int_range(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(_number(text, int))
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not between {low} and {high}")
        return value

    parse.__name__ = f"integer {low}-{high}"
    return parse


port = int_range(1, 65535)


def writable_file(suffix: str = "") -> Callable[[str], str]:
    """An output file (or ``-`` for stdout) that can be created or replaced, checked now."""

    def parse(text: str) -> str:
        if text == STDOUT:
            return text
        problem = output_problem(Path(text), suffix)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return text

    parse.__name__ = "output path"
    return parse


def output_problem(path: Path, suffix: str = "") -> str | None:
    """Why ``path`` cannot take a report, or None. Nothing is created here."""
    if not str(path).strip():
        return "an empty path"
    if suffix and path.suffix.lower() != suffix:
        return f"{str(path)!r} does not end in {suffix} (the file is written under exactly this name)"
    if path.is_dir():
        return f"{str(path)!r} is a directory; name a file in it"
    parent = path.parent if str(path.parent) else Path()
    if not parent.is_dir():
        return f"{str(parent)!r} does not exist; create it or choose another path"
    if path.exists():
        if not os.access(path, os.W_OK):
            return f"{str(path)!r} is not writable"
    elif not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create files in {str(parent)!r} (permission denied)"
    return None


def bounded_float(high: float, what: str = "") -> Callable[[str], float]:
    """A positive finite number no larger than ``high``: ``1e300`` seconds overflows the clock and
    the socket timeout it reaches (``OverflowError``), long before any wait could end."""

    def parse(text: str) -> float:
        value = positive_float(text)
        if value > high:
            raise argparse.ArgumentTypeError(f"{text!r} is more than {high:g}{what}")
        return value

    parse.__name__ = f"number up to {high:g}"
    return parse


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be sent to (httpx refuses it or raises on it), or None."""
    from urllib.parse import urlsplit

    if not url.isascii() or any(ord(c) < 33 or ord(c) == 127 for c in url):
        return f"{url!r} holds a space, a control or a non-ASCII character"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (parsed only to refuse a bad one: urlsplit checks it lazily)
    except ValueError as exc:
        return f"{url!r} is not a URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return f"{url!r}: give an http:// or https:// URL"
    if not parts.hostname:
        return f"{url!r} names no host"
    return None


def http_url(text: str) -> str:
    problem = url_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


http_url.__name__ = "URL"


def api_key_problem(key: str) -> str | None:
    """Why ``key`` cannot travel in an ``Authorization: Bearer`` header, or None.

    A bearer token is printable ASCII without spaces (RFC 6750 section 2.1's b64token is narrower);
    a non-ASCII key fails in the HTTP client's header encoding (UnicodeEncodeError), and one with a
    newline is refused by it as a malformed header, which looked like a network failure."""
    if not key.isascii():
        return "holds a non-ASCII character, which no HTTP header carries; copy the key again"
    if any(ord(c) < 33 or ord(c) == 127 for c in key):
        return "holds a space, a newline or a control character; copy the key again (without the newline)"
    return None


def _name_type(check: Callable[[str], object], what: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        try:
            check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}: {exc}") from None
        return text

    parse.__name__ = what
    return parse


def _project(text: str) -> None:
    from infra.config_rules import check_project_id

    check_project_id(text, new_project_rules=False)


def _region(text: str) -> None:
    from infra.config_rules import check_region

    check_region(text)


def _group(text: str) -> None:
    from infra.config_rules import check_rfc1035

    check_rfc1035(text, "a GCE resource name")


def _zone(text: str) -> None:
    from infra.config_rules import check_region

    region, dash, letter = text.rpartition("-")
    if not dash or len(letter) != 1 or not letter.isascii() or not letter.islower():
        raise ValueError("must be a zone name such as 'us-central1-a'")
    check_region(region)


def _stack(text: str) -> None:
    # Pulumi stack names: letters, digits, '-', '_' and '.', optionally as org/project/stack.
    # https://www.pulumi.com/docs/iac/concepts/stacks/#create-stack
    import re

    if not re.fullmatch(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+){0,2}", text):
        raise ValueError("letters, digits, '-', '_' and '.' only (optionally org/project/stack)")


# Every value that reaches a Compute API path, gcloud or pulumi, checked where the flag is read.
project_id = _name_type(_project, "a project id")
region_name = _name_type(_region, "a region name")
resource_name = _name_type(_group, "a GCE resource name")
stack_name = _name_type(_stack, "a Pulumi stack name")
zone_name = _name_type(_zone, "a zone name")
