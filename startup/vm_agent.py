"""What the VM agents (``idle_watch.py``, ``metrics_publisher.py``) share: bounded HTTP, this VM's
identity and access token from the metadata server, and llama-server's ``/metrics`` read with its
API key.

Standard library only, Python 3.10 (the image's python3). The boot script installs this file in the
agents' own directory (startup/boot.sh ``install_agent``): ``python3 <dir>/<agent>.py`` puts
``<dir>`` first on ``sys.path``, so ``import vm_agent`` finds it without a package or PYTHONPATH.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

METADATA_URL = "http://metadata.google.internal"
HTTP_TIMEOUT_S = 10.0
# Transient answers of Google's APIs and the metadata server, retried with a doubling pause: 429
# and 5xx (https://cloud.google.com/apis/design/errors#error_retries), and a dropped connection.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
RETRY_ATTEMPTS = 4
RETRY_PAUSE_S = 0.5
RETRY_PAUSE_MAX_S = 8.0
# Methods a retry cannot repeat the effect of; a POST is retried only when its caller says so
# (a Logging entry with an insertId, a Compute call with a requestId).
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE"})
# The access token is reused until this long before the metadata server says it expires.
TOKEN_MARGIN_S = 60.0
# llama-server's gauges of requests being processed and queued for a slot (tools/server /metrics).
IN_FLIGHT = ("llamacpp:requests_processing", "llamacpp:requests_deferred")
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class AgentError(RuntimeError):
    """An answer an agent cannot use: an HTTP status other than 200, /metrics without a series."""


class MetadataError(AgentError):
    def __init__(self, path: str, status: int) -> None:
        super().__init__(f"metadata {path} answered {status}")
        self.status = status


def utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime(TIME_FORMAT)  # noqa: UP017 (3.10 on the VM)


# This boot's id: a guest-attribute report names it, so a reader can tell this boot's from the last.
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"


def boot_id(path: Path) -> str:
    try:
        return path.read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def utc_precise(ts: float) -> str:
    """RFC 3339 with microseconds, as Cloud Logging's LogEntry.timestamp takes it."""
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # noqa: UP017


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def _exchange(
    method: str, url: str, headers: dict[str, str], body: bytes | None, timeout: float
) -> tuple[int, bytes, str]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (URLs from our arguments)
            return int(resp.status), resp.read(), ""
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read(), exc.headers.get("Retry-After", "") if exc.headers else ""


def _pause(attempt: int, retry_after: str) -> float:
    """The pause before try ``attempt + 1``: the server's Retry-After (seconds) when it sent one,
    else a doubling pause; never more than RETRY_PAUSE_MAX_S."""
    try:
        asked = float(retry_after)
    except ValueError:
        asked = -1.0
    doubled = RETRY_PAUSE_S * 2 ** (attempt - 1)
    return min(RETRY_PAUSE_MAX_S, asked if asked >= 0 else doubled)


def request(
    method: str,
    url: str,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = HTTP_TIMEOUT_S,
    *,
    idempotent: bool | None = None,
    attempts: int = RETRY_ATTEMPTS,
) -> tuple[int, bytes]:
    """One HTTP call, each try bounded by ``timeout``: the status and body, an error status included;
    an unreachable host or a timeout raises OSError once the tries are spent.

    An idempotent call (GET, HEAD, PUT, DELETE, or ``idempotent=True``) is tried up to ``attempts``
    times while it answers 429/5xx or the connection fails, pausing 0.5, 1, 2 s (or the server's
    Retry-After, at most 8 s) between tries; any other call is tried once."""
    repeatable = method in IDEMPOTENT_METHODS if idempotent is None else idempotent
    tries = max(1, attempts) if repeatable else 1
    for attempt in range(1, tries + 1):
        try:
            status, answer, retry_after = _exchange(method, url, headers or {}, body, timeout)
        except OSError:
            if attempt == tries:
                raise
            _sleep(_pause(attempt, ""))
            continue
        if status not in RETRY_STATUSES or attempt == tries:
            return status, answer
        _sleep(_pause(attempt, retry_after))
    raise AssertionError("unreachable")  # pragma: no cover


def bearer(token: str) -> dict[str, str]:
    """The headers of a Google API call with this VM's access token."""
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


class Metadata:
    """This VM's metadata server: https://cloud.google.com/compute/docs/metadata/querying-metadata"""

    def __init__(self, base_url: str = METADATA_URL) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = ""
        self._token_expires = 0.0

    def _url(self, path: str) -> str:
        return f"{self.base_url}/computeMetadata/v1/{path}"

    def get(self, path: str) -> str:
        status, body = request("GET", self._url(path), {"Metadata-Flavor": "Google"})
        if status != 200:
            raise MetadataError(path, status)
        return body.decode()

    def put(self, path: str, value: str) -> None:
        status, _ = request("PUT", self._url(path), {"Metadata-Flavor": "Google"}, value.encode())
        if status != 200:
            raise MetadataError(path, status)

    def project_id(self) -> str:
        return self.get("project/project-id")

    def created_by(self) -> str | None:
        """The group that created this VM (``projects/<num>/regions/<r>/instanceGroupManagers/<n>``);
        None on a VM no group created: GCE sets the key on every managed instance.
        https://cloud.google.com/compute/docs/instance-groups/getting-info-about-migs#checking_if_a_vm_instance_is_part_of_a_mig
        """
        try:
            return self.get("instance/attributes/created-by")
        except MetadataError as exc:
            if exc.status == 404:
                return None
            raise

    def instance_labels(self) -> dict[str, str]:
        """This VM's ``gce_instance`` resource labels (instance/zone is ``projects/<n>/zones/<z>``).
        https://cloud.google.com/monitoring/api/resources#tag_gce_instance
        """
        return {
            "project_id": self.project_id(),
            "instance_id": self.get("instance/id"),
            "zone": self.get("instance/zone").rsplit("/", 1)[-1],
        }

    def identity_token(self, audience: str) -> str:
        """A Google-signed ID token of this VM's service account for ``audience`` (the door's URL);
        ``format=full`` carries the account's email, which the door checks.
        https://cloud.google.com/compute/docs/instances/verifying-instance-identity
        """
        query = urllib.parse.urlencode({"audience": audience, "format": "full"})
        return self.get(f"instance/service-accounts/default/identity?{query}").strip()

    def token(self) -> str:
        """The VM service account's access token, reused until TOKEN_MARGIN_S before it expires.
        https://cloud.google.com/compute/docs/access/authenticate-workloads#applications
        """
        if time.monotonic() >= self._token_expires:
            doc = json.loads(self.get("instance/service-accounts/default/token"))
            self._token = str(doc["access_token"])
            self._token_expires = time.monotonic() + float(doc.get("expires_in", 0)) - TOKEN_MARGIN_S
        return self._token


def read_metrics(url: str, key_file: Path | None, timeout: float = HTTP_TIMEOUT_S) -> str:
    """llama-server's Prometheus text. The key file is read on every call, so a rotated key takes
    effect without restarting the agent; an unreadable one raises OSError."""
    headers = {}
    if key_file is not None:
        headers["Authorization"] = f"Bearer {key_file.read_text(encoding='utf-8').strip()}"
    # One try: the agents poll it again soon, and a server that does not answer is itself news.
    status, body = request("GET", url, headers, timeout=timeout, attempts=1)
    if status != 200:
        raise AgentError(f"/metrics answered {status}")
    return body.decode()


def metric_values(text: str, names: Iterable[str], optional: Iterable[str] = ()) -> dict[str, float]:
    """The named unlabelled series from Prometheus text; AgentError when one of ``names`` is missing
    (an ``optional`` one is only absent from the result)."""
    wanted = tuple(names)
    read = (*wanted, *optional)
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition(" ")
        if name in read:
            values[name] = float(rest.split()[0])
    missing = [name for name in wanted if name not in values]
    if missing:
        raise AgentError(f"/metrics lacks {', '.join(missing)} (is llama-server started with --metrics?)")
    return values
