"""The bake's GPU test step (infra/tooling_image.py GpuTest): its real shell script under bash against a
fake gcloud that answers what the Compute API would (the VM's guest attributes per boot, stop, update,
start, delete, the image's labels and deprecation): each candidate's image label and its one reason
line (tests/infra/test_secure_boot.py: the template's Secure Boot setting for each verdict)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from infra import shielded
from infra.bake_script import KEY_PLAIN, KEY_SECURE_BOOT
from infra.config import StackConfig
from infra.tooling_image import GpuTest, gpu_test_verdict

IMAGE = "qwen36-mtp-l4-tooling-b11434-0a1b2c3d-73012345"
TEST = GpuTest(
    "qwen36-bake-gpu", "acme-llm", ("us-central1-a", "us-central1-b"), "qwen36-dev", "qwen36-dev-us-central1",
    "qwen36-dev-bake@acme-llm.iam.gserviceaccount.com", IMAGE,
)  # fmt: skip

# The fake gcloud: `instances get-guest-attributes --query-path=qwen36/KEY` answers what the
# scenario's current boot wrote (the command prints the value, or fails with NOT_FOUND while the
# key is absent: https://cloud.google.com/compute/docs/metadata/manage-guest-attributes);
# `instances start` begins the next boot; `instances create` fails in the zones the scenario lists.
FAKE_GCLOUD = r"""#!/usr/bin/env python3
import json, sys
from pathlib import Path
home = Path(__file__).resolve().parent
state = json.loads((home / "state.json").read_text())
argv = sys.argv[1:]
with open(home / "calls.jsonl", "a") as calls:
    calls.write(json.dumps(argv) + "\n")
zone = next((a.split("=", 1)[1] for a in argv if a.startswith("--zone=")), "")
if argv[:3] == ["compute", "instances", "create"]:
    if zone in state["stockout"]:
        sys.exit("ERROR: ZONE_RESOURCE_POOL_EXHAUSTED")
elif argv[:3] == ["compute", "instances", "get-guest-attributes"]:
    key = next(a.split("/", 1)[1] for a in argv if a.startswith("--query-path="))
    boots = state["boots"]
    value = boots[min(state["boot"], len(boots) - 1)].get(key)
    if value is None:
        sys.exit("ERROR: NOT_FOUND")
    print(value)
elif argv[:3] == ["compute", "instances", "start"]:
    state["boot"] += 1
(home / "state.json").write_text(json.dumps(state))
"""


def _run(
    tmp_path: Path, boots: list[dict[str, str]], stockout: tuple[str, ...] = ()
) -> tuple[int, str, str, list[list[str]]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcloud").write_text(FAKE_GCLOUD)
    (bin_dir / "gcloud").chmod(0o755)
    (bin_dir / "sleep").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sleep").chmod(0o755)
    (bin_dir / "state.json").write_text(json.dumps({"boot": 0, "boots": boots, "stockout": list(stockout)}))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "QWEN36_VERIFY_SCRIPT": "#!/bin/bash\n", "HOME": str(tmp_path)}
    done = subprocess.run(
        ["bash", "-c", TEST.script(StackConfig())], env=env, capture_output=True, text=True, timeout=60
    )
    calls = [json.loads(line) for line in (bin_dir / "calls.jsonl").read_text().splitlines()]
    return done.returncode, done.stdout, done.stderr, calls


def _verbs(calls: list[list[str]]) -> list[str]:
    return [" ".join(c[1:3]) for c in calls if c[2] != "get-guest-attributes"]


def _labels(calls: list[list[str]]) -> list[str]:
    return [a for c in calls if c[1:3] == ["images", "add-labels"] for a in c if a.startswith("--labels=")]


def test_a_candidate_that_passes_is_labelled_on(tmp_path: Path) -> None:
    rc, out, err, calls = _run(tmp_path, [{KEY_SECURE_BOOT: "on SecureBoot enabled; signer: Canonical"}])
    assert rc == 0, err
    assert out.splitlines()[-1] == "on" and gpu_test_verdict(out).on
    create = next(c for c in calls if c[1:3] == ["instances", "create"])
    assert "--shielded-secure-boot" in create and f"--image={IMAGE}" in create and "--no-address" in create
    assert "--accelerator=type=nvidia-l4,count=1" in create and "--zone=us-central1-a" in create
    assert _labels(calls) == ["--labels=secure-boot=on"]
    assert _verbs(calls) == ["instances create", "instances delete", "images add-labels"]


@pytest.mark.parametrize(
    ("first", "code"),
    [
        ("no-gpu nvidia-smi -L: NVIDIA-SMI has failed", "no-gpu"),
        ("unsigned modinfo printed nothing", "unsigned"),
    ],
)
def test_a_candidate_that_fails_secure_boot_but_works_without_it_is_kept_off(
    tmp_path: Path, first: str, code: str
) -> None:
    boots = [{KEY_SECURE_BOOT: first}, {KEY_SECURE_BOOT: first, KEY_PLAIN: "ok GPU 0: NVIDIA L4"}]
    rc, out, err, calls = _run(tmp_path, boots, stockout=("us-central1-a",))
    assert rc == 0, err
    assert out.splitlines()[-1] == code
    # The report line: what failed under Secure Boot, in pulumi up's output.
    assert f"Secure Boot failed on the GPU test: {first}" in err
    update = next(c for c in calls if c[1:3] == ["instances", "update"])
    assert "--no-shielded-secure-boot" in update and "--zone=us-central1-b" in update
    assert _verbs(calls) == [
        "instances create", "instances create", "instances stop", "instances update", "instances start",
        "instances delete", "images add-labels",
    ]  # fmt: skip
    assert _labels(calls) == [f"--labels=secure-boot={code}"]
    decision = gpu_test_verdict(out)
    assert not decision.on and decision.labels == {shielded.OFF_LABEL: code}


def test_a_candidate_whose_gpu_fails_both_ways_is_refused(tmp_path: Path) -> None:
    boots = [
        {KEY_SECURE_BOOT: "no-gpu x"},
        {KEY_SECURE_BOOT: "no-gpu x", KEY_PLAIN: "no-gpu nvidia-smi failed"},
    ]
    rc, out, err, calls = _run(tmp_path, boots)
    assert rc == 1 and out == ""
    assert "refused: its GPU fails with Secure Boot off too: no-gpu nvidia-smi failed" in err
    deprecate = next(c for c in calls if c[1:3] == ["images", "deprecate"])
    assert IMAGE in deprecate and "--state=OBSOLETE" in deprecate
    assert not _labels(calls) and "instances delete" in _verbs(calls)


def test_no_zone_with_an_l4_refuses_the_candidate(tmp_path: Path) -> None:
    rc, _, err, calls = _run(tmp_path, [{}], stockout=("us-central1-a", "us-central1-b"))
    assert rc == 1 and "no zone of us-central1-a us-central1-b could create its GPU test VM" in err
    assert _verbs(calls)[-1] == "images deprecate"
