"""A network of our own: a VPC, one subnet in the region, and only the ingress the server needs.

The project's ``default`` network is not ours: its ``default-allow-ssh`` rule opens tcp:22 to
0.0.0.0/0 on every instance, and some organizations have no default network at all
(https://cloud.google.com/vpc/docs/vpc#default-network). So the stack makes its own custom-mode
VPC and a subnet in the stack's region with Private Google Access (GCS and Secret Manager
without a public route), and admits, to the instances carrying the stack's network tag:

* Google's IAP TCP-forwarding proxies to SSH and llama-server (``gcloud compute ssh
  --tunnel-through-iap``, ``start-iap-tunnel``);
* Google's health-check probers to llama-server (autohealing and a load balancer);
* the user's ``sourceRanges`` to llama-server, only when listed and only without a front door (the
  config refuses sourceRanges with a door, whose URL admits whoever has the key and opens no port on
  the VM): a rule without source ranges means "any source" to GCE. https://cloud.google.com/vpc/docs/firewalls#firewall_rule_components
* the front door (infra/door.py) to llama-server, from the door's own subnet: Cloud Run's Direct VPC
  egress takes its addresses from a subnet, and an ingress rule can name it only by that subnet's
  range (network tags and service accounts of a Cloud Run source are not supported in ingress rules).
  https://cloud.google.com/run/docs/configuring/vpc-direct-vpc#limitations

The door's subnet cannot be deleted until 1-2 hours after the Cloud Run service that used it is
gone (https://cloud.google.com/run/docs/configuring/vpc-direct-vpc#delete-subnet), and the VPC cannot
be deleted while the subnet exists. So with a door, the VPC and the door's subnet outlive ``pulumi
destroy`` (both are free, like the kept model bucket), and the next ``pulumi up`` of the stack adopts
them (``import_``) instead of failing to create them again; everything else is deleted as usual.

Everything else inbound meets the VPC's implied deny; outbound is the implied allow.

Internal addresses only, by default: no VM of the stack (the group's members, the image builder)
has an external IP. Google's APIs (GCS, Secret Manager, Logging, Monitoring, Compute, IAM
credentials) are reached through Private Google Access, on for every subnet (Private Google Access
works per subnet, for VMs without an external address:
https://cloud.google.com/vpc/docs/private-google-access). What still needs the internet (the bake's
apt and image pulls, the stock-image boot's docker install and pull, a first deployment's hub
download) goes through Cloud NAT on a Cloud Router in the stack's VPC
(https://cloud.google.com/nat/docs/overview): outbound only, no connection from the internet reaches
a VM through it. Where the baked image and the bucket's copy make the internet unnecessary (a restart,
a repair, a new member of a build whose model is cached) the boot never reaches out, and NAT carries
nothing.

NAT always, not only while needed (the figures are infra/pricing.py's, from the pricing page):
the gateway bills $0.0014 an hour per VM that has a NAT assignment (no VM running, no gateway fee),
$0.045 per GiB processed (about $0.96 for one 21 GiB hub download, once per model: the bucket keeps it)
and $0.005 an hour per NAT address it holds (at most ~$3.65 a month if the one address is held while
nothing runs; no source settles whether an AUTO_ONLY gateway releases it, so the estimate assumes it
does not). A NAT made only while needed would have to be created and deleted around the boots that
need it, by something other than this program (a member repaired onto the stock image, or before the
model is cached, needs it at any hour), and a member that boots without it fails. Its blast radius
is small either way: it serves only the servers' subnet (not the door's), never admits inbound
connections, and logs nothing (logging bills per entry, and the boot's own report says what failed).
``externalIp: true`` keeps the ephemeral external address per VM instead, and no NAT is made.
Inbound, an external IP admits nothing beyond the rules above.

Cloud NAT's limits (https://cloud.google.com/nat/docs/ports-and-addresses, port reservation): with
static port allocation each VM gets ``min_ports_per_vm`` source ports per NAT address, and that many
simultaneous connections to one destination address and port. The largest fan-out is the hub
download: hf_xet fetches a file in at most 16 concurrent ranges by default (huggingface_hub's
HF_XET_NUM_CONCURRENT_RANGE_GETS, https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables),
and a closed connection holds its port for TCP TIME_WAIT (120 s by default); 64 ports, the documented
default for static allocation, hold four times that. Dynamic allocation stays off: a single server
needs no more, and its minimum of 32 would be less than one download's burst with its TIME_WAITs.
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
# The front door's subnet: Direct VPC egress needs a /26 or larger (it reserves 16 addresses at a time
# and holds about twice as many as it runs instances). https://cloud.google.com/run/docs/configuring/vpc-direct-vpc#scale-up-down
DOOR_SUBNET_CIDR = "10.64.1.0/26"
# What marks a VPC as this program's (a VPC has no labels): its description starts with this.
NETWORK_DESCRIPTION = "qwen36-mtp-l4: the server's own network (no default-network rules)"
# VPC flow logs are off: they bill per GB logged, and the server's traffic is one port.
# Cloud NAT: a gateway only for the servers' subnet, its addresses allocated by Google, static port
# allocation, no logging (see the module docstring; the provider's create and update send these
# fields as given: magic-modules resource_compute_router_nat).
NAT_MIN_PORTS_PER_VM = 64
NAT_SCOPE = "LIST_OF_SUBNETWORKS"
NAT_SOURCE_RANGES = ("ALL_IP_RANGES",)
NAT_IP_ALLOCATION = "AUTO_ONLY"


class NetworkNotOursError(ValueError):
    pass


def _not_found(exc: Exception, resource_id: str) -> bool:
    """Whether a failed lookup invoke says the resource does not exist (its error type is the
    engine's, so only its text tells).

    The provider answers a 404 with ``<id> not found`` (``projects/P/global/networks/N not found``)
    and wraps every other error as ``Error when reading or editing Network Not Found : N: googleapi:
    Error 403: ...`` (magic-modules ``transport/transport.go`` ``HandleDataSourceNotFoundError``, which
    ``data_source_google_compute_network.go`` calls with the label ``"Network Not Found : %s"``; the
    subnetwork's likewise): "Not Found" is in every wrapped 403, 429 and 5xx, so only ``<id> not
    found`` means absent. Compute's own API being off (403 ``accessNotConfigured``, the reason the
    provider's ``IsApiNotEnabledError`` reads) means absent too: nothing of this stack can exist in
    a project whose Compute API was never enabled, and the program enables it. Anything else is
    re-raised, so a denied read never skips the import and the not-ours guard."""
    text = str(exc)
    if f"{resource_id} not found" in text:
        return True
    return "accessNotConfigured" in text and "compute.googleapis.com" in text


def existing_network(project: str, name: str) -> str | None:
    """The import id of this stack's VPC when an earlier deployment kept it, else None.

    Raises :class:`NetworkNotOursError` for a VPC of that name that this program did not make. A
    missing network is the provider's 404 text (see _not_found), or an answer without a self link."""
    resource_id = f"projects/{project}/global/networks/{name}"
    try:
        found = gcp.compute.get_network(name=name, project=project)
    except Exception as exc:
        if _not_found(exc, resource_id):
            return None
        raise
    if not found.self_link:
        return None
    if not (found.description or "").startswith(NETWORK_DESCRIPTION):
        raise NetworkNotOursError(
            f"a VPC named {name} already exists in project {project} and is not this stack's (its "
            f"description is {found.description!r}); delete it or deploy under another stack name"
        )
    return resource_id


def existing_subnetwork(project: str, region: str, name: str) -> str | None:
    """The import id of a subnet an earlier deployment kept (its VPC is ours: see existing_network)."""
    resource_id = f"projects/{project}/regions/{region}/subnetworks/{name}"
    try:
        found = gcp.compute.get_subnetwork(name=name, region=region, project=project)
    except Exception as exc:
        if _not_found(exc, resource_id):
            return None
        raise
    return resource_id if found.self_link else None


@dataclass
class NetworkAccessArgs:
    project: str
    region: str
    network_tag: str
    source_ranges: Sequence[str]
    door: bool = False
    """Whether a front door reaches the server (its subnet, its firewall rule, the VPC kept)."""
    nat: bool = True
    """Cloud NAT for the servers' subnet (false with ``externalIp``: every VM has its own address)."""
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


class NetworkAccess(pulumi.ComponentResource):
    """The stack's VPC, its subnet, and the ingress rules for instances carrying ``network_tag``."""

    vpc: gcp.compute.Network
    subnet: gcp.compute.Subnetwork
    door_subnet: gcp.compute.Subnetwork | None
    """Where the front door's Direct VPC egress takes its addresses (None without a door)."""
    public_rule: gcp.compute.Firewall | None
    door_rule: gcp.compute.Firewall | None
    iap_rule: gcp.compute.Firewall
    health_check_rule: gcp.compute.Firewall
    router: gcp.compute.Router | None
    nat: gcp.compute.RouterNat | None
    """The servers' way to the internet without an external address (None with ``externalIp``)."""
    network: pulumi.Output[str]
    """The VPC's self link, for an instance template's network interface."""
    subnetwork: pulumi.Output[str]
    """The subnet's self link (a custom-mode VPC needs it named on every interface)."""
    network_name: pulumi.Output[str]
    subnetwork_name: pulumi.Output[str]
    door_subnetwork: pulumi.Output[str] | None
    """The door subnet's name (None without a door): Direct VPC egress takes names, not self links."""
    public_ranges: pulumi.Output[list[str]]

    def __init__(
        self, name: str, args: NetworkAccessArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("qwen36:infra:NetworkAccess", name, None, opts)
        # With a door the VPC outlives destroy (see the module docstring), and is adopted if kept.
        keep = args.door
        self.vpc = gcp.compute.Network(
            f"{name}-vpc",
            project=args.project,
            name=args.network_tag,
            description=NETWORK_DESCRIPTION,
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=list(args.depends_on),
                retain_on_delete=keep,
                import_=existing_network(args.project, args.network_tag) if keep else None,
            ),
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
        self.door_subnet = None
        self.door_rule = None
        if args.door:
            door_subnet = f"{args.network_tag}-door-{args.region}"
            self.door_subnet = gcp.compute.Subnetwork(
                f"{name}-door-subnet",
                project=args.project,
                name=door_subnet,
                description="qwen36-mtp-l4: the front door's Direct VPC egress (Cloud Run)",
                region=args.region,
                network=self.vpc.id,
                ip_cidr_range=DOOR_SUBNET_CIDR,
                private_ip_google_access=True,
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[self.vpc],
                    retain_on_delete=True,
                    import_=existing_subnetwork(args.project, args.region, door_subnet),
                ),
            )
            self.door_rule = self._ingress(
                f"{name}-door",
                args,
                description=f"llama-server (tcp:{PORT}) from the front door's subnet only",
                ports=[PORT],
                source_ranges=[DOOR_SUBNET_CIDR],
                opts=on_vpc,
            )
        self.public_rule = None
        # With a door, sourceRanges opens the door (its own check), never the VM.
        if args.source_ranges and not args.door:
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
        self.router = None
        self.nat = None
        if args.nat:
            self.router, self.nat = self._nat(name, args, on_vpc)
        self.network = self.vpc.self_link
        self.subnetwork = self.subnet.self_link
        self.network_name = self.vpc.name
        self.subnetwork_name = self.subnet.name
        self.door_subnetwork = self.door_subnet.name if self.door_subnet is not None else None
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
                "nat": self.nat.name if self.nat is not None else None,
            }
        )

    def _nat(
        self, name: str, args: NetworkAccessArgs, opts: pulumi.ResourceOptions
    ) -> tuple[gcp.compute.Router, gcp.compute.RouterNat]:
        router = gcp.compute.Router(
            f"{name}-router",
            project=args.project,
            name=f"{args.network_tag}-router",
            description="qwen36-mtp-l4: Cloud NAT for the servers' subnet (no external IPs)",
            region=args.region,
            network=self.vpc.id,
            opts=opts,
        )
        nat = gcp.compute.RouterNat(
            f"{name}-nat",
            project=args.project,
            name=f"{args.network_tag}-nat",
            region=args.region,
            router=router.name,
            nat_ip_allocate_option=NAT_IP_ALLOCATION,
            source_subnetwork_ip_ranges_to_nat=NAT_SCOPE,
            subnetworks=[
                gcp.compute.RouterNatSubnetworkArgs(
                    name=self.subnet.self_link, source_ip_ranges_to_nats=list(NAT_SOURCE_RANGES)
                )
            ],
            enable_dynamic_port_allocation=False,
            min_ports_per_vm=NAT_MIN_PORTS_PER_VM,
            log_config=gcp.compute.RouterNatLogConfigArgs(enable=False, filter="ERRORS_ONLY"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[router, self.subnet]),
        )
        return router, nat

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
