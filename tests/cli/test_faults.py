"""Transient API errors end in bounded retries and one line (issue 21, item 2).

The commands run in this process with the real google-cloud-compute client against the fake Compute
API (tests/compute_fake), which injects 503s, 429s, dropped connections and requests it never answers,
on GETs and POSTs. The backoff runs on a recorded sleep, so the tests see every pause without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from qwen36 import group as group_module
from qwen36 import retry, status
from qwen36.__main__ import main
from qwen36.errors import Exit
from tests.compute_fake.group import APPLIED_THEN_DROP, DROP, HANG, FakeGroup, FakeMember, Fault
from tests.compute_fake.server import fake_compute_api
from tests.idle.conftest import idle_group

WHERE = ["--project", "acme-llm-test", "--region", "us-central1", "--group", "qwen36-dev"]
GROUP = "/compute/v1/projects/acme-llm-test/regions/us-central1/instanceGroupManagers/qwen36-dev"
READY = "ready 2026-11-30T22:03:00Z b00t llama-server healthy 170 s after boot"


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The backoff's sleeps, recorded instead of slept."""
    slept: list[float] = []
    monkeypatch.setattr(retry, "SLEEP", slept.append)
    yield slept


def _run(capsys: pytest.CaptureFixture[str], group: FakeGroup, *argv: str) -> tuple[int, str, str]:
    with fake_compute_api(group) as endpoint:
        code = main([*argv, *WHERE, "--compute-endpoint", endpoint, "--anonymous"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def _running() -> FakeGroup:
    member = FakeMember("qwen36-dev-a1", "us-central1-a")
    member.guest_attributes = {"report": READY}
    return idle_group(member)


def _calls(group: FakeGroup, method: str, suffix: str) -> int:
    return sum(1 for c in group.calls if c.method == method and c.path.endswith(suffix))


@pytest.mark.parametrize(
    ("method", "suffix", "status_code"),
    [
        ("GET", GROUP, 503),
        ("GET", GROUP, 429),
        ("POST", "/listManagedInstances", 503),
        ("POST", "/listManagedInstances", 429),
        ("POST", "/listManagedInstances", 500),
        ("POST", "/listManagedInstances", 502),
        ("POST", "/listManagedInstances", 504),
        ("POST", "/listManagedInstances", DROP),
        ("GET", "/getGuestAttributes", 503),
    ],
)
def test_status_retries_a_transient_error_and_answers(
    capsys: pytest.CaptureFixture[str], pauses: list[float], method: str, suffix: str, status_code: int | str
) -> None:
    group = _running()
    group.faults.append(Fault(method, suffix, status_code, times=2))
    code, out, err = _run(capsys, group, "status")
    assert code == 0, err
    assert out.startswith("running: qwen36-dev-a1 in us-central1-a")
    assert _calls(group, method, suffix) == 3
    assert len(pauses) == 2 and all(0 < p <= retry.POLICY.max_s for p in pauses)


def test_status_gives_up_after_the_bounded_tries_in_one_line(
    capsys: pytest.CaptureFixture[str], pauses: list[float]
) -> None:
    group = _running()
    group.faults.append(Fault("GET", GROUP, 503, times=100))
    code, out, err = _run(capsys, group, "status")
    assert code == Exit.UNREACHABLE
    assert out == ""
    assert _calls(group, "GET", GROUP) == retry.POLICY.attempts == 4
    (line,) = err.splitlines()
    assert line.startswith(
        "status: error: the Compute API's regionInstanceGroupManagers.get kept failing "
        "(ServiceUnavailable: 503 GET "
    )
    assert line.endswith(
        "after 4 tries over 0 s; check the network and https://status.cloud.google.com, then rerun"
    )
    # tenacity's exponential backoff with jitter: 1, 2, 4 s plus up to 1 s each, capped at 8.
    assert [int(p) for p in pauses] == [1, 2, 4]


def test_a_server_that_never_answers_is_bounded(
    capsys: pytest.CaptureFixture[str], pauses: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(group_module, "COMPUTE_REQUEST_TIMEOUT_S", 0.3)
    group = _running()
    group.faults.append(Fault("GET", GROUP, HANG, times=100))
    started = time.monotonic()
    code, _, err = _run(capsys, group, "status")
    elapsed = time.monotonic() - started
    assert code == Exit.UNREACHABLE
    (line,) = err.splitlines()
    assert "regionInstanceGroupManagers.get kept failing (ReadTimeout" in line
    assert _calls(group, "GET", GROUP) == 4
    # Four tries of 0.3 s each (the backoff is recorded, not slept), with room for a loaded machine.
    assert elapsed < 4 * 0.3 + 5


def test_wake_retries_a_lost_resize_answer_with_the_same_request_id(
    capsys: pytest.CaptureFixture[str], pauses: list[float]
) -> None:
    """GCE applied the resize but the answer was lost: the retry carries the same requestId, so the
    group is resized once (the fake ignores a repeated requestId, as GCE documents)."""
    group = idle_group(target_size=0)
    group.new_member.guest_attributes = {"report": READY}
    group.faults.append(Fault("POST", "/resize", APPLIED_THEN_DROP))
    group.faults.append(Fault("POST", "/wait", 503))
    code, out, err = _run(capsys, group, "wake", "--poll-seconds", "0.05")
    assert code == 0, err
    resizes = group.resizes()
    assert len(resizes) == 2
    ids = {c.query["requestId"][0] for c in resizes}
    assert len(ids) == 1 and len(next(iter(ids))) == 36, "one uuid4 for both tries"
    assert list(group.request_ids) == list(ids) and len(group.operations) == 1
    assert "wake: resized group qwen36-dev from 0 to 1" in out
    assert group.state().target_size == 1


def test_wake_names_what_to_check_when_the_resize_keeps_failing(
    capsys: pytest.CaptureFixture[str], pauses: list[float]
) -> None:
    group = idle_group(target_size=0)
    group.faults.append(Fault("POST", "/resize", 503, times=100))
    code, _, err = _run(capsys, group, "wake")
    assert code == Exit.UNREACHABLE
    (line,) = err.splitlines()
    assert line.startswith("wake: error: the Compute API's regionInstanceGroupManagers.resize kept failing")
    assert line.endswith("(the resize may still have been accepted: `qwen36 status`)")
    assert len(group.resizes()) == 4 and len({c.query["requestId"][0] for c in group.resizes()}) == 1


def test_tunnel_retries_the_member_list(capsys: pytest.CaptureFixture[str], pauses: list[float]) -> None:
    group = _running()
    group.faults.append(Fault("POST", "/listManagedInstances", 503))
    code, out, err = _run(capsys, group, "tunnel", "--print")
    assert code == 0, err
    assert out.startswith("gcloud compute start-iap-tunnel qwen36-dev-a1 8080")


def test_a_non_transient_error_is_not_retried(
    capsys: pytest.CaptureFixture[str], pauses: list[float]
) -> None:
    group = _running()
    group.faults.append(Fault("GET", GROUP, 403))
    code, _, err = _run(capsys, group, "status")
    assert code == Exit.DENIED
    assert _calls(group, "GET", GROUP) == 1 and pauses == []
    assert err.startswith("status: error: the API denied the request (403): 403 GET ")


def test_status_of_a_group_that_does_not_exist(capsys: pytest.CaptureFixture[str]) -> None:
    group = _running()
    with fake_compute_api(group) as endpoint:
        code = main(
            ["status", "--project", "acme-llm-test", "--region", "us-central1", "--group", "nope",
             "--compute-endpoint", endpoint, "--anonymous"]
        )  # fmt: skip
    err = capsys.readouterr().err
    assert code == Exit.NOT_FOUND
    assert err.startswith("status: error: the API answered 404 Not Found: 404 GET ")
    assert len(err.splitlines()) == 1


def test_retry_waits_are_what_the_policy_says() -> None:
    assert retry.Policy(attempts=4, initial_s=1.0, max_s=8.0, budget_s=60.0) == retry.POLICY
    assert status.OPERATION_WAIT_S <= 150.0


# --- answers that are not the Compute API's (issue 29, item 2) --------------------------------------
# A 200 whose body no client can parse: what a captive portal, a proxy or a broken middlebox sends.
# No Google document describes such answers; they stand for whatever is not the API. Each command
# that reads the group ends in one line naming the call and what came back, exit 7 (no traceback,
# no "internal error").
BAD_BODIES = {
    "html": (b"<html><head><title>Sign in to the Wi-Fi</title></head><body>...</body></html>", "text/html"),
    "empty": (b"", "application/json"),
    "binary": (b"\x00\xff\xfe\x00", "application/octet-stream"),
    "list": (b"[1,2,3]", "application/json"),
    "null": (b"null", "application/json"),
}
SEEN = {
    "html": "an HTML page ('<html><head><title>Sign in to the Wi-Fi</title></head><body…')",
    "empty": "an empty body",
    "binary": "4 bytes that are not UTF-8 text (b'\\x00\\xff\\xfe\\x00')",
    "list": "JSON of another shape ([1, 2, 3]) (Failed to parse 1 field: expected string or bytes-like "
    "object, "
    "got 'int'.)",
    "null": "JSON of another shape (null) (Failed to parse JSON: TypeError: 'NoneType' object is not "
    "iterable.)",
}
# A wrong-shaped object for each call: a field of the wrong type.
WRONG_SHAPE = {
    "get": (b'{"name": "qwen36-dev", "targetSize": "many"}', "JSON of another shape"),
    "listManagedInstances": (b'{"managedInstances": 5}', "JSON of another shape"),
    "getSerialPortOutput": (b'{"contents": {"a": 1}}', "JSON of another shape"),
}
CALLS = {
    "status": ("GET", GROUP, "regionInstanceGroupManagers.get"),
    "wake": ("GET", GROUP, "regionInstanceGroupManagers.get"),
    "tunnel": ("POST", "/listManagedInstances", "regionInstanceGroupManagers.listManagedInstances"),
    "logs": ("GET", "/serialPort", "instances.getSerialPortOutput"),
}
ARGV = {"status": ["status"], "wake": ["wake"], "tunnel": ["tunnel", "--print"], "logs": ["logs", "--serial"]}


def _bad_answer_line(command: str, call: str, seen: str) -> str:
    return (
        f"{command}: error: the Compute API's {call} answered {seen} (HTTP 200), not its documented JSON; "
        "a proxy, captive portal or wrong endpoint may stand in the way: check the network and rerun"
    )


@pytest.mark.parametrize("body", list(BAD_BODIES))
@pytest.mark.parametrize("command", list(CALLS))
def test_an_answer_that_is_not_the_apis_is_one_line_and_7(
    capsys: pytest.CaptureFixture[str], pauses: list[float], command: str, body: str
) -> None:
    method, suffix, call = CALLS[command]
    group = _running() if command != "wake" else idle_group(target_size=0)
    data, content_type = BAD_BODIES[body]
    group.faults.append(Fault(method, suffix, 200, times=100, body=data, content_type=content_type))
    code, _, err = _run(capsys, group, *ARGV[command])
    assert code == Exit.UNREACHABLE
    assert err.splitlines()[-1] == _bad_answer_line(command, call, SEEN[body])
    assert len([line for line in err.splitlines() if "error:" in line]) == 1
    # Not retried: a proxy's page stays one.
    assert _calls(group, method, suffix) == 1 and pauses == []


@pytest.mark.parametrize("command", list(CALLS))
def test_a_wrong_shaped_object_is_one_line_and_7(
    capsys: pytest.CaptureFixture[str], pauses: list[float], command: str
) -> None:
    method, suffix, call = CALLS[command]
    group = _running() if command != "wake" else idle_group(target_size=0)
    data, seen = WRONG_SHAPE[call.rsplit(".", 1)[1]]
    group.faults.append(Fault(method, suffix, 200, times=100, body=data))
    code, _, err = _run(capsys, group, *ARGV[command])
    assert code == Exit.UNREACHABLE
    line = err.splitlines()[-1]
    assert line.startswith(f"{command}: error: the Compute API's {call} answered {seen} (")
    assert line.endswith("check the network and rerun")


def test_a_group_answer_without_the_groups_name_is_not_a_group_of_size_0(
    capsys: pytest.CaptureFixture[str], pauses: list[float]
) -> None:
    """google-cloud-compute reads {} or an object of unknown fields as an empty group (size 0): status
    would say "stopped". Every InstanceGroupManager carries its name, so a nameless one is not the API's."""
    group = _running()
    group.faults.append(Fault("GET", GROUP, 200, times=100, body=b'{"kind": "portal#page"}'))
    code, _, err = _run(capsys, group, "status")
    assert code == Exit.UNREACHABLE
    assert err == (
        "status: error: the Compute API's regionInstanceGroupManagers.get answered JSON of another shape "
        '({"kind": "portal#page"}) without the group\'s name, not its documented answer; a proxy or wrong '
        "endpoint may stand in the way: check the network and rerun\n"
    )


@pytest.mark.parametrize("body", ["html", "null"])
def test_the_gate_names_the_bad_answer_and_ends_in_7(
    capsys: pytest.CaptureFixture[str], pauses: list[float], body: str
) -> None:
    """`wait` (the health gate of `pulumi up`) treats an unreadable group as "not ready" while it waits,
    with the boundary's line in its progress, and ends at its bound with exit 7 when the group was never
    read: the cause is the answer, not the server."""
    group = _running()
    data, content_type = BAD_BODIES[body]
    group.faults.append(
        Fault("POST", "/listManagedInstances", 200, times=10_000, body=data, content_type=content_type)
    )
    argv = ["wait", "--mode", "guest-attributes", "--timeout-minutes", "0.01", "--poll-seconds", "0.05"]
    code, out, err = _run(capsys, group, *argv)
    assert code == Exit.UNREACHABLE
    (line,) = err.splitlines()
    seen = SEEN[body]
    assert line == (
        "wait: error: llama-server is not ready: not ready after 0m00s (the timeout); the group was never "
        "read: the Compute API's regionInstanceGroupManagers.listManagedInstances answered "
        f"{seen} (HTTP 200), not its documented JSON; a proxy, captive portal or wrong endpoint may stand "
        "in the way: check the network and rerun"
    )
    assert f"answered {seen}" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--project", "acme-llm-test", "--region", "us-central1", "--group", "../../zones/x"],
        ["status", "--project", "other/../acme-llm", "--region", "us-central1", "--group", "qwen36-dev"],
        ["tunnel", "--print", "--project", "acme-llm-test", "--region", "us-central1/..", "--group", "g"],
        ["wait", "--mode", "guest-attributes", "--timeout-minutes", "1", "--project", "acme-llm-test",
         "--region", "us-central1", "--group", "a/b"],
        ["check", "--project", "other/../acme-llm"],
        ["check", "--stack", "../x"],
    ],
)  # fmt: skip
def test_a_name_that_would_change_the_requests_path_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code = main([*argv, "--anonymous"] if argv[0] != "check" else argv)
    err = capsys.readouterr().err
    assert code == Exit.USAGE, err
    (line,) = err.splitlines()
    assert line.startswith(f"{argv[0]}: error: ")
    assert "is not a" in line
