"""The sandbox's `gcloud storage`: a small real implementation of the subcommands the boot script
uses, against gcp-storage-emulator (tests/boot/gcs_rest.py), with gcloud's documented behaviour:

- ``objects describe URL --format=value(...)``: the object's resource with gcloud's field names
  (``size``, ``crc32c_hash``, ``generation``, ``custom_fields.<key>``).
- ``cp gs://B/O#GEN DEST``: a sliced download (ranged reads in parallel into ``DEST_.gstmp``, then a
  rename), CRC32C-checked against the object, with ``storage/check_hashes`` and the sliced-download
  properties read from their ``CLOUDSDK_STORAGE_*`` variables. Without a compiled crc32c, gcloud
  does no sliced download, and ``if_fast_else_fail`` makes that an error.
  https://cloud.google.com/storage/docs/sliced-object-downloads
- ``cp LOCAL gs://B/O --if-generation-match=G --custom-metadata=K=V,...`` and
  ``objects update URL --if-generation-match=G --update-custom-metadata=K=V,...``.

Faults come from the host state (tests/boot/stubs.py): ``gcs_denied_for_s`` answers 403 for that
many simulated seconds after the boot started (a fresh IAM grant), ``gcs_corrupt_downloads`` flips
one byte in transit in that many downloads, ``gcs_bad_crc_generations`` flips one in every download
of those generations (an object whose bytes never match its CRC32C), ``crc32c_compiled`` false
models the missing C hash. Each download records the slices it used (``gcs-download`` in calls.jsonl).
It runs with the test venv's python (google-crc32c is the hash gcloud itself uses).
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import google_crc32c

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.boot import gcs_rest
from tests.boot.stubs import delays, err, record, state

FIELDS = {"size": "size", "crc32c_hash": "crc32c", "generation": "generation", "md5_hash": "md5Hash"}
DEFAULT_COMPONENTS = 4
DEFAULT_COMPONENT_BYTES = 64 * 1024 * 1024
# When storage/sliced_object_download_threshold is not set (the boot script sets it).
SLICED_THRESHOLD_BYTES = 150 * 1024 * 1024
UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3}


def _bytes(text: str, default: int) -> int:
    if not text:
        return default
    unit = UNITS.get(text[-1].upper(), 1)
    return int(text.rstrip("KMGkmg")) * unit


def _endpoint() -> str:
    return os.environ["STORAGE_EMULATOR_HOST"].rstrip("/")


def _split(url: str) -> tuple[str, str, str]:
    if not url.startswith("gs://"):
        raise ValueError(url)
    path, _, generation = url[5:].partition("#")
    bucket, _, name = path.partition("/")
    return bucket, name, generation


def _options(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    options, positional = {}, []
    for arg in argv:
        if arg.startswith("--"):
            key, _, value = arg[2:].partition("=")
            options[key] = value
        else:
            positional.append(arg)
    return options, positional


def _denied(command: str, url: str) -> bool:
    with state() as host:
        window = float(host.get("gcs_denied_for_s", 0))
    scale = float(os.environ.get("QWEN36_TIME_SCALE", "1"))
    age = (time.time() - float(os.environ.get("QWEN36_BOOT_EPOCH", "0"))) / scale
    if age < window:
        err(
            f"ERROR: (gcloud.storage.{command}) HTTPError 403: "
            "qwen36-dev@sandbox-project.iam.gserviceaccount.com does not have storage.objects.get access "
            "to the Google Cloud Storage object. Permission "
            f"'storage.objects.get' denied on resource (or it may not exist). [{url}]",
            1,
        )
        return True
    return False


def _metadata(pairs: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in pairs.split(",") if pair)


def _value(resource: dict[str, Any], projection: str) -> str:
    """gcloud's ``value[separator="S"](key,...)`` projection (tab-separated without the attribute)."""
    match = re.fullmatch(r'value(?:\[separator="([^"]*)"\])?\((.*)\)', projection)
    if match is None:
        raise ValueError(f"the sandbox's gcloud does not know the format {projection!r}")
    separator = "\t" if match[1] is None else match[1]
    values = []
    for key in match[2].split(","):
        if key.startswith("custom_fields."):
            values.append((resource.get("metadata") or {}).get(key.split(".", 1)[1], ""))
        else:
            values.append(str(resource.get(FIELDS[key], "")))
    return separator.join(values)


def describe(argv: list[str]) -> int:
    options, (url,) = _options(argv)
    bucket, name, _ = _split(url)
    if _denied("objects.describe", url):
        return 1
    try:
        resource = gcs_rest.get_object(_endpoint(), bucket, name)
    except gcs_rest.GcsError as exc:
        if exc.status == 404:
            return err(f"ERROR: (gcloud.storage.objects.describe) {url} not found: 404.", 1)
        return err(f"ERROR: (gcloud.storage.objects.describe) {exc}", 1)
    projection = options.get("format", "json")
    print(_value(resource, projection) if projection.startswith("value") else json.dumps(resource))
    return 0


def update(argv: list[str]) -> int:
    options, (url,) = _options(argv)
    bucket, name, _ = _split(url)
    resource = gcs_rest.get_object(_endpoint(), bucket, name)
    if "if-generation-match" in options and options["if-generation-match"] != resource["generation"]:
        return err("ERROR: (gcloud.storage.objects.update) HTTPError 412: Precondition Failed", 1)
    metadata = {**(resource.get("metadata") or {}), **_metadata(options.get("update-custom-metadata", ""))}
    gcs_rest.patch_metadata(_endpoint(), bucket, name, metadata)
    return 0


def _crc(data: bytes) -> str:
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


def slice_count(size: int, *, components: int, piece: int, threshold: int, fast: bool) -> int:
    """gcloud's slices: none without a compiled crc32c (sliced-object-downloads), none at or below the
    threshold or with it 0 (file_download_task.py, _should_perform_sliced_download), else
    min(ceil(size / piece), components) (copy_component_util.py, get_component_count)."""
    if not fast or threshold == 0 or size <= threshold:
        return 1
    return max(1, min(components, -(-size // piece)))


def download(url: str, dest: Path) -> int:
    bucket, name, generation = _split(url)
    if _denied("cp", url):
        return 1
    check = os.environ.get("CLOUDSDK_STORAGE_CHECK_HASHES", "if_fast_else_fail")
    with state() as host:
        fast = host.get("crc32c_compiled", True)
        corrupt = int(host.get("gcs_corrupt_downloads", 0))
        if corrupt:
            host["gcs_corrupt_downloads"] = corrupt - 1
    if not fast and check == "if_fast_else_fail":
        return err(
            "ERROR: (gcloud.storage.cp) This download was skipped since the google-crc32c binary is not "
            "installed, and Python hash computation will likely throttle performance. You can change "
            "this by installing the binary or modifying the storage/check_hashes config setting.",
            1,
        )
    try:
        resource = gcs_rest.get_object(_endpoint(), bucket, name)
    except gcs_rest.GcsError as exc:
        return err(f"ERROR: (gcloud.storage.cp) {exc}", 1)
    generation = generation or resource["generation"]
    if generation != resource["generation"]:
        return err(f"ERROR: (gcloud.storage.cp) {url} not found: 404.", 1)
    with state() as host:
        bad_generation = str(generation) in host.get("gcs_bad_crc_generations", [])
    size = int(resource["size"])
    # gcloud's component count: the object in component-size pieces, at most max_components; one
    # stream below the sliced-download threshold or without a compiled crc32c.
    env = os.environ.get
    components = int(env("CLOUDSDK_STORAGE_SLICED_OBJECT_DOWNLOAD_MAX_COMPONENTS", DEFAULT_COMPONENTS))
    piece = _bytes(env("CLOUDSDK_STORAGE_SLICED_OBJECT_DOWNLOAD_COMPONENT_SIZE", ""), DEFAULT_COMPONENT_BYTES)
    threshold = _bytes(env("CLOUDSDK_STORAGE_SLICED_OBJECT_DOWNLOAD_THRESHOLD", ""), SLICED_THRESHOLD_BYTES)
    slices = slice_count(size, components=components, piece=piece, threshold=threshold, fast=fast)
    record("gcs-download", [url], slices=slices)
    bounds = [size * i // slices for i in range(slices + 1)]
    parts: list[bytes] = [b""] * slices
    started = time.time()

    def get(i: int) -> None:
        parts[i] = gcs_rest.read_range(_endpoint(), bucket, name, generation, bounds[i], bounds[i + 1])

    threads = [threading.Thread(target=get, args=(i,)) for i in range(slices)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    data = b"".join(parts)
    if (corrupt or bad_generation) and data:
        flipped = bytearray(data)
        flipped[len(flipped) // 2] ^= 0x01
        data = bytes(flipped)
    temp = Path(f"{dest}_.gstmp")
    temp.write_bytes(data)
    # Into tmpfs the NIC is the limit, onto the boot disk the disk's write rate (bench/boot_bench.py).
    ram = os.environ.get("QWEN36_SANDBOX_RAM_DIR", "\0")
    seconds = delays().get(
        "gcs_ram" if str(dest).startswith(ram) else "gcs_disk", delays().get("gcs_fetch", 0)
    )
    time.sleep(max(0.0, seconds - (time.time() - started)))
    if check != "never" and _crc(data) != resource["crc32c"]:
        temp.unlink()
        return err(
            f"ERROR: (gcloud.storage.cp) HashMismatchError: Source hash {resource['crc32c']} does not match "
            f"destination hash {_crc(data)} for object {url}. The download was deleted.",
            1,
        )
    temp.replace(dest)
    return 0


def upload(src: Path, url: str, options: dict[str, str]) -> int:
    bucket, name, _ = _split(url)
    try:
        current = gcs_rest.get_object(_endpoint(), bucket, name)["generation"]
    except gcs_rest.GcsError:
        current = "0"
    if "if-generation-match" in options and options["if-generation-match"] != current:
        return err("ERROR: (gcloud.storage.cp) HTTPError 412: Precondition Failed", 1)
    gcs_rest.upload(
        _endpoint(), bucket, name, src.read_bytes(), _metadata(options.get("custom-metadata", ""))
    )
    return 0


def main(argv: list[str]) -> int:
    if argv[:2] == ["objects", "describe"]:
        return describe(argv[2:])
    if argv[:2] == ["objects", "update"]:
        return update(argv[2:])
    if argv[:1] == ["cp"]:
        options, (src, dest) = _options(argv[1:])
        if src.startswith("gs://"):
            target = Path(dest)
            if dest.endswith("/") or target.is_dir():
                target = target / _split(src)[1].rsplit("/", 1)[-1]
            return download(src, target)
        return upload(Path(src), dest, options)
    return err(f"gcloud storage: the sandbox does not implement {argv}", 2)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
