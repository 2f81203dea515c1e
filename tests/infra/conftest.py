"""Fixtures for the Pulumi program's tests; the mocks themselves live in program_mocks.py."""

from __future__ import annotations

import pytest
from program_mocks import STACKS, Deployment, deploy


@pytest.fixture(scope="session", params=STACKS)
def stack(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def deployed(stack: str) -> Deployment:
    """One run per stack file, shared: tests only read it (rule tests edit copies)."""
    return deploy(stack)
