"""``python -m door``: the door on ``$PORT`` (Cloud Run sets it: the container contract,
https://cloud.google.com/run/docs/container-contract#port), settings from the environment."""

from __future__ import annotations

import logging
import os
import sys

import uvicorn

from door.app import Door
from door.config import ConfigError, from_env

# Cloud Run sends SIGTERM and kills the instance 10 s later
# (https://cloud.google.com/run/docs/container-contract#instance-shutdown): streams in flight get 7 s
# to end, then the last metrics window is sent.
GRACEFUL_SHUTDOWN_S = 7


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stdout)
    try:
        settings = from_env()
    except (ConfigError, OSError) as exc:
        print(f"qwen36 door: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(
        Door(settings),
        # The container contract asks for every interface; tests set 127.0.0.1.
        host=os.environ.get("QWEN36_DOOR_HOST", "0.0.0.0"),  # noqa: S104
        port=int(os.environ.get("PORT", "8080")),
        http="h11",
        loop="asyncio",
        ws="none",
        lifespan="on",
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        # Cloud Run's front end holds the client side; 75 s is longer than its own upstream keep-alive.
        timeout_keep_alive=75,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
