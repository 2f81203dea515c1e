"""The first deployment's timeline with and without the tooling-image bake, from the phase table.

    .venv/bin/python -m bench.first_deploy [--vm-create-s 40] [--image-create-s 300]

The boot phases are the boot bench's (tests/boot/durations.py, with their sources; the critical
paths of bench/boot_bench.py). The control-plane steps have no documented duration, so they are
named and settable: ``--vm-create-s`` (a group's VM from its creation to the boot script's start)
and ``--image-create-s`` (an image from the builder's 60 GB disk). Prints, per way of deploying, when
the endpoint first serves, when ``pulumi up`` returns, the outage the move onto the baked image costs,
and what each later repair costs. Figures, not a test: a live deployment is the real measure.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from bench.boot_bench import BootPath
from infra.cold_start import IMAGE_CREATE_S, VM_CREATE_S
from tests.boot.durations import Durations

# A builder's bake is the server's docker install and pull (the original's ~170 s), on a VM that
# takes as long to create; stopping it waits for a clean guest shutdown (assumed, like the creates).
BUILDER_STOP_S = 30.0
# RECREATE deletes the old member before it creates the new one (maxSurge 0): assumed.
MEMBER_DELETE_S = 30.0

STOCK = BootPath("new VM, stock image")
BAKED_NEW_HOST = BootPath("new VM, baked image", baked=True)


@dataclass(frozen=True)
class Timeline:
    name: str
    serving_s: float
    up_returns_s: float
    outage_s: float
    repair_s: float


def boot_s(path: BootPath, d: Durations) -> float:
    return sum(seconds for _, seconds in path.critical(d, ours=True))


def timelines(d: Durations, vm_create_s: float, image_create_s: float) -> list[Timeline]:
    stock = vm_create_s + boot_s(STOCK, d)
    baked = vm_create_s + boot_s(BAKED_NEW_HOST, d)
    bake_done = vm_create_s + d.apt_docker + d.pull + BUILDER_STOP_S + image_create_s
    move = MEMBER_DELETE_S + baked
    moved_at = max(stock, bake_done) + move
    blocked = bake_done + baked
    return [
        Timeline("no bake (buildToolingImage: false)", stock, stock, 0.0, stock),
        Timeline("bake beside the first server (the earlier default)", stock, moved_at, move, baked),
        Timeline("bake before the server (the default)", blocked, blocked, 0.0, baked),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--vm-create-s", type=float, default=VM_CREATE_S, help="a VM from creation to its boot script"
    )
    parser.add_argument(
        "--image-create-s", type=float, default=IMAGE_CREATE_S, help="an image from a 60 GB disk"
    )
    args = parser.parse_args(argv)
    d = Durations()
    print(
        f"First deployment of a llama.cpp build, seconds from the group's creation (boot phases: "
        f"tests/boot/durations.py; VM create {args.vm_create_s:.0f} s and image create "
        f"{args.image_create_s:.0f} s assumed)\n"
    )
    print("| way | endpoint first serves | `pulumi up` returns | outage of the move | each later repair |")
    print("|---|---|---|---|---|")
    for t in timelines(d, args.vm_create_s, args.image_create_s):
        seconds = (t.serving_s, t.up_returns_s, t.outage_s, t.repair_s)
        print(f"| {t.name} | " + " | ".join(f"{s:.0f} s" for s in seconds) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
