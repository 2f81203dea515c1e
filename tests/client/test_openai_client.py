"""The official ``openai`` Python client against the real pinned llama-server, key on.

The server runs the default deployment's argument list (``conftest.deployed_server_args``) on the
tiny agreeing MTP model, whose greedy answer is a run of "a": every assertion below is about what
the client sees from that real server, nothing is stubbed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import httpx2
import jsonschema
import openai
import pytest
from openai import OpenAI

from infra.config import StackConfig
from tests.client.conftest import API_KEY, WRONG_KEY
from tests.harness.server import LlamaServer

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# The README section that shows the OpenAI client (its bash exports and its Python snippet).
CLIENT_SECTION = "Reaching the server"
ALIAS = StackConfig().alias
MAX_TOKENS = 16
REQUEST_TIMEOUT_S = 60.0
SNIPPET_TIMEOUT_S = 60
SNIPPET_TOKENS = 24
MAX_IMAGE_BYTES = 200_000
# Long enough that the server is still generating when it is killed (~1 ms a token here).
LONG_MAX_TOKENS = 4000
# The restart waits this long after the kill, so the client's first attempt meets a closed port.
RESTART_DELAY_S = 1.5
RETRIES = 5
# A schema the grammar can close: an enum and a bounded integer, so even a model that favours "a"
# must produce a complete, valid object.
SCHEMA = {
    "type": "object",
    "properties": {
        "colour": {"type": "string", "enum": ["red", "green", "blue"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 9},
    },
    "required": ["colour", "count"],
    "additionalProperties": False,
}


def _client(srv: LlamaServer, key: str = API_KEY, **kwargs: object) -> OpenAI:
    return OpenAI(base_url=f"{srv.base_url}/v1", api_key=key, timeout=REQUEST_TIMEOUT_S, **kwargs)  # type: ignore[arg-type]


def _ask(max_tokens: int = MAX_TOKENS) -> dict[str, object]:
    return {
        "model": ALIAS,
        "messages": [{"role": "user", "content": "Say a"}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }


def readme_section(title: str) -> str:
    text = README.read_text()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def readme_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", readme_section(CLIENT_SECTION), re.M | re.S)


def readme_snippet() -> str:
    (snippet,) = [b for b in readme_blocks("python") if "from openai import OpenAI" in b]
    return snippet


def run_snippet(snippet: str, srv: LlamaServer) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "OPENAI_BASE_URL": f"{srv.base_url}/v1",  # what apiBaseUrl names, here a free local port
        "OPENAI_API_KEY": API_KEY,
    }
    return subprocess.run(
        [sys.executable, "-c", snippet], env=env, capture_output=True, text=True, timeout=SNIPPET_TIMEOUT_S
    )


def test_readme_images_exist_and_are_small() -> None:
    images = re.findall(r"!\[[^]]*\]\(([^)]+)\)", readme_section(CLIENT_SECTION))
    assert images, "the section shows the web UI's key prompt"
    for image in images:
        assert (ROOT / image).is_file(), image
        assert (ROOT / image).stat().st_size < MAX_IMAGE_BYTES, image


def test_readme_client_snippet_runs_word_for_word(
    thinking_endpoint_args: list[str], llama_server_bin: Path
) -> None:
    """The README's Python block, run as written, with the environment its bash block sets, against
    the tiny model with the Qwen3.5 chat template: the model thinks first, as Qwen3.6 does, and the
    snippet must show that thinking (the tiny model never stops thinking, so it is all there is).

    The snippet sets no ``max_tokens``: a real model ends its answer, the tiny one never does, so
    this server alone caps answers with ``--n-predict`` (the only flag added to the deployed list).
    Then the README's one line for turning thinking off, added to the same call, makes the answer
    arrive as ``content``.
    """
    snippet = readme_snippet()
    exports = dict(re.findall(r"^export (OPENAI_\w+)=(.+)$", "".join(readme_blocks("bash")), re.M))
    # The endpoint the stack serves: the tunnel's or the front door's (here a local server's port).
    assert exports.get("OPENAI_BASE_URL") == "$(pulumi stack output apiBaseUrl)", exports
    assert "OPENAI_API_KEY" in exports, exports
    assert f'model="{ALIAS}"' in snippet, "the snippet must name the default alias"
    (no_thinking,) = re.findall(r"`(extra_body=\{.*?\})`", readme_section(CLIENT_SECTION))
    assert snippet.count("stream=True,\n") == 1, "the thinking-off line is added after stream=True"
    without = snippet.replace("stream=True,\n", f"stream=True,\n    {no_thinking},\n")
    with LlamaServer(
        [*thinking_endpoint_args, "--n-predict", str(SNIPPET_TOKENS)], binary=llama_server_bin
    ) as srv:
        srv.wait_healthy()
        thinking = run_snippet(snippet, srv)
        answer = run_snippet(without, srv)
    assert thinking.returncode == 0, thinking.stderr
    assert thinking.stdout == "[thinking]\n" + "a" * SNIPPET_TOKENS + "\n", thinking.stdout
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout == "[answer]\n" + "a" * SNIPPET_TOKENS + "\n", answer.stdout


def test_the_thinking_template_streams_reasoning_then_nothing_else(
    thinking_endpoint_args: list[str], llama_server_bin: Path
) -> None:
    """What the snippet relies on, from the real server: with the Qwen3.5 template a streamed
    answer's tokens come as ``reasoning_content`` deltas and no ``content``."""
    with LlamaServer(thinking_endpoint_args, binary=llama_server_bin) as srv:
        srv.wait_healthy()
        stream = _client(srv).chat.completions.create(**_ask(), stream=True)  # type: ignore[call-overload]
        reasoning, content = "", ""
        for chunk in stream:
            for choice in chunk.choices:
                reasoning += getattr(choice.delta, "reasoning_content", None) or ""
                content += choice.delta.content or ""
    assert reasoning == "a" * MAX_TOKENS and content == ""


def test_chat_non_streaming(endpoint: LlamaServer) -> None:
    reply = _client(endpoint).chat.completions.create(**_ask())  # type: ignore[call-overload]
    assert reply.model == ALIAS
    (choice,) = reply.choices
    assert choice.message.role == "assistant"
    assert choice.message.content.startswith("aaaa")
    assert choice.finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == MAX_TOKENS


def test_chat_streaming_arrives_in_pieces(endpoint: LlamaServer) -> None:
    stream = _client(endpoint).chat.completions.create(**_ask(), stream=True)  # type: ignore[call-overload]
    pieces: list[str] = []
    finish = None
    for chunk in stream:
        assert chunk.model == ALIAS
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            finish = choice.finish_reason or finish
    # MTP drafts make a piece one to three tokens; one piece would mean no streaming at all.
    assert len(pieces) > 1, pieces
    assert "".join(pieces).startswith("aaaa")
    assert finish == "length"


def test_models_list_names_the_alias(endpoint: LlamaServer) -> None:
    assert [m.id for m in _client(endpoint).models.list()] == [ALIAS]


def test_json_schema_response_format(endpoint: LlamaServer) -> None:
    reply = _client(endpoint).chat.completions.create(  # type: ignore[call-overload]
        **_ask(max_tokens=64),
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "pick", "strict": True, "schema": SCHEMA},
        },
    )
    content = reply.choices[0].message.content
    jsonschema.validate(json.loads(content), SCHEMA)


def test_wrong_key_raises_authentication_error(endpoint: LlamaServer) -> None:
    with pytest.raises(openai.AuthenticationError) as failure:
        _client(endpoint, WRONG_KEY, max_retries=RETRIES).chat.completions.create(**_ask())  # type: ignore[call-overload]
    assert failure.value.status_code == 401
    assert "Invalid API Key" in str(failure.value)
    with pytest.raises(openai.AuthenticationError):
        _client(endpoint, WRONG_KEY).models.list()


def test_retries_carry_a_call_across_a_server_restart(
    endpoint_args: list[str], llama_server_bin: Path
) -> None:
    """A restart cuts the stream in flight; the next call, made while the server is down, is retried
    by the client until the restarted server answers (the VM's container restart, or autohealing)."""
    attempts: list[str] = []

    def count(request: httpx2.Request) -> None:
        attempts.append(request.headers.get("x-stainless-retry-count", "?"))

    with ExitStack() as cleanup:  # LIFO: cancel and join the restart, then stop both servers
        first = cleanup.enter_context(LlamaServer(endpoint_args, binary=llama_server_bin))
        second = LlamaServer(endpoint_args, binary=llama_server_bin, port=first.port)
        cleanup.callback(second.__exit__, None, None, None)
        restart = threading.Timer(RESTART_DELAY_S, second.start)
        cleanup.callback(lambda: restart.ident is None or restart.join())
        cleanup.callback(restart.cancel)
        first.wait_healthy()
        client = _client(
            first,
            max_retries=RETRIES,
            http_client=openai.DefaultHttpxClient(event_hooks={"request": [count]}),
        )
        stream = client.chat.completions.create(**_ask(LONG_MAX_TOKENS), stream=True)  # type: ignore[call-overload]
        received = ""
        with pytest.raises(openai.APIConnectionError):
            for chunk in stream:
                if chunk.choices:
                    received += chunk.choices[0].delta.content or ""
                if received and first.exit_code() is None:
                    assert first.proc is not None
                    first.proc.send_signal(signal.SIGKILL)
                    first.wait_exit()
                    restart.start()
        assert 0 < len(received) < LONG_MAX_TOKENS, "the stream was not cut mid-answer"
        attempts.clear()

        started = time.monotonic()
        reply = client.chat.completions.create(**_ask())  # type: ignore[call-overload]
        waited = time.monotonic() - started
        assert reply.choices[0].message.content.startswith("aaaa")
        # The first attempt met the closed port; each retry says which one it is.
        assert attempts[0] == "0" and len(attempts) >= 2, attempts
        assert attempts[1:] == [str(i) for i in range(1, len(attempts))], attempts
        assert waited >= RESTART_DELAY_S / 2, waited  # it waited for the restart, it did not fail fast
