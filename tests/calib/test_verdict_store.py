"""The verdict's round trip through GCS (gcp-storage-emulator on loopback): written to a temporary
name, read back and checked, promoted next to the model; read by the next boot; a key that differs
is ignored; marked stale by the guard; and a writer that lost a race is told so."""

from __future__ import annotations

import json
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import calibrate
import pytest

from tests.calib.conftest import Bucket

KEY = calibrate.Key(11434, "ab" * 32, "NVIDIA L4", "580.95.05", "Disabled", 56320)
WINNER = calibrate.Candidate(2, True, True)


def verdict(key: calibrate.Key = KEY, winner: calibrate.Candidate = WINNER) -> dict:
    samples = {i: calibrate.Sample(64, 700.0, 128, 100) for i in range(len(calibrate.PROMPTS))}
    result = calibrate.Result(winner, samples, status="measured")
    return calibrate.Calibration(key, [result], calibrate.Noise(), 42.0, 120.0, [6.5], 64).verdict("test")


def names(bucket: Bucket) -> list[str]:
    url = f"{bucket.endpoint}/storage/v1/b/{bucket.name}/o"
    with urllib.request.urlopen(url, timeout=10) as reply:
        return sorted(item["name"] for item in json.loads(reply.read()).get("items", []))


def test_a_verdict_goes_through_a_checked_temporary_object_and_reads_back(bucket: Bucket) -> None:
    store = bucket.store()
    assert store.load() == (None, "0")
    doc = verdict()
    generation = store.save(doc, "0")
    loaded, seen = store.load()
    assert loaded == doc and seen == generation
    # Only the verdict is left: the temporary object was deleted after the promotion.
    assert names(bucket) == [store.name]
    assert calibrate.verdict_problem(loaded, KEY) is None


def test_a_later_verdict_replaces_the_generation_it_read(bucket: Bucket) -> None:
    store = bucket.store()
    first = store.save(verdict(), "0")
    newer = verdict(winner=calibrate.Candidate(0, True, True))
    second = store.save(newer, first)
    assert second != first
    assert store.load() == (newer, second)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("llama_cpp_build", 11500),
        ("model_sha256", "cd" * 32),
        ("gpu_name", "NVIDIA H200"),
        ("driver_version", "590.10"),
        ("ecc_mode", "Enabled"),
        ("ctx_size", 8192),
    ],
)
def test_a_verdict_of_another_key_is_ignored_and_says_which_field(
    bucket: Bucket, field: str, value: object
) -> None:
    store = bucket.store()
    store.save(verdict(), "0")
    doc, _ = store.load()
    other = calibrate.Key(**{**KEY.as_dict(), field: value})
    problem = calibrate.verdict_problem(doc, other)
    assert problem is not None and problem.startswith("its key differs") and field in problem
    assert calibrate.verdict_problem(doc, KEY) is None


def test_the_guard_marks_the_verdict_stale_and_the_next_boot_sees_it(bucket: Bucket) -> None:
    store = bucket.store()
    store.save(verdict(), "0")
    assert store.mark_stale(KEY, "live acceptance 30% below 0.6 x 80%", {"live_acceptance": 0.3})
    doc, _ = store.load()
    assert doc is not None and doc["stale"]["live_acceptance"] == 0.3 and doc["stale"]["at"]
    assert calibrate.verdict_problem(doc, KEY) == "marked stale: live acceptance 30% below 0.6 x 80%"
    # Already stale, or another key's: nothing to do.
    assert not store.mark_stale(KEY, "again", {})
    assert not store.mark_stale(calibrate.Key(**{**KEY.as_dict(), "ctx_size": 8192}), "other key", {})
    assert names(bucket) == [store.name]


def test_an_unreadable_verdict_is_not_used(bucket: Bucket) -> None:
    store = bucket.store()
    gcs = calibrate.Gcs(bucket.endpoint, lambda: None)
    gcs.insert(bucket.name, store.name, b"{not json", if_generation_match="0")
    doc, _ = store.load()
    assert calibrate.verdict_problem(doc, KEY) is not None


class _PreconditionFailing:
    """A storage endpoint that takes the temporary upload and its read-back, then answers the
    promotion with 412, as GCS does when ifGenerationMatch no longer holds (another member promoted
    a verdict first). https://cloud.google.com/storage/docs/request-preconditions (412 Precondition
    Failed). gcp-storage-emulator does not evaluate preconditions, hence this stand-in."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.deleted: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if "/copyTo/" in self.path:
                    self._send(412, b'{"error":{"code":412,"message":"Precondition Failed"}}')
                    return
                query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
                assert query["ifGenerationMatch"] == ["0"] and query["uploadType"] == ["multipart"]
                boundary = self.headers["Content-Type"].split("boundary=")[1]
                parts = data.split(f"--{boundary}".encode())
                meta = json.loads(parts[1].split(b"\r\n\r\n", 1)[1])
                owner.objects[meta["name"]] = parts[2].split(b"\r\n\r\n", 1)[1][: -len(b"\r\n")]
                self._send(200, json.dumps({"name": meta["name"], "generation": "7"}).encode())

            def do_GET(self) -> None:
                name = urllib.parse.unquote(urllib.parse.urlparse(self.path).path.split("/o/", 1)[1])
                self._send(200, owner.objects[name])

            def do_DELETE(self) -> None:
                owner.deleted.append(urllib.parse.unquote(self.path.split("/o/", 1)[1].split("?")[0]))
                self._send(204, b"")

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def racing_gcs() -> Iterator[_PreconditionFailing]:
    fake = _PreconditionFailing()
    threading.Thread(target=fake.server.serve_forever, daemon=True).start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def test_a_writer_that_lost_the_race_is_told_and_leaves_no_temporary_object(
    racing_gcs: _PreconditionFailing,
) -> None:
    store = calibrate.VerdictStore(calibrate.Gcs(racing_gcs.url, lambda: None), "b", "models/m.verdict.json")
    with pytest.raises(calibrate.ConflictError):
        store.save(verdict(), "0")
    (temp,) = racing_gcs.objects
    assert temp.startswith("models/m.verdict.json" + calibrate.TEMP_INFIX)
    assert racing_gcs.deleted == [temp]


def test_a_verdict_keeps_the_other_keys_verdicts_it_replaces(bucket: Bucket) -> None:
    store = bucket.store()
    store.save(verdict(), "0")
    degraded = calibrate.Key(**{**KEY.as_dict(), "ecc_mode": "Enabled", "ctx_size": 8192})
    stored, generation = store.load()
    assert calibrate.find_verdict(stored, degraded)[0] is None
    # A member that could not turn ECC off calibrates its own key; the first key's verdict stays.
    newer = calibrate.with_others(verdict(degraded, calibrate.Candidate(0, True, True)), stored, degraded)
    store.save(newer, generation)
    stored, _ = store.load()
    mine, _ = calibrate.find_verdict(stored, degraded)
    theirs, _ = calibrate.find_verdict(stored, KEY)
    assert mine is not None and mine["winner"]["n_max"] == 0
    assert theirs is not None and theirs["winner"]["n_max"] == 2 and theirs["key"] == KEY.as_dict()
    # The guard marks the kept one stale where it is; the other key's stays usable.
    assert store.mark_stale(KEY, "low", {})
    stored, _ = store.load()
    assert calibrate.find_verdict(stored, KEY)[0] is None
    assert calibrate.find_verdict(stored, degraded)[0] is not None
    # At most KEPT_OTHER_KEYS are kept, newest first, stale ones dropped.
    docs = [verdict(calibrate.Key(**{**KEY.as_dict(), "ctx_size": 1024 * (i + 1)})) for i in range(6)]
    chained: dict = {}
    for i, doc in enumerate(docs):
        chained = calibrate.with_others(doc, chained or None, calibrate.Key(**doc["key"]))
        assert len(chained["others"]) == min(i, calibrate.KEPT_OTHER_KEYS)
    assert [o["key"]["ctx_size"] for o in chained["others"]] == [5120, 4096, 3072]
