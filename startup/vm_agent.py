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


def request(
    method: str,
    url: str,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = HTTP_TIMEOUT_S,
) -> tuple[int, bytes]:
    """One HTTP exchange bounded by ``timeout``: the status and body, an error status included; an
    unreachable host or a timeout raises OSError."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (URLs from our arguments)
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


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
    status, body = request("GET", url, headers, timeout=timeout)
    if status != 200:
        raise AgentError(f"/metrics answered {status}")
    return body.decode()


def metric_values(text: str, names: Iterable[str]) -> dict[str, float]:
    """The named unlabelled series from Prometheus text; AgentError when any is missing."""
    wanted = tuple(names)
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition(" ")
        if name in wanted:
            values[name] = float(rest.split()[0])
    missing = [name for name in wanted if name not in values]
    if missing:
        raise AgentError(f"/metrics lacks {', '.join(missing)} (is llama-server started with --metrics?)")
    return values
