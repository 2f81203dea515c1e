"""The cost estimate and the ready-to-paste commands, for configs the stack files don't cover."""

from __future__ import annotations

import hashlib
import re
import shlex

import pytest
from program_mocks import PROJECT, ROOT

from infra.config import G2_MACHINE_TYPES, parse_config
from infra.model_cache import MAX_BUCKET_NAME, model_bucket_name, model_object_name
from infra.outputs import PLAIN_OUTPUT_KEYS, Place, commands, plain_outputs
from infra.pricing import SEED_USD_PER_HOUR, estimate_hourly_cost


def cfg_for(**values: object):  # type: ignore[no-untyped-def]
    return parse_config({f"{PROJECT}:{k}": v for k, v in values.items()})


@pytest.mark.parametrize("model", ["SPOT", "STANDARD"])
def test_cost_grows_with_the_g2_shape_and_stays_below_linear(model: str) -> None:
    costs = [
        estimate_hourly_cost(cfg_for(machineType=m, provisioningModel=model)).usd_per_hour
        for m in G2_MACHINE_TYPES
    ]
    assert costs[0] == SEED_USD_PER_HOUR[model]
    assert costs == sorted(costs) and len(set(costs)) == len(costs)
    # The L4 does not double with the vCPUs: g2-standard-32 costs less than 4x g2-standard-8.
    assert costs[-1] < 4 * costs[0]


def test_cost_label_says_what_it_is() -> None:
    label = estimate_hourly_cost(
        cfg_for(machineType="g2-standard-16", region="europe-west4", zones=["europe-west4-a"])
    )
    assert "estimate" in label.label and "scaled from g2-standard-8" in label.label
    assert "us-central1 prices" in label.label and "Source:" in label.label


def test_spot_is_cheaper_than_on_demand() -> None:
    spot = estimate_hourly_cost(cfg_for()).usd_per_hour
    on_demand = estimate_hourly_cost(cfg_for(provisioningModel="STANDARD")).usd_per_hour
    assert spot < on_demand


def place_for(project: str = "p", door_url: str | None = None) -> Place:
    return Place(
        project=project,
        region="us-central1",
        group="qwen36-dev",
        zones=("us-central1-a",),
        door_url=door_url,
    )


def test_commands_quote_what_the_shell_would_split() -> None:
    for name, command in commands(place_for(project="my project")).items():
        words = shlex.split(command)
        assert "--project=my project" in words, name


def test_plain_outputs_keys_are_the_exported_keys() -> None:
    assert tuple(plain_outputs(cfg_for(), place_for())) == PLAIN_OUTPUT_KEYS


def test_an_open_range_still_points_at_the_tunnel_since_the_members_address_changes() -> None:
    outputs = plain_outputs(
        cfg_for(door=False, externalIp=True, sourceRanges=["198.51.100.7/32"]), place_for()
    )
    assert outputs["webUiUrl"] == "http://localhost:8080/"
    assert "qwen36 tunnel " in outputs["access"]


def test_the_door_is_the_endpoint_where_there_is_one() -> None:
    door = "https://qwen36-dev-door-abc123-uc.a.run.app"
    outputs = plain_outputs(cfg_for(), place_for(door_url=door))
    assert (outputs["webUiUrl"], outputs["apiBaseUrl"]) == (f"{door}/", f"{door}/v1")
    assert door in outputs["access"] and "qwen36 tunnel " in outputs["access"]


def test_model_object_name_keeps_the_repo_path() -> None:
    cfg = cfg_for(modelRepo="acme/Tiny-GGUF", modelFile="sub/tiny.gguf")
    assert model_object_name(cfg) == "models/acme/Tiny-GGUF/sub/tiny.gguf"


def test_container_logs_command_names_the_boot_scripts_container() -> None:
    from qwen36.group import CONTAINER_NAME

    boot = (ROOT / "startup" / "boot.sh").read_text()
    names = re.findall(r"^CONTAINER_NAME=(\S+)$", boot, flags=re.MULTILINE)
    assert names == [CONTAINER_NAME]


def test_bucket_name_for_ordinary_and_awkward_projects() -> None:
    digest = hashlib.sha256(b"acme-llm").hexdigest()[:12]
    assert model_bucket_name("acme-llm", "qwen36-dev", "us-central1") == f"qwen36-dev-us-central1-{digest}"
    # The project id itself never appears in the public name.
    for project in ("acme-llm", "example.com:llm", "goog-research-1", "google-team-x"):
        name = model_bucket_name(project, "qwen36-dev", "us-central1")
        assert project.split(":")[-1] not in name
        assert _valid_bucket_name(name), name
    assert model_bucket_name("p1", "qwen36-dev", "us-central1") != model_bucket_name(
        "p2", "qwen36-dev", "us-central1"
    )
    # "google"-like words and a "goog" start are never produced, whatever the stack is called.
    for deployment in ("qwen36-google", "googlers", "goog-x", "g00gle-dev"):
        assert _valid_bucket_name(model_bucket_name("acme-llm", deployment, "us-central1")), deployment
    long_a = model_bucket_name("a" * 30, "qwen36-" + "x" * 23, "northamerica-northeast1")
    long_b = model_bucket_name("b" * 30, "qwen36-" + "x" * 23, "northamerica-northeast1")
    for name in (long_a, long_b):
        assert _valid_bucket_name(name)
    assert long_a != long_b


def _valid_bucket_name(name: str) -> bool:
    # https://cloud.google.com/storage/docs/buckets#naming
    return (
        3 <= len(name) <= MAX_BUCKET_NAME
        and re.fullmatch(r"[a-z0-9][a-z0-9-]*[a-z0-9]", name) is not None
        and not name.startswith("goog")
        and re.search(r"g[o0]{2}g[l1]e", name) is None
    )


def test_access_says_a_named_risk_first() -> None:
    """Issue 21: exposeServerTools / exposeWithoutApiKey are refused unless set, and then said plainly."""
    # Without a key there is no door (it never runs open): the VM's own port, for sourceRanges.
    risky = cfg_for(
        tools=["exec_shell_command"],
        exposeServerTools=True,
        apiKey=False,
        exposeWithoutApiKey=True,
        door=False,
        externalIp=True,
        sourceRanges=["198.51.100.7/32"],
    )
    access = plain_outputs(risky, place_for())["access"]
    assert access.startswith(
        "WARNING: server-side tools (exec_shell_command) are on and sourceRanges 198.51.100.7/32 can "
        "reach them: whoever gets in can run commands and write files on the VM "
        "(exposeServerTools: true). WARNING: there is no API key"
    )
    tools_at_the_door = cfg_for(tools=["exec_shell_command"], exposeServerTools=True)
    assert plain_outputs(tools_at_the_door, place_for(door_url="https://d.run.app"))["access"].startswith(
        "WARNING: server-side tools (exec_shell_command) are on and the front door (on the internet, "
        "door: true) can reach them"
    )
    assert "WARNING" not in plain_outputs(cfg_for(), place_for())["access"]
