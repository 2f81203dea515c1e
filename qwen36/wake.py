"""``qwen36 wake``: bring an idle-stopped server back and wait until it answers.

It resizes the server's group back to its size (the group creates a fresh member from the current
template, in any zone of the region with capacity), waits with the same gate and progress lines as
``pulumi up`` (``qwen36.health.wait_ready``) and prints the URLs. A group already at its size is
not resized; the command then only waits. The API key comes from ``QWEN36_API_KEY`` or, with
``--stack``, from the stack's secret output; it is never printed.
"""

from __future__ import annotations

import argparse
import time

from qwen36.argtypes import bounded_float, http_url, int_range
from qwen36.errors import Exit, QwenError
from qwen36.group import Member
from qwen36.status import GroupApi, StatusError, Where, add_group_arguments, where_from

DEFAULT_TIMEOUT_MINUTES = 20.0
MEMBER_POLL_S = 5.0
# infra/config.py's MAX_REPLICAS: a wake never asks for more servers than a stack may have.
MAX_SIZE = 8
# The gate's own bound (qwen36/wait_cmd.py MAX_TIMEOUT_MINUTES).
MAX_TIMEOUT_MINUTES = 24 * 60
MAX_POLL_S = 3600.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "wake",
        help="resize an idle-stopped server's group back and wait until it answers",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    add_group_arguments(parser)
    parser.add_argument(
        "--size",
        type=int_range(1, MAX_SIZE),
        default=1,
        help=f"members to bring back, 1-{MAX_SIZE} (the stack's replicas)",
    )
    parser.add_argument(
        "--url", type=http_url, help="the server's base URL when this machine reaches it over HTTP"
    )
    parser.add_argument(
        "--timeout-minutes", type=bounded_float(MAX_TIMEOUT_MINUTES), default=DEFAULT_TIMEOUT_MINUTES
    )
    parser.add_argument(
        "--poll-seconds", type=bounded_float(MAX_POLL_S), default=MEMBER_POLL_S, help=argparse.SUPPRESS
    )
    parser.set_defaults(func=run)


def wait_for_member(api: GroupApi, deadline: float, poll_s: float) -> Member:
    """The group's first member once GCE has created it (its name and zone are picked by the group)."""
    while True:
        members = api.members()
        if members:
            return members[0]
        if time.monotonic() >= deadline:
            raise StatusError(
                "the group created no member before the timeout; run `qwen36 status`", Exit.FAILED
            )
        time.sleep(poll_s)


def wait_until_ready(api: GroupApi, where: Where, timeout_s: float, poll_s: float) -> None:
    """The deploy gate's own wait on the group (kept to this one call site: qwen36.health owns it)."""
    from qwen36.health import WaitSettings, wait_ready

    wait_ready(
        settings=WaitSettings(timeout_s=timeout_s, poll_s=poll_s),
        group=api.target,
        # The group's members and, without an HTTP path from here, the member's own boot report.
        reader=api.reader,
        url=where.url,
        api_key=where.api_key,
        emit=lambda line: print(line, flush=True),
    )


def urls(where: Where) -> dict[str, str]:
    if where.urls:
        return where.urls
    if where.url:
        base = where.url.rstrip("/")
        return {"webUiUrl": f"{base}/", "apiBaseUrl": f"{base}/v1"}
    return {"access": "through the IAP tunnel (stack output iapTunnel), then http://localhost:8080"}


def run(args: argparse.Namespace) -> int:
    from qwen36.health import WaitFailed

    where = where_from(args)
    api = GroupApi(where, args.compute_endpoint, args.anonymous)
    deadline = time.monotonic() + where.timeout_minutes * 60
    current = api.target_size()
    if current >= where.size:
        print(f"group {where.group} is already at size {current}; waiting for it to answer", flush=True)
    else:
        try:
            operation = api.resize(where.size, timeout_s=max(1.0, deadline - time.monotonic()))
        except QwenError as exc:
            # The resize may have reached GCE before the answer was lost: say how to find out.
            raise type(exc)(
                f"{exc.message} (the resize may still have been accepted: `qwen36 status`)",
                exc.exit_code,
            ) from exc
        print(f"wake: resized group {where.group} from {current} to {where.size} ({operation})", flush=True)
    member = wait_for_member(api, deadline, args.poll_seconds)
    print(f"wake: member {member.name} in {member.zone}", flush=True)
    try:
        wait_until_ready(api, where, max(1.0, deadline - time.monotonic()), args.poll_seconds)
    except WaitFailed as exc:
        raise exc.reported() from None
    for key, value in urls(where).items():
        print(f"{key}: {value}", flush=True)
    return 0
