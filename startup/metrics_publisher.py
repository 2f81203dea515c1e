"""Publish this server's requests in flight to Cloud Monitoring, for the fleet's autoscaler.

Runs on every fleet member (stdlib only, and ``vm_agent.py`` installed next to it; the boot
script embeds both and starts it as a supervised systemd unit once llama-server is healthy).
Every ``--interval`` seconds it reads llama-server's Prometheus ``/metrics``
(``llamacpp:requests_processing`` + ``llamacpp:requests_deferred``) and writes one point of a
GAUGE custom metric on this VM's own ``gce_instance`` resource through
``projects.timeSeries.create``:
https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.timeSeries/create

Why a small publisher and not the Ops Agent: the agent's Prometheus receiver writes to the
``prometheus_target`` resource (Managed Service for Prometheus), and the MIG autoscaler reads a
metric on any resource but ``gce_instance`` as one value for the whole group, not one per member
(regionAutoscalers ``customMetricUtilizations[].filter``,
https://cloud.google.com/compute/docs/reference/rest/v1/regionAutoscalers). Per-instance
scaling needs a series per VM on ``gce_instance``, which is what this writes.

Bounds: every HTTP call has a timeout; a failed scrape publishes nothing (a missing point is not
"idle": writing 0 would invite a scale-in); SIGTERM/SIGINT (``systemctl stop``) ends the loop
within one HTTP timeout; ``--max-runtime`` and ``--max-samples`` end it by themselves.
Exit status: 0 when stopped or done, 1 when this VM's identity cannot be read (systemd restarts
it), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from vm_agent import (
    IN_FLIGHT,
    METADATA_URL,
    AgentError,
    Metadata,
    bearer,
    metric_values,
    read_metrics,
    request,
    utc,
)

MONITORING_URL = "https://monitoring.googleapis.com"
SCRAPE_TIMEOUT_S = 5.0
IDENTITY_ATTEMPTS = 5
IDENTITY_PAUSE_S = 2.0
# Cloud Monitoring rejects points on one series closer than 5 s apart.
# https://cloud.google.com/monitoring/quotas#custom_metrics_quotas
MIN_INTERVAL_S = 5.0


def log(message: str) -> None:
    print(f"{utc(time.time())} metrics-publisher: {message}", file=sys.stderr, flush=True)


def parse_in_flight(text: str) -> int | None:
    """requests_processing + requests_deferred from Prometheus text, or None if either is missing."""
    try:
        return round(sum(metric_values(text, IN_FLIGHT).values()))
    except AgentError:
        return None


def scrape(url: str, key_file: Path | None) -> int | None:
    return parse_in_flight(read_metrics(url, key_file, SCRAPE_TIMEOUT_S))


def time_series_body(metric_type: str, labels: dict[str, str], value: int, end: datetime) -> dict[str, Any]:
    """One GAUGE INT64 point on this VM's gce_instance, in timeSeries.create's request shape.

    CreateTimeSeriesRequest {"timeSeries": [TimeSeries]}; a GAUGE point needs only endTime, and an
    int64 value travels as a JSON string.
    https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.timeSeries/create
    https://cloud.google.com/monitoring/api/ref_v3/rest/v3/TimeSeries
    https://cloud.google.com/monitoring/api/resources#tag_gce_instance
    """
    return {
        "timeSeries": [
            {
                "metric": {"type": metric_type},
                "resource": {"type": "gce_instance", "labels": dict(labels)},
                "metricKind": "GAUGE",
                "valueType": "INT64",
                "points": [
                    {
                        "interval": {"endTime": end.strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
                        "value": {"int64Value": str(value)},
                    }
                ],
            }
        ]
    }


def publish(monitoring: str, project: str, token: str, body: dict[str, Any]) -> None:
    url = f"{monitoring}/v3/projects/{project}/timeSeries"
    # Tried once: timeSeries.create has no request id that would make a repeat safe, and the next
    # point follows within one interval (a missing point is not read as "idle").
    status, answer = request("POST", url, bearer(token), json.dumps(body).encode())
    if status != 200:
        raise AgentError(f"timeSeries.create answered {status}: {answer[:300].decode(errors='replace')}")


def read_identity(metadata: Metadata, stop: threading.Event) -> dict[str, str] | None:
    """The gce_instance labels, tried IDENTITY_ATTEMPTS times; None when stopped or out of tries."""
    for attempt in range(1, IDENTITY_ATTEMPTS + 1):
        try:
            return metadata.instance_labels()
        except (OSError, AgentError, ValueError) as exc:
            log(f"cannot read this VM's identity from the metadata server (attempt {attempt}): {exc}")
            if stop.wait(IDENTITY_PAUSE_S):
                return None
    return None


def run(args: argparse.Namespace, stop: threading.Event) -> int:
    metadata = Metadata(args.metadata_url)
    labels = read_identity(metadata, stop)
    if labels is None:
        return 0 if stop.is_set() else 1
    deadline = time.monotonic() + args.max_runtime if args.max_runtime else None
    samples = 0
    log(f"publishing {args.metric_type} every {args.interval:g} s for instance {labels['instance_id']}")
    while not stop.is_set():
        started = time.monotonic()
        try:
            value = scrape(args.metrics_url, args.key_file)
        except (OSError, AgentError, ValueError) as exc:
            value = None
            log(f"scrape of {args.metrics_url} failed: {exc}")
        if value is None:
            log("no requests_processing/requests_deferred in /metrics: nothing published")
        else:
            body = time_series_body(args.metric_type, labels, value, datetime.now(timezone.utc))  # noqa: UP017
            try:
                publish(args.monitoring_url, labels["project_id"], metadata.token(), body)
                samples += 1
            except AgentError as exc:
                log(str(exc))
            except (OSError, ValueError, KeyError) as exc:
                log(f"timeSeries.create failed: {exc}")
        if args.max_samples and samples >= args.max_samples:
            break
        if deadline is not None and time.monotonic() >= deadline:
            break
        pause = max(0.0, args.interval - (time.monotonic() - started))
        if deadline is not None:
            pause = min(pause, max(0.0, deadline - time.monotonic()))
        stop.wait(pause)
    log(f"stopped after {samples} published point(s)")
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--metrics-url", required=True, help="llama-server's /metrics URL")
    parser.add_argument(
        "--key-file", type=Path, help="file holding the server's API key (sent as a bearer token)"
    )
    parser.add_argument("--metric-type", required=True, help="custom.googleapis.com/... metric type")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between points (>= 5)")
    parser.add_argument("--metadata-url", default=METADATA_URL)
    parser.add_argument("--monitoring-url", default=MONITORING_URL)
    parser.add_argument(
        "--max-runtime", type=float, default=0.0, help="stop after this many seconds (0: never)"
    )
    parser.add_argument("--max-samples", type=int, default=0, help="stop after this many points (0: never)")
    args = parser.parse_args(argv)
    if args.interval < MIN_INTERVAL_S:
        parser.error(
            f"--interval must be at least {MIN_INTERVAL_S:g} s (Cloud Monitoring's limit per series)"
        )
    if not args.metric_type.startswith("custom.googleapis.com/"):
        parser.error("--metric-type must start with custom.googleapis.com/")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return run(args, stop)


if __name__ == "__main__":
    sys.exit(main())
