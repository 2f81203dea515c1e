"""The bake's GPU test (startup/verify_gpu.sh), the real rendered script under bash, with stubs of the
commands it reads (mokutil, nvidia-smi, modinfo, docker) and of the metadata server's guest-attribute
PUT (curl): each candidate gets its verdict, and the deployer's reading of it (infra/shielded.py)
gives the template's Secure Boot setting."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from infra import shielded
from infra.bake_script import KEY_PLAIN, KEY_SECURE_BOOT, render_verify_script
from infra.config import StackConfig
from infra.llama_cpp import server_image

IMAGE = server_image(StackConfig().llama_cpp_build)
# What the real commands print (mokutil(1); nvidia-smi -L; modinfo(8) -F signer on a Canonical-signed
# module; llama-server --list-devices of the pinned build, common/arg.cpp).
SB_ON = "SecureBoot enabled"
SB_OFF = "SecureBoot disabled"
SMI_L4 = "GPU 0: NVIDIA L4 (UUID: GPU-0001)"
SMI_FAIL = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
SIGNER = "Canonical Ltd. Kernel Module Signing"
DEVICES = "Available devices:\n  CUDA0: NVIDIA L4 (22478 MiB, 22187 MiB free)"


def _stub(bin_dir: Path, name: str, out: str, rc: int = 0) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{out}\nEOF\nexit {rc}\n")
    path.chmod(0o755)


def _run(tmp_path: Path, *, sb: str, smi: tuple[str, int], signer: str, devices: tuple[str, int],
         driver: str | None = "installed") -> dict[str, str]:  # fmt: skip
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    if driver is not None:
        (state / "signed-driver").write_text(driver + "\n")
    _stub(bin_dir, "mokutil", sb)
    _stub(bin_dir, "nvidia-smi", *smi)
    _stub(bin_dir, "modinfo", signer)
    _stub(bin_dir, "docker", *devices)
    # The metadata server's guest-attribute PUT: the last URL segment is the key, --data the value.
    written = tmp_path / "written"
    (bin_dir / "curl").write_text(
        "#!/bin/bash\n"
        "while (($#)); do case $1 in --data) value=$2; shift;; http*) url=$1;; esac; shift; done\n"
        f'printf "%s=%s\\n" "${{url##*/}}" "$value" >>{written}\n'
    )
    (bin_dir / "curl").chmod(0o755)
    script = tmp_path / "verify.sh"
    script.write_text(render_verify_script(StackConfig()))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "QWEN36_STATE_DIR": str(state), "HOME": str(tmp_path)}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = written.read_text().splitlines() if written.exists() else []
    assert len(lines) == 1, lines
    key, _, value = lines[0].partition("=")
    assert f"qwen36: gpu-test {key}={value}" in done.stdout
    return {key: value}


def test_a_candidate_whose_nvidia_smi_fails_keeps_secure_boot_off(tmp_path: Path) -> None:
    got = _run(tmp_path, sb=SB_ON, smi=(SMI_FAIL, 9), signer=SIGNER, devices=(DEVICES, 0))
    verdict = got[KEY_SECURE_BOOT]
    assert verdict.startswith("no-gpu ") and "couldn't communicate" in verdict
    decision = shielded.from_verdict(verdict.split()[0])
    assert not decision.on and decision.labels == {"secure-boot-off": "no-gpu"}
    assert decision.reason_line.startswith("Secure Boot off: nvidia-smi on the bake's Secure Boot test VM")


def test_a_candidate_whose_module_is_unsigned_keeps_secure_boot_off(tmp_path: Path) -> None:
    got = _run(tmp_path, sb=SB_ON, smi=(SMI_L4, 0), signer="", devices=(DEVICES, 0))
    assert got[KEY_SECURE_BOOT].startswith("unsigned ")
    assert shielded.from_verdict("unsigned").labels == {"secure-boot-off": "unsigned"}


def test_a_candidate_that_passes_turns_secure_boot_on(tmp_path: Path) -> None:
    got = _run(tmp_path, sb=SB_ON, smi=(SMI_L4, 0), signer=SIGNER, devices=(DEVICES, 0))
    verdict = got[KEY_SECURE_BOOT]
    assert verdict.startswith("on ") and SIGNER in verdict and "NVIDIA L4" in verdict
    decision = shielded.from_verdict(verdict.split()[0])
    assert decision.on and decision.labels == {} and decision.reason_line == ""


def test_a_container_that_finds_no_cuda_device_keeps_secure_boot_off(tmp_path: Path) -> None:
    got = _run(tmp_path, sb=SB_ON, smi=(SMI_L4, 0), signer=SIGNER, devices=("no usable GPU found", 1))
    assert got[KEY_SECURE_BOOT].startswith("no-cuda ")


def test_without_the_signed_driver_secure_boot_is_not_tried(tmp_path: Path) -> None:
    got = _run(
        tmp_path, sb=SB_ON, smi=(SMI_L4, 0), signer=SIGNER, devices=(DEVICES, 0), driver="no installable x"
    )
    assert got[KEY_SECURE_BOOT].startswith("no-signed-driver ") and "no installable x" in got[KEY_SECURE_BOOT]


@pytest.mark.parametrize(("smi", "expected"), [((SMI_L4, 0), "ok "), ((SMI_FAIL, 9), "no-gpu ")])
def test_the_pass_without_secure_boot_proves_the_gpu_still_works(
    tmp_path: Path, smi: tuple[str, int], expected: str
) -> None:
    """The second pass (Secure Boot off): the members may run this image only if its GPU works here."""
    got = _run(tmp_path, sb=SB_OFF, smi=smi, signer="", devices=(DEVICES, 0))
    assert got[KEY_PLAIN].startswith(expected)


def test_an_unknown_or_missing_verdict_is_off() -> None:
    for verdict in (None, "", "maybe", "ON"):
        assert shielded.from_verdict(verdict) == shielded.SecureBoot(False, "unverified")
    assert all(os.sep not in code and code == code.lower() for code in shielded.OFF_REASONS)


def test_the_gpu_test_scripts_are_shellcheck_clean(tmp_path: Path) -> None:
    import sys

    from infra.tooling_image import GpuTest

    shellcheck = Path(sys.executable).parent / "shellcheck"
    test = GpuTest(
        "vm",
        "acme",
        ("us-central1-a", "us-central1-b"),
        "net",
        "sub",
        "sa@acme.iam.gserviceaccount.com",
        "img",
    )
    scripts = {
        "verify.sh": render_verify_script(StackConfig()),
        "step.sh": "#!/bin/bash\n" + test.script(StackConfig()),
    }
    for name, text in scripts.items():
        (tmp_path / name).write_text(text)
        done = subprocess.run([str(shellcheck), str(tmp_path / name)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout
