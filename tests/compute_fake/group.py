"""The group a fake Compute API serves: its members, its errors and every request it was sent.

A group is a timeline of states, each taking over at a time of the test's clock, so a test can stage
a stockout, a repair or a late report and run the code under test on a virtual clock; a test of one
steady state gives a timeline of one. A resize changes the state in force, as it changes GCE's group,
and leaves an operation for ``regionOperations.get`` and ``wait`` to answer.
"""

from __future__ import annotations

import copy
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from infra import boot_protocol
from tests.compute_fake.clock import at

# The REST base under the endpoint, and the host GCE writes into resource URLs (selfLink, instance).
PREFIX = "/compute/v1"
LINK_HOST = "https://www.googleapis.com"


def report(phase: str, seconds: float, detail: str = "", boot_id: str = "boot-1") -> str:
    """A report value as the VM writes it (the shared contract's own formatter)."""
    return boot_protocol.format_report(boot_protocol.Report(phase, at(seconds), boot_id, detail))


@dataclass
class FakeMember:
    """One managed instance and its VM."""

    name: str
    zone: str
    status: str | None = "RUNNING"
    """``instanceStatus``; None while the group has not created the VM (CREATING after a stockout)."""
    action: str = "NONE"
    """``currentAction``."""
    started: float = 0.0
    """``lastStartTimestamp`` as a time of the test's clock."""
    guest_attributes: dict[str, str] = field(default_factory=dict)
    """What the VM wrote under the ``qwen36/`` namespace, by key; none until its first write."""
    serial: str = ""
    last_attempt: list[dict[str, Any]] = field(default_factory=list)
    """``lastAttempt.errors.errors``, as built by ``shapes.attempt_error``."""
    network_ip: str = "10.128.0.2"
    """``networkInterfaces[0].networkIP``: the VM's internal address (the door's tests use 127.0.0.1)."""


@dataclass
class GroupState:
    members: list[FakeMember] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    """``listErrors`` items, as built by ``shapes.list_error``."""
    target_size: int = 1


@dataclass(frozen=True)
class Call:
    """One request as the fake received it."""

    method: str
    path: str
    """Without the query."""
    query: dict[str, list[str]]
    body: bytes
    headers: dict[str, str]
    t: float
    """The group's clock at arrival."""


HANG = "hang"
DROP = "drop"
# The request takes effect, then the connection closes before the answer: the case requestId is for.
APPLIED_THEN_DROP = "applied-then-drop"


@dataclass
class Fault:
    """One injected failure: the next ``times`` requests whose method is ``method`` and whose path ends
    with ``suffix`` get ``status`` (an HTTP code with Google's error body, ``DROP``: the connection
    closed with no answer, ``HANG``: no answer until the fake stops)."""

    method: str
    suffix: str
    status: int | str
    times: int = 1
    retry_after: str | None = None
    """A ``Retry-After`` header on the error answer (429/503), in seconds."""
    body: bytes | None = None
    """Answer ``status`` with exactly these bytes instead of Google's error body: what a proxy, a
    captive portal or a broken middlebox sends (an HTML page, junk, JSON of another shape). No Google
    document describes such answers; they stand for whatever is not the API."""
    content_type: str = "application/json"


@dataclass
class FakeGroup:
    """A regional managed instance group whose state follows ``timeline`` [(from time, state)] on
    ``clock``; a group that only changes by resizes has a timeline of one state."""

    timeline: list[tuple[float, GroupState]] = field(default_factory=lambda: [(0.0, GroupState())])
    clock: Callable[[], float] = time.monotonic
    project: str = "proj"
    region: str = "europe-west4"
    name: str = "qwen36-dev"
    new_member: FakeMember = field(default_factory=lambda: FakeMember("qwen36-dev-x1b2", "europe-west4-b"))
    """What a resize up creates (a test edits it to stage a stockout or a report)."""
    resize_failures: list[int] = field(default_factory=list)
    """HTTP statuses of errors for the next resize calls, in order; once empty, resizes succeed."""
    faults: list[Fault] = field(default_factory=list)
    """Failures to inject, each taken by the first request it matches (``Fault``)."""
    calls: list[Call] = field(default_factory=list)
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The operations resizes started, by name."""
    on_resize: Callable[[int], None] | None = None
    """Called with the new size after each resize that changed the group (the door's tests start or
    stop the real llama-server from it, as the group creates or deletes the member)."""
    request_ids: dict[str, str] = field(default_factory=dict)
    """requestId -> the operation it started: a repeated requestId starts nothing new, as GCE
    documents (regionInstanceGroupManagers/resize, ``requestId``)."""
    _operation_numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def region_path(self) -> str:
        return f"{PREFIX}/projects/{self.project}/regions/{self.region}"

    @property
    def path(self) -> str:
        return f"{self.region_path}/instanceGroupManagers/{self.name}"

    def zone_path(self, zone: str) -> str:
        return f"{PREFIX}/projects/{self.project}/zones/{zone}"

    def instance_path(self, member: FakeMember) -> str:
        return f"{self.zone_path(member.zone)}/instances/{member.name}"

    def state(self) -> GroupState:
        """The latest state whose time has come."""
        now = self.clock()
        current = self.timeline[0][1]
        for start, state in self.timeline:
            if start <= now:
                current = state
        return current

    def record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def resizes(self) -> list[Call]:
        return [c for c in self.calls if c.method == "POST" and c.path == f"{self.path}/resize"]

    def reads(self, suffix: str) -> list[float]:
        """Clock times of the requests whose path ends with ``suffix``."""
        return [c.t for c in self.calls if c.path.endswith(suffix)]

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if (
                    fault.times > 0
                    and fault.method == method
                    and path.endswith(fault.suffix)
                    and fault.status != APPLIED_THEN_DROP
                ):
                    fault.times -= 1
                    return fault
        return None

    def take_applied_then_drop(self, method: str, path: str) -> bool:
        with self._lock:
            for fault in self.faults:
                if (
                    fault.times > 0
                    and fault.status == APPLIED_THEN_DROP
                    and fault.method == method
                    and path.endswith(fault.suffix)
                ):
                    fault.times -= 1
                    return True
        return False

    def take_resize_failure(self) -> int | None:
        with self._lock:
            return self.resize_failures.pop(0) if self.resize_failures else None

    def resize(self, size: int) -> int:
        """Sets the target size (at 0 the members go; copies of ``new_member`` fill it up to ``size``);
        returns the number of the operation that carries it."""
        state = self.state()
        with self._lock:
            state.target_size = size
            if size == 0:
                state.members.clear()
            while len(state.members) < size:
                state.members.append(copy.deepcopy(self.new_member))
            return next(self._operation_numbers)
