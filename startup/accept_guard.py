"""Guard the calibration's verdict on live traffic; publish acceptance and decode rate.

Runs on every server VM as a supervised systemd unit, started by the boot once llama-server is
ready (standard library only, Python 3.10; ``vm_agent.py`` and ``calibrate.py`` installed next to
it). Every ``--poll-seconds`` it reads llama-server's ``/metrics`` counters
``llamacpp:spec_decode_num_draft_tokens_total`` / ``..._accepted_tokens_total`` (MTP drafts made
and accepted) and ``llamacpp:tokens_predicted_total`` / ``..._seconds_total`` (decode tokens and
time), and:

* publishes, for the last poll's traffic, the acceptance and the decode rate as Cloud Monitoring
  custom metrics on this VM's ``gce_instance`` (``infra/boot_protocol.py`` ACCEPTANCE_METRIC_TYPE,
  DECODE_RATE_METRIC_TYPE: a dashboard's source; nothing is written for a minute without traffic);
* reports them under the guest attribute ``qwen36/accept`` (``python -m qwen36 status`` reads it);
* compares the acceptance over the trailing window with the verdict's for the candidate served.

The stale rule: with at least ``--min-drafted`` draft tokens (20,000) in the trailing
``--window-seconds`` (30 min), the window's acceptance below ``--low-ratio`` (0.6) of the
verdict's is "low"; when every look with enough traffic has been low for ``--hold-seconds``
(30 min more), the guard logs it and marks the verdict stale in the bucket, so the next boot of any
member calibrates again. Why these: acceptance moves with the content (the calibration's four
prompts against a user's traffic; math is drafted better than chat), but the CUDA regressions
reported on this model family cut it to 0.42-0.61 of its good value (ggml-org/llama.cpp#26750,
#29168), so 0.6 separates a broken build or setup from a different mix of workloads. A draft's
acceptance depends on its request, so the evidence is the number of requests, not of tokens:
20,000 drafted tokens are some 20-80 requests of 256-1,000 generated tokens at n-max 2, and 30
minutes of low acceptance after a 30-minute window keep one odd session from flipping the verdict.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import calibrate
from vm_agent import (
    BOOT_ID_FILE,
    METADATA_URL,
    AgentError,
    Metadata,
    bearer,
    boot_id,
    metric_values,
    read_metrics,
    request,
    utc,
    utc_precise,
)

DRAFTED = "llamacpp:spec_decode_num_draft_tokens_total"
ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
TOKENS = "llamacpp:tokens_predicted_total"
SECONDS = "llamacpp:tokens_predicted_seconds_total"
GUEST_ATTR_PATH = "instance/guest-attributes/qwen36/accept"
MONITORING_URL = "https://monitoring.googleapis.com"

DEFAULT_POLL_S = 60.0
DEFAULT_WINDOW_S = 1800.0
DEFAULT_HOLD_S = 1800.0
DEFAULT_MIN_DRAFTED = 20_000
DEFAULT_LOW_RATIO = 0.6
DEFAULT_REPORT_S = 120.0


def log(message: str) -> None:
    print(f"{utc(time.time())} qwen36-accept-guard: {message}", flush=True)


@dataclass(frozen=True)
class Point:
    t: float
    drafted: float
    accepted: float
    tokens: float
    seconds: float


def parse(text: str, t: float) -> Point:
    """The four counters; the draft ones read 0 when the server makes no drafts (no MTP)."""
    values = metric_values(text, (TOKENS, SECONDS), optional=(DRAFTED, ACCEPTED))
    return Point(t, values.get(DRAFTED, 0.0), values.get(ACCEPTED, 0.0), values[TOKENS], values[SECONDS])


def ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


@dataclass
class Settings:
    metrics_url: str
    key_file: Path | None
    expect: float | None
    poll_s: float = DEFAULT_POLL_S
    window_s: float = DEFAULT_WINDOW_S
    hold_s: float = DEFAULT_HOLD_S
    min_drafted: float = DEFAULT_MIN_DRAFTED
    low_ratio: float = DEFAULT_LOW_RATIO
    report_s: float = DEFAULT_REPORT_S
    max_runtime_s: float = 0.0


class Cloud:
    """Where the guard writes: the guest attribute, Cloud Monitoring, the verdict in the bucket."""

    def __init__(
        self,
        metadata: Metadata,
        store: calibrate.VerdictStore | None,
        key: calibrate.Key | None,
        monitoring_url: str,
        metric_types: tuple[str, str] | None,
    ) -> None:
        self.metadata = metadata
        self.store = store
        self.key = key
        self.monitoring_url = monitoring_url.rstrip("/")
        self.metric_types = metric_types
        self._labels: dict[str, str] | None = None

    def report(self, value: str) -> None:
        # NOTE: best effort; guest attributes need enable-guest-attributes=TRUE on the VM.
        # https://cloud.google.com/compute/docs/metadata/manage-guest-attributes
        try:
            self.metadata.put(GUEST_ATTR_PATH, value)
        except (OSError, AgentError) as exc:
            log(f"warning: guest attribute qwen36/accept not written ({exc})")

    def publish(self, acceptance: float | None, decode_tps: float, end: float) -> None:
        """One DOUBLE GAUGE point per metric on this VM's gce_instance.
        https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.timeSeries/create"""
        if self.metric_types is None:
            return
        try:
            if self._labels is None:
                self._labels = self.metadata.instance_labels()
            stamp = utc_precise(end)
            series = []
            for metric, value in zip(self.metric_types, (acceptance, decode_tps), strict=True):
                if value is None:
                    continue
                series.append(
                    {
                        "metric": {"type": metric},
                        "resource": {"type": "gce_instance", "labels": dict(self._labels)},
                        "metricKind": "GAUGE",
                        "valueType": "DOUBLE",
                        "points": [{"interval": {"endTime": stamp}, "value": {"doubleValue": value}}],
                    }
                )
            url = f"{self.monitoring_url}/v3/projects/{self._labels['project_id']}/timeSeries"
            body = json.dumps({"timeSeries": series}).encode()
            status, answer = request("POST", url, bearer(self.metadata.token()), body)
            if status != 200:
                log(f"timeSeries.create answered {status}: {answer[:200].decode(errors='replace')}")
        except (OSError, AgentError, ValueError, KeyError) as exc:
            log(f"warning: metrics not published ({exc})")

    def mark_stale(self, reason: str, details: dict[str, Any]) -> bool:
        if self.store is None or self.key is None:
            log("no verdict store: nothing to mark stale")
            return False
        try:
            return self.store.mark_stale(self.key, reason, details)
        except (calibrate.GcsError, OSError, ValueError, KeyError) as exc:
            log(f"warning: the verdict could not be marked stale ({exc})")
            return False


class Guard:
    def __init__(
        self,
        settings: Settings,
        cloud: Cloud,
        boot_id: str = "unknown",
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.s = settings
        self.cloud = cloud
        self.boot_id = boot_id
        self.clock, self.wall, self.sleep = clock, wall, sleep
        self.history: deque[Point] = deque()
        self.low_since: float | None = None
        self.stale = False
        self.state = "waiting" if settings.expect is not None else "no-mtp"
        self.window_acceptance: float | None = None
        self.last_report = -1e18

    def read(self) -> Point | None:
        try:
            return parse(read_metrics(self.s.metrics_url, self.s.key_file), self.clock())
        except (OSError, AgentError, ValueError) as exc:
            log(f"/metrics not read ({exc})")
            return None

    def observe(self, point: Point) -> None:
        if self.history and (
            point.tokens < self.history[-1].tokens or point.drafted < self.history[-1].drafted
        ):
            log("the counters went back (llama-server restarted): the window starts again")
            self.history.clear()
        previous = self.history[-1] if self.history else None
        self.history.append(point)
        # Keep one point older than the window: the window's base.
        while len(self.history) > 2 and self.history[1].t <= point.t - self.s.window_s:
            self.history.popleft()
        if previous is not None and point.tokens > previous.tokens:
            self.cloud.publish(
                ratio(point.accepted - previous.accepted, point.drafted - previous.drafted),
                (point.tokens - previous.tokens) / max(1e-9, point.seconds - previous.seconds),
                self.wall(),
            )
        self.judge(point)

    def judge(self, point: Point) -> None:
        if self.s.expect is None or self.stale:
            return
        base = self.history[0]
        if point.t - base.t < self.s.window_s or point.drafted - base.drafted < self.s.min_drafted:
            # Too little traffic to judge: neither low nor a reason to forget an earlier low.
            self.state = "low" if self.low_since is not None else "waiting"
            return
        self.window_acceptance = ratio(point.accepted - base.accepted, point.drafted - base.drafted)
        limit = self.s.low_ratio * self.s.expect
        if self.window_acceptance is None or self.window_acceptance >= limit:
            if self.low_since is not None:
                log(f"acceptance {self.window_acceptance:.1%} is back above {limit:.1%}")
            self.low_since = None
            self.state = "ok"
            return
        if self.low_since is None:
            self.low_since = point.t
            log(
                f"acceptance {self.window_acceptance:.1%} over the last {self.s.window_s / 60:g} min "
                f"({point.drafted - base.drafted:.0f} drafts) is below {self.s.low_ratio:g} x the verdict's "
                f"{self.s.expect:.1%}; the verdict goes stale if it stays so for {self.s.hold_s / 60:g} min"
            )
        self.state = "low"
        if point.t - self.low_since >= self.s.hold_s:
            reason = (
                f"live acceptance {self.window_acceptance:.1%} stayed below {self.s.low_ratio:g} x the "
                f"verdict's {self.s.expect:.1%} for {(point.t - self.low_since) / 60:.0f} min"
            )
            details = {
                "live_acceptance": round(self.window_acceptance, 4),
                "verdict_acceptance": self.s.expect,
                "window_drafted": int(point.drafted - base.drafted),
                "boot_id": self.boot_id,
            }
            marked = self.cloud.mark_stale(reason, details)
            done = "verdict marked stale, the next boot calibrates again" if marked else "not marked"
            log(f"{reason}: {done}")
            self.stale = True
            self.state = "stale"

    def report_value(self, point: Point) -> str:
        fields = {
            "acceptance": _fmt(ratio(point.accepted, point.drafted), 4),
            "decode-tps": _fmt(ratio(point.tokens, point.seconds), 1),
            "recent-acceptance": _fmt(self.window_acceptance, 4),
            "expect": _fmt(self.s.expect, 4),
            "drafted": str(int(point.drafted)),
        }
        detail = " ".join(f"{k}={v}" for k, v in fields.items())
        return f"{self.state} {utc(self.wall())} {self.boot_id} {detail}"

    def run(self, stop: threading.Event) -> int:
        began = self.clock()
        expect = "none (no MTP served)" if self.s.expect is None else f"{self.s.expect:.1%}"
        log(f"watching {self.s.metrics_url}; the verdict's acceptance {expect}")
        while not stop.is_set():
            point = self.read()
            if point is not None:
                self.observe(point)
                if self.clock() - self.last_report >= self.s.report_s:
                    self.cloud.report(self.report_value(point))
                    self.last_report = self.clock()
            if self.s.max_runtime_s and self.clock() - began >= self.s.max_runtime_s:
                break
            stop.wait(self.s.poll_s)
        return 0


def _fmt(value: float | None, digits: int) -> str:
    return "none" if value is None else f"{value:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="accept_guard.py", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--metrics-url", required=True)
    parser.add_argument("--key-file", type=Path)
    parser.add_argument("--expect-file", type=Path, required=True, help="calibrate.py's expect.json")
    parser.add_argument("--key-json", type=Path, help="calibrate.py's key.json (the verdict's key)")
    parser.add_argument("--bucket", default="")
    parser.add_argument("--verdict-object", default="")
    parser.add_argument("--gcs-url", default="")
    parser.add_argument("--metadata-url", default=METADATA_URL)
    parser.add_argument("--monitoring-url", default=MONITORING_URL)
    parser.add_argument("--acceptance-metric", default="")
    parser.add_argument("--decode-metric", default="")
    parser.add_argument("--poll-seconds", type=float, default=DEFAULT_POLL_S)
    parser.add_argument("--window-seconds", type=float, default=DEFAULT_WINDOW_S)
    parser.add_argument("--hold-seconds", type=float, default=DEFAULT_HOLD_S)
    parser.add_argument("--min-drafted", type=float, default=DEFAULT_MIN_DRAFTED)
    parser.add_argument("--low-ratio", type=float, default=DEFAULT_LOW_RATIO)
    parser.add_argument("--report-interval-seconds", type=float, default=DEFAULT_REPORT_S)
    parser.add_argument("--max-runtime", type=float, default=0.0)
    parser.add_argument("--boot-id-file", type=Path, default=Path(BOOT_ID_FILE))
    args = parser.parse_args(argv)
    expect_doc = json.loads(args.expect_file.read_text(encoding="utf-8"))
    candidate = expect_doc.get("candidate") or {}
    expect = expect_doc.get("acceptance") if int(candidate.get("n_max", 0)) > 0 else None
    key = None
    if args.key_json is not None and args.key_json.is_file():
        key = calibrate.Key(**json.loads(args.key_json.read_text(encoding="utf-8")))
    metadata = Metadata(args.metadata_url)
    store = None
    if args.bucket and args.verdict_object:
        store = calibrate.verdict_store(args.bucket, args.verdict_object, args.gcs_url, args.metadata_url)
    metrics = (
        (args.acceptance_metric, args.decode_metric)
        if args.acceptance_metric and args.decode_metric
        else None
    )
    cloud = Cloud(metadata, store, key, args.monitoring_url, metrics)
    settings = Settings(
        metrics_url=args.metrics_url,
        key_file=args.key_file,
        expect=float(expect) if expect is not None else None,
        poll_s=args.poll_seconds,
        window_s=args.window_seconds,
        hold_s=args.hold_seconds,
        min_drafted=args.min_drafted,
        low_ratio=args.low_ratio,
        report_s=args.report_interval_seconds,
        max_runtime_s=args.max_runtime,
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return Guard(settings, cloud, boot_id(args.boot_id_file)).run(stop)


if __name__ == "__main__":
    sys.exit(main())
