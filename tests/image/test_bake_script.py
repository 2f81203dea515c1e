"""The real rendered bake script, run under bash in the stub sandbox (tests/image/sandbox.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra import boot_protocol
from infra.bake_script import BAKE_PHASES, BODY_PATH, bake_script_hash, render_bake_script, shell_quote
from infra.config import StackConfig
from infra.llama_cpp import server_image
from tests.image.sandbox import BakeSandbox, GuestAttributes, metadata_server

SHELLCHECK = Path(sys.executable).parent / "shellcheck"
IMAGE = server_image(StackConfig().llama_cpp_build)
NS = boot_protocol.NAMESPACE


@pytest.fixture
def metadata() -> Iterator[tuple[str, GuestAttributes]]:
    with metadata_server() as served:
        yield served


@pytest.fixture
def script() -> str:
    return render_bake_script(StackConfig())


def _commands(calls: list[str], prefix: str) -> list[str]:
    return [call for call in calls if call.startswith(prefix)]


def test_fresh_builder_installs_configures_pulls_and_reports_ready(
    tmp_path: Path, script: str, metadata: tuple[str, GuestAttributes]
) -> None:
    url, attributes = metadata
    sandbox = BakeSandbox(tmp_path)
    result = sandbox.run(script, url)
    assert result.returncode == 0, result.stdout + result.stderr

    calls = sandbox.calls()
    installs = _commands(calls, "apt-get")
    assert any(" install " in f" {c} " and "docker.io" in c for c in installs)
    # apt waits (bounded) for unattended-upgrades' dpkg lock rather than failing on it.
    assert all("DPkg::Lock::Timeout=600" in c for c in installs)
    assert "nvidia-ctk runtime configure --runtime=docker" in calls
    assert "systemctl restart docker" in calls
    # The runtime is configured before the restart that loads it, and the image is pulled once.
    assert calls.index("nvidia-ctk runtime configure --runtime=docker") < calls.index(
        "systemctl restart docker"
    )
    assert _commands(calls, "docker pull") == [f"docker pull --quiet {IMAGE}"]
    assert (sandbox.state / "images").read_text().split() == [IMAGE]

    # apt caches are cleaned out of the image; the lock file stays.
    assert "apt-get -o DPkg::Lock::Timeout=600 -y clean" in calls
    assert sorted(p.name for p in sandbox.apt_lists.iterdir()) == ["lock"]

    assert attributes.phases() == list(BAKE_PHASES)
    assert attributes.values[f"{NS}/{boot_protocol.KEY_PHASE}"] == boot_protocol.PHASE_READY
    assert IMAGE in attributes.values[f"{NS}/{boot_protocol.KEY_DETAIL}"]
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", attributes.values[f"{NS}/{boot_protocol.KEY_TIME}"]
    )
    # Every log line carries a UTC timestamp.
    lines = [line for line in result.stdout.splitlines() if "qwen36-bake:" in line]
    assert lines and all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ qwen36-bake: ", line) for line in lines)


def test_second_run_does_only_what_is_missing(
    tmp_path: Path, script: str, metadata: tuple[str, GuestAttributes]
) -> None:
    url, attributes = metadata
    sandbox = BakeSandbox(tmp_path)
    assert sandbox.run(script, url).returncode == 0
    (tmp_path / "calls.log").unlink()

    result = sandbox.run(script, url)
    assert result.returncode == 0, result.stderr
    calls = sandbox.calls()
    assert not any(" install " in f" {c} " for c in _commands(calls, "apt-get"))
    assert _commands(calls, "nvidia-ctk") == []
    assert _commands(calls, "docker pull") == []
    assert "image already pulled" in result.stdout
    assert attributes.phases()[-1] == boot_protocol.PHASE_READY


def test_docker_already_on_the_image_is_not_reinstalled(
    tmp_path: Path, script: str, metadata: tuple[str, GuestAttributes]
) -> None:
    url, _ = metadata
    sandbox = BakeSandbox(tmp_path, docker_installed=True)
    result = sandbox.run(script, url)
    assert result.returncode == 0, result.stderr
    calls = sandbox.calls()
    assert not any(" install " in f" {c} " for c in _commands(calls, "apt-get"))
    assert "docker engine present" in result.stdout
    assert "nvidia-ctk runtime configure --runtime=docker" in calls


def test_a_pull_that_keeps_failing_is_bounded_and_reported(
    tmp_path: Path, script: str, metadata: tuple[str, GuestAttributes]
) -> None:
    url, attributes = metadata
    sandbox = BakeSandbox(tmp_path)
    result = sandbox.run(script, url, {"STUB_PULL_FAIL": "1"})
    assert result.returncode != 0
    assert len(_commands(sandbox.calls(), "docker pull")) == 3
    assert attributes.phases()[-1] == boot_protocol.PHASE_FAILED
    assert attributes.values[f"{NS}/{boot_protocol.KEY_DETAIL}"].startswith("bake-pull failed")
    # A failed bake never cleans up or claims readiness.
    assert boot_protocol.PHASE_READY not in attributes.phases()
    assert "bake-clean" not in attributes.phases()


def test_a_docker_daemon_that_never_answers_is_bounded_and_reported(
    tmp_path: Path, script: str, metadata: tuple[str, GuestAttributes]
) -> None:
    url, attributes = metadata
    sandbox = BakeSandbox(tmp_path)
    result = sandbox.run(script, url, {"STUB_DOCKER_DEAD": "1"})
    assert result.returncode != 0
    info_polls = [c for c in sandbox.calls() if c == "docker info"]
    assert len(info_polls) == 30
    assert "docker did not answer after 30 polls" in result.stdout
    assert attributes.values[f"{NS}/{boot_protocol.KEY_DETAIL}"].startswith("bake-docker failed")
    assert attributes.phases()[-1] == boot_protocol.PHASE_FAILED


def test_reports_are_best_effort_when_the_metadata_server_is_unreachable(tmp_path: Path, script: str) -> None:
    sandbox = BakeSandbox(tmp_path)
    # A closed loopback port: curl fails at once; the bake itself must still finish.
    result = sandbox.run(script, "http://127.0.0.1:9")
    assert result.returncode == 0, result.stderr
    assert "warning: could not report phase ready" in result.stdout
    assert (sandbox.state / "images").read_text().split() == [IMAGE]


def test_rendering_is_deterministic_and_quoted(script: str) -> None:
    assert render_bake_script(StackConfig()) == script
    assert f"SERVER_IMAGE={shell_quote(IMAGE)}\n" in script
    assert script.startswith("#!/bin/bash\n")
    assert script.endswith(BODY_PATH.read_text())
    other = render_bake_script(StackConfig(llama_cpp_build=11000))
    assert "server-cuda-b11000" in other
    assert bake_script_hash(other) != bake_script_hash(script)


def test_shell_quote_survives_bash() -> None:
    tricky = 'it\'s $(not) `run` "here"; \\ ok'
    out = subprocess.run(
        ["bash", "-c", f'v={shell_quote(tricky)}; printf %s "$v"'], capture_output=True, text=True, check=True
    )
    assert out.stdout == tricky


def test_rendered_script_and_body_are_shellcheck_clean(tmp_path: Path, script: str) -> None:
    rendered = tmp_path / "bake.sh"
    rendered.write_text(script)
    result = subprocess.run(
        [str(SHELLCHECK), "--severity=style", str(rendered), str(BODY_PATH)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
