"""The server's shielded-VM settings, in one place for the instance (or the group's template) and
the policy check (infra/policy/ ``secure_boot_on``).

vTPM and integrity monitoring are always on. Secure boot is the documented exception: off.

Why: secure boot loads only kernel modules signed by a key in the VM's UEFI db or the shim's
(Canonical's). The Deep Learning VM image builds its NVIDIA module with DKMS, signed with a key
made on that image, which GCE's default UEFI db does not hold, so the module would not load and
the server would have no GPU. Google documents this and the way around it for Ubuntu: install
Canonical's signed, precompiled modules (``linux-modules-nvidia-<branch>-server-open-<kernel>``,
or the ``-gcp`` flavour meta package) instead of a DKMS build.
https://cloud.google.com/compute/docs/gpus/install-drivers-gpu#secure-boot
https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/install-precompiled-signed-drivers.html
That swap replaces the image's driver under its own user-space libraries (whose version must
match the module's exactly, or nvidia-smi fails with "Driver/library version mismatch"), and
has not been run on a GCE L4 here; a mistake would leave every boot without a GPU. Until it has
been, secure boot stays off, and this exception is what the policy rule accepts.
"""

from __future__ import annotations

from typing import Any, TypeVar

SECURE_BOOT = False
SECURE_BOOT_EXCEPTION = (
    "the Deep Learning VM's NVIDIA module is a DKMS build signed with a key the VM's UEFI db does "
    "not hold; Canonical's signed precompiled modules are the documented way around it and are "
    "not yet verified on a GCE L4 (https://cloud.google.com/compute/docs/gpus/install-drivers-gpu#secure-boot)"
)
VTPM = True
INTEGRITY_MONITORING = True

ArgsT = TypeVar("ArgsT")


def shielded_instance_config(args_class: type[ArgsT]) -> ArgsT:
    """The ShieldedInstanceConfig for ``args_class``: ``gcp.compute.InstanceShieldedInstanceConfigArgs``
    for an instance, ``RegionInstanceTemplateShieldedInstanceConfigArgs`` for a group's template."""
    values: dict[str, Any] = {
        "enable_secure_boot": SECURE_BOOT,
        "enable_vtpm": VTPM,
        "enable_integrity_monitoring": INTEGRITY_MONITORING,
    }
    return args_class(**values)
