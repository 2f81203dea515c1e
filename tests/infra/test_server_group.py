"""``ServerGroup`` as other components use it: an autoscaler owning the size, fields left to others."""

from __future__ import annotations

from typing import Any

import pulumi
from program_mocks import RecordingMocks
from pulumi.runtime.mocks import MockMonitor

from infra.config import StackConfig
from infra.server_group import NAMED_PORT, ServerGroup, ServerGroupArgs

GROUP = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"


class OptionsMonitor(MockMonitor):
    """The mock engine, keeping each registration's ignoreChanges (the mocks' args lack options)."""

    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.ignore_changes: dict[str, list[str]] = {}

    def RegisterResource(self, request: Any) -> Any:
        self.ignore_changes[request.name] = list(request.ignoreChanges)
        return super().RegisterResource(request)


def build(**overrides: Any) -> tuple[RecordingMocks, OptionsMonitor, dict[str, Any]]:
    mocks = RecordingMocks()
    monitor = OptionsMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="qwen36-mtp-l4", stack="fleet", preview=False, monitor=monitor)
    seen: dict[str, Any] = {}

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        args = ServerGroupArgs(
            cfg=StackConfig(),
            project="acme",
            group_name="qwen36-fleet",
            image="projects/acme/global/images/x",
            service_account_email="qwen36-fleet@acme.iam.gserviceaccount.com",
            bucket="acme-bucket",
            api_key_secret=None,
            network_tag="qwen36-fleet",
            **{"network": "qwen36-vpc", "subnetwork": "qwen36-subnet", **overrides},
        )
        group = ServerGroup("server", args)
        return pulumi.Output.all(name=group.group_name, ig=group.instance_group).apply(seen.update)

    program()
    return mocks, monitor, seen


def test_an_autoscaled_group_leaves_the_size_and_named_fields_to_others() -> None:
    mocks, monitor, seen = build(
        target_size=None, ignore_changes=["targetSize"], network="qwen36-vpc", subnetwork="qwen36-subnet"
    )
    (group,) = [r for r in mocks.resources if r.type == GROUP]
    assert "targetSize" not in group.inputs
    assert monitor.ignore_changes["server-group"] == ["targetSize"]
    assert group.inputs["namedPorts"] == [{"name": NAMED_PORT, "port": 8080}]
    assert "statefulExternalIps" not in group.inputs
    (template,) = [r for r in mocks.resources if r.type.endswith("RegionInstanceTemplate")]
    assert template.inputs["networkInterfaces"][0]["network"] == "qwen36-vpc"
    assert template.inputs["networkInterfaces"][0]["subnetwork"] == "qwen36-subnet"
    assert seen["name"] == "qwen36-fleet"
    assert seen["ig"].endswith("/regions/us-central1/instanceGroups/qwen36-fleet")


def test_a_zone_change_replaces_the_group_deleting_the_old_one_first() -> None:
    """`zones` is ForceNew on a fixed-name group: Pulumi's default create-before-delete would ask GCE
    for a second group of the same name (409), so the group is registered delete-before-replace."""
    from program_mocks import deploy

    for zones in (["us-central1-a", "us-central1-b", "us-central1-c"], ["us-central1-b", "us-central1-f"]):
        d = deploy("dev", {"zones": zones})
        group = d.one(GROUP)
        assert group.inputs["distributionPolicyZones"] == zones
        assert d.registrations[group.name].delete_before_replace is True
    # Nothing else of the group's component is registered delete-first (the template rolls out).
    assert d.registrations["server-template"].delete_before_replace is False
