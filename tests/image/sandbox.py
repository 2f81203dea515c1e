"""A minimal sandbox for the bake script: stubs for the machine's tools, a real bash and curl.

Only what this machine cannot do is stubbed: apt-get (installing docker.io drops the docker
stubs onto PATH, as the package would), systemctl, docker, nvidia-ctk, and the GCE metadata
server (a local HTTP server that records guest-attribute writes). Everything else is real:
bash, curl, coreutils, find, the file system. Stub state lives in files, so a second run of
the script sees what the first one left.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GA_PREFIX = "/computeMetadata/v1/instance/guest-attributes/"
# The real tools the script and the stubs may use; nothing else of the host is on PATH, so a
# host's own docker or apt-get can never stand in for a stub (or hide a missing one).
REAL_TOOLS = (
    "bash", "curl", "date", "awk", "sleep", "timeout", "find", "sync", "basename", "cp", "touch",
    "grep", "cat", "env", "rm", "mkdir",
)  # fmt: skip
RUN_TIMEOUT_S = 60

_LOG_CALL = 'printf "%s\\n" "$(basename "$0") $*" >>"$SANDBOX/calls.log"\n'

_DOCKER = (
    "#!/bin/bash\n"
    + _LOG_CALL
    + r"""state="$SANDBOX/state"
case "$1" in
  --version) echo "Docker version 26.1.3 (stub)" ;;
  info)
    [[ -e $state/daemon-running ]] || { echo "Cannot connect to the Docker daemon" >&2; exit 1; }
    if [[ "$*" == *Runtimes* ]]; then
      if [[ -e $state/nvidia-runtime-loaded ]]; then
        echo '{"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}'
      else
        echo '{"runc":{"path":"runc"}}'
      fi
    fi ;;
  image)
    [[ $2 == inspect ]] && grep -qxF "$3" "$state/images" 2>/dev/null ;;
  pull)
    image="${*: -1}"
    [[ -z ${STUB_PULL_FAIL:-} ]] || { echo "toomanyrequests: rate limited" >&2; exit 1; }
    echo "$image" >>"$state/images" ;;
  *) echo "docker stub: unexpected $*" >&2; exit 2 ;;
esac
"""
)

_STUBS = {
    "apt-get": "#!/bin/bash\n"
    + _LOG_CALL
    + r"""case " $* " in
  *" install "*docker.io*)
    cp "$SANDBOX/pkg/docker" "$SANDBOX/pkg/dockerd" "$SANDBOX/bin/" ;;
  *" update "*) touch "$QWEN36_APT_LISTS_DIR/archive_dists_jammy_InRelease" ;;
esac
""",
    "systemctl": "#!/bin/bash\n"
    + _LOG_CALL
    + r"""state="$SANDBOX/state"
case "$1" in
  enable|restart)
    [[ -n ${STUB_DOCKER_DEAD:-} ]] && exit 0
    touch "$state/daemon-running"
    if grep -q nvidia "$state/daemon.json" 2>/dev/null; then touch "$state/nvidia-runtime-loaded"; fi ;;
esac
""",
    "nvidia-ctk": "#!/bin/bash\n"
    + _LOG_CALL
    + r"""[[ "$*" == "runtime configure --runtime=docker" ]] || exit 2
echo '{"runtimes":{"nvidia":{"path":"nvidia-container-runtime"}}}' >"$SANDBOX/state/daemon.json"
""",
}


@dataclass
class GuestAttributes:
    """What the VM wrote: the current values and every write in order, with arrival times."""

    values: dict[str, str] = field(default_factory=dict)
    writes: list[tuple[float, str, str]] = field(default_factory=list)

    def phases(self) -> list[str]:
        return [value for _, key, value in self.writes if key.endswith("/phase")]


@contextmanager
def metadata_server() -> Iterator[tuple[str, GuestAttributes]]:
    """A loopback stand-in for the metadata server's guest-attribute endpoint."""
    attributes = GuestAttributes()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            if self.headers.get("Metadata-Flavor") != "Google" or not self.path.startswith(GA_PREFIX):
                self.send_error(403)
                return
            body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            key = self.path.removeprefix(GA_PREFIX)
            with lock:
                attributes.values[key] = body
                attributes.writes.append((time.monotonic(), key, body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", attributes
    finally:
        server.shutdown()
        server.server_close()


class BakeSandbox:
    """A temp dir playing the builder VM; ``run`` executes the real rendered script in it."""

    def __init__(self, root: Path, *, docker_installed: bool = False) -> None:
        self.root = root
        self.bin = root / "bin"
        self.state = root / "state"
        self.apt_lists = root / "apt-lists"
        self.real = root / "real"
        for folder in (self.bin, self.real, self.state, self.apt_lists, root / "pkg"):
            folder.mkdir(parents=True, exist_ok=True)
        (self.apt_lists / "lock").touch()
        for tool in REAL_TOOLS:
            found = shutil.which(tool)
            if found is None:
                raise RuntimeError(f"the bake sandbox needs {tool} on this machine")
            (self.real / tool).symlink_to(found)
        for name, text in _STUBS.items():
            self._write(self.bin / name, text)
        self._write(root / "pkg" / "docker", _DOCKER)
        self._write(root / "pkg" / "dockerd", "#!/bin/bash\n" + _LOG_CALL)
        if docker_installed:
            for name in ("docker", "dockerd"):
                self._write(self.bin / name, _DOCKER if name == "docker" else "#!/bin/bash\n" + _LOG_CALL)

    @staticmethod
    def _write(path: Path, text: str) -> None:
        path.write_text(text)
        path.chmod(0o755)

    def calls(self) -> list[str]:
        log = self.root / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def run(
        self, script: str, metadata_url: str, extra_env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        path = self.root / "bake.sh"
        path.write_text(script)
        env = {
            "PATH": f"{self.bin}:{self.real}",
            "HOME": str(self.root),
            "SANDBOX": str(self.root),
            "QWEN36_METADATA_URL": metadata_url,
            "QWEN36_APT_LISTS_DIR": str(self.apt_lists),
            "QWEN36_TIME_SCALE": "0.01",
            **(extra_env or {}),
        }
        return subprocess.run(
            [str(self.real / "bash"), str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
