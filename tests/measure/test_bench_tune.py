"""`tune` starting the real llama-server itself, and the docker launcher's command (no docker here)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from infra.config import ConfigError
from infra.llama_cpp import server_image
from infra.server_args import CONTAINER_API_KEY_FILE, container_model_path, server_args
from qwen36.measure.cli import base_config
from qwen36.measure.launcher import DockerLauncher, LaunchError
from tests.measure.servers import ONE_ARENA, CliRun, make_config, min_address_space, survives_under, validate

# The stack config tune starts from: test threads, a small context (degraded ctx must stay below it).
TEST_SETTINGS = ("--set", "threads=2", "--set", "ctxSize=2048", "--set", "degradedCtxSize=1024")


def test_n_max_and_parallel_sweeps_name_a_winner_and_the_config_lines(
    cli: Callable[..., CliRun], llama_server_bin: Path, tiny_mtp_model_agreeing: Path, tmp_path: Path
) -> None:
    out = tmp_path / "tune.json"
    run = cli(
        "tune", "--launcher", "local", "--server-bin", str(llama_server_bin),
        "--model", str(tiny_mtp_model_agreeing), *TEST_SETTINGS,
        "--sweep", "n-max", "--n-max", "0,2", "--sweep", "p-min", "--p-min", "0,0.5",
        "--sweep", "parallel", "--parallel", "1,2",
        "--reps", "1", "--max-tokens", "32", "--workloads", "chat,math", "--json", str(out),
    )  # fmt: skip
    assert run.code == 0, run.err
    print(run.out)
    doc = json.loads(out.read_text())
    validate(doc, "tune.schema.json")

    trials = {t["setting"]["spec_draft_n_max"]: t for t in doc["spec_draft_n_max"]}
    assert set(trials) == {0, 2} and all(t["ok"] for t in trials.values())
    # The sweep really changed the server: no drafts without MTP, accepted drafts with it.
    assert trials[0]["acceptance"] is None
    assert trials[2]["acceptance"] > 0
    best = max(trials.values(), key=lambda t: t["min_decode_tps"])
    n_max = best["setting"]["spec_draft_n_max"]
    assert doc["winners"]["spec_draft_n_max"] == n_max

    # p-min runs on top of the winning n-max (it only matters with drafts).
    p_trials = {t["setting"]["spec_draft_p_min"]: t for t in doc["spec_draft_p_min"]}
    if n_max > 0:
        assert set(p_trials) == {0.0, 0.5} and all(t["ok"] for t in p_trials.values())
        p_min = max(p_trials.values(), key=lambda t: t["min_decode_tps"])["setting"]["spec_draft_p_min"]
        assert doc["winners"]["spec_draft_p_min"] == p_min
    else:  # on a tiny CPU model drafting can cost more than it saves
        p_min = None
        assert p_trials == {} and "spec_draft_p_min" not in doc["winners"]
        assert any("p-min sweep skipped" in note for note in doc["notes"])

    slots = {t["setting"]["parallel"]: t for t in doc["parallel"]}
    assert set(slots) == {1, 2} and all(t["ok"] and t["failed_requests"] == 0 for t in slots.values())
    assert slots[2]["requests"] == 2 * slots[1]["requests"]
    fastest = max(slots.values(), key=lambda t: t["aggregate_decode_tps"])["setting"]["parallel"]
    assert doc["winners"]["parallel"] == fastest

    p_lines = [f"pulumi config set qwen36-mtp-l4:specDraftPMin {p_min:g}"] if n_max > 0 else []
    expected = [
        f"pulumi config set qwen36-mtp-l4:specDraftNMax {n_max}",
        *p_lines,
        f"pulumi config set qwen36-mtp-l4:parallel {fastest}",
    ]
    assert doc["pulumi_config"] == expected
    for line in expected:
        assert line in run.out
    assert doc["config_problem"] is None


def test_docker_launcher_runs_the_pinned_image_with_the_shared_flag_list(tmp_path: Path) -> None:
    cfg = make_config(parallel=2, ctx_size=25600)
    key_file = tmp_path / "key"
    launcher = DockerLauncher(tmp_path / "models", api_key_file=key_file, host_port=18080)
    command = launcher.run_command(cfg)
    image = server_image(cfg.llama_cpp_build)
    assert command[:2] == ["docker", "run"]
    split = command.index(image)
    options = command[:split]
    assert options[options.index("--gpus") + 1] == "all"
    assert f"{tmp_path / 'models'}:/models:ro" in options
    assert f"{key_file}:{CONTAINER_API_KEY_FILE}:ro" in options
    assert "127.0.0.1:18080:8080" in options
    assert command[split + 1 :] == server_args(
        cfg, model_path=container_model_path(cfg), api_key_file=CONTAINER_API_KEY_FILE
    )


CTX_LOW, CTX_HIGH, CTX_RESOLUTION = 1024, 8192, 512
# Address space granted above what the server needs to survive a full CTX_LOW context: room for
# ~2,800 more tokens of the tiny model (~0.9 KiB each, KV cache and buffers), so the real limit
# falls inside the range, well away from both ends.
HEADROOM = 5 * 1024**2 // 2


def test_ctx_search_meets_a_real_allocation_failure(
    cli: Callable[..., CliRun],
    llama_server_bin: Path,
    tiny_mtp_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(*next(iter(ONE_ARENA.items())))
    limit = min_address_space(llama_server_bin, tiny_mtp_model, make_config(ctx_size=CTX_LOW)) + HEADROOM
    # The limit is real: applied by util-linux prlimit, the small context survives, the large does not.
    assert survives_under(llama_server_bin, tiny_mtp_model, make_config(ctx_size=CTX_LOW), limit)
    assert not survives_under(llama_server_bin, tiny_mtp_model, make_config(ctx_size=CTX_HIGH), limit)

    out = tmp_path / "tune.json"
    run = cli(
        "tune", "--launcher", "local", "--server-bin", str(llama_server_bin), "--model", str(tiny_mtp_model),
        *TEST_SETTINGS, "--sweep", "ctx", "--ctx-min", str(CTX_LOW), "--ctx-max", str(CTX_HIGH),
        "--ctx-resolution", str(CTX_RESOLUTION), "--memory-limit", str(limit), "--json", str(out),
    )  # fmt: skip
    assert run.code == 0, run.err
    print(run.out)
    doc = json.loads(out.read_text())
    validate(doc, "tune.schema.json")
    answer = doc["winners"]["ctx_size"]
    assert CTX_LOW < answer < CTX_HIGH and answer % CTX_RESOLUTION == 0
    assert not doc["ctx_size"]["at_upper_bound"]
    probes = {p["ctx_size"]: p for p in doc["ctx_size"]["probes"]}
    assert probes[answer]["ok"] and "filled" in probes[answer]["detail"]
    above = probes[answer + CTX_RESOLUTION]
    assert not above["ok"]
    # What stopped it is the server's own failure: exit at load, death, or its error answer (bad_alloc).
    assert above["detail"].startswith(
        (
            "did not load: llama-server exited",
            "died with its context full",
            "failed with its context full: the server answered HTTP 500",
        )
    )
    assert all(p["ok"] == (size <= answer) for size, p in probes.items())
    assert f"pulumi config set qwen36-mtp-l4:ctxSize {answer}" in run.out


def test_docker_launcher_refuses_while_the_production_container_holds_the_gpu(tmp_path: Path) -> None:
    # No docker engine here: a stand-in answers `docker inspect` as the VM would with the
    # production container running, and records every call.
    calls = tmp_path / "calls"
    docker = tmp_path / "docker"
    docker.write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\n'
        'if [ "$1" = inspect ] && [ "$4" = llama-server ]; then echo true; fi\n'
    )
    docker.chmod(0o755)
    launcher = DockerLauncher(tmp_path, docker=str(docker))
    with (
        pytest.raises(LaunchError, match=r"stop it first \(sudo docker stop llama-server\)"),
        launcher.launch(make_config()),
    ):
        pass
    assert not any(line.startswith("run ") for line in calls.read_text().splitlines())


def test_base_config_reads_a_stack_file_and_overrides(tmp_path: Path) -> None:
    stack = tmp_path / "Pulumi.test.yaml"
    stack.write_text(
        "config:\n"
        "  gcp:project: some-project\n"
        "  qwen36-mtp-l4:zones: [us-central1-b]\n"
        "  qwen36-mtp-l4:ctxSize: 32768\n"
        "  qwen36-mtp-l4:backendSampling: false\n"
        "  qwen36-mtp-l4:someSecret:\n"
        "    secure: AAABAKxx\n"
    )
    cfg = base_config(stack, ["specDraftNMax=3", "qwen36-mtp-l4:threads=2"])
    assert (cfg.zones, cfg.ctx_size, cfg.backend_sampling) == (["us-central1-b"], 32768, False)
    assert (cfg.spec_draft_n_max, cfg.threads) == (3, 2)
    with pytest.raises(ConfigError, match="qwen36-mtp-l4:ctxSize"):
        base_config(stack, ["ctxSize=100"])


def test_fusion_sweep_runs_both_settings_with_acceptance_side_by_side(
    cli: Callable[..., CliRun], llama_server_bin: Path, tiny_mtp_model_agreeing: Path, tmp_path: Path
) -> None:
    out = tmp_path / "tune.json"
    run = cli(
        "tune", "--launcher", "local", "--server-bin", str(llama_server_bin),
        "--model", str(tiny_mtp_model_agreeing), *TEST_SETTINGS, "--set", "specDraftNMax=2",
        "--sweep", "fusion", "--reps", "1", "--max-tokens", "16", "--workloads", "chat", "--json", str(out),
    )  # fmt: skip
    doc = json.loads(out.read_text())
    validate(doc, "tune.schema.json")
    trials = {t["setting"]["GGML_CUDA_DISABLE_FUSION"]: t for t in doc["fusion"]}
    assert set(trials) == {"0", "1"} and all(t["ok"] for t in trials.values()), run.err
    # On CPU the switch changes nothing; what is shown is that both rows carry acceptance and tok/s.
    assert all(t["acceptance"] > 0 and t["min_decode_tps"] > 0 for t in trials.values())
    note = next(
        n for n in doc["notes"] if n.startswith("GGML_CUDA_DISABLE_FUSION: fusion on gives acceptance")
    )
    assert "fusion off (GGML_CUDA_DISABLE_FUSION=1) gives" in note
    assert doc["winners"] == {} and run.code == 0, "the fusion row is a finding, not a config key"


def test_docker_launcher_passes_the_fusion_switch_into_the_container() -> None:
    launcher = DockerLauncher(Path("/var/lib/qwen36/models")).with_env({"GGML_CUDA_DISABLE_FUSION": "1"})
    command = launcher.run_command(make_config())
    image = command.index(server_image(make_config().llama_cpp_build))
    assert command[image - 2 : image] == ["--env", "GGML_CUDA_DISABLE_FUSION=1"]
