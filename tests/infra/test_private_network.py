"""Private by default (issue 30): no VM has an external IP, Cloud NAT carries the servers' subnet to the
internet and Private Google Access carries it to Google's APIs; ``externalIp: true`` brings the old
ephemeral address back and makes no NAT. Each new policy rule fails on its bad fixture."""

from __future__ import annotations

import copy
import dataclasses
import shlex
from collections.abc import Callable
from typing import Any

import pytest
from policy_cases import check_settled, context
from program_mocks import Deployment, deploy

from infra import policy
from infra.network import NAT_MIN_PORTS_PER_VM
from infra.policy import Resource

TEMPLATE = policy.TEMPLATE
ROUTER = "gcp:compute/router:Router"
NAT = policy.ROUTER_NAT
OPT_IN = {"externalIp": True}


@pytest.fixture(scope="module")
def private() -> Deployment:
    """The first deployment of a build: the bake's builder beside the group's template."""
    return deploy("dev", tooling_image=False)


@pytest.fixture(scope="module")
def opted_in() -> Deployment:
    return deploy("dev", OPT_IN, tooling_image=False)


def _builder_argv(d: Deployment) -> list[str]:
    (builder,) = [r for r in d.of_type(policy.LOCAL_COMMAND) if r.name == "tooling-builder"]
    argv = policy._builder_create(builder)
    assert argv is not None
    return argv


def test_no_vm_has_an_external_address_by_default(private: Deployment) -> None:
    (nic,) = private.one(TEMPLATE).inputs["networkInterfaces"]
    assert not nic.get("accessConfigs")
    assert "--no-address" in _builder_argv(private)


def test_the_opt_in_brings_the_ephemeral_address_back_and_makes_no_nat(opted_in: Deployment) -> None:
    (nic,) = opted_in.one(TEMPLATE).inputs["networkInterfaces"]
    assert nic["accessConfigs"] == [{"networkTier": "PREMIUM"}]
    assert "--no-address" not in _builder_argv(opted_in)
    assert not opted_in.of_type(ROUTER) and not opted_in.of_type(NAT)
    assert check_settled(opted_in.resources, context(opted_in, OPT_IN)) == []


def test_cloud_nat_serves_the_servers_subnet_only_without_logs(private: Deployment) -> None:
    router = private.one(ROUTER).inputs
    nat = private.one(NAT).inputs
    (server_subnet,) = [s for s in private.of_type(policy.SUBNETWORK) if s.name == "network-subnet"]
    assert router["network"] == private.one("gcp:compute/network:Network").inputs["name"]
    assert nat["router"] == router["name"] and nat["region"] == router["region"] == "us-central1"
    assert nat["sourceSubnetworkIpRangesToNat"] == "LIST_OF_SUBNETWORKS"
    (served,) = nat["subnetworks"]
    assert served["name"].endswith(f"/subnetworks/{server_subnet.inputs['name']}")
    assert served["sourceIpRangesToNats"] == ["ALL_IP_RANGES"]
    assert nat["natIpAllocateOption"] == "AUTO_ONLY"
    assert nat["logConfig"]["enable"] is False
    assert (nat["enableDynamicPortAllocation"], nat["minPortsPerVm"]) == (False, NAT_MIN_PORTS_PER_VM)


def test_private_google_access_on_every_subnet_the_vms_use(private: Deployment) -> None:
    subnets = {s.inputs["name"]: s.inputs for s in private.of_type(policy.SUBNETWORK)}
    (nic,) = private.one(TEMPLATE).inputs["networkInterfaces"]
    builder_subnet = next(a.split("=", 1)[1] for a in _builder_argv(private) if a.startswith("--subnet="))
    used = {nic["subnetwork"].rsplit("/", 1)[-1], builder_subnet.rsplit("/", 1)[-1]}
    assert used <= set(subnets)
    assert all(subnets[name]["privateIpGoogleAccess"] is True for name in used)
    assert check_settled(private.resources, context(private, {})) == []


def test_single_server_ranges_need_the_external_address() -> None:
    from infra.config import PROJECT, ConfigError, parse_config

    with pytest.raises(ConfigError) as err:
        parse_config({f"{PROJECT}:door": False, f"{PROJECT}:sourceRanges": ["198.51.100.7/32"]})
    assert err.value.key == "qwen36-mtp-l4:sourceRanges" and "externalIp: true" in err.value.message


# --- the rules' bad fixtures ----------------------------------------------------------------------

Change = Callable[[list[Resource]], list[Resource]]


def _edit(token: str, change: Callable[[dict[str, Any]], None], name: str | None = None) -> Change:
    def apply(resources: list[Resource]) -> list[Resource]:
        out = []
        for r in resources:
            inputs = copy.deepcopy(dict(r.inputs))
            if r.type == token and (name is None or r.name == name):
                change(inputs)
            out.append(dataclasses.replace(r, inputs=inputs))
        return out

    return apply


def _builder_with(extra: list[str], drop: str) -> Callable[[dict[str, Any]], None]:
    def change(inputs: dict[str, Any]) -> None:
        lines = inputs["create"].splitlines()
        for i, line in enumerate(lines):
            if "gcloud compute instances create" in line:
                indent = line[: len(line) - len(line.lstrip())]
                argv = [a for a in shlex.split(line.strip()) if a != drop]
                lines[i] = indent + shlex.join(argv + extra)
        inputs["create"] = "\n".join(lines)

    return change


def _nic(inputs: dict[str, Any]) -> None:
    inputs["networkInterfaces"][0]["accessConfigs"] = [{"networkTier": "PREMIUM"}]


def _pga_off(inputs: dict[str, Any]) -> None:
    inputs["privateIpGoogleAccess"] = False


def _no_nat(resources: list[Resource]) -> list[Resource]:
    return [r for r in resources if r.type != NAT]


# fixture -> (rule, edit of the private first deployment)
EGRESS_FIXTURES: dict[str, tuple[str, Change]] = {
    "template-access-config": ("no_external_ip_unless_opted_in", _edit(TEMPLATE, _nic)),
    "builder-with-address": (
        "no_external_ip_unless_opted_in",
        _edit(policy.LOCAL_COMMAND, _builder_with([], "--no-address"), "tooling-builder"),
    ),
    "nat-logging-on": (
        "nat_logging_off",
        _edit(NAT, lambda i: i.update(logConfig={"enable": True, "filter": "ALL"})),
    ),
    "subnet-without-pga": ("vm_subnets_private_egress", _edit(policy.SUBNETWORK, _pga_off, "network-subnet")),
    "no-nat-for-private-vms": ("vm_subnets_private_egress", _no_nat),
}


@pytest.mark.parametrize("fixture", EGRESS_FIXTURES)
def test_each_egress_rule_fails_on_its_bad_fixture(private: Deployment, fixture: str) -> None:
    rule, change = EGRESS_FIXTURES[fixture]
    ctx = context(private, {})
    assert check_settled(private.resources, ctx) == []
    violations = check_settled(change(list(private.resources)), ctx)
    assert violations, fixture
    assert {v.rule for v in violations} == {rule}, [str(v) for v in violations]


def test_an_access_config_passes_with_the_opt_in(private: Deployment) -> None:
    edited = EGRESS_FIXTURES["template-access-config"][1](list(private.resources))
    assert check_settled(edited, dataclasses.replace(context(private, {}), external_ip=True)) == []
