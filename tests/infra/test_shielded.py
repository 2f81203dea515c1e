"""The shielded-VM settings builder serves both the instance and the group's template Args."""

from __future__ import annotations

import pulumi_gcp as gcp
import pytest

from infra import shielded


@pytest.mark.parametrize(
    "args_class",
    [
        gcp.compute.InstanceShieldedInstanceConfigArgs,
        gcp.compute.RegionInstanceTemplateShieldedInstanceConfigArgs,
    ],
)
def test_builder_sets_vtpm_integrity_and_the_secure_boot_decision(args_class: type) -> None:
    config = shielded.shielded_instance_config(args_class)
    assert isinstance(config, args_class)
    assert config.enable_vtpm is True and config.enable_integrity_monitoring is True
    assert config.enable_secure_boot is shielded.SECURE_BOOT


def test_secure_boot_off_carries_its_reason_and_source() -> None:
    assert shielded.SECURE_BOOT or "install-drivers-gpu#secure-boot" in shielded.SECURE_BOOT_EXCEPTION
