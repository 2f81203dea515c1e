"""One Cloud Monitoring dashboard for the single server and its front door.

What the door records per request (door/metrics.json: time to first token, time held for a wake,
queue time at the server, tokens in and out, decode rate, status; each wake's duration) beside what
the server's own agent publishes (startup/accept_guard.py: MTP draft acceptance and decode rate, per
member) and what GCE already measures (the members' uptime, which is what the month's spend is made
of). The metric types come from their one definitions: door/metrics.json (read as data: infra never
imports the door) and infra/boot_protocol.py.

llama-server b11434's /metrics has no KV-cache figure (facts.md lists its gauges), so the dashboard
shows none; user-defined metrics are created by their first write, so charts show "no data" until
the door has served a request. https://cloud.google.com/monitoring/custom-metrics/creating-metrics
The layout: https://cloud.google.com/monitoring/api/ref_v3/rest/v1/projects.dashboards#Dashboard
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_gcp as gcp

from infra import boot_protocol
from infra.config import StackConfig
from infra.door import door_metrics
from infra.pricing import estimate_hourly_cost

COLUMNS = 48
TILE_W = 24
TILE_H = 16
ALIGNMENT = "60s"
DOOR_RESOURCE = "generic_task"
# GCE's own uptime of a VM, a DELTA of seconds per sample, under its PromQL name (the metric type with
# its first "/" a ":" and "." and "/" as "_").
# https://cloud.google.com/monitoring/api/metrics_gcp_c#gcp-compute (instance/uptime)
# https://cloud.google.com/monitoring/promql/promql-mapping
UPTIME_PROMQL = "compute_googleapis_com:instance_uptime"
# The door's series carry the key's name as the label `key` (never the key: docs/door.md).
KEY_LABEL = "key"


def promql_name(metric_type: str) -> str:
    """A metric type's PromQL name: the first "/" a ":", every other "/" and "." a "_"; a distribution
    is then a histogram, its total the ``_sum`` series.
    https://cloud.google.com/monitoring/promql/promql-mapping"""
    domain, path = metric_type.split("/", 1)
    return f"{domain.replace('.', '_')}:{path.replace('/', '_').replace('.', '_')}"


def spend_promql(group: str, hourly: float) -> str:
    """The server VM's estimated spend of the last 30 days: its members' uptime times the hourly price."""
    return (
        f"sum(sum_over_time({UPTIME_PROMQL}"
        f'{{monitored_resource="gce_instance",instance_name=~"{group}-.*"}}[30d])) / 3600 * {hourly}'
    )


def _tokens_30d(metric_type: str, aggregate: str) -> str:
    series = f'{promql_name(metric_type)}_sum{{monitored_resource="{DOOR_RESOURCE}"}}'
    return f"{aggregate}(sum_over_time({series}[30d]))"


def spend_by_key_promql(group: str, hourly: float, tokens_in: str, tokens_out: str) -> str:
    """The same 30 days' spend split by each key's share of the tokens the door counted (prompt and
    completion alike: both occupy the one server)."""
    per_key = " + ".join(_tokens_30d(t, f"sum by ({KEY_LABEL}) ") for t in (tokens_in, tokens_out))
    total = " + ".join(_tokens_30d(t, "sum") for t in (tokens_in, tokens_out))
    return f"({per_key}) / scalar({total}) * scalar({spend_promql(group, hourly)})"


def _series(metric_type: str, resource: str, aligner: str, reducer: str, by: Sequence[str] = ()) -> dict:
    aggregation: dict[str, Any] = {
        "alignmentPeriod": ALIGNMENT,
        "perSeriesAligner": aligner,
        "crossSeriesReducer": reducer,
    }
    if by:
        aggregation["groupByFields"] = list(by)
    return {
        "timeSeriesQuery": {
            "timeSeriesFilter": {
                "filter": f'metric.type="{metric_type}" resource.type="{resource}"',
                "aggregation": aggregation,
            }
        },
        "plotType": "LINE",
    }


def _chart(title: str, *data_sets: dict, unit: str = "") -> dict:
    chart: dict[str, Any] = {"dataSets": list(data_sets)}
    if unit:
        chart["yAxis"] = {"label": unit, "scale": "LINEAR"}
    return {"title": title, "xyChart": chart}


def _percentiles(metric_type: str, resource: str = DOOR_RESOURCE) -> list[dict]:
    return [
        _series(metric_type, resource, aligner, "REDUCE_MEAN")
        for aligner in ("ALIGN_PERCENTILE_50", "ALIGN_PERCENTILE_95")
    ]


def widgets(cfg: StackConfig, group: str) -> list[dict]:
    door = door_metrics()
    hourly = estimate_hourly_cost(cfg).usd_per_hour
    spend = spend_promql(group, hourly)
    by_key = ["metric.label." + KEY_LABEL]
    return [
        _chart("Time to first token (door, p50 and p95)", *_percentiles(door["ttft"]["type"]), unit="s"),
        _chart("Time held for a wake (door, p50 and p95)", *_percentiles(door["hold"]["type"]), unit="s"),
        _chart("Wake duration (door, p50 and p95)", *_percentiles(door["wake"]["type"]), unit="s"),
        _chart(
            "Queue time at the server (door, p50 and p95)",
            *_percentiles(door["server_queue"]["type"]),
            unit="s",
        ),
        _chart(
            "Requests by status (door, per minute)",
            _series(
                door["requests"]["type"], DOOR_RESOURCE, "ALIGN_SUM", "REDUCE_SUM", ["metric.label.status"]
            ),
        ),
        _chart(
            "Tokens in and out per request (door, p50)",
            _series(door["tokens_in"]["type"], DOOR_RESOURCE, "ALIGN_PERCENTILE_50", "REDUCE_MEAN"),
            _series(door["tokens_out"]["type"], DOOR_RESOURCE, "ALIGN_PERCENTILE_50", "REDUCE_MEAN"),
        ),
        _chart(
            "Decode rate (door per request, p50; server live)",
            _series(door["decode_rate"]["type"], DOOR_RESOURCE, "ALIGN_PERCENTILE_50", "REDUCE_MEAN"),
            _series(boot_protocol.DECODE_RATE_METRIC_TYPE, "gce_instance", "ALIGN_MEAN", "REDUCE_MEAN"),
            unit="tok/s",
        ),
        _chart(
            "MTP draft acceptance (server, live)",
            _series(boot_protocol.ACCEPTANCE_METRIC_TYPE, "gce_instance", "ALIGN_MEAN", "REDUCE_MEAN"),
        ),
        {
            "title": (
                f"Estimated spend, last 30 days (the server VM at ${hourly:.2f}/h; "
                "disk, bucket and image not included)"
            ),
            "scorecard": {"timeSeriesQuery": {"prometheusQuery": spend}},
        },
        _chart(
            "Requests by key (door, per minute)",
            _series(door["requests"]["type"], DOOR_RESOURCE, "ALIGN_SUM", "REDUCE_SUM", by_key),
        ),
        _chart(
            "Prompt and completion tokens by key (door, per minute)",
            _series(door["tokens_in"]["type"], DOOR_RESOURCE, "ALIGN_SUM", "REDUCE_SUM", by_key),
            _series(door["tokens_out"]["type"], DOOR_RESOURCE, "ALIGN_SUM", "REDUCE_SUM", by_key),
        ),
        {
            "title": "Estimated spend by key, last 30 days (the spend above, by each key's share of tokens)",
            "timeSeriesTable": {
                "dataSets": [
                    {
                        "timeSeriesQuery": {
                            "prometheusQuery": spend_by_key_promql(
                                group, hourly, door["tokens_in"]["type"], door["tokens_out"]["type"]
                            )
                        }
                    }
                ]
            },
        },
        {
            "title": "About these figures",
            "text": {
                "content": (
                    "Door figures: per request, written each minute by the front door (door/metrics.py). "
                    "Server figures: the member's acceptance guard (startup/accept_guard.py). "
                    "llama-server b11434 exports no KV-cache figure. The spend is the members' uptime "
                    "times the estimate of infra/pricing.py; by key, it is split by each key's share of "
                    "the prompt and completion tokens the door counted (`qwen36 keys list` has the figures)."
                ),
                "format": "MARKDOWN",
            },
        },
    ]


def dashboard_json(cfg: StackConfig, group: str) -> str:
    tiles = [
        {
            "xPos": (i % 2) * TILE_W,
            "yPos": (i // 2) * TILE_H,
            "width": TILE_W,
            "height": TILE_H,
            "widget": widget,
        }
        for i, widget in enumerate(widgets(cfg, group))
    ]
    return json.dumps(
        {
            "displayName": f"{group}: front door and server",
            "mosaicLayout": {"columns": COLUMNS, "tiles": tiles},
        },
        sort_keys=True,
    )


@dataclass
class DashboardArgs:
    cfg: StackConfig
    project: str
    group_name: str
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


class Dashboard(pulumi.ComponentResource):
    """The dashboard; ``url`` is its page in the Cloud console (the stack output ``dashboardUrl``)."""

    dashboard: gcp.monitoring.Dashboard
    url: pulumi.Output[str]

    def __init__(self, name: str, args: DashboardArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:Dashboard", name, None, opts)
        self.dashboard = gcp.monitoring.Dashboard(
            f"{name}-dashboard",
            project=args.project,
            dashboard_json=dashboard_json(args.cfg, args.group_name),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        # The provider's id is projects/<number>/dashboards/<id>; the console names it by the last part.
        self.url = self.dashboard.id.apply(
            lambda dashboard_id: (
                "https://console.cloud.google.com/monitoring/dashboards/builder/"
                f"{dashboard_id.rsplit('/', 1)[-1]}?project={args.project}"
            )
        )
        self.register_outputs({"url": self.url})
