"""What the door records, read where it sends it: the fake Cloud Monitoring's ``timeSeries.create``
bodies. A compressed cold start (the member boots ``BOOT_S`` after the resize) and a delay the relay
adds before llama-server's first bytes (``DELAY_S``) are injected; the recorded hold, wake and time
to first token must match them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.door.conftest import AUTH, PROJECT, REGION, World, WorldFactory, ask, wait_for

pytestmark = pytest.mark.llama

BOOT_S = 1.5
DELAY_S = 1.0
# The door polls /health every 0.1 s here; process start, polls and a loaded 2-core machine.
SLACK_S = 1.5
TOKENS = 12


def _means(world: World, metric: str) -> list[tuple[dict[str, str], float, dict[str, Any]]]:
    out = []
    for series in world.google.points(metric):
        (point,) = series["points"]
        value = point["value"]
        mean = (
            value["distributionValue"]["mean"] if "distributionValue" in value else float(value["int64Value"])
        )
        out.append((series["metric"].get("labels", {}), mean, series))
    return out


@pytest.mark.parametrize("stream", [True, False])
def test_recorded_hold_wake_and_ttft_match_the_injected_delays(
    make_world: WorldFactory, stream: bool
) -> None:
    world = make_world(size=0, boot_s=BOOT_S)
    world.relay.response_delay_s = DELAY_S
    if stream:
        with httpx.stream(
            "POST",
            f"{world.url}/v1/chat/completions",
            headers=AUTH,
            json=ask(TOKENS, stream=True),
            timeout=60,
        ) as reply:
            assert reply.status_code == 200
            "".join(reply.iter_lines())
    else:
        reply = httpx.post(f"{world.url}/v1/chat/completions", headers=AUTH, json=ask(TOKENS), timeout=60)
        assert reply.status_code == 200
    wait_for(lambda: _means(world, "ttft") and _means(world, "wake"), 10, "the window's points")

    ((hold_labels, hold, _),) = _means(world, "hold")
    assert hold_labels == {"outcome": "served"}
    assert BOOT_S <= hold < BOOT_S + SLACK_S, hold
    ((wake_labels, wake, _),) = _means(world, "wake")
    assert wake_labels == {"resized": "true", "outcome": "ready"}
    assert BOOT_S <= wake <= hold + 0.05, (wake, hold)
    ((ttft_labels, ttft, series),) = _means(world, "ttft")
    assert ttft_labels == {"stream": str(stream).lower(), "held": "true"}
    # The first token left the door after the hold, then the relay's delay, then the prompt.
    assert hold + DELAY_S <= ttft < hold + DELAY_S + 0.5, (ttft, hold)
    ((_, tokens_out, _),) = _means(world, "tokens_out")
    assert tokens_out == TOKENS
    ((_, rate, _),) = _means(world, "decode_rate")
    assert rate > 0
    if stream:
        ((_, queue, _),) = _means(world, "server_queue")
        # From the door's send to the first token less prompt_ms: the relay's delay, which runs
        # beside the prompt's processing (a few ms here), hence the lower margin.
        assert DELAY_S - 0.1 <= queue < DELAY_S + 0.5, queue

    # The series' shape: a GAUGE distribution on the door's generic_task, counts that add up.
    assert series["metricKind"] == "GAUGE" and series["valueType"] == "DISTRIBUTION"
    assert series["resource"] == {
        "type": "generic_task",
        "labels": {
            "project_id": PROJECT,
            "location": REGION,
            "namespace": "qwen36",
            "job": "qwen36-door",
            "task_id": "5521896410023442211",
        },
    }
    dist = series["points"][0]["value"]["distributionValue"]
    assert sum(int(c) for c in dist["bucketCounts"]) == int(dist["count"]) == 1
    requests = {(labels["route"], labels["status"]): n for labels, n, _ in _means(world, "requests")}
    assert requests == {("chat", "200"): 1}
