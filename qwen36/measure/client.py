"""HTTP client for llama-server's OpenAI-compatible API, with errors a user can act on.

Every failure becomes an :class:`EndpointError` whose ``kind`` names it (for counting in ``load``)
and whose message is one line: what happened, then what to do.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

import httpx

from qwen36.measure.defaults import DEFAULT_REQUEST_TIMEOUT_S

HEALTH_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0

# Error kinds, stable strings: they appear in --json output and in load's error counts.
UNREACHABLE = "unreachable"
SERVER_DIED = "server_died"
UNAUTHORIZED = "unauthorized"
TIMEOUT = "timeout"
LOADING = "loading"
HTTP_ERROR = "http_error"
BAD_RESPONSE = "bad_response"
ERROR_KINDS = (UNREACHABLE, SERVER_DIED, UNAUTHORIZED, TIMEOUT, LOADING, HTTP_ERROR, BAD_RESPONSE)


class EndpointError(Exception):
    """A request that produced no measurement; ``str()`` is the one-line message for the user."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class Completion:
    """One generation's server-reported timings plus the wall time the client saw."""

    prompt_n: int
    prompt_per_second: float
    predicted_n: int
    predicted_per_second: float
    draft_n: int | None
    draft_n_accepted: int | None
    wall_s: float
    predicted_ms: float = 0.0
    """The decode time behind ``predicted_per_second`` (``timings.predicted_ms``)."""


def normalize_url(url: str) -> str:
    """The server root: stack outputs and users may give the OpenAI base (``.../v1``) instead."""
    url = url.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    if not url.startswith(("http://", "https://")):
        url = f"http://{url}"
    return url


def chat_body(prompt: str, max_tokens: int) -> dict[str, Any]:
    # Greedy and without prompt cache, as the measurement promises; sampling is per request
    # because server-side sampling flags perturb the draft distribution.
    return {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "cache_prompt": False,
        "stream": False,
    }


def headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def parse_completion(payload: Any, wall_s: float) -> Completion:
    timings = payload.get("timings") if isinstance(payload, dict) else None
    if not isinstance(timings, dict) or "predicted_per_second" not in timings:
        raise EndpointError(
            BAD_RESPONSE,
            "the server answered without llama.cpp 'timings': point --url at a llama-server, "
            "not another OpenAI-compatible proxy",
        )
    try:
        return _completion(timings, wall_s)
    except (TypeError, ValueError, OverflowError):
        raise EndpointError(
            BAD_RESPONSE,
            f"the server's 'timings' are not positive numbers ({json.dumps(timings, default=str)[:160]}): "
            "point --url at a llama-server",
        ) from None


def _completion(timings: dict[str, Any], wall_s: float) -> Completion:
    draft_n = timings.get("draft_n")
    accepted = timings.get("draft_n_accepted")
    predicted_n = int(timings.get("predicted_n", 0))
    rate = _finite(timings["predicted_per_second"])
    # A decode that made no token, or in no or negative time, measures nothing (issue 29: bench
    # printed -5.0 and 0.0 tok/s from such timings).
    if rate <= 0 or predicted_n <= 0 or float(timings.get("predicted_ms", 1.0)) <= 0:
        raise ValueError(timings)
    for name in ("prompt_n", "prompt_per_second", "draft_n", "draft_n_accepted"):
        if float(timings.get(name) or 0) < 0:
            raise ValueError(timings)
    # predicted_ms is in every llama-server's timings; derived from the rate should one lack it.
    fallback_ms = predicted_n / rate * 1000.0 if rate > 0 else 0.0
    return Completion(
        prompt_n=int(timings.get("prompt_n", 0)),
        prompt_per_second=_finite(timings.get("prompt_per_second", 0.0)),
        predicted_n=predicted_n,
        predicted_per_second=rate,
        draft_n=int(draft_n) if draft_n is not None else None,
        draft_n_accepted=int(accepted) if accepted is not None else None,
        wall_s=wall_s,
        predicted_ms=_finite(timings.get("predicted_ms", fallback_ms)),
    )


def _finite(value: Any) -> float:
    """A JSON number as a float; a string, a bool, NaN or infinity is refused (ValueError)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(value)
    return float(value)


def json_body(response: httpx.Response) -> Any:
    """The response's JSON, or an EndpointError naming what came instead (an HTML page, text)."""
    try:
        return response.json()
    except ValueError:
        kind = response.headers.get("content-type", "no content type").split(";")[0]
        raise EndpointError(
            BAD_RESPONSE,
            f"the server answered {response.status_code} with {kind}, not JSON "
            f"({response.text[:60]!r}): point --url at a llama-server",
        ) from None


def status_error(response: httpx.Response, *, has_key: bool) -> EndpointError:
    if response.status_code == 401:
        if has_key:
            return EndpointError(
                UNAUTHORIZED,
                "the server rejected the API key (401): pass the key the server was started with "
                "(--api-key or QWEN36_API_KEY; on the VM: pulumi stack output apiKey --show-secrets)",
            )
        return EndpointError(
            UNAUTHORIZED,
            "the server wants an API key (401): pass --api-key or set QWEN36_API_KEY "
            "(pulumi stack output apiKey --show-secrets)",
        )
    if response.status_code == 503:
        return EndpointError(
            LOADING, "the server is still loading the model (503): wait until /health says ok, then rerun"
        )
    try:
        detail = str(response.json().get("error", {}).get("message", ""))
    except (ValueError, AttributeError):
        detail = response.text[:200]
    return EndpointError(
        HTTP_ERROR,
        f"the server answered HTTP {response.status_code} ({detail.strip() or 'no detail'}): "
        "check the request options and the server log",
    )


def transport_error(
    exc: httpx.TransportError, *, url: str, seen_alive: bool, timeout_s: float
) -> EndpointError:
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        return EndpointError(
            TIMEOUT,
            f"no answer within {timeout_s:g} s: raise --timeout or lower --max-tokens, "
            "and check the server is not stuck or overloaded",
        )
    if seen_alive:
        return EndpointError(
            SERVER_DIED,
            f"the server at {url} stopped answering mid-run ({type(exc).__name__}): it crashed or was "
            "stopped; read its log (on the VM: sudo docker logs llama-server) and rerun",
        )
    return EndpointError(
        UNREACHABLE,
        f"no server answers at {url} ({type(exc).__name__}): start it, check --url/QWEN36_URL, "
        "or open the IAP tunnel to port 8080",
    )


class Client:
    """Synchronous client used by ``bench`` and ``tune``; remembers whether the server ever answered."""

    def __init__(self, url: str, api_key: str | None, timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> None:
        self.url = normalize_url(url)
        self.api_key = api_key or None
        self.timeout_s = timeout_s
        self.seen_alive = False
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers(self.api_key),
            timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S),
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.InvalidURL as exc:
            raise EndpointError(UNREACHABLE, f"{self.url} is not a usable URL ({exc}): check --url") from None
        except httpx.TransportError as exc:
            timeout_s = float(kwargs.get("timeout", self.timeout_s))
            raise transport_error(
                exc, url=self.url, seen_alive=self.seen_alive, timeout_s=timeout_s
            ) from None
        self.seen_alive = True
        if response.status_code != 200:
            raise status_error(response, has_key=self.api_key is not None)
        return response

    def check_health(self) -> None:
        """Raise unless /health says ok (it is open even when the server wants a key)."""
        self._request("GET", "/health", timeout=HEALTH_TIMEOUT_S)

    def metrics(self) -> str:
        """llama-server's Prometheus text (``--metrics``; behind the API key when it has one)."""
        return self._request("GET", "/metrics", timeout=HEALTH_TIMEOUT_S).text

    def slot_context(self) -> int:
        """Tokens one slot can hold (``meta.n_ctx`` of /v1/models: per slot, capped at n_ctx_train)."""
        data = json_body(self._request("GET", "/v1/models"))
        try:
            return int(data["data"][0]["meta"]["n_ctx"])
        except (KeyError, IndexError, TypeError, ValueError):
            raise EndpointError(
                BAD_RESPONSE, "/v1/models has no meta.n_ctx: is this a llama-server?"
            ) from None

    def tokenize(self, text: str) -> list[int]:
        data = json_body(self._request("POST", "/tokenize", json={"content": text}))
        try:
            return [int(t) for t in data["tokens"]]
        except (KeyError, TypeError, ValueError):
            raise EndpointError(
                BAD_RESPONSE, "/tokenize answered without tokens: is this a llama-server?"
            ) from None

    def chat(self, prompt: str, max_tokens: int) -> Completion:
        start = time.perf_counter()
        response = self._request("POST", "/v1/chat/completions", json=chat_body(prompt, max_tokens))
        return parse_completion(json_body(response), time.perf_counter() - start)

    def complete_tokens(self, tokens: list[int], max_tokens: int) -> Completion:
        """A raw-token completion: exact prompt length, for filling a slot's context."""
        body = {"prompt": tokens, "n_predict": max_tokens, "temperature": 0, "cache_prompt": False}
        start = time.perf_counter()
        response = self._request("POST", "/completion", json=body)
        return parse_completion(json_body(response), time.perf_counter() - start)
