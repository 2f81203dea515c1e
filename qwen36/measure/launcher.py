"""Launchers start llama-server with one stack config, for ``tune`` to bench each setting.

Both take their flags from :func:`infra.server_args.server_args`, so a tuned setting is exactly
what the deployed server would run. :class:`LocalLauncher` runs a llama-server binary (tests, a
workstation); :class:`DockerLauncher` runs the pinned CUDA image on the VM.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import httpx

from infra.config import StackConfig
from infra.llama_cpp import server_image
from infra.server_args import (
    CONTAINER_API_KEY_FILE,
    CONTAINER_MODEL_DIR,
    PORT,
    container_model_path,
    server_args,
)
from qwen36.errors import MissingToolError, UsageError

STARTUP_TIMEOUT_S = 600.0
HEALTH_POLL_S = 0.2
STOP_TIMEOUT_S = 15.0
DOCKER_TIMEOUT_S = 120
LOG_TAIL_LINES = 3
# What startup/boot.sh runs on the VM: the container's name and where the model and key live.
PRODUCTION_CONTAINER = "llama-server"
VM_MODEL_DIR = Path("/var/lib/qwen36/models")
VM_API_KEY_FILE = Path("/var/lib/qwen36/secrets/llama-api-key")


def local_server_binary(server_bin: Path | None) -> Path:
    """``--server-bin``, else the llama-server on PATH (the local launchers' binary)."""
    binary = server_bin or (Path(found) if (found := shutil.which("llama-server")) else None)
    if binary is None:
        raise MissingToolError("no llama-server on PATH: pass --server-bin")
    return binary


def vm_model_and_key(model_dir: Path | None, api_key_file: Path | None) -> tuple[Path, Path | None]:
    """The docker launchers' model folder and key file: the VM's own unless given."""
    if shutil.which("docker") is None:
        raise MissingToolError(
            "the docker launcher needs docker on PATH (tune runs on the VM), or --launcher local"
        )
    folder = model_dir or VM_MODEL_DIR
    if not folder.is_dir():
        raise UsageError(f"no model folder {folder}: run tune on the VM, or pass --model-dir")
    return folder, api_key_file or (VM_API_KEY_FILE if VM_API_KEY_FILE.is_file() else None)


class LaunchError(Exception):
    """The server did not become healthy; the message carries the end of its log."""


@dataclass(frozen=True)
class RunningServer:
    base_url: str
    api_key: str | None
    log: Callable[[], str]
    alive: Callable[[], bool]


class Launcher(Protocol):
    description: str

    def launch(self, cfg: StackConfig) -> contextlib.AbstractContextManager[RunningServer]: ...

    def with_env(self, env: dict[str, str]) -> Launcher:
        """The same launcher, starting the server with these environment variables added."""
        ...


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def last_lines(text: str, n: int = LOG_TAIL_LINES) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:]) or "no log output"


def wait_healthy(url: str, alive: Callable[[], bool], log: Callable[[], str], timeout_s: float) -> None:
    """Poll /health until 200; fail fast when the process exits, and after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            raise LaunchError(f"llama-server exited while loading: {last_lines(log())}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/health", timeout=HEALTH_POLL_S * 10).status_code == 200:
                return
        time.sleep(HEALTH_POLL_S)
    raise LaunchError(f"llama-server was not healthy after {timeout_s:g} s: {last_lines(log())}")


def _address_space_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


@dataclass
class LocalLauncher:
    """A llama-server binary on this machine; ``memory_limit_bytes`` caps its address space."""

    binary: Path
    model_path: Path
    api_key: str | None = None
    memory_limit_bytes: int | None = None
    startup_timeout_s: float = STARTUP_TIMEOUT_S
    env: dict[str, str] | None = None
    description: str = field(default="local llama-server")

    def with_env(self, env: dict[str, str]) -> LocalLauncher:
        return replace(self, env={**(self.env if self.env is not None else os.environ), **env})

    @contextlib.contextmanager
    def launch(self, cfg: StackConfig) -> Iterator[RunningServer]:
        port = free_port()
        with tempfile.TemporaryDirectory(prefix="qwen36-tune-") as tmp:
            key_file = None
            if self.api_key:
                key_file = Path(tmp) / "api-key"
                key_file.write_text(self.api_key)
                key_file.chmod(0o600)
            args = server_args(
                cfg, model_path=str(self.model_path), api_key_file=str(key_file) if key_file else None,
                host="127.0.0.1", port=port,
            )  # fmt: skip
            log_path = Path(tmp) / "server.log"
            with log_path.open("wb") as log_file:
                process = subprocess.Popen(
                    [str(self.binary), *args],
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.env,
                    preexec_fn=_address_space_limit(self.memory_limit_bytes)
                    if self.memory_limit_bytes
                    else None,
                )

                def log() -> str:
                    return log_path.read_text(errors="replace")

                def alive() -> bool:
                    return process.poll() is None

                try:
                    url = f"http://127.0.0.1:{port}"
                    wait_healthy(url, alive, log, self.startup_timeout_s)
                    yield RunningServer(url, self.api_key, log, alive)
                finally:
                    process.terminate()
                    try:
                        process.wait(timeout=STOP_TIMEOUT_S)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait(timeout=STOP_TIMEOUT_S)


@dataclass
class DockerLauncher:
    """The pinned CUDA image on the VM. Stop the production container first: both need the GPU."""

    model_dir: Path = VM_MODEL_DIR
    api_key_file: Path | None = None
    host_port: int = PORT + 1
    name: str = "qwen36-tune"
    docker: str = "docker"
    startup_timeout_s: float = STARTUP_TIMEOUT_S
    env: dict[str, str] = field(default_factory=dict)
    description: str = field(default="pinned llama.cpp container")

    def with_env(self, env: dict[str, str]) -> DockerLauncher:
        return replace(self, env={**self.env, **env})

    def run_command(self, cfg: StackConfig) -> list[str]:
        command = [
            self.docker, "run", "--detach", "--name", self.name, "--gpus", "all",
            "--publish", f"127.0.0.1:{self.host_port}:{PORT}",
            "--volume", f"{self.model_dir}:{CONTAINER_MODEL_DIR}:ro",
        ]  # fmt: skip
        for name, value in sorted(self.env.items()):
            command += ["--env", f"{name}={value}"]
        if self.api_key_file is not None:
            command += ["--volume", f"{self.api_key_file}:{CONTAINER_API_KEY_FILE}:ro"]
        command.append(server_image(cfg.llama_cpp_build))
        command += server_args(
            cfg,
            model_path=container_model_path(cfg),
            api_key_file=CONTAINER_API_KEY_FILE if self.api_key_file is not None else None,
        )
        return command

    def _docker(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.docker, *args], capture_output=True, text=True, timeout=DOCKER_TIMEOUT_S, check=False
        )

    @contextlib.contextmanager
    def launch(self, cfg: StackConfig) -> Iterator[RunningServer]:
        production = self._docker("inspect", "--format", "{{.State.Running}}", PRODUCTION_CONTAINER)
        if production.stdout.strip() == "true":
            raise LaunchError(
                f"the production container {PRODUCTION_CONTAINER} holds the GPU: stop it first "
                f"(sudo docker stop {PRODUCTION_CONTAINER}) and start it again after tuning"
            )
        self._docker("rm", "--force", self.name)
        started = subprocess.run(
            self.run_command(cfg), capture_output=True, text=True, timeout=DOCKER_TIMEOUT_S, check=False
        )
        if started.returncode != 0:
            raise LaunchError(f"docker run failed: {last_lines(started.stderr)}")

        def alive() -> bool:
            state = self._docker("inspect", "--format", "{{.State.Running}}", self.name)
            return state.stdout.strip() == "true"

        def log() -> str:
            logs = self._docker("logs", "--tail", "50", self.name)
            return logs.stdout + logs.stderr

        key = self.api_key_file.read_text().strip() if self.api_key_file is not None else None
        try:
            url = f"http://127.0.0.1:{self.host_port}"
            wait_healthy(url, alive, log, self.startup_timeout_s)
            yield RunningServer(url, key, log, alive)
        finally:
            self._docker("rm", "--force", self.name)
