"""A member without an external IP (issue 30): the real rendered boot script under bash, on a machine
whose only reachable endpoints are the metadata server and Google's APIs (the GCS emulator; the hub's
address answers nothing, as the internet does without Cloud NAT). On the baked image with the model in
the bucket it serves without reaching out; the hub path and the stock-image path fail in one line
that names Cloud NAT."""

from __future__ import annotations

from tests.boot.sandbox import Sandbox, free_port
from tests.boot.world import SandboxFactory

NAT = "this VM has no external IP and reaches the internet only through the stack's Cloud NAT"


def _no_internet(sandbox: Sandbox) -> Sandbox:
    # A closed loopback port: connection refused, as a VM without NAT meets any internet address.
    sandbox.hf_endpoint = f"http://127.0.0.1:{free_port()}"
    sandbox.edit_host(lambda host: host.update(pypi_reachable=False))
    # ECC off by a GPU reset, so that one boot shows the whole path (no reboot in between).
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    return sandbox


def test_a_restart_on_the_baked_image_serves_from_the_bucket_without_the_internet(
    make_sandbox: SandboxFactory,
) -> None:
    sandbox = _no_internet(make_sandbox(cached=True))
    sandbox.bake_tooling_image()
    result = sandbox.boot()
    assert result.rc == 0, result.log
    assert sandbox.last_report().phase == "ready" and sandbox.health() == 200
    # Nothing went to the internet: no apt, no registry pull, no hub client, no pip.
    assert not [a for a in result.commands("apt-get") if "install" in a]
    assert not [a for a in result.commands("docker") if a[:1] == ["pull"]]
    assert not [c for c in result.calls if c["cmd"] in ("pip", "python3", "hf")]
    assert NAT not in result.log


def test_the_hub_path_without_nat_fails_in_one_line_naming_it(make_sandbox: SandboxFactory) -> None:
    sandbox = _no_internet(make_sandbox(cached=False))
    sandbox.bake_tooling_image()
    result = sandbox.boot()
    assert result.rc == 1, result.log
    report = sandbox.last_report()
    assert report.phase == "failed" and report.detail.startswith("model: ")
    assert NAT in report.detail and "\n" not in report.detail


def test_the_stock_image_path_without_nat_fails_in_one_line_naming_it(make_sandbox: SandboxFactory) -> None:
    sandbox = _no_internet(make_sandbox(cached=True))
    # apt without a route: the archive answers nothing, so the package cannot be found.
    sandbox.edit_host(
        lambda host: host.update(apt_available=[p for p in host["apt_available"] if p != "docker.io"])
    )
    result = sandbox.boot()
    assert result.rc == 1, result.log
    report = sandbox.last_report()
    assert report.phase == "failed"
    assert "apt-get install docker.io exited 100 (the stock image's path)" in report.detail
    assert NAT in report.detail


def test_a_kernel_upgrade_on_a_secure_boot_image_recovers_with_the_signed_module(
    make_sandbox: SandboxFactory,
) -> None:
    """A member of an image whose bake put Canonical's signed module in place: the recovery after a
    kernel upgrade installs Canonical's build for the new kernel, never a DKMS build Secure Boot refuses."""
    sandbox = make_sandbox()
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    sandbox.state_dir.mkdir(parents=True, exist_ok=True)
    (sandbox.state_dir / "signed-driver").write_text("installed\n")
    sandbox.kernel_upgrade()
    signed = "linux-modules-nvidia-580-server-open-5.19.0-1030-gcp"
    sandbox.edit_host(lambda host: host["apt_available"].append(signed))
    result = sandbox.boot()
    assert result.rc == 0, result.log
    installs = [a for a in result.commands("apt-get") if "install" in a]
    assert installs and installs[0][-1] == signed
    assert not [a for a in installs if "nvidia-dkms-580-server-open" in a]
    assert result.details("driver")[-1] == f"driver recovered with {signed}: NVIDIA L4"
