"""The real rendered boot script, run by bash on a simulated VM, through every boot a VM can see.

Only the GPU, apt, docker, gcloud, reboot, mount and the metadata server are stubs
(tests/boot/stubs.py); `gcloud storage` runs a small real implementation against a GCS emulator and
the hub (tests/cache/hf_server.py) is real code on loopback. The model path's own scenarios (RAM,
integrity, cache repair, IAM propagation) are in test_boot_model_path.py.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from infra.boot_script import BODY_PATH, render_boot_script
from tests.boot.sandbox import BootResult, Sandbox
from tests.boot.world import MODEL_FILE, PROJECT_ID, SECRET, Model, SandboxFactory, config

ECC_MARKER = "ecc-reboot-requested"
DOWNLOAD_REPORTS = ("fetching gs://", "from HuggingFace")
HEALTH_POLLS = int(re.search(r"^HEALTH_POLLS=(\d+)$", BODY_PATH.read_text(), re.MULTILINE)[1])  # type: ignore[index]


def only_good_model(sandbox: Sandbox, model: Model) -> None:
    """Exactly one model file, in RAM, the checked one, and nothing partial beside it."""
    assert [p.name for p in sandbox.ram_files()] == [".sha256-checked", MODEL_FILE]
    assert hashlib.sha256((sandbox.ram_dir / MODEL_FILE).read_bytes()).hexdigest() == model.sha256


def served(sandbox: Sandbox) -> list[dict[str, Any]]:
    return [e for e in sandbox.loads() if e["event"] == "healthy"]


def container_calls(result: BootResult) -> list[list[str]]:
    """docker calls that create, replace, start or stop the production container (a changed key's
    calibration starts servers of its own: tests/boot/test_boot_calibrate.py)."""
    return [
        a
        for a in result.commands("docker")
        if a[0] in ("run", "rm", "start", "stop", "restart") and "qwen36-calibrate" not in a
    ]


def downloads(result: BootResult) -> list[str]:
    return [d for d in result.details("model") if any(s in d for s in DOWNLOAD_REPORTS)]


def assert_ready(sandbox: Sandbox, result: BootResult) -> None:
    assert result.rc == 0, result.log
    assert not result.rebooted
    assert result.phases[-1] == "ready", result.log
    assert sandbox.last_report().phase == "ready"
    assert sandbox.health() == 200


def test_ecc_that_stays_on_costs_one_reboot_then_serves_degraded(
    make_sandbox: SandboxFactory, model: Model
) -> None:
    sandbox = make_sandbox()
    sandbox.edit_host(lambda host: host["gpu"].update(ecc_sticky=True))
    first = sandbox.boot()
    assert first.rebooted
    second = sandbox.boot()
    assert_ready(sandbox, second)
    assert second.details("ecc")[0].startswith("degraded: ECC still enabled on GPU-0001 after the reboot")
    assert "degraded: ECC is enabled, ctx-size 8192" in second.details("ready")[0]
    assert sandbox.last_report().detail.endswith("degraded: ECC is enabled, ctx-size 8192")
    run = next(a for a in second.commands("docker") if a[0] == "run")
    assert run[run.index("--ctx-size") + 1] == "8192"
    third = sandbox.boot()
    assert_ready(sandbox, third)
    assert [b.commands("reboot") for b in (first, second, third)] == [[[]], [], []]
    # The model is fetched into RAM again (tmpfs is empty after a boot); the container is reused.
    assert [a[0] for a in container_calls(third)] == ["stop", "start"]
    assert [e["ctx_size"] for e in served(sandbox)] == [8192, 8192]


def test_ecc_change_refused_serves_degraded_without_rebooting(make_sandbox: SandboxFactory) -> None:
    sandbox = make_sandbox()
    sandbox.edit_host(lambda host: host["gpu"].update(ecc_locked=True))
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert not result.commands("reboot")
    assert result.details("ecc")[0].startswith("degraded: nvidia-smi -e 0 was refused")


def test_driver_lost_in_a_kernel_upgrade_is_rebuilt(make_sandbox: SandboxFactory) -> None:
    sandbox = make_sandbox()
    sandbox.boot()
    assert_ready(sandbox, sandbox.boot())
    sandbox.kernel_upgrade()
    result = sandbox.boot()
    assert_ready(sandbox, result)
    installs = [a for a in result.commands("apt-get") if "install" in a]
    assert installs and installs[0][-1] == "nvidia-dkms-580-server-open"
    assert result.commands("modprobe") == [["nvidia"]]
    assert result.details("driver")[-1] == "driver recovered with nvidia-dkms-580-server-open: NVIDIA L4"


def test_driver_that_cannot_be_rebuilt_is_a_clear_failure(make_sandbox: SandboxFactory) -> None:
    sandbox = make_sandbox()
    sandbox.kernel_upgrade(driver_package_available=False)
    result = sandbox.boot()
    assert result.rc == 1 and not result.rebooted
    assert result.phases[-1] == "failed"
    report = sandbox.last_report()
    assert report.phase == "failed"
    assert report.detail.startswith("driver: no GPU: nvidia-smi still fails after installing")
    assert not result.commands("docker") and not result.commands("gcloud") and not result.commands("reboot")
    assert sandbox.ram_files() == [] and sandbox.model_files() == []


def test_docker_preparation_and_model_fetch_overlap(make_sandbox: SandboxFactory) -> None:
    sandbox = make_sandbox(delays={"apt_docker": 1.0, "pull": 1.0})
    sandbox.boot()
    result = sandbox.boot()
    assert_ready(sandbox, result)
    # The docker side's times come from the apt-get and docker stubs, the model side's from the
    # script's journal lines around the (real) fetch.
    docker_start = next(c["t"] for c in result.calls if c["cmd"] == "apt-get")
    docker_end = next(c["t"] for c in result.calls if c["cmd"] == "docker-pull-done")
    fetch_start = result.reported_at("model", lambda d: d.startswith("fetching gs://"))
    fetch_end = result.reported_at("model", lambda d: d.startswith("fetched from the GCS cache"))
    assert fetch_start is not None and fetch_end is not None, result.log
    times = {"docker": (docker_start, docker_end), "fetch": (fetch_start, fetch_end)}
    assert fetch_start < docker_end and docker_start < fetch_end, times
    # Run one after the other, the two would take their sum; here the boot took about the longer one.
    assert max(docker_end, fetch_end) - min(docker_start, fetch_start) < (docker_end - docker_start) + (
        fetch_end - fetch_start
    ), times


def test_changed_arguments_replace_the_container_and_a_rotated_key_restarts_it(
    make_sandbox: SandboxFactory, model: Model
) -> None:
    sandbox = make_sandbox()
    sandbox.boot()
    assert_ready(sandbox, sandbox.boot())
    sandbox.script_path.write_text(
        render_boot_script(
            config(model, ctx_size=32768), bucket=sandbox.bucket, api_key_secret=SECRET, project=PROJECT_ID
        )
    )
    changed = sandbox.boot()
    assert_ready(sandbox, changed)
    # Stopped while the model is fetched into RAM again, then replaced for its new arguments.
    assert [a[0] for a in container_calls(changed)] == ["stop", "rm", "run"]
    assert "replacing container llama-server" in " ".join(changed.details("server"))
    assert served(sandbox)[-1]["ctx_size"] == 32768

    sandbox.edit_host(lambda host: host["secrets"].update({f"{PROJECT_ID}/{SECRET}": "sk-rotated"}))
    rotated = sandbox.boot()
    assert_ready(sandbox, rotated)
    assert [a[0] for a in container_calls(rotated)] == ["stop", "rm", "run"]
    assert (sandbox.state_dir / "secrets" / "llama-api-key").read_text() == "sk-rotated"
    assert len(sandbox.containers()) == 1


def test_no_api_key_means_no_secret_read_and_no_key_mount(make_sandbox: SandboxFactory) -> None:
    sandbox = make_sandbox(api_key=False)
    sandbox.boot()
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert not [c for c in result.commands("gcloud") if c[0] == "secrets"]
    run = next(a for a in result.commands("docker") if a[0] == "run")
    assert "--api-key-file" not in run and not any(a.endswith(":/run/secrets/llama-api-key:ro") for a in run)
    assert not (sandbox.state_dir / "secrets").exists()


def test_baked_image_skips_docker_install_and_pull(make_sandbox: SandboxFactory) -> None:
    sandbox = make_sandbox()
    sandbox.bake_tooling_image()
    sandbox.boot()
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert not result.commands("apt-get") and not result.commands("nvidia-ctk")
    assert not [a for a in result.commands("docker") if a[0] == "pull"]
    assert "docker ready; ghcr.io/ggml-org/llama.cpp:server-cuda-b11434 already present" in result.details(
        "prepare"
    )


def test_server_that_never_gets_healthy_fails_with_its_log(make_sandbox: SandboxFactory) -> None:
    sandbox = make_sandbox(delays={"load": 1000.0}, time_scale=0.002)
    sandbox.boot()
    result = sandbox.boot()
    assert result.rc == 1 and result.phases[-1] == "failed"
    detail = sandbox.last_report().detail
    assert detail.startswith("server: not healthy after 960 s; last log lines:")
    assert "main: loading model" in detail


def _state_polls(result: BootResult) -> int:
    """How many times the ready step looked at the container's restart count (once per health poll)."""
    return sum(1 for a in result.commands("docker") if a[:1] == ["inspect"] and "{{.RestartCount}}" in a[2])


def test_server_that_crashes_at_load_fails_fast_with_the_restart_count_and_a_ctx_hint(
    make_sandbox: SandboxFactory,
) -> None:
    # 900 s of health bound would be 9 s here; the boot must not wait it out.
    sandbox = make_sandbox()
    sandbox.edit_host(lambda host: host["gpu"].update(fits_ctx_size=32768))
    sandbox.boot()
    result = sandbox.boot()
    assert result.rc == 1 and result.phases[-1] == "failed", result.log
    detail = sandbox.last_report().detail
    assert detail.startswith("server: llama-server keeps exiting (exit code 1, restarted 3 times by docker,")
    assert (
        "the GPU ran out of memory loading the model: lower qwen36-mtp-l4:ctxSize; last log lines:" in detail
    )
    assert "cudaMalloc failed: out of memory" in detail
    assert _state_polls(result) < HEALTH_POLLS // 4, result.log
    container = sandbox.containers()["llama-server"]
    assert container["restart_count"] >= 3 and container["exit_code"] == 1
    assert served(sandbox) == []


def test_crash_while_degraded_points_at_the_degraded_ctx_size(make_sandbox: SandboxFactory) -> None:
    sandbox = make_sandbox()
    sandbox.edit_host(lambda host: host["gpu"].update(ecc_locked=True, fits_ctx_size=4096))
    result = sandbox.boot()
    assert result.rc == 1 and result.phases[-1] == "failed", result.log
    detail = sandbox.last_report().detail
    assert detail.startswith("server: llama-server keeps exiting (exit code 1, restarted 3 times by docker,")
    assert "lower qwen36-mtp-l4:degradedCtxSize; last log lines:" in detail
    assert _state_polls(result) < HEALTH_POLLS // 4, result.log


def test_server_that_docker_gives_up_restarting_fails_at_once(make_sandbox: SandboxFactory) -> None:
    sandbox = make_sandbox()
    sandbox.edit_host(lambda host: host["gpu"].update(fits_ctx_size=32768))
    sandbox.edit_host(lambda host: host["docker"].update(restart_fails=True))
    sandbox.boot()
    result = sandbox.boot()
    assert result.rc == 1 and result.phases[-1] == "failed", result.log
    detail = sandbox.last_report().detail
    assert detail.startswith("server: llama-server exited (exit code 1) and docker does not restart it;")
    assert "lower qwen36-mtp-l4:ctxSize; last log lines:" in detail
    assert _state_polls(result) < HEALTH_POLLS // 4, result.log


def test_slow_load_without_restarts_still_becomes_ready(make_sandbox: SandboxFactory) -> None:
    sandbox = make_sandbox(delays={"load": 2.0})
    sandbox.boot()
    result = sandbox.boot()
    assert_ready(sandbox, result)
    # The container was looked at on many polls while it answered 503, and never counted as crashing.
    assert _state_polls(result) >= 3, result.log
    assert sandbox.containers()["llama-server"].get("restart_count", 0) == 0


def test_restarts_from_before_the_boot_do_not_count_as_a_crash_loop(make_sandbox: SandboxFactory) -> None:
    # The load starts at power-on (docker restarts the container), so it outlasts the boot's steps.
    sandbox = make_sandbox(delays={"load": 6.0})
    sandbox.boot()
    assert_ready(sandbox, sandbox.boot())
    # docker restarted it a few times in the past (an old crash); today it loads fine, slowly.
    sandbox.edit_host(lambda host: host["docker"]["containers"]["llama-server"].update(restart_count=7))
    result = sandbox.boot()
    assert_ready(sandbox, result)
    # The model is fetched into RAM again after the boot; the same container is started on it.
    assert [a[0] for a in container_calls(result)] == ["stop", "start"], "the container is reused"
    assert _state_polls(result) >= 3, result.log
