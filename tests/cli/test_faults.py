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
