"""A network of our own: a VPC, one subnet in the region, and only the ingress the server needs.

The project's ``default`` network is not ours: its ``default-allow-ssh`` rule opens tcp:22 to
0.0.0.0/0 on every instance, and some organizations have no default network at all
(https://cloud.google.com/vpc/docs/vpc#default-network). So the stack makes its own custom-mode
VPC and a subnet in the stack's region with Private Google Access (GCS and Secret Manager
without a public route), and admits, to the instances carrying the stack's network tag:

* Google's IAP TCP-forwarding proxies to SSH and llama-server (``gcloud compute ssh
  --tunnel-through-iap``, ``start-iap-tunnel``);
* Google's health-check probers to llama-server (autohealing and a load balancer);
* the user's ``sourceRanges`` to llama-server, only when listed: a rule without source ranges
  means "any source" to GCE. https://cloud.google.com/vpc/docs/firewalls#firewall_rule_components

Everything else inbound meets the VPC's implied deny; outbound is the implied allow.

Ephemeral external IPs, not Cloud NAT: a member reaches Hugging Face (the cache-miss download,
22 GB), ghcr.io (the server image, when the tooling image is not baked) and the Ubuntu archive, so
it needs egress to the internet. An ephemeral external IP per member costs the in-use IPv4 fee only
(https://cloud.google.com/vpc/network-pricing#ipaddress); Cloud NAT would add a router and a
gateway, and bills every GiB it processes (https://cloud.google.com/nat/pricing), about a dollar
for each 22 GB hub download. Inbound, an external IP admits nothing beyond the rules above.
Private Google Access is on so that a member without an external IP (a later private-only mode)
still reaches GCS and Secret Manager; it changes nothing for members that have one.
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
# Google's health-check probers (and the load balancers' proxies), for autohealing and backends.
# https://cloud.google.com/load-balancing/docs/health-check-concepts#ip-ranges
HEALTH_CHECK_RANGES = ("35.191.0.0/16", "130.211.0.0/22")
SSH_PORT = 22
# One /24 holds 252 usable addresses, far more than a group of L4 spot VMs needs; a private range
# (RFC 1918) that does not clash with the default network's auto-mode 10.128.0.0/9.
SUBNET_CIDR = "10.64.0.0/24"
# VPC flow logs are off: they bill per GB logged, and the server's traffic is one port.


@dataclass
class NetworkAccessArgs:
    project: pulumi.Input[str]
    region: str
    network_tag: str
    source_ranges: Sequence[str]
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


class NetworkAccess(pulumi.ComponentResource):
    """The stack's VPC, its subnet, and the ingress rules for instances carrying ``network_tag``."""

    vpc: gcp.compute.Network
    subnet: gcp.compute.Subnetwork
    public_rule: gcp.compute.Firewall | None
    iap_rule: gcp.compute.Firewall
    health_check_rule: gcp.compute.Firewall
    network: pulumi.Output[str]
    """The VPC's self link, for an instance template's network interface."""
    subnetwork: pulumi.Output[str]
    """The subnet's self link (a custom-mode VPC needs it named on every interface)."""
    network_name: pulumi.Output[str]
    subnetwork_name: pulumi.Output[str]
    public_ranges: pulumi.Output[list[str]]

    def __init__(
        self, name: str, args: NetworkAccessArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("qwen36:infra:NetworkAccess", name, None, opts)
        first = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        self.vpc = gcp.compute.Network(
            f"{name}-vpc",
            project=args.project,
            name=args.network_tag,
            description="qwen36-mtp-l4: the server's own network (no default-network rules)",
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            opts=first,
        )
        on_vpc = pulumi.ResourceOptions(parent=self, depends_on=[self.vpc])
        self.subnet = gcp.compute.Subnetwork(
            f"{name}-subnet",
            project=args.project,
            name=f"{args.network_tag}-{args.region}",
            region=args.region,
            network=self.vpc.id,
            ip_cidr_range=SUBNET_CIDR,
            private_ip_google_access=True,
            opts=on_vpc,
        )
        self.public_rule = None
        if args.source_ranges:
            self.public_rule = self._ingress(
                f"{name}-server",
                args,
                description=f"llama-server (tcp:{PORT}) from the stack's sourceRanges",
                ports=[PORT],
                source_ranges=list(args.source_ranges),
                opts=on_vpc,
            )
        self.iap_rule = self._ingress(
            f"{name}-iap",
            args,
            description="SSH and llama-server through IAP TCP forwarding",
            ports=[SSH_PORT, PORT],
            source_ranges=[IAP_SOURCE_RANGE],
            opts=on_vpc,
        )
        self.health_check_rule = self._ingress(
            f"{name}-health-checks",
            args,
            description=f"Google's health checks to llama-server (tcp:{PORT})",
            ports=[PORT],
            source_ranges=list(HEALTH_CHECK_RANGES),
            opts=on_vpc,
        )
        self.network = self.vpc.self_link
        self.subnetwork = self.subnet.self_link
        self.network_name = self.vpc.name
        self.subnetwork_name = self.subnet.name
        self.public_ranges = pulumi.Output.from_input(list(args.source_ranges))
        self.register_outputs(
            {
                "network": self.network,
                "subnetwork": self.subnetwork,
                "network_name": self.network_name,
                "subnetwork_name": self.subnetwork_name,
                "public_ranges": self.public_ranges,
                "iap_rule": self.iap_rule.name,
                "health_check_rule": self.health_check_rule.name,
            }
        )

    def _ingress(
        self,
        resource_name: str,
        args: NetworkAccessArgs,
        *,
        description: str,
        ports: Sequence[int],
        source_ranges: list[str],
        opts: pulumi.ResourceOptions,
    ) -> gcp.compute.Firewall:
        return gcp.compute.Firewall(
            resource_name,
            project=args.project,
            network=self.vpc.self_link,
            direction="INGRESS",
            description=description,
            allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(p) for p in ports])],
            source_ranges=source_ranges,
            target_tags=[args.network_tag],
            opts=opts,
        )
