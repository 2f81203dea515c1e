"""The VM: one L4 on a spot G2 machine, a reserved IP, and the boot script in its metadata."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from infra.boot_script import render_boot_script
from infra.config import StackConfig
from infra.network import DEFAULT_NETWORK

# Google Cloud's guidance for VMs whose own SA is narrowed by IAM: the broad scope, with the
# service account's roles doing the limiting. https://cloud.google.com/compute/docs/access/service-accounts#scopes_best_practice
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
NETWORK_TIER = "PREMIUM"


def scheduling_args(cfg: StackConfig) -> gcp.compute.InstanceSchedulingArgs:
    # GPUs cannot live-migrate, so host maintenance must stop the VM (TERMINATE) either way.
    # https://cloud.google.com/compute/docs/gpus/gpu-host-maintenance
    if cfg.provisioning_model == "SPOT":
        # GCE rejects a spot VM that asks for automatic restart; STOP (not DELETE) on preemption keeps
        # the disk, with the model and docker image on it, for `gcloud compute instances start`.
        # https://cloud.google.com/compute/docs/instances/create-use-spot
        return gcp.compute.InstanceSchedulingArgs(
            provisioning_model="SPOT",
            preemptible=True,
            automatic_restart=False,
            on_host_maintenance="TERMINATE",
            instance_termination_action="STOP",
        )
    return gcp.compute.InstanceSchedulingArgs(
        provisioning_model="STANDARD",
        preemptible=False,
        automatic_restart=True,
        on_host_maintenance="TERMINATE",
    )


def instance_metadata() -> dict[str, str]:
    return {
        # Access by IAM (roles/compute.osAdminLogin), not by keys pasted into metadata.
        "enable-oslogin": "TRUE",
        "block-project-ssh-keys": "TRUE",
        "serial-port-enable": "FALSE",
        # The boot script reports its phases here; the deployer reads them through the Compute API.
        "enable-guest-attributes": "TRUE",
    }


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class ServerArgs:
    cfg: StackConfig
    project: pulumi.Input[str]
    instance_name: str
    image: pulumi.Input[str]
    service_account_email: pulumi.Input[str]
    bucket: pulumi.Input[str]
    api_key_secret: pulumi.Input[str] | None
    network_tag: str
    labels: Mapping[str, str] = field(default_factory=dict)
    network: pulumi.Input[str] = DEFAULT_NETWORK
    subnetwork: pulumi.Input[str] | None = None
    """Required with a custom-mode VPC (infra/network.py): GCE does not pick its subnet."""
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


class Server(pulumi.ComponentResource):
    """A static external IP and the GPU instance that uses it."""

    address: gcp.compute.Address
    instance: gcp.compute.Instance
    instance_name: pulumi.Output[str]
    zone: pulumi.Output[str]
    static_ip: pulumi.Output[str]
    startup_script: pulumi.Output[str]
    startup_script_sha256: pulumi.Output[str]

    def __init__(self, name: str, args: ServerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:Server", name, None, opts)
        cfg = args.cfg
        # Reserved so that a restart after preemption keeps the URL; an ephemeral IP changes.
        self.address = gcp.compute.Address(
            f"{name}-ip",
            project=args.project,
            region=cfg.region,
            address_type="EXTERNAL",
            network_tier=NETWORK_TIER,
            labels=dict(args.labels),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.startup_script = self._render_script(cfg, args)
        self.startup_script_sha256 = self.startup_script.apply(sha256_hex)
        self.instance = gcp.compute.Instance(
            f"{name}-vm",
            project=args.project,
            name=args.instance_name,
            zone=cfg.zone,
            machine_type=cfg.machine_type,
            guest_accelerators=[
                gcp.compute.InstanceGuestAcceleratorArgs(
                    type=cfg.accelerator_type, count=cfg.accelerator_count
                )
            ],
            scheduling=scheduling_args(cfg),
            boot_disk=gcp.compute.InstanceBootDiskArgs(
                auto_delete=True,
                initialize_params=gcp.compute.InstanceBootDiskInitializeParamsArgs(
                    image=args.image, size=cfg.boot_disk_size_gb, type=cfg.boot_disk_type
                ),
            ),
            network_interfaces=[
                gcp.compute.InstanceNetworkInterfaceArgs(
                    network=args.network,
                    subnetwork=args.subnetwork,
                    access_configs=[
                        gcp.compute.InstanceNetworkInterfaceAccessConfigArgs(
                            nat_ip=self.address.address, network_tier=NETWORK_TIER
                        )
                    ],
                )
            ],
            service_account=gcp.compute.InstanceServiceAccountArgs(
                email=args.service_account_email, scopes=SCOPES
            ),
            # Secure boot stays off: the Deep Learning VM's NVIDIA kernel module is not signed with a
            # key that shielded VM trusts, so it would not load. vTPM and integrity monitoring still run.
            # https://cloud.google.com/compute/docs/gpus/install-drivers-gpu#secure-boot
            shielded_instance_config=gcp.compute.InstanceShieldedInstanceConfigArgs(
                enable_secure_boot=False, enable_vtpm=True, enable_integrity_monitoring=True
            ),
            metadata=instance_metadata(),
            metadata_startup_script=self.startup_script,
            tags=[args.network_tag],
            labels=dict(args.labels),
            allow_stopping_for_update=True,
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=list(args.depends_on),
                # A GPU quota of one L4 cannot hold the old and the new VM at once, and the name is fixed.
                delete_before_replace=True,
            ),
        )
        self.instance_name = self.instance.name
        self.zone = self.instance.zone
        self.static_ip = self.address.address
        self.register_outputs(
            {
                "instance_name": self.instance_name,
                "zone": self.zone,
                "static_ip": self.static_ip,
                "startup_script_sha256": self.startup_script_sha256,
            }
        )

    @staticmethod
    def _render_script(cfg: StackConfig, args: ServerArgs) -> pulumi.Output[str]:
        inputs = pulumi.Output.all(
            bucket=args.bucket, api_key_secret=args.api_key_secret, project=args.project
        )
        return inputs.apply(lambda a: render_boot_script(cfg, **a))
