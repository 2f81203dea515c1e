"""Bounded retries of transient cloud API errors, for every Compute API call the CLI makes.

Transient means a 429 or 5xx answer (google-api-core's TooManyRequests, InternalServerError,
BadGateway, ServiceUnavailable, GatewayTimeout, DeadlineExceeded) or a dropped, refused or timed-out
connection. The policy is tenacity's: at most ``POLICY.attempts`` tries, exponential backoff with
jitter between them, and no new try once ``POLICY.budget_s`` has passed; a call that still fails
raises :class:`qwen36.errors.UnreachableError` naming the call, the last answer and the tries.

The client library's own retry is turned off for these calls (``retry=None``): google-cloud-compute
retries a GET on 503 for up to 600 s by default and a POST never, which is the hang and the
traceback the fault tests caught.

An answer the library cannot parse (HTML, junk, JSON of another shape) is not retried: it raises
:class:`qwen36.errors.BadAnswerError` naming the call and what came back (qwen36/cloud_answers.py).

Only calls that are safe to repeat are retried: GETs, the read-only POSTs (``listManagedInstances``,
``listErrors`` and ``regionOperations.wait`` change nothing), and a mutating POST only when it
carries a ``requestId``, which Compute documents for exactly this: "if you must retry your request,
the server will know to ignore the request if it has already been completed"
(https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/resize, the
``requestId`` query parameter). :class:`RetryingClient` adds one ``request_id`` per logical call
and keeps it across its tries.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import tenacity

from qwen36.cloud_answers import bad_answer, parse_failures
from qwen36.errors import UnreachableError, detail, is_connection_error, is_transient_google

T = TypeVar("T")


@dataclass(frozen=True)
class Policy:
    attempts: int = 4
    initial_s: float = 1.0
    max_s: float = 8.0
    budget_s: float = 60.0
    """No try starts after this many seconds from the first (each try is also bounded by its own
    request timeout, so a call ends within about budget + one timeout)."""


POLICY = Policy()
# tenacity's sleep; tests replace it to run the backoff on a virtual clock.
SLEEP: Callable[[float], None] = time.sleep


def is_transient(exc: BaseException) -> bool:
    return is_transient_google(exc) or is_connection_error(exc)


def call(fn: Callable[..., T], *args: Any, what: str, policy: Policy | None = None, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` with transient errors retried; the last failure raises UnreachableError."""
    chosen = policy or POLICY
    started = time.monotonic()
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(chosen.attempts) | tenacity.stop_after_delay(chosen.budget_s),
        wait=tenacity.wait_exponential_jitter(initial=chosen.initial_s, max=chosen.max_s),
        retry=tenacity.retry_if_exception(is_transient),
        sleep=lambda seconds: SLEEP(seconds),
        reraise=True,
    )
    try:
        return retrying(fn, *args, **kwargs)
    except Exception as exc:
        if not is_transient(exc):
            raise
        tries = retrying.statistics.get("attempt_number", 1)
        spent = time.monotonic() - started
        raise UnreachableError(
            f"{what} kept failing ({type(exc).__name__}: {detail(exc)}) after {tries} "
            f"tr{'y' if tries == 1 else 'ies'} over {spent:.0f} s; check the network and "
            "https://status.cloud.google.com, then rerun"
        ) from exc


class RetryingClient:
    """A google-cloud-compute client whose methods go through :func:`call`.

    ``mutating`` names the methods that change something; each is called with a request object
    (the flattened arguments have no ``request_id``), which gets a fresh ``request_id``, kept across
    its tries, unless the caller set one. A method neither read-only
    by name (``get``, ``list*``, ``wait``, ``aggregated_list``, ``get_*``) nor in ``mutating`` is
    refused, so a new mutating call cannot be retried by accident.
    """

    READ_ONLY_PREFIXES = ("get", "list", "aggregated_list", "wait")

    def __init__(self, client: Any, service: str, mutating: frozenset[str] = frozenset()) -> None:
        from qwen36.cloud_answers import watch

        self._client = client
        self._service = service
        self._mutating = mutating
        self.last = watch(client)
        """The latest answer the client received (for the line of an answer that is not the API's)."""

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if not callable(method) or name.startswith("_"):
            return method
        read_only = name.startswith(self.READ_ONLY_PREFIXES)
        if not read_only and name not in self._mutating:
            raise AttributeError(f"{self._service}.{name} is neither read-only nor declared mutating")

        def retried(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("retry", None)
            if name in self._mutating:
                request = kwargs.get("request")
                if request is None or not hasattr(request, "request_id"):
                    raise TypeError(f"{self._service}.{name}: pass request=<...Request> so a requestId fits")
                if not request.request_id:
                    request.request_id = str(uuid.uuid4())
            what = f"the Compute API's {self._service}.{_camel(name)}"
            try:
                return call(method, *args, what=what, **kwargs)
            except parse_failures() as exc:
                # An answer the library could not parse is not retried: a proxy's page stays one.
                raise bad_answer(exc, what, self.last) or exc from exc

        return retried


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
