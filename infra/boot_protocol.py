"""What the boot script reports and where: shared by the script's renderer and the health gate.

The VM writes its progress to guest attributes, which the deployer reads through the Compute API
without any network path to the VM. https://cloud.google.com/compute/docs/metadata/manage-guest-attributes
"""

from __future__ import annotations

NAMESPACE = "qwen36"
KEY_PHASE = "phase"
KEY_DETAIL = "detail"
KEY_TIME = "time"

# Phases in the order a boot goes through them. "ready" and "failed" end a boot; a boot that could
# not turn ECC off reports "ready" with the degraded context in its detail, so the gate passes.
PHASES = ("boot", "driver", "ecc", "prepare", "model", "api-key", "server", "ready")
PHASE_READY = "ready"
PHASE_FAILED = "failed"
