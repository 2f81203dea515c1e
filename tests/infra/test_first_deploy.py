"""The tooling image by default, baked before the group on the first deployment of a build.

The first ``pulumi up`` of a build finds no tooling image: it bakes one, and the group's one template
names it, so the group waits for the bake. The next ``pulumi up`` finds the family and declares the
same template, so nothing is replaced. The group always runs a template Pulumi declared and depends
on, so ``pulumi destroy`` deletes the group before its template (GCE refuses to delete a template a
group uses: ``resourceInUseByAnotherResource``). Run on the real program under Pulumi's mocks.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from program_mocks import GCP_PROJECT, Deployment, deploy

from infra.config import StackConfig
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


def test_the_first_deployment_bakes_then_creates_the_group_on_the_baked_template(first: Deployment) -> None:
    templates = _templates(first)
    assert set(templates) == {"server-template"}
    assert _boot_image(templates["server-template"]) == FAMILY
    # The template resolves its image only once the bake made it; the group and the gate follow.
    assert "tooling-image" in _upstream(first, "server-template")
    assert {"server-template", "tooling-image"} <= _upstream(first, "server-group")
    assert "server-group" in _upstream(first, "health-wait")
    assert {"tooling-builder", "tooling-image"} <= {r.name for r in first.resources}
    assert first.outputs["bootImage"] == FAMILY


def test_the_group_depends_on_every_template_it_runs_so_destroy_deletes_it_first(first: Deployment) -> None:
    """Pulumi deletes a resource before what it depends on; nothing else points the group elsewhere."""
    [group] = first.of_type(GROUP)
    [version] = group.inputs["versions"]
    assert version["instanceTemplate"].endswith("/instanceTemplates/qwen36-dev-20261130223000000000000001")
    assert first.registrations["server-template"].urn in first.registrations["server-group"].dependencies
    commands = {r.name: r.inputs for r in first.of_type(COMMAND)}
    assert not [c for c in commands.values() if "set-instance-template" in str(c.get("create"))]


def test_the_next_deployment_declares_the_same_baked_template_and_drops_the_rest(
    first: Deployment, later: Deployment
) -> None:
    templates = _templates(later)
    assert set(templates) == {"server-template"}
    # Equal inputs: the engine sees no change, so the live template (and its member) stays.
    assert templates["server-template"] == _templates(first)["server-template"]
    names = {r.name for r in later.resources}
    assert not {n for n in names if n.startswith("tooling")}
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
    assert not [r for r in d.resources if r.name.startswith("tooling")]


def _bench_rows(image_create_s: float) -> dict[str, list[float]]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.first_deploy", "--image-create-s", str(image_create_s)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [line.strip("|").split("|") for line in done.stdout.splitlines() if line.startswith("| ")][1:]
    return {cells[0].strip(): [float(c.strip().removesuffix(" s")) for c in cells[1:]] for cells in rows}


def test_the_first_deploy_bench_returns_sooner_with_the_bake_first() -> None:
    """bench/first_deploy.py's figures, which chose the design: with the bake before the group,
    `pulumi up` returns sooner than with the bake beside the first server and the move after it,
    however long the image takes, with no outage; later repairs boot the baked image either way."""
    for image_create_s in (60.0, 300.0, 1800.0):
        rows = _bench_rows(image_create_s)
        no_bake, beside, before = (next(v for k, v in rows.items() if k.startswith(p)) for p in WAYS)
        assert before[1] < beside[1]  # pulumi up returns
        assert before[2] == 0 < beside[2]  # the move's outage
        assert beside[3] == before[3] < no_bake[3]  # each later repair
