"""The bake's verdict through the program under mocks (the GPU test's output on a first deployment, the
image's label later): the template's Secure Boot setting, its recorded reason, and the outputs."""

from __future__ import annotations

from typing import Any

import pytest
from policy_cases import check_settled, context
from program_mocks import Deployment, deploy

from infra import policy, shielded


def _template(d: Deployment) -> dict[str, Any]:
    return dict(d.one(policy.TEMPLATE).inputs)


@pytest.mark.parametrize("verdict", ["on", "no-gpu", "unsigned", None])
@pytest.mark.parametrize("baking", [True, False])
def test_the_template_follows_the_verdict(verdict: str | None, baking: bool) -> None:
    d = deploy("dev", tooling_image=not baking, secure_boot_verdict=verdict)
    template = _template(d)
    decision = shielded.from_verdict(verdict)
    assert template["shieldedInstanceConfig"]["enableSecureBoot"] is decision.on
    assert template["labels"].get(shielded.OFF_LABEL) == (None if decision.on else decision.reason)
    assert d.outputs["secureBoot"] is decision.on
    assert d.outputs["secureBootNote"] == (decision.reason_line or "Secure Boot on")
    assert check_settled(d.resources, context(d, {})) == []


def test_the_stock_image_runs_with_secure_boot_off_and_its_reason() -> None:
    d = deploy("dev", {"useToolingImage": False})
    template = _template(d)
    assert template["shieldedInstanceConfig"]["enableSecureBoot"] is False
    assert template["labels"][shielded.OFF_LABEL] == "stock-image"
