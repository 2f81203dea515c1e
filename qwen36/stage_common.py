"""What the stage command's two halves share: the error, the target, the exit codes.

``qwen36/stage.py`` (the command: config, hub, local file) imports ``qwen36/stage_gcs.py`` (the
bucket and the resumable upload); both import this module and nothing of each other's, so the
imports flow one way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from qwen36.errors import Exit, QwenError

# The content is not the model the stack pins (a wrong sha256 or size, a bad upload).
EXIT_VERIFY = Exit.VERIFY
EXIT_INTERRUPTED = Exit.INTERRUPTED

# (bytes done, bytes total)
ProgressCallback = Callable[[int, int], None]
Say = Callable[[str], None]

BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 30.0


class StageError(QwenError):
    """A one-line reason the model was not staged, with the exit code the command returns for it."""


@dataclass(frozen=True)
class Target:
    bucket: str
    name: str

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.name}"


def backoff_s(attempt: int) -> float:
    """Doubling pause before retry ``attempt`` (1-based), capped."""
    return float(min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempt - 1)))
