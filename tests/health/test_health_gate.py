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
AUTONAME_SUFFIX = "1a2b3c4"


class Mocks(pulumi.runtime.Mocks):
    def __init__(self, instance_id: str) -> None:
        self.instance_id = instance_id

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        state = dict(args.inputs)
        if args.typ == "gcp:compute/instance:Instance":
            state["instanceId"] = self.instance_id
            # Pulumi auto-names the VM (logical name plus a random suffix).
            state.setdefault("name", f"{args.name}-{AUTONAME_SUFFIX}")
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
    instance_id: str = "1111",
    script_sha: str = "a" * 64,
    url: str | None = None,
    api_key: str | None = None,
) -> RecordingMonitor:
    """Runs a program of one VM and its gate under mocks (not preview); returns what was registered."""
    mocks = Mocks(instance_id)
    monitor = RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="qwen36-mtp-l4", stack="test", preview=False, monitor=monitor)

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        instance = gcp.compute.Instance(
            "server-vm",
            machine_type="g2-standard-8",
            zone="europe-west4-a",
            boot_disk={"initialize_params": {"image": "debian-12"}},
            network_interfaces=[{"network": "default"}],
        )
        gate = HealthGate(
            "gate",
            HealthGateArgs(
                instance=instance,
                zone="europe-west4-a",
                project="my-project",
                startup_script_sha256=script_sha,
                url=url,
                api_key=pulumi.Output.secret(api_key) if api_key else None,
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


def test_gate_runs_after_the_instance_and_holds_exports_back() -> None:
    monitor = deploy()
    command = command_of(monitor)
    assert monitor.registrations["server-vm"].urn in command.dependencies, "the wait must start after the VM"
    assert monitor.registrations["gate-wait"].urn.endswith(
        "qwen36:infra:HealthGate$command:local:Command::gate-wait"
    )
    assert monitor.results == [True, "http://203.0.113.7:8080"]


def test_triggers_change_with_the_instance_or_the_startup_script() -> None:
    base = command_of(deploy())
    same = command_of(deploy())
    replaced_vm = command_of(deploy(instance_id="2222"))
    new_script = command_of(deploy(script_sha="b" * 64))
    assert base.inputs["triggers"] == ["1111", "a" * 64]
    assert same.inputs["triggers"] == base.inputs["triggers"], "an unchanged up must not wait again"
    assert same.inputs["create"] == base.inputs["create"]
    assert replaced_vm.inputs["triggers"] != base.inputs["triggers"]
    assert new_script.inputs["triggers"] != base.inputs["triggers"]


def test_iap_only_follows_the_vm_report() -> None:
    argv = shlex.split(command_of(deploy(url=None)).inputs["create"])
    assert argv[1:4] == ["-m", "qwen36", "wait"]
    assert argv[argv.index("--mode") + 1] == "guest-attributes"
    assert "--url" not in argv
    assert argv[argv.index("--instance") + 1] == f"server-vm-{AUTONAME_SUFFIX}"
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
