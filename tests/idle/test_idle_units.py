"""The watcher's parsing of what it reads: llama-server's metrics text and GCE's created-by."""

from __future__ import annotations

import pytest
from vm_agent import AgentError

from startup.idle_watch import Group, Sample, parse_metrics

# The shape llama-server's /metrics answers (tools/server: Prometheus text with HELP/TYPE lines).
TEXT = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 120
llamacpp:tokens_predicted_total 48
llamacpp:n_decode_total 30
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
llamacpp:requests_deferred 2
"""


def test_metrics() -> None:
    assert parse_metrics(TEXT) == Sample(busy=3, counters=(120.0, 48.0))


def test_metrics_without_the_counters_are_an_error() -> None:
    with pytest.raises(AgentError, match="lacks llamacpp:tokens_predicted_total"):
        parse_metrics(TEXT.replace("llamacpp:tokens_predicted_total 48\n", ""))


def test_created_by() -> None:
    created_by = "projects/123456789012/regions/us-central1/instanceGroupManagers/qwen36-dev"
    assert Group.parse(created_by) == Group("123456789012", "us-central1", "qwen36-dev")
    group = Group.parse(created_by, "acme-llm-test")
    assert group.path() == "/projects/acme-llm-test/regions/us-central1/instanceGroupManagers/qwen36-dev"


@pytest.mark.parametrize(
    "created_by",
    [
        "projects/1/zones/us-central1-a/instanceGroupManagers/qwen36-dev",  # a zonal group
        "projects/1/regions/us-central1/instanceTemplates/t",
        "",
    ],
)
def test_created_by_that_is_not_a_regional_group(created_by: str) -> None:
    with pytest.raises(AgentError):
        Group.parse(created_by)
