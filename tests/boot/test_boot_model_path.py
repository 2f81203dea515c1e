"""The model path through the real rendered boot script: RAM first, integrity without the hash on
the critical path, the cache's repair, IAM propagation, and ECC off by a GPU reset where it works.

Real bytes: `gcloud storage` is a small real implementation (sliced ranged reads, CRC32C) against
gcp-storage-emulator, the hub path is huggingface_hub's `hf` against tests/cache/hf_server.py.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from infra.model_cache import model_object_name
from tests.boot.sandbox import BootResult, Sandbox
from tests.boot.world import MODEL_FILE, Model, SandboxFactory, config, model_object, stage, stage_corrupt
from tests.cache.hf_server import HfServer

CHECKED = ".sha256-checked"

# A GPU reset long enough that the jobs beside it are seen starting during it (real seconds).
RESET_S = 3.0


def served(sandbox: Sandbox) -> list[dict[str, Any]]:
    return [e for e in sandbox.loads() if e["event"] == "healthy"]


def assert_ready(sandbox: Sandbox, result: BootResult) -> None:
    assert result.rc == 0, result.log
    assert not result.rebooted, result.log
    assert result.phases[-1] == "ready" or "post-serve sha256" in result.log, result.log
    assert sandbox.health() == 200, result.log


def in_ram(sandbox: Sandbox, model: Model) -> None:
    """The served file is in tmpfs, is the pinned model, and nothing partial lies beside it."""
    assert [p.name for p in sandbox.ram_files()] == [CHECKED, MODEL_FILE]
    assert hashlib.sha256((sandbox.ram_dir / MODEL_FILE).read_bytes()).hexdigest() == model.sha256
    assert served(sandbox)[-1]["model"] == str(sandbox.ram_dir / MODEL_FILE)


def hub_downloads(hub: HfServer) -> int:
    return len(hub.cdn_requests())


def test_new_vm_fetches_into_ram_serves_then_hashes_and_a_restart_fetches_again(
    make_sandbox: SandboxFactory, model: Model, hub: HfServer
) -> None:
    sandbox = make_sandbox()
    before = hub_downloads(hub)
    first = sandbox.boot()
    assert first.rebooted and first.commands("reboot") == [[]]
    assert ["-r"] in first.commands("nvidia-smi"), "the reset is tried before the reboot"
    smi = first.commands("nvidia-smi")
    assert len(smi[: smi.index(["-e", "0"])]) == 1, f"one query before the ECC change: {smi}"
    assert "GPU reset refused on GPU-0001" in first.log
    # The model and key jobs started beside the reset are stopped before the reboot, not after.
    assert "stopping the other parallel job" in first.log
    # They end at SIGTERM, and the reboot does not wait out the grace meant for what ignores it.
    assert "outlived SIGTERM" not in first.log
    assert first.calls[-1]["cmd"] == "reboot"

    second = sandbox.boot()
    assert_ready(sandbox, second)
    assert "ECC reboot path: from the reboot request to this boot's ECC check took" in second.log
    mounts = second.commands("mount")
    assert len(mounts) == 1 and mounts[0][:2] == ["-t", "tmpfs"] and mounts[0][-1] == str(sandbox.ram_dir)
    copies = [a for a in second.commands("gcloud") if a[:2] == ["storage", "cp"]]
    assert len(copies) == 1 and copies[0][-1] == str(sandbox.ram_dir / MODEL_FILE)
    in_ram(sandbox, model)
    assert sandbox.model_files() == [], "no disk copy of a model the cache holds"
    # Readiness comes before the full sha256, which proves the served file afterwards.
    assert second.log.index("phase=ready") < second.log.index(f"post-serve sha256 of {sandbox.ram_dir}")
    assert hub_downloads(hub) == before

    # A restart on the same host: ECC stays off, tmpfs is empty again, GCS refills it.
    third = sandbox.boot()
    assert_ready(sandbox, third)
    assert not third.commands("reboot") and ["-r"] not in third.commands("nvidia-smi")
    assert not third.commands("apt-get")
    assert "stopping llama-server until the model is in place" in " ".join(third.details("model"))
    in_ram(sandbox, model)
    assert {e["sha256"] for e in served(sandbox)} == {model.sha256}


def test_new_host_where_the_gpu_reset_works_needs_no_reboot(
    make_sandbox: SandboxFactory, model: Model
) -> None:
    sandbox = make_sandbox(delays={"gpu_reset": RESET_S})
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert not result.commands("reboot")
    assert ["-e", "0"] in result.commands("nvidia-smi") and ["-r"] in result.commands("nvidia-smi")
    assert result.details("ecc")[0].startswith("ECC disabled on GPU-0001 by a GPU reset in ")
    assert served(sandbox)[-1]["ctx_size"] == 56320
    in_ram(sandbox, model)
    # The fetch ran beside the reset: it started before the reset was over.
    reset = next(c["t"] for c in result.calls if c["cmd"] == "nvidia-smi" and c["argv"] == ["-r"])
    fetch = next(c["t"] for c in result.calls if c["cmd"] == "gcloud" and c["argv"][:2] == ["storage", "cp"])
    assert fetch < reset + RESET_S


def test_gpu_reset_is_not_tried_while_a_process_holds_the_gpu(make_sandbox: SandboxFactory) -> None:
    sandbox = make_sandbox()
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    assert_ready(sandbox, sandbox.boot())
    sandbox.new_host("GPU-0002")
    # Another process holds the GPU (the container docker restarted at boot is stopped first).
    sandbox.edit_host(lambda host: host["gpu"].update(other_holders=[4242]))
    result = sandbox.boot()
    assert "process(es) hold GPU-0002; rebooting instead" in result.log
    assert ["-r"] not in result.commands("nvidia-smi") and result.rebooted
    sandbox.edit_host(lambda host: host["gpu"].update(other_holders=[]))
    assert_ready(sandbox, sandbox.boot())


def test_new_host_stops_the_restarted_container_then_resets_without_a_reboot(
    make_sandbox: SandboxFactory, model: Model
) -> None:
    sandbox = make_sandbox()
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    assert_ready(sandbox, sandbox.boot())
    sandbox.new_host("GPU-0002")
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert not result.commands("reboot") and ["-r"] in result.commands("nvidia-smi")
    stop = next(i for i, c in enumerate(result.calls) if c["cmd"] == "docker" and c["argv"][0] == "stop")
    reset = next(i for i, c in enumerate(result.calls) if c["cmd"] == "nvidia-smi" and c["argv"] == ["-r"])
    assert stop < reset
    in_ram(sandbox, model)


def test_a_crc32c_mismatch_after_a_complete_download_is_a_bad_object_not_a_retry(
    make_sandbox: SandboxFactory, model: Model, hub: HfServer
) -> None:
    # Whole bytes that differ from the object's CRC32C are taken for the object's (HTTPS checks the
    # wire): the hub, and self-staging over that generation, rather than a second 22 GB download.
    sandbox = make_sandbox()
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    sandbox.edit_host(lambda host: host.update(gcs_corrupt_downloads=1))
    generation = model_object(sandbox, model)["generation"]
    before = hub_downloads(hub)
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert "HashMismatchError" in result.log
    fetches = [d for d in result.details("model") if d.startswith("fetching gs://")]
    assert [f.rsplit("attempt ", 1)[1] for f in fetches] == ["1/2)"]
    assert hub_downloads(hub) > before
    assert {e["sha256"] for e in sandbox.loads()} == {model.sha256}, "the corrupt bytes were never loaded"
    in_ram(sandbox, model)
    assert f"self-staging the model to gs://{sandbox.bucket}/" in result.log
    assert f"(replacing generation {generation})" in result.log


def test_a_corrupt_cache_object_is_taken_out_after_serve_refetched_from_the_hub_and_repaired(
    make_sandbox: SandboxFactory, model: Model, gcs: str, hub: HfServer, tmp_path: Any
) -> None:
    sandbox = make_sandbox()
    bad_generation = stage_corrupt(sandbox, model, tmp_path)
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    before = hub_downloads(hub)

    result = sandbox.boot()
    assert_ready(sandbox, result)
    out = next(d for d in result.details("model") if "failed its sha256 check" in d)
    assert out.startswith("served file failed its sha256 check (from gcs: ")
    assert "server taken out of service, fetching again" in out
    assert ["stop", "llama-server"] in result.commands("docker")
    assert result.phases.count("ready") == 2
    assert hub_downloads(hub) > before
    in_ram(sandbox, model)
    # The cache object is replaced, exactly the generation judged bad, with the proven file.
    repaired = model_object(sandbox, model)
    assert repaired["generation"] != bad_generation and repaired["metadata"]["sha256"] == model.sha256
    cp = next(
        a for a in result.commands("gcloud") if a[:2] == ["storage", "cp"] and a[-1].startswith("gs://")
    )
    assert f"--if-generation-match={bad_generation}" in cp
    assert "self-staged gs://" in result.log

    again = sandbox.boot()
    assert_ready(sandbox, again)
    assert hub_downloads(hub) == hub_downloads(hub) and "failed its sha256" not in again.log
    in_ram(sandbox, model)


def test_a_truncated_cache_object_is_refused_before_any_download(
    make_sandbox: SandboxFactory, model: Model, gcs: str, tmp_path: Any
) -> None:
    sandbox = make_sandbox()
    short = tmp_path / "short.gguf"
    short.write_bytes(model.data[: model.size // 2])
    stage(gcs, sandbox.bucket, model_object_name(config(model)), short, model.sha256)
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert f"holds {model.size // 2} bytes, the stack pins {model.size} (a truncated upload)" in result.log
    assert not [
        a for a in result.commands("gcloud") if a[:2] == ["storage", "cp"] and a[2].startswith("gs://")
    ]
    assert {e["sha256"] for e in sandbox.loads()} == {model.sha256}
    in_ram(sandbox, model)


def test_cache_miss_takes_the_hub_keeps_a_disk_copy_and_self_stages_after_ready(
    make_sandbox: SandboxFactory, model: Model, hub: HfServer
) -> None:
    sandbox = make_sandbox(cached=False)
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert "cache miss: gs://" in result.log
    assert any(d.startswith("fetched from HuggingFace into ") for d in result.details("model"))
    in_ram(sandbox, model)
    assert result.log.index("phase=ready") < result.log.index("self-staged gs://")
    assert model_object(sandbox, model)["metadata"]["sha256"] == model.sha256
    disk = sandbox.model_dir / MODEL_FILE
    assert hashlib.sha256(disk.read_bytes()).hexdigest() == model.sha256
    assert (sandbox.model_dir / f"{MODEL_FILE}.verified").read_text().split()[2] == model.sha256

    before = hub_downloads(hub)
    again = sandbox.boot()
    assert_ready(sandbox, again)
    assert hub_downloads(hub) == before and "self-stag" not in again.log
    in_ram(sandbox, model)


def test_a_flipped_byte_in_the_disk_copy_with_size_and_mtime_kept_is_caught_by_the_post_serve_hash(
    make_sandbox: SandboxFactory, model: Model, hub: HfServer
) -> None:
    sandbox = make_sandbox(cached=False, cfg=config(model, self_stage_model=False))
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    assert_ready(sandbox, sandbox.boot())
    disk = sandbox.model_dir / MODEL_FILE
    stamp = disk.stat()
    with disk.open("r+b") as handle:
        handle.seek(model.size // 2)
        byte = handle.read(1)
        handle.seek(model.size // 2)
        handle.write(bytes([byte[0] ^ 0x01]))
    os.utime(disk, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    before = hub_downloads(hub)
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert any(
        d.startswith("serving the disk copy kept after a hub download") for d in result.details("model")
    )
    out = next(d for d in result.details("model") if "failed its sha256 check" in d)
    assert out.startswith("served file failed its sha256 check (from disk: ")
    assert hub_downloads(hub) > before
    in_ram(sandbox, model)
    assert hashlib.sha256(disk.read_bytes()).hexdigest() == model.sha256, "the disk copy is rewritten"


def test_an_object_without_sha256_metadata_is_checked_against_the_hub_once_and_its_metadata_completed(
    make_sandbox: SandboxFactory, model: Model, gcs: str, hub: HfServer
) -> None:
    cfg = config(model, model_sha256="", model_size_bytes=0)
    sandbox = make_sandbox(cfg=cfg, cached=False)
    stage(gcs, sandbox.bucket, model_object_name(cfg), model.path, "", metadata={})
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    before = hub_downloads(hub)
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert "has no sha256 metadata; checking it against sha256 " + model.sha256 in result.log
    assert hub_downloads(hub) == before, "no 22 GB hub download for a good cache copy"
    in_ram(sandbox, model)
    assert model_object(sandbox, model)["metadata"]["sha256"] == model.sha256
    assert "completed the metadata of gs://" in result.log


def test_a_403_early_in_the_vms_life_is_waited_out_and_served_from_gcs(
    make_sandbox: SandboxFactory, model: Model, hub: HfServer
) -> None:
    # At 1/50 of real time: the bound is 9.6 real seconds, the 403s last 6.
    sandbox = make_sandbox(time_scale=0.02)
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    sandbox.edit_host(lambda host: host.update(gcs_denied_for_s=300))
    before = hub_downloads(hub)
    result = sandbox.boot()
    assert_ready(sandbox, result)
    waits = [d for d in result.details("model") if "answers 403" in d]
    assert waits and "waiting for the new IAM grant to apply (up to 480 s after boot)" in waits[0]
    assert hub_downloads(hub) == before
    in_ram(sandbox, model)


def test_a_403_past_the_bound_fails_naming_the_role_and_the_bucket(
    make_sandbox: SandboxFactory, hub: HfServer
) -> None:
    sandbox = make_sandbox()
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    sandbox.edit_host(lambda host: host.update(gcs_denied_for_s=10_000))
    before = hub_downloads(hub)
    result = sandbox.boot()
    assert result.rc == 1 and "failed" in result.phases
    reason = result.details("failed")[-1]
    assert "past the 480 s IAM propagation bound" in reason
    assert f"roles/storage.objectViewer on gs://{sandbox.bucket}" in reason
    assert hub_downloads(hub) == before, "never a silent switch to the hub"
    assert sandbox.loads() == []


def test_without_a_compiled_crc32c_the_download_is_one_checked_stream_said_so_not_the_hub(
    make_sandbox: SandboxFactory, model: Model, hub: HfServer
) -> None:
    sandbox = make_sandbox()
    sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
    sandbox.edit_host(lambda host: host.update(crc32c_compiled=False))
    before = hub_downloads(hub)
    result = sandbox.boot()
    assert_ready(sandbox, result)
    assert "no compiled crc32c for gcloud: a single-stream download with a Python CRC32C" in result.log
    assert hub_downloads(hub) == before
    in_ram(sandbox, model)
