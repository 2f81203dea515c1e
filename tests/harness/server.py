"""A real llama-server process for a test: free loopback port, captured log, bounded waits."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx

from tests.harness.llama_build import llama_server_binary

HOST = "127.0.0.1"
HEALTHY_TIMEOUT_S = 30.0
# The 503 "Loading model" window of a 2 MB model is ~50 ms: poll well inside it.
HEALTH_POLL_S = 0.005
HEALTH_REQUEST_TIMEOUT_S = 2.0
STOP_TIMEOUT_S = 10.0
LOG_TAIL_LINES = 40
# llama.cpp's arg parser: `error: invalid argument: --no-mmap` (common/arg.cpp).
_INVALID_ARG = re.compile(r"invalid argument: (\S+)")
# Flags whose value we replace so the server binds loopback on the port we picked.
_HOST_FLAGS = ("--host",)
_PORT_FLAGS = ("--port",)


class LlamaServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _with_value(args: list[str], flags: tuple[str, ...], value: str) -> list[str]:
    out = list(args)
    for i, arg in enumerate(out):
        if arg in flags and i + 1 < len(out):
            out[i + 1] = value
            return out
    return [*out, flags[0], value]


def rejected_flag(log: str) -> str | None:
    """The flag llama-server refused at startup, if that is why it exited."""
    match = _INVALID_ARG.search(log)
    return match.group(1) if match else None


class LlamaServer:
    """``with LlamaServer([...]) as srv: srv.wait_healthy()``; the process is killed on exit."""

    def __init__(
        self,
        args: list[str],
        *,
        binary: Path | None = None,
        env: dict[str, str] | None = None,
        port: int | None = None,
    ) -> None:
        self.port = port if port is not None else free_port()
        self.args = _with_value(_with_value(args, _HOST_FLAGS, HOST), _PORT_FLAGS, str(self.port))
        self.binary = binary if binary is not None else llama_server_binary()
        self.env = {**os.environ, **(env or {})}
        self.base_url = f"http://{HOST}:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_dir = tempfile.TemporaryDirectory(prefix="llama-server-")
        self.log_path = Path(self._log_dir.name) / "server.log"
        self.started_at = 0.0

    def start(self) -> LlamaServer:
        with self.log_path.open("wb") as log:
            self.started_at = time.monotonic()
            self.proc = subprocess.Popen(
                [str(self.binary), *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
            )
        return self

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        self._log_dir.cleanup()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def _failure(self, what: str) -> LlamaServerError:
        log = self.log_text()
        flag = rejected_flag(log)
        if flag is not None:
            what = f"the pinned llama-server rejected the flag {flag} ({what})"
        return LlamaServerError(f"{what}\n--- llama-server log tail ---\n{self.log_tail()}")

    def wait_healthy(self, timeout: float = HEALTHY_TIMEOUT_S) -> list[int | None]:
        """Polls ``/health`` until 200; returns the statuses seen (None = connection refused)."""
        if self.proc is None:
            raise LlamaServerError("server not started")
        seen: list[int | None] = []
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=HEALTH_REQUEST_TIMEOUT_S) as client:
            while time.monotonic() < deadline:
                code = self.exit_code()
                if code is not None:
                    raise self._failure(f"llama-server exited with code {code} before becoming healthy")
                try:
                    status: int | None = client.get(f"{self.base_url}/health").status_code
                except httpx.TransportError:
                    status = None
                if not seen or seen[-1] != status:
                    seen.append(status)
                if status == 200:
                    return seen
                time.sleep(HEALTH_POLL_S)
        raise self._failure(f"llama-server not healthy after {timeout:.0f}s (statuses seen: {seen})")

    def wait_exit(self, timeout: float = HEALTHY_TIMEOUT_S) -> int:
        if self.proc is None:
            raise LlamaServerError("server not started")
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise self._failure(f"llama-server still running after {timeout:.0f}s") from None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT_S)
