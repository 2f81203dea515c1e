"""Wait until the deployed llama-server answers, or fail with a diagnosis a person can act on.

Two ways to decide readiness:

* ``http``: the deployer reaches port 8080, so ``<url>/health`` decides. Connection refused, a
  503 while the model loads, a 401 or anything but ``200 {"status": "ok"}`` is "not ready"; with an
  API key, an authenticated ``/v1/models`` must also answer 200, so a key mismatch is caught here.
* ``guest-attributes``: the port is open only to an IAP tunnel, so the VM's own report decides:
  the boot script writes its phase to guest attributes (``infra/boot_protocol.py``), which the
  deployer reads through the Compute API with its own credentials.

In both modes the VM's report (when readable) supplies the progress lines (phase, detail such as
model bytes fetched, elapsed time), a ``failed`` phase stops the wait at once, and every wait is
bounded by a deadline.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from infra import boot_protocol

HTTP_REQUEST_TIMEOUT_S = 10.0
# Short enough that a hung API call cannot stretch the wait much past its deadline.
COMPUTE_REQUEST_TIMEOUT_S = 15.0
DEFAULT_POLL_S = 5.0
HEARTBEAT_S = 30.0
# In HTTP mode, how long the VM may report ready while its port stays unreachable from the deployer
# before the wait gives up: the usual cause is a deployer IP outside sourceRanges, not a slow server.
VM_READY_UNREACHABLE_S = 120.0
SERIAL_TAIL_LINES = 30
SERIAL_PORT = 1
# The deployed container's name (startup/boot.sh) and GCE's unit that runs startup scripts.
CONTAINER_NAME = "llama-server"
STARTUP_UNIT = "google-startup-scripts.service"


class WaitFailed(RuntimeError):
    """The server did not become ready; ``str()`` is the full diagnosis."""


@dataclass(frozen=True)
class Observation:
    """One look at the server: ``state`` is a short word, ``detail`` free text."""

    state: str
    detail: str = ""
    ready: bool = False
    failed: bool = False


@dataclass(frozen=True)
class Target:
    """The VM behind the endpoint, for the VM's report and the diagnosis."""

    project: str
    zone: str
    instance: str


# --- HTTP ------------------------------------------------------------------------------------


def probe_http(client: httpx.Client, url: str, api_key: str | None = None) -> Observation:
    """One readiness probe of llama-server at ``url`` (no trailing ``/health``)."""
    base = url.rstrip("/")
    try:
        response = client.get(f"{base}/health")
    except httpx.ConnectError:
        return Observation("unreachable", "connection refused")
    except httpx.TimeoutException:
        return Observation("unreachable", "no answer within the request timeout")
    except httpx.TransportError as exc:
        return Observation("unreachable", type(exc).__name__)
    if response.status_code == 503:
        return Observation("loading", _error_message(response) or "503")
    if response.status_code != 200:
        return Observation(f"http-{response.status_code}", _error_message(response) or response.text[:120])
    try:
        body = response.json()
    except ValueError:
        return Observation("unexpected", f"/health answered 200 with a non-JSON body: {response.text[:80]!r}")
    if not isinstance(body, dict) or body.get("status") != "ok":
        return Observation("unexpected", f"/health answered 200 with {json.dumps(body)[:80]}")
    if api_key is None:
        return Observation("ok", "/health ok", ready=True)
    return _probe_authenticated(client, base, api_key)


def _probe_authenticated(client: httpx.Client, base: str, api_key: str) -> Observation:
    try:
        response = client.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {api_key}"})
    except httpx.TransportError as exc:
        return Observation("unreachable", f"/v1/models: {type(exc).__name__}")
    if response.status_code == 401:
        return Observation("key-rejected", "/health ok but /v1/models rejects the API key")
    if response.status_code != 200:
        return Observation(f"http-{response.status_code}", f"/v1/models: {_error_message(response)}")
    return Observation("ok", "/health ok, API key accepted", ready=True)


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message", ""))
    return ""


# --- the VM's report through the Compute API -------------------------------------------------


class ComputeReader(Protocol):
    def guest_attributes(self, target: Target) -> dict[str, str]: ...
    def serial_tail(self, target: Target, lines: int) -> list[str]: ...
    def instance_status(self, target: Target) -> str: ...


class ComputeApiReader:
    """Reads the VM's report with google-cloud-compute (REST transport).

    ``api_endpoint`` points the client elsewhere (a local server playing the Compute API in tests);
    ``credentials`` defaults to the deployer's application-default credentials.
    """

    def __init__(self, api_endpoint: str | None = None, credentials: Any = None) -> None:
        from google.api_core.client_options import ClientOptions
        from google.cloud import compute_v1

        options = ClientOptions(api_endpoint=api_endpoint) if api_endpoint else None
        self._client = compute_v1.InstancesClient(
            transport="rest", client_options=options, credentials=credentials
        )
        self._compute_v1 = compute_v1

    def guest_attributes(self, target: Target) -> dict[str, str]:
        from google.api_core import exceptions

        request = self._compute_v1.GetGuestAttributesInstanceRequest(
            project=target.project,
            zone=target.zone,
            instance=target.instance,
            query_path=f"{boot_protocol.NAMESPACE}/",
        )
        try:
            result = self._client.get_guest_attributes(request=request, timeout=COMPUTE_REQUEST_TIMEOUT_S)
        except exceptions.NotFound:
            # Nothing written under the namespace yet: the VM has not reached its first report.
            return {}
        return {
            item.key: item.value
            for item in result.query_value.items
            if item.namespace == boot_protocol.NAMESPACE
        }

    def serial_tail(self, target: Target, lines: int) -> list[str]:
        request = self._compute_v1.GetSerialPortOutputInstanceRequest(
            project=target.project, zone=target.zone, instance=target.instance, port=SERIAL_PORT
        )
        output = self._client.get_serial_port_output(request=request, timeout=COMPUTE_REQUEST_TIMEOUT_S)
        return output.contents.splitlines()[-lines:]

    def instance_status(self, target: Target) -> str:
        instance = self._client.get(
            project=target.project,
            zone=target.zone,
            instance=target.instance,
            timeout=COMPUTE_REQUEST_TIMEOUT_S,
        )
        return str(instance.status)


def observe_report(reader: ComputeReader, target: Target) -> Observation:
    """The VM's last report as an observation; API errors are "not ready", never fatal."""
    try:
        attrs = reader.guest_attributes(target)
    except Exception as exc:  # the Compute API's errors vary by transport; the wait is bounded anyway
        return Observation(
            "no-report", f"guest attributes unreadable: {type(exc).__name__}: {str(exc)[:160]}"
        )
    phase = attrs.get(boot_protocol.KEY_PHASE)
    if not phase:
        return Observation("no-report", "the VM has not reported yet")
    detail = attrs.get(boot_protocol.KEY_DETAIL, "")
    return Observation(
        phase,
        detail,
        ready=phase == boot_protocol.PHASE_READY,
        failed=phase == boot_protocol.PHASE_FAILED,
    )


# --- the wait --------------------------------------------------------------------------------


@dataclass
class WaitSettings:
    timeout_s: float
    poll_s: float = DEFAULT_POLL_S
    heartbeat_s: float = HEARTBEAT_S
    vm_ready_unreachable_s: float = VM_READY_UNREACHABLE_S


@dataclass
class _Progress:
    started: float
    emit: Callable[[str], None]
    heartbeat_s: float
    last_key: tuple[str, ...] | None = None
    last_emit: float = 0.0
    history: list[str] = field(default_factory=list)

    def update(self, now: float, parts: dict[str, Observation]) -> None:
        key = tuple(obs.state for obs in parts.values())
        changed = key != self.last_key
        if not changed and now - self.last_emit < self.heartbeat_s:
            return
        line = f"[{_elapsed(now - self.started)}] " + "; ".join(
            f"{label} {obs.state}" + (f" ({obs.detail})" if obs.detail else "")
            for label, obs in parts.items()
        )
        if not changed:
            line += " (still waiting)"
        self.emit(line)
        self.history.append(line)
        self.last_key, self.last_emit = key, now


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def wait_ready(
    *,
    settings: WaitSettings,
    url: str | None = None,
    api_key: str | None = None,
    target: Target | None = None,
    reader: ComputeReader | None = None,
    emit: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Blocks until ready (HTTP mode when ``url`` is given, else the VM's report decides).

    Returns a one-line summary; raises :class:`WaitFailed` with a diagnosis on timeout or on a
    ``failed`` report.
    """
    if url is None and (target is None or reader is None):
        raise ValueError("guest-attribute mode needs a target and a Compute API reader")
    started = clock()
    deadline = started + settings.timeout_s
    progress = _Progress(started=started, emit=emit, heartbeat_s=settings.heartbeat_s)
    last: dict[str, Observation] = {}
    vm_ready_since: float | None = None
    with httpx.Client(timeout=HTTP_REQUEST_TIMEOUT_S) as client:
        while True:
            parts: dict[str, Observation] = {}
            if target is not None and reader is not None:
                parts["vm"] = observe_report(reader, target)
            if url is not None:
                parts["http"] = probe_http(client, url, api_key)
            last = parts
            now = clock()
            progress.update(now, parts)
            decider = parts["http"] if url is not None else parts["vm"]
            if decider.ready:
                summary = f"ready after {_elapsed(now - started)}: {decider.detail}"
                emit(summary)
                return summary
            vm = parts.get("vm")
            if vm is not None and vm.failed:
                raise WaitFailed(
                    diagnose(f"the VM reported failure: {vm.detail}", last, target, reader, progress)
                )
            if url is not None and vm is not None and vm.ready:
                vm_ready_since = vm_ready_since if vm_ready_since is not None else now
                if now - vm_ready_since >= settings.vm_ready_unreachable_s:
                    reason = (
                        f"the VM reports ready ({vm.detail}) but {url} has not answered ok from this "
                        f"machine for {_elapsed(now - vm_ready_since)}; check that this machine's public "
                        "IP is in qwen36-mtp-l4:sourceRanges, or empty sourceRanges to go through IAP"
                    )
                    raise WaitFailed(diagnose(reason, last, target, reader, progress))
            if now >= deadline:
                reason = f"not ready after {_elapsed(settings.timeout_s)} (the timeout)"
                raise WaitFailed(diagnose(reason, last, target, reader, progress))
            sleep(max(0.0, min(settings.poll_s, deadline - now)))


def diagnose(
    reason: str,
    last: dict[str, Observation],
    target: Target | None,
    reader: ComputeReader | None,
    progress: _Progress | None = None,
) -> str:
    lines = [f"llama-server is not ready: {reason}"]
    for label, obs in last.items():
        lines.append(f"last {label} state: {obs.state}" + (f" ({obs.detail})" if obs.detail else ""))
    if progress is not None and progress.history:
        lines.append("progress seen:")
        lines += [f"  {entry}" for entry in progress.history[-10:]]
    if target is not None and reader is not None:
        lines += _vm_facts(target, reader)
    if target is not None:
        lines.append("look further with:")
        lines += [f"  {command}" for command in look_further_commands(target)]
    return "\n".join(lines)


def _vm_facts(target: Target, reader: ComputeReader) -> list[str]:
    lines: list[str] = []
    try:
        lines.append(f"instance status: {reader.instance_status(target)}")
    except Exception as exc:  # diagnosis is best effort: report what could not be read
        lines.append(f"instance status unreadable: {type(exc).__name__}: {str(exc)[:160]}")
    try:
        tail = reader.serial_tail(target, SERIAL_TAIL_LINES)
        lines.append(f"last {len(tail)} lines of serial port {SERIAL_PORT}:")
        lines += [f"  | {line}" for line in tail]
    except Exception as exc:
        lines.append(f"serial console unreadable: {type(exc).__name__}: {str(exc)[:160]}")
    return lines


def look_further_commands(target: Target) -> list[str]:
    where = f"--zone={shlex.quote(target.zone)} --project={shlex.quote(target.project)}"
    name = shlex.quote(target.instance)
    query = f"--query-path={boot_protocol.NAMESPACE}/"
    ssh = f"gcloud compute ssh {name} {where} --tunnel-through-iap --command"
    return [
        f"gcloud compute instances get-serial-port-output {name} {where} --port={SERIAL_PORT}",
        f"gcloud compute instances get-guest-attributes {name} {where} {query}",
        f"gcloud compute instances describe {name} {where} --format='value(status,scheduling)'",
        f"{ssh} {shlex.quote(f'sudo journalctl -u {STARTUP_UNIT} --no-pager -n 200')}",
        f"{ssh} {shlex.quote(f'sudo docker logs --tail 200 {CONTAINER_NAME}')}",
    ]
