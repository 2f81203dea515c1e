"""How many servers the fleet has, read from the Compute API while ``load`` runs.

``regionInstanceGroupManagers.listManagedInstances`` lists every member with its VM status and,
when the group has an autohealing health check, its health: ``members`` counts them all (being
created, booting or being deleted included), ``running`` those whose VM runs, ``healthy`` those the
health check calls HEALTHY (None when the API reports no health at all).
https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listManagedInstances
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# One page of members is plenty (the fleet is at most maxReplicas); bound each call so a hung API
# cannot outlast the run it is watching.
COMPUTE_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class ServerCount:
    members: int
    running: int
    healthy: int | None


class GroupSize:
    """A callable that counts the members of one regional managed instance group."""

    def __init__(
        self,
        project: str,
        region: str,
        group: str,
        *,
        api_endpoint: str | None = None,
        credentials: Any = None,
    ) -> None:
        from google.api_core.client_options import ClientOptions
        from google.cloud import compute_v1

        from qwen36.retry import RetryingClient

        options = ClientOptions(api_endpoint=api_endpoint) if api_endpoint else None
        # A transient error is retried within qwen36.retry's bounds (the count is read in a thread
        # beside the run, which records a failed read and goes on).
        self._client = RetryingClient(
            compute_v1.RegionInstanceGroupManagersClient(
                transport="rest", client_options=options, credentials=credentials
            ),
            "regionInstanceGroupManagers",
        )
        self.project, self.region, self.group = project, region, group

    def __call__(self) -> ServerCount:
        members = list(
            self._client.list_managed_instances(
                project=self.project,
                region=self.region,
                instance_group_manager=self.group,
                timeout=COMPUTE_TIMEOUT_S,
            )
        )
        health = [m.instance_health for m in members if m.instance_health]
        return ServerCount(
            members=len(members),
            running=sum(1 for m in members if m.instance_status == "RUNNING"),
            healthy=(
                sum(
                    1 for m in members if any(h.detailed_health_state == "HEALTHY" for h in m.instance_health)
                )
                if health
                else None
            ),
        )
