"""What the door passes to llama-server, and what a request is: the paths it never proxies, the
route a request is recorded under, and the one GET that may wake the server (a page navigation)."""

from __future__ import annotations

STOP_PATH = "/_qwen36/idle-stop"
LOGIN_PATH = "/_qwen36/login"
RECENT_PATH = "/_qwen36/recent"
# llama-server's management and agent endpoints: never through the door. /tools runs shell commands
# on the VM (facts.md), /slots saves, restores and erases slots, /cors-proxy fetches any URL, the
# router's /models/* load and unload models, /lora-adapters changes the model, /metrics is for the
# VM's own agents. /v1/stream and /v1/chat/completions/control belong to the resumable streams the
# door turns off (X-Conversation-Id, below).
BLOCKED_PREFIXES = (
    "/tools",
    "/slots",
    "/cors-proxy",
    "/models/load",
    "/models/unload",
    "/models/sse",
    "/lora-adapters",
    "/metrics",
    "/v1/stream",
    "/v1/chat/completions/control",
)
STREAM_LOOKUP = "/v1/streams/lookup"
MODEL_LISTS = ("/v1/models", "/models")


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


def blocked(method: str, path: str) -> bool:
    if method == "DELETE" or (method == "POST" and path == "/props") or path.startswith("/_qwen36/"):
        return True
    return any(path == p or path.startswith(p + "/") for p in BLOCKED_PREFIXES) and path != STREAM_LOOKUP


def navigation(method: str, headers: dict[str, str]) -> bool:
    """A browser loading a page (not a script's fetch): the one GET that may wake the server."""
    if method != "GET":
        return False
    mode = headers.get("sec-fetch-mode")
    if mode is not None:
        return mode == "navigate"
    return "text/html" in headers.get("accept", "")
