"""What the door passes to llama-server: an allow-list of methods and paths, decided on the path as
llama-server will see it, and the route a request is recorded under.

The check and the upstream request can never disagree because they use one string: ``canonical``
turns the path as sent (``raw_path``, still percent-encoded) into the one the door checks and then
sends, byte for byte (``proxy.upstream_url`` refuses a URL whose path came out different). It
decodes percent-encoding once, drops a trailing ``?`` or ``#`` (``/slots%3F``), removes dot segments
(RFC 3986 section 5.2.4: ``/./slots``, ``/v1/../slots``) and repeated or trailing slashes, and
refuses what could still be read two ways: a ``%`` left after one decoding (double encoding), a
``?``, ``#`` or backslash inside the path, a control, space or non-ASCII character. The result holds
only unreserved characters and ``/``, which neither httpx nor llama-server's HTTP library (cpp-httplib
decodes the path once, then matches it whole) changes again.

The allow-list is exact: llama-server's routes are exact matches too, so a path that is not one of
these reaches nothing. Everything else (``/slots``, ``/tools``, ``/metrics``, ``POST /props``,
``/cors-proxy``, ``/lora-adapters``, the router's ``/models/*``, the resumable streams' ``/v1/stream``
and ``/v1/chat/completions/control``, any other method) gets an OpenAI-shaped 404.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

STOP_PATH = "/_qwen36/idle-stop"
LOGIN_PATH = "/_qwen36/login"
RECENT_PATH = "/_qwen36/recent"
STREAM_LOOKUP = "/v1/streams/lookup"
MODEL_LISTS = ("/v1/models", "/models")
# The inference routes of llama-server b11434 (its route table, read from the binary's strings
# and tools/server/server.cpp): the OpenAI-compatible ones the SDKs use, llama.cpp's own, and the
# Anthropic messages API. Only a POST to one of these wakes the server.
INFERENCE_POSTS = frozenset(
    {
        "/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions", "/completion",
        "/infill", "/v1/responses", "/responses", "/v1/messages", "/v1/messages/count_tokens",
        "/v1/embeddings", "/embeddings", "/embedding", "/v1/rerank", "/v1/reranking", "/rerank",
        "/reranking", "/tokenize", "/detokenize", "/apply-template", "/v1/chat/completions/input_tokens",
        "/chat/completions/input_tokens", "/v1/responses/input_tokens", "/v1/audio/transcriptions",
    }
)  # fmt: skip
# What the web UI reads (its requests in headless Chromium, tests/door/test_door_web_ui.py): its
# page, service worker, icon and build files, and its read-only GETs (/props, the model list, the
# health). Served while the server is up; a page navigation also wakes it.
READ_GETS = frozenset(
    {"/", "/index.html", "/sw.js", "/favicon.svg", "/favicon.ico", "/props", *MODEL_LISTS, "/v1/health"}
)
# The UI's build output (SvelteKit's content-hashed bundles), static files only.
ASSET_PREFIX = "/_app/immutable/"
PAGES = frozenset({"/", "/index.html"})
# The door answers this one itself (resumable streams are off through the door: proxy.py).
DOOR_POSTS = frozenset({STREAM_LOOKUP})
_SAFE = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@/-]*")


def canonical(raw_path: bytes) -> str | None:
    """The path the door checks and sends, or None where it cannot be said one way."""
    try:
        text = unquote(raw_path.decode("ascii"), encoding="utf-8", errors="strict")
    except (UnicodeDecodeError, ValueError):
        return None
    if not text.startswith("/"):
        return None
    text = text.rstrip("?#")
    if not _SAFE.fullmatch(text):
        return None
    out: list[str] = []
    for segment in text.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if out:
                out.pop()
            continue
        out.append(segment)
    return "/" + "/".join(out)


def allowed(method: str, path: str) -> bool:
    """``path`` is ``canonical``'s answer."""
    if method == "POST":
        return path in INFERENCE_POSTS or path in DOOR_POSTS
    return method == "GET" and (path in READ_GETS or path.startswith(ASSET_PREFIX))


def wakes(method: str, path: str, headers: dict[str, str]) -> bool:
    """An inference POST, or a browser loading the UI's page."""
    return (method == "POST" and path in INFERENCE_POSTS) or (path in PAGES and navigation(method, headers))


def route_of(method: str, path: str) -> str:
    if path in ("/v1/chat/completions", "/chat/completions"):
        return "chat"
    if path in ("/v1/completions", "/completions", "/completion", "/infill"):
        return "completions"
    if path in ("/v1/responses", "/responses"):
        return "responses"
    if path.startswith("/v1/messages"):
        return "messages"
    if path in ("/v1/embeddings", "/embeddings", "/embedding"):
        return "embeddings"
    if path in MODEL_LISTS:
        return "models"
    if path == "/health" or path.startswith("/_qwen36/"):
        return "door"
    return "ui" if method == "GET" else "other"


def navigation(method: str, headers: dict[str, str]) -> bool:
    """A browser loading a page (not a script's fetch)."""
    if method != "GET":
        return False
    mode = headers.get("sec-fetch-mode")
    if mode is not None:
        return mode == "navigate"
    return "text/html" in headers.get("accept", "")
