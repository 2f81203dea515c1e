"""The HealthGate component under Pulumi mocks: wired after the server, re-run only when it must."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_gcp as gcp
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockMonitor

from infra.health_gate import API_KEY_ENV, HealthGate, HealthGateArgs

COMMAND_TYPE = "command:local:Command"
TEMPLATES = "https://www.googleapis.com/compute/v1/projects/my-project/regions/europe-west4/instanceTemplates"


class Mocks(pulumi.runtime.Mocks):
    def __init__(self, template_name: str) -> None:
        self.template_name = template_name

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        state = dict(args.inputs)
        if args.typ == "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate":
            # GCE names the template from its prefix; a changed template is a new name.
            name = f"{args.inputs['namePrefix']}{self.template_name}"
            state["selfLink"] = f"{TEMPLATES}/{name}"
        if args.typ == COMMAND_TYPE:
            state["stdout"] = "ready after 0m01s"
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


@dataclass
class Registration:
    typ: str
    urn: str
    dependencies: list[str]
    inputs: dict[str, Any]


@dataclass
class RecordingMonitor(MockMonitor):
    """The mock engine, recording each registration's dependency URNs (the engine's ordering)."""

    registrations: dict[str, Registration] = field(default_factory=dict)
    results: list[Any] = field(default_factory=list)

    def __init__(self, mocks: Mocks) -> None:
        super().__init__(mocks)
        self.registrations = {}
        self.results = []

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        inputs = pulumi.runtime.rpc.deserialize_properties(request.object)
        self.registrations[request.name] = Registration(
            request.type, response.urn, list(request.dependencies), inputs
        )
        return response


def deploy(
    *,
    template_name: str = "20261130a",
    script_sha: str = "a" * 64,
    url: str | None = None,
    api_key: str | None = None,
    door: tuple[str, str, str] | None = None,
) -> RecordingMonitor:
    """Runs a program of one VM and its gate under mocks (not preview); returns what was registered."""
    mocks = Mocks(template_name)
    monitor = RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="qwen36-mtp-l4", stack="test", preview=False, monitor=monitor)

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        template = gcp.compute.RegionInstanceTemplate(
            "server-template",
            region="europe-west4",
            name_prefix="qwen36-dev-",
            machine_type="g2-standard-8",
            disks=[gcp.compute.RegionInstanceTemplateDiskArgs(source_image="debian-12", boot=True)],
        )
        group = gcp.compute.RegionInstanceGroupManager(
            "server-group",
            name="qwen36-dev",
            region="europe-west4",
            base_instance_name="qwen36-dev",
            versions=[
                gcp.compute.RegionInstanceGroupManagerVersionArgs(instance_template=template.self_link)
            ],
        )
        gate = HealthGate(
            "gate",
            HealthGateArgs(
                project="my-project",
                region="europe-west4",
                group_name=group.name,
                template_id=template.self_link,
                depends_on=[group],
                startup_script_sha256=script_sha,
                url=url,
                api_key=pulumi.Output.secret(api_key) if api_key else None,
                door_url=door[0] if door else None,
                door_service=door[1] if door else None,
                door_revision=door[2] if door else None,
                timeout_minutes=20,
            ),
        )
        exported = gate.after(pulumi.Output.from_input("http://203.0.113.7:8080"))
        return pulumi.Output.all(gate.ready, exported).apply(monitor.results.extend)

    program()
    return monitor


def command_of(monitor: RecordingMonitor) -> Registration:
    (command,) = [r for r in monitor.registrations.values() if r.typ == COMMAND_TYPE]
    return command


def test_gate_runs_after_the_group_and_holds_exports_back() -> None:
    monitor = deploy()
    command = command_of(monitor)
    assert monitor.registrations["server-group"].urn in command.dependencies, (
        "the wait must start after the group"
    )
    assert monitor.registrations["gate-wait"].urn.endswith(
        "qwen36:infra:HealthGate$command:local:Command::gate-wait"
    )
    assert monitor.results == [True, "http://203.0.113.7:8080"]


def test_triggers_change_with_the_template_or_the_startup_script() -> None:
    base = command_of(deploy())
    same = command_of(deploy())
    new_template = command_of(deploy(template_name="20261201b"))
    new_script = command_of(deploy(script_sha="b" * 64))
    assert base.inputs["triggers"] == [f"{TEMPLATES}/qwen36-dev-20261130a", "a" * 64]
    assert same.inputs["triggers"] == base.inputs["triggers"], "an unchanged up must not wait again"
    assert same.inputs["create"] == base.inputs["create"]
    assert new_template.inputs["triggers"] != base.inputs["triggers"], "a rollout must wait again"
    assert new_script.inputs["triggers"] != base.inputs["triggers"]


def test_iap_only_follows_the_vm_report() -> None:
    argv = shlex.split(command_of(deploy(url=None)).inputs["create"])
    assert argv[1:4] == ["-m", "qwen36", "wait"]
    assert argv[argv.index("--mode") + 1] == "guest-attributes"
    assert "--url" not in argv
    assert argv[argv.index("--group") + 1] == "qwen36-dev"
    assert argv[argv.index("--region") + 1] == "europe-west4"
    assert "--zone" not in argv and "--instance" not in argv, "members change: the wait finds them"
    assert argv[argv.index("--timeout-minutes") + 1] == "20"


def test_public_endpoint_probes_http_and_keeps_the_key_out_of_the_command_line() -> None:
    command = command_of(deploy(url="http://203.0.113.7:8080", api_key="sk-test-secret"))
    argv = shlex.split(command.inputs["create"])
    assert argv[argv.index("--mode") + 1] == "http"
    assert argv[argv.index("--url") + 1] == "http://203.0.113.7:8080"
    assert "sk-test-secret" not in command.inputs["create"]
    # The environment reaches the engine as a secret (encrypted in state), the key inside it.
    environment = command.inputs["environment"]
    assert environment[rpc._special_sig_key] == rpc._special_secret_sig
    assert environment["value"][API_KEY_ENV] == "sk-test-secret"


def test_no_api_key_no_secret_environment() -> None:
    environment = command_of(deploy(url="http://203.0.113.7:8080")).inputs["environment"]
    assert environment == {"PYTHONUNBUFFERED": "1"}


DOOR_URL = "https://qwen36-dev-door-123456789012.europe-west4.run.app"


def test_with_a_door_the_wait_ends_at_the_doors_url_and_a_new_door_revision_waits_again() -> None:
    door = (DOOR_URL, "qwen36-dev-door", "door/source-" + "c" * 64 + ".tar.gz")
    command = command_of(deploy(api_key="sk-test-secret", door=door))
    argv = shlex.split(command.inputs["create"])
    assert argv[argv.index("--door-url") + 1] == DOOR_URL
    assert argv[argv.index("--door-service") + 1] == "qwen36-dev-door"
    assert command.inputs["environment"]["value"][API_KEY_ENV] == "sk-test-secret"
    assert command.inputs["triggers"][-1] == door[2]
    new_door = command_of(deploy(api_key="sk-test-secret", door=(*door[:2], "door/source-d.tar.gz")))
    assert new_door.inputs["triggers"] != command.inputs["triggers"]
    assert "--door-url" not in command_of(deploy()).inputs["create"]
