"""The real rendered boot script, run by bash on a simulated VM, through every boot a VM can see.

Only the GPU, apt, docker, gcloud, reboot and the metadata server are stubs (tests/boot/stubs.py);
the fetch tool, GCS (an emulator) and the hub (tests/cache/hf_server.py) are real code on loopback.
"""

from __future__ import annotations

import hashlib
import json
import re
import stat
import urllib.parse
import urllib.request
from typing import Any

from infra.boot_script import BODY_PATH, render_boot_script
from tests.boot.sandbox import BootResult, Sandbox
from tests.boot.world import API_KEY, MODEL_FILE, PROJECT_ID, SECRET, Model, SandboxFactory, config
from tests.cache.hf_server import HfServer

MARKER = MODEL_FILE + ".verified"
ECC_MARKER = "ecc-reboot-requested"
DOWNLOAD_REPORTS = ("fetching gs://", "from HuggingFace")
HEALTH_POLLS = int(re.search(r"^HEALTH_POLLS=(\d+)$", BODY_PATH.read_text(), re.MULTILINE)[1])  # type: ignore[index]


def only_good_model(sandbox: Sandbox, model: Model) -> None:
    """Exactly one model file, the verified one, with its marker and nothing partial beside it."""
    assert [p.name for p in sandbox.model_files()] == [MODEL_FILE, MARKER]
    assert hashlib.sha256((sandbox.model_dir / MODEL_FILE).read_bytes()).hexdigest() == model.sha256


def served(sandbox: Sandbox) -> list[dict[str, Any]]:
    return [e for e in sandbox.loads() if e["event"] == "healthy"]


def container_calls(result: BootResult) -> list[list[str]]:
    """docker calls that create, replace, start or stop a container."""
    return [a for a in result.commands("docker") if a[0] in ("run", "rm", "start", "stop", "restart")]


def downloads(result: BootResult) -> list[str]:
    return [d for d in result.details("model") if any(s in d for s in DOWNLOAD_REPORTS)]


def gcs_object(sandbox: Sandbox, name: str) -> dict[str, Any]:
    url = f"{sandbox.gcs_endpoint}/storage/v1/b/{sandbox.bucket}/o/{urllib.parse.quote(name, safe='')}"
    with urllib.request.urlopen(url, timeout=10) as reply:
        data: dict[str, Any] = json.loads(reply.read())
        return data


def assert_ready(sandbox: Sandbox, result: BootResult) -> None:
    assert result.rc == 0, result.log
    assert not result.rebooted
    assert result.phases[-1] == "ready", result.log
    assert sandbox.last_report().phase == "ready"
    assert sandbox.health() == 200


def test_fresh_vm_reboots_once_for_ecc_then_serves_then_restarts_without_work(
    make_sandbox: SandboxFactory, model: Model, hub: HfServer
) -> None:
    sandbox = make_sandbox()
    hub_requests = len(hub.log)

    first = sandbox.boot()
    assert first.rc == 0 and first.rebooted, first.log
    assert first.phases == ["boot", "driver", "ecc"]
    assert ["-e", "0"] in first.commands("nvidia-smi")
    assert first.commands("reboot") == [[]]
    assert first.calls[-1]["cmd"] == "reboot", "nothing may run after the reboot call"
    assert "reboot requested for ECC" in (sandbox.state_dir / ECC_MARKER).read_text()
    assert not first.commands("docker") and sandbox.model_files() == []
    assert sandbox.last_report().detail.endswith("rebooting")

    second = sandbox.boot()
    assert_ready(sandbox, second)
    assert second.details("ecc") == ["ECC Disabled on GPU-0001"]
    assert not (sandbox.state_dir / ECC_MARKER).exists()
    assert downloads(second) == [
        f"fetching gs://{sandbox.bucket}/models/{config(model).model_repo}/{MODEL_FILE}"
    ]
    assert "fetched and verified from the GCS cache" in second.details("model")
    assert len(hub.log) == hub_requests, "a cache hit never asks the hub"
    assert [a[-1] for a in second.commands("apt-get") if "install" in a] == ["docker.io"]
    assert ["pull", "-q", "ghcr.io/ggml-org/llama.cpp:server-cuda-b11434"] in second.commands("docker")
    runs = [a for a in container_calls(second) if a[0] == "run"]
    assert len(runs) == 1
    only_good_model(sandbox, model)
    assert [e["sha256"] for e in served(sandbox)] == [model.sha256]
    assert served(sandbox)[0]["ctx_size"] == 56320 and served(sandbox)[0]["api_key_file"]
    ready = second.details("ready")[0]
    assert ready.startswith("llama-server healthy ") and ready.endswith(" s after boot")

    key_file = sandbox.state_dir / "secrets" / "llama-api-key"
    assert key_file.read_text() == API_KEY
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    assert f"{key_file}:/run/secrets/llama-api-key:ro" in runs[0]

    model_inode = (sandbox.model_dir / MODEL_FILE).stat().st_ino
    third = sandbox.boot()
    assert_ready(sandbox, third)
    assert not third.commands("reboot") and ["-e", "0"] not in third.commands("nvidia-smi")
    assert not third.commands("apt-get")
    assert not [a for a in third.commands("docker") if a[0] == "pull"]
    assert downloads(third) == [] and third.details("model") == [
        f"verified copy on disk: {sandbox.model_dir / MODEL_FILE}"
    ]
    assert container_calls(third) == [], "the running container with the wanted spec is left alone"
    assert (sandbox.model_dir / MODEL_FILE).stat().st_ino == model_inode
    assert len(sandbox.containers()) == 1

    for boot in (first, second, third):
        assert API_KEY not in boot.log
        assert all(API_KEY not in w.value for w in boot.writes)
        assert all(API_KEY not in " ".join(c["argv"]) for c in boot.calls)
    assert sandbox.metadata.refused == 0, "every metadata request carries Metadata-Flavor: Google"


def test_restart_on_a_new_host_reboots_once_and_downloads_nothing(
    make_sandbox: SandboxFactory, model: Model
) -> None:
    sandbox = make_sandbox()
    sandbox.boot_until_ready()
    sandbox.new_host("GPU-0002")

    first = sandbox.boot()
    assert first.rebooted and first.commands("reboot") == [[]]
    assert "gpu=GPU-0002" in (sandbox.state_dir / ECC_MARKER).read_text()
    second = sandbox.boot()
    assert_ready(sandbox, second)
    assert not second.commands("reboot")
    for boot in (first, second):
        assert downloads(boot) == []
    assert container_calls(second) == []
    only_good_model(sandbox, model)


def test_cache_miss_falls_back_to_huggingface_and_self_stages(
    make_sandbox: SandboxFactory, model: Model, hub: HfServer
) -> None:
    sandbox = make_sandbox(cached=False)
    cdn_before = len(hub.cdn_requests())
    sandbox.boot()
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert downloads(result)[-1].endswith("from HuggingFace")
    assert "fetched and verified from HuggingFace" in result.details("model")
    assert "cache miss: gs://" in result.log
    assert len(hub.cdn_requests()) > cdn_before
    only_good_model(sandbox, model)
    assert [e["sha256"] for e in served(sandbox)] == [model.sha256]
    # Readiness came first; the upload after it fills the cache for the next VM.
    assert result.log.index("phase=ready") < result.log.index("self-staged gs://")
    staged = gcs_object(sandbox, f"models/{config(model).model_repo}/{MODEL_FILE}")
    assert staged["metadata"]["sha256"] == model.sha256 and int(staged["size"]) == model.size
    assert not (sandbox.state_dir / "self-stage-pending").exists()

    again = sandbox.boot()
    assert_ready(sandbox, again)
    assert downloads(again) == [] and "self-stag" not in again.log


def test_without_a_pinned_hash_the_hubs_hash_verifies_and_self_staging_hashes_the_file(
    make_sandbox: SandboxFactory, model: Model
) -> None:
    sandbox = make_sandbox(cached=False, cfg=config(model, model_sha256="", model_size_bytes=0))
    sandbox.boot()
    result = sandbox.boot()
    assert_ready(sandbox, result)
    only_good_model(sandbox, model)
    # The marker records the hash the fetch tool verified against (the hub's LFS sha256).
    assert (sandbox.model_dir / MARKER).read_text().split()[2] == model.sha256
    staged = gcs_object(sandbox, f"models/{config(model).model_repo}/{MODEL_FILE}")
    assert staged["metadata"]["sha256"] == model.sha256


def test_corrupt_or_truncated_model_is_detected_refetched_and_never_served(
    make_sandbox: SandboxFactory, model: Model
) -> None:
    # A load takes long enough here that a container started on a bad file could not have served it
    # before the script stops it (the real 22 GB load takes ~30 s).
    sandbox = make_sandbox(delays={"load": 2.0})
    sandbox.boot()
    assert_ready(sandbox, sandbox.boot())
    path = sandbox.model_dir / MODEL_FILE
    for damage in ("truncate", "flip"):
        sandbox.shutdown()
        data = bytearray(path.read_bytes())
        if damage == "truncate":
            path.write_bytes(data[: len(data) // 2])
        else:
            data[len(data) // 3] ^= 0xFF
            path.write_bytes(data)
        result = sandbox.boot()
        assert_ready(sandbox, result)
        assert "the copy on disk failed verification (exit 4); fetching it again" in result.log
        assert "stopping llama-server: the model on disk is not verified" in result.details("model")
        assert "fetched and verified from the GCS cache" in result.details("model")
        only_good_model(sandbox, model)
    assert {e["sha256"] for e in served(sandbox)} == {model.sha256}, "a damaged file never answered /health"
    assert len(sandbox.containers()) == 1


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
    assert container_calls(third) == []
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
    assert sandbox.model_files() == []


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
    fetch_end = result.reported_at("model", lambda d: d == "fetched and verified from the GCS cache")
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
    assert [a[0] for a in container_calls(changed)] == ["rm", "run"]
    assert "replacing container llama-server" in " ".join(changed.details("server"))
    assert served(sandbox)[-1]["ctx_size"] == 32768

    sandbox.edit_host(lambda host: host["secrets"].update({f"{PROJECT_ID}/{SECRET}": "sk-rotated"}))
    rotated = sandbox.boot()
    assert_ready(sandbox, rotated)
    assert [a[0] for a in container_calls(rotated)] == ["rm", "run"]
    assert (sandbox.state_dir / "secrets" / "llama-api-key").read_text() == "sk-rotated"
    assert len(sandbox.containers()) == 1


def test_no_api_key_means_no_secret_read_and_no_key_mount(make_sandbox: SandboxFactory) -> None:
    sandbox = make_sandbox(api_key=False)
    sandbox.boot()
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert not result.commands("gcloud")
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
    assert detail.startswith("server: not healthy after 900 s; last log lines:")
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
    assert _state_polls(result) >= 5, result.log
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
    assert container_calls(result) == [], "the running container was left alone"
    assert _state_polls(result) >= 5, result.log
