"""The real rendered bake script, run under bash in the boot script's stub sandbox (tests/boot/)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from infra import boot_protocol
from infra.bake_script import (
    BAKE_PHASES,
    BODY_PATH,
    LIB_PATH,
    bake_script_hash,
    render_bake_script,
    shell_quote,
)
from infra.config import StackConfig
from infra.llama_cpp import server_image
from tests.boot.sandbox import BootResult, Sandbox, base_python

SHELLCHECK = Path(sys.executable).parent / "shellcheck"
IMAGE = server_image(StackConfig().llama_cpp_build)
NS = boot_protocol.NAMESPACE
BAKE_STUBS = Path(__file__).resolve().parent / "bake_stubs.py"


@pytest.fixture
def script() -> str:
    return render_bake_script(StackConfig())


def _use_bake_stubs(sandbox: Sandbox) -> Sandbox:
    for name in ("apt-get", "docker", "depmod"):
        wrapper = sandbox.host / "stubs" / name
        wrapper.write_text(f'#!/bin/sh\nexec {base_python()} -S {BAKE_STUBS} {name} "$@"\n')
        wrapper.chmod(0o755)
    for name in ("depmod",):
        link = sandbox.host / "installed" / name
        if not link.exists():
            link.symlink_to(sandbox.host / "stubs" / name)
    return sandbox


def _bake(sandbox: Sandbox, script: str) -> BootResult:
    """Power-cycle the VM with the bake script as its startup script (the server's is kept)."""
    server_script = sandbox.script_path.read_text()
    sandbox.script_path.write_text(script)
    try:
        return sandbox.boot()
    finally:
        sandbox.script_path.write_text(server_script)


def _argvs(result: BootResult, cmd: str) -> list[list[str]]:
    return result.commands(cmd)


def _reports(result: BootResult) -> list[boot_protocol.Report]:
    """The bake's guest-attribute reports, parsed (one key, boot_protocol's format)."""
    writes = [w for w in result.writes if w.namespace == NS]
    assert {w.key for w in writes} <= {boot_protocol.KEY_REPORT}
    return [boot_protocol.parse_report(w.value) for w in writes]


def _ga_phases(result: BootResult) -> list[str]:
    return [r.phase for r in _reports(result)]


def _last(result: BootResult) -> boot_protocol.Report:
    return _reports(result)[-1]


def _is_install_of(argv: list[str], package: str) -> bool:
    return "install" in argv and package in argv


def test_fresh_builder_installs_configures_pulls_and_reports_ready(make_sandbox: Any, script: str) -> None:
    sandbox = _use_bake_stubs(make_sandbox())
    result = _bake(sandbox, script)
    assert result.rc == 0, result.log

    apt = _argvs(result, "apt-get")
    assert any(_is_install_of(a, "docker.io") for a in apt)
    # apt waits (bounded) for unattended-upgrades' dpkg lock rather than failing on it.
    assert all("DPkg::Lock::Timeout=600" in a for a in apt)
    order = [(c["cmd"], c["argv"]) for c in result.calls]
    configure = ("nvidia-ctk", ["runtime", "configure", "--runtime=docker"])
    restart = ("systemctl", ["restart", "docker"])
    assert order.index(configure) < order.index(restart)
    assert _argvs(result, "docker").count(["pull", "-q", IMAGE]) == 1
    # The apt cache is cleaned after the work that filled it, before the ready report.
    clean = next(i for i, (cmd, argv) in enumerate(order) if cmd == "apt-get" and "clean" in argv)
    assert clean > max(i for i, (cmd, argv) in enumerate(order) if cmd == "docker" and argv[:1] == ["pull"])

    host = sandbox.host_state()["docker"]
    assert host["installed"] and host["nvidia_configured"] and "nvidia" in host["runtimes"]
    assert host["images"] == [IMAGE]

    assert result.phases == list(BAKE_PHASES)
    assert _ga_phases(result) == list(BAKE_PHASES)
    last = _last(result)
    assert last.phase == boot_protocol.PHASE_READY and IMAGE in last.detail
    assert len({r.boot_id for r in _reports(result)}) == 1
    lines = [line for line in result.log.splitlines() if " qwen36: " in line]
    assert lines and all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ qwen36: ", line) for line in lines)


SIGNED = (
    "linux-modules-nvidia-580-server-open-5.19.0-1022-gcp",
    "nvidia-utils-580-server",
    "libnvidia-compute-580-server",
)


def test_the_bake_installs_canonicals_signed_modules_and_records_it(make_sandbox: Any, script: str) -> None:
    sandbox = _use_bake_stubs(make_sandbox())
    sandbox.edit_host(lambda host: host["apt_available"].extend(SIGNED))
    result = _bake(sandbox, script)
    assert result.rc == 0, result.log
    installs = [a for a in _argvs(result, "apt-get") if "install" in a and SIGNED[0] in a]
    # A dry run first, then the install, for the running kernel's package and its user-space.
    assert ["-s" in a for a in installs] == [True, False]
    assert all(set(SIGNED) <= set(a) for a in installs)
    assert (sandbox.state_dir / "signed-driver").read_text() == "installed\n"
    assert result.phases == list(BAKE_PHASES)


def test_a_kernel_without_signed_modules_keeps_the_image_as_it_was(make_sandbox: Any, script: str) -> None:
    sandbox = _use_bake_stubs(make_sandbox())
    result = _bake(sandbox, script)
    assert result.rc == 0, result.log
    installs = [a for a in _argvs(result, "apt-get") if "install" in a and SIGNED[0] in a]
    assert [("-s" in a) for a in installs] == [True]
    marker = (sandbox.state_dir / "signed-driver").read_text()
    assert marker.startswith(f"no installable {SIGNED[0]}") and "5.19.0-1022-gcp" in marker
    assert _last(result).phase == boot_protocol.PHASE_READY


def test_second_run_does_only_what_is_missing(make_sandbox: Any, script: str) -> None:
    sandbox = _use_bake_stubs(make_sandbox())
    assert _bake(sandbox, script).rc == 0
    again = _bake(sandbox, script)
    assert again.rc == 0, again.log
    assert not any(_is_install_of(a, "docker.io") for a in _argvs(again, "apt-get"))
    assert _argvs(again, "nvidia-ctk") == []
    assert not [a for a in _argvs(again, "docker") if a[:1] == ["pull"]]
    assert "image already pulled" in again.log
    assert again.phases[-1] == boot_protocol.PHASE_READY


@pytest.mark.slow
def test_a_server_booted_from_the_baked_disk_skips_the_docker_work(make_sandbox: Any, script: str) -> None:
    """The point of the image: the boot script's own checks find docker, runtime and image present."""
    baked = _use_bake_stubs(make_sandbox())
    assert _bake(baked, script).rc == 0
    ready = baked.boot_until_ready()
    server_boots = baked.boots[1:]
    for boot in server_boots:
        assert not any(_is_install_of(a, "docker.io") for a in boot.commands("apt-get"))
        assert boot.commands("nvidia-ctk") == []
        assert not [a for a in boot.commands("docker") if a[:1] == ["pull"]]
    assert any("already present" in d for d in ready.details("prepare"))
    assert ready.phases[-1] == boot_protocol.PHASE_READY

    # The same boots on a stock VM do install and pull: the checks above can fail.
    stock = make_sandbox()
    stock.boot_until_ready()
    stock_calls = [c for boot in stock.boots for c in boot.calls]
    assert any(c["cmd"] == "apt-get" and _is_install_of(c["argv"], "docker.io") for c in stock_calls)
    assert any(c["cmd"] == "docker" and c["argv"][:1] == ["pull"] for c in stock_calls)


def test_a_pull_that_keeps_failing_is_bounded_and_reported(make_sandbox: Any, script: str) -> None:
    sandbox = _use_bake_stubs(make_sandbox())
    (sandbox.host / "fail-pull").touch()
    result = _bake(sandbox, script)
    assert result.rc != 0
    assert len([a for a in _argvs(result, "docker") if a[:1] == ["pull"]]) == 3
    assert _ga_phases(result)[-1] == boot_protocol.PHASE_FAILED
    assert _last(result).detail.startswith("bake-pull failed")
    # A failed bake never cleans up or claims readiness.
    assert boot_protocol.PHASE_READY not in result.phases
    assert "bake-clean" not in result.phases


def test_a_docker_daemon_that_never_answers_is_bounded_and_reported(make_sandbox: Any, script: str) -> None:
    sandbox = _use_bake_stubs(make_sandbox())
    (sandbox.host / "docker-dead").touch()
    result = _bake(sandbox, script)
    assert result.rc != 0
    assert _argvs(result, "docker").count(["info"]) == 30
    assert "docker did not answer after 30 polls" in result.log
    assert _last(result).detail.startswith("bake-docker failed")
    assert _ga_phases(result)[-1] == boot_protocol.PHASE_FAILED


def test_reports_are_best_effort_when_the_metadata_server_is_unreachable(tmp_path: Path, script: str) -> None:
    # A closed loopback port: every report fails at once; the bake itself must still finish.
    unreachable = SimpleNamespace(url="http://127.0.0.1:9", writes=[], on_write=None)
    sandbox = Sandbox(
        root=tmp_path / "vm",
        script=script,
        metadata=unreachable,  # type: ignore[arg-type]
        gcs_endpoint="http://127.0.0.1:9",
        hf_endpoint="http://127.0.0.1:9",
        secrets={},
    )
    _use_bake_stubs(sandbox)
    result = sandbox.boot()
    assert result.rc == 0, result.log
    assert "warning: could not write the guest attribute report" in result.log
    assert sandbox.host_state()["docker"]["images"] == [IMAGE]


def test_rendering_is_deterministic_and_quoted(script: str) -> None:
    assert render_bake_script(StackConfig()) == script
    assert f"SERVER_IMAGE={shell_quote(IMAGE)}\n" in script
    assert script.startswith("#!/bin/bash\n")
    assert script.endswith("\n" + LIB_PATH.read_text() + "\n" + BODY_PATH.read_text())
    other = render_bake_script(StackConfig(llama_cpp_build=11000))
    assert "server-cuda-b11000" in other
    assert bake_script_hash(other) != bake_script_hash(script)


def test_shell_quote_survives_bash() -> None:
    tricky = 'it\'s $(not) `run` "here"; \\ ok'
    out = subprocess.run(
        ["bash", "-c", f'v={shell_quote(tricky)}; printf %s "$v"'], capture_output=True, text=True, check=True
    )
    assert out.stdout == tricky


def test_rendered_script_body_and_shared_lib_are_shellcheck_clean(tmp_path: Path, script: str) -> None:
    rendered = tmp_path / "bake.sh"
    rendered.write_text(script)
    result = subprocess.run(
        [str(SHELLCHECK), "--severity=style", str(rendered), str(BODY_PATH), str(LIB_PATH)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
