"""GCE's documented guest-attribute write rate, checked over every write a sandbox run made.

About 10 writes a minute per VM with bursts of 3 a second; writes over it may be dropped
(https://cloud.google.com/compute/docs/metadata/manage-guest-attributes; infra/boot_protocol.py
names the limits). Every PUT the loopback metadata server saw counts, whoever made it: the boot
script's reports and the model download's progress alike.

The sandbox runs the script's pauses at ``time_scale`` of real time, and the script rations its
writes on the same scaled clock, so arrival times are turned back into VM seconds (divided by the
scale) before the windows are counted. The fetch tool's own interval is not scaled: in the
sandbox its progress looks rarer than on a VM (see ``fetch_interval_s`` in the report).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra import boot_protocol
from tests.boot.metadata_server import Write

MINUTE_S = 60.0
SECOND_S = 1.0


@dataclass(frozen=True)
class Rate:
    writes: int
    span_s: float
    """From the first write to the last, in VM seconds."""
    peak_per_minute: int
    """The most writes in any 60 s window (half-open, sliding over every write)."""
    peak_per_second: int

    @property
    def within_limits(self) -> bool:
        return (
            self.peak_per_minute <= boot_protocol.GUEST_ATTR_WRITES_PER_MINUTE
            and self.peak_per_second <= boot_protocol.GUEST_ATTR_BURST_PER_SECOND
        )

    def __str__(self) -> str:
        return (
            f"{self.writes} writes over {self.span_s:.0f} s: peak {self.peak_per_minute}/min "
            f"(limit {boot_protocol.GUEST_ATTR_WRITES_PER_MINUTE}), {self.peak_per_second}/s "
            f"(limit {boot_protocol.GUEST_ATTR_BURST_PER_SECOND})"
        )


def _peak(times: Sequence[float], window: float) -> int:
    peak = 0
    start = 0
    for end, t in enumerate(times):
        while t - times[start] >= window:
            start += 1
        peak = max(peak, end - start + 1)
    return peak


def measure(writes: Sequence[Write], time_scale: float = 1.0) -> Rate:
    """The rate of ``writes`` in VM time (real seconds divided by the sandbox's time scale)."""
    times = sorted(w.t / time_scale for w in writes)
    return Rate(
        writes=len(times),
        span_s=times[-1] - times[0] if times else 0.0,
        peak_per_minute=_peak(times, MINUTE_S),
        peak_per_second=_peak(times, SECOND_S),
    )
