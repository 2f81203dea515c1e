"""The cold start measured where it happens (issue 24): the ready report carries the model fetch's
rate with the slices gcloud used, the load time and the time to ready, and `status` shows them.

The sandbox's stubs take set real times here (a fetch of FETCH_S, a load of LOAD_S), so the figures
can be held against what the sandbox saw: the stub's own slice count, its load, the write's arrival.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from infra import boot_protocol
from infra.boot_script import LIB_PATH, MODEL_SH_PATH, lib_variables
from qwen36.status import RUNNING, GroupApi, Where, describe
from tests.boot.gcloud_storage import slice_count
from tests.boot.sandbox import BootResult, Sandbox
from tests.boot.world import Model, SandboxFactory
from tests.compute_fake.group import FakeGroup, FakeMember, GroupState
from tests.compute_fake.server import fake_compute_api

FETCH_S = 2.0
LOAD_S = 1.5
# Real seconds of slack on this shared machine: the stubs' python starts (gcloud's imports
# google-crc32c), the progress watcher, a health poll at the sandbox's scale, the curl.
SLACK_S = 1.0
MIB = 1024 * 1024


def ready(sandbox: Sandbox, result: BootResult) -> boot_protocol.Figures:
    assert result.rc == 0 and not result.rebooted, result.log
    report = sandbox.last_report()
    figures = boot_protocol.ready_figures(report)
    assert figures is not None, report
    return figures


def test_the_ready_report_measures_a_fetch_from_gcs_the_load_and_the_time_to_ready_and_status_shows_them(
    make_sandbox: SandboxFactory, model: Model
) -> None:
    sandbox = make_sandbox(delays={"gcs_ram": FETCH_S, "load_ram": LOAD_S})
    sandbox.bake_tooling_image()
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    result = sandbox.boot()
    figures = ready(sandbox, result)
    assert figures.fetch_from == "gcs"
    (download,) = [c for c in result.calls if c["cmd"] == "gcs-download"]
    assert figures.fetch_slices == download["slices"] == 1, "the 3 MB model is below the slice threshold"
    assert figures.fetch_s is not None and FETCH_S - 0.05 <= figures.fetch_s <= FETCH_S + SLACK_S
    assert figures.fetch_mb_s == pytest.approx(model.size / 1e6 / figures.fetch_s, rel=0.05)
    started = next(c["t"] for c in result.calls if c["cmd"] == "docker" and c["argv"][0] == "run")
    healthy = next(e["t"] for e in sandbox.loads() if e["event"] == "healthy")
    assert figures.load_s is not None and LOAD_S - 0.05 <= figures.load_s <= healthy - started + SLACK_S
    ready_at = result.ready_at()
    assert ready_at is not None and figures.ready_s is not None
    # Against the sandbox's boot epoch (QWEN36_BOOT_EPOCH, whole seconds): the figure is taken
    # before the write, which may wait up to a (scaled) minute for room under the ration.
    since_epoch = ready_at - int(result.started)
    assert since_epoch - SLACK_S <= figures.ready_s <= since_epoch + 0.05
    # The human part stays first; the figures follow it.
    assert sandbox.last_report().detail.startswith("llama-server healthy ")

    # `status` reads the member's guest attributes (through the Compute API) and shows the figures.
    member = FakeMember("qwen36-dev-a1", "us-central1-a", guest_attributes=sandbox.guest_attributes())
    group = FakeGroup(timeline=[(0.0, GroupState(members=[member]))], project="p", region="us-central1")
    with fake_compute_api(group) as endpoint:
        line = describe(GroupApi(Where("p", "us-central1", "qwen36-dev"), endpoint, anonymous=True))
    assert line.startswith(f"{RUNNING}: qwen36-dev-a1 in us-central1-a; no report from the idle watcher yet")
    assert line.endswith(
        f"; boot: model from gcs at {figures.fetch_mb_s:g} MB/s (1 slice, {figures.fetch_s:g} s), "
        f"loaded in {figures.load_s:g} s, ready {figures.ready_s:g} s after boot"
    ), line


def test_the_ready_report_measures_a_hub_download_without_slices(make_sandbox: SandboxFactory) -> None:
    sandbox = make_sandbox(cached=False)
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    figures = ready(sandbox, sandbox.boot())
    assert figures.fetch_from == "hub" and figures.fetch_slices is None
    assert figures.fetch_s is not None and figures.fetch_mb_s is not None and figures.fetch_mb_s > 0
    assert figures.load_s is not None and figures.ready_s is not None


def test_figures_read_back_what_the_boot_script_writes() -> None:
    detail = (
        "llama-server healthy 171 s after boot; fetch-from=gcs fetch-mb-s=1692.3 fetch-slices=32 "
        "fetch-s=13.0 load-s=6.5 ready-s=171.4; degraded: ECC is enabled, ctx-size 8192"
    )
    report = boot_protocol.parse_report(f"ready 2026-12-01T10:00:00Z b00t {detail}")
    figures = boot_protocol.ready_figures(report)
    assert figures == boot_protocol.Figures("gcs", 1692.3, 32, 13.0, 6.5, 171.4)
    assert str(figures) == (
        "model from gcs at 1692.3 MB/s (32 slices, 13 s), loaded in 6.5 s, ready 171.4 s after boot"
    )
    older = boot_protocol.parse_report(
        "ready 2026-12-01T10:00:00Z b00t llama-server healthy 171 s after boot"
    )
    assert boot_protocol.ready_figures(older) is None
    step = boot_protocol.parse_report(f"model 2026-12-01T10:00:00Z b00t {detail}")
    assert boot_protocol.ready_figures(step) is None


@pytest.mark.parametrize(
    ("size", "check"),
    [
        (22_000_000_000, "if_fast_else_fail"),  # the deployed model: the 32-slice cap
        (1024 * MIB, "if_fast_else_fail"),  # 4 x 256 MiB
        (1024 * MIB + 1, "if_fast_else_fail"),
        (150 * MIB, "if_fast_else_fail"),  # at the threshold: not sliced
        (150 * MIB + 1, "if_fast_else_fail"),
        (3 * MIB, "if_fast_else_fail"),
        (22_000_000_000, "always"),  # no compiled crc32c: one stream
    ],
)
def test_the_reported_slices_are_gclouds_for_the_scripts_settings(
    size: int, check: str, tmp_path: Path
) -> None:
    # The script's count against the sandbox gcloud's rule (copy_component_util.get_component_count
    # above the sliced-download threshold), with the settings the script gives gcloud.
    variables = "".join(f"{k}='{v}'\n" for k, v in lib_variables().items())
    block = "MODEL_FILE=m.gguf MODEL_BUCKET=b MODEL_OBJECT=o\n"
    shown = "$GCS_SLICES $GCS_COMPONENTS $GCS_COMPONENT_MIB $GCS_SLICE_THRESHOLD_MIB"
    script = f"{variables}{block}{LIB_PATH.read_text()}\n{MODEL_SH_PATH.read_text()}\n"
    script += f'gcs_slices {size} {check}\necho "{shown}"\n'
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=30, check=True,
        env={"PATH": "/usr/bin:/bin", "QWEN36_STATE_DIR": str(tmp_path)},
    ).stdout.split()  # fmt: skip
    slices, components, piece_mib, threshold_mib = (int(v) for v in out)
    expected = slice_count(
        size,
        components=components,
        piece=piece_mib * MIB,
        threshold=threshold_mib * MIB,
        fast=check != "always",
    )
    assert slices == expected
    if size == 22_000_000_000 and check != "always":
        assert slices == 32
