"""What ``verify`` asks the front door: llama-server's own ``/props`` through it, the thinking as
``reasoning_content``, a wrong key refused, a forged idle-stop token refused, and the timed wake.

Every request goes to the door's public URL, as a client's does, so a line that passes proves the
whole path: Cloud Run's front end, the door's key check, Direct VPC egress, the server's firewall.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from infra import cold_start
from qwen36.door_probe import SERVER_FIELD, STOPPED_MESSAGE
from qwen36.health import error_message
from qwen36.verify.checks import DOOR_PROPS, STOP_FORGED, THINKING, WAKE, WRONG_KEY, Check, fail, ok

REQUEST_TIMEOUT_S = 30.0
# The door's idle-stop endpoint (door/app.py STOP_PATH; startup/idle_watch.py DOOR_STOP_PATH):
# copied, since qwen36/ imports no door; tests/verify holds the copies equal.
STOP_PATH = "/_qwen36/idle-stop"
# A short answer: the checks need its first tokens, not its content.
MAX_TOKENS = 16
PROMPT = "Say a"
# The door's answer while its account cannot read the key yet ("grant pending", door/app.py).
KEY_UNREADABLE = "door_key_unreadable"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def chat(alias: str, *, stream: bool) -> dict[str, Any]:
    return {
        "model": alias,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
        "stream": stream,
    }


def props(client: httpx.Client, door: str, key: str) -> Check:
    try:
        response = client.get(f"{door}/props", headers=bearer(key))
    except httpx.TransportError as exc:
        return fail(
            DOOR_PROPS, f"{door}/props: no answer ({type(exc).__name__})", "`qwen36 status`; the door's logs"
        )
    body = _json(response)
    if response.status_code == 200 and isinstance(body, dict) and SERVER_FIELD in body:
        build = body.get("build_info")
        return ok(
            DOOR_PROPS,
            f"llama-server answered /props through {door}" + (f" (build {build})" if build else ""),
            build_info=build,
            model_alias=body.get("model_alias"),
        )
    message = error_message(response) or response.text[:120].strip()
    if response.status_code == 503 and _error_code(body) == KEY_UNREADABLE:
        return fail(
            DOOR_PROPS,
            f"the door cannot read its key yet (503 {KEY_UNREADABLE}: {message})",
            # https://cloud.google.com/iam/docs/access-change-propagation (2 to 7 minutes, or more)
            "a new grant takes minutes to apply: rerun in a few minutes; past 15 the door's account "
            "lacks secretAccessor on the key's secret",
        )
    if response.status_code == 503 and message.startswith(STOPPED_MESSAGE):
        return fail(
            DOOR_PROPS, f"the door says the server is stopped ({message})", "`qwen36 wake`, then rerun"
        )
    if response.status_code == 401:
        return fail(
            DOOR_PROPS,
            "the door refuses the stack's API key (401)",
            "the door's key secret is not the stack's apiKey: `pulumi up`",
        )
    if response.status_code == 403:
        return fail(
            DOOR_PROPS,
            "Cloud Run refused the request before the door (403)",
            "the service's invoker check is on (constraints/run.managed.requireInvokerIam): `qwen36 check`",
        )
    return fail(
        DOOR_PROPS,
        f"/props answered {response.status_code}"
        + (" without llama-server's fields" if response.status_code == 200 else f": {message}"),
        "`qwen36 status`, and the door's logs (Cloud Run console)",
    )


def thinking(client: httpx.Client, door: str, key: str, alias: str) -> Check:
    """One small streaming request: the template must hand the thinking back as ``reasoning_content``."""
    reasoning = content = ""
    try:
        with client.stream(
            "POST", f"{door}/v1/chat/completions", headers=bearer(key), json=chat(alias, stream=True)
        ) as response:
            if response.status_code != 200:
                response.read()
                message = error_message(response) or response.text[:120].strip()
                return fail(
                    THINKING,
                    f"the streaming request got {response.status_code}: {message}",
                    "`qwen36 status`",
                )
            for delta in deltas(response.iter_lines()):
                reasoning += str(delta.get("reasoning_content") or "")
                content += str(delta.get("content") or "")
    except httpx.TransportError as exc:
        return fail(THINKING, f"the streaming request broke off ({type(exc).__name__})", "`qwen36 status`")
    if reasoning:
        return ok(
            THINKING,
            f"the answer streamed its thinking as reasoning_content ({len(reasoning)} characters)"
            + (f", then {len(content)} of content" if content else ""),
            reasoning_chars=len(reasoning),
            content_chars=len(content),
        )
    return fail(
        THINKING,
        f"the answer streamed no reasoning_content ({len(content)} characters of content): the chat "
        "template does not open <think>",
        "read the served template (`/props` chat_template); the README's snippet expects llama.cpp's "
        "Qwen3.5 template",
        reasoning_chars=0,
        content_chars=len(content),
    )


def deltas(lines: Any) -> Any:
    """The ``delta`` of each choice of an OpenAI-style SSE stream (comments and [DONE] skipped)."""
    for line in lines:
        if not line.startswith("data: {"):
            continue
        chunk = json.loads(line[6:])
        if "error" in chunk:
            # The door ends a stream whose server went away with an error event (door/app.py).
            yield {"error": chunk["error"]}
        for choice in chunk.get("choices") or []:
            yield choice.get("delta") or {}


def wrong_key(client: httpx.Client, door: str, key: str) -> Check:
    wrong = f"{key[:4]}wrong-{secrets.token_hex(8)}"
    try:
        response = client.get(f"{door}/props", headers=bearer(wrong))
    except httpx.TransportError as exc:
        return fail(WRONG_KEY, f"no answer ({type(exc).__name__})", "`qwen36 status`; the door's logs")
    if response.status_code == 401:
        return ok(WRONG_KEY, "the door refuses a wrong key (401)", status=401)
    if response.status_code == 200:
        return fail(
            WRONG_KEY,
            "/props answered 200 to a wrong key: the endpoint is open",
            "the door must check the key: `pulumi up` with door: true and apiKey: true",
            status=200,
        )
    return fail(
        WRONG_KEY,
        f"a wrong key got {response.status_code}, not the door's 401",
        "`qwen36 status`, and the door's logs (Cloud Run console)",
        status=response.status_code,
    )


def stop_forged(client: httpx.Client, door: str) -> Check:
    """A POST to the door's idle-stop endpoint with a junk bearer: it must be refused (401, or Cloud
    Run's own 403), never stop the group."""
    try:
        response = client.post(f"{door}{STOP_PATH}", headers=bearer(f"forged.{secrets.token_hex(16)}.x"))
    except httpx.TransportError as exc:
        return fail(STOP_FORGED, f"no answer ({type(exc).__name__})", "the door's logs (Cloud Run console)")
    status = response.status_code
    if status in (401, 403):
        return ok(STOP_FORGED, f"the door's stop endpoint refuses a forged token ({status})", status=status)
    if status == 200:
        return fail(
            STOP_FORGED,
            "the door stopped the group on a forged token (200)",
            "the door must verify the VM's ID token: redeploy (`pulumi up`) and report it",
            status=status,
        )
    what = "the door took the token and found itself busy" if status == 409 else "not the door's refusal"
    return fail(
        STOP_FORGED,
        f"a forged token got {status} ({what})",
        "the door's logs (Cloud Run console)",
        status=status,
    )


def busy(client: httpx.Client, door: str, key: str) -> int:
    """Requests the door holds or streams now (its keyed /health), 0 when it does not say."""
    try:
        body = _json(client.get(f"{door}/health", headers=bearer(key)))
    except httpx.TransportError:
        return 0
    value = body.get("busy") if isinstance(body, dict) else None
    return int(value) if isinstance(value, int) else 0


@dataclass
class Timed:
    """One request of the wake: its status, when its first token came and when it ended."""

    status: int | None = None
    first_token_s: float | None = None
    total_s: float | None = None
    error: str = ""
    tokens: int = 0


@dataclass
class WakeResult:
    stream: Timed = field(default_factory=Timed)
    whole: Timed = field(default_factory=Timed)


def timed_requests(door: str, key: str, alias: str, timeout_s: float) -> WakeResult:
    """One streaming and one non-streaming request, sent together to the stopped server through the
    door: both are held by the same wake."""
    result = WakeResult()
    started = time.monotonic()

    def streaming() -> None:
        timed = result.stream
        try:
            with (
                httpx.Client(timeout=timeout_s) as client,
                client.stream(
                    "POST", f"{door}/v1/chat/completions", headers=bearer(key), json=chat(alias, stream=True)
                ) as response,
            ):
                timed.status = response.status_code
                if response.status_code != 200:
                    response.read()
                    timed.error = error_message(response) or response.text[:120].strip()
                    return
                for delta in deltas(response.iter_lines()):
                    if delta.get("content") or delta.get("reasoning_content"):
                        timed.tokens += 1
                        if timed.first_token_s is None:
                            timed.first_token_s = time.monotonic() - started
                    if "error" in delta:
                        timed.error = str(delta["error"])[:120]
        except (httpx.HTTPError, ValueError) as exc:  # ValueError: a chunk that is not JSON
            timed.error = f"{type(exc).__name__}: {exc}"[:160]
        finally:
            timed.total_s = time.monotonic() - started

    def whole() -> None:
        timed = result.whole
        try:
            with httpx.Client(timeout=timeout_s) as client:
                response = client.post(
                    f"{door}/v1/chat/completions", headers=bearer(key), json=chat(alias, stream=False)
                )
            timed.status = response.status_code
            body = _json(response)
            usage = body.get("usage") if isinstance(body, dict) else None
            if response.status_code != 200 or not isinstance(body, dict) or not body.get("choices"):
                timed.error = error_message(response) or response.text[:120].strip()
            elif isinstance(usage, dict):
                timed.tokens = int(usage.get("completion_tokens") or 0)
        except (httpx.HTTPError, ValueError) as exc:  # ValueError: a chunk that is not JSON
            timed.error = f"{type(exc).__name__}: {exc}"[:160]
        finally:
            timed.total_s = time.monotonic() - started

    threads = [threading.Thread(target=streaming), threading.Thread(target=whole)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return result


def wake_check(result: WakeResult, *, before: str, stop_s: float | None) -> Check:
    """The ``wake`` line: the first token after the stop beside the cold-start model's figure."""
    phases = cold_start.ttft_after_idle_stop_phases()
    assumed = cold_start.ttft_after_idle_stop_s()
    model = f"the model assumes {assumed:.0f} s (" + " + ".join(f"{name} {s:g}" for name, s in phases) + ")"
    data: dict[str, Any] = {
        "stop_s": _r(stop_s),
        "ttft_s": _r(result.stream.first_token_s),
        "stream_total_s": _r(result.stream.total_s),
        "stream_status": result.stream.status,
        "whole_s": _r(result.whole.total_s),
        "whole_status": result.whole.status,
        "assumed_ttft_s": _r(assumed),
        "assumed_phases": [{"phase": name, "s": s} for name, s in phases],
    }
    problems = []
    if result.stream.first_token_s is None or result.stream.error:
        problems.append(
            f"the streaming request got {result.stream.status} and "
            + (f"no token ({result.stream.error or 'an empty stream'})" if result.stream.first_token_s is None
               else f"an error after its first token ({result.stream.error})")
        )  # fmt: skip
    if result.whole.status != 200 or result.whole.error:
        problems.append(
            f"the non-streaming request got {result.whole.status}: {result.whole.error or 'no answer'}"
        )
    if problems:
        return fail(
            WAKE,
            f"{before}; " + "; ".join(problems) + f" after {_s(result.whole.total_s)}",
            "a 503 with Retry-After is the door's wake bound (doorWakeBoundSeconds); `qwen36 status` "
            "and `qwen36 logs --serial` show how far the boot got",
            **data,
        )
    return ok(
        WAKE,
        f"{before}; first token after {_s(result.stream.first_token_s)} ({model}); the non-streaming "
        f"answer after {_s(result.whole.total_s)}",
        **data,
    )


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} s"


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _error_code(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("code") or "") if isinstance(error, dict) else ""


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
