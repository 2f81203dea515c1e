"""One check's answer: ``ok``, ``FAIL`` (what it saw and the fix) or ``skip`` (why, and when to rerun).

The names are fixed (``NAMES``, in the order ``qwen36 verify`` prints them when the group runs):
docs/live-checks.md names the line that settles each item, and the JSON schema lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

State = Literal["ok", "FAIL", "skip"]

STACK = "stack"
PREVIEW = "preview"
WRONG_KEY = "wrong-key"
STOP_FORGED = "stop-forged"
STOP_VIA_DOOR = "stop-via-door"
VERDICT = "verdict"
DOOR_PROPS = "door-props"
THINKING = "thinking"
BOOT = "boot"
WAKE = "wake"
WAKE_BOOT = "wake-boot"
NAMES = (
    STACK, PREVIEW, WRONG_KEY, STOP_FORGED, STOP_VIA_DOOR, VERDICT, DOOR_PROPS, THINKING, BOOT,
    WAKE, WAKE_BOOT,
)  # fmt: skip


@dataclass(frozen=True)
class Check:
    name: str
    state: State
    saw: str
    fix: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        label = "rerun" if self.state == "skip" else "fix"
        fix = f"; {label}: {self.fix}" if self.fix else ""
        return f"{self.state:<4} {self.name}: {self.saw}{fix}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "saw": self.saw,
            "fix": self.fix or None,
            "data": self.data,
        }


def ok(name: str, saw: str, **data: Any) -> Check:
    return Check(name, "ok", saw, data=data)


def fail(name: str, saw: str, fix: str, **data: Any) -> Check:
    return Check(name, "FAIL", saw, fix, data)


def skip(name: str, why: str, rerun: str = "", **data: Any) -> Check:
    return Check(name, "skip", why, rerun, data)
