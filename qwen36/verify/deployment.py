"""The deployed stack as ``verify`` finds it: its outputs, read as a fresh shell reads them, its stack
file, and the second preview.

A fresh terminal has no ``PULUMI_CONFIG_PASSPHRASE`` and no ``PULUMI_BACKEND_URL``: what must work
there is Pulumi.yaml's ``backend.url`` and a ``gcpkms://`` secrets provider opened with Google's
application-default credentials (https://www.pulumi.com/docs/iac/concepts/secrets/#available-encryption-providers).
So the first look runs the CLI with only the variables a login shell has and the two that locate
ADC (``GOOGLE_APPLICATION_CREDENTIALS``, ``CLOUDSDK_CONFIG``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.config import GCP_PROJECT_KEY, PROJECT, StackConfig, parse_config, stack_file_keys
from infra.model_cache import VERDICT_SUFFIX
from qwen36.errors import ConfigFileError, NotFoundError
from qwen36.pulumi_cli import last_line, pulumi_run
from qwen36.verify.checks import PREVIEW, STACK, Check, fail, ok

# What a new login shell has (and PULUMI_HOME, which a profile may set): no Pulumi secret, no
# backend override. GOOGLE_APPLICATION_CREDENTIALS and CLOUDSDK_CONFIG say where ADC is.
FRESH_SHELL_VARIABLES = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TMPDIR",
    "PULUMI_HOME", "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG",
)  # fmt: skip
# A preview runs the program and reads every resource: minutes on a real project.
PREVIEW_TIMEOUT_S = 900.0
# pulumi/pulumi pkg/cmd/pulumi/preview.go: with --expect-no-changes a preview that proposes changes
# ends with "error: no changes were expected but changes were proposed" (newer CLIs name the
# operation: "no changes were expected for ... but changes were proposed").
NO_CHANGES_EXPECTED = re.compile(r"no changes were expected( for \S+)? but changes were proposed")
# A step row of the preview's table: its symbol, type, name and operation.
_STEP_ROW = re.compile(r"^\s*(\+-|-\+|[+~-])\s+(\S+:\S+)\s+(\S+)\s+(create|update|delete|replace)\b.*$")
API_KEY_ENV = "QWEN36_API_KEY"
INSTALL = "install it (https://www.pulumi.com/docs/iac/download-install/)"


@dataclass(frozen=True)
class Deployment:
    stack: str
    project: str
    region: str
    group: str
    bucket: str
    verdict_object: str
    door_url: str | None
    """The front door's origin (no trailing slash); None with ``door: false``."""
    api_key: str | None
    cfg: StackConfig
    secrets: str
    """The stack's secrets provider as its stack file names it (``gcpkms://...``, ``passphrase``)."""


def fresh_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    source = os.environ if environ is None else environ
    return {name: source[name] for name in FRESH_SHELL_VARIABLES if name in source}


def _outputs_command(stack: str) -> list[str]:
    return ["stack", "output", "--json", "--show-secrets", "--stack", stack]


def read_outputs(stack: str, project_dir: Path) -> tuple[dict[str, Any], Check]:
    """The stack's outputs, and the ``stack`` check: did a fresh shell read them?"""
    shown = f"pulumi stack output --json --show-secrets --stack {stack}"
    fresh = pulumi_run(
        _outputs_command(stack), shown=shown, env=fresh_environment(), cwd=project_dir, missing_fix=INSTALL
    )
    outputs = _json_outputs(fresh.stdout) if fresh.returncode == 0 else None
    if outputs is not None:
        return outputs, ok(
            STACK, f"a fresh shell (ADC only, no PULUMI_* secrets) read stack {stack}'s outputs"
        )
    saw = f"`{shown}` with ADC alone failed ({last_line(fresh)})"
    # This shell may still reach it (a passphrase in the environment): the other checks go on.
    done = pulumi_run(_outputs_command(stack), shown=shown, cwd=project_dir, missing_fix=INSTALL)
    outputs = _json_outputs(done.stdout) if done.returncode == 0 else None
    if outputs is None:
        raise NotFoundError(
            f"`{shown}` failed ({last_line(done)}); check the stack name (`pulumi stack ls`) and run "
            "verify from the project folder (or pass --project-dir)"
        )
    return outputs, fail(
        STACK,
        saw + "; this shell's environment reads it",
        "a new terminal must open the stack by itself: keep Pulumi.yaml's backend.url and move the "
        "secrets to KMS (`pulumi stack change-secrets-provider gcpkms://...`, as scripts/deploy.sh does)",
    )


def _json_outputs(stdout: str) -> dict[str, Any] | None:
    try:
        outputs = json.loads(stdout or "{}")
    except json.JSONDecodeError:
        return None
    return outputs if isinstance(outputs, dict) else None


def stack_file(stack: str, project_dir: Path) -> dict[str, Any]:
    import yaml

    path = project_dir / f"Pulumi.{stack}.yaml"
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise NotFoundError(
            f"no {path.name} in {project_dir}; run verify from the project folder or pass --project-dir"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{path.name} is not YAML ({str(exc).splitlines()[0]}); fix the file") from None
    return document if isinstance(document, dict) else {}


def deployment(stack: str, project_dir: Path, outputs: dict[str, Any]) -> Deployment:
    document = stack_file(stack, project_dir)
    raw = _mapping(document.get("config"))
    # A short key is in the project's namespace (https://www.pulumi.com/docs/iac/concepts/config/).
    full = {key if ":" in str(key) else f"{PROJECT}:{key}": value for key, value in raw.items()}
    cfg = parse_config(full, stack_keys=stack_file_keys(stack, project_dir))
    autostop = _mapping(outputs.get("autostop"))
    project = str(autostop.get("project") or full.get(GCP_PROJECT_KEY) or "").strip()
    missing = [k for k in ("region", "groupName", "modelBucket", "modelGcsUri") if not outputs.get(k)]
    if missing or not project:
        what = ", ".join(missing) or f"a project ({GCP_PROJECT_KEY})"
        raise NotFoundError(f"stack {stack} has no {what}; run `pulumi up` first")
    uri = str(outputs["modelGcsUri"])
    bucket = str(outputs["modelBucket"])
    model_object = uri.removeprefix(f"gs://{bucket}/")
    api_base = str(outputs.get("apiBaseUrl") or "")
    door_url = api_base.removesuffix("/v1").rstrip("/") if cfg.front_door and api_base else None
    if "secretsprovider" in document:
        secrets = str(document["secretsprovider"])
    else:
        secrets = "passphrase" if "encryptionsalt" in document else "the backend's default"
    return Deployment(
        stack=stack,
        project=project,
        region=str(outputs["region"]),
        group=str(outputs["groupName"]),
        bucket=bucket,
        verdict_object=model_object + VERDICT_SUFFIX,
        door_url=door_url,
        api_key=os.environ.get(API_KEY_ENV) or outputs.get("apiKey") or None,
        cfg=cfg,
        secrets=secrets.split("?")[0],
    )


def _mapping(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def second_preview(stack: str, project_dir: Path) -> Check:
    """``pulumi preview --expect-no-changes``: a deployed stack previews no change (its exit code)."""
    shown = f"pulumi preview --expect-no-changes --stack {stack}"
    done = pulumi_run(
        ["preview", "--expect-no-changes", "--non-interactive", "--stack", stack],
        shown=shown,
        timeout_s=PREVIEW_TIMEOUT_S,
        cwd=project_dir,
        missing_fix=INSTALL,
    )
    if done.returncode == 0:
        return ok(PREVIEW, f"`{shown}` proposes no change (exit 0)", exit_code=0)
    steps = [f"{m[4]} {m[3]} ({m[2]})" for line in done.stdout.splitlines() if (m := _STEP_ROW.match(line))]
    if NO_CHANGES_EXPECTED.search(done.stdout + done.stderr):
        shown_steps = "; ".join(steps[:4]) + (f" (+{len(steps) - 4} more)" if len(steps) > 4 else "")
        return fail(
            PREVIEW,
            f"a second preview proposes changes (exit {done.returncode}): "
            + (shown_steps or "see `pulumi preview --diff`"),
            f"`pulumi preview --diff --stack {stack}` shows each input that differs; an input the API "
            "echoes in another form (a self link for a name) needs the form the API returns",
            exit_code=done.returncode,
            steps=steps,
        )
    return fail(
        PREVIEW,
        f"`{shown}` failed (exit {done.returncode}: {last_line(done)})",
        "run it by hand and read its error",
        exit_code=done.returncode,
        steps=steps,
    )
