"""The door's calls to Google: its own identity from the metadata server, and the Compute API's
methods on the one regional group (REST v1, JSON, the service account's access token).

The calls and their documented answers:

* ``regionInstanceGroupManagers.get``: ``targetSize``
  (https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/get);
* ``regionInstanceGroupManagers.resize`` with ``size`` and a ``requestId``: the same requestId on a
  retry is recognised as the same request, not a second resize
  (https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/resize);
* ``regionInstanceGroupManagers.listManagedInstances``: ``managedInstances[]`` with ``instance``
  (the VM's URL) and ``instanceStatus``
  (https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listManagedInstances);
* ``instances.get``: ``networkInterfaces[0].networkIP``, the VM's internal IPv4 address
  (https://cloud.google.com/compute/docs/reference/rest/v1/instances/get).

The metadata server on Cloud Run answers the same paths as on GCE for the service's identity
(https://cloud.google.com/run/docs/container-contract#metadata-server).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

API_TIMEOUT_S = 15.0
TOKEN_MARGIN_S = 60.0
COMPUTE_MARKER = "/compute/v1/"


class GceError(RuntimeError):
    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Member:
    name: str
    status: str | None
    instance_url: str


class Metadata:
    def __init__(self, client: httpx.AsyncClient, base_url: str) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self._token = ""
        self._expires = 0.0

    async def get(self, path: str) -> str:
        url = f"{self.base_url}/computeMetadata/v1/{path}"
        reply = await self.client.get(url, headers={"Metadata-Flavor": "Google"}, timeout=API_TIMEOUT_S)
        if reply.status_code != 200:
            raise GceError(f"metadata {path} answered {reply.status_code}")
        return reply.text

    async def token(self) -> str:
        if time.monotonic() >= self._expires:
            doc = json.loads(await self.get("instance/service-accounts/default/token"))
            self._token = str(doc["access_token"])
            self._expires = time.monotonic() + float(doc.get("expires_in", 0)) - TOKEN_MARGIN_S
        return self._token


class Compute:
    def __init__(self, client: httpx.AsyncClient, metadata: Metadata, base_url: str, group_path: str) -> None:
        self.client = client
        self.metadata = metadata
        self.base_url = base_url.rstrip("/")
        self.group_url = self.base_url + group_path

    async def _call(self, method: str, url: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {await self.metadata.token()}"}
        content = b"" if method == "POST" else None
        reply = await self.client.request(
            method, url, params=params, headers=headers, content=content, timeout=API_TIMEOUT_S
        )
        if reply.status_code != 200:
            where = url.removeprefix(self.base_url)
            raise GceError(
                f"{method} {where} answered {reply.status_code}: {reply.text[:300]}", reply.status_code
            )
        body: dict[str, Any] = reply.json()
        return body

    async def target_size(self) -> int:
        return int((await self._call("GET", self.group_url)).get("targetSize", 0))

    async def resize(self, size: int, request_id: str) -> dict[str, Any]:
        operation = await self._call(
            "POST", f"{self.group_url}/resize", {"size": str(size), "requestId": request_id}
        )
        if operation.get("error"):
            raise GceError(f"resize operation {operation.get('name')} failed: {operation['error']}")
        return operation

    async def members(self) -> list[Member]:
        body = await self._call("POST", f"{self.group_url}/listManagedInstances")
        return [
            Member(str(m.get("name", "")), m.get("instanceStatus"), str(m.get("instance", "")))
            for m in body.get("managedInstances", [])
        ]

    async def internal_ip(self, member: Member) -> str:
        # The member's URL is https://www.googleapis.com/compute/v1/projects/...: its path after the
        # API version is the same under whichever endpoint this client uses.
        _, marker, path = member.instance_url.partition(COMPUTE_MARKER)
        if not marker:
            raise GceError(f"unexpected instance URL {member.instance_url!r}")
        instance = await self._call("GET", f"{self.base_url}/{path}")
        interfaces = instance.get("networkInterfaces") or []
        ip = interfaces[0].get("networkIP") if interfaces else None
        if not ip:
            raise GceError(f"instance {member.name} has no internal IP yet")
        return str(ip)
