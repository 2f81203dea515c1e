"""The tooling image by default, without a slower first deployment.

The first ``pulumi up`` of a build finds no tooling image: it bakes one beside the first server,
which starts on the stock image and does not wait for the bake, then moves the group onto the
baked template. The next ``pulumi up`` finds the family and declares the group on that same
template, so nothing is replaced. Run on the real program under Pulumi's mocks.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from program_mocks import GCP_PROJECT, Deployment, deploy

from infra.config import StackConfig
from infra.image_switch import switch_command
from infra.tooling_image import stock_image_url, tooling_family

TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
GROUP = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"
COMMAND = "command:local:Command"
REPO = Path(__file__).resolve().parents[2]
WAYS = ("no bake", "bake beside", "bake before")
CFG = StackConfig()
FAMILY = f"projects/{GCP_PROJECT}/global/images/family/{tooling_family(CFG.llama_cpp_build)}"


@pytest.fixture(scope="module")
def first() -> Deployment:
    return deploy("dev", tooling_image=False)


@pytest.fixture(scope="module")
def later() -> Deployment:
    return deploy("dev", tooling_image=True)


def _templates(d: Deployment) -> dict[str, dict[str, Any]]:
    return {r.name: r.inputs for r in d.of_type(TEMPLATE)}


def _boot_image(template: dict[str, Any]) -> str:
    [disk] = template["disks"]
    return str(disk["sourceImage"])


def _upstream(d: Deployment, name: str) -> set[str]:
    """Every resource ``name`` waits for, directly or through others (by the engine's dependencies)."""
    by_urn = {reg.urn: n for n, reg in d.registrations.items()}
    seen: set[str] = set()
    todo = [name]
    while todo:
        for urn in d.registrations[todo.pop()].dependencies:
            dep = by_urn[urn]
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_the_first_deployment_starts_on_the_stock_image_and_bakes_beside_it(first: Deployment) -> None:
    templates = _templates(first)
    assert set(templates) == {"server-bootstrap-template", "server-template"}
    assert _boot_image(templates["server-bootstrap-template"]) == stock_image_url(CFG)
    assert _boot_image(templates["server-template"]) == FAMILY
    # Twins but for the boot image: the move changes nothing else about the server.
    stock, baked = (dict(templates[n]) for n in ("server-bootstrap-template", "server-template"))
    stock.pop("disks"), baked.pop("disks")
    assert stock == baked
    # The group runs the stock twin, made at once; the baked one comes after the bake (the mocks'
    # names count up in creation order, as GCE's timestamped suffixes would).
    [group] = first.of_type(GROUP)
    [version] = group.inputs["versions"]
    assert version["instanceTemplate"].endswith("/instanceTemplates/qwen36-dev-20261130223000000000000001")
    assert (
        first.registrations["server-bootstrap-template"].urn
        in first.registrations["server-group"].dependencies
    )
    assert {"tooling-builder", "tooling-image"} <= {r.name for r in first.resources}


def test_neither_the_group_nor_the_first_gate_waits_for_the_bake(first: Deployment) -> None:
    """The first server serves as soon as it would without a bake: nothing before it is the bake's."""
    for name in ("server-group", "health-wait"):
        waits_for = _upstream(first, name)
        assert not {n for n in waits_for if n.startswith("tooling")}, name
        assert "server-template" not in waits_for, name
    assert "tooling-image" in _upstream(first, "server-template")


def test_the_move_comes_after_the_first_gate_and_the_bake_then_waits_again(first: Deployment) -> None:
    move_name = "image-switch-set-template"
    move = first.registrations[move_name]
    assert {"health-wait", "server-template", "tooling-image"} <= _upstream(
        first, "image-switch-set-template"
    )
    assert move.parent.endswith("ImageSwitch::image-switch")
    command = next(r for r in first.of_type(COMMAND) if r.name == "image-switch-set-template").inputs
    baked_link = (
        f"https://www.googleapis.com/compute/v1/projects/{GCP_PROJECT}/regions/us-central1/"
        "instanceTemplates/qwen36-dev-20261130223000000000000002"
    )
    assert command["create"] == switch_command(
        project=GCP_PROJECT,
        region="us-central1",
        group="qwen36-dev",
        template=baked_link,
        timeout_s=CFG.health_timeout_minutes * 60,
    )
    assert command["triggers"] == [baked_link]
    # The export of the endpoint waits for the second gate, which waits for the move.
    assert "image-switch-set-template" in _upstream(first, "image-switch-health-wait")
    assert first.outputs["bootImage"] == FAMILY


def test_the_next_deployment_declares_the_same_baked_template_and_drops_the_rest(
    first: Deployment, later: Deployment
) -> None:
    templates = _templates(later)
    assert set(templates) == {"server-template"}
    # Equal inputs: the engine sees no change, so the live template (and its member) stays.
    assert templates["server-template"] == _templates(first)["server-template"]
    names = {r.name for r in later.resources}
    assert not {n for n in names if n.startswith(("tooling", "image-switch"))}
    [group] = later.of_type(GROUP)
    [version] = group.inputs["versions"]
    assert later.registrations["server-template"].urn in later.registrations["server-group"].dependencies
    assert version["instanceTemplate"].endswith("/qwen36-dev-20261130223000000000000001")


@pytest.mark.parametrize("off", ["buildToolingImage", "useToolingImage"])
def test_without_a_bake_the_stock_image_stays_and_nothing_moves(off: str) -> None:
    d = deploy("dev", {off: False}, tooling_image=False)
    templates = _templates(d)
    assert list(templates) == ["server-template"]
    assert _boot_image(templates["server-template"]) == stock_image_url(CFG)
    assert not [r for r in d.resources if r.name.startswith(("tooling", "image-switch"))]


_GCLOUD = r"""#!/bin/sh
for arg in "$@"; do printf '%s|' "$arg"; done >>"$SANDBOX/gcloud.log"
echo >>"$SANDBOX/gcloud.log"
case "$4" in
  set-instance-template) exit "${FAIL_SET:-0}" ;;
esac
"""


def _run(command: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "bin").mkdir(exist_ok=True)
    gcloud = tmp_path / "bin" / "gcloud"
    gcloud.write_text(_GCLOUD)
    gcloud.chmod(0o755)
    return subprocess.run(
        ["/bin/sh", "-c", command],
        env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "SANDBOX": str(tmp_path), **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_move_command_sets_the_template_then_waits_and_stops_at_a_failure(tmp_path: Path) -> None:
    template = "https://www.googleapis.com/compute/v1/projects/p/regions/r/instanceTemplates/t x"
    command = switch_command(project="p", region="r", group="qwen36-dev", template=template, timeout_s=1200)
    assert _run(command, tmp_path).returncode == 0
    calls = (tmp_path / "gcloud.log").read_text().splitlines()
    # One word per argument (|-separated): the template's space did not split it.
    assert calls == [
        f"compute|instance-groups|managed|set-instance-template|qwen36-dev|--template={template}|"
        "--project=p|--region=r|",
        "compute|instance-groups|managed|wait-until|qwen36-dev|--version-target-reached|--timeout=1200|"
        "--project=p|--region=r|",
    ]
    (tmp_path / "gcloud.log").unlink()
    failed = _run(command, tmp_path, FAIL_SET="1")
    assert failed.returncode == 1
    assert len((tmp_path / "gcloud.log").read_text().splitlines()) == 1  # no wait after a failed set


def _bench_rows(image_create_s: float) -> dict[str, list[float]]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.first_deploy", "--image-create-s", str(image_create_s)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [line.strip("|").split("|") for line in done.stdout.splitlines() if line.startswith("| ")][1:]
    return {cells[0].strip(): [float(c.strip().removesuffix(" s")) for c in cells[1:]] for cells in rows}


def test_the_first_deploy_bench_serves_as_early_as_without_a_bake() -> None:
    """bench/first_deploy.py's figures follow the design: the bake moves `pulumi up`'s end, not the
    endpoint's start, however long the image takes; later repairs boot the baked image."""
    for image_create_s in (60.0, 1800.0):
        rows = _bench_rows(image_create_s)
        no_bake, beside, before = (next(v for k, v in rows.items() if k.startswith(p)) for p in WAYS)
        assert beside[0] == no_bake[0] < before[0]  # the endpoint first serves
        assert beside[1] > no_bake[1] and beside[2] > 0  # pulumi up returns later; the move's outage
        assert beside[3] == before[3] < no_bake[3]  # each later repair
