"""One project as the fake APIs see it; a test edits a copy of the all-clear project to stage a blocker."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from infra.apis import DOOR_SERVICES, REQUIRED_SERVICES

ZONE_L4 = ("nvidia-l4", "nvidia-tesla-t4")
# The services the fake knows by title, for the messages of a disabled one.
TITLES = {
    "compute.googleapis.com": "Compute Engine API",
    "cloudbilling.googleapis.com": "Cloud Billing API",
    "orgpolicy.googleapis.com": "Organization Policy API",
    "cloudresourcemanager.googleapis.com": "Cloud Resource Manager API",
    "serviceusage.googleapis.com": "Service Usage API",
}
# An all-clear project has every API the program enables (infra/apis.py), and those the deploy
# script and the preflight call: Service Usage, Cloud KMS (the secrets key), Billing, Org Policy.
ALL_SERVICES = (
    *REQUIRED_SERVICES,
    *DOOR_SERVICES,
    "serviceusage.googleapis.com",
    "cloudkms.googleapis.com",
    "cloudbilling.googleapis.com",
    "orgpolicy.googleapis.com",
)
ACCESS_TOKEN = "ya29.fake-preflight-token"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes
    headers: dict[str, str]
    """By lowercase name (HTTP header names are case-insensitive)."""


HANG = "hang"
"""A fault that never answers (a blackhole): the request is held until the fake stops."""


@dataclass
class Fault:
    """What every API request gets instead of its answer (the token endpoint is left alone), for the
    next ``times`` requests: ``status`` with Google's error body for it, or with ``body`` exactly (an
    HTML page, junk), or ``HANG``."""

    status: int | str
    body: bytes | None = None
    content_type: str = "application/json"
    times: int = 1_000_000
    path_contains: str = ""
    """Only requests whose path contains this (e.g. ``:testIamPermissions``); all when empty."""


@dataclass
class FakeProject:
    project_id: str = "acme-llm"
    number: str = "123456789012"
    enabled: set[str] = field(default_factory=lambda: set(ALL_SERVICES))
    billing_account: str = "billingAccounts/0123AB-4567CD-89EF01"
    billing_enabled: bool = True
    project_quotas: dict[str, tuple[float, float]] = field(
        default_factory=lambda: {"GPUS_ALL_REGIONS": (4, 0), "CPUS_ALL_REGIONS": (64, 0)}
    )
    region_quotas: dict[str, dict[str, tuple[float, float]]] = field(
        default_factory=lambda: {
            "us-central1": {
                "CPUS": (48, 0),
                "NVIDIA_L4_GPUS": (4, 0),
                "PREEMPTIBLE_NVIDIA_L4_GPUS": (4, 0),
                "SSD_TOTAL_GB": (2048, 0),
            }
        }
    )
    zones: dict[str, tuple[str, ...]] = field(
        default_factory=lambda: {
            "us-central1-a": ZONE_L4,
            "us-central1-b": ZONE_L4,
            "us-central1-c": ZONE_L4,
            "us-central1-f": ("nvidia-tesla-t4",),
            "europe-west4-a": ZONE_L4,
        }
    )
    families: dict[str, str] = field(default_factory=dict)
    # Image name -> its labels (the bake's `secure-boot` verdict, infra/shielded.py).
    image_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    """Image family -> its newest image's name."""
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Constraint (``compute.vmExternalIpAccess``) -> the effective policy's ``spec``."""
    denied: set[str] = field(default_factory=set)
    """Permissions the caller lacks on the project (everything else asked for is granted)."""
    jwt_public_key: str = ""
    """PEM of the service account key whose self-signed JWTs the fake accepts (none: only its token)."""
    fault: Fault | None = None
    requests: list[Request] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take_fault(self, path: str) -> Fault | None:
        with self._lock:
            if self.fault is None or self.fault.times <= 0 or self.fault.path_contains not in path:
                return None
            self.fault.times -= 1
            return self.fault

    def record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def is_us(self, project: str) -> bool:
        return project in (self.project_id, self.number)
