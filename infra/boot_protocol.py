"""What the boot script reports and where: shared by the script's renderer and the health gate.

The VM writes its progress to guest attributes, which the deployer reads through the Compute API
without any network path to the VM. https://cloud.google.com/compute/docs/metadata/manage-guest-attributes

NOTE: the same page documents a write limit of about 10 writes a minute per VM, with bursts of
3 a second, and says that writes over it may be dropped. So a report is one key (``KEY_REPORT``)
holding phase, time, boot id and detail in one value, progress is written at most every
``PROGRESS_MIN_INTERVAL_S``, and the deployer polls at most every ``GATE_POLL_MIN_S``.

A report's value is one line: ``<phase> <utc-time> <boot-id> <detail...>`` (single spaces; phase
and boot id never contain spaces; the detail is everything after the third space and may be
empty). The boot id is the kernel's (``/proc/sys/kernel/random/boot_id``), so the deployer can
tell a report of the current boot from one left by an earlier boot, and the time lets it compare
the report with the instance's last start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

NAMESPACE = "qwen36"
KEY_REPORT = "report"

# Documented limits (manage-guest-attributes, above), and the budget this project keeps under them.
GUEST_ATTR_WRITES_PER_MINUTE = 10
GUEST_ATTR_BURST_PER_SECOND = 3
PROGRESS_MIN_INTERVAL_S = 30
GATE_POLL_MIN_S = 15
# The boot and bake scripts' own share (startup/lib.sh keeps a ledger of its writes): at most this
# many a minute, one at least SCRIPT_MIN_GAP_S after another. With the download's progress (at
# most 2 a minute at PROGRESS_MIN_INTERVAL_S, 3 in a closed minute) the VM stays under the limit.
SCRIPT_WRITES_PER_MINUTE = 6
SCRIPT_MIN_GAP_S = 1

# Phases in the order a boot goes through them. "ready" and "failed" end a boot; a boot that could
# not turn ECC off reports "ready" with the degraded context in its detail, so the gate passes.
PHASES = ("boot", "driver", "ecc", "prepare", "model", "api-key", "calibrate", "server", "ready")
PHASE_READY = "ready"
PHASE_FAILED = "failed"

# The ready report's figures of the cold start (issue 24): ``name=value`` words in its detail,
# after "llama-server healthy N s after boot; ". The renderer gives the boot script each name as
# FIGURE_<NAME> (infra/boot_script.py), and ``status`` reads them back (:func:`ready_figures`).
FIGURE_FETCH_FROM = "fetch-from"  # where the served file came from: gcs, hub, disk or ram
FIGURE_FETCH_MB_S = "fetch-mb-s"  # the fetch's rate, in MB (10^6 bytes) a second
FIGURE_FETCH_SLICES = "fetch-slices"  # the slices `gcloud storage cp` was configured for (GCS only)
FIGURE_FETCH_S = "fetch-s"  # the fetch's seconds
FIGURE_LOAD_S = "load-s"  # from the container's start to the first /health 200
FIGURE_READY_S = "ready-s"  # from the kernel's start to the first /health 200
FIGURES = (
    FIGURE_FETCH_FROM,
    FIGURE_FETCH_MB_S,
    FIGURE_FETCH_SLICES,
    FIGURE_FETCH_S,
    FIGURE_LOAD_S,
    FIGURE_READY_S,
)

# GCE caps a guest attribute value; a report keeps well under it.
DETAIL_MAX_CHARS = 900
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_TOKEN_RE = re.compile(r"^[^\s]+$")


class ReportFormatError(ValueError):
    pass


@dataclass(frozen=True)
class Report:
    phase: str
    time: datetime
    boot_id: str
    detail: str = ""

    @property
    def ready(self) -> bool:
        return self.phase == PHASE_READY

    @property
    def failed(self) -> bool:
        return self.phase == PHASE_FAILED


def format_report(report: Report) -> str:
    """The value the VM writes under ``KEY_REPORT`` (the bash writer in startup/lib.sh matches it)."""
    for label, token in (("phase", report.phase), ("boot id", report.boot_id)):
        if not _TOKEN_RE.match(token):
            raise ReportFormatError(f"{label} {token!r} must be one word")
    detail = " ".join(report.detail.split())[:DETAIL_MAX_CHARS]
    stamp = report.time.astimezone(UTC).strftime(TIME_FORMAT)
    return f"{report.phase} {stamp} {report.boot_id} {detail}".rstrip(" ")


def parse_report(value: str) -> Report:
    """The inverse of :func:`format_report`; raises :class:`ReportFormatError` on anything else."""
    parts = value.strip("\n").split(" ", 3)
    if len(parts) < 3:
        raise ReportFormatError(f"a report needs phase, time and boot id: {value[:120]!r}")
    phase, stamp, boot_id = parts[:3]
    try:
        time = datetime.strptime(stamp, TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise ReportFormatError(f"bad report time {stamp!r} in {value[:120]!r}") from None
    if not phase or not boot_id:
        raise ReportFormatError(f"empty phase or boot id in {value[:120]!r}")
    return Report(phase=phase, time=time, boot_id=boot_id, detail=parts[3] if len(parts) > 3 else "")


@dataclass(frozen=True)
class Figures:
    """The cold start as the ready report measured it; ``None`` where the boot had nothing to say
    (no fetch when the file was already there, no slices from the hub, no load when the running
    container was left alone)."""

    fetch_from: str | None = None
    fetch_mb_s: float | None = None
    fetch_slices: int | None = None
    fetch_s: float | None = None
    load_s: float | None = None
    ready_s: float | None = None

    def __str__(self) -> str:
        parts = []
        if self.fetch_from is not None:
            fetch = f"model from {self.fetch_from}"
            if self.fetch_mb_s is not None:
                fetch += f" at {self.fetch_mb_s:g} MB/s"
                slices = self.fetch_slices
                details = [f"{slices} slice{'' if slices == 1 else 's'}"] if slices is not None else []
                if self.fetch_s is not None:
                    details.append(f"{self.fetch_s:g} s")
                fetch += f" ({', '.join(details)})" if details else ""
            parts.append(fetch)
        if self.load_s is not None:
            parts.append(f"loaded in {self.load_s:g} s")
        if self.ready_s is not None:
            parts.append(f"ready {self.ready_s:g} s after boot")
        return ", ".join(parts)


def ready_figures(report: Report) -> Figures | None:
    """The figures of a ready report (``None`` for any other report, or one without figures)."""
    if not report.ready:
        return None
    words = detail_fields(report.detail)
    found = {name: words[name] for name in FIGURES if name in words}
    if not found:
        return None

    def number(name: str) -> float | None:
        try:
            return float(found[name]) if name in found else None
        except ValueError:
            return None

    slices = number(FIGURE_FETCH_SLICES)
    return Figures(
        fetch_from=found.get(FIGURE_FETCH_FROM),
        fetch_mb_s=number(FIGURE_FETCH_MB_S),
        fetch_slices=int(slices) if slices is not None else None,
        fetch_s=number(FIGURE_FETCH_S),
        load_s=number(FIGURE_LOAD_S),
        ready_s=number(FIGURE_READY_S),
    )


# ---------------------------------------------------------------------- calibration and acceptance
# The first boot of a key measures the lossless options before the server opens (startup/calibrate.py);
# every boot names what it serves in the ready report's detail as ``name=value`` words, these:
FIELD_FLAGS = "flags"  # the candidate served, e.g. mtp2/fusion-on/gpu-sampling
FIELD_VERDICT = "verdict"  # verdict (a stored one decided) | calibrated (this boot measured) | default
FIELD_DECODE_TPS = "decode-tps"  # the served candidate's calibrated decode rate
FIELD_ACCEPTANCE = "acceptance"  # its calibrated MTP draft acceptance (absent without MTP)
FIELD_CALIBRATE_S = "calibrate-s"  # seconds the calibration step took on this boot
FIELD_PINNED = "pinned"  # stack-config keys that overrode the verdict, comma-separated
CALIBRATION_FIELDS = (
    FIELD_FLAGS, FIELD_VERDICT, FIELD_DECODE_TPS, FIELD_ACCEPTANCE, FIELD_CALIBRATE_S, FIELD_PINNED,
)  # fmt: skip

# The live guard (startup/accept_guard.py) reports under its own key, in the report format above:
# ``<state> <utc-time> <boot-id> acceptance=.. decode-tps=.. expect=.. drafted=..``, state ok | low |
# stale | no-mtp | waiting. At most every ACCEPT_REPORT_INTERVAL_S (the guest-attribute budget).
KEY_ACCEPT = "accept"
ACCEPT_REPORT_INTERVAL_S = 120
# Cloud Monitoring custom metrics on the member's gce_instance (a dashboard's source), written by
# the guard each minute with traffic: the MTP draft acceptance and the decode rate of that minute.
ACCEPTANCE_METRIC_TYPE = "custom.googleapis.com/qwen36/mtp_acceptance"
DECODE_RATE_METRIC_TYPE = "custom.googleapis.com/qwen36/decode_tokens_per_second"


def detail_fields(detail: str) -> dict[str, str]:
    """The ``name=value`` words of a report's detail (punctuation after a value is dropped)."""
    fields: dict[str, str] = {}
    for word in detail.split():
        name, sep, value = word.partition("=")
        if sep and name and value:
            fields[name] = value.rstrip(";,")
    return fields
