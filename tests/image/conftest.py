"""The boot script's sandbox fixtures, so the bake script runs on the same simulated VM."""

from tests.boot.conftest import gcs, hub, make_sandbox, model  # noqa: F401
