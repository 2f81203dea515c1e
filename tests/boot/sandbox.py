"""Run the real rendered boot script under bash, on a simulated VM in a temp dir.

Only what this machine cannot be is a stub (``tests/boot/stubs.py`` on PATH): the GPU, apt, the
kernel module, docker, gcloud, reboot, mount, the metadata server (``metadata_server.py``), and
``python3 -m venv`` with its ``pip install`` (PyPI is out of reach). Everything else is real: bash,
coreutils, curl, sha256sum, the file system, `gcloud storage` as a small real implementation
(tests/boot/gcloud_storage.py) against a GCS emulator, and huggingface_hub's `hf` against the loopback
hub (tests/cache/hf_server.py). The VM's tmpfs is a directory emptied at every power-off, and
/proc/meminfo says 32 GB, as on a g2-standard-8.

The image is the Deep Learning VM's: no `hf` on PATH, so the hub path installs it in a venv first,
as on a real first deployment (the pip stub links the venv's `hf` to the real one). ``hf_on_path``
gives an image that has it (the original write-up's reconstruction in bench/boot_bench.py assumes
one). awk is mawk where this machine has it: Ubuntu's default awk, the one the VM runs.

PATH holds the stubs, the programs "installed" so far, and links to a fixed list of real tools, so
nothing on this machine (its own docker client, apt-get, reboot) can be reached by accident.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra import boot_protocol
from tests.boot.metadata_server import MetadataServer, Write
from tests.boot.stubs import HF_PROGRAM, kill_session

STUBS = (
    "nvidia-smi", "apt-get", "dpkg", "modprobe", "systemctl", "nvidia-ctk", "reboot", "gcloud", "docker",
    "mount", "mountpoint", "uname",
)  # fmt: skip
# Installed on a stock Deep Learning VM image before any boot; docker is not.
PREINSTALLED = (
    "nvidia-smi", "apt-get", "dpkg", "modprobe", "systemctl", "nvidia-ctk", "reboot", "gcloud", "mount",
    "mountpoint", "uname",
)  # fmt: skip
# A g2-standard-8: 8 vCPUs, 32 GB. https://cloud.google.com/compute/docs/gpus#l4-gpus
MEMINFO = "MemTotal:       32873084 kB\nMemFree:        31000000 kB\nMemAvailable:   31500000 kB\n"
REAL_TOOLS = (
    "bash", "sh", "env", "cat", "date", "sleep", "curl", "grep", "head", "tail", "tr", "cut",
    "stat", "mv", "rm", "mkdir", "install", "chmod", "cmp", "sync", "flock", "timeout", "sha256sum",
    "sed", "ls", "id", "basename", "dirname", "touch", "cp", "true", "false", "wc", "nice", "ionice", "du",
)  # fmt: skip
STUB_PROGRAM = Path(__file__).resolve().parent / "stubs.py"
BOOT_TIMEOUT_S = 90.0
POLL_S = 0.02
_REPORT = re.compile(r"^(\S+) qwen36: phase=(\S+) ?(.*)$")


def system_awk() -> str:
    """mawk where it is installed (Ubuntu's default awk, so the VM's), else this machine's awk."""
    found = shutil.which("mawk") or shutil.which("awk")
    if found is None:
        raise RuntimeError("the boot sandbox needs awk on this machine")
    return found


def hf_version() -> str:
    """The huggingface_hub the pip stub can "install": the test venv's."""
    return importlib.metadata.version("huggingface_hub")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def base_python() -> str:
    """The interpreter behind this venv: the fetch tool and the stubs use the standard library only."""
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


@dataclass(frozen=True)
class Report:
    """A report as the journal shows it, published or not; ``t`` is when the line came out."""

    stamp: str
    phase: str
    detail: str
    t: float = 0.0


@dataclass
class BootResult:
    number: int
    rc: int | None
    killed: bool
    rebooted: bool
    log: str
    reports: list[Report]
    writes: list[Write]
    calls: list[dict[str, Any]]
    started: float
    ended: float

    @property
    def phases(self) -> list[str]:
        return [r.phase for r in self.reports]

    def details(self, phase: str) -> list[str]:
        return [r.detail for r in self.reports if r.phase == phase]

    def commands(self, cmd: str) -> list[list[str]]:
        return [c["argv"] for c in self.calls if c["cmd"] == cmd]

    def published(self) -> list[tuple[float, boot_protocol.Report]]:
        """The boot script's reports written to the guest attribute, parsed, with their arrival times."""
        return [(w.t, boot_protocol.parse_report(w.value)) for w in self.writes if _from_script(w)]

    def phase_writes(self) -> list[tuple[float, str]]:
        return [(t, r.phase) for t, r in self.published()]

    def ready_at(self) -> float | None:
        return next((t for t, phase in self.phase_writes() if phase == "ready"), None)

    def reported_at(self, phase: str, detail: Callable[[str], bool] = lambda _: True) -> float | None:
        """When the journal first showed such a report (published or not)."""
        return next((r.t for r in self.reports if r.phase == phase and detail(r.detail)), None)


@dataclass
class Sandbox:
    """One simulated VM (its disk, GPU, docker) plus the loopback services it talks to."""

    root: Path
    script: str
    metadata: MetadataServer
    gcs_endpoint: str
    hf_endpoint: str
    secrets: dict[str, str]
    bucket: str = ""
    time_scale: float = 0.01
    delays: dict[str, float] = field(default_factory=dict)
    fetch_delays: dict[str, float] = field(default_factory=dict)
    llama_server: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    boots: list[BootResult] = field(default_factory=list)

    hf_on_path: bool = False

    def __post_init__(self) -> None:
        self.host = self.root / "host"
        self.disk = self.root / "disk"
        self.state_dir = self.disk / "var/lib/qwen36"
        self.model_dir = self.state_dir / "models"
        self.ram_dir = self.root / "tmpfs" / "qwen36-model"
        for directory in (
            self.host / "stubs",
            self.host / "installed",
            self.host / "containers",
            self.root / "sysbin",
            self.root / "home",
            self.disk,
        ):
            directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.script_path = self.root / "startup-script.sh"
        self.script_path.write_text(self.script)
        self._write_host()
        self._link_tools()

    # ---- the simulated machine

    def _write_host(self) -> None:
        host = {
            "kernel": "5.19.0-1022-gcp",
            "gpu": {
                "uuid": "GPU-0001", "driver_version": "580.95.05", "driver_branch": "580",
                "ecc_current": "Enabled", "ecc_pending": "Enabled", "ecc_locked": False,
                "driver_loaded": True, "module_kernels": ["5.19.0-1022-gcp"],
            },
            "apt_available": ["docker.io", "nvidia-container-toolkit", "nvidia-dkms-580-server-open"],
            "docker": {
                "installed": False, "daemon_running": False, "nvidia_configured": False,
                "runtimes": [], "images": [], "containers": {},
            },
            "secrets": self.secrets,
            "reboot_requested": False,
        }  # fmt: skip
        (self.host / "host.json").write_text(json.dumps(host, indent=1))
        (self.host / "calls.jsonl").touch()
        (self.host / "meminfo").write_text(MEMINFO)
        (self.host / "loads.jsonl").touch()

    def _link_tools(self) -> None:
        python = base_python()
        for name in STUBS:
            wrapper = self.host / "stubs" / name
            wrapper.write_text(f'#!/bin/sh\nexec {python} -S {STUB_PROGRAM} {name} "$@"\n')
            wrapper.chmod(0o755)
        for name in PREINSTALLED:
            (self.host / "installed" / name).symlink_to(self.host / "stubs" / name)
        for name in REAL_TOOLS:
            found = shutil.which(name)
            if found is None:
                raise RuntimeError(f"the boot sandbox needs {name} on this machine")
            (self.root / "sysbin" / name).symlink_to(found)
        (self.root / "sysbin" / "awk").symlink_to(system_awk())
        # The image's python3, except `python3 -m venv`: the venv it makes is where pip installs
        # from PyPI, which the sandbox cannot reach (the stubs' venv and pip stand in).
        wrapper = self.root / "sysbin" / "python3"
        wrapper.write_text(
            '#!/bin/sh\nif [ "$1" = "-m" ] && [ "$2" = venv ]; then\n'
            f'  exec {python} -S {STUB_PROGRAM} python3 "$@"\nfi\nexec {python} "$@"\n'
        )
        wrapper.chmod(0o755)
        # huggingface_hub's own CLI from the test venv: what the pip stub installs for the hub path.
        hf = Path(sys.executable).parent / "hf"
        program = self.host / HF_PROGRAM
        if self.fetch_delays.get("hf"):
            # Benchmark only: a hub download that succeeded takes as long as the measured transfer.
            seconds = self.fetch_delays["hf"]
            program.write_text(f'#!/bin/bash\n{hf} "$@"\nrc=$?\n((rc != 0)) || sleep {seconds}\nexit $rc\n')
            program.chmod(0o755)
        else:
            program.symlink_to(hf)
        if self.hf_on_path:
            (self.root / "sysbin" / "hf").symlink_to(program)

    def host_state(self) -> dict[str, Any]:
        return json.loads((self.host / "host.json").read_text())

    def edit_host(self, change: Callable[[dict[str, Any]], None]) -> None:
        data = self.host_state()
        change(data)
        (self.host / "host.json").write_text(json.dumps(data, indent=1))

    def new_host(self, uuid: str = "GPU-0002") -> None:
        """A spot restart on another physical machine: the boot disk moves, the GPU is a new one."""

        def change(host: dict[str, Any]) -> None:
            host["gpu"].update(uuid=uuid, ecc_current="Enabled", ecc_pending="Enabled")

        self.edit_host(change)

    def bake_tooling_image(self, image: str = "ghcr.io/ggml-org/llama.cpp:server-cuda-b11434") -> None:
        """The tooling image: docker with the nvidia runtime and the server image already on disk."""

        def change(host: dict[str, Any]) -> None:
            host["docker"].update(installed=True, nvidia_configured=True, images=[image])

        self.edit_host(change)
        (self.host / "installed" / "docker").symlink_to(self.host / "stubs" / "docker")

    def kernel_upgrade(self, *, driver_package_available: bool = True) -> None:
        """Unattended upgrades moved the kernel; the NVIDIA module was built for the old one."""

        def change(host: dict[str, Any]) -> None:
            host["kernel"] = "5.19.0-1030-gcp"
            if not driver_package_available:
                host["apt_available"] = [p for p in host["apt_available"] if not p.startswith("nvidia-dkms")]

        self.edit_host(change)

    # ---- running boots

    def env(self, number: int, kill_at_call: str | None) -> dict[str, str]:
        # host/stubs holds every stub, installed or not; only those linked into host/installed are found.
        path = ":".join(str(p) for p in (self.host / "installed", self.root / "sysbin"))
        env = {
            "PATH": path,
            "HOME": str(self.root / "home"),
            "LANG": "C.UTF-8",
            "QWEN36_STATE_DIR": str(self.state_dir),
            "QWEN36_METADATA_URL": self.metadata.url,
            "QWEN36_HEALTH_URL": f"http://127.0.0.1:{self.port}/health",
            "QWEN36_TIME_SCALE": repr(self.time_scale),
            "QWEN36_BOOT_EPOCH": str(int(time.time())),
            "STORAGE_EMULATOR_HOST": self.gcs_endpoint,
            "HF_ENDPOINT": self.hf_endpoint,
            "QWEN36_SANDBOX_HOST": str(self.host),
            "QWEN36_SANDBOX_BOOT": str(number),
            "QWEN36_SANDBOX_DELAYS": json.dumps(self.delays),
            "QWEN36_SANDBOX_HTTP_PORT": str(self.port),
            "QWEN36_DPKG_DIR": str(self.disk / "var/lib/dpkg"),
            # The kernel's boot id changes on every boot (a new one per simulated power-on).
            "QWEN36_BOOT_ID": f"{number}-{uuid.uuid4()}",
            "QWEN36_SANDBOX_PYTHON": sys.executable,
            "QWEN36_SANDBOX_HF_VERSION": hf_version(),
            "QWEN36_MODEL_RAM_DIR": str(self.ram_dir),
            "QWEN36_SANDBOX_RAM_DIR": str(self.ram_dir),
            "QWEN36_MEMINFO": str(self.host / "meminfo"),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_UPDATE_CHECK": "1",
            "HF_HOME": str(self.root / "home" / "hf"),
        }
        env.update(self.extra_env)
        if kill_at_call:
            env["QWEN36_SANDBOX_KILL_AT"] = kill_at_call
        if self.llama_server is not None:
            env["QWEN36_SANDBOX_LLAMA_SERVER"] = str(self.llama_server)
        return env

    def _machine_event(self, event: str, env: dict[str, str]) -> None:
        subprocess.run([base_python(), "-S", str(STUB_PROGRAM), event], env=env, check=True, timeout=30)

    def boot(
        self,
        *,
        kill_at_phase: str | None = None,
        kill_at_call: str | None = None,
        kill_when: Callable[[], bool] | None = None,
        reboot_delay_s: float = 0.0,
        timeout: float = BOOT_TIMEOUT_S,
    ) -> BootResult:
        """Power-cycle the VM (a first boot just powers on) and run the startup script once.

        ``kill_at_phase`` cuts the power the moment that phase is reported, ``kill_at_call`` right
        after a stub call starting with that text (e.g. ``"docker run"``), ``kill_when`` as soon as
        the predicate holds.
        """
        number = len(self.boots) + 1
        env = self.env(number, kill_at_call)
        if self.boots:
            self._machine_event("_power_off", env)
            self.wipe_tmpfs()
            time.sleep(reboot_delay_s)
        started = time.time()
        env["QWEN36_BOOT_EPOCH"] = str(int(started))
        self._machine_event("_power_on", env)
        first_write = len(self.metadata.writes)
        log_path = self.root / f"boot-{number}.log"
        killed = False
        lines: list[tuple[float, str]] = []
        with log_path.open("w") as log:
            process = subprocess.Popen(
                ["bash", str(self.script_path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                cwd=self.root, start_new_session=True,
            )  # fmt: skip

            def cut(write: Write) -> None:
                nonlocal killed
                if _from_script(write) and boot_protocol.parse_report(write.value).phase == kill_at_phase:
                    killed = True
                    _killpg(process.pid)

            def journal() -> None:
                # Every line with the moment it came out; a report the ration kept off the guest
                # attributes still cuts the power at its phase, from its journal line.
                nonlocal killed
                assert process.stdout is not None
                for raw in process.stdout:
                    text = raw.decode(errors="replace")
                    lines.append((time.time(), text.rstrip("\n")))
                    log.write(text)
                    log.flush()
                    match = _REPORT.match(text.rstrip("\n"))
                    if kill_at_phase and match and match[2] == kill_at_phase:
                        killed = True
                        _killpg(process.pid)

            reader = threading.Thread(target=journal, daemon=True)
            reader.start()
            self.metadata.on_write = cut if kill_at_phase else None
            deadline = time.monotonic() + timeout
            try:
                while process.poll() is None:
                    if kill_when is not None and kill_when():
                        killed = True
                        _killpg(process.pid)
                    if time.monotonic() > deadline:
                        _killpg(process.pid)
                        process.wait()
                        reader.join(timeout=5)
                        raise TimeoutError(f"boot {number} ran past {timeout} s:\n{log_path.read_text()}")
                    time.sleep(POLL_S)
            finally:
                self.metadata.on_write = None
                _killpg(process.pid)
                reader.join(timeout=5)
        ended = time.time()
        calls = [c for c in self.calls() if c["boot"] == number]
        killed = killed or any(c["cmd"] == "power-cut" for c in calls)
        text = log_path.read_text()
        reports = [(t, _REPORT.match(line)) for t, line in lines]
        result = BootResult(
            number=number,
            rc=process.returncode,
            killed=killed,
            rebooted=self.host_state()["reboot_requested"],
            log=text,
            reports=[Report(m[1], m[2], m[3], t) for t, m in reports if m],
            writes=self.metadata.writes[first_write:],
            calls=calls,
            started=started,
            ended=ended,
        )
        self.boots.append(result)
        return result

    def boot_until_ready(self, max_boots: int = 4) -> BootResult:
        for _ in range(max_boots):
            result = self.boot()
            if result.rc == 0 and not result.rebooted:
                return result
        raise AssertionError(f"no ready boot in {max_boots}:\n{self.boots[-1].log}")

    def shutdown(self) -> None:
        self._machine_event("_power_off", self.env(0, None))
        self.wipe_tmpfs()

    def wipe_tmpfs(self) -> None:
        """tmpfs does not survive a power-off."""
        shutil.rmtree(self.ram_dir, ignore_errors=True)

    def ram_files(self) -> list[Path]:
        return sorted(self.ram_dir.iterdir()) if self.ram_dir.exists() else []

    # ---- what the tests read

    def calls(self) -> list[dict[str, Any]]:
        lines = (self.host / "calls.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    def loads(self, container: str | None = "llama-server") -> list[dict[str, Any]]:
        """The stand-in's loads of the production container (``None``: every container's, the
        calibration's servers included)."""
        lines = (self.host / "loads.jsonl").read_text().splitlines()
        entries = [json.loads(line) for line in lines]
        return [e for e in entries if container is None or e.get("container") == container]

    def containers(self) -> dict[str, Any]:
        containers: dict[str, Any] = self.host_state()["docker"]["containers"]
        return containers

    def guest_attributes(self, namespace: str = "qwen36") -> dict[str, str]:
        return {k: v for (ns, k), v in self.metadata.attributes.items() if ns == namespace}

    def last_report(self) -> boot_protocol.Report:
        """What the deployer reads now: the one report key, parsed."""
        return boot_protocol.parse_report(self.guest_attributes()[boot_protocol.KEY_REPORT])

    def container_log(self, name: str = "llama-server") -> str:
        path = self.host / "containers" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def model_files(self) -> list[Path]:
        return sorted(p for p in self.model_dir.iterdir()) if self.model_dir.exists() else []

    def health(self) -> int | None:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as reply:
                return int(reply.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return None


def _is_report(write: Write) -> bool:
    return write.namespace == boot_protocol.NAMESPACE and write.key == boot_protocol.KEY_REPORT


def _from_script(write: Write) -> bool:
    """A report the boot script wrote (with curl); the download's progress comes from the fetch tool."""
    return _is_report(write) and write.agent.startswith("curl/")


def _killpg(sid: int) -> None:
    """Cut the power on a boot: every process of the script's session, whatever its process group."""
    kill_session(sid)
