"""The stack outputs: where the server is, how to reach it, how to watch and stop it, what it costs."""

from __future__ import annotations

import operator
import shlex
from dataclasses import dataclass
from typing import Any

import pulumi

from infra.config import StackConfig
from infra.pricing import estimate_hourly_cost
from infra.server_args import PORT

LOCAL_TUNNEL_HOST = "localhost"


PLAIN_OUTPUT_KEYS = (
    "webUiUrl", "apiBaseUrl", "metricsUrl", "access", "groupName", "region", "zones",
    "logsSerial", "logsContainer", "sshIap", "iapTunnel", "members", "stop", "start",
    "estimatedHourlyCostUsd", "estimatedHourlyCostNote",
)  # fmt: skip


@dataclass(frozen=True)
class Place:
    """Plain values of one deployed server group, resolved from the resources' outputs."""

    project: str
    region: str
    group: str
    zones: tuple[str, ...]
    door_url: str | None = None
    """The front door's HTTPS origin (infra/door.py), where the single server has one."""
    replicas: int = 1
    fleet_origin: str | None = None
    """The fleet's load-balanced origin (infra/fleet.py: https://<domain> or http://<its IP>)."""


def base_url(place: Place) -> str:
    """The server's origin as the user reaches it: the front door, else the local end of the tunnel.

    A member's own address is never an output: it changes with every repair (no stateful IP: see
    infra/server_group.py), so ``qwen36 status`` shows the current one."""
    return place.door_url or place.fleet_origin or f"http://{LOCAL_TUNNEL_HOST}:{PORT}"


def _group_args(place: Place) -> str:
    return (
        f"--project={shlex.quote(place.project)} --region={shlex.quote(place.region)} "
        f"--group={shlex.quote(place.group)}"
    )


def gcloud_group(project: str, region: str, group: str) -> str:
    """The group as gcloud's ``instance-groups managed`` commands name it."""
    return f"{shlex.quote(group)} --region={shlex.quote(region)} --project={shlex.quote(project)}"


def members_command(project: str, region: str, group: str) -> str:
    return f"gcloud compute instance-groups managed list-instances {gcloud_group(project, region, group)}"


def commands(place: Place) -> dict[str, str]:
    """Members get new names and may change zone on every repair, so the commands that reach one
    find the group's current member first (``qwen36 tunnel|ssh|logs``, the console script that
    scripts/install_cli.sh puts on PATH); stopping and starting go through the group, which would
    otherwise repair a stopped VM."""
    where = _group_args(place)
    group = gcloud_group(place.project, place.region, place.group)
    return {
        # The boot script's output reaches serial port 1 with a startup-script prefix, even before SSH works.
        "logsSerial": f"qwen36 logs --serial {where}",
        "logsContainer": f"qwen36 logs {where}",
        "sshIap": f"qwen36 ssh {where}",
        "iapTunnel": f"qwen36 tunnel {where}",
        "members": members_command(place.project, place.region, place.group),
        "stop": f"gcloud compute instance-groups managed resize {group} --size=0",
        "start": f"gcloud compute instance-groups managed resize {group} --size={place.replicas}",
    }


def access_note(cfg: StackConfig, place: Place) -> str:
    """How to reach the server, led by any risk the config named on purpose (StackConfig.risk_notes),
    and which way its egress goes."""
    risks = " ".join(cfg.risk_notes())
    reach = f"{_reach(cfg, place)} {egress_sentence(cfg)}"
    return f"{risks} {reach}" if risks else reach


def egress_sentence(cfg: StackConfig) -> str:
    """Who has an address: the VMs' own ephemeral IPs (externalIp) or none, with Cloud NAT."""
    if cfg.external_ip:
        return (
            "Each VM has an ephemeral external IP for its own egress (externalIp: true), and there is no "
            "Cloud NAT; the firewall admits nothing else to it."
        )
    return (
        "No VM has an external IP: the internet (apt, ghcr.io, the hub) is reached through the stack's "
        "Cloud NAT, Google's APIs through Private Google Access."
    )


def _reach(cfg: StackConfig, place: Place) -> str:
    tunnel = commands(place)["iapTunnel"]
    if cfg.fleet:
        size = (
            f"{cfg.min_replicas}-{cfg.max_replicas} servers sized on their load"
            if cfg.autoscaled
            else f"{cfg.replicas} servers"
        )
        scheme = (
            "HTTPS" if cfg.domain else "plain HTTP (the key and prompts in clear text; set domain for HTTPS)"
        )
        origin = place.fleet_origin or "the fleet's load balancer (fleetIp)"
        key = " and every request needs the API key" if cfg.api_key else ", with no API key"
        return (
            f"The fleet's load balancer {origin} spreads requests over {size}, over {scheme}; Cloud Armor "
            f"admits only {', '.join(cfg.source_ranges)}{key}. The "
            f"members' port {PORT} admits only Google's load balancer and health checks; fleetMembers "
            "lists them, fleetMemberMetrics says how to read one member's /metrics through IAP."
        )
    if place.door_url:
        return (
            f"The front door {place.door_url} answers over HTTPS with the API key and wakes the server "
            f"on the first request after an idle stop; operators can still open the IAP tunnel: {tunnel}"
        )
    if cfg.public_endpoint:
        ranges = ", ".join(cfg.source_ranges)
        return (
            f"Port {PORT} is open to {ranges} on the current member's address, which changes with every "
            f"repair (`qwen36 status` shows it); from anywhere else use the IAP tunnel: {tunnel}"
        )
    return (
        f"No source range is open (sourceRanges is empty), so the server is reachable only through "
        f"Identity-Aware Proxy. Run `{tunnel}` and keep it open; webUiUrl, apiBaseUrl and metricsUrl "
        f"then work on http://{LOCAL_TUNNEL_HOST}:{PORT}. The tunnel needs roles/iap.tunnelResourceAccessor."
    )


def urls(place: Place) -> dict[str, str]:
    origin = base_url(place)
    # The door never passes llama-server's /metrics on (door/app.py): operators read it through
    # the IAP tunnel, and the dashboard shows the same figures.
    tunnel = f"http://{LOCAL_TUNNEL_HOST}:{PORT}"
    return {"webUiUrl": f"{origin}/", "apiBaseUrl": f"{origin}/v1", "metricsUrl": f"{tunnel}/metrics"}


def plain_outputs(cfg: StackConfig, place: Place) -> dict[str, Any]:
    """Every output that is a function of the config and the resolved place (no secrets)."""
    cost = estimate_hourly_cost(cfg)
    outputs = {
        **urls(place),
        "access": access_note(cfg, place),
        "groupName": place.group,
        "region": place.region,
        "zones": list(place.zones),
        **commands(place),
        "estimatedHourlyCostUsd": cost.usd_per_hour,
        "estimatedHourlyCostNote": cost.label,
    }
    assert tuple(outputs) == PLAIN_OUTPUT_KEYS, "PLAIN_OUTPUT_KEYS must list every plain output in order"
    return outputs


def export_all(
    cfg: StackConfig,
    *,
    project: pulumi.Input[str],
    group_name: pulumi.Input[str],
    bucket: pulumi.Input[str],
    model_uri: pulumi.Input[str],
    api_key: pulumi.Input[str] | None,
    door_url: pulumi.Input[str] | None = None,
    fleet_origin: pulumi.Input[str] | None = None,
) -> None:
    """Export the stack outputs; each key of :func:`plain_outputs` becomes one stack output."""

    def resolve(values: dict[str, Any]) -> dict[str, Any]:
        place = Place(region=cfg.region, zones=tuple(cfg.zones), replicas=cfg.replicas, **values)
        return plain_outputs(cfg, place)

    place = pulumi.Output.all(
        project=project, group=group_name, door_url=door_url, fleet_origin=fleet_origin
    ).apply(resolve)
    for key in PLAIN_OUTPUT_KEYS:
        pulumi.export(key, place.apply(operator.itemgetter(key)))
    pulumi.export("modelBucket", bucket)
    pulumi.export("modelGcsUri", model_uri)
    pulumi.export("apiKey", pulumi.Output.secret(api_key) if api_key is not None else None)
