"""The test's clock and GCE's timestamps: times in a fake group are seconds after ``EPOCH``."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

# The virtual clock's zero, as wall time: instance start times and report times are written against it.
EPOCH = datetime(2026, 11, 30, 22, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def rfc3339(when: datetime) -> str:
    # GCE writes timestamps with milliseconds and the zone offset, e.g. "2026-11-30T14:02:03.123-08:00".
    return when.astimezone(UTC).isoformat(timespec="milliseconds")


class VirtualClock:
    """Time that moves only when the code under test sleeps: a 20-minute wait runs in moments."""

    def __init__(self) -> None:
        self.now = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.now += max(seconds, 0.0)

    def wall(self) -> datetime:
        return at(self())
