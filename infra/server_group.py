"""The server as a regional managed instance group: an instance template and the group that runs it.

A bare spot VM stays TERMINATED after preemption and cannot move out of a stocked-out zone. A
regional managed instance group (MIG) repairs a member that stops or disappears, can repair it
into another of the listed zones, and prefers zones with capacity, so GCE itself is the control
plane. https://cloud.google.com/compute/docs/instance-groups/regional-migs
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from infra import shielded
from infra.boot_script import render_boot_script
from infra.config import StackConfig
from infra.server_args import PORT
from infra.shielded import SecureBoot, shielded_instance_config

# Google Cloud's guidance for VMs whose own SA is narrowed by IAM: the broad scope, with the
# service account's roles doing the limiting. https://cloud.google.com/compute/docs/access/service-accounts#scopes_best_practice
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
NETWORK_TIER = "PREMIUM"
NAMED_PORT = "http"
HEALTH_PATH = "/health"

# BALANCED places members in the listed zones that have capacity, the documented shape for
# serving; with hardware that is not in every zone of the region it needs redistribution NONE,
# else the group would move members about to even the zones out.
# https://cloud.google.com/compute/docs/instance-groups/regional-mig-distribution-shape
TARGET_SHAPE = "BALANCED"
REDISTRIBUTION = "NONE"

# GCE bounds the autohealing grace period to 0-3600 s.
# https://cloud.google.com/compute/docs/instance-groups/autohealing-instances-in-migs
MAX_INITIAL_DELAY_S = 3600
# An unhealthy verdict takes UNHEALTHY_THRESHOLD failed probes CHECK_INTERVAL_S apart: 90 s of a
# dead server, long enough not to repair a member over one slow answer while it generates.
CHECK_INTERVAL_S = 30
CHECK_TIMEOUT_S = 10
HEALTHY_THRESHOLD = 1
UNHEALTHY_THRESHOLD = 3

# What GCE does with a preempted spot member. DELETE, not STOP: a MIG repairs a member that was
# stopped or deleted by anything but itself by recreating it
# (https://cloud.google.com/compute/docs/instance-groups/about-repair), so STOP would not keep the
# disk for a restart; it would only leave a TERMINATED VM, pinned to its stocked-out zone and its
# pd-ssd still billed, until the group acts. DELETE frees both at once and lets the group create
# the replacement in any listed zone with capacity (on_repair.allow_changing_zone).
# https://cloud.google.com/compute/docs/instances/spot#preemption-process
SPOT_TERMINATION_ACTION = "DELETE"

# Repair into another zone when the member's own has no capacity: the spot market's stockouts are
# per zone. GCE supports it only for a group with no stateful configuration, update-on-repair on and
# a BALANCED or ANY shape, so the group carries no stateful policy of any kind (no stateful IP, no
# per-instance config): the single server's way in is the front door (infra/door.py) or an IAP
# tunnel, both of which find the current member, never a fixed address.
# https://cloud.google.com/compute/docs/instance-groups/repair-vm-in-alternate-zone#limitations
ALLOW_CHANGING_ZONE = "YES"


def scheduling_args(cfg: StackConfig) -> gcp.compute.RegionInstanceTemplateSchedulingArgs:
    # GPUs cannot live-migrate, so host maintenance must stop the VM (TERMINATE) either way.
    # https://cloud.google.com/compute/docs/gpus/gpu-host-maintenance
    if cfg.provisioning_model == "SPOT":
        # GCE rejects a spot VM that asks for automatic restart (the provider defaults it to true).
        # https://cloud.google.com/compute/docs/instances/create-use-spot
        return gcp.compute.RegionInstanceTemplateSchedulingArgs(
            provisioning_model="SPOT",
            preemptible=True,
            automatic_restart=False,
            on_host_maintenance="TERMINATE",
            instance_termination_action=SPOT_TERMINATION_ACTION,
        )
    return gcp.compute.RegionInstanceTemplateSchedulingArgs(
        provisioning_model="STANDARD",
        preemptible=False,
        automatic_restart=True,
        on_host_maintenance="TERMINATE",
    )


def instance_metadata(startup_script: str) -> dict[str, str]:
    return {
        # Access by IAM (roles/compute.osAdminLogin), not by keys pasted into metadata.
        "enable-oslogin": "TRUE",
        "block-project-ssh-keys": "TRUE",
        "serial-port-enable": "FALSE",
        # The boot script reports its phases here; the deployer reads them through the Compute API.
        "enable-guest-attributes": "TRUE",
        # A template has no metadata_startup_script field of its own: GCE reads this key at every boot.
        "startup-script": startup_script,
    }


def initial_delay_s(cfg: StackConfig) -> int:
    """Autohealing's grace period for a new member: the cold-start bound the deployer waits for
    (``healthTimeoutMinutes``), within GCE's 0-3600 s. A member not healthy by then is recreated
    rather than left serving nothing."""
    return max(0, min(MAX_INITIAL_DELAY_S, cfg.health_timeout_minutes * 60))


def update_policy(cfg: StackConfig) -> gcp.compute.RegionInstanceGroupManagerUpdatePolicyArgs:
    """How a new template rolls out. A regional group's fixed maxSurge and maxUnavailable must each
    be 0 or at least the number of zones
    (https://cloud.google.com/compute/docs/instance-groups/regional-mig-updates#max_surge).

    One server: nothing can stay up while it is replaced (one L4's quota cannot hold the old member
    and the new), so RECREATE with maxSurge 0, and maxUnavailable the zone count, the smallest
    non-zero value GCE allows. A fleet: new members first (SUBSTITUTE, maxSurge the zone count,
    maxUnavailable 0), so a rollout never takes a server away before its replacement serves; it
    needs room in the L4 quota for up to one extra member per zone while it runs, which the
    preflight (``qwen36 check``) counts.
    """
    zones = len(cfg.zones)
    return gcp.compute.RegionInstanceGroupManagerUpdatePolicyArgs(
        type="PROACTIVE",
        minimal_action="REPLACE",
        most_disruptive_allowed_action="REPLACE",
        instance_redistribution_type=REDISTRIBUTION,
        replacement_method="SUBSTITUTE" if cfg.fleet else "RECREATE",
        max_surge_fixed=rollout_surge(cfg),
        max_unavailable_fixed=0 if cfg.fleet else zones,
    )


def rollout_surge(cfg: StackConfig) -> int:
    """Members a rollout may add above the target size (what the L4 quota must leave room for)."""
    return len(cfg.zones) if cfg.fleet else 0


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class ServerGroupArgs:
    cfg: StackConfig
    project: pulumi.Input[str]
    group_name: str
    """The GCE name of the group and the prefix of its members' names (the deployment name)."""
    image: pulumi.Input[str]
    """The boot image (a family reference: GCE resolves it at each VM's creation). Where it is this
    deployment's own bake, the output resolves once the image exists, so the template, and with it
    the group, waits for the bake (infra/tooling_image.py)."""
    service_account_email: pulumi.Input[str]
    bucket: pulumi.Input[str]
    api_key_secret: pulumi.Input[str] | None
    network_tag: str
    network: pulumi.Input[str]
    """The stack's own VPC (infra/network.py); never the project's ``default`` network."""
    subnetwork: pulumi.Input[str]
    """Its subnet in the region: a custom-mode VPC needs the subnet named on every interface."""
    target_size: int | None = 1
    """Members to run; None when an autoscaler owns the size (then the group does not set it)."""
    ignore_changes: Sequence[str] = field(default_factory=list)
    """Group fields another actor changes (e.g. ``targetSize`` for an autoscaler or an idle stop)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)
    door_url: pulumi.Input[str] | None = None
    """The front door's URL, for the idle watcher's stop call (None: the watcher resizes itself)."""
    secure_boot: pulumi.Output[SecureBoot] | None = None
    """The boot image's verdict (infra/tooling_image.py ImageChoice); None: the stock image's, off."""


class ServerGroup(pulumi.ComponentResource):
    """The health check, the instance template and the regional group that runs it."""

    health_check: gcp.compute.HealthCheck
    template: gcp.compute.RegionInstanceTemplate
    group: gcp.compute.RegionInstanceGroupManager
    group_name: pulumi.Output[str]
    instance_group: pulumi.Output[str]
    region: pulumi.Output[str]
    template_id: pulumi.Output[str]
    startup_script: pulumi.Output[str]
    startup_script_sha256: pulumi.Output[str]

    def __init__(self, name: str, args: ServerGroupArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:ServerGroup", name, None, opts)
        cfg = args.cfg
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        self.health_check = gcp.compute.HealthCheck(
            f"{name}-health",
            project=args.project,
            name=f"{args.group_name}-health",
            description=f"llama-server {HEALTH_PATH} on {PORT}: autohealing (and load balancer backends)",
            check_interval_sec=CHECK_INTERVAL_S,
            timeout_sec=CHECK_TIMEOUT_S,
            healthy_threshold=HEALTHY_THRESHOLD,
            unhealthy_threshold=UNHEALTHY_THRESHOLD,
            # /health stays open with an API key set, and answers 200 only once the model is loaded.
            http_health_check=gcp.compute.HealthCheckHttpHealthCheckArgs(port=PORT, request_path=HEALTH_PATH),
            opts=child,
        )
        self.startup_script = self._render_script(cfg, args)
        self.startup_script_sha256 = self.startup_script.apply(sha256_hex)
        self.template = self._template(f"{name}-template", args, child)
        self.group = self._group(name, args, self.template)
        self.group_name = self.group.name
        self.instance_group = self.group.instance_group
        self.region = pulumi.Output.from_input(cfg.region)
        self.template_id = self.template.self_link
        self.register_outputs(
            {
                "group_name": self.group_name,
                "instance_group": self.instance_group,
                "region": self.region,
                "template_id": self.template_id,
                "startup_script_sha256": self.startup_script_sha256,
            }
        )

    def _template(
        self, resource_name: str, args: ServerGroupArgs, child: pulumi.ResourceOptions
    ) -> gcp.compute.RegionInstanceTemplate:
        cfg = args.cfg
        secure_boot = (
            args.secure_boot if args.secure_boot is not None else pulumi.Output.from_input(shielded.STOCK)
        )
        # No access config, no external address: the members reach the internet through Cloud NAT and
        # Google's APIs through Private Google Access (infra/network.py). With externalIp, an ephemeral
        # external address per member, for egress only: the firewall admits nothing from the internet.
        access = (
            [gcp.compute.RegionInstanceTemplateNetworkInterfaceAccessConfigArgs(network_tier=NETWORK_TIER)]
            if cfg.external_ip
            else []
        )
        return gcp.compute.RegionInstanceTemplate(
            resource_name,
            project=args.project,
            region=cfg.region,
            # Templates are immutable: a change is a new template (a fresh name from the prefix),
            # the group moves to it, then the old one is deleted.
            name_prefix=f"{args.group_name}-",
            machine_type=cfg.machine_type,
            guest_accelerators=[
                gcp.compute.RegionInstanceTemplateGuestAcceleratorArgs(
                    type=cfg.accelerator_type, count=cfg.accelerator_count
                )
            ],
            scheduling=scheduling_args(cfg),
            disks=[
                gcp.compute.RegionInstanceTemplateDiskArgs(
                    boot=True,
                    auto_delete=True,
                    source_image=args.image,
                    disk_size_gb=cfg.boot_disk_size_gb,
                    disk_type=cfg.boot_disk_type,
                )
            ],
            network_interfaces=[
                gcp.compute.RegionInstanceTemplateNetworkInterfaceArgs(
                    network=args.network, subnetwork=args.subnetwork, access_configs=access
                )
            ],
            service_account=gcp.compute.RegionInstanceTemplateServiceAccountArgs(
                email=args.service_account_email, scopes=SCOPES
            ),
            # vTPM and integrity monitoring on; Secure Boot as the bake proved it (infra/shielded.py),
            # and off only with its reason as a label, which the policy rule secure_boot_on reads.
            shielded_instance_config=shielded_instance_config(
                gcp.compute.RegionInstanceTemplateShieldedInstanceConfigArgs,
                secure_boot.apply(lambda d: d.on),
            ),
            metadata=self.startup_script.apply(instance_metadata),
            tags=[args.network_tag],
            labels=secure_boot.apply(lambda d: {**args.labels, **d.labels}),
            opts=child,
        )

    def _group(
        self, name: str, args: ServerGroupArgs, template: gcp.compute.RegionInstanceTemplate
    ) -> gcp.compute.RegionInstanceGroupManager:
        cfg = args.cfg
        return gcp.compute.RegionInstanceGroupManager(
            f"{name}-group",
            project=args.project,
            region=cfg.region,
            name=args.group_name,
            base_instance_name=args.group_name,
            versions=[
                gcp.compute.RegionInstanceGroupManagerVersionArgs(
                    name="primary", instance_template=template.self_link
                )
            ],
            target_size=args.target_size,
            distribution_policy_zones=list(cfg.zones),
            distribution_policy_target_shape=TARGET_SHAPE,
            named_ports=[gcp.compute.RegionInstanceGroupManagerNamedPortArgs(name=NAMED_PORT, port=PORT)],
            auto_healing_policies=gcp.compute.RegionInstanceGroupManagerAutoHealingPoliciesArgs(
                health_check=self.health_check.self_link, initial_delay_sec=initial_delay_s(cfg)
            ),
            # A stopped, preempted or failed member is recreated, in another listed zone when its own
            # has no capacity, and from the current template (update on repair).
            # https://cloud.google.com/compute/docs/instance-groups/about-repair
            instance_lifecycle_policy=gcp.compute.RegionInstanceGroupManagerInstanceLifecyclePolicyArgs(
                default_action_on_failure="REPAIR",
                force_update_on_repair="YES",
                on_repair=gcp.compute.RegionInstanceGroupManagerInstanceLifecyclePolicyOnRepairArgs(
                    allow_changing_zone=ALLOW_CHANGING_ZONE
                ),
            ),
            update_policy=update_policy(cfg),
            # The health gate waits with diagnoses (stockout, quota); the provider would only block.
            wait_for_instances=False,
            # The group's name is fixed, and its zones are ForceNew (the provider schema marks name,
            # base_instance_name, region, description and distribution_policy_zones ForceNew:
            # magic-modules resource_compute_region_instance_group_manager.go.tmpl; "after you choose
            # specific zones during creation, you cannot change or update the zones later",
            # https://cloud.google.com/compute/docs/instance-groups/distributing-instances-with-regional-instance-groups#limitations).
            # Pulumi replaces create-before-delete by default, and a second group of the same name in
            # the same region is a 409: the old group goes first (one server has downtime anyway).
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=list(args.depends_on),
                ignore_changes=list(args.ignore_changes),
                delete_before_replace=True,
            ),
        )

    @staticmethod
    def _render_script(cfg: StackConfig, args: ServerGroupArgs) -> pulumi.Output[str]:
        inputs = pulumi.Output.all(
            bucket=args.bucket,
            api_key_secret=args.api_key_secret,
            project=args.project,
            door_url=args.door_url,
        )
        return inputs.apply(lambda a: render_boot_script(cfg, **a))
