"""The fleet's one endpoint: a global external Application Load Balancer over the server group.

Declared only when more than one server may run (``replicas`` >= 2 or ``maxReplicas`` >= 2); one
server has none of this (its way in is the front door or an IAP tunnel). The chain is the
documented one for an instance-group backend: global address -> forwarding rule -> target HTTP(S)
proxy -> URL map -> backend service over the group's named port ``http``, health-checked on
``/health`` by the group's own check.
https://cloud.google.com/load-balancing/docs/https/setup-global-ext-https-compute

The load balancer's address is public, so the VPC firewall cannot say who may call it: a Cloud
Armor policy on the backend service admits only ``sourceRanges`` at Google's edge and denies the
rest. The servers' port 8080 itself admits only Google's front ends and health checkers
(``infra/fleet_bounds.GOOGLE_FRONT_END_RANGES``, the firewall rule of infra/network.py).

With ``minReplicas``/``maxReplicas`` a regional autoscaler sizes the group on requests in flight
per server, a custom metric that each member writes on its own ``gce_instance``
(startup/metrics_publisher.py). Why not the Ops Agent: its Prometheus receiver writes to the
``prometheus_target`` resource (Managed Service for Prometheus), and the autoscaler treats a
metric on any resource other than ``gce_instance`` as one value for the whole group, not one per
member ("If it is a gce_instance, the autoscaler expects the metric to include a separate
TimeSeries for each instance in a group ... If the resource type is any other value, the
autoscaler expects this metric to contain values that apply to the entire autoscaled group",
https://cloud.google.com/compute/docs/reference/rest/v1/regionAutoscalers, customMetricUtilizations
.filter). Load-balancer utilization is the other built-in signal, but it counts requests per
second against a fixed rate, which says little about streams that last minutes.
"""

from __future__ import annotations

import operator
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from infra.config import StackConfig
from infra.config_rules import ARMOR_RANGES_PER_RULE
from infra.fleet_bounds import (
    COLD_START_BOUND_S,
    LOAD_METRIC_TYPE,
    draining_s,
    generation_bound_s,
)
from infra.outputs import LOCAL_TUNNEL_HOST, members_command
from infra.pricing import estimate_fleet_cost
from infra.server_args import PORT

NAMED_PORT = "http"
HTTP_PORT = 80
HTTPS_PORT = 443
# Cloud Armor matches at most 10 IP ranges per rule (basic match condition); infra/config_rules.py
# bounds the list to what one policy takes. https://cloud.google.com/armor/docs/security-policy-overview#ip-address-lists
ARMOR_FIRST_PRIORITY = 1000
ARMOR_DEFAULT_PRIORITY = 2147483647
ARMOR_DENY = "deny(403)"
# Scale in by at most one server per window: a burst that ends does not take several busy
# servers away at once, and each leaving one drains its streams first (connection draining).
# https://cloud.google.com/compute/docs/autoscaler/understanding-autoscaler-decisions#scale-in_controls
SCALE_IN_MAX_SERVERS = 1
SCALE_IN_WINDOW_S = 1200
CLEARTEXT_WARNING = (
    "WARNING: the fleet serves plain HTTP, so the API key and every prompt cross the internet in "
    "clear text. Set qwen36-mtp-l4:domain to a DNS name you control for HTTPS with a Google-managed "
    "certificate."
)


@dataclass
class FleetArgs:
    """What the fleet needs from the rest of the stack (the ``ServerGroup`` of infra/server_group.py)."""

    cfg: StackConfig
    project: pulumi.Input[str]
    region: pulumi.Input[str]
    # The group's instance group URL (``RegionInstanceGroupManager.instance_group``), for the backend.
    instance_group: pulumi.Input[str]
    # The group manager's self link, for the autoscaler's target.
    group: pulumi.Input[str]
    # The HTTP /health check on 8080 that autohealing uses too (``ServerGroup.health_check``).
    health_check: pulumi.Input[str]
    deployment: str
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


def armor_rules(source_ranges: Sequence[str]) -> list[gcp.compute.SecurityPolicyRuleArgs]:
    """Allow the stack's ranges (in rules of at most 10), deny everything else."""
    chunks = [
        list(source_ranges[i : i + ARMOR_RANGES_PER_RULE])
        for i in range(0, len(source_ranges), ARMOR_RANGES_PER_RULE)
    ]
    rules = [
        gcp.compute.SecurityPolicyRuleArgs(
            action="allow",
            priority=ARMOR_FIRST_PRIORITY + i,
            description="the stack's sourceRanges",
            match=gcp.compute.SecurityPolicyRuleMatchArgs(
                versioned_expr="SRC_IPS_V1",
                config=gcp.compute.SecurityPolicyRuleMatchConfigArgs(src_ip_ranges=chunk),
            ),
        )
        for i, chunk in enumerate(chunks)
    ]
    rules.append(
        gcp.compute.SecurityPolicyRuleArgs(
            action=ARMOR_DENY,
            priority=ARMOR_DEFAULT_PRIORITY,
            description="everyone else",
            match=gcp.compute.SecurityPolicyRuleMatchArgs(
                versioned_expr="SRC_IPS_V1",
                config=gcp.compute.SecurityPolicyRuleMatchConfigArgs(src_ip_ranges=["*"]),
            ),
        )
    )
    return rules


class Fleet(pulumi.ComponentResource):
    """The load-balanced endpoint, its edge policy and (with min/maxReplicas) the autoscaler."""

    address: gcp.compute.GlobalAddress
    security_policy: gcp.compute.SecurityPolicy
    backend_service: gcp.compute.BackendService
    url_map: gcp.compute.URLMap
    certificate: gcp.compute.ManagedSslCertificate | None
    proxy: gcp.compute.TargetHttpsProxy | gcp.compute.TargetHttpProxy
    forwarding_rule: gcp.compute.GlobalForwardingRule
    autoscaler: gcp.compute.RegionAutoscaler | None
    ip_address: pulumi.Output[str]
    origin: pulumi.Output[str]
    web_ui_url: pulumi.Output[str]
    api_base_url: pulumi.Output[str]
    scheme: str
    cleartext_warning: str | None
    backend_timeout_s: int

    def __init__(self, name: str, args: FleetArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:Fleet", name, None, opts)
        cfg = args.cfg
        if not cfg.fleet:
            raise ValueError(
                "Fleet is for replicas >= 2 or maxReplicas >= 2; one server has no load balancer"
            )
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        labels = dict(args.labels)

        self.address = gcp.compute.GlobalAddress(
            f"{name}-ip",
            project=args.project,
            name=f"{args.deployment}-lb",
            description="the fleet's load balancer",
            labels=labels,
            opts=child,
        )
        self.security_policy = gcp.compute.SecurityPolicy(
            f"{name}-armor",
            project=args.project,
            name=f"{args.deployment}-edge",
            description="admits only the stack's sourceRanges at Google's edge",
            type="CLOUD_ARMOR",
            rules=armor_rules(cfg.source_ranges),
            opts=child,
        )
        # The whole stream must fit in timeout_sec: derive it from the longest generation this
        # context size allows (infra/fleet_bounds.py), never the 30 s default.
        self.backend_timeout_s = generation_bound_s(cfg.ctx_size)
        self.backend_service = gcp.compute.BackendService(
            f"{name}-backend",
            project=args.project,
            name=f"{args.deployment}-backend",
            description="the server group on its named port http (8080)",
            load_balancing_scheme="EXTERNAL_MANAGED",
            protocol="HTTP",
            port_name=NAMED_PORT,
            timeout_sec=self.backend_timeout_s,
            connection_draining_timeout_sec=draining_s(self.backend_timeout_s),
            health_checks=args.health_check,
            # A new request goes to the member with the fewest outstanding ones: streams last
            # minutes, so round robin would queue behind a busy server while another idles.
            # https://cloud.google.com/load-balancing/docs/backend-service#lb-locality-policy
            locality_lb_policy="LEAST_REQUEST",
            backends=[
                gcp.compute.BackendServiceBackendArgs(
                    group=args.instance_group, balancing_mode="UTILIZATION", capacity_scaler=1.0
                )
            ],
            security_policy=self.security_policy.self_link,
            log_config=gcp.compute.BackendServiceLogConfigArgs(enable=True, sample_rate=1.0),
            opts=child,
        )
        self.url_map = gcp.compute.URLMap(
            f"{name}-urls",
            project=args.project,
            name=f"{args.deployment}-urls",
            default_service=self.backend_service.self_link,
            opts=child,
        )
        self.certificate = None
        if cfg.domain:
            self.scheme, port = "https", HTTPS_PORT
            self.cleartext_warning = None
            # Provisioned once the domain's A record points at the address (minutes to an hour).
            # https://cloud.google.com/load-balancing/docs/ssl-certificates/google-managed-certs
            self.certificate = gcp.compute.ManagedSslCertificate(
                f"{name}-cert",
                project=args.project,
                name=f"{args.deployment}-cert",
                managed=gcp.compute.ManagedSslCertificateManagedArgs(domains=[cfg.domain]),
                opts=child,
            )
            self.proxy = gcp.compute.TargetHttpsProxy(
                f"{name}-proxy",
                project=args.project,
                name=f"{args.deployment}-proxy",
                url_map=self.url_map.self_link,
                ssl_certificates=[self.certificate.self_link],
                opts=child,
            )
        else:
            self.scheme, port = "http", HTTP_PORT
            self.cleartext_warning = CLEARTEXT_WARNING
            self.proxy = gcp.compute.TargetHttpProxy(
                f"{name}-proxy",
                project=args.project,
                name=f"{args.deployment}-proxy",
                url_map=self.url_map.self_link,
                opts=child,
            )
        self.forwarding_rule = gcp.compute.GlobalForwardingRule(
            f"{name}-rule",
            project=args.project,
            name=f"{args.deployment}-{self.scheme}",
            load_balancing_scheme="EXTERNAL_MANAGED",
            ip_protocol="TCP",
            ip_address=self.address.address,
            port_range=str(port),
            target=self.proxy.self_link,
            labels=labels,
            opts=child,
        )

        self.autoscaler = None
        if cfg.autoscaled:
            self.autoscaler = gcp.compute.RegionAutoscaler(
                f"{name}-autoscaler",
                project=args.project,
                region=args.region,
                name=f"{args.deployment}-autoscaler",
                target=args.group,
                autoscaling_policy=gcp.compute.RegionAutoscalerAutoscalingPolicyArgs(
                    min_replicas=cfg.min_replicas,
                    max_replicas=cfg.max_replicas,
                    mode="ON",
                    cooldown_period=COLD_START_BOUND_S,
                    # Aim for every slot busy and none queued: deferred requests push the
                    # average above the target and add a server.
                    metrics=[
                        gcp.compute.RegionAutoscalerAutoscalingPolicyMetricArgs(
                            name=LOAD_METRIC_TYPE,
                            filter='resource.type = "gce_instance"',
                            target=float(cfg.parallel),
                            type="GAUGE",
                        )
                    ],
                    scale_in_control=gcp.compute.RegionAutoscalerAutoscalingPolicyScaleInControlArgs(
                        max_scaled_in_replicas=gcp.compute.RegionAutoscalerAutoscalingPolicyScaleInControlMaxScaledInReplicasArgs(
                            fixed=SCALE_IN_MAX_SERVERS
                        ),
                        time_window_sec=SCALE_IN_WINDOW_S,
                    ),
                ),
                opts=child,
            )

        host: pulumi.Input[str] = cfg.domain or self.address.address
        self.ip_address = self.address.address
        self.origin = pulumi.Output.concat(f"{self.scheme}://", host)
        self.web_ui_url = pulumi.Output.concat(self.origin, "/")
        self.api_base_url = pulumi.Output.concat(self.origin, "/v1")
        self.register_outputs(
            {
                "ip_address": self.ip_address,
                "origin": self.origin,
                "web_ui_url": self.web_ui_url,
                "api_base_url": self.api_base_url,
                "scheme": self.scheme,
                "cleartext_warning": self.cleartext_warning,
                "backend_timeout_s": self.backend_timeout_s,
                "security_policy": self.security_policy.self_link,
                "autoscaler": self.autoscaler.self_link if self.autoscaler else None,
            }
        )


# --- stack outputs ---------------------------------------------------------------------------

FLEET_OUTPUT_KEYS = (
    "fleetWebUiUrl", "fleetApiBaseUrl", "fleetIp", "fleetDnsRecord", "fleetWarning", "fleetMembers",
    "fleetMemberMetrics", "fleetServersNow", "fleetServersMax", "fleetCostNowUsdPerHour",
    "fleetCostMaxUsdPerHour", "fleetCostNote",
)  # fmt: skip


@dataclass(frozen=True)
class FleetPlace:
    """Plain values of one deployed fleet, resolved from the resources' outputs."""

    project: str
    region: str
    group_name: str
    ip_address: str
    servers_now: int


def fleet_outputs(cfg: StackConfig, place: FleetPlace) -> dict[str, object]:
    """Every fleet output that is a function of the config and the resolved place (no secrets)."""
    where = f"--project={shlex.quote(place.project)}"
    origin = f"https://{cfg.domain}" if cfg.domain else f"http://{place.ip_address}"
    members = members_command(place.project, place.region, place.group_name)
    metrics = (
        f"for each member listed by `{members}`: gcloud compute start-iap-tunnel <member> {PORT} "
        f"--local-host-port={LOCAL_TUNNEL_HOST}:{PORT} --zone=<its zone> {where}, then "
        f'curl -H "Authorization: Bearer $(pulumi stack output apiKey --show-secrets)" '
        f"http://{LOCAL_TUNNEL_HOST}:{PORT}/metrics"
    )
    cost = estimate_fleet_cost(
        cfg, servers_now=place.servers_now, armor_rules=len(armor_rules(cfg.source_ranges))
    )
    outputs: dict[str, object] = {
        "fleetWebUiUrl": f"{origin}/",
        "fleetApiBaseUrl": f"{origin}/v1",
        "fleetIp": place.ip_address,
        "fleetDnsRecord": f"{cfg.domain}. A {place.ip_address}" if cfg.domain else None,
        "fleetWarning": None if cfg.domain else CLEARTEXT_WARNING,
        "fleetMembers": members,
        "fleetMemberMetrics": metrics,
        "fleetServersNow": place.servers_now,
        "fleetServersMax": cfg.max_servers,
        "fleetCostNowUsdPerHour": cost.now_usd_per_hour,
        "fleetCostMaxUsdPerHour": cost.max_usd_per_hour,
        "fleetCostNote": cost.label,
    }
    assert tuple(outputs) == FLEET_OUTPUT_KEYS, "FLEET_OUTPUT_KEYS must list every fleet output in order"
    return outputs


def export_fleet(
    cfg: StackConfig,
    fleet: Fleet,
    *,
    project: pulumi.Input[str],
    region: pulumi.Input[str],
    group_name: pulumi.Input[str],
    servers_now: pulumi.Input[int],
) -> None:
    """Export the fleet's outputs. ``servers_now``: the group's target size as Pulumi last saw it
    (``pulumi refresh`` reads the autoscaler's current choice); ``fleetMembers`` lists them live."""

    def resolve(values: dict[str, object]) -> dict[str, object]:
        values["servers_now"] = int(values["servers_now"] or cfg.initial_servers)  # type: ignore[call-overload]
        return fleet_outputs(cfg, FleetPlace(**values))  # type: ignore[arg-type]

    place = pulumi.Output.all(
        project=project,
        region=region,
        group_name=group_name,
        ip_address=fleet.ip_address,
        servers_now=servers_now,
    ).apply(resolve)
    for key in FLEET_OUTPUT_KEYS:
        pulumi.export(key, place.apply(operator.itemgetter(key)))
