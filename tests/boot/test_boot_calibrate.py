"""The first-boot calibration through the real rendered boot script on the simulated VM.

The calibration's servers are the sandbox's stand-in container (tests/boot/fake_container.py),
started by the docker stub on a loopback port of their own; its decode-speed model is fixed, so
the winner is known: MTP n-max 3 with fusion on and GPU sampling (the stack's own flags are n-max
2). The verdict goes to the bucket on gcp-storage-emulator once the served file passed its hash.
"""

from __future__ import annotations

from typing import Any

import pytest

from infra import boot_protocol
from infra.model_cache import verdict_object_name
from startup import calibrate
from tests.boot.sandbox import BootResult, Sandbox
from tests.boot.world import (
    Model,
    SandboxFactory,
    config,
    read_verdict,
    sandbox_key,
)
from tests.harness.server import free_port

# Real seconds for the whole calibration in the sandbox (the script's bound, 120 s, is scaled to
# 1.2 s there): the stand-in's starts take a python process each on a shared machine.
BUDGET_S = 60
WINNER = "mtp3/fusion-on/gpu-sampling"


@pytest.fixture
def calibrating(make_sandbox: SandboxFactory) -> Any:
    def make(**kwargs: Any) -> Sandbox:
        env = {"QWEN36_CALIB_BUDGET_S": str(BUDGET_S), "QWEN36_CALIB_PORT": str(free_port())}
        return make_sandbox(verdict=False, extra_env=env, **kwargs)

    return make


def calibration_runs(result: BootResult) -> list[list[str]]:
    return [a for a in result.commands("docker") if a[:1] == ["run"] and "qwen36-calibrate" in a]


def production_run(result: BootResult) -> list[str]:
    return next(a for a in result.commands("docker") if a[:1] == ["run"] and "qwen36-calibrate" not in a)


def ready_fields(result: BootResult) -> dict[str, str]:
    return boot_protocol.detail_fields(result.details("ready")[-1])


def boot_ready(sandbox: Sandbox) -> BootResult:
    result = sandbox.boot_until_ready()
    assert result.phases[-1] == "ready", result.log
    return result


def test_the_first_boot_of_a_key_calibrates_before_serving_and_the_next_skips_it(
    calibrating: Any, model: Model
) -> None:
    sandbox = calibrating()
    first = boot_ready(sandbox)
    # Eight server starts (n-max 0-3, fusion on and off), each on loopback, before the server opens.
    runs = calibration_runs(first)
    assert len(runs) == 8, first.log
    assert all(a[a.index("-p") + 1].startswith("127.0.0.1:") for a in runs)
    assert sum("GGML_CUDA_DISABLE_FUSION=1" in a for a in runs) == 4
    calibrated_at = first.reported_at("calibrate")
    serving_at = first.reported_at("server", lambda d: d.startswith("starting"))
    assert calibrated_at is not None and serving_at is not None and calibrated_at < serving_at, first.log
    fields = ready_fields(first)
    assert fields["verdict"] == "calibrated" and fields["flags"] == WINNER, first.details("ready")
    assert float(fields["calibrate-s"]) >= 0 and float(fields["decode-tps"]) > 90
    assert 0.5 < float(fields["acceptance"]) < 1
    run = production_run(first)
    assert run[run.index("--spec-draft-n-max") + 1] == "3" and "--backend-sampling" in run
    assert not any(a.startswith("GGML_CUDA_DISABLE_FUSION") for a in run)

    # The verdict is in the bucket, next to the model, with this boot's key.
    cfg = config(model)
    verdict = read_verdict(sandbox.gcs_endpoint, sandbox.bucket, cfg)
    assert verdict is not None and verdict["winner"]["name"] == WINNER
    assert verdict["key"] == sandbox_key(cfg, model.sha256).as_dict()
    assert verdict["complete"] and len(verdict["candidates"]) == 16
    # With the cold start that boot measured: the ready report's figures (issue 24, item 4).
    ready = first.details("ready")
    for figure in ("fetch-from", "load-s", "ready-s"):
        assert verdict["boot"][figure] == ready_fields(first)[figure], (figure, ready)

    second = boot_ready(sandbox)
    assert calibration_runs(second) == [], second.log
    assert ready_fields(second)["verdict"] == "verdict" and ready_fields(second)["flags"] == WINNER
    # The same flags as the first boot's: its container is started again, not replaced.
    assert not [a for a in second.commands("docker") if a[:1] == ["run"]], second.log
    assert "starting the existing container llama-server" in second.details("server")


def test_a_stale_verdict_calibrates_again(calibrating: Any, model: Model) -> None:
    sandbox = calibrating()
    boot_ready(sandbox)
    cfg = config(model)
    store = calibrate.VerdictStore(
        calibrate.Gcs(sandbox.gcs_endpoint, lambda: None), sandbox.bucket, verdict_object_name(cfg)
    )
    # What the acceptance guard does when live acceptance stays far below the verdict's.
    assert store.mark_stale(sandbox_key(cfg, model.sha256), "live acceptance far below", {})
    again = boot_ready(sandbox)
    assert len(calibration_runs(again)) == 8, again.log
    assert "marked stale: live acceptance far below" in again.log
    assert ready_fields(again)["verdict"] == "calibrated"
    fresh = read_verdict(sandbox.gcs_endpoint, sandbox.bucket, cfg)
    assert fresh is not None and not fresh["stale"] and fresh["winner"]["name"] == WINNER


def test_a_verdict_of_another_driver_is_ignored(calibrating: Any, model: Model) -> None:
    sandbox = calibrating()
    boot_ready(sandbox)
    # A spot restart on a host whose driver is another version: the key differs.
    sandbox.new_host()
    sandbox.edit_host(lambda host: host["gpu"].update(driver_version="580.105.08"))
    again = boot_ready(sandbox)
    assert "its key differs (driver_version: '580.95.05' != '580.105.08')" in again.log, again.log
    assert len(calibration_runs(again)) == 8
    verdict = read_verdict(sandbox.gcs_endpoint, sandbox.bucket, config(model))
    assert verdict is not None and verdict["key"]["driver_version"] == "580.105.08"


def test_a_value_the_stack_sets_wins_over_the_verdict_and_the_report_says_so(
    calibrating: Any, model: Model
) -> None:
    cfg = config(model, spec_draft_n_max=2)
    assert "spec_draft_n_max" in cfg.model_fields_set
    sandbox = calibrating(cfg=cfg)
    first = boot_ready(sandbox)
    detail = first.details("calibrate")[-1]
    assert "qwen36-mtp-l4:specDraftNMax 2 set in the stack config wins over the verdict's 3" in detail, detail
    fields = ready_fields(first)
    assert fields["pinned"] == "specDraftNMax" and fields["flags"] == "mtp2/fusion-on/gpu-sampling"
    run = production_run(first)
    assert run[run.index("--spec-draft-n-max") + 1] == "2"
    # The verdict itself still names the fastest candidate, for every member whatever it pins.
    verdict = read_verdict(sandbox.gcs_endpoint, sandbox.bucket, cfg)
    assert verdict is not None and verdict["winner"]["name"] == WINNER


def test_a_host_that_cannot_turn_ecc_off_does_not_recalibrate_the_others_away(
    calibrating: Any, model: Model
) -> None:
    sandbox = calibrating()
    boot_ready(sandbox)  # key: ECC off, ctx 56320
    # A spot restart on a host whose GPU refuses the ECC change: the degraded key (ECC on, 8192).
    sandbox.new_host("GPU-0003")
    sandbox.edit_host(lambda host: host["gpu"].update(ecc_locked=True))
    degraded = boot_ready(sandbox)
    assert len(calibration_runs(degraded)) == 8 and "ecc_mode: 'Disabled' != 'Enabled'" in degraded.log
    # Back on a host where ECC goes off: the first key's verdict was kept beside the new one.
    sandbox.new_host("GPU-0004")
    back = boot_ready(sandbox)
    assert calibration_runs(back) == [], back.log
    assert ready_fields(back)["verdict"] == "verdict"
    verdict = read_verdict(sandbox.gcs_endpoint, sandbox.bucket, config(model))
    assert verdict is not None and verdict["key"]["ecc_mode"] == "Enabled"
    assert [o["key"]["ecc_mode"] for o in verdict["others"]] == ["Disabled"]
