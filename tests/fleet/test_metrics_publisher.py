"""startup/metrics_publisher.py against the real pinned llama-server under real concurrent load,
publishing to a loopback stand-in of the metadata server and Cloud Monitoring's timeSeries.create."""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from infra.fleet_bounds import LOAD_METRIC_TYPE
from tests.fleet import monitoring_fake
from tests.fleet.monitoring_fake import GoogleFake, google_fake
from tests.harness.server import LlamaServer
from tests.measure.servers import TEST_KEY, serve

PUBLISHER = Path(__file__).resolve().parents[2] / "startup" / "metrics_publisher.py"
SLOTS = 2
CLIENTS = 4  # two more than the slots: two processing, two deferred
INTERVAL_S = 5.0  # the smallest the publisher allows (Cloud Monitoring's limit per series)
SETTLE_TIMEOUT_S = 30.0
POST_TIMEOUT_S = 30.0
# The publisher's own bound on one HTTP call (startup/metrics_publisher.py HTTP_TIMEOUT_S) plus slack.
STOP_BOUND_S = 12.0

# CreateTimeSeriesRequest as documented: {"timeSeries": [TimeSeries]}, each TimeSeries with
# metric {type, labels}, resource {type, labels} (a MonitoredResource), metricKind, valueType and
# exactly one point whose interval has an RFC 3339 endTime and whose TypedValue holds one value;
# an int64 is a JSON string. The gce_instance resource has the labels project_id, instance_id, zone.
# https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.timeSeries/create
# https://cloud.google.com/monitoring/api/ref_v3/rest/v3/TimeSeries
# https://cloud.google.com/monitoring/api/ref_v3/rest/v3/TypedValue
# https://cloud.google.com/monitoring/api/resources#tag_gce_instance
CREATE_TIME_SERIES_REQUEST = {
    "type": "object",
    "required": ["timeSeries"],
    "additionalProperties": False,
    "properties": {
        "timeSeries": {
            "type": "array",
            "minItems": 1,
            "maxItems": 200,
            "items": {
                "type": "object",
                "required": ["metric", "resource", "metricKind", "valueType", "points"],
                "additionalProperties": False,
                "properties": {
                    "metric": {
                        "type": "object",
                        "required": ["type"],
                        "additionalProperties": False,
                        "properties": {
                            "type": {"type": "string", "pattern": "^custom\\.googleapis\\.com/"},
                            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        },
                    },
                    "resource": {
                        "type": "object",
                        "required": ["type", "labels"],
                        "additionalProperties": False,
                        "properties": {
                            "type": {"const": "gce_instance"},
                            "labels": {
                                "type": "object",
                                "required": ["project_id", "instance_id", "zone"],
                                "additionalProperties": False,
                                "properties": {
                                    "project_id": {"type": "string", "minLength": 1},
                                    "instance_id": {"type": "string", "pattern": "^[0-9]+$"},
                                    "zone": {"type": "string", "pattern": "^[a-z]+-[a-z]+[0-9]+-[a-z]$"},
                                },
                            },
                        },
                    },
                    "metricKind": {"const": "GAUGE"},
                    "valueType": {"const": "INT64"},
                    "points": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["interval", "value"],
                            "additionalProperties": False,
                            "properties": {
                                "interval": {
                                    "type": "object",
                                    "required": ["endTime"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "endTime": {"type": "string"},
                                        "startTime": {"type": "string"},
                                    },
                                },
                                "value": {
                                    "type": "object",
                                    "required": ["int64Value"],
                                    "additionalProperties": False,
                                    "properties": {"int64Value": {"type": "string", "pattern": "^-?[0-9]+$"}},
                                },
                            },
                        },
                    },
                },
            },
        }
    },
}


@pytest.fixture(scope="module")
def server(
    llama_server_bin: Path, tiny_mtp_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("publisher")
    with serve(llama_server_bin, tiny_mtp_model, tmp, api_key=TEST_KEY, parallel=SLOTS) as srv:
        srv.key_file = tmp / "api-key"
        yield srv


def in_flight(server: LlamaServer) -> int:
    """The server's own figure, read independently of the publisher."""
    text = httpx.get(f"{server.base_url}/metrics", headers={"Authorization": f"Bearer {TEST_KEY}"}).text
    values = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith(("llamacpp:requests_processing", "llamacpp:requests_deferred"))
    }
    return round(sum(values.values()))


class Load:
    """CLIENTS threads, each sending the next completion as soon as its last one ends."""

    def __init__(self, server: LlamaServer) -> None:
        self.server = server
        self.stop = threading.Event()
        self.done = 0
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(CLIENTS)]

    def _client(self) -> None:
        body = {"prompt": "Count slowly:", "n_predict": 48, "cache_prompt": False}
        with httpx.Client(
            base_url=self.server.base_url, timeout=60, headers={"Authorization": f"Bearer {TEST_KEY}"}
        ) as http:
            while not self.stop.is_set():
                response = http.post("/completion", json=body)
                if response.status_code == 200:
                    self.done += 1
                else:
                    self.errors.append(f"{response.status_code} {response.text[:100]}")

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


def start_publisher(server: Any, fake: GoogleFake, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable, str(PUBLISHER), "--metrics-url", f"{server.base_url}/metrics",
            "--key-file", str(server.key_file), "--metric-type", LOAD_METRIC_TYPE,
            "--interval", str(INTERVAL_S), "--metadata-url", fake.url, "--monitoring-url", fake.url, *extra,
        ],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def wait_for_posts(fake: GoogleFake, count: int) -> None:
    deadline = time.monotonic() + POST_TIMEOUT_S
    while len(fake.posts) < count:
        assert time.monotonic() < deadline, f"only {len(fake.posts)} of {count} points arrived"
        time.sleep(0.05)


def point(body: dict[str, Any]) -> int:
    return int(body["timeSeries"][0]["points"][0]["value"]["int64Value"])


def test_publishes_requests_in_flight_under_real_load(server: Any) -> None:
    with google_fake() as fake:
        with Load(server) as load:
            deadline = time.monotonic() + SETTLE_TIMEOUT_S
            while in_flight(server) < CLIENTS:
                assert time.monotonic() < deadline, "the load never filled the slots and queue"
                time.sleep(0.02)
            publisher = start_publisher(server, fake, "--max-samples", "3")
            wait_for_posts(fake, 2)
        # The load has ended (every request answered); the third point, 5 s later, sees none.
        assert in_flight(server) == 0
        started = time.monotonic()
        _, log = publisher.communicate(timeout=INTERVAL_S + STOP_BOUND_S)
        stopped_after = time.monotonic() - started
    assert publisher.returncode == 0, log
    assert stopped_after <= INTERVAL_S + STOP_BOUND_S
    assert load.errors == [] and load.done > 0
    assert len(fake.posts) == 3, log
    under_load = [point(p.body) for p in fake.posts[:2]]
    # Two processing and two deferred. A sample can land between one request's end and its client's
    # next (long on a loaded machine), so one fewer is possible, never more; and never the slots
    # alone: the deferred requests count.
    assert all(SLOTS < n <= CLIENTS for n in under_load), under_load
    assert point(fake.posts[2].body) == 0
    validator = jsonschema.Draft202012Validator(CREATE_TIME_SERIES_REQUEST)
    ends = []
    for post in fake.posts:
        validator.validate(post.body)
        assert post.project == monitoring_fake.PROJECT_ID
        assert post.authorization == f"Bearer {monitoring_fake.TOKEN}"
        assert post.content_type == "application/json"
        series = post.body["timeSeries"][0]
        assert series["metric"]["type"] == LOAD_METRIC_TYPE
        assert series["resource"]["labels"] == {
            "project_id": monitoring_fake.PROJECT_ID,
            "instance_id": monitoring_fake.INSTANCE_ID,
            "zone": monitoring_fake.ZONE,
        }
        ends.append(datetime.fromisoformat(series["points"][0]["interval"]["endTime"].replace("Z", "+00:00")))
    # Points on one series at least 5 s apart, as Cloud Monitoring requires.
    assert all((b - a).total_seconds() >= INTERVAL_S - 0.1 for a, b in itertools.pairwise(ends))
    assert fake.metadata_without_flavor == 0
    assert TEST_KEY not in log


def test_stops_within_its_bound_when_asked(server: Any) -> None:
    with google_fake() as fake:
        publisher = start_publisher(server, fake)
        wait_for_posts(fake, 1)
        started = time.monotonic()
        publisher.send_signal(signal.SIGTERM)
        _, log = publisher.communicate(timeout=STOP_BOUND_S)
        assert time.monotonic() - started < STOP_BOUND_S
    assert publisher.returncode == 0, log
    assert "stopped after 1 published point" in log


def test_a_failed_scrape_publishes_nothing(server: Any) -> None:
    with google_fake() as fake:
        publisher = subprocess.Popen(
            [
                sys.executable, str(PUBLISHER), "--metrics-url", f"{server.base_url}/metrics",
                "--metric-type", LOAD_METRIC_TYPE, "--interval", str(INTERVAL_S), "--metadata-url", fake.url,
                "--monitoring-url", fake.url, "--max-runtime", "1",
            ],
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        _, log = publisher.communicate(timeout=STOP_BOUND_S)
    # Without the key, /metrics answers 401: no point is written (0 would read as idle).
    assert publisher.returncode == 0, log
    assert fake.posts == []
    assert "401" in log
