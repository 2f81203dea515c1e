"""The rendered server arguments boot the pinned llama-server: the docker stub runs the real binary
(CPU build of the same llama.cpp build) with the container's paths mapped to the sandbox's disk."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.boot.world import API_KEY, Model, SandboxFactory

REQUEST_TIMEOUT_S = 10.0


def test_the_real_llama_server_serves_the_rendered_arguments_behind_the_key(
    make_sandbox: SandboxFactory, llama_server_bin: Path, tiny_mtp_model: Path
) -> None:
    served = Model(tiny_mtp_model)
    sandbox = make_sandbox(served=served, llama_server=llama_server_bin)
    sandbox.boot()
    result = sandbox.boot()
    assert result.rc == 0 and result.phases[-1] == "ready", result.log + sandbox.container_log()
    base = f"http://127.0.0.1:{sandbox.port}"
    with httpx.Client(base_url=base, timeout=REQUEST_TIMEOUT_S) as client:
        assert client.get("/health").status_code == 200
        assert client.get("/v1/models").status_code == 401
        models = client.get("/v1/models", headers={"Authorization": f"Bearer {API_KEY}"})
        assert models.status_code == 200
        assert [m["id"] for m in models.json()["data"]] == ["Qwen3.6-35B-A3B-Q4KXL-MTP"]
        metrics = client.get("/metrics", headers={"Authorization": f"Bearer {API_KEY}"})
        assert metrics.status_code == 200 and "llamacpp:" in metrics.text
    log = sandbox.container_log()
    assert sandbox.loads() == [], "the real server ran, not the sandbox's stand-in"
    assert "creating MTP draft context" in log and "invalid argument" not in log
    assert API_KEY not in log and API_KEY not in result.log
