"""The shielded-VM settings: vTPM and integrity monitoring always, Secure Boot from the bake's verdict."""

from __future__ import annotations

import pulumi_gcp as gcp
import pytest

from infra import shielded


@pytest.mark.parametrize("secure_boot", [True, False])
def test_builder_sets_vtpm_integrity_and_the_secure_boot_decision(secure_boot: bool) -> None:
    args_class = gcp.compute.RegionInstanceTemplateShieldedInstanceConfigArgs
    config = shielded.shielded_instance_config(args_class, secure_boot)
    assert isinstance(config, args_class)
    assert config.enable_vtpm is True and config.enable_integrity_monitoring is True
    assert config.enable_secure_boot is secure_boot


def test_every_reason_is_one_line_with_a_label_safe_code() -> None:
    import re

    for code, reason in shielded.OFF_REASONS.items():
        assert re.fullmatch(r"[a-z][a-z0-9-]{0,62}", code), code
        assert reason and "\n" not in reason
        decision = shielded.SecureBoot(False, code)
        assert decision.labels == {shielded.OFF_LABEL: code}
        assert decision.reason_line == f"Secure Boot off: {reason} ({code})"


def test_the_stock_image_is_off_with_its_reason() -> None:
    assert shielded.SecureBoot(False, "stock-image") == shielded.STOCK
    assert "DKMS" in shielded.STOCK.reason_line


def test_the_policy_label_is_the_one_the_template_carries() -> None:
    from infra.policy.compute import SECURE_BOOT_OFF_LABEL

    assert SECURE_BOOT_OFF_LABEL == shielded.OFF_LABEL
