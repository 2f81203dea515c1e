"""The generation cap and the one slot, against the real pinned llama-server (issue 21, item 6).

The server runs with the product's own flags (``server_args``), ``--parallel 1`` and the tiny
random-weight model whose trunk and MTP head agree: it answers "aaaa..." and never emits an
end-of-sequence, so a generation stops only at a limit. Facts these tests pin down (b11434's
tools/server/server-stream.cpp and server-context.cpp say the same):

* ``--n-predict N`` (stack key ``defaultMaxTokens``) is the default for a request without
  ``max_tokens``: it stops at N. A request's own ``max_tokens`` wins ("the per-request limit takes
  priority over the global one"), so it is a default, not a ceiling.
* A stream sent with ``X-Conversation-Id`` (what the web UI sends, for stream resume) is not
  stopped when its client goes away: the server keeps generating into its replay buffer until a
  limit, or until ``DELETE /v1/stream?conv_id=<id>`` (the UI's Stop button) cancels it. Without the
  header a dropped stream stops at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from infra.config import StackConfig
from infra.server_args import server_args
from tests.harness.server import LlamaServer, free_port

pytestmark = pytest.mark.llama

CAP = 192
CTX = 4096
THREADS = 2
# The second request must be answered within this once the dropped stream has hit its cap: the cap's
# tokens at the tiny model's slowest measured pace on two loaded cores (~30 tok/s) plus its own.
ANSWER_BOUND_S = 30.0
# Without a cap or a cancel, the second request is still waiting after this long.
STILL_WAITING_S = 4.0
CONVERSATION = "conv-0123456789abcdef"
UNCAPPED_CTX = 131072


def _server(model: Path, binary: Path, cap: int, ctx: int = CTX) -> LlamaServer:
    # A model of its own at its real size, so the config's L4 fit check sees the tiny model it is
    # (the default model is always fitted at its own 23 GB, whatever modelSizeBytes says).
    cfg = StackConfig(
        model_repo="qwen36-tests/tiny",
        model_file="tiny.gguf",
        ctx_size=ctx,
        degraded_ctx_size=2048,
        threads=THREADS,
        default_max_tokens=cap,
        model_size_bytes=model.stat().st_size,
    )
    args = server_args(cfg, model_path=str(model), api_key_file=None, host="127.0.0.1", port=free_port())
    if cap:
        assert args[args.index("--n-predict") + 1] == str(cap)
    else:
        assert "--n-predict" not in args
    return LlamaServer(args, binary=binary)


@pytest.fixture
def capped(tiny_mtp_model_agreeing: Path, llama_server_bin: Path) -> Iterator[LlamaServer]:
    with _server(tiny_mtp_model_agreeing, llama_server_bin, CAP) as srv:
        srv.wait_healthy()
        yield srv


@pytest.fixture
def uncapped(tiny_mtp_model_agreeing: Path, llama_server_bin: Path) -> Iterator[LlamaServer]:
    # A long context, so that filling it takes far longer than the wait below (the tiny model
    # decodes ~1,700 tok/s here with every draft accepted).
    with _server(tiny_mtp_model_agreeing, llama_server_bin, 0, ctx=UNCAPPED_CTX) as srv:
        srv.wait_healthy()
        yield srv


def _chat(**extra: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": "Say a."}], "temperature": 0, **extra}


def _drop_a_stream(base: str, headers: dict[str, str]) -> None:
    """Starts a streaming completion, reads a few chunks, and goes away (a closed browser tab)."""
    with (
        httpx.Client(base_url=base, timeout=60) as client,
        client.stream("POST", "/v1/chat/completions", json=_chat(stream=True), headers=headers) as response,
    ):
        assert response.status_code == 200
        chunks = 0
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks += 1
            if chunks >= 3:
                break
    # Leaving both blocks closes the connection mid-answer.


def _tokens_predicted(base: str) -> float:
    """``llamacpp:tokens_predicted_total``: tokens of the requests that have finished."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    (value,) = [
        line.split()[1] for line in text.splitlines() if line.startswith("llamacpp:tokens_predicted_total")
    ]
    return float(value)


def _answered_within(base: str, seconds: float) -> float | None:
    """How long a small request took, or None when it was not answered within ``seconds``."""
    started = time.monotonic()
    try:
        response = httpx.post(f"{base}/v1/chat/completions", json=_chat(max_tokens=4), timeout=seconds)
    except httpx.TimeoutException:
        return None
    assert response.status_code == 200, response.text
    return time.monotonic() - started


def test_a_request_without_max_tokens_stops_at_the_default(capped: LlamaServer) -> None:
    response = httpx.post(f"{capped.base_url}/v1/chat/completions", json=_chat(), timeout=120)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["usage"]["completion_tokens"] == CAP
    assert body["choices"][0]["finish_reason"] == "length"


def test_a_requests_own_max_tokens_wins_over_the_default(capped: LlamaServer) -> None:
    response = httpx.post(
        f"{capped.base_url}/v1/chat/completions", json=_chat(max_tokens=CAP + 40), timeout=120
    )
    assert response.json()["usage"]["completion_tokens"] == CAP + 40


def test_a_dropped_conversation_stream_frees_the_slot_at_the_cap(capped: LlamaServer) -> None:
    """The slot test: the dropped stream keeps generating (the header), but only up to the cap."""
    started = time.monotonic()
    _drop_a_stream(capped.base_url, {"X-Conversation-Id": CONVERSATION})
    took = _answered_within(capped.base_url, ANSWER_BOUND_S)
    assert took is not None, f"the slot was still held {ANSWER_BOUND_S:g} s after the drop"
    print(f"second request answered {time.monotonic() - started:.1f} s after the dropped stream began")
    # The dropped stream ran on to the cap before the slot came free (the header kept it alive):
    # its CAP tokens and the second request's few are what the server counts as predicted.
    assert CAP <= _tokens_predicted(capped.base_url) <= CAP + 8


def test_without_a_cap_the_dropped_stream_holds_the_slot_until_cancelled(uncapped: LlamaServer) -> None:
    """What the front door must do for a client that went away: DELETE /v1/stream?conv_id=<id>."""
    _drop_a_stream(uncapped.base_url, {"X-Conversation-Id": CONVERSATION})
    assert _answered_within(uncapped.base_url, STILL_WAITING_S) is None, "the slot was free: header ignored?"
    listed = httpx.post(
        f"{uncapped.base_url}/v1/streams/lookup", json={"conversation_ids": [CONVERSATION]}, timeout=10
    ).json()
    assert [s["conversation_id"] for s in listed] == [CONVERSATION] and not listed[0]["is_done"]
    cancel = httpx.delete(f"{uncapped.base_url}/v1/stream", params={"conv_id": CONVERSATION}, timeout=10)
    assert cancel.status_code == 204
    assert _answered_within(uncapped.base_url, ANSWER_BOUND_S) is not None


def test_a_dropped_stream_without_the_header_stops_at_once(uncapped: LlamaServer) -> None:
    _drop_a_stream(uncapped.base_url, {})
    took = _answered_within(uncapped.base_url, ANSWER_BOUND_S)
    assert took is not None and took < STILL_WAITING_S
    assert _tokens_predicted(uncapped.base_url) < 64, "the dropped stream went on generating"
