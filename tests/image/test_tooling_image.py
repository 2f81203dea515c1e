"""The tooling-image pipeline and the family lookup, under Pulumi's mocks.

What the engine would receive (inputs, dependencies, options) is recorded at the mock monitor;
the builder's shell commands, as recorded, are then run under /bin/sh with a stub gcloud.
"""

from __future__ import annotations

import itertools
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulumi
import pytest

from infra.bake_script import render_bake_script
from infra.cold_start import COLD_START_STOCK, COLD_START_TOOLING
from infra.config import StackConfig
from infra.shielded import SecureBoot
from infra.tooling_image import (
    BAKE_SCRIPT_ENV,
    BAKE_TIMEOUT_MINUTES,
    BUILDER_DISK_GB,
    BUILDER_MACHINE_TYPE,
    ToolingImage,
    ToolingImageArgs,
    bake_image_name,
    builder_name,
    choose_server_image,
    find_tooling_image,
    stock_image_url,
    tooling_family,
    tooling_image_name,
)
from tests.image.pulumi_mocks import (
    BUILDER_INSTANCE_ID,
    GCP_PROJECT,
    Mocked,
    ProviderError,
    Registration,
    set_up,
)

PIPELINE = ("tooling-builder", "tooling-bake-wait", "tooling-stop", "tooling-image", "tooling-delete-builder")
COMMAND = "command:local:Command"
IMAGE = "gcp:compute/image:Image"
GET_IMAGE = "gcp:compute/getImage:getImage"
ACCOUNT = "gcp:serviceaccount/account:Account"
PROJECT_IAM = "gcp:projects/iAMMember:IAMMember"
NETWORK: dict[str, Any] = {
    "deployment": "qwen36-dev",
    "network": "qwen36-dev",
    "subnetwork": "qwen36-dev-us-central1",
}


def _bake(
    cfg: StackConfig | None = None, builder_id: str = BUILDER_INSTANCE_ID
) -> tuple[Mocked, dict[str, Registration], Any]:
    mocked = set_up(builder_id=builder_id)
    cfg = cfg or StackConfig(build_tooling_image=True)
    holder: dict[str, ToolingImage] = {}

    def build() -> pulumi.Output[Any]:
        holder["c"] = ToolingImage("tooling", ToolingImageArgs(cfg=cfg, project=GCP_PROJECT, **NETWORK))
        return holder["c"].family_url

    family_url = mocked.run(build)
    return mocked, mocked.monitor.registrations, family_url


def test_pipeline_has_the_five_steps_under_the_component() -> None:
    _, regs, _ = _bake()
    component = regs["tooling"]
    assert component.type == "qwen36:infra:ToolingImage"
    assert [regs[name].type for name in PIPELINE] == [COMMAND, COMMAND, COMMAND, IMAGE, COMMAND]
    for name in PIPELINE:
        assert "ToolingImage$" in regs[name].urn, f"{name} is not parented to the component"


def test_each_step_waits_for_the_one_before() -> None:
    """builder -> wait -> stop -> image -> delete builder, as dependencies the engine orders by."""
    mocked, regs, _ = _bake()
    for before, after in itertools.pairwise(PIPELINE):
        assert regs[before].urn in regs[after].dependencies, f"{after} does not depend on {before}"
    # The engine registered them in that order (a dependency's URN exists before its dependant).
    positions = [mocked.monitor.order.index(name) for name in PIPELINE]
    assert positions == sorted(positions)


def test_the_image_is_taken_from_the_stopped_builders_disk_and_the_builder_deleted_after() -> None:
    _, regs, _ = _bake()
    builder_create = regs["tooling-builder"].inputs["create"]
    name = _instance_name(builder_create, "create")
    image = regs["tooling-image"].inputs
    assert image["sourceDisk"].endswith(f"/projects/{GCP_PROJECT}/zones/us-central1-a/disks/{name}")
    assert _instance_name(regs["tooling-stop"].inputs["create"], "stop") == name
    delete = regs["tooling-delete-builder"].inputs["create"]
    assert _instance_name(delete, "delete") == name
    # The delete step is re-run for every new image, and only once that image exists.
    assert regs["tooling-image"].urn in regs["tooling-delete-builder"].dependencies
    assert "triggers" in regs["tooling-delete-builder"].inputs


def test_family_carries_the_build_number_and_the_image_name_is_unique_per_build() -> None:
    _, regs, family_url = _bake()
    image = regs["tooling-image"].inputs
    assert image["family"] == "qwen36-mtp-l4-tooling-b11434"
    assert image["name"].startswith("qwen36-mtp-l4-tooling-b11434-")
    assert image["name"] == f"{tooling_image_name(StackConfig())}-{BUILDER_INSTANCE_ID[-8:]}"
    assert image["labels"]["llama-cpp-build"] == "b11434"
    assert family_url == f"projects/{GCP_PROJECT}/global/images/family/qwen36-mtp-l4-tooling-b11434"

    _, regs_next, _ = _bake(StackConfig(build_tooling_image=True, llama_cpp_build=11500))
    next_image = regs_next["tooling-image"].inputs
    assert next_image["family"] == "qwen36-mtp-l4-tooling-b11500"
    assert next_image["name"].startswith("qwen36-mtp-l4-tooling-b11500-")
    assert next_image["name"] != image["name"]
    # A new build also means a new builder, so the two bakes never share a VM.
    assert regs_next["tooling-builder"].inputs["create"] != regs["tooling-builder"].inputs["create"]


def test_a_new_builder_vm_re_runs_every_later_step_into_a_new_image() -> None:
    """`pulumi up --replace` on the builder re-bakes: new VM id, new triggers, new image name."""
    _, first, _ = _bake()
    _, again, _ = _bake(builder_id="7301234567811112222")
    assert again["tooling-image"].inputs["name"] != first["tooling-image"].inputs["name"]
    for step in ("tooling-bake-wait", "tooling-stop"):
        assert again[step].inputs["triggers"] != first[step].inputs["triggers"], step
    assert again["tooling-image"].inputs["name"].startswith(tooling_image_name(StackConfig()))


def test_old_images_are_kept_and_builders_never_overlap() -> None:
    _, regs, _ = _bake()
    assert regs["tooling-image"].retain_on_delete
    assert regs["tooling-image"].custom_timeouts["create"] == "30m"
    assert regs["tooling-builder"].delete_before_replace
    assert not regs["tooling-builder"].retain_on_delete


def test_builder_is_a_small_vm_from_the_server_base_image_with_the_bake_script() -> None:
    cfg = StackConfig(build_tooling_image=True)
    _, regs, _ = _bake(cfg)
    builder = regs["tooling-builder"].inputs
    argv = _gcloud_argv(builder["create"], "create")
    assert f"--machine-type={BUILDER_MACHINE_TYPE}" in argv
    assert f"--image-project={cfg.image_project}" in argv
    assert f"--image-family={cfg.image_family}" in argv
    assert f"--boot-disk-size={BUILDER_DISK_GB}GB" in argv
    # Every valid server disk can hold the image (GCE refuses a disk smaller than its image).
    assert cfg.min_boot_disk_gb >= BUILDER_DISK_GB
    # Its own account (never the default compute one), on the stack's own network.
    assert "--service-account=qwen36-dev-bake@acme-llm-test.iam.gserviceaccount.com" in argv
    assert "--network=qwen36-dev" in argv and "--subnet=qwen36-dev-us-central1" in argv
    assert not any(
        "default" in a for a in argv if a.startswith(("--network", "--subnet", "--service-account"))
    )
    assert any(a.startswith("--metadata=") and "enable-guest-attributes=TRUE" in a for a in argv)
    assert not any("accelerator" in a for a in argv)
    assert builder["environment"][BAKE_SCRIPT_ENV] == render_bake_script(cfg)
    # The wait follows the builder's guest attributes through the health gate's CLI, bounded.
    wait = regs["tooling-bake-wait"].inputs["create"]
    wait_line = next(line for line in wait.splitlines() if " -m qwen36 wait " in line)
    wait_argv = shlex.split(wait_line.removeprefix("if ").removesuffix("; then exit 0; fi"))
    assert wait_argv[wait_argv.index("--mode") + 1] == "guest-attributes"
    assert wait_argv[wait_argv.index("--instance") + 1] == _instance_name(builder["create"], "create")
    assert float(wait_argv[wait_argv.index("--timeout-minutes") + 1]) == BAKE_TIMEOUT_MINUTES


# --- The recorded shell commands, run for real against a stub gcloud ----------------------------------

_GCLOUD = r"""#!/bin/bash
printf '%s\n' "gcloud $*" >>"$SANDBOX/calls.log"
verb="$3"; name="$4"
case "$verb" in
  describe)
    [[ -e $SANDBOX/instances/$name ]] || exit 1
    if [[ " $* " == *" --format=value(id) "* ]]; then cat "$SANDBOX/instances/$name.id"; fi ;;
  create)
    for arg in "$@"; do
      if [[ $arg == --metadata-from-file=startup-script=* ]]; then
        cp "${arg#--metadata-from-file=startup-script=}" "$SANDBOX/startup-script"
      fi
    done
    echo RUNNING >"$SANDBOX/instances/$name"
    echo "$RANDOM$RANDOM$RANDOM$RANDOM" >"$SANDBOX/instances/$name.id" ;;
  stop) echo TERMINATED >"$SANDBOX/instances/$name" ;;
  delete) rm "$SANDBOX/instances/$name" "$SANDBOX/instances/$name.id" ;;
esac
"""

_PYTHON = r"""#!/bin/bash
printf '%s\n' "python $*" >>"$SANDBOX/calls.log"
exit "${STUB_WAIT_EXIT:-0}"
"""


class Shell:
    """Runs a recorded command under /bin/sh, with stubs for gcloud and the wait's python."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "bin").mkdir()
        (root / "instances").mkdir()
        for name, text in {"gcloud": _GCLOUD, "python": _PYTHON}.items():
            path = root / "bin" / name
            path.write_text(text)
            path.chmod(0o755)

    def run(self, command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        full_env = {"PATH": f"{self.root / 'bin'}:/usr/bin:/bin", "SANDBOX": str(self.root), **(env or {})}
        return subprocess.run(
            ["/bin/sh", "-c", command], env=full_env, capture_output=True, text=True, check=False
        )

    def calls(self) -> list[str]:
        log = self.root / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def verbs(self) -> list[str]:
        return [c.split()[3] if c.startswith("gcloud") else "wait" for c in self.calls()]


def _recorded_with_stub_python(regs: dict[str, Registration], name: str) -> str:
    return str(regs[name].inputs["create"]).replace(shlex.quote(sys.executable), "python")


def test_the_recorded_pipeline_runs_in_order_and_leaves_only_the_image(tmp_path: Path) -> None:
    cfg = StackConfig(build_tooling_image=True)
    _, regs, _ = _bake(cfg)
    shell = Shell(tmp_path)
    env = {BAKE_SCRIPT_ENV: regs["tooling-builder"].inputs["environment"][BAKE_SCRIPT_ENV]}
    outputs = {}
    for step in ("tooling-builder", "tooling-bake-wait", "tooling-stop"):
        result = shell.run(_recorded_with_stub_python(regs, step), env)
        assert result.returncode == 0, result.stderr
        outputs[step] = result.stdout
    name = _instance_name(regs["tooling-builder"].inputs["create"], "create")
    # The builder step prints the new VM's id, which names this bake's image.
    assert outputs["tooling-builder"].strip() == (tmp_path / "instances" / f"{name}.id").read_text().strip()
    # The VM got exactly the rendered bake script, and was stopped before the image step.
    assert (tmp_path / "startup-script").read_text() == render_bake_script(cfg)
    assert (tmp_path / "instances" / name).read_text().strip() == "TERMINATED"
    assert shell.run(regs["tooling-delete-builder"].inputs["create"]).returncode == 0
    assert not (tmp_path / "instances" / name).exists()
    assert shell.verbs() == [
        "describe",
        "create",
        "describe",
        "describe",
        "wait",
        "stop",
        "describe",
        "delete",
    ]
    # Deleting again (a rerun, or destroy after the delete step) is a no-op, not an error.
    assert shell.run(regs["tooling-builder"].inputs["delete"]).returncode == 0


def test_a_failed_bake_deletes_the_builder_and_a_rerun_bakes_afresh(tmp_path: Path) -> None:
    _, regs, _ = _bake()
    shell = Shell(tmp_path)
    env = {BAKE_SCRIPT_ENV: "#!/bin/bash\n"}
    name = _instance_name(regs["tooling-builder"].inputs["create"], "create")
    assert shell.run(_recorded_with_stub_python(regs, "tooling-builder"), env).returncode == 0

    failed = shell.run(_recorded_with_stub_python(regs, "tooling-bake-wait"), {**env, "STUB_WAIT_EXIT": "1"})
    assert failed.returncode == 1
    assert f"deleting the builder {name}" in failed.stderr
    assert not (tmp_path / "instances" / name).exists()

    # Pulumi retries only the failed wait step; it re-creates the builder before waiting.
    (tmp_path / "calls.log").unlink()
    retried = shell.run(_recorded_with_stub_python(regs, "tooling-bake-wait"), env)
    assert retried.returncode == 0, retried.stderr
    assert shell.verbs() == ["describe", "create", "wait"]


def _on_update(regs: dict[str, Registration], name: str) -> str:
    """What the command provider runs when the step's inputs change but its triggers do not."""
    inputs = regs[name].inputs
    return str(inputs.get("update") or inputs["create"]).replace(shlex.quote(sys.executable), "python")


def test_an_update_after_the_bake_never_brings_the_builder_back(tmp_path: Path) -> None:
    """E.g. the repo or its venv moved, so the wait's command line differs: nothing may re-bake."""
    _, regs, _ = _bake()
    shell = Shell(tmp_path)
    env = {BAKE_SCRIPT_ENV: regs["tooling-builder"].inputs["environment"][BAKE_SCRIPT_ENV]}
    for step in ("tooling-builder", "tooling-bake-wait", "tooling-stop"):
        assert shell.run(_recorded_with_stub_python(regs, step), env).returncode == 0
    assert shell.run(regs["tooling-delete-builder"].inputs["create"]).returncode == 0
    (tmp_path / "calls.log").unlink()
    for step in ("tooling-bake-wait", "tooling-stop", "tooling-delete-builder"):
        result = shell.run(_on_update(regs, step), env)
        assert result.returncode == 0, f"{step}: {result.stderr}"
    assert "create" not in shell.verbs()
    assert list((tmp_path / "instances").iterdir()) == []


def _gcloud_argv(script: str, verb: str) -> list[str]:
    for line in script.splitlines():
        words = shlex.split(line.strip().removeprefix("if ! ").removeprefix("if "), posix=True)
        if words[:4] == ["gcloud", "compute", "instances", verb]:
            return words
    raise AssertionError(f"no `gcloud compute instances {verb}` in:\n{script}")


def _instance_name(script: str, verb: str) -> str:
    return _gcloud_argv(script, verb)[4]


# --- Which image the server boots ------------------------------------------------------------------


def _image_found(args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
    assert args.token == GET_IMAGE
    family = args.args["family"]
    return {
        "name": f"{family}-0a1b2c3d",
        "family": family,
        "project": GCP_PROJECT,
        "selfLink": f"https://www.googleapis.com/compute/v1/projects/{GCP_PROJECT}/global/images/{family}-0a1b2c3d",
    }


def _image_missing(args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
    family = args.args["family"]
    raise ProviderError(
        f"googleapi: Error 404: The resource "
        f"'projects/{GCP_PROJECT}/global/images/family/{family}' was not found, notFound"
    )


def test_lookup_finds_the_builds_family() -> None:
    mocked = set_up(_image_found)
    cfg = StackConfig()
    found = find_tooling_image(cfg)
    assert found is not None
    image = mocked.run(lambda: found.url)
    assert image == f"projects/{GCP_PROJECT}/global/images/family/{tooling_family(cfg.llama_cpp_build)}"
    # An image without the GPU test's label (baked before it) runs with Secure Boot off, said so.
    assert found.secure_boot == SecureBoot(False, "unverified")
    assert any(level == "WARNING" and "Secure Boot off" in message for level, message in mocked.logs.records)
    [call] = mocked.mocks.calls
    assert call.token == GET_IMAGE and call.args["family"] == "qwen36-mtp-l4-tooling-b11434"
    assert any(level == "INFO" and COLD_START_TOOLING in message for level, message in mocked.logs.records)


def test_a_missing_family_falls_back_to_the_stock_image() -> None:
    mocked = set_up(_image_missing)
    # A whole program run: the caught invoke error must not fail the deployment at its end.
    cfg = StackConfig(build_tooling_image=False)
    choice = mocked.run(
        lambda: pulumi.Output.from_input(choose_server_image(cfg, find_tooling_image(cfg, GCP_PROJECT)))
    )
    assert choice.source == "stock"
    assert choice.image == stock_image_url(cfg)
    assert COLD_START_STOCK in choice.summary and "buildToolingImage" in choice.summary
    [call] = mocked.mocks.calls
    assert call.args["family"] == "qwen36-mtp-l4-tooling-b11434" and call.args["project"] == GCP_PROJECT
    infos = [m for level, m in mocked.logs.records if level == "INFO"]
    assert any("no tooling image in family qwen36-mtp-l4-tooling-b11434" in m for m in infos)
    assert not [m for level, m in mocked.logs.records if level in ("WARNING", "ERROR")]


def test_an_empty_answer_is_no_image() -> None:
    mocked = set_up(lambda args: {})
    assert mocked.run(lambda: pulumi.Output.from_input(find_tooling_image(StackConfig()))) is None


def test_a_lookup_that_errors_otherwise_warns_and_falls_back() -> None:
    def denied(args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        raise ProviderError("googleapi: Error 403: Required 'compute.images.getFromFamily' permission")

    mocked = set_up(denied)
    assert mocked.run(lambda: pulumi.Output.from_input(find_tooling_image(StackConfig()))) is None
    warnings = [m for level, m in mocked.logs.records if level == "WARNING"]
    assert warnings and "403" in warnings[0] and "stock image" in warnings[0]


def test_use_tooling_image_false_skips_the_lookup() -> None:
    mocked = set_up(_image_found)
    cfg = StackConfig(use_tooling_image=False)
    choice = choose_server_image(cfg, find_tooling_image(cfg))
    assert choice.source == "stock" and choice.image == stock_image_url(cfg)
    assert mocked.mocks.calls == []


def test_a_found_image_is_chosen_with_its_cold_start() -> None:
    mocked = set_up(_image_found)
    cfg = StackConfig()
    choice = choose_server_image(cfg, find_tooling_image(cfg))
    assert choice.source == "tooling"
    assert COLD_START_TOOLING in choice.summary
    assert mocked.run(lambda: choice.image) == (
        f"projects/{GCP_PROJECT}/global/images/family/qwen36-mtp-l4-tooling-b11434"
    )


def test_a_stack_that_bakes_boots_its_own_bake() -> None:
    """The first deployment of a build: the group's image resolves only after the bake, so the
    template (and the group after it) waits for the bake."""
    mocked = set_up(_image_missing)
    cfg = StackConfig()

    def build() -> pulumi.Output[Any]:
        tooling = ToolingImage("tooling", ToolingImageArgs(cfg=cfg, project=GCP_PROJECT, **NETWORK))
        choice = choose_server_image(cfg, None, tooling)
        assert choice.source == "tooling" and "baked first" in choice.summary
        return pulumi.Output.from_input(choice.image)

    image = mocked.run(build)
    assert image == f"projects/{GCP_PROJECT}/global/images/family/qwen36-mtp-l4-tooling-b11434"
    assert mocked.mocks.calls == []  # no lookup needed: the family is this stack's own
    infos = [m for level, m in mocked.logs.records if level == "INFO"]
    assert any("is baked first" in m and "then the server boots it" in m for m in infos)


# From the oldest build infra/llama_cpp.py knows (FIRST_KNOWN_BUILD).
@pytest.mark.parametrize("build", [9803, 11434, 20000])
def test_family_names_are_valid_gce_names(build: int) -> None:
    import re

    cfg = StackConfig(llama_cpp_build=build)
    names = (tooling_family(build), bake_image_name(cfg, BUILDER_INSTANCE_ID), builder_name(cfg))
    for name in names:
        assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name), name


def test_the_builder_waits_for_what_it_is_given() -> None:
    """The Compute API must be on before gcloud creates the builder (ToolingImageArgs.depends_on)."""
    import pulumi_gcp as gcp

    mocked = set_up()
    cfg = StackConfig(build_tooling_image=True)

    def build() -> pulumi.Output[Any]:
        api = gcp.projects.Service("compute-api", service="compute.googleapis.com", project=GCP_PROJECT)
        tooling = ToolingImage(
            "tooling", ToolingImageArgs(cfg=cfg, project=GCP_PROJECT, depends_on=[api], **NETWORK)
        )
        return tooling.family_url

    mocked.run(build)
    regs = mocked.monitor.registrations
    assert regs["compute-api"].urn in regs["tooling-builder"].dependencies


def test_builder_account_holds_only_the_log_writer_role_and_the_image_sets_its_guest_os_features() -> None:
    _, regs, _ = _bake()
    account = regs["tooling-builder-sa"]
    assert account.type == ACCOUNT and account.inputs["accountId"] == "qwen36-dev-bake"
    grants = [r for r in regs.values() if r.type == PROJECT_IAM]
    assert [g.inputs["role"] for g in grants] == ["roles/logging.logWriter"]
    assert (
        grants[0].inputs["member"] == "serviceAccount:qwen36-dev-bake@acme-llm-test.iam.gserviceaccount.com"
    )
    # The builder VM is created only once its account and grant exist.
    assert {account.urn, grants[0].urn} <= set(regs["tooling-builder"].dependencies)
    features = [f["type"] for f in regs["tooling-image"].inputs["guestOsFeatures"]]
    assert features == ["UEFI_COMPATIBLE", "VIRTIO_SCSI_MULTIQUEUE", "GVNIC"]


def test_builder_account_id_fits_the_limit_for_the_longest_deployment_name() -> None:
    from infra.config import deployment_name
    from infra.tooling_image import builder_account_id

    longest = builder_account_id(deployment_name("a-very-long-stack-name-for-testing"))
    assert len(longest) <= 30 and longest.endswith("-bake") and "--" not in longest
