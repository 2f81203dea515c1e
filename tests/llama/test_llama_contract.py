"""The server arguments the product renders, run against the real pinned llama-server.

The argument list is taken from the rendered startup script itself, with only what the VM's
container would differ in swapped: the model and key file paths, loopback host and a free port.
The model is the tiny random-weight ``qwen35moe`` with an MTP head (``tests/harness/synth_gguf.py``).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import httpx
import pytest

from infra.boot_script import render_boot_script
from infra.config import StackConfig
from infra.server_args import CONTAINER_API_KEY_FILE, container_model_path, server_args
from tests.harness.server import LlamaServer, LlamaServerError, free_port

pytestmark = pytest.mark.llama

API_KEY = "test-key-0123456789"
REQUEST_TIMEOUT_S = 60.0
# Greedy tokens to generate: enough drafts (n-max 2) to count, fast on 2 cores.
MAX_TOKENS = 24
# The first-speculative-decoding counters llama-server's /metrics must expose.
SPEC_COUNTERS = (
    "llamacpp:spec_decode_num_draft_tokens_total",
    "llamacpp:spec_decode_num_accepted_tokens_total",
    "llamacpp:spec_decode_num_drafts_total",
)


def _rendered_server_args(cfg: StackConfig) -> list[str]:
    """``SERVER_ARGS`` exactly as bash reads it from the rendered startup script."""
    script = render_boot_script(cfg, bucket="qwen36-models", api_key_secret="qwen36-api-key", project="proj")
    (line,) = [ln for ln in script.splitlines() if ln.startswith("SERVER_ARGS=(")]
    out = subprocess.run(
        ["bash", "-c", f"{line}\nprintf '%s\\0' \"${{SERVER_ARGS[@]}}\""],
        capture_output=True,
        check=True,
        timeout=10,
    )
    return out.stdout.decode().split("\0")[:-1]


def _swap(args: list[str], values: dict[str, str]) -> list[str]:
    out = list(args)
    for flag, value in values.items():
        out[out.index(flag) + 1] = value
    return out


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "llama-api-key"
    path.write_text(API_KEY + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def production_args(tiny_mtp_model_agreeing: Path, key_file: Path) -> list[str]:
    cfg = StackConfig()
    rendered = _rendered_server_args(cfg)
    assert rendered == server_args(
        cfg, model_path=container_model_path(cfg), api_key_file=CONTAINER_API_KEY_FILE
    )
    port = free_port()
    local = _swap(
        rendered,
        {
            "--model": str(tiny_mtp_model_agreeing),
            "--api-key-file": str(key_file),
            "--host": "127.0.0.1",
            "--port": str(port),
        },
    )
    # Same function, local paths: nothing but those four values differs from the VM's list.
    assert local == server_args(
        cfg, model_path=str(tiny_mtp_model_agreeing), api_key_file=str(key_file), host="127.0.0.1", port=port
    )
    return local


def _chat(srv: LlamaServer, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(
        f"{srv.base_url}/v1/chat/completions",
        headers=headers,
        json={
            "messages": [{"role": "user", "content": "Say a"}],
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "cache_prompt": False,
        },
        timeout=REQUEST_TIMEOUT_S,
    )


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


def test_production_args_load_serve_draft_and_guard(
    production_args: list[str], llama_server_bin: Path
) -> None:
    with LlamaServer(production_args, binary=llama_server_bin) as srv:
        # A 2 MB model loads before the first request is answered (the request waits in the listen
        # backlog), so 503 -> 200 is shown with Gemma in test_health_is_503_while_loading.
        assert srv.wait_healthy()[-1] == 200
        auth = {"Authorization": f"Bearer {API_KEY}"}

        reply = _chat(srv, auth)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        timings = body["timings"]
        assert timings["draft_n"] > 0, timings
        assert timings["draft_n_accepted"] > 0, timings
        assert body["choices"][0]["message"]["content"].startswith("aaaa")

        metrics = httpx.get(f"{srv.base_url}/metrics", headers=auth, timeout=REQUEST_TIMEOUT_S)
        assert metrics.status_code == 200
        for counter in SPEC_COUNTERS:
            assert _metric(metrics.text, counter) > 0
        assert _metric(metrics.text, "llamacpp:tokens_predicted_total") >= MAX_TOKENS

        for path in ("/metrics", "/v1/models", "/props", "/slots"):
            assert httpx.get(f"{srv.base_url}{path}", timeout=REQUEST_TIMEOUT_S).status_code == 401, path
        assert _chat(srv, {}).status_code == 401
        assert _chat(srv, {"Authorization": "Bearer wrong-key"}).status_code == 401
        health = httpx.get(f"{srv.base_url}/health", timeout=REQUEST_TIMEOUT_S)
        assert (health.status_code, health.json()) == (200, {"status": "ok"})


def test_health_is_503_while_loading(gemma_model: Path, llama_server_bin: Path) -> None:
    """With a 253 MB model the loading window (~1.3 s) is long enough to see 503 for certain."""
    cfg = StackConfig(spec_draft_n_max=0)
    args = server_args(
        cfg, model_path=str(gemma_model), api_key_file=None, host="127.0.0.1", port=free_port()
    )
    with LlamaServer(args, binary=llama_server_bin) as srv:
        seen = srv.wait_healthy(timeout=120)
    assert 503 in seen and seen[-1] == 200, seen
    assert seen.index(503) < seen.index(200)


def test_rejected_flag_is_named(tiny_mtp_model: Path, llama_server_bin: Path) -> None:
    args = ["--model", str(tiny_mtp_model), "--definitely-not-a-flag", "1"]
    with LlamaServer(args, binary=llama_server_bin) as srv, pytest.raises(LlamaServerError) as failure:
        srv.wait_healthy()
    assert "rejected the flag --definitely-not-a-flag" in str(failure.value)


def test_original_no_mmap_spelling_is_rejected_by_the_pinned_build(
    production_args: list[str], llama_server_bin: Path
) -> None:
    """The original write-up's command used ``--no-mmap``; the pinned build only knows ``--load-mode``."""
    at = production_args.index("--load-mode")
    original = [*production_args[:at], "--no-mmap", *production_args[at + 2 :]]
    with LlamaServer(original, binary=llama_server_bin) as srv, pytest.raises(LlamaServerError) as failure:
        srv.wait_healthy()
    assert "rejected the flag --no-mmap" in str(failure.value)
    assert srv.exit_code() not in (None, 0)


def test_gemma_smoke_without_mtp(gemma_model: Path, llama_server_bin: Path) -> None:
    cfg = StackConfig(spec_draft_n_max=0)
    args = server_args(
        cfg, model_path=str(gemma_model), api_key_file=None, host="127.0.0.1", port=free_port()
    )
    assert "--spec-type" not in args
    with LlamaServer(args, binary=llama_server_bin) as srv:
        srv.wait_healthy(timeout=120)
        reply = httpx.post(
            f"{srv.base_url}/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": "Name a colour."}],
                "max_tokens": 8,
                "temperature": 0,
            },
            timeout=REQUEST_TIMEOUT_S,
        )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["choices"][0]["message"]["content"].strip()
    assert body["timings"]["predicted_n"] > 0
    assert "draft_n" not in body["timings"]
