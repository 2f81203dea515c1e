"""The boot sandbox's stand-ins for what this machine cannot be: the GPU, the package manager, docker,
gcloud, PyPI (``python3 -m venv`` and its pip) and the power switch. One program, dispatched on its
first argument by small wrappers on PATH.

State lives in JSON files under ``$QWEN36_SANDBOX_HOST`` so it persists across simulated boots the way
the real machine's does (the GPU's ECC mode, the installed packages, docker's images and containers).
Every call is appended to ``calls.jsonl`` with its time, so tests assert what the boot script did and
when. Standard library only: the wrappers run it with whatever python3 the sandbox found.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

HOST = Path(os.environ.get("QWEN36_SANDBOX_HOST", "."))
STUB_DIR = Path(__file__).resolve().parent
FAKE_CONTAINER = STUB_DIR / "fake_container.py"
# A container process gets this long to exit on SIGTERM before SIGKILL, like `docker stop -t`.
STOP_GRACE_S = 2.0
KILL_ROUNDS = 10
# The exit code a container gets when its supervisor was killed before it could record one.
UNKNOWN_EXIT = 255
# Under the host directory: the `hf` the pip stub links into the venv it "installs" (the sandbox
# writes it: the test venv's own `hf`, or a shim that adds the benchmark's transfer time).
HF_PROGRAM = "hf-program"

DRIVER_FAILED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)


def delays() -> dict[str, float]:
    return {k: float(v) for k, v in json.loads(os.environ.get("QWEN36_SANDBOX_DELAYS", "{}")).items()}


@contextmanager
def state() -> Iterator[dict[str, Any]]:
    """Read-modify-write of the host state under a lock (the two parallel boot jobs call stubs at once)."""
    path = HOST / "host.json"
    with (HOST / "host.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text())
        yield data
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)


def read_state() -> dict[str, Any]:
    with state() as data:
        return data


def record(cmd: str, argv: list[str], **extra: Any) -> None:
    entry = {
        "t": time.time(),
        "boot": int(os.environ.get("QWEN36_SANDBOX_BOOT", "0")),
        "cmd": cmd,
        "argv": argv,
        # gcloud's properties as the command saw them (CLOUDSDK_<SECTION>_<PROPERTY>).
        # https://cloud.google.com/sdk/docs/properties (setting properties with environment variables)
        "env": {k: v for k, v in os.environ.items() if k.startswith("CLOUDSDK_")},
    }
    entry.update(extra)
    with (HOST / "calls.jsonl").open("a") as log:
        fcntl.flock(log, fcntl.LOCK_EX)
        log.write(json.dumps(entry) + "\n")


def kill_point(cmd: str, argv: list[str]) -> None:
    """Cut the power right after this call when the test asked for it (the whole boot dies at once)."""
    wanted = os.environ.get("QWEN36_SANDBOX_KILL_AT", "")
    if wanted and " ".join([cmd, *argv]).startswith(wanted):
        record("power-cut", [wanted])
        kill_session(os.getsid(0))


def _session_members(sid: int) -> list[int]:
    members = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(stat_file.parent.name))
    return members


def kill_session(sid: int) -> None:
    """SIGKILL every process of the boot's session: `timeout` puts its child in a group of its own.

    Repeated a few times, since a shell may fork between one scan and its kill.
    """
    me = os.getpid()
    for _ in range(KILL_ROUNDS):
        members = [pid for pid in _session_members(sid) if pid != me]
        if not members:
            break
        for pid in members:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    if os.getsid(0) == sid:
        os.kill(me, signal.SIGKILL)


def err(message: str, code: int) -> int:
    print(message, file=sys.stderr)
    return code


def install_link(name: str) -> None:
    link = HOST / "installed" / name
    if not link.exists():
        link.symlink_to(HOST / "stubs" / name)


# ------------------------------------------------------------------------------------- nvidia-smi


def gpu_reset() -> int:
    # A GPU reset applies a pending ECC change without a reboot, where the host allows it and no
    # process holds the GPU. https://docs.nvidia.com/deploy/nvidia-smi/index.html
    with state() as host:
        gpu = host["gpu"]
        if not gpu["driver_loaded"]:
            return err(DRIVER_FAILED, 9)
        if not gpu.get("reset_supported") or _gpu_holders(host):
            return err(
                "Unable to reset GPU 00000000:00:03.0 because it's being used by some other process "
                "or it is not supported on this platform.",
                255,
            )
    # A refusal is immediate; a reset takes its time (tests/boot/durations.py). It holds the GPU,
    # not the machine: the host state stays unlocked meanwhile, so the jobs beside it go on.
    time.sleep(delays().get("gpu_reset", 0))
    with state() as host:
        host["gpu"]["ecc_current"] = host["gpu"]["ecc_pending"]
    print("GPU 00000000:00:03.0 was successfully reset.\nAll done.")
    return 0


def nvidia_smi(argv: list[str]) -> int:
    if argv[:1] == ["-r"]:
        return gpu_reset()
    with state() as host:
        gpu = host["gpu"]
        if not gpu["driver_loaded"]:
            return err(DRIVER_FAILED, 9)
        if any(a.startswith("--query-compute-apps=") for a in argv):
            for pid in _gpu_holders(host):
                print(pid)
            return 0
        if argv[:2] == ["-e", "0"]:
            if gpu["ecc_locked"]:
                return err("Unable to set the ECC mode for GPU 00000000:00:03.0: Not Supported", 3)
            gpu["ecc_pending"] = "Disabled"
            print("Disabled ECC support for GPU 00000000:00:03.0.\nAll done.\nReboot required.")
            return 0
        query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    if query is None:
        print(f"| NVIDIA L4   Driver Version: {gpu['driver_version']}   ECC: {gpu['ecc_current']} |")
        return 0
    values = {
        "name": "NVIDIA L4",
        "driver_version": gpu["driver_version"],
        "ecc.mode.current": gpu["ecc_current"],
        "ecc.mode.pending": gpu["ecc_pending"],
        "uuid": gpu["uuid"],
        "memory.total": "24570 MiB" if gpu["ecc_current"] == "Disabled" else "23034 MiB",
    }
    print(", ".join(values[q] for q in query.split(",")))
    return 0


def _gpu_holders(host: dict[str, Any]) -> list[int]:
    """Running GPU containers, plus ``other_holders`` (another process on the GPU)."""
    containers = host["docker"]["containers"].values()
    running = [c["pid"] for c in containers if c.get("running") and c.get("gpus") and c.get("pid")]
    return running + list(host["gpu"].get("other_holders", []))


def mount(argv: list[str]) -> int:
    """Only the boot script's tmpfs: recorded, so `mountpoint` answers until the next power-off."""
    if argv[:2] != ["-t", "tmpfs"]:
        return err(f"mount: the sandbox only mounts tmpfs, not {argv}", 32)
    with state() as host:
        host.setdefault("mounts", []).append(argv[-1])
    return 0


def mountpoint(argv: list[str]) -> int:
    with state() as host:
        return 0 if argv[-1] in host.get("mounts", []) else 32


# --------------------------------------------------------------------------- packages and the kernel


DPKG_INTERRUPTED = (
    "E: dpkg was interrupted, you must manually run 'dpkg --configure -a' to correct the problem."
)


def dpkg_journal() -> Path:
    """dpkg's journal of a run in progress: apt refuses to work while it holds an entry
    (apt-pkg/deb/debsystem.cc, CheckUpdates)."""
    return Path(os.environ["QWEN36_DPKG_DIR"]) / "updates"


def dpkg_interrupted() -> bool:
    journal = dpkg_journal()
    return journal.is_dir() and any(p.name.isdigit() for p in journal.iterdir())


def dpkg_unpack(package: str) -> None:
    """dpkg's unpack of one package: a journal entry while it runs; the power may be cut inside."""
    journal = dpkg_journal()
    journal.mkdir(parents=True, exist_ok=True)
    entry = journal / "0000"
    entry.write_text(f"unpacking {package}\n")
    kill_point("dpkg-unpack", [package])
    entry.unlink()


def dpkg(argv: list[str]) -> int:
    if "--configure" not in argv or "-a" not in argv:
        return err(f"dpkg: the sandbox stub does not implement {argv}", 2)
    for entry in dpkg_journal().glob("*") if dpkg_journal().is_dir() else []:
        entry.unlink()
    return 0


def apt_get(argv: list[str]) -> int:
    words = [a for a in argv if not a.startswith("-") and "::" not in a]
    if not words:
        return err("E: no operation", 100)
    if dpkg_interrupted():
        return err(DPKG_INTERRUPTED, 100)
    if words[0] == "update":
        return 0
    if words[0] != "install":
        return err(f"E: Invalid operation {words[0]}", 100)
    for package in words[1:]:
        with state() as host:
            branch = host["gpu"]["driver_branch"]
            available = host["apt_available"]
        if package not in available:
            return err(f"E: Unable to locate package {package}", 100)
        dpkg_unpack(package)
        if package == "docker.io":
            time.sleep(delays().get("apt_docker", 0))
            with state() as host:
                host["docker"]["installed"] = True
                host["docker"]["daemon_running"] = True  # the package's postinst starts the daemon
            install_link("docker")
        elif package == "nvidia-container-toolkit":
            install_link("nvidia-ctk")
        elif package.startswith(f"linux-modules-nvidia-{branch}-server-open-"):
            # Canonical's signed module, built for the one kernel its name ends with.
            with state() as host:
                built_for = package.removeprefix(f"linux-modules-nvidia-{branch}-server-open-")
                if built_for not in host["gpu"]["module_kernels"]:
                    host["gpu"]["module_kernels"].append(built_for)
        elif package == f"nvidia-dkms-{branch}-server-open":
            time.sleep(delays().get("dkms", 0))
            with state() as host:
                kernel = host["kernel"]
                if kernel not in host["gpu"]["module_kernels"]:
                    host["gpu"]["module_kernels"].append(kernel)
    return 0


def modprobe(argv: list[str]) -> int:
    if argv != ["nvidia"]:
        return err(f"modprobe: unexpected arguments {argv}", 1)
    with state() as host:
        if host["kernel"] not in host["gpu"]["module_kernels"]:
            return err(
                f"modprobe: FATAL: Module nvidia not found in directory /lib/modules/{host['kernel']}", 1
            )
        host["gpu"]["driver_loaded"] = True
    return 0


def systemctl(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "restart") or argv[1] not in ("docker", "docker.service"):
        return err(f"systemctl: unexpected arguments {argv}", 1)
    with state() as host:
        docker = host["docker"]
        if not docker["installed"]:
            return err("Failed to start docker.service: Unit docker.service not found.", 5)
        docker["daemon_running"] = True
        docker["runtimes"] = ["runc", "nvidia"] if docker["nvidia_configured"] else ["runc"]
    return 0


def nvidia_ctk(argv: list[str]) -> int:
    if argv[:2] != ["runtime", "configure"] or "--runtime=docker" not in argv:
        return err(f"nvidia-ctk: unexpected arguments {argv}", 1)
    with state() as host:
        host["docker"]["nvidia_configured"] = True  # written to daemon.json; applies on restart
    return 0


def reboot(argv: list[str]) -> int:
    with state() as host:
        host["reboot_requested"] = True
    return 0


def gcloud(argv: list[str]) -> int:
    if argv[:1] == ["storage"]:
        # A small real implementation against the GCS emulator, with the venv's google-crc32c.
        python = os.environ["QWEN36_SANDBOX_PYTHON"]
        os.execv(python, [python, str(STUB_DIR / "gcloud_storage.py"), *argv[1:]])  # noqa: S606 (no shell)
    if argv[:4] != ["secrets", "versions", "access", "latest"]:
        return err(f"gcloud: unexpected arguments {argv}", 2)
    options = dict(a[2:].split("=", 1) for a in argv[4:] if a.startswith("--") and "=" in a)
    time.sleep(delays().get("gcloud", 0))
    with state() as host:
        value = host["secrets"].get(f"{options.get('project')}/{options.get('secret')}")
        # A grant that applies ``secret_denied_for_s`` after the first read (IAM propagation).
        if "secret_denied_for_s" in host:
            host.setdefault("secret_denied_since", time.time())
            denied = time.time() < host["secret_denied_since"] + host["secret_denied_for_s"]
        else:
            denied = False
    if denied:
        # What gcloud prints for Secret Manager's 403 (a missing or not yet applied grant).
        return err(
            "ERROR: (gcloud.secrets.versions.access) PERMISSION_DENIED: Permission "
            "'secretmanager.versions.access' denied for resource "
            f"'projects/{options.get('project')}/secrets/{options.get('secret')}/versions/latest' "
            "(or it may not exist).",
            1,
        )
    if value is None:
        return err(f"ERROR: (gcloud.secrets.versions.access) NOT_FOUND: Secret [{options.get('secret')}]", 1)
    sys.stdout.write(value)
    return 0


# ------------------------------------------------------------------------------- python3 -m venv, pip


def venv(argv: list[str]) -> int:
    """``python3 -m venv DIR``: the directory a venv has, with a pip that is the stub below."""
    if argv[:2] != ["-m", "venv"] or len(argv) != 3:
        return err(f"python3: the sandbox stub does not implement {argv}", 2)
    directory = Path(argv[2])
    (directory / "bin").mkdir(parents=True, exist_ok=True)
    config = f"home = {Path(sys.executable).parent}\ninclude-system-site-packages = false\n"
    (directory / "pyvenv.cfg").write_text(config)
    pip = directory / "bin" / "pip"
    pip.write_text(
        f'#!/bin/sh\nQWEN36_SANDBOX_VENV={directory} exec {sys.executable} -S {__file__} pip "$@"\n'
    )
    pip.chmod(0o755)
    return 0


def pip(argv: list[str]) -> int:
    """The venv's ``pip install -q NAME[EXTRAS]==VERSION``: PyPI is out of reach, so the one version the
    sandbox has (the test venv's huggingface_hub, whose `hf` it links into the venv) or pip's own
    "no matching distribution" (pip/_internal/resolution/resolvelib/factory.py,
    _report_single_requirement_conflict)."""
    words = [a for a in argv if not a.startswith("-")]
    if words[:1] != ["install"] or len(words) != 2:
        return err(f"pip: the sandbox stub does not implement {argv}", 2)
    requirement = words[1]
    name, _, version = requirement.partition("==")
    have = os.environ.get("QWEN36_SANDBOX_HF_VERSION", "")
    with state() as host:
        reachable = host.get("pypi_reachable", True)
    time.sleep(delays().get("hf_install", 0))
    if not reachable or name.split("[", 1)[0] != "huggingface_hub" or version != have:
        return err(
            f"ERROR: Could not find a version that satisfies the requirement {requirement} "
            "(from versions: none)\n"
            f"ERROR: No matching distribution found for {requirement}",
            1,
        )
    hf = Path(os.environ["QWEN36_SANDBOX_VENV"]) / "bin" / "hf"
    hf.unlink(missing_ok=True)
    hf.symlink_to(HOST / HF_PROGRAM)
    return 0


# ------------------------------------------------------------------------------------------ docker


def _split_run(argv: list[str]) -> tuple[dict[str, Any], str, list[str]]:
    """docker run's own options, the image, and the command's arguments."""
    opts: dict[str, Any] = {"labels": {}, "volumes": [], "ports": [], "restart": "no", "name": None}
    takes_value = {"--name", "--label", "--restart", "--gpus", "-p", "-v", "-e"}
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        flag = argv[i]
        if flag in ("-d", "--detach"):
            i += 1
            continue
        if flag not in takes_value:
            raise ValueError(f"unknown docker run option {flag}")
        value = argv[i + 1]
        if flag == "--label":
            key, _, val = value.partition("=")
            opts["labels"][key] = val
        elif flag == "-v":
            opts["volumes"].append(value)
        elif flag == "-p":
            opts["ports"].append(value)
        elif flag == "-e":
            opts.setdefault("env", []).append(value)
        else:
            opts[flag.lstrip("-")] = value
        i += 2
    return opts, argv[i], argv[i + 1 :]


def _host_path(container: dict[str, Any], path: str) -> str:
    for volume in container["volumes"]:
        source, target = volume.split(":")[:2]
        if path == target or path.startswith(target + "/"):
            return source + path[len(target) :]
    return path


def start_container(container: dict[str, Any]) -> None:
    """Start the container's process: the fake server, or the real llama-server in "llama" mode."""
    args = list(container["args"])
    port = os.environ["QWEN36_SANDBOX_HTTP_PORT"]
    # A port published on loopback only (`-p 127.0.0.1:HOST:CONTAINER`, the calibration's servers)
    # is that host port; the production container's `-p 8080:8080` is the sandbox's one port.
    for spec in container["ports"]:
        parts = spec.split(":")
        if len(parts) == 3 and parts[0] == "127.0.0.1":
            port = parts[1]
    log = (HOST / "containers" / f"{container['name']}.log").open("a")
    binary = os.environ.get("QWEN36_SANDBOX_LLAMA_SERVER", "")
    mapped = [_host_path(container, a) if a.startswith("/") else a for a in args]
    if "--port" in mapped:
        mapped[mapped.index("--port") + 1] = port
    # Docker publishes the container's port; here the process itself listens, on loopback only.
    if "--host" in mapped:
        mapped[mapped.index("--host") + 1] = "127.0.0.1"
    command = [binary, *mapped] if binary else [sys.executable, str(FAKE_CONTAINER), *mapped]
    exit_file = _exit_file(container)
    exit_file.unlink(missing_ok=True)
    # Its own session: the container outlives the boot script, as docker's containers do. The
    # supervisor (containerd's shim, here) keeps the process's exit code for `docker inspect`.
    env = {**os.environ, **dict(e.split("=", 1) for e in container.get("env", []))}
    env["QWEN36_SANDBOX_CONTAINER"] = container["name"]
    process = subprocess.Popen(
        [sys.executable, "-S", __file__, "_supervise", str(exit_file), *command],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
    )  # fmt: skip
    container["pid"] = process.pid
    container["running"] = True
    container["stopped_by_user"] = False
    container["starts"] = container.get("starts", 0) + 1


def _exit_file(container: dict[str, Any]) -> Path:
    return HOST / "containers" / f"{container['name']}.exit"


def supervise(argv: list[str]) -> int:
    """Run a container's process and write its exit code (128 + signal when a signal ended it)."""
    exit_file, command = Path(argv[0]), argv[1:]
    # A stop signals the whole process group; only the container's own process acts on it.
    signal.signal(signal.SIGTERM, lambda *_: None)
    code = subprocess.call(command)
    code = 128 - code if code < 0 else code
    tmp = exit_file.with_suffix(".tmp")
    tmp.write_text(str(code))
    tmp.replace(exit_file)
    return code


def reap(docker_state: dict[str, Any]) -> None:
    """What dockerd does when a container's process exits: record its exit code and, under the
    restart policy, start it again and count the restart. The stub does it when next called.
    https://docs.docker.com/engine/containers/start-containers-automatically/

    With ``restart_fails`` set a restart cannot start the process (say the nvidia runtime went
    away); dockerd then leaves the container exited and stops trying (moby daemon/monitor.go).
    """
    for container in docker_state["containers"].values():
        if not container["running"] or alive(container.get("pid") or 0):
            continue
        exit_file = _exit_file(container)
        container["exit_code"] = int(exit_file.read_text()) if exit_file.exists() else UNKNOWN_EXIT
        container.update(running=False, pid=None)
        if container["restart"] in ("always", "unless-stopped") or (
            container["restart"] == "on-failure" and container["exit_code"] != 0
        ):
            container["restart_count"] = container.get("restart_count", 0) + 1
            if not docker_state.get("restart_fails"):
                start_container(container)


def alive(pid: int) -> bool:
    """Whether the process still runs; an exited orphan nobody reaped yet (a zombie) does not."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, IndexError):
        return False
    return fields[0] != "Z"


def stop_process(pid: int | None) -> None:
    """Stop a container: its supervisor leads the process group, so the group gets the signals."""
    if not pid or not alive(pid):
        return
    with suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline:
        if not alive(pid):
            return
        time.sleep(0.02)
    with suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _format(container: dict[str, Any], template: str) -> str:
    fields = {
        "{{.State.Running}}": "true" if container["running"] else "false",
        "{{.State.Status}}": "running" if container["running"] else "exited",
        "{{.State.ExitCode}}": str(container.get("exit_code", 0)),
        "{{.RestartCount}}": str(container.get("restart_count", 0)),
    }
    text = template
    for field, value in fields.items():
        text = text.replace(field, value)
    text = re.sub(
        r'\{\{index \.Config\.Labels "([^"]+)"\}\}', lambda m: container["labels"].get(m[1], ""), text
    )
    if "{{" in text:
        raise ValueError(f"the docker stub does not know the format {template!r}")
    return text


def docker(argv: list[str]) -> int:
    with state() as host:
        docker_state = host["docker"]
        if not docker_state["daemon_running"]:
            return err("Cannot connect to the Docker daemon at unix:///var/run/docker.sock.", 1)
        reap(docker_state)
    command, rest = argv[0], argv[1:]
    if command == "info":
        if rest[:1] == ["--format"]:
            runtimes = {name: {"path": name} for name in docker_state["runtimes"]}
            print(json.dumps(runtimes))
        else:
            print(f"Server Version: 24.0.7\nRuntimes: {' '.join(docker_state['runtimes'])}")
        return 0
    if command == "image" and rest[:1] == ["inspect"]:
        return 0 if rest[1] in docker_state["images"] else err(f"Error: No such image: {rest[1]}", 1)
    if command == "pull":
        image = next(a for a in rest if not a.startswith("-"))
        started = time.time()
        time.sleep(delays().get("pull", 0))
        with state() as host:
            if image not in host["docker"]["images"]:
                host["docker"]["images"].append(image)
        record("docker-pull-done", [image], started=started)
        print(f"{image}@sha256:{hashlib.sha256(image.encode()).hexdigest()}")
        return 0
    if command == "inspect":
        template, name = rest[1], rest[2]
        container = docker_state["containers"].get(name)
        if container is None:
            return err(f"Error: No such object: {name}", 1)
        print(_format(container, template))
        return 0
    if command == "run":
        opts, image, args = _split_run(rest)
        with state() as host:
            containers = host["docker"]["containers"]
            if opts["name"] in containers:
                return err(
                    f'docker: Error response from daemon: Conflict. The container name "/{opts["name"]}" '
                    "is already in use.",
                    125,
                )
            if image not in host["docker"]["images"]:
                return err(f"Unable to find image '{image}' locally (the sandbox does not pull on run)", 125)
            if "nvidia" not in host["docker"]["runtimes"] and opts.get("gpus"):
                return err(
                    'docker: Error response from daemon: could not select device driver "" with '
                    "capabilities: [[gpu]].",
                    125,
                )
            container = {**opts, "image": image, "args": args, "running": False}
            start_container(container)
            containers[opts["name"]] = container
        print(hashlib.sha256(opts["name"].encode()).hexdigest())
        return 0
    if command in ("start", "stop", "restart"):
        name = rest[-1]
        with state() as host:
            container = host["docker"]["containers"].get(name)
            if container is None:
                return err(f"Error response from daemon: No such container: {name}", 1)
            if command in ("stop", "restart"):
                stop_process(container.get("pid"))
                container.update(running=False, pid=None, stopped_by_user=command == "stop")
            if command in ("start", "restart") and not container["running"]:
                start_container(container)
        print(name)
        return 0
    if command == "rm":
        name = rest[-1]
        with state() as host:
            container = host["docker"]["containers"].pop(name, None)
            if container is None:
                return err(f"Error response from daemon: No such container: {name}", 1)
            stop_process(container.get("pid"))
        print(name)
        return 0
    if command == "logs":
        tail = int(rest[rest.index("--tail") + 1]) if "--tail" in rest else None
        log = HOST / "containers" / f"{rest[-1]}.log"
        lines = log.read_text().splitlines() if log.exists() else []
        print("\n".join(lines[-tail:] if tail else lines))
        return 0
    return err(f"docker: the sandbox stub does not implement {argv}", 1)


# --------------------------------------------------------------------- machine events (not commands)


def power_off() -> None:
    """Every process dies; docker remembers which containers its restart policy brings back."""
    with state() as host:
        if not host.get("powered", True):
            return
        host["powered"] = False
        for container in host["docker"]["containers"].values():
            stop_process(container.get("pid"))
            container["was_running"] = container["running"]
            container.update(running=False, pid=None)
        host["docker"]["daemon_running"] = False


def power_on() -> None:
    """What happens before GCE runs the startup script: pending ECC applies, dockerd restores containers."""
    with state() as host:
        host["powered"] = True
        host["powered_at"] = time.time()
        host["mounts"] = []  # tmpfs is gone with the power
        gpu = host["gpu"]
        # A "sticky" GPU accepts -e 0 and still comes back with ECC on (the case the script must not loop on).
        if not gpu.get("ecc_sticky"):
            gpu["ecc_current"] = gpu["ecc_pending"]
        host["reboot_requested"] = False
        gpu["driver_loaded"] = host["kernel"] in gpu["module_kernels"]
        docker_state = host["docker"]
        if docker_state["installed"]:
            docker_state["daemon_running"] = True
            docker_state["runtimes"] = ["runc", "nvidia"] if docker_state["nvidia_configured"] else ["runc"]
            for container in docker_state["containers"].values():
                # https://docs.docker.com/engine/containers/start-containers-automatically/
                if container["restart"] == "unless-stopped" and container.get("was_running"):
                    start_container(container)


def uname(argv: list[str]) -> int:
    # The running kernel (the simulated host's), which names a kernel's module packages.
    if argv != ["-r"]:
        return err(f"uname: unexpected arguments {argv}", 1)
    with state() as host:
        print(host["kernel"])
    return 0


HANDLERS = {
    "uname": uname,
    "nvidia-smi": nvidia_smi,
    "apt-get": apt_get,
    "dpkg": dpkg,
    "modprobe": modprobe,
    "systemctl": systemctl,
    "nvidia-ctk": nvidia_ctk,
    "reboot": reboot,
    "gcloud": gcloud,
    "mount": mount,
    "mountpoint": mountpoint,
    "docker": docker,
    "python3": venv,
    "pip": pip,
}


def main() -> int:
    cmd, argv = sys.argv[1], sys.argv[2:]
    if cmd == "_power_off":
        power_off()
        return 0
    if cmd == "_power_on":
        power_on()
        return 0
    if cmd == "_supervise":
        return supervise(argv)
    record(cmd, argv)
    code = HANDLERS[cmd](argv)
    kill_point(cmd, argv)
    return code


if __name__ == "__main__":
    sys.exit(main())
