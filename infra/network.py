"""Who may reach the server: chosen source ranges on 8080, and Google's IAP proxies for tunnels.

A firewall rule without source ranges means "any source" to GCE, so the public rule is only
created when the user listed ranges. https://cloud.google.com/vpc/docs/firewalls#firewall_rule_components
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from infra.server_args import PORT

# Google's IAP TCP-forwarding proxies: SSH and `gcloud compute start-iap-tunnel` arrive from here.
# https://cloud.google.com/iap/docs/using-tcp-forwarding#create-firewall-rule
IAP_SOURCE_RANGE = "35.235.240.0/20"
SSH_PORT = 22
# Google's health checkers (autohealing, load balancers) probe from these ranges.
# https://cloud.google.com/load-balancing/docs/health-check-concepts#ip-ranges
HEALTH_CHECK_RANGES = ("35.191.0.0/16", "130.211.0.0/22")
DEFAULT_NETWORK = "default"


@dataclass
class NetworkAccessArgs:
    project: pulumi.Input[str]
    network_tag: str
    source_ranges: Sequence[str]
    network: pulumi.Input[str] = DEFAULT_NETWORK
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


class NetworkAccess(pulumi.ComponentResource):
    """Ingress to instances carrying ``network_tag``; nothing else is opened."""

    public_rule: gcp.compute.Firewall | None
    iap_rule: gcp.compute.Firewall
    health_check_rule: gcp.compute.Firewall
    public_ranges: pulumi.Output[list[str]]

    def __init__(
        self, name: str, args: NetworkAccessArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("qwen36:infra:NetworkAccess", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        self.public_rule = None
        if args.source_ranges:
            self.public_rule = gcp.compute.Firewall(
                f"{name}-server",
                project=args.project,
                network=args.network,
                direction="INGRESS",
                description=f"llama-server (tcp:{PORT}) from the stack's sourceRanges",
                allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(PORT)])],
                source_ranges=list(args.source_ranges),
                target_tags=[args.network_tag],
                opts=child,
            )
        self.iap_rule = gcp.compute.Firewall(
            f"{name}-iap",
            project=args.project,
            network=args.network,
            direction="INGRESS",
            description="SSH and llama-server through IAP TCP forwarding",
            allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(SSH_PORT), str(PORT)])],
            source_ranges=[IAP_SOURCE_RANGE],
            target_tags=[args.network_tag],
            opts=child,
        )
        # The group's autohealing probes /health on the serving port only; without this rule every
        # member would look dead and be recreated after the initial delay. Other paths still need the key.
        self.health_check_rule = gcp.compute.Firewall(
            f"{name}-health-checks",
            project=args.project,
            network=args.network,
            direction="INGRESS",
            description=f"Google health checks of llama-server (tcp:{PORT}) for autohealing",
            allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(PORT)])],
            source_ranges=list(HEALTH_CHECK_RANGES),
            target_tags=[args.network_tag],
            opts=child,
        )
        self.public_ranges = pulumi.Output.from_input(list(args.source_ranges))
        self.register_outputs({"public_ranges": self.public_ranges, "iap_rule": self.iap_rule.name})
