"""What a Google API answered when its client library could not read it: one line naming the API and
what came back, exit 7 (:class:`qwen36.errors.BadAnswerError`).

google-cloud-compute's REST transport parses a 2xx body with ``json_format.Parse`` (protobuf), which
raises ``ParseError`` on HTML, an empty body, ``[1,2,3]``, ``null`` or a field of the wrong type, and
``UnicodeDecodeError`` on bytes that are not UTF-8 (a captive portal, a proxy's error page, a middlebox).
Neither exception says what the body was, so :func:`watch` keeps the last answer a client's HTTP
session received (requests' documented response hook,
https://requests.readthedocs.io/en/latest/user/advanced/#event-hooks) and :func:`bad_answer` describes
it. The callers are the two places a Compute client is called: ``qwen36.retry.RetryingClient`` (status,
wake, tunnel, ssh, logs, wait and the gate, load --group) and the preflight's ``qwen36.check.gcp``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from qwen36.errors import BadAnswerError, one_line

# How much of a body the line quotes.
QUOTE = 60


def parse_failures() -> tuple[type[BaseException], ...]:
    """The exceptions a client library raises reading an answer it cannot parse."""
    from google.protobuf.json_format import ParseError

    return (ParseError, UnicodeDecodeError)


@dataclass
class LastAnswer:
    """The latest answer one client's session received (status, content type, the body's start)."""

    status: int = 0
    content_type: str = ""
    body: bytes | None = None

    def hook(self, response: Any, *args: Any, **kwargs: Any) -> Any:
        self.status = int(getattr(response, "status_code", 0) or 0)
        self.content_type = str(getattr(response, "headers", {}).get("Content-Type", ""))
        content = getattr(response, "content", b"")
        self.body = content[:2048] if isinstance(content, bytes) else None
        return response


def watch(client: Any) -> LastAnswer:
    """Records every answer ``client`` (a google-cloud-compute REST client) receives. The session is
    the transport's own (``_session``, an AuthorizedSession); without one, nothing is recorded and the
    line says only what the library said."""
    last = LastAnswer()
    transport = getattr(client, "transport", None)
    session = getattr(transport, "_session", None)
    hooks = getattr(session, "hooks", None)
    if isinstance(hooks, dict):
        hooks.setdefault("response", []).append(last.hook)
    return last


def describe(body: bytes | None, content_type: str = "") -> str:
    """What came back, in a few words: an empty body, an HTML page, bytes that are not text, JSON..."""
    if body is None:
        return "an answer it could not read"
    if not body.strip():
        return "an empty body"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return f"{len(body)}{'+' if len(body) >= 2048 else ''} bytes that are not UTF-8 text ({body[:12]!r})"
    head = one_line(text, QUOTE)
    if "html" in content_type.lower() or text.lstrip()[:1] == "<":
        return f"an HTML page ({head!r})"
    try:
        value = json.loads(text)
    except ValueError:
        return f"text that is not JSON ({head!r})"
    return f"JSON of another shape ({one_line(json.dumps(value), QUOTE)})"


def bad_answer(exc: BaseException, api: str, last: LastAnswer | None) -> BadAnswerError | None:
    """The one-line error for an answer ``api`` sent that its library could not parse; None for any
    other exception."""
    if not isinstance(exc, parse_failures()):
        return None
    what = describe(last.body, last.content_type) if last is not None else "an answer it could not read"
    if what.startswith("JSON"):
        # Which field the library choked on says which part of the shape is wrong.
        what += f" ({one_line(str(exc), 100)})"
    status = f" (HTTP {last.status})" if last is not None and last.status else ""
    return BadAnswerError(
        f"{api} answered {what}{status}, not its documented JSON; a proxy, captive portal or wrong "
        "endpoint may stand in the way: check the network and rerun"
    )


def not_the_api(api: str, what: str, last: LastAnswer | None) -> BadAnswerError:
    """An answer that parsed but lacks what every answer of the method has (a group without its name)."""
    came = describe(last.body, last.content_type) if last is not None else "an answer"
    return BadAnswerError(
        f"{api} answered {came} without {what}, not its documented answer; a proxy or wrong endpoint "
        "may stand in the way: check the network and rerun"
    )
