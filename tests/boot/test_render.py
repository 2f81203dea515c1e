"""The rendered startup script: deterministic, shell-quoted, shellcheck clean, carrying the helpers
shared with the bake script, the model path and the single source of server flags."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from infra import boot_script
from infra.boot_script import BODY_PATH, LIB_PATH, MAX_SCRIPT_BYTES, MODEL_SH_PATH, render_boot_script
from infra.config import ConfigError, StackConfig, parse_config
from infra.llama_cpp import server_image
from infra.server_args import CONTAINER_API_KEY_FILE, container_model_path, server_args

SHELLCHECK = Path(sys.executable).parent / "shellcheck"
HOSTILE_BUCKET = "models-$(touch pwned)-`touch pwned2`"
HOSTILE_PROJECT = "proj'; touch pwned3; echo '"


def _render(cfg: StackConfig | None = None, **kwargs: str | None) -> str:
    options: dict[str, str | None] = {
        "bucket": "qwen36-models",
        "api_key_secret": "qwen36-api-key",
        "project": "p1",
    }
    options.update(kwargs)
    return render_boot_script(cfg or StackConfig(), **options)  # type: ignore[arg-type]


def _config_block(script: str) -> str:
    """The generated assignments: everything before the pasted helpers."""
    return script[: script.index(LIB_PATH.read_text())]


def _bash_values(script: str, tmp_path: Path, expression: str) -> list[str]:
    """Evaluate the config block in a real bash and print ``expression`` NUL-separated."""
    out = subprocess.run(
        ["bash", "-c", _config_block(script) + f"\nprintf '%s\\0' {expression}"],
        cwd=tmp_path,
        capture_output=True,
        check=True,
        timeout=30,
    ).stdout.decode()
    return out.split("\0")[:-1]


def _shellcheck(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SHELLCHECK), "--shell=bash", "--severity=style", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_same_config_renders_byte_identical_scripts() -> None:
    first = _render(StackConfig(alias="a.b_c-d", ctx_size=32768))
    second = _render(StackConfig(alias="a.b_c-d", ctx_size=32768))
    assert first.encode() == second.encode()
    assert _render() != _render(StackConfig(ctx_size=32768))


def test_script_is_shebang_config_lib_model_path_and_verbatim_body() -> None:
    script = _render()
    assert script.startswith("#!/bin/bash\n")
    pasted = "\n".join(p.read_text() for p in (LIB_PATH, MODEL_SH_PATH, BODY_PATH))
    assert script.endswith("\n" + pasted)
    assert len(script.encode()) < MAX_SCRIPT_BYTES
    # Before lib.sh: assignments, and the VM agents as quoted heredocs; no other program.
    config = script.split(LIB_PATH.read_text())[0]
    outside_agents = re.sub(r"^\w+\(\) \{\n  cat <<'(\w+)'\n.*?^\1\n\}\n", "", config, flags=re.S | re.M)
    assert "qwen36_idle_watch_tool() {" in config
    assert "python3" not in outside_agents, "no embedded program in the config block"


@pytest.mark.parametrize("api_key_secret", ["qwen36-api-key", None])
def test_server_arguments_come_from_the_single_flag_source(
    tmp_path: Path, api_key_secret: str | None
) -> None:
    cfg = StackConfig(tools=["read_file"], degraded_ctx_size=4096, door=False)
    script = _render(cfg, api_key_secret=api_key_secret)
    key_file = CONTAINER_API_KEY_FILE if api_key_secret else None
    model_path = container_model_path(cfg)
    wanted = server_args(cfg, model_path=model_path, api_key_file=key_file)
    assert _bash_values(script, tmp_path, '"${SERVER_ARGS[@]}"') == wanted
    degraded = _bash_values(script, tmp_path, '"${SERVER_ARGS_DEGRADED[@]}"')
    assert degraded == server_args(cfg, model_path=model_path, api_key_file=key_file, ctx_size=4096)
    assert ("--api-key-file" in wanted) == (api_key_secret is not None)
    assert _bash_values(script, tmp_path, '"$SERVER_IMAGE" "$API_KEY_SECRET"') == [
        server_image(cfg.llama_cpp_build),
        api_key_secret or "",
    ]


def test_hostile_values_stay_literal(tmp_path: Path) -> None:
    # The config refuses such a revision where it is read (infra/config_rules.py); the renderer's
    # quoting holds on its own all the same, so the value is set past validation here.
    with pytest.raises(ConfigError, match="modelRevision"):
        parse_config({"qwen36-mtp-l4:modelRevision": "main; touch pwned4"})
    cfg = StackConfig(model_repo="o-w.n/re_po.x").model_copy(update={"model_revision": "main; touch pwned4"})
    script = _render(cfg, bucket=HOSTILE_BUCKET, project=HOSTILE_PROJECT, api_key_secret="s $(id)")
    values = _bash_values(
        script, tmp_path, '"$MODEL_BUCKET" "$GCP_PROJECT" "$API_KEY_SECRET" "$MODEL_REVISION"'
    )
    assert values == [HOSTILE_BUCKET, HOSTILE_PROJECT, "s $(id)", "main; touch pwned4"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("alias", ["my model", "it's", 'a"b', "$(id)"])
def test_config_rejects_an_alias_that_needs_quoting(alias: str) -> None:
    with pytest.raises(ConfigError, match="alias"):
        parse_config({"qwen36-mtp-l4:alias": alias})


def test_driver_branch_comes_from_the_image_family() -> None:
    assert boot_script.driver_branch("common-cu129-ubuntu-2204-nvidia-580") == "580"
    assert boot_script.driver_branch("qwen36-mtp-l4-tooling") == ""


@pytest.mark.parametrize("api_key_secret", ["qwen36-api-key", None])
def test_rendered_script_is_shellcheck_clean(tmp_path: Path, api_key_secret: str | None) -> None:
    path = tmp_path / "startup.sh"
    # Real names only: a hostile one draws SC2016 ("won't expand in single quotes"), which is the point
    # of quoting it (test_hostile_values_stay_literal runs that case in bash).
    path.write_text(_render(StackConfig(tools=["all"], door=False), api_key_secret=api_key_secret))
    result = _shellcheck(path)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("path", [BODY_PATH, LIB_PATH, MODEL_SH_PATH], ids=["boot.sh", "lib.sh", "model.sh"])
def test_boot_body_and_shared_lib_are_shellcheck_clean(path: Path) -> None:
    result = _shellcheck(path)
    assert result.returncode == 0, result.stdout


def test_rendering_does_not_depend_on_the_process(tmp_path: Path) -> None:
    """Two interpreters with different hash seeds write the same bytes (a changed script replaces the VM)."""
    code = (
        "import sys; from infra.config import StackConfig; from infra.boot_script import render_boot_script; "
        "sys.stdout.write(render_boot_script(StackConfig(tools=['all', 'read_file'], door=False), "
        "bucket='b', api_key_secret='k', project='p'))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
            cwd=BODY_PATH.parents[1],
            capture_output=True,
            check=True,
            timeout=120,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1


def test_a_script_over_the_metadata_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(boot_script, "MAX_SCRIPT_BYTES", 10_000)
    with pytest.raises(boot_script.BootScriptError, match="limit is 10000"):
        _render()
