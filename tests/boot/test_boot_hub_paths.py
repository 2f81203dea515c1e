"""Every path to the hub on the Deep Learning VM's image, which has no `hf`: the boot installs
huggingface_hub in a venv (tests/boot/stubs.py stands in for `python3 -m venv` and pip, PyPI being
out of reach) and downloads with it. The paths: an empty bucket (the first deployment of a
project), a cache object that fails its sha256 once served, and one whose CRC32C never matches.
Each ends served from the hub, with the cache repaired for the next VM by self-staging, one object
and never a parallel composite upload.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tests.boot.sandbox import BootResult, Sandbox, hf_version
from tests.boot.world import MODEL_FILE, Model, SandboxFactory, model_object, stage_corrupt
from tests.cache.hf_server import HfServer

PCU = "CLOUDSDK_STORAGE_PARALLEL_COMPOSITE_UPLOAD_ENABLED"


def assert_ready(sandbox: Sandbox, result: BootResult) -> None:
    assert result.rc == 0 and not result.rebooted, result.log
    assert result.phases[-1] == "ready" or "post-serve sha256" in result.log, result.log
    assert sandbox.last_report().phase == "ready", result.log
    assert sandbox.health() == 200


def hf_install(result: BootResult) -> list[tuple[str, list[str]]]:
    return [(c["cmd"], c["argv"]) for c in result.calls if c["cmd"] in ("python3", "pip")]


def assert_hf_installed_and_used(sandbox: Sandbox, result: BootResult, hub: HfServer, before: int) -> None:
    venv = sandbox.state_dir / "hf-venv"
    assert shutil.which("hf", path=sandbox.env(0, None)["PATH"]) is None, "the image must lack hf"
    assert hf_install(result) == [
        ("python3", ["-m", "venv", str(venv)]),
        ("pip", ["install", "-q", f"huggingface_hub[hf_xet]=={hf_version()}"]),
    ]
    # Its report reached the journal (and did not become part of the tool's path).
    assert f"installing huggingface_hub {hf_version()} for the hub download" in result.details("model")
    assert any(d.startswith("fetched from HuggingFace into ") for d in result.details("model")), result.log
    assert len(hub.cdn_requests()) > before
    assert (venv / "bin" / "hf").is_symlink()


def self_staged(result: BootResult) -> dict[str, Any]:
    (upload,) = [
        c
        for c in result.calls
        if c["cmd"] == "gcloud" and c["argv"][:2] == ["storage", "cp"] and c["argv"][-1].startswith("gs://")
    ]
    return upload


def test_the_first_deployment_installs_hf_downloads_serves_and_fills_the_cache(
    make_sandbox: SandboxFactory, model: Model, hub: HfServer
) -> None:
    sandbox = make_sandbox(cached=False)
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    before = len(hub.cdn_requests())
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert "cache miss: gs://" in result.log
    assert_hf_installed_and_used(sandbox, result, hub, before)
    assert {e["sha256"] for e in sandbox.loads()} == {model.sha256}
    upload = self_staged(result)
    assert "--if-generation-match=0" in upload["argv"]
    # https://cloud.google.com/storage/docs/parallel-composite-uploads: off for this one copy.
    assert upload["env"][PCU] == "False"
    assert all(PCU not in c["env"] for c in result.calls if c is not upload), "only the upload turns it off"
    assert model_object(sandbox, model)["metadata"]["sha256"] == model.sha256

    # The next VM (a restart here) finds the cache: no install, no hub.
    again = sandbox.boot()
    assert_ready(sandbox, again)
    assert hf_install(again) == [] and "from HuggingFace" not in again.log
    assert sandbox.last_report().detail.split("; ")[1].startswith("fetch-from=gcs ")


def test_a_cache_object_failing_its_sha256_is_replaced_from_the_hub(
    make_sandbox: SandboxFactory, model: Model, gcs: str, hub: HfServer, tmp_path: Path
) -> None:
    sandbox = make_sandbox()
    generation = stage_corrupt(sandbox, model, tmp_path)
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    before = len(hub.cdn_requests())
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert any(
        d.startswith("served file failed its sha256 check (from gcs: ") for d in result.details("model")
    )
    assert_hf_installed_and_used(sandbox, result, hub, before)
    upload = self_staged(result)
    assert f"--if-generation-match={generation}" in upload["argv"] and upload["env"][PCU] == "False"
    assert model_object(sandbox, model)["metadata"]["sha256"] == model.sha256


def test_a_cache_object_whose_crc32c_never_matches_goes_to_the_hub_once_and_is_replaced(
    make_sandbox: SandboxFactory, model: Model, hub: HfServer
) -> None:
    # Every download of this generation differs from its CRC32C (the stored bytes, not the wire).
    sandbox = make_sandbox()
    generation = model_object(sandbox, model)["generation"]
    sandbox.edit_host(lambda host: host.update(gcs_bad_crc_generations=[generation]))
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    before = len(hub.cdn_requests())
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert "HashMismatchError" in result.log
    # One download of the bad object, not one per attempt: the second would meet the same bytes.
    fetches = [d for d in result.details("model") if d.startswith("fetching gs://")]
    assert len(fetches) == 1 and fetches[0].endswith("attempt 1/2)"), fetches
    assert [c for c in result.calls if c["cmd"] == "gcs-download"][1:] == []
    assert any(f"generation {generation} failed its CRC32C check" in d for d in result.details("model"))
    assert_hf_installed_and_used(sandbox, result, hub, before)
    assert {e["sha256"] for e in sandbox.loads()} == {model.sha256}, "the bad bytes were never loaded"
    assert [p.name for p in sandbox.ram_files()] == [".sha256-checked", MODEL_FILE]
    upload = self_staged(result)
    assert f"--if-generation-match={generation}" in upload["argv"] and upload["env"][PCU] == "False"
    repaired = model_object(sandbox, model)
    assert repaired["generation"] != generation and repaired["metadata"]["sha256"] == model.sha256

    # Repaired: the next boot fetches the new generation from GCS, checked, and never the hub.
    hub_before = len(hub.cdn_requests())
    again = sandbox.boot()
    assert_ready(sandbox, again)
    assert "HashMismatchError" not in again.log and "from HuggingFace" not in again.log
    assert len(hub.cdn_requests()) == hub_before and hf_install(again) == []


def test_an_hf_install_that_fails_fails_the_boot_saying_so(make_sandbox: SandboxFactory) -> None:
    sandbox = make_sandbox(cached=False)
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    sandbox.edit_host(lambda host: host.update(pypi_reachable=False))
    result = sandbox.boot()
    assert result.rc == 1, result.log
    report = sandbox.last_report()
    assert report.phase == "failed"
    assert report.detail.startswith(
        f"model: could not install huggingface_hub {hf_version()} for the hub download"
    )
    assert "No matching distribution found" in result.log, "pip's own error stays in the journal"
    assert not (sandbox.state_dir / "hf-venv").exists(), "a half-made venv is not left for the next boot"
    assert sandbox.loads() == []
