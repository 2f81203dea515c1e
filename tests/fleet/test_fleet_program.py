"""What a fleet stack declares (the load balancer chain, Cloud Armor, the autoscaler), and that one
server declares none of it; under the project's recording mocks."""

from __future__ import annotations

from typing import Any

import pytest

from infra.fleet import CLEARTEXT_WARNING, FLEET_OUTPUT_KEYS
from infra.fleet_bounds import (
    COLD_START_BOUND_S,
    GENERATION_BOUND_S,
    IAP_TCP_FORWARDING_RANGE,
    LOAD_METRIC_TYPE,
)
from infra.network import IAP_SOURCE_RANGE
from tests.fleet.fleet_program import deploy_fleet
from tests.infra.program_mocks import MOCK_GLOBAL_IP

RANGES = ["198.51.100.0/24"]
FIXED = {"replicas": 3, "sourceRanges": RANGES}
AUTOSCALED = {"minReplicas": 1, "maxReplicas": 4, "sourceRanges": RANGES}

ADDRESS = "gcp:compute/globalAddress:GlobalAddress"
RULE = "gcp:compute/globalForwardingRule:GlobalForwardingRule"
HTTP_PROXY = "gcp:compute/targetHttpProxy:TargetHttpProxy"
HTTPS_PROXY = "gcp:compute/targetHttpsProxy:TargetHttpsProxy"
URL_MAP = "gcp:compute/uRLMap:URLMap"
BACKEND = "gcp:compute/backendService:BackendService"
ARMOR = "gcp:compute/securityPolicy:SecurityPolicy"
CERT = "gcp:compute/managedSslCertificate:ManagedSslCertificate"
AUTOSCALER = "gcp:compute/regionAutoscaler:RegionAutoscaler"
HEALTH = "gcp:compute/healthCheck:HealthCheck"
FLEET_TYPES = {ADDRESS, RULE, HTTP_PROXY, HTTPS_PROXY, URL_MAP, BACKEND, ARMOR, CERT, AUTOSCALER}


@pytest.fixture(scope="module")
def fixed() -> Any:
    return deploy_fleet(FIXED)


@pytest.fixture(scope="module")
def autoscaled() -> Any:
    return deploy_fleet(AUTOSCALED)


def test_one_server_declares_no_fleet() -> None:
    d = deploy_fleet({})
    assert not {r.type for r in d.resources} & FLEET_TYPES
    assert not set(FLEET_OUTPUT_KEYS) & set(d.outputs)


@pytest.mark.parametrize("variant", ["fixed", "autoscaled"])
def test_fleet_declares_the_load_balancer_chain(variant: str, request: pytest.FixtureRequest) -> None:
    d = request.getfixturevalue(variant)
    address, rule, proxy = d.one(ADDRESS), d.one(RULE), d.one(HTTP_PROXY)
    urls, backend, armor, health = d.one(URL_MAP), d.one(BACKEND), d.one(ARMOR), d.one(HEALTH)
    assert rule.inputs["ipAddress"] == MOCK_GLOBAL_IP
    assert rule.inputs["portRange"] == "80"
    assert rule.inputs["loadBalancingScheme"] == backend.inputs["loadBalancingScheme"] == "EXTERNAL_MANAGED"
    assert rule.inputs["target"].endswith(f"/{proxy.inputs['name']}")
    assert proxy.inputs["urlMap"].endswith(f"/{urls.inputs['name']}")
    assert urls.inputs["defaultService"].endswith(f"/{backend.inputs['name']}")
    assert backend.inputs["portName"] == "http"
    assert backend.inputs["healthChecks"].endswith(f"/{health.inputs['name']}")
    assert backend.inputs["backends"][0]["group"].endswith("/instanceGroups/qwen36-dev")
    assert backend.inputs["securityPolicy"].endswith(f"/{armor.inputs['name']}")
    assert backend.inputs["timeoutSec"] >= GENERATION_BOUND_S
    assert backend.inputs["connectionDrainingTimeoutSec"] > 0
    assert health.inputs["httpHealthCheck"]["requestPath"] == "/health"
    assert address.inputs["name"] == "qwen36-dev-lb"


def test_armor_admits_only_the_ranges_and_denies_the_rest(fixed: Any) -> None:
    rules = sorted(fixed.one(ARMOR).inputs["rules"], key=lambda r: r["priority"])
    assert [(r["action"], r["match"]["config"]["srcIpRanges"]) for r in rules] == [
        ("allow", RANGES),
        ("deny(403)", ["*"]),
    ]
    assert rules[-1]["priority"] == 2147483647


def test_many_ranges_are_split_into_rules_of_ten() -> None:
    ranges = [f"198.51.{i}.0/24" for i in range(23)]
    d = deploy_fleet({"replicas": 2, "sourceRanges": ranges})
    allows = [r for r in d.one(ARMOR).inputs["rules"] if r["action"] == "allow"]
    assert [len(r["match"]["config"]["srcIpRanges"]) for r in allows] == [10, 10, 3]
    assert [ip for r in allows for ip in r["match"]["config"]["srcIpRanges"]] == ranges


def test_fixed_fleet_has_no_autoscaler_and_warns_about_clear_text(fixed: Any) -> None:
    assert fixed.of_type(AUTOSCALER) == []
    assert fixed.of_type(CERT) == [] and fixed.of_type(HTTPS_PROXY) == []
    assert fixed.outputs["fleetWarning"] == CLEARTEXT_WARNING
    assert fixed.outputs["fleetApiBaseUrl"] == f"http://{MOCK_GLOBAL_IP}/v1"
    # Issue 29: the plain outputs describe the fleet too, not a single server behind a tunnel.
    assert fixed.outputs["apiBaseUrl"] == fixed.outputs["fleetApiBaseUrl"]
    assert fixed.outputs["webUiUrl"] == f"http://{MOCK_GLOBAL_IP}/"
    assert fixed.outputs["access"].startswith(f"The fleet's load balancer http://{MOCK_GLOBAL_IP} spreads")
    assert "3 servers" in fixed.outputs["access"] and "localhost" not in fixed.outputs["access"]
    assert fixed.outputs["fleetServersNow"] == 3 and fixed.outputs["fleetServersMax"] == 3


def test_autoscaler_on_requests_in_flight(autoscaled: Any) -> None:
    scaler = autoscaled.one(AUTOSCALER)
    policy = scaler.inputs["autoscalingPolicy"]
    assert scaler.inputs["target"].endswith("/instanceGroupManagers/qwen36-dev")
    assert (policy["minReplicas"], policy["maxReplicas"], policy["mode"]) == (1, 4, "ON")
    assert policy["cooldownPeriod"] >= COLD_START_BOUND_S
    (metric,) = policy["metrics"]
    assert metric["name"] == LOAD_METRIC_TYPE and metric["type"] == "GAUGE"
    assert metric["filter"] == 'resource.type = "gce_instance"'
    assert metric["target"] == 1  # parallel 1: one request in flight is a full server
    assert policy["scaleInControl"]["maxScaledInReplicas"]["fixed"] == 1
    assert autoscaled.outputs["fleetServersNow"] == 1 and autoscaled.outputs["fleetServersMax"] == 4


def test_domain_gives_https_with_a_managed_certificate() -> None:
    d = deploy_fleet({**FIXED, "domain": "llm.example.com"})
    cert, proxy, rule = d.one(CERT), d.one(HTTPS_PROXY), d.one(RULE)
    assert cert.inputs["managed"]["domains"] == ["llm.example.com"]
    assert proxy.inputs["sslCertificates"][0].endswith(f"/{cert.inputs['name']}")
    assert rule.inputs["portRange"] == "443"
    assert d.of_type(HTTP_PROXY) == []
    assert d.outputs["fleetApiBaseUrl"] == "https://llm.example.com/v1"
    assert d.outputs["fleetDnsRecord"] == f"llm.example.com. A {MOCK_GLOBAL_IP}"
    assert d.outputs["fleetWarning"] is None


def test_cost_outputs_grow_with_the_ceiling(autoscaled: Any) -> None:
    now, most = autoscaled.outputs["fleetCostNowUsdPerHour"], autoscaled.outputs["fleetCostMaxUsdPerHour"]
    assert 0 < now < most
    assert "estimate" in autoscaled.outputs["fleetCostNote"]


def test_member_metrics_go_through_the_tunnel(fixed: Any) -> None:
    assert "list-instances qwen36-dev --region=us-central1" in fixed.outputs["fleetMembers"]
    assert "start-iap-tunnel" in fixed.outputs["fleetMemberMetrics"]
    assert "/metrics" in fixed.outputs["fleetMemberMetrics"]


def test_children_are_parented_to_the_fleet(autoscaled: Any) -> None:
    fleet_urn = autoscaled.registrations["fleet"].urn
    for child in ("fleet-ip", "fleet-armor", "fleet-backend", "fleet-urls", "fleet-proxy", "fleet-rule",
                  "fleet-autoscaler"):  # fmt: skip
        assert autoscaled.registrations[child].parent == fleet_urn, child


def test_iap_range_is_the_network_modules() -> None:
    assert IAP_TCP_FORWARDING_RANGE == IAP_SOURCE_RANGE
