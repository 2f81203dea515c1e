"""The tooling image: the stock base image with docker and the pinned llama.cpp image baked in.

A server VM booted from it skips the docker install and image pull (~170 s measured) of its cold
start, since the boot script finds that work done. On by default (``buildToolingImage``): where the
build's family ``qwen36-mtp-l4-tooling-b<build>`` holds no image yet, the :class:`ToolingImage`
component bakes one *before* the group exists: the group's template names the baked image, so
Pulumi creates the template, and then the group, once the image exists. Later deployments find the
family (:func:`find_tooling_image`) and boot from it at once; a new llama.cpp build bakes a new family.

Why before and not beside the first server (the earlier design started the group on the stock image
and moved it over with ``gcloud ... set-instance-template`` once the bake was done): by the project's
own phase table (``python -m bench.first_deploy``), ``pulumi up`` returns sooner with the bake first
(no second cold start after the move), there is no outage of the move, and the group never runs a
template Pulumi did not declare. The out-of-band switch left a template in use that ``pulumi
destroy`` deleted in any order (GCE refuses to delete a template a group uses,
``resourceInUseByAnotherResource``, and the provider does not retry), and it changed the group's
fingerprint behind Pulumi's back.

Instance templates name the family, not an image: GCE resolves a family to its newest image each
time it creates a VM, so every repair and every scale-out boots the newest bake without a template
change. https://cloud.google.com/compute/docs/images/image-families-best-practices

The pipeline, in dependency order (each step waits for the one before):

0. ``<name>-builder-sa``: the builder's own service account (its logs only, no other role);
1. ``<name>-builder``: a small VM from the same base image, the bake script as its startup script,
   on the stack's own network (infra/network.py);
2. ``<name>-bake-wait``: the health gate's guest-attribute follower, until the bake reports ready;
3. ``<name>-stop``: the builder stopped, so its disk is consistent;
4. ``<name>-image``: the image from the builder's boot disk, retained when the stack forgets it;
5. ``<name>-delete-builder``: the builder deleted once the image exists;
6. ``<name>-gpu-test``: an L4 VM booted from the image with Secure Boot on (startup/verify_gpu.sh):
   its verdict becomes the image's ``secure-boot`` label and the members' Secure Boot setting
   (infra/shielded.py). A verdict other than ``on`` boots the same VM again with Secure Boot off,
   and the image is kept only if its GPU works there; a candidate whose GPU fails both ways (or whose
   test VM never reports) is deprecated out of the family (images.getFromFamily skips deprecated
   images: https://cloud.google.com/compute/docs/reference/rest/v1/images/getFromFamily) and the
   step fails, so no member ever boots an image without a GPU. The group waits for this step.

The builder is made and deleted by gcloud inside local commands rather than declared as a
``gcp.compute.Instance``: a VM that the program declares but that step 5 deletes would drift,
and after a ``pulumi refresh`` the next ``up`` would quietly re-create it, a billed VM that no
later step deletes. A failed bake deletes its builder too (no spend while the user looks into
it); since Pulumi retries only the failed step, step 2 re-creates a missing builder first.

Once the family holds an image, the next ``pulumi up`` no longer declares the component: its builder
account goes, and the image stays (``retain_on_delete``), serving every later VM of the build.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import pulumi
import pulumi_gcp as gcp
from pulumi_command import local

from infra import shielded
from infra.bake_script import (
    KEY_PLAIN,
    KEY_SECURE_BOOT,
    bake_script_hash,
    render_bake_script,
    render_verify_script,
)
from infra.boot_protocol import NAMESPACE
from infra.cold_start import COLD_START_STOCK, COLD_START_TOOLING, DOCKER_AND_PULL_S
from infra.config import BOOT_DISK_BASE_GB, DISK_HEADROOM_GB, PROJECT, SERVER_IMAGE_GB, StackConfig
from infra.health_gate import REPO_ROOT, wait_command
from infra.llama_cpp import server_image
from infra.names import suffixed_id
from infra.shielded import SecureBoot

# The bake needs no GPU: the NVIDIA driver and container toolkit come with the base image, and
# `nvidia-ctk runtime configure` only edits docker's daemon.json. So the builder is a small
# general-purpose VM from the same Deep Learning VM family (whose disk then carries the driver
# and nvidia-ctk the server needs), not a scarce, ~5x dearer g2 with an L4. It is on-demand:
# a preemption mid-bake would cost more than the few cents it saves.
BUILDER_MACHINE_TYPE = "e2-standard-4"
BUILDER_DISK_TYPE = "pd-balanced"
# The base image's own disk plus the pulled server image; the server's boot disk (which must be
# at least the image's size) is larger still, since it also holds the model.
BUILDER_DISK_GB = BOOT_DISK_BASE_GB + SERVER_IMAGE_GB + DISK_HEADROOM_GB
BAKE_TIMEOUT_MINUTES = 30
BAKE_POLL_SECONDS = 10.0
# Creating an image from a 60 GB disk takes minutes; the provider's default bound is shorter.
IMAGE_CREATE_TIMEOUT = "30m"

# The bake calls no Google API (apt and ghcr.io over the internet, its reports through the
# metadata server), so its account holds one role: the guest's agents ship its journal to Cloud
# Logging, where a failed bake can be read after the builder is gone. Its own account, never the
# default compute one (project Editor in many projects).
# https://cloud.google.com/compute/docs/access/service-accounts#default_service_account
BUILDER_ROLES = ("roles/logging.logWriter",)
BUILDER_SCOPES = "cloud-platform"
BUILDER_ACCOUNT_SUFFIX = "-bake"
# Service-account ids: 6-30 characters. https://cloud.google.com/iam/docs/service-accounts-create
MAX_ACCOUNT_ID = 30
# The guest OS features the server's boot disk needs from the image, set on it explicitly rather
# than trusted to carry over from the builder's disk: UEFI_COMPATIBLE for a shielded VM (secure
# boot, vTPM, integrity monitoring need UEFI), VIRTIO_SCSI_MULTIQUEUE for the disk's throughput,
# GVNIC for the gVNIC network interface that G2 machines support.
# https://cloud.google.com/compute/docs/images/create-custom#guest-os-features
IMAGE_GUEST_OS_FEATURES = ("UEFI_COMPATIBLE", "VIRTIO_SCSI_MULTIQUEUE", "GVNIC")

BAKE_SCRIPT_ENV = "QWEN36_BAKE_SCRIPT"
VERIFY_SCRIPT_ENV = "QWEN36_VERIFY_SCRIPT"
# The GPU test: one L4 VM of the stack's own shape, with the same provisioning model (and so the
# same GPU quota) as the members; each pass boots the image, which already holds docker and the
# server image, so a verdict takes a couple of minutes.
GPU_TEST_DISK_TYPE = "pd-balanced"
GPU_TEST_TIMEOUT_S = 15 * 60
GPU_TEST_POLL_S = 15
# A local.Command whose inputs change but whose triggers do not is *updated*, and without an
# ``update`` command the provider runs ``create`` again. For the bake-wait and stop steps that would
# re-create (or stop) a builder that step 5 already deleted, leaving a billed VM no later step
# removes, e.g. after the repo or its venv moved (the wait's command line names the interpreter).
# A new bake always comes through the triggers (a new builder id), which replace, never update.
# https://www.pulumi.com/registry/packages/command/api-docs/local/command/#update_python
NO_OP_UPDATE = "true"
# The tail of the builder's numeric instance id that goes into the image name.
BUILDER_ID_DIGITS = 8


def tooling_family(build: int) -> str:
    """The image family for one llama.cpp build: a new build never picks up an old build's image."""
    return f"{PROJECT}-tooling-b{build}"


def tooling_image_name(cfg: StackConfig) -> str:
    """Unique per build and bake-script content (and base image), prefixed by the family name.

    The prefix matters: the provider (terraform-provider-google's DiskImageDiffSuppress, which
    pulumi-gcp wraps) treats a family reference and an image whose name contains the family's
    name as equal, so a newer image in the family does not force a running server VM to be
    replaced; it is used the next time the VM is created.
    """
    return f"{tooling_family(cfg.llama_cpp_build)}-{_bake_hash(cfg)}"


def bake_image_name(cfg: StackConfig, builder_id: str | None) -> str:
    """This bake's image: the config's name plus the builder VM's id, so a re-bake of the same
    config (``pulumi up --replace`` on the builder) makes a new image instead of clashing with
    the kept one."""
    suffix = (builder_id or "").strip()[-BUILDER_ID_DIGITS:]
    return f"{tooling_image_name(cfg)}-{suffix}" if suffix else tooling_image_name(cfg)


def builder_name(cfg: StackConfig) -> str:
    return f"qwen36-bake-b{cfg.llama_cpp_build}-{_bake_hash(cfg)}"


def builder_account_id(deployment: str) -> str:
    """The builder's service-account id: the deployment's name (per stack, so two stacks of one
    project never share it) with ``-bake``, within the 30-character limit."""
    return suffixed_id(deployment, BUILDER_ACCOUNT_SUFFIX, max_length=MAX_ACCOUNT_ID)


def family_url(project: str, family: str) -> str:
    """A family reference: GCE resolves it to the family's newest image when a disk is created."""
    return f"projects/{project}/global/images/family/{family}"


def stock_image_url(cfg: StackConfig) -> str:
    return family_url(cfg.image_project, cfg.image_family)


def _bake_hash(cfg: StackConfig) -> str:
    base = f"{cfg.image_project}/{cfg.image_family}\n"
    return bake_script_hash(base + render_bake_script(cfg))


# --- The builder's shell commands (every value quoted; run by local.Command via /bin/sh) --------


def bake_vm_flags(
    cfg: StackConfig, network: str, subnetwork: str, service_account: str, labels: str
) -> list[str]:
    """What the builder and the GPU test VM share: the stack's own network (infra/network.py: apt
    and ghcr.io through its Cloud NAT, no address of their own; with externalIp, an ephemeral external
    IP as before; no ingress, they report through guest attributes), their account, Secure Boot on,
    and the metadata every VM of the stack carries."""
    return [
        f"--network={network}",
        f"--subnet={subnetwork}",
        *([] if cfg.external_ip else ["--no-address"]),
        f"--service-account={service_account}",
        f"--scopes={BUILDER_SCOPES}",
        "--shielded-secure-boot",
        "--shielded-vtpm",
        "--shielded-integrity-monitoring",
        "--metadata=enable-guest-attributes=TRUE,enable-oslogin=TRUE,block-project-ssh-keys=TRUE",
        f"--labels={labels}",
    ]


@dataclass(frozen=True)
class Builder:
    name: str
    project: str
    zone: str
    network: str
    subnetwork: str
    service_account: str

    def _gcloud(self, verb: str, *extra: str) -> str:
        argv = [
            "gcloud",
            "compute",
            "instances",
            verb,
            self.name,
            f"--project={self.project}",
            f"--zone={self.zone}",
        ]
        return shlex.join([*argv, *extra])

    def exists(self) -> str:
        return self._gcloud("describe", "--format=value(status)") + " >/dev/null 2>&1"

    def ensure(self, cfg: StackConfig) -> str:
        """Create the builder unless it exists; the bake script comes from ``$QWEN36_BAKE_SCRIPT``."""
        labels = f"app={PROJECT},role=tooling-builder,llama-cpp-build=b{cfg.llama_cpp_build}"
        gcloud = self._gcloud(
            "create",
            f"--machine-type={BUILDER_MACHINE_TYPE}",
            f"--image-project={cfg.image_project}",
            f"--image-family={cfg.image_family}",
            f"--boot-disk-size={BUILDER_DISK_GB}GB",
            f"--boot-disk-type={BUILDER_DISK_TYPE}",
            # Secure Boot on: the builder needs no GPU (its DKMS module not loading is harmless), and
            # an organization's compute.requireShieldedVm then refuses nothing the bake creates.
            *bake_vm_flags(cfg, self.network, self.subnetwork, self.service_account, labels),
        )
        # gcloud splits --metadata values at commas, so the script goes through a file.
        return (
            f"if ! {self.exists()}; then\n"
            '  script="$(mktemp)"\n'
            f'  printf "%s" "${BAKE_SCRIPT_ENV}" >"$script"\n'
            f'  {gcloud} --metadata-from-file=startup-script="$script" || {{ rm -f "$script"; exit 1; }}\n'
            '  rm -f "$script"\n'
            "fi\n"
        )

    def create(self, cfg: StackConfig) -> str:
        """Ensure the builder, then print its instance id: one id per VM, i.e. per bake."""
        return self.ensure(cfg) + self._gcloud("describe", "--format=value(id)") + "\n"

    def stop(self) -> str:
        # Waits for the stop operation, i.e. a clean guest shutdown that flushed the disk.
        return self._gcloud("stop", "--quiet")

    def delete(self) -> str:
        return f"if {self.exists()}; then\n  {self._gcloud('delete', '--quiet')}\nfi\n"

    def disk_url(self) -> str:
        # gcloud names the boot disk after the instance.
        return f"https://www.googleapis.com/compute/v1/projects/{self.project}/zones/{self.zone}/disks/{self.name}"


@dataclass(frozen=True)
class GpuTest:
    """The bake's GPU test VM (see the module docstring, step 6): every value quoted."""

    name: str
    project: str
    zones: tuple[str, ...]
    network: str
    subnetwork: str
    service_account: str
    image: str
    """The candidate image's name, in ``project``."""

    def _gcloud(self, *argv: str) -> str:
        return shlex.join(["gcloud", "compute", *argv, f"--project={self.project}"])

    def _instance(self, verb: str, *extra: str) -> str:
        return (
            shlex.join(["gcloud", "compute", "instances", verb, self.name, f"--project={self.project}"])
            + (" " + shlex.join(list(extra)) if extra else "")
            + ' --zone="$zone"'
        )

    def _create(self, cfg: StackConfig) -> str:
        labels = f"app={PROJECT},role=gpu-test,llama-cpp-build=b{cfg.llama_cpp_build}"
        spot = cfg.provisioning_model == "SPOT"
        argv = [
            f"--machine-type={cfg.machine_type}",
            f"--accelerator=type={cfg.accelerator_type},count={cfg.accelerator_count}",
            "--maintenance-policy=TERMINATE",
            f"--provisioning-model={cfg.provisioning_model}",
            *(["--instance-termination-action=DELETE"] if spot else []),
            f"--image={self.image}",
            f"--image-project={self.project}",
            f"--boot-disk-size={BUILDER_DISK_GB}GB",
            f"--boot-disk-type={GPU_TEST_DISK_TYPE}",
            *bake_vm_flags(cfg, self.network, self.subnetwork, self.service_account, labels),
        ]
        return self._instance("create", *argv) + ' --metadata-from-file=startup-script="$script"'

    def script(self, cfg: StackConfig) -> str:
        """Create the VM in the first zone with an L4 for it, read its verdicts, delete it; print the
        verdict code (the last stdout line) and label the image with it, or deprecate the image."""
        attribute = self._instance("get-guest-attributes", "--format=value(value)")
        image = shlex.quote(self.image)
        project = shlex.quote(f"--project={self.project}")
        zones = " ".join(shlex.quote(z) for z in self.zones)
        refused = f"the candidate image {self.image} is refused"
        after = "it is deprecated out of the family, and the next pulumi up bakes again"
        return f"""set -u
zone=""
script="$(mktemp)"
printf "%s" "${VERIFY_SCRIPT_ENV}" >"$script"
for candidate in {zones}; do
  zone=$candidate
  if {self._create(cfg)}; then break; fi
  zone=""
done
rm -f "$script"
refuse() {{
  printf '%s\\n' "{refused}: $1; {after}" >&2
  [ -z "$zone" ] || {self._instance("delete", "--quiet")} >&2 || true
  gcloud compute images deprecate {image} {project} --state=OBSOLETE >&2 || true
  exit 1
}}
[ -n "$zone" ] || refuse "no zone of {zones} could create its GPU test VM (stockout or quota)"
read_key() {{
  # read_key KEY...: the first of these guest attributes the VM writes, as KEY=VALUE (bounded).
  local deadline=$((SECONDS + {GPU_TEST_TIMEOUT_S})) key value
  while ((SECONDS < deadline)); do
    for key in "$@"; do
      value=$({attribute} --query-path="{NAMESPACE}/$key" 2>/dev/null) || value=""
      if [ -n "$value" ]; then printf '%s=%s\\n' "$key" "$value"; return 0; fi
    done
    sleep {GPU_TEST_POLL_S}
  done
  return 1
}}
first=$(read_key {KEY_SECURE_BOOT} {KEY_PLAIN}) || refuse "its GPU test VM never reported"
case $first in
  {KEY_SECURE_BOOT}=on\\ *)
    code=on ;;
  {KEY_SECURE_BOOT}=*)
    code=${{first#{KEY_SECURE_BOOT}=}}; code=${{code%% *}}
    echo "Secure Boot failed on the GPU test: ${{first#*=}}; trying the image with Secure Boot off" >&2
    {self._instance("stop", "--quiet")} >&2 || refuse "its GPU test VM did not stop"
    {self._instance("update", "--no-shielded-secure-boot")} >&2 ||
      refuse "Secure Boot could not be turned off"
    {self._instance("start")} >&2 || refuse "its GPU test VM did not start again"
    plain=$(read_key {KEY_PLAIN}) || refuse "its GPU test VM never reported with Secure Boot off"
    case $plain in
      {KEY_PLAIN}=ok\\ *) ;;
      *) refuse "its GPU fails with Secure Boot off too: ${{plain#*=}}" ;;
    esac ;;
  *)
    # The VM was created with Secure Boot on, yet mokutil saw it off: this pass is the plain one.
    code=sb-disabled
    case $first in {KEY_PLAIN}=ok\\ *) ;; *) refuse "its GPU fails: ${{first#*=}}" ;; esac ;;
esac
{self._instance("delete", "--quiet")} >&2 || true
gcloud compute images add-labels {image} {project} --labels="{shielded.VERDICT_LABEL}=$code" >&2
echo "$code"
"""


def gpu_test_verdict(stdout: str | None) -> SecureBoot:
    """The members' Secure Boot from the GPU test step's output (its last line is the verdict code)."""
    lines = (stdout or "").strip().splitlines()
    return shielded.from_verdict(lines[-1] if lines else None)


def bake_wait_script(cfg: StackConfig, builder: Builder, *, python: str = sys.executable) -> str:
    """Follow the bake; on failure delete the builder (no spend) so that a rerun bakes afresh.

    Pulumi retries only the failed step, not the builder that succeeded, so this step re-creates
    a builder that a failed attempt deleted before it waits.
    """
    wait = wait_command(
        mode="guest-attributes",
        project=builder.project,
        zone=builder.zone,
        instance=builder.name,
        timeout_minutes=BAKE_TIMEOUT_MINUTES,
        poll_seconds=BAKE_POLL_SECONDS,
        url=None,
        python=python,
    )
    return (
        "set -u\n"
        + builder.ensure(cfg)
        + f"if {wait}; then exit 0; fi\n"
        + f"echo 'the bake did not finish: deleting the builder {builder.name}; "
        + "fix the cause above and run `pulumi up` again to bake afresh' >&2\n"
        + builder.delete()
        + "exit 1\n"
    )


# --- The component -------------------------------------------------------------------------------


@dataclass
class ToolingImageArgs:
    cfg: StackConfig
    project: pulumi.Input[str]
    """The GCP project that holds the builder and the image family."""
    deployment: str
    """The deployment's name (``qwen36-dev``): the builder's service account is named after it."""
    network: pulumi.Input[str]
    """The stack's VPC (name or self link, infra/network.py)."""
    subnetwork: pulumi.Input[str]
    """Its subnet in the stack's region, which holds the builder's zone."""
    depends_on: Sequence[pulumi.Resource] = ()
    """What must exist before the builder (the Compute API enabled, the network)."""


class ToolingImage(pulumi.ComponentResource):
    """Bakes one image into the build's family (see the module docstring for the steps)."""

    account: gcp.serviceaccount.Account
    image: gcp.compute.Image
    family: str
    family_url: pulumi.Output[str]
    """The family reference for a server boot disk; resolves only once the GPU test accepted the image."""
    secure_boot: pulumi.Output[SecureBoot]
    """The GPU test's verdict: whether the members boot with Secure Boot, and why not."""

    def __init__(self, name: str, args: ToolingImageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:ToolingImage", name, None, opts)
        cfg = args.cfg
        self.family = tooling_family(cfg.llama_cpp_build)
        script = render_bake_script(cfg)
        self.account = gcp.serviceaccount.Account(
            f"{name}-builder-sa",
            project=args.project,
            account_id=builder_account_id(args.deployment),
            display_name="qwen36-mtp-l4 tooling-image builder",
            description="The short-lived VM that bakes the tooling image; writes its logs only",
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        grants = [
            gcp.projects.IAMMember(
                f"{name}-builder-{role.split('/')[-1].replace('.', '-').lower()}",
                project=args.project,
                role=role,
                member=self.account.email.apply(lambda email: f"serviceAccount:{email}"),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for role in BUILDER_ROLES
        ]
        builder = pulumi.Output.all(args.project, args.network, args.subnetwork, self.account.email).apply(
            lambda v: Builder(builder_name(cfg), v[0], cfg.builder_zone, v[1], v[2], v[3])
        )

        self.builder = local.Command(
            f"{name}-builder",
            create=builder.apply(lambda b: "set -eu\n" + b.create(cfg)),
            delete=builder.apply(lambda b: b.delete()),
            environment={BAKE_SCRIPT_ENV: script},
            # A replacement has the same name only if nothing changed; never two at once.
            opts=pulumi.ResourceOptions(
                parent=self,
                delete_before_replace=True,
                depends_on=[*args.depends_on, self.account, *grants],
            ),
        )
        self.bake_wait = local.Command(
            f"{name}-bake-wait",
            create=builder.apply(lambda b: bake_wait_script(cfg, b)),
            dir=str(REPO_ROOT),
            update=NO_OP_UPDATE,
            environment={BAKE_SCRIPT_ENV: script, "PYTHONUNBUFFERED": "1"},
            # Every step after the builder is re-run for a new builder VM (its id is its stdout).
            triggers=[self.builder.stdout],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.builder]),
        )
        # An image taken from a running VM's disk may miss writes still in the guest's page cache,
        # and the API refuses it without forceCreate, which the provider does not expose; so the
        # builder is stopped first. https://cloud.google.com/compute/docs/images/create-custom#prepare_instance_for_image
        self.stop = local.Command(
            f"{name}-stop",
            create=builder.apply(lambda b: b.stop()),
            update=NO_OP_UPDATE,
            triggers=[self.builder.stdout],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.bake_wait]),
        )
        self.image = gcp.compute.Image(
            f"{name}-image",
            name=self.builder.stdout.apply(lambda builder_id: bake_image_name(cfg, builder_id)),
            family=self.family,
            project=args.project,
            source_disk=builder.apply(lambda b: b.disk_url()),
            description=(
                f"{cfg.image_project}/{cfg.image_family} with docker, the NVIDIA container runtime "
                f"and {server_image(cfg.llama_cpp_build)}"
            ),
            labels={"app": PROJECT, "llama-cpp-build": f"b{cfg.llama_cpp_build}"},
            guest_os_features=[
                gcp.compute.ImageGuestOsFeatureArgs(type=feature) for feature in IMAGE_GUEST_OS_FEATURES
            ],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[self.stop],
                # Old images stay in the family for the user to remove (or roll back to).
                retain_on_delete=True,
                # The GPU test adds the verdict label with gcloud (step 6).
                ignore_changes=["labels"],
                custom_timeouts=pulumi.CustomTimeouts(create=IMAGE_CREATE_TIMEOUT),
            ),
        )
        self.delete_builder = local.Command(
            f"{name}-delete-builder",
            create=builder.apply(lambda b: b.delete()),
            triggers=[self.image.id],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.image]),
        )
        test = pulumi.Output.all(
            args.project, args.network, args.subnetwork, self.account.email, self.image.name
        ).apply(lambda v: GpuTest(f"{builder_name(cfg)}-gpu", v[0], tuple(cfg.zones), v[1], v[2], v[3], v[4]))
        self.gpu_test = local.Command(
            f"{name}-gpu-test",
            create=test.apply(lambda t: t.script(cfg)),
            # Deleted with the step, never left billing: the script deletes it on every path, and this
            # catches an interrupted `pulumi up`.
            delete=test.apply(
                lambda t: (
                    f"for zone in {' '.join(shlex.quote(z) for z in cfg.zones)}; do "
                    + t._instance("delete", "--quiet")
                    + " >/dev/null 2>&1 || true; done"
                )
            ),
            interpreter=["/bin/bash", "-c"],
            update=NO_OP_UPDATE,
            environment={VERIFY_SCRIPT_ENV: render_verify_script(cfg)},
            triggers=[self.image.id],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.delete_builder]),
        )
        self.secure_boot = self.gpu_test.stdout.apply(gpu_test_verdict)
        self.secure_boot.apply(_log_verdict)
        self.family_url = pulumi.Output.all(args.project, self.gpu_test.stdout).apply(
            lambda values: family_url(values[0], self.family)
        )
        self.register_outputs(
            {
                "image_name": self.image.name,
                "family": self.family,
                "family_url": self.family_url,
                "builder_account": self.account.email,
                "secure_boot": self.secure_boot.apply(lambda d: d.on),
            }
        )


def _log_verdict(decision: SecureBoot) -> None:
    """The verdict in `pulumi up`'s output: one line."""
    if decision.on:
        pulumi.log.info("Secure Boot on: the GPU test booted the tooling image with it and found the L4")
    else:
        pulumi.log.warn(f"{decision.reason_line}; the members run the image with Secure Boot off")


# --- Which image the server boots ------------------------------------------------------------------


@dataclass(frozen=True)
class ImageChoice:
    image: pulumi.Input[str]
    """The image the group's template settles on."""
    source: Literal["tooling", "stock"]
    summary: str
    """One line for the preview and a stack output: which image, and the cold start to expect."""
    secure_boot: pulumi.Output[SecureBoot]
    """Whether its members boot with Secure Boot (the bake's verdict), and why not."""


@dataclass(frozen=True)
class FoundImage:
    """The build's family, where it holds an image, and the verdict its newest image carries."""

    url: pulumi.Output[str]
    secure_boot: SecureBoot


def find_tooling_image(cfg: StackConfig, project: str | None = None) -> FoundImage | None:
    """The build's tooling family if it holds an image, else None (the server takes the stock image).

    A missing family is the normal case for anyone who never baked one, so it is logged, never
    raised. ``project`` defaults to the provider's project.
    """
    if not cfg.use_tooling_image:
        return None
    family = tooling_family(cfg.llama_cpp_build)
    try:
        found = gcp.compute.get_image(family=family, project=project)
    except Exception as exc:  # the invoke's error type is the engine's; any failure means "no image"
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "not found" in reason.lower() or "404" in reason:
            pulumi.log.info(f"no tooling image in family {family}: {_stock_summary(cfg)}")
        else:
            pulumi.log.warn(
                f"could not look up the tooling image family {family} ({reason}): {_stock_summary(cfg)}"
            )
        return None
    if not found.name:  # an answer without an image is no image
        pulumi.log.info(f"no tooling image in family {family}: {_stock_summary(cfg)}")
        return None
    pulumi.log.info(f"tooling image {found.name} (family {family}): {_tooling_summary(family)}")
    owner = found.project or project
    # The bake's verdict is the image's label (GpuTest); an image baked before the test has none.
    secure_boot = shielded.from_verdict((found.labels or {}).get(shielded.VERDICT_LABEL))
    if not secure_boot.on:
        pulumi.log.warn(f"{secure_boot.reason_line}; the members run {found.name} with Secure Boot off")
    # Without a project the provider resolves the relative form in its own project.
    url = family_url(owner, family) if owner else f"global/images/family/{family}"
    return FoundImage(pulumi.Output.from_input(url), secure_boot)


def choose_server_image(
    cfg: StackConfig, found: FoundImage | None = None, tooling: ToolingImage | None = None
) -> ImageChoice:
    """The server's boot image: the build's family where it holds an image (``found``, from
    :func:`find_tooling_image`), else this stack's bake (the group waits for it), else stock."""
    family = tooling_family(cfg.llama_cpp_build)
    if found is not None:
        return ImageChoice(
            found.url, "tooling", _tooling_summary(family), pulumi.Output.from_input(found.secure_boot)
        )
    if tooling is not None and cfg.use_tooling_image:
        summary = (
            f"the tooling image {family} is baked first (this `pulumi up` only; `python -m "
            f"bench.first_deploy` prints the timeline), then the server boots it, as does every "
            f"repair: {COLD_START_TOOLING} cold start"
        )
        pulumi.log.info(summary)
        return ImageChoice(tooling.family_url, "tooling", summary, tooling.secure_boot)
    if not cfg.use_tooling_image:
        pulumi.log.info(f"useToolingImage is false: {_stock_summary(cfg)}")
    # The stock image's DKMS module is not signed by a key the UEFI db holds (infra/shielded.py).
    stock = pulumi.Output.from_input(shielded.STOCK)
    return ImageChoice(stock_image_url(cfg), "stock", _stock_summary(cfg), stock)


def _tooling_summary(family: str) -> str:
    return (
        f"the server boots the tooling image family {family} with docker and the llama.cpp image "
        f"already on disk: cold start {COLD_START_TOOLING} with the model in the GCS cache"
    )


def _stock_summary(cfg: StackConfig) -> str:
    hint = (
        ""
        if cfg.build_tooling_image
        else f"; buildToolingImage: true bakes {tooling_family(cfg.llama_cpp_build)}"
    )
    return (
        f"the server boots the stock image {cfg.image_project}/{cfg.image_family} and installs docker "
        f"and pulls the llama.cpp image at boot (~{DOCKER_AND_PULL_S:.0f} s): cold start {COLD_START_STOCK} "
        f"with the model in the GCS cache{hint}"
    )
