"""A stand-in for the Pulumi CLI's state handling: which backend and stack a command reaches, and
whether it can open the stack's secrets. It records every call (argv, cwd, backend, stack) as a JSON
line in ``$PULUMI_STUB_LOG``. Only what scripts/deploy.sh and the README's later commands use.

Each behaviour follows Pulumi's documentation, not our wishes:
- The backend: ``PULUMI_BACKEND_URL`` if set, else the project file's ``backend.url``, else the
  stored login (``~/.pulumi/credentials.json``), else none: "no backend" is an error here (the real
  CLI would prompt to log in to Pulumi Cloud).
  https://www.pulumi.com/docs/iac/concepts/state-and-backends/#using-a-self-managed-backend
  https://www.pulumi.com/docs/iac/concepts/projects/project-file/#backend-options
- ``file://~`` is the home directory. https://www.pulumi.com/docs/iac/cli/commands/pulumi_login/
- A self-managed backend keeps stacks under ``<backend>/.pulumi/stacks/<project>/<stack>.json``;
  the selected stack is per project and backend, in ``~/.pulumi/workspaces``.
- Secrets: a passphrase stack (``encryptionsalt`` in its stack file) needs ``PULUMI_CONFIG_PASSPHRASE``
  or ``PULUMI_CONFIG_PASSPHRASE_FILE`` in every command that reads or writes a secret; a ``gcpkms://``
  stack needs Google application-default credentials instead.
  https://www.pulumi.com/docs/iac/concepts/secrets/#changing-the-secrets-provider-for-a-stack
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import yaml


class StubError(Exception):
    pass


def project_root(start: Path) -> Path:
    for folder in (start, *start.parents):
        if (folder / "Pulumi.yaml").exists():
            return folder
    raise StubError("no Pulumi.yaml found in this folder or above")


def backend_url(root: Path) -> str:
    if os.environ.get("PULUMI_BACKEND_URL"):
        return os.environ["PULUMI_BACKEND_URL"]
    project = yaml.safe_load((root / "Pulumi.yaml").read_text())
    url = (project.get("backend") or {}).get("url")
    if url:
        return str(url)
    creds = Path.home() / ".pulumi" / "credentials.json"
    if creds.exists():
        return str(json.loads(creds.read_text())["current"])
    raise StubError("no backend: run pulumi login (Pulumi Cloud would be asked for an account)")


def backend_dir(url: str) -> Path:
    if not url.startswith("file://"):
        raise StubError(f"this stand-in knows only file:// backends, not {url}")
    path = url.removeprefix("file://")
    if path == "~" or path.startswith("~/"):
        path = str(Path.home()) + path[1:]
    return Path(path)


def workspace_file(root: Path, url: str) -> Path:
    key = hashlib.sha256(f"{root}\n{url}".encode()).hexdigest()[:16]
    return Path.home() / ".pulumi" / "workspaces" / f"{key}-workspace.json"


def stack_file(root: Path, stack: str) -> Path:
    return root / f"Pulumi.{stack}.yaml"


def read_stack_config(root: Path, stack: str) -> dict:
    path = stack_file(root, stack)
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def write_stack_config(root: Path, stack: str, data: dict) -> None:
    stack_file(root, stack).write_text(yaml.safe_dump(data, sort_keys=False))


def open_secrets(config: dict) -> str:
    """Which provider opened the stack's secrets; raises where Pulumi would fail."""
    provider = str(config.get("secretsprovider") or "")
    if provider.startswith("gcpkms://"):
        adc = Path.home() / ".config" / "gcloud" / "application_default_credentials.json"
        if not (os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or adc.exists()):
            raise StubError("gcpkms: no application default credentials")
        return "gcpkms"
    if "encryptionsalt" in config or not provider or provider == "passphrase":
        env = os.environ
        if not (env.get("PULUMI_CONFIG_PASSPHRASE") or env.get("PULUMI_CONFIG_PASSPHRASE_FILE")):
            raise StubError(
                "passphrase must be set with PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE "
                "environment variables"
            )
        return "passphrase"
    raise StubError(f"unknown secrets provider {provider}")


# What `pulumi version` prints: the version alone on one line, e.g. "v3.210.0"
# (https://www.pulumi.com/docs/iac/cli/commands/pulumi_version/). A test sets another.
DEFAULT_VERSION = "v3.210.0"


def main(argv: list[str]) -> int:
    if argv == ["version"]:
        print(os.environ.get("PULUMI_STUB_VERSION", DEFAULT_VERSION))
        return 0
    root = project_root(Path.cwd())
    project = yaml.safe_load((root / "Pulumi.yaml").read_text())["name"]
    record: dict = {"argv": argv, "cwd": str(Path.cwd())}
    try:
        url = backend_url(root)
        record["backend"] = url
        stacks = backend_dir(url) / ".pulumi" / "stacks" / project
        workspace = workspace_file(root, url)
        selected = json.loads(workspace.read_text())["stack"] if workspace.exists() else None
        args = list(argv)
        stack = selected
        if "-s" in args:
            i = args.index("-s")
            stack = args[i + 1]
            del args[i : i + 2]
        record["stack"] = stack
        verb = args[:2]
        if verb == ["stack", "select"]:
            name = args[2]
            if not (stacks / f"{name}.json").exists():
                raise StubError(f"no stack named '{name}' found")
            workspace.parent.mkdir(parents=True, exist_ok=True)
            workspace.write_text(json.dumps({"stack": name}))
            record["stack"] = name
        elif verb == ["stack", "init"]:
            name = args[2]
            provider = next((a.split("=", 1)[1] for a in args if a.startswith("--secrets-provider=")), "")
            stacks.mkdir(parents=True, exist_ok=True)
            (stacks / f"{name}.json").write_text("{}")
            config = read_stack_config(root, name)
            if provider.startswith("gcpkms://"):
                config = {"secretsprovider": provider, "encryptedkey": "c3R1Yg==", **config}
            else:
                open_secrets({})  # a passphrase stack needs its passphrase from the start
                config = {"encryptionsalt": "v1:stub", **config}
            write_stack_config(root, name, config)
            workspace.parent.mkdir(parents=True, exist_ok=True)
            workspace.write_text(json.dumps({"stack": name}))
            record["stack"] = name
        else:
            if stack is None or not (stacks / f"{stack}.json").exists():
                raise StubError("no stack selected; pulumi stack select <name>")
            config = read_stack_config(root, stack)
            if verb == ["stack", "change-secrets-provider"]:
                open_secrets(config)
                config = {k: v for k, v in config.items() if k != "encryptionsalt"}
                config = {"secretsprovider": args[2], "encryptedkey": "c3R1Yg==", **config}
                write_stack_config(root, stack, config)
            elif verb == ["config", "get"]:
                value = (config.get("config") or {}).get(args[2])
                if value is None:
                    raise StubError(f"configuration key '{args[2]}' not found for stack '{stack}'")
                print(value)
            elif verb == ["config", "set"]:
                if "--secret" in args:
                    record["secrets"] = open_secrets(config)
                config.setdefault("config", {})[args[2]] = args[3]
                write_stack_config(root, stack, config)
            elif args[:1] in (["up"], ["destroy"], ["preview"]) or verb == ["stack", "output"]:
                # Every one of these decrypts the stack's secrets (the API key is one).
                record["secrets"] = open_secrets(config)
            else:
                raise StubError(f"this stand-in does not know `pulumi {' '.join(argv)}`")
        record["rc"] = 0
        return 0
    except StubError as exc:
        record["rc"] = 255
        record["error"] = str(exc)
        print(f"error: {exc}", file=sys.stderr)
        return 255
    finally:
        log = os.environ.get("PULUMI_STUB_LOG")
        if log:
            with Path(log).open("a", encoding="utf-8") as out:
                out.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
