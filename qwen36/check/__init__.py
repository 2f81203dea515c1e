"""``qwen36 check [--stack S]``: what would stop the deploy, in seconds, before it starts.

One line per fact (``ok``, ``warn`` or ``BLOCK``), each problem with its fix: the application-default
credentials and the project; the APIs the deploy calls; billing; the GPU quotas that apply
(``GPUS_ALL_REGIONS`` and the region's spot or on-demand L4 quota) against the stack's servers; L4 in
each configured zone; the tooling-image family; the organization policies that can refuse what the
program creates; and the caller's permissions for it (``infra/required_permissions.py``). It changes
nothing. Exit 0 when nothing blocks (warnings included), 1 on a blocker, 12 when it found no blocker
but could not read every fact (``UNREAD`` lines: never a pass), 9 when the Pulumi CLI is missing or too
old, 8 when there is no such stack file. ``scripts/deploy.sh`` runs it first and stops on anything
but 0, unless told ``--skip-check``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from qwen36.check.report import Fact, block, ok, summary
from qwen36.errors import ConfigFileError, Exit, LocalIOError, NotFoundError

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
DEFAULT_STACK = "dev"  # scripts/deploy.sh's default
ADC_LOGIN = "gcloud auth application-default login"
# The token's own bound (google-auth's requests transport waits 120 s by default).
TOKEN_TIMEOUT_S = 10.0
# Pulumi's rule for a stack name (https://www.pulumi.com/docs/iac/concepts/stacks/#create-stack), as
# scripts/deploy.sh checks it: the name becomes a file name here.
STACK_NAME = re.compile(r"[A-Za-z0-9._-]+")


def stack_name(text: str) -> str:
    if not STACK_NAME.fullmatch(text) or text in (".", ".."):
        raise argparse.ArgumentTypeError(f"{text!r} is not a stack name (letters, digits, '-', '_', '.')")
    return text


def project_id(text: str) -> str:
    from qwen36.group import project_problem

    problem = project_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "check",
        help="say what would stop the deploy (quotas, org policies, permissions...) before it starts",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument(
        "--stack",
        type=stack_name,
        default=DEFAULT_STACK,
        help=f"the stack to check (default {DEFAULT_STACK})",
    )
    parser.add_argument(
        "--project", type=project_id, help="the project (default: the stack's gcp:project, else gcloud's)"
    )
    parser.add_argument("--project-dir", type=Path, default=Path.cwd(), help="where Pulumi.yaml lives")
    parser.add_argument("--api-root", help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def yaml_error() -> type[Exception]:
    import yaml

    return yaml.YAMLError


def read_stack_file(path: Path) -> dict[str, Any]:
    from qwen36.stack_file import read_config

    return read_config(path)


def credentials() -> tuple[Any, str | None, Fact]:
    """The application-default credentials with a fresh token, their project, and the fact."""
    import google.auth
    from google.auth import exceptions
    from google.auth.transport.requests import Request

    try:
        creds, project = google.auth.default(scopes=[CLOUD_PLATFORM])
    except exceptions.DefaultCredentialsError as exc:
        reason = str(exc).strip().splitlines()[0][:200]
        return None, None, block("credentials", f"no application-default credentials ({reason})", ADC_LOGIN)

    class BoundedRequest(Request):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            kwargs["timeout"] = min(float(kwargs.get("timeout") or TOKEN_TIMEOUT_S), TOKEN_TIMEOUT_S)
            return super().__call__(*args, **kwargs)

    try:
        creds.refresh(BoundedRequest())
    except exceptions.RefreshError as exc:
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        return None, None, block("credentials", f"they cannot get a token ({reason})", ADC_LOGIN)
    except exceptions.TransportError as exc:
        reason = str(exc).strip().splitlines()[0][:200]
        return (
            None,
            None,
            block(
                "credentials",
                f"Google's token endpoint did not answer ({reason})",
                "check this machine's network",
            ),
        )
    return creds, project, ok("credentials", describe(creds))


def describe(creds: Any) -> str:
    email = getattr(creds, "service_account_email", None)
    if email:
        what = f"service account {email}"
    else:
        account = getattr(creds, "account", "") or ""
        what = f"user account {account}".strip() + f" (from `{ADC_LOGIN}`)"
    quota = getattr(creds, "quota_project_id", None)
    return what + (f"; quota project {quota}" if quota else "")


def caller(creds: Any) -> str:
    """The IAM member of the caller, for the command that lists its roles."""
    email = getattr(creds, "service_account_email", None)
    if email:
        return f"serviceAccount:{email}"
    account = getattr(creds, "account", "") or ""
    return f"user:{account}" if account else "user:YOUR_EMAIL"


def run(args: argparse.Namespace) -> int:
    from infra.config import GCP_PROJECT_KEY, PROJECT, ConfigError, parse_config

    stack_file = args.project_dir / f"Pulumi.{args.stack}.yaml"
    try:
        raw = read_stack_file(stack_file)
    except FileNotFoundError:
        known = sorted(
            p.name.removeprefix("Pulumi.").removesuffix(".yaml")
            for p in args.project_dir.glob("Pulumi.*.yaml")
        )
        raise NotFoundError(
            f"no {stack_file.name} in {args.project_dir}; stacks: {', '.join(known) or 'none'} "
            "(--stack names one, --project-dir the folder of Pulumi.yaml)"
        ) from None
    except OSError as exc:
        raise LocalIOError(f"cannot read {stack_file}: {exc.strerror or exc}") from None
    except (ValueError, yaml_error()) as exc:
        raise ConfigFileError(f"{stack_file.name} is not YAML ({exc}); fix or recreate it") from None

    facts: list[Fact] = []

    def emit(fact: Fact) -> None:
        facts.append(fact)
        print(fact.line(), flush=True)

    tool_missing = False

    def finish() -> int:
        line, code = summary(facts)
        print(line, flush=True)
        # A missing or old Pulumi CLI is its own cause, whatever else was found.
        return int(Exit.MISSING_TOOL) if tool_missing else code

    from qwen36.check import pulumi_version

    print(f"check: stack {args.stack} ({stack_file.name})", flush=True)
    fact, tool_missing = pulumi_version.check()
    emit(fact)
    try:
        cfg = parse_config({k: v for k, v in raw.items() if k.startswith(f"{PROJECT}:")})
    except ConfigError as exc:
        emit(block("config", str(exc), f"edit {stack_file.name}"))
        return finish()

    creds, adc_project, fact = credentials()
    emit(fact)
    if creds is None:
        return finish()

    stack_project = str(raw.get(GCP_PROJECT_KEY) or "").strip()
    project, source = next(
        (
            (value, where)
            for value, where in (
                (args.project, "--project"),
                (stack_project, f"{GCP_PROJECT_KEY} in {stack_file.name}"),
                (adc_project, "gcloud's configured project; scripts/deploy.sh sets it as gcp:project"),
            )
            if value
        ),
        ("", ""),
    )
    from qwen36.group import project_problem

    if project and project_problem(project):
        emit(
            block(
                "project",
                f"{project_problem(project)}, from {source}",
                f"pulumi config set {GCP_PROJECT_KEY} <id> -s {args.stack}",
            )
        )
        return finish()
    if not project:
        emit(
            block(
                "project",
                f"none: {stack_file.name} has no {GCP_PROJECT_KEY} and gcloud has no project configured",
                f"gcloud config set project <id>, or "
                f"pulumi config set {GCP_PROJECT_KEY} <id> -s {args.stack}",
            )
        )
        return finish()

    from qwen36.check.gcp import Apis
    from qwen36.check.plan import Plan
    from qwen36.check.probes import check

    plan = Plan(stack=args.stack, project=project, cfg=cfg)
    emit(ok("project", f"{project} ({source}): {plan.describe()}"))
    for fact in check(
        plan, Apis(creds, args.api_root, say=lambda line: print(line, flush=True)), caller=caller(creds)
    ):
        emit(fact)
    return finish()
