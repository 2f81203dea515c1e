"""The server's shielded-VM settings, in one place for the group's template, the bake's VMs and the
policy check (infra/policy/ ``secure_boot_on``).

vTPM and integrity monitoring are always on. Secure Boot is on where the bake proved it works: the
tooling image carries the bake's verdict as a label (``secure-boot``), and only ``on`` turns it on.

Why it has to be proven: Secure Boot loads only kernel modules signed by a key in the VM's UEFI db
or the shim's (Canonical's). The Deep Learning VM builds its NVIDIA module with DKMS, signed with a
key made on that image, which GCE's UEFI db does not hold, so under Secure Boot that module would
not load and the server would have no GPU. Google documents the way around it for Ubuntu: Canonical's
signed, precompiled modules (``linux-modules-nvidia-<branch>-server-open-<kernel>``) instead of a
DKMS build, with the user-space libraries of the same version (else nvidia-smi fails with
"Driver/library version mismatch").
https://cloud.google.com/compute/docs/gpus/install-drivers-gpu#secure-boot
https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/install-precompiled-signed-drivers.html
Canonical publishes them for the Deep Learning VM's kernel flavour, Ubuntu 22.04's gcp-6.8 kernels
(``linux-modules-nvidia-580-server-open-gcp-6.8``, source ``linux-restricted-modules-gcp-6.8``):
https://packages.ubuntu.com/jammy/linux-modules-nvidia-580-server-open-gcp-6.8
The bake (startup/bake.sh) installs them in place of the DKMS module, then boots a test VM from the
candidate image with Secure Boot on (infra/tooling_image.py, startup/verify_gpu.sh) and accepts
Secure Boot only if nvidia-smi sees the L4, ``mokutil --sb-state`` says it is enabled, ``modinfo -F
signer`` names a signer, and the pinned llama.cpp container finds the CUDA device. Anything else keeps
the image with Secure Boot off, with the reason code as the label, and the members run it as before:
never a server without a GPU (a candidate whose GPU fails with Secure Boot off too is refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

VTPM = True
INTEGRITY_MONITORING = True

# The tooling image's label with the bake's verdict, and the template's label with the reason a
# member runs with Secure Boot off (labels take [a-z0-9_-] only, so a code, explained below).
VERDICT_LABEL = "secure-boot"
OFF_LABEL = "secure-boot-off"
VERDICT_ON = "on"
# Each reason the bake (or the program) can record for Secure Boot off, in one line.
OFF_REASONS: dict[str, str] = {
    "no-gpu": "nvidia-smi on the bake's Secure Boot test VM did not see the L4 (the module did not load)",
    "unsigned": "the NVIDIA module on the candidate image has no signature (modinfo -F signer is empty)",
    "sb-disabled": "mokutil --sb-state on the bake's test VM did not report Secure Boot enabled",
    "no-cuda": "the pinned llama.cpp container found no CUDA device on the bake's Secure Boot test VM",
    "no-signed-driver": "Canonical's signed NVIDIA modules for the image's kernel could not be installed",
    "unverified": "the tooling image was baked before the bake proved Secure Boot (bake again to prove it)",
    "stock-image": "the stock Deep Learning VM's DKMS-built NVIDIA module is signed with a key GCE's UEFI db "
    "does not hold",
}


@dataclass(frozen=True)
class SecureBoot:
    """Whether the members boot with Secure Boot, and why not (a key of OFF_REASONS) when off."""

    on: bool
    reason: str = ""

    @property
    def reason_line(self) -> str:
        return "" if self.on else f"Secure Boot off: {OFF_REASONS[self.reason]} ({self.reason})"

    @property
    def labels(self) -> dict[str, str]:
        """The template's labels that record the reason (the policy rule accepts off only with one)."""
        return {} if self.on else {OFF_LABEL: self.reason}


def from_verdict(verdict: str | None) -> SecureBoot:
    """The members' setting from the bake's verdict (the image's label, or the verify step's output):
    ``on``, or a reason code; anything else (no label, a label this version does not know) is off."""
    value = (verdict or "").strip()
    if value == VERDICT_ON:
        return SecureBoot(True)
    return SecureBoot(False, value if value in OFF_REASONS else "unverified")


STOCK = SecureBoot(False, "stock-image")

ArgsT = TypeVar("ArgsT")


def shielded_instance_config(args_class: type[ArgsT], secure_boot: Any = False) -> ArgsT:
    """The ShieldedInstanceConfig for ``args_class`` (``RegionInstanceTemplateShieldedInstanceConfigArgs``
    for the group's template); ``secure_boot`` is a bool or an Output of one (the bake's verdict)."""
    values: dict[str, Any] = {
        "enable_secure_boot": secure_boot,
        "enable_vtpm": VTPM,
        "enable_integrity_monitoring": INTEGRITY_MONITORING,
    }
    return args_class(**values)
