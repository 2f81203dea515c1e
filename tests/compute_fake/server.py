"""The fake group served over HTTP: the Compute API's REST v1 routes that our clients call.

They are the real google-cloud-compute client (REST transport, ``api_endpoint`` pointed here) and the
VM's watcher (urllib against ``<endpoint>/compute/v1``): URL layout, verbs, query parameters, JSON
decoding and error mapping stay the clients' own. Every request is recorded on the group.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

from infra import boot_protocol
from tests.compute_fake import shapes
from tests.compute_fake.group import DROP, HANG, Call, FakeGroup, FakeMember
from tests.harness.loopback import JsonHandler, serve_on_loopback

# How long a HANG fault holds its request: past any client timeout, ended early when the fake stops.
HANG_S = 600.0


def _handler(group: FakeGroup, stopping: threading.Event) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def _not_found(self, path: str) -> None:
            self._json(404, shapes.not_found(path))

        def _record(self) -> tuple[str, dict[str, list[str]]]:
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            query = parse_qs(url.query)
            headers = dict(self.headers.items())
            group.record(Call(self.command, url.path, query, body, headers, group.clock()))
            return url.path, query

        def _faulted(self, path: str) -> bool:
            """Answers an injected fault, if one matches; True when it did."""
            fault = group.take_fault(self.command, path)
            if fault is None:
                return False
            if fault.status == HANG:
                stopping.wait(HANG_S)
                self.close_connection = True
            elif fault.status == DROP:
                self.close_connection = True
            elif fault.body is not None:
                self.send_response(int(fault.status))
                self.send_header("Content-Type", fault.content_type)
                self.send_header("Content-Length", str(len(fault.body)))
                self.end_headers()
                self.wfile.write(fault.body)
            else:
                # Google's error body for the status (https://cloud.google.com/apis/design/errors)
                status = int(fault.status)
                reason = {429: "rateLimitExceeded", 503: "backendError"}.get(status, "backendError")
                data = json.dumps(shapes.error(status, reason, shapes.BACKEND_ERROR_MESSAGE)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if fault.retry_after is not None:
                    self.send_header("Retry-After", fault.retry_after)
                self.end_headers()
                self.wfile.write(data)
            return True

        def do_GET(self) -> None:
            path, query = self._record()
            if self._faulted(path):
                return
            operations = f"{group.region_path}/operations/"
            if path == group.path:
                self._json(200, shapes.instance_group_manager(group, group.state()))
            elif path == f"{group.path}/listErrors":
                self._json(200, shapes.list_errors(group.state().errors))
            elif path.startswith(operations):
                self._operation(path, path.removeprefix(operations))
            else:
                self._member_get(path, query.get("queryPath", [""])[0])

        def do_POST(self) -> None:
            path, query = self._record()
            if self._faulted(path):
                return
            operations = f"{group.region_path}/operations/"
            if path == f"{group.path}/listManagedInstances":
                self._json(200, shapes.managed_instances(group, group.state().members))
            elif path == f"{group.path}/resize":
                self._resize(int(query["size"][0]), query.get("requestId", [""])[0], path)
            elif path.startswith(operations) and path.endswith("/wait"):
                self._operation(path, path.removeprefix(operations).removesuffix("/wait"))
            else:
                self._not_found(path)

        def _member(self, path: str) -> tuple[FakeMember | None, str]:
            """The member whose VM ``path`` names (none before the group created it), and the rest."""
            for member in group.state().members:
                prefix = group.instance_path(member)
                if member.status is not None and (path == prefix or path.startswith(prefix + "/")):
                    return member, path.removeprefix(prefix)
            return None, ""

        def _member_get(self, path: str, query_path: str) -> None:
            member, rest = self._member(path)
            if member is None:
                self._not_found(path)
            elif rest == "":
                self._json(200, shapes.instance(group, member))
            elif rest == "/getGuestAttributes":
                # The fake holds the one namespace our VMs write; GCE answers 404 before any write.
                if member.guest_attributes and query_path == f"{boot_protocol.NAMESPACE}/":
                    self._json(200, shapes.guest_attributes(query_path, member.guest_attributes))
                else:
                    self._not_found(path)
            elif rest == "/serialPort":
                self._json(200, shapes.serial_port_output(member.serial))
            else:
                self._not_found(path)

        def _resize(self, size: int, request_id: str, path: str) -> None:
            # https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/resize
            failure = group.take_resize_failure()
            if failure is not None:
                self._json(failure, shapes.error(failure, "backendError", shapes.BACKEND_ERROR_MESSAGE))
                return
            # requestId: "if you must retry your request, the server will know to ignore the request
            # if it has already been completed" (the same page, query parameters). What GCE answers
            # the ignored request is not spelled out; the fake answers the first operation, and the
            # client only needs an operation name to wait on (DONE either way).
            if request_id and request_id in group.request_ids:
                self._json(200, group.operations[group.request_ids[request_id]])
                return
            operation = shapes.resize_operation(group, group.resize(size))
            group.operations[operation["name"]] = operation
            if request_id:
                group.request_ids[request_id] = operation["name"]
            if group.take_applied_then_drop("POST", path):
                self.close_connection = True
                if group.on_resize is not None:
                    group.on_resize(size)
                return
            self._json(200, operation)
            if group.on_resize is not None:
                group.on_resize(size)

        def _operation(self, path: str, name: str) -> None:
            # regionOperations.get and wait both answer the Operation; wait returns once it is DONE.
            operation = group.operations.get(name)
            if operation is None:
                self._not_found(path)
            else:
                self._json(200, shapes.done(operation))

    return Handler


@contextmanager
def fake_compute_api(group: FakeGroup) -> Iterator[str]:
    """Serves ``group`` on a free loopback port; yields the endpoint for ``ClientOptions(api_endpoint=)``
    (``<endpoint>/compute/v1`` is the REST base)."""
    stopping = threading.Event()
    try:
        with serve_on_loopback(_handler(group, stopping)) as endpoint:
            try:
                yield endpoint
            finally:
                stopping.set()
    finally:
        stopping.set()
