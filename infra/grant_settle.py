"""A bounded wait, inside ``pulumi up``, for new IAM grants to take effect before a resource that
Cloud Run checks them for is created.

IAM is eventually consistent: a policy change "typically propagate[s] in 2 minutes, but could
potentially take 7 minutes or longer" (https://cloud.google.com/iam/docs/access-change-propagation).
Cloud Run checks what a revision needs when it creates it, and the provider neither retries a failed
create nor keeps it (magic-modules ``mmv1/products/cloudrunv2/Service.yaml``: an ``OpAsync`` create,
no ``error_retry_predicates``, ``taint_resource_on_failed_create``; the first-apply failures of
terraform-provider-google #16350, #13786 and #17245). Nothing on the deployer's side can see when a
grant has reached the service that checks it (the grant is visible in the policy at once), so the
wait is a fixed bound: ``SETTLE_S``, the 7 minutes IAM names as its long case.

It is a ``command:local:Command`` whose triggers are the grants' ids: it runs when they are created
(or replaced: a trigger's change replaces the command) and never again on an unchanged ``up``
(https://www.pulumi.com/registry/packages/command/api-docs/local/command/). It runs beside
everything that does not depend on it (on a first deployment, the tooling image's bake, ~8 min, and
the group's boot), so it costs wall time only when the door is the last thing left. One progress
line says what it waits for and for how long. ``python -m infra.grant_settle --seconds S --what
TEXT`` is what the command runs.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pulumi
from pulumi_command import local

SETTLE_S = 420
REPO_ROOT = Path(__file__).resolve().parent.parent


def progress_line(what: str, seconds: float) -> str:
    return (
        f"settle: waiting {seconds:.0f} s for {what} to take effect before Cloud Run checks them "
        "(IAM: typically 2 min, 7 min or longer at times); only when the grants are new"
    )


def settle(
    what: str,
    seconds: float,
    *,
    emit: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    emit(progress_line(what, seconds))
    sleep(seconds)
    emit(f"settle: {what}: {seconds:.0f} s passed")


def command(what: str, seconds: float = SETTLE_S, python: str = sys.executable) -> str:
    return shlex.join([python, "-m", "infra.grant_settle", "--seconds", f"{seconds:g}", "--what", what])


def settle_step(
    name: str,
    *,
    grants: Sequence[pulumi.CustomResource],
    what: str,
    seconds: float = SETTLE_S,
    opts: pulumi.ResourceOptions | None = None,
) -> pulumi.Resource:
    """The local command that waits ``seconds`` once the ``grants`` exist; run again only when one
    of them is new (its id, a trigger, changes). Any other change (the command line names this
    machine's interpreter) is an update, which waits for nothing: the grants are not new."""
    return local.Command(
        name,
        create=command(what, seconds),
        update="true",
        dir=str(REPO_ROOT),
        environment={"PYTHONUNBUFFERED": "1"},
        triggers=[grant.id for grant in grants],
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(grants))),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.grant_settle", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--what", required=True)
    args = parser.parse_args(argv)
    settle(args.what, args.seconds, emit=lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
