"""Pulumi's mocks with the engine-side view recorded: inputs, dependencies, options and log lines.

GCP and the Pulumi engine are the boundary here; the component code runs for real. The mocks'
own arguments lack the resource options, so the monitor records what the engine would receive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pulumi
from pulumi.runtime import settings
from pulumi.runtime.mocks import MockMonitor

PROJECT = "qwen36-mtp-l4"
GCP_PROJECT = "acme-llm-test"
# What a builder command prints: the new VM's numeric instance id.
BUILDER_INSTANCE_ID = "7301234567890123456"


class ProviderError(grpc.RpcError):
    """How the engine hands a provider's invoke error back (a gRPC status, here UNKNOWN).

    The SDK raises such an error to the caller as a plain ``Exception``; any other exception
    from the monitor counts as an SDK crash and fails the whole program at its end.
    """

    def __init__(self, details: str) -> None:
        super().__init__(details)
        self._details = details

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNKNOWN

    def details(self) -> str:
        return self._details


@dataclass(frozen=True)
class Registration:
    type: str
    urn: str
    inputs: dict[str, Any]
    dependencies: tuple[str, ...]
    retain_on_delete: bool
    delete_before_replace: bool
    custom_timeouts: dict[str, str]


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(
        self,
        call: Callable[[pulumi.runtime.MockCallArgs], dict[str, Any]] | None = None,
        builder_id: str = BUILDER_INSTANCE_ID,
    ) -> None:
        self._call = call
        self.builder_id = builder_id
        self.calls: list[pulumi.runtime.MockCallArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        state = dict(args.inputs)
        if args.typ == "gcp:compute/image:Image":
            name = state["name"]
            state["selfLink"] = (
                f"https://www.googleapis.com/compute/v1/projects/{GCP_PROJECT}/global/images/{name}"
            )
            return f"projects/{GCP_PROJECT}/global/images/{name}", state
        if args.typ == "gcp:serviceaccount/account:Account":
            state["email"] = f"{state['accountId']}@{GCP_PROJECT}.iam.gserviceaccount.com"
            return f"projects/{GCP_PROJECT}/serviceAccounts/{state['email']}", state
        if args.typ == "command:local:Command":
            state["stdout"] = self.builder_id + "\n" if args.name.endswith("-builder") else ""
            return f"{args.name}-4f2a", state
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        self.calls.append(args)
        return (self._call(args) if self._call is not None else {}), []


class RecordingMonitor(MockMonitor):
    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.registrations: dict[str, Registration] = {}
        self.order: list[str] = []

    def RegisterResource(self, request: Any) -> Any:  # the gRPC method's name
        from pulumi.runtime import rpc

        response = super().RegisterResource(request)
        timeouts = request.customTimeouts
        self.order.append(request.name)
        self.registrations[request.name] = Registration(
            type=request.type,
            urn=response.urn,
            inputs=rpc.deserialize_properties(request.object),
            dependencies=tuple(request.dependencies),
            retain_on_delete=bool(request.retainOnDelete),
            delete_before_replace=bool(request.deleteBeforeReplace),
            custom_timeouts={"create": timeouts.create, "update": timeouts.update, "delete": timeouts.delete},
        )
        return response


class LogRecorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelname, record.getMessage()))


@dataclass
class Mocked:
    mocks: RecordingMocks
    monitor: RecordingMonitor
    logs: LogRecorder
    logger: logging.Logger = field(repr=False)

    def run(self, build: Callable[[], pulumi.Output[Any] | None]) -> Any:
        """Run ``build`` as a Pulumi program; returns what its output resolved to."""
        result: dict[str, Any] = {}

        @pulumi.runtime.test
        def program() -> pulumi.Output[Any]:
            output = build()
            return pulumi.Output.from_input(output).apply(lambda value: result.setdefault("value", value))

        program()
        return result.get("value")


def set_up(
    call: Callable[[pulumi.runtime.MockCallArgs], dict[str, Any]] | None = None,
    builder_id: str = BUILDER_INSTANCE_ID,
) -> Mocked:
    mocks = RecordingMocks(call, builder_id)
    monitor = RecordingMonitor(mocks)
    logs = LogRecorder()
    logger = logging.getLogger(f"pulumi-mock-{id(logs)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(logs)
    settings.ROOT.set(None)
    pulumi.runtime.set_mocks(
        mocks, project=PROJECT, stack="dev", preview=False, monitor=monitor, logger=logger
    )
    return Mocked(mocks, monitor, logs, logger)
