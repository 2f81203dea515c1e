"""A fleet stack under the project's Pulumi mocks: the real ``__main__.py`` with fleet config keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.infra.program_mocks import Deployment, deploy


def deploy_fleet(overrides: Mapping[str, Any]) -> Deployment:
    """The dev stack with ``overrides`` (short keys), e.g. ``{"replicas": 3, "sourceRanges": [...]}``."""
    return deploy("dev", overrides)
