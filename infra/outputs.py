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

CONTAINER_NAME = "llama-server"
LOCAL_TUNNEL_HOST = "localhost"


PLAIN_OUTPUT_KEYS = (
    "webUiUrl", "apiBaseUrl", "metricsUrl", "access", "instanceName", "zone", "staticIp",
    "logsSerial", "logsContainer", "sshIap", "iapTunnel", "stop", "start", "delete",
    "estimatedHourlyCostUsd", "estimatedHourlyCostNote",
)  # fmt: skip


@dataclass(frozen=True)
class Place:
    """Plain values of one deployed server, resolved from the resources' outputs."""

    project: str
    instance: str
    zone: str
    static_ip: str


def base_url(cfg: StackConfig, static_ip: str) -> str:
    """The server's origin as the user reaches it: the static IP if a range is open, else the tunnel."""
    host = static_ip if cfg.public_endpoint else LOCAL_TUNNEL_HOST
    return f"http://{host}:{PORT}"


def _where(place: Place) -> str:
    return f"--zone={shlex.quote(place.zone)} --project={shlex.quote(place.project)}"


def commands(place: Place) -> dict[str, str]:
    inst = shlex.quote(place.instance)
    where = _where(place)
    container_logs = shlex.quote(f"sudo docker logs -f {CONTAINER_NAME}")
    return {
        # The boot script's output reaches serial port 1 with this prefix, even before SSH works.
        "logsSerial": f"gcloud compute instances get-serial-port-output {inst} {where} | grep startup-script",
        "logsContainer": f"gcloud compute ssh {inst} {where} --tunnel-through-iap --command {container_logs}",
        "sshIap": f"gcloud compute ssh {inst} {where} --tunnel-through-iap",
        "iapTunnel": (
            f"gcloud compute start-iap-tunnel {inst} {PORT} "
            f"--local-host-port={LOCAL_TUNNEL_HOST}:{PORT} {where}"
        ),
        "stop": f"gcloud compute instances stop {inst} {where}",
        "start": f"gcloud compute instances start {inst} {where}",
        "delete": f"gcloud compute instances delete {inst} {where}",
    }


def access_note(cfg: StackConfig, place: Place) -> str:
    tunnel = commands(place)["iapTunnel"]
    if cfg.public_endpoint:
        ranges = ", ".join(cfg.source_ranges)
        return (
            f"Port {PORT} is open to {ranges} at http://{place.static_ip}:{PORT}; "
            f"from anywhere else use the IAP tunnel: {tunnel}"
        )
    return (
        f"No source range is open (sourceRanges is empty), so the server is reachable only through "
        f"Identity-Aware Proxy. Run `{tunnel}` and keep it open; webUiUrl, apiBaseUrl and metricsUrl "
        f"then work on http://{LOCAL_TUNNEL_HOST}:{PORT}. The tunnel needs roles/iap.tunnelResourceAccessor."
    )


def urls(cfg: StackConfig, static_ip: str) -> dict[str, str]:
    origin = base_url(cfg, static_ip)
    return {"webUiUrl": f"{origin}/", "apiBaseUrl": f"{origin}/v1", "metricsUrl": f"{origin}/metrics"}


def plain_outputs(cfg: StackConfig, place: Place) -> dict[str, Any]:
    """Every output that is a function of the config and the resolved place (no secrets)."""
    cost = estimate_hourly_cost(cfg)
    outputs = {
        **urls(cfg, place.static_ip),
        "access": access_note(cfg, place),
        "instanceName": place.instance,
        "zone": place.zone,
        "staticIp": place.static_ip,
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
    instance_name: pulumi.Input[str],
    zone: pulumi.Input[str],
    static_ip: pulumi.Input[str],
    bucket: pulumi.Input[str],
    model_uri: pulumi.Input[str],
    api_key: pulumi.Input[str] | None,
) -> None:
    """Export the stack outputs; each key of :func:`plain_outputs` becomes one stack output."""

    def resolve(values: dict[str, str]) -> dict[str, Any]:
        return plain_outputs(cfg, Place(**values))

    place = pulumi.Output.all(project=project, instance=instance_name, zone=zone, static_ip=static_ip).apply(
        resolve
    )
    for key in PLAIN_OUTPUT_KEYS:
        pulumi.export(key, place.apply(operator.itemgetter(key)))
    pulumi.export("modelBucket", bucket)
    pulumi.export("modelGcsUri", model_uri)
    pulumi.export("apiKey", pulumi.Output.secret(api_key) if api_key is not None else None)
