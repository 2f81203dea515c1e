"""A stand-in ``pulumi`` for ``qwen36 verify``: the two commands it runs, ``stack output --json
--show-secrets --stack S`` and ``preview --expect-no-changes --non-interactive --stack S``, with
tests/deploy/pulumi_stub.py's backend and secrets rules (Pulumi's documented behaviour, cited there):
the backend from Pulumi.yaml's ``backend.url``, a passphrase stack needing ``PULUMI_CONFIG_PASSPHRASE``
in the command's own environment, a ``gcpkms://`` stack needing application-default credentials.

What a stack answers lives in ``$VERIFY_STUB_DIR`` (set by the wrapper script the test writes, so it
survives the fresh environment verify gives the CLI): ``outputs.json``, the outputs; ``preview.txt``,
when present, the steps a preview proposes, which with ``--expect-no-changes`` end the preview with
Pulumi's own error and a non-zero exit (pulumi/pulumi pkg/cmd/pulumi preview.go: "error: no changes
were expected but changes were proposed"; the CLI exits 255 on an error). Each call is a JSON line in
``calls.jsonl``: argv, cwd and the names of the environment variables it got.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.deploy.pulumi_stub import (  # the repo root went on the path above
    StubError,
    backend_dir,
    backend_url,
    open_secrets,
    project_root,
    read_stack_config,
)

NO_CHANGES_EXPECTED = "error: no changes were expected but changes were proposed"


def main(argv: list[str]) -> int:
    stub = Path(os.environ["VERIFY_STUB_DIR"])
    with (stub / "calls.jsonl").open("a", encoding="utf-8") as log:
        log.write(json.dumps({"argv": argv, "cwd": str(Path.cwd()), "env": sorted(os.environ)}) + "\n")
    try:
        args = list(argv)
        stack = args[args.index("--stack") + 1]
        root = project_root(Path.cwd())
        import yaml

        project = yaml.safe_load((root / "Pulumi.yaml").read_text())["name"]
        if not (backend_dir(backend_url(root)) / ".pulumi" / "stacks" / project / f"{stack}.json").exists():
            raise StubError(f"no stack named '{stack}' found")
        open_secrets(read_stack_config(root, stack))
        if args[:2] == ["stack", "output"] and "--json" in args and "--show-secrets" in args:
            print((stub / "outputs.json").read_text())
            return 0
        if args[:1] == ["preview"] and "--expect-no-changes" in args:
            steps = stub / "preview.txt"
            if steps.exists():
                print(f"Previewing update ({stack})\n\n{steps.read_text()}")
                print(NO_CHANGES_EXPECTED, file=sys.stderr)
                return 255
            print(f"Previewing update ({stack})\n\nResources:\n    61 unchanged")
            return 0
        raise StubError(f"this stand-in does not know `pulumi {' '.join(argv)}`")
    except StubError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 255


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
