"""GPU-side sampling (``--backend-sampling``) against the real pinned llama-server.

The pinned CPU build does run it: the sampler chain is moved into the model's ggml graph on the
output device, which is the CPU here (the server logs "setting backend sampler" at startup), so
these tests exercise the same sampler ops the CUDA build runs on the GPU. Speed is measured on a
GPU by ``bench/gpu/run.sh``, which also checks greedy equality on the real-width model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from infra.config import PROJECT, StackConfig, parse_config
from infra.server_args import server_args
from tests.harness.server import LlamaServer

pytestmark = pytest.mark.llama

REQUEST_TIMEOUT_S = 60.0
MAX_TOKENS = 32
# llama_context logs this once per sequence when the sampler chain goes into the graph, at the
# info level that llama-server shows only from log verbosity 4 (set by environment, not a flag).
OFFLOAD_LOG = "setting backend sampler for seq_id"
NOT_OFFLOADED_LOG = "cannot be offloaded to the backend"
VERBOSE_ENV = {"LLAMA_ARG_LOG_VERBOSITY": "4"}
PROMPTS = (
    "The quick brown fox",
    "def add(a, b):\n    return",
    "Once upon a time, in a small village,",
    "1, 2, 3, 4,",
)


def _config(*, backend_sampling: bool, mtp: bool) -> StackConfig:
    raw = {"backendSampling": json.dumps(backend_sampling)}
    if not mtp:
        raw["specDraftNMax"] = "0"
    return parse_config({f"{PROJECT}:{key}": value for key, value in raw.items()})


def _server(binary: Path, model: Path, *, backend_sampling: bool, mtp: bool) -> LlamaServer:
    cfg = _config(backend_sampling=backend_sampling, mtp=mtp)
    args = server_args(cfg, model_path=str(model), api_key_file=None, host="127.0.0.1")
    return LlamaServer(args, binary=binary, env=VERBOSE_ENV)


def _greedy(client: httpx.Client, base: str, prompt: str) -> dict:
    body = {
        "prompt": prompt,
        "n_predict": MAX_TOKENS,
        "temperature": 0.0,
        "cache_prompt": False,
        "ignore_eos": True,
    }
    response = client.post(f"{base}/completion", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def _greedy_run(
    binary: Path, model: Path, *, backend_sampling: bool, mtp: bool
) -> tuple[list[str], int, str]:
    """Greedy texts for every prompt, the drafts made, and the server log."""
    with _server(binary, model, backend_sampling=backend_sampling, mtp=mtp) as server:
        server.wait_healthy()
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
            results = [_greedy(client, server.base_url, prompt) for prompt in PROMPTS]
        log = server.log_text()
    drafts = sum(int(r["timings"].get("draft_n", 0)) for r in results)
    return [r["content"] for r in results], drafts, log


def test_setting_renders_the_flag_and_defaults_on() -> None:
    on = server_args(StackConfig(), model_path="m.gguf", api_key_file=None)
    off = server_args(_config(backend_sampling=False, mtp=True), model_path="m.gguf", api_key_file=None)
    assert "--backend-sampling" in on
    assert "--backend-sampling" not in off


@pytest.mark.parametrize("mtp", [False, True], ids=["no-mtp", "mtp"])
@pytest.mark.parametrize("model_fixture", ["tiny_mtp_model", "tiny_mtp_model_agreeing"])
def test_greedy_output_identical_with_and_without(
    llama_server_bin: Path, model_fixture: str, mtp: bool, request: pytest.FixtureRequest
) -> None:
    model: Path = request.getfixturevalue(model_fixture)
    cpu_texts, cpu_drafts, cpu_log = _greedy_run(llama_server_bin, model, backend_sampling=False, mtp=mtp)
    gpu_texts, gpu_drafts, gpu_log = _greedy_run(llama_server_bin, model, backend_sampling=True, mtp=mtp)

    # The flag must really move sampling into the graph on this build, else equality proves nothing.
    assert OFFLOAD_LOG in gpu_log
    assert NOT_OFFLOADED_LOG not in gpu_log
    assert OFFLOAD_LOG not in cpu_log
    assert all(len(text) > 0 for text in cpu_texts)
    assert gpu_texts == cpu_texts
    if mtp:
        assert cpu_drafts > 0 and gpu_drafts > 0
    else:
        assert cpu_drafts == gpu_drafts == 0
    if model_fixture == "tiny_mtp_model":
        # Random weights: the prompts lead to different continuations, so equality is not trivial.
        assert len(set(cpu_texts)) > 1


@pytest.fixture(scope="module")
def production_server(llama_server_bin: Path, tiny_mtp_model: Path) -> Iterator[LlamaServer]:
    """The production setting: MTP drafting and GPU-side sampling both on."""
    cfg = StackConfig()
    assert cfg.backend_sampling and cfg.spec_draft_n_max > 0
    with LlamaServer(
        server_args(cfg, model_path=str(tiny_mtp_model), api_key_file=None, host="127.0.0.1"),
        binary=llama_server_bin,
    ) as server:
        server.wait_healthy()
        yield server


@pytest.fixture
def client(production_server: LlamaServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=production_server.base_url, timeout=REQUEST_TIMEOUT_S) as c:
        yield c


def _chat(client: httpx.Client, **body: object) -> dict:
    messages = [{"role": "user", "content": "Describe a cat."}]
    response = client.post("/v1/chat/completions", json={"messages": messages, **body})
    assert response.status_code == 200, response.text
    return response.json()


def test_sampled_requests_follow_the_seed(client: httpx.Client) -> None:
    params = {"max_tokens": MAX_TOKENS, "temperature": 1.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
    first = _chat(client, seed=11, **params)
    again = _chat(client, seed=11, **params)
    others = [_chat(client, seed=seed, **params) for seed in (12, 13, 14)]

    def text(reply: dict) -> str:
        return str(reply["choices"][0]["message"]["content"])

    assert first["usage"]["completion_tokens"] > 0
    assert text(first) == text(again)
    # Temperature 1 over a random model: some other seed samples something else.
    assert any(text(other) != text(first) for other in others)


def test_json_schema_output_is_valid(client: httpx.Client) -> None:
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["ok", "n"],
        "additionalProperties": False,
    }
    reply = _chat(
        client,
        max_tokens=256,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}},
    )
    value = json.loads(reply["choices"][0]["message"]["content"])
    assert set(value) == {"ok", "n"}
    assert isinstance(value["ok"], bool)
    assert 0 <= value["n"] <= 9


def test_logprobs_are_returned(llama_server_bin: Path, tiny_mtp_model: Path, client: httpx.Client) -> None:
    """Logprobs work with the setting on (llama-server samples such a request on the CPU).

    With MTP drafting, tokens that come out of a verify step carry logprob 0 and no alternatives
    (upstream behaviour at the pinned build, with or without GPU sampling): only the first token
    is checked there.
    """
    body = {"max_tokens": 8, "temperature": 0.0, "logprobs": True, "top_logprobs": 3}
    with _server(llama_server_bin, tiny_mtp_model, backend_sampling=True, mtp=False) as server:
        server.wait_healthy()
        with httpx.Client(base_url=server.base_url, timeout=REQUEST_TIMEOUT_S) as plain_client:
            plain = _chat(plain_client, **body)
    tokens = plain["choices"][0]["logprobs"]["content"]
    # Byte tokens that only make a character together are reported as one entry.
    assert 0 < len(tokens) <= plain["usage"]["completion_tokens"]
    for token in tokens:
        assert token["logprob"] < 0.0
        assert len(token["top_logprobs"]) == 3
        assert token["top_logprobs"][0]["logprob"] >= token["logprob"]

    with_mtp = _chat(client, **body)["choices"][0]["logprobs"]["content"]
    assert [t["token"] for t in with_mtp] == [t["token"] for t in tokens]
    assert with_mtp[0]["top_logprobs"] == tokens[0]["top_logprobs"]


def test_streaming_matches_the_whole_reply(client: httpx.Client) -> None:
    body = {"messages": [{"role": "user", "content": "Describe a cat."}], "max_tokens": MAX_TOKENS}
    whole = client.post("/v1/chat/completions", json={**body, "temperature": 0.0})
    assert whole.status_code == 200
    pieces: list[str] = []
    events = []
    with client.stream(
        "POST", "/v1/chat/completions", json={**body, "temperature": 0.0, "stream": True}
    ) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: "):
                events.append(line[len("data: ") :])
    assert events[-1] == "[DONE]"
    for event in events[:-1]:
        for choice in json.loads(event)["choices"]:
            pieces.append(choice.get("delta", {}).get("content") or "")
    assert len(events) > 2
    assert "".join(pieces) == whole.json()["choices"][0]["message"]["content"]


def test_tool_call_request_succeeds(client: httpx.Client) -> None:
    """A request with tools is served with GPU sampling on (the grammar path falls back to CPU).

    The tiny model's chat template has no tool syntax, so no call is parsed out of its random
    text; the request must still complete normally.
    """
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 12}},
                "required": ["city"],
            },
        },
    }
    reply = _chat(client, max_tokens=MAX_TOKENS, tools=[tool], tool_choice="auto")
    (choice,) = reply["choices"]
    assert choice["finish_reason"] in {"stop", "length", "tool_calls"}
    assert choice["message"]["role"] == "assistant"
    for call in choice["message"].get("tool_calls") or []:
        assert call["function"]["name"] == "get_weather"
