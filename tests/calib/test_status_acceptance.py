"""`python -m qwen36 status` names what the calibration chose and the live acceptance and decode
rate, from the member's guest attributes (the boot report and the acceptance guard's report),
read through the loopback Compute API by the real google-cloud-compute client."""

from __future__ import annotations

from datetime import UTC, datetime

from qwen36.status import RUNNING, GroupApi, Where, describe
from tests.compute_fake.group import FakeMember
from tests.compute_fake.server import fake_compute_api
from tests.idle.conftest import idle_group

NOW = datetime(2026, 11, 30, 22, 0, 0, tzinfo=UTC)
READY = (
    "ready 2026-11-30T21:40:00Z b00t llama-server healthy 170 s after boot; "
    "flags=mtp3/fusion-on/gpu-sampling verdict=calibrated calibrate-s=97 decode-tps=99.3 acceptance=0.8120"
)
IDLE = "watching 2026-11-30T21:59:30Z b00t last-request=2026-11-30T21:48:00Z idle-minutes=30"


def _status(attributes: dict[str, str]) -> str:
    member = FakeMember("qwen36-dev-a1", "us-central1-a")
    member.guest_attributes = attributes
    with fake_compute_api(idle_group(member)) as endpoint:
        api = GroupApi(Where("acme-llm-test", "us-central1", "qwen36-dev"), endpoint, anonymous=True)
        return describe(api, now=NOW)


def test_status_names_the_calibrated_choice_and_the_live_acceptance() -> None:
    guard = (
        "ok 2026-11-30T21:59:00Z b00t acceptance=0.7950 decode-tps=96.4 recent-acceptance=0.8010 "
        "expect=0.8120 drafted=40210"
    )
    line = _status({"report": READY, "idle": IDLE, "accept": guard})
    assert line == (
        f"{RUNNING}: qwen36-dev-a1 in us-central1-a; last request 12 min ago (2026-11-30T21:48:00Z); "
        "serving mtp3/fusion-on/gpu-sampling (calibrated); acceptance 79.5% (verdict 81.2%), "
        "decode 96.4 tok/s since the server started"
    )


def test_status_says_when_live_acceptance_is_low_and_when_the_stack_config_decided() -> None:
    ready = READY.replace("verdict=calibrated", "verdict=verdict pinned=specDraftNMax")
    guard = (
        "stale 2026-11-30T21:59:00Z b00t acceptance=0.3100 decode-tps=70.2 recent-acceptance=0.2900 "
        "expect=0.8120 drafted=90000"
    )
    line = _status({"report": ready, "accept": guard})
    assert "serving mtp3/fusion-on/gpu-sampling (verdict; specDraftNMax from the stack config)" in line
    assert line.endswith("recent acceptance 29.0%: stale")


def test_status_without_mtp_shows_the_decode_rate_only() -> None:
    guard = (
        "no-mtp 2026-11-30T21:59:00Z b00t acceptance=none decode-tps=74.0 recent-acceptance=none "
        "expect=none drafted=0"
    )
    line = _status({"accept": guard})
    assert line.endswith("acceptance n/a, decode 74.0 tok/s since the server started")
