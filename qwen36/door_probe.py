"""The health gate's last look: the URL that ``apiBaseUrl`` exports reaches the server.

Once the member serves, ``qwen36 wait --door-url`` asks the front door for llama-server's
``/props`` with the API key. A GET only reads, so it never wakes the server (door/app.py
``run_without_wake``), and an answer from llama-server itself proves the whole path a client takes:
Cloud Run's front end, the door's key check, Direct VPC egress and the server's firewall. So a door
that cannot start, or cannot reach the member, fails ``pulumi up`` in one line instead of exporting
a URL that never answers.

A group stopped while idle has no server to reach: then the door's own answer that it is stopped
is the proof (Cloud Run runs the door, the key passes, the door reads the group).

Cloud Run refusing the request itself (403: the invoker check is on) or the door refusing the key
(401: the door reads its key, so the key it holds is not the stack's) cannot clear by waiting, so
they end the look at once. Anything else (Cloud Run still routing to the new revision, a 503 while
the door finds the member, a refused connection) is retried up to ``DOOR_BOUND_S``: Direct VPC
egress documents that "connections may take a minute or more" to work at a new instance's start
(https://cloud.google.com/run/docs/configuring/vpc-direct-vpc, Limitations).

A door whose own grants are new says so: it answers 503 with the code ``door_key_unreadable`` while
Secret Manager refuses it its key, and ``door_grant_pending`` while Compute answers its calls 403
(the door's contract; door/app.py). IAM grants take "typically 2 minutes, potentially 7 minutes or
longer" (https://cloud.google.com/iam/docs/access-change-propagation), and on a redeploy after a
destroy no bake hides that window: the look waits for them up to ``GRANT_BOUND_S`` from its start
(which comes after the grants' creation), with a line that says what it waits for.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from qwen36.errors import Exit, QwenError
from qwen36.health import DEFAULT_POLL_S, HEARTBEAT_S, Observation, error_message

DOOR_BOUND_S = 180.0
# About 10 minutes for grants to take effect: IAM's 7 minutes "or longer", with the door's own cache
# of its key (30 s) and Cloud Run's routing on top.
GRANT_BOUND_S = 600.0
# The door's error codes for "my new grants are not in effect yet" (its 503s; door/app.py).
GRANT_CODES = ("door_key_unreadable", "door_grant_pending")
GRANT_PENDING = "grant-pending"
REQUEST_TIMEOUT_S = 20.0
# A field of llama-server's /props (tools/server/README.md, "GET /props"): the answer is the
# server's, not the door's.
SERVER_FIELD = "default_generation_settings"
# The start of the door's 503 for a read while the group is at 0 (door/app.py run_without_wake).
STOPPED_MESSAGE = "the server is stopped while idle"


class DoorUnreachable(QwenError):
    """The door's URL did not reach the server."""


def look(client: httpx.Client, door_url: str, api_key: str, server_stopped: bool = False) -> Observation:
    url = f"{door_url.rstrip('/')}/props"
    try:
        response = client.get(url, headers={"Authorization": f"Bearer {api_key}"})
    except httpx.TransportError as exc:
        return Observation("unreachable", type(exc).__name__)
    status = response.status_code
    if status == 403:
        # Cloud Run answers before the container runs when the caller lacks run.routes.invoke
        # (https://cloud.google.com/run/docs/troubleshooting#unauthorized-client).
        return Observation(
            "refused",
            "Cloud Run refused the request before the door (403): the service's invoker check is on, "
            "as the organization policy constraints/run.managed.requireInvokerIam enforces; "
            "`qwen36 check` reads it",
            failed=True,
        )
    if status == 401:
        return Observation(
            "key-rejected",
            "the door reads its key and refuses the stack's API key (401): the key set's `default` "
            "entry replaces or revokes it, or the secret's latest version is not the stack's apiKey "
            "(`pulumi up` writes it)",
            failed=True,
        )
    code = error_code(response)
    if status == 503 and code in GRANT_CODES:
        what = "its key secret" if code == "door_key_unreadable" else "the Compute API"
        return Observation(
            GRANT_PENDING,
            f"the door's new grants are not in effect yet ({code}: {what} refuses it); IAM takes 2 to "
            f"7+ min, waiting up to {GRANT_BOUND_S / 60:.0f} min",
        )
    if status != 200:
        message = error_message(response) or response.text[:80].strip()
        if server_stopped and status == 503 and message.startswith(STOPPED_MESSAGE):
            return Observation("ok", f"the door answers for the stopped server: {message}", ready=True)
        return Observation(f"http-{status}", message)
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or SERVER_FIELD not in body:
        return Observation("unexpected", f"/props answered 200 without llama-server's {SERVER_FIELD}")
    return Observation("ok", "llama-server answered /props through the door", ready=True)


def error_code(response: httpx.Response) -> str:
    """The OpenAI-shaped error's ``code`` (the door's own errors carry one), else ""."""
    try:
        body = response.json()
    except ValueError:
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("code") or "") if isinstance(error, dict) else ""


def wait_door(
    door_url: str,
    api_key: str,
    *,
    server_stopped: bool = False,
    bound_s: float = DOOR_BOUND_S,
    grant_bound_s: float = GRANT_BOUND_S,
    poll_s: float = DEFAULT_POLL_S,
    heartbeat_s: float = HEARTBEAT_S,
    logs_command: str = "",
    emit: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Returns a one-line summary once the door reaches the server; raises DoorUnreachable, whose
    line ends with ``logs_command`` (the door's logs) when one is given. While the door says its
    grants are new, the bound is ``grant_bound_s`` instead of ``bound_s``."""
    further = f"; `{logs_command}` says why" if logs_command else ""
    started = clock()
    last: Observation | None = None
    said_at = started
    limit = bound_s
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
        while True:
            seen = look(client, door_url, api_key, server_stopped)
            now = clock()
            if seen.ready:
                summary = f"door {door_url} reaches the server after {now - started:.0f} s: {seen.detail}"
                emit(summary)
                return summary
            if seen.failed:
                # Only a refusal (401, 403) ends the look at once: the key or the invoker check,
                # which the exit-code table calls "refused" (6), not "failed" (1).
                raise DoorUnreachable(f"the server serves, but {door_url}: {seen.detail}", Exit.DENIED)
            if last is None or (seen.state, seen.detail) != (last.state, last.detail):
                emit(f"door {seen.state}" + (f" ({seen.detail})" if seen.detail else ""))
                said_at = now
            elif now - said_at >= heartbeat_s:
                emit(f"door {seen.state} (still waiting, {now - started:.0f} s)")
                said_at = now
            last = seen
            if seen.state == GRANT_PENDING:
                limit = max(bound_s, grant_bound_s)
            if now - started >= limit:
                detail = f"{seen.state}: {seen.detail}" if seen.detail else seen.state
                fix = (
                    "; its grants are still not in effect: check that the door's account holds them"
                    if seen.state == GRANT_PENDING
                    else ""
                )
                raise DoorUnreachable(
                    f"the server serves, but {door_url} did not reach it within {limit:.0f} s "
                    f"(last: {detail}){fix}{further}"
                )
            sleep(min(poll_s, max(0.0, limit - (now - started))))
