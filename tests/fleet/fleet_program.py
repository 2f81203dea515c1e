"""A small Pulumi program around the Fleet component, run under the project's recording mocks.

The server group is `mig`'s (infra/server_group.py, on its own branch); this fixture declares a
stand-in with the contract's shape (a regional group with named port http=8080, BALANCED, the
shared /health check on 8080, no target size when an autoscaler owns it) and the firewall rule
that admits Google's front ends, so the fleet can be declared and checked on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_gcp as gcp
from pulumi.runtime import settings

from infra.config import PROJECT, StackConfig, parse_config
from infra.fleet import Fleet, FleetArgs, export_fleet
from infra.fleet_bounds import GOOGLE_FRONT_END_RANGES, IAP_TCP_FORWARDING_RANGE
from infra.server_args import PORT
from tests.infra.program_mocks import GCP_PROJECT, MOCK_IP, Deployment, RecordingMocks, RecordingMonitor

REGION = "us-central1"
DEPLOYMENT = "qwen36-dev"
COMPUTE = f"https://www.googleapis.com/compute/v1/projects/{GCP_PROJECT}"


class FleetMocks(RecordingMocks):
    """The project's mocks plus the computed fields the fleet reads: self links and the global IP."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        resource_id, state = super().new_resource(args)
        if args.typ.startswith("gcp:compute/"):
            kind = args.typ.split(":")[-1]
            state.setdefault("selfLink", f"{COMPUTE}/global/{kind}/{state.get('name') or args.name}")
        if args.typ == "gcp:compute/globalAddress:GlobalAddress":
            state["address"] = MOCK_IP
        if args.typ == "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager":
            name = state.get("name") or args.name
            state["instanceGroup"] = f"{COMPUTE}/regions/{REGION}/instanceGroups/{name}"
            state["selfLink"] = f"{COMPUTE}/regions/{REGION}/instanceGroupManagers/{name}"
        return resource_id, state


def config(overrides: Mapping[str, Any]) -> StackConfig:
    return parse_config({f"{PROJECT}:{k}": v for k, v in overrides.items()})


def declare(cfg: StackConfig) -> Fleet | None:
    """The program: a stand-in server group and its firewall, and the fleet when cfg asks for one."""
    health = gcp.compute.HealthCheck(
        "group-health",
        project=GCP_PROJECT,
        http_health_check=gcp.compute.HealthCheckHttpHealthCheckArgs(port=PORT, request_path="/health"),
    )
    group = gcp.compute.RegionInstanceGroupManager(
        "group",
        project=GCP_PROJECT,
        name=DEPLOYMENT,
        region=REGION,
        base_instance_name=DEPLOYMENT,
        versions=[
            gcp.compute.RegionInstanceGroupManagerVersionArgs(
                instance_template=f"{COMPUTE}/regions/{REGION}/instanceTemplates/t"
            )
        ],
        named_ports=[gcp.compute.RegionInstanceGroupManagerNamedPortArgs(name="http", port=PORT)],
        distribution_policy_target_shape="BALANCED",
        target_size=None if cfg.autoscaled else cfg.replicas,
    )
    gcp.compute.Firewall(
        "network-health-checks",
        project=GCP_PROJECT,
        network="default",
        direction="INGRESS",
        allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(PORT)])],
        source_ranges=list(GOOGLE_FRONT_END_RANGES),
        target_tags=[DEPLOYMENT],
    )
    gcp.compute.Firewall(
        "network-iap",
        project=GCP_PROJECT,
        network="default",
        direction="INGRESS",
        allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=["22", str(PORT)])],
        source_ranges=[IAP_TCP_FORWARDING_RANGE],
        target_tags=[DEPLOYMENT],
    )
    if not cfg.fleet:
        return None
    fleet = Fleet(
        "fleet",
        FleetArgs(
            cfg=cfg,
            project=GCP_PROJECT,
            region=REGION,
            instance_group=group.instance_group,
            group=group.self_link,
            health_check=health.self_link,
            deployment=DEPLOYMENT,
            labels={"app": "qwen36-mtp-l4"},
        ),
    )
    export_fleet(
        cfg,
        fleet,
        project=GCP_PROJECT,
        region=REGION,
        group_name=group.name,
        servers_now=group.target_size,
    )
    return fleet


def deploy_fleet(overrides: Mapping[str, Any]) -> Deployment:
    """Run :func:`declare` for the config ``overrides`` (short keys) under the recording mocks."""
    cfg = config(overrides)
    mocks = FleetMocks()
    monitor = RecordingMonitor(mocks)
    settings.ROOT.set(None)
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack="dev", preview=False, monitor=monitor)
    outputs: dict[str, Any] = {}

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        declare(cfg)
        root = settings.get_root_resource()
        assert root is not None
        exported = {k: pulumi.Output.from_input(v) for k, v in root.outputs.items()}  # type: ignore[attr-defined]
        return pulumi.Output.all(**exported).apply(outputs.update)

    program()
    return Deployment(mocks.resources, outputs, set(), monitor.registrations, mocks.calls)
