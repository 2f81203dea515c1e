"""First-boot calibration: measure llama-server's lossless options on this GPU, keep the verdict.

The boot (startup/boot.sh ``step_calibrate``) runs ``calibrate.py run`` after the model is in place
and before the production container starts. It reads the verdict stored next to the model in the
bucket; a verdict whose key is this boot's key and which is not stale decides the flags at once
(the object also keeps the last few verdicts of other keys it replaced: ``find_verdict``).
Otherwise it calibrates and decides, and ``calibrate.py store`` writes the verdict for every later
boot and fleet member once the served file has passed its sha256 (boot.sh ``store_verdict``).

Key: (llama.cpp build, model sha256, GPU name, driver version, ECC mode, ctx size). Anything in it
changing means the measurement no longer describes this server, so the verdict is ignored.

Candidates, all lossless (greedy output is the model's either way): MTP off or ``--spec-draft-n-max``
1, 2, 3; ``GGML_CUDA_DISABLE_FUSION`` unset or 1; GPU sampling (``--backend-sampling``) on or off.
n-max and fusion are fixed at server start (b11434 compiles per-request speculative parameters out:
``tools/server/server-schema.cpp``, the ``#if 0`` block), so each pair is one server start (8);
GPU sampling is a per-request field there (``backend_sampling``, whose default the flag sets), so
both sampling candidates of a start are measured by the same server, request by request.

Why before the server opens to traffic and not after: the L4 holds one copy of the 21 GiB model,
so each candidate is a server of its own that needs the GPU to itself. Calibrating after opening
would take the serving container down; the first answer would then wait. Before opening, the
first boot of a key costs at most the bound (``DEFAULT_BUDGET_S``) more, and every later boot
nothing but one object read.

The search: starts in order of their prior chance to win (the stack's own n-max with fusion on
first, then plain decode, then the other n-max values, then the same with fusion off). Every
candidate runs the same fixed prompts (the bench's workloads, greedy, prompt cache off) in the
same order, so candidates are compared prompt by prompt (a paired comparison: a prompt's own
predictability cancels). After each prompt, a candidate stops once it cannot win: its mean
log-ratio to a rival on their common prompts, plus ``Z_STOP`` standard errors, is below 0. The
error combines the request-to-request noise measured here (the first start repeats a prompt),
the prompt-to-prompt spread of the ratio (observed, at least ``PROMPT_SPREAD_MIN``) weighted by the
prompts still to come, and, across two server starts, the start-to-start drift
(``START_DRIFT``, from bench/gpu/RESULTS.md). So a candidate is only cut when the rest of its
prompts could not lift it above the rival; every candidate is measured to the end or cut that way,
and the winner is the fastest of those measured to the end. The bound is kept by skipping the
starts that no longer fit (the verdict then says so and which).

Standard library only, Python 3.10 (the Deep Learning VM's python3); imports no other module of
startup/ so that ``qwen36 tune`` can import it too.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

SCHEMA = 1
FUSION_ENV = "GGML_CUDA_DISABLE_FUSION"
N_MAX_VALUES = (0, 1, 2, 3)
SAMPLING_VALUES = (True, False)
FUSION_VALUES = (True, False)  # True: fusion on (the variable unset)

# The bound: at most this long, on the first boot of a key only. On the L4 a start costs ~6.5 s of
# load from tmpfs (tests/boot/durations.py) plus ~1 s to /health, and a start's measurement about
# 2 x 4 x 64 tokens at 73-99 tok/s (~6 s) plus warm-up: 8 starts fit in ~110 s with nothing cut.
DEFAULT_BUDGET_S = 120.0
DEFAULT_MAX_TOKENS = 64
WARMUP_TOKENS = 16
REQUEST_TIMEOUT_S = 120.0
HEALTH_POLL_S = 0.1

# The stopping rule (module docstring). Z_STOP 2.5: a one-sided 0.6 % chance per look of cutting a
# candidate that was in fact as fast. PROMPT_SPREAD_MIN: the ratio of two candidates moves by a few
# per cent from prompt to prompt (MTP's gain tracks acceptance, which is workload-dependent: the
# original measured 91 chat to 99 math tok/s); 5 % until more is observed. START_DRIFT: llama-server
# on one GPU drifted by several per cent between server starts (bench/gpu/RESULTS.md: four starts
# of one config, medians 256-275 tok/s, sd ~3 %). REPEAT_NOISE_*: until measured, and its floor.
# PROMPT_SPREAD_SAME_DRAFTS: for two candidates with the same n-max (they differ in fusion or
# sampling only, so a prompt's acceptance moves both alike).
Z_STOP = 2.5
PROMPT_SPREAD_MIN = 0.05
PROMPT_SPREAD_SAME_DRAFTS = 0.01
START_DRIFT = 0.03
REPEAT_NOISE_PRIOR = 0.02
REPEAT_NOISE_MIN = 0.005

# Prompts: the first prompt of four of the bench's workloads (qwen36/measure/workloads.py; copied,
# since startup/ imports no other room: tests/calib/test_calibrate_unit.py checks they are its).
PROMPTS = (
    ("chat", "Hi! I'm planning a weekend trip with two kids. What should we pack for a rainy forecast?"),
    ("code", "Python: implement an LRU cache class with get and put in O(1) time, with docstrings."),
    (
        "json",
        "Inventory of a small bookshop: output a JSON array of five books with title, author, year "
        "and price.",
    ),
    (
        "math",
        "Solve step by step: a train travels 240 km in 3 hours, then 150 km in 2 hours. "
        "What is its average speed?",
    ),
)
PROMPT_TEXTS = tuple(text for _, text in PROMPTS)
WARMUP_PROMPT = "Warm-up: say hello in one short sentence."

CALIBRATION_CONTAINER = "qwen36-calibrate"
PRODUCTION_CONTAINER = "llama-server"
CONTAINER_PORT = 8080
DOCKER_TIMEOUT_S = 120
METADATA_URL = "http://metadata.google.internal"
GCS_URL = "https://storage.googleapis.com"
GCS_TIMEOUT_S = 30.0
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# A temporary verdict object is the verdict's name, this, an id (the IAM condition allows exactly these).
TEMP_INFIX = ".tmp-"
PENDING = "pending-verdict.json"
# Verdicts of other keys a verdict object keeps beside its own (find_verdict).
KEPT_OTHER_KEYS = 3


def log(message: str) -> None:
    print(f"{utc_now()} qwen36-calibrate: {message}", file=sys.stderr, flush=True)


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime(TIME_FORMAT)  # noqa: UP017 (3.10 on the VM)


# ------------------------------------------------------------------------------- key and candidates


@dataclass(frozen=True)
class Key:
    """What a verdict was measured on; a verdict applies only where all of it is the same."""

    llama_cpp_build: int
    model_sha256: str
    gpu_name: str
    driver_version: str
    ecc_mode: str
    ctx_size: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "llama_cpp_build": self.llama_cpp_build,
            "model_sha256": self.model_sha256,
            "gpu_name": self.gpu_name,
            "driver_version": self.driver_version,
            "ecc_mode": self.ecc_mode,
            "ctx_size": self.ctx_size,
        }

    def differences(self, other: Any) -> list[str]:
        """``field: theirs != ours`` for each field another key (a verdict's dict) differs in."""
        if not isinstance(other, dict):
            return ["key: missing"]
        return [
            f"{name}: {other.get(name)!r} != {mine!r}"
            for name, mine in self.as_dict().items()
            if other.get(name) != mine
        ]


@dataclass(frozen=True, order=True)
class Candidate:
    n_max: int  # 0: MTP off
    fusion: bool  # True: CUDA fusion on (GGML_CUDA_DISABLE_FUSION unset)
    gpu_sampling: bool

    @property
    def name(self) -> str:
        draft = f"mtp{self.n_max}" if self.n_max else "plain"
        sampling = "gpu" if self.gpu_sampling else "cpu"
        return f"{draft}/fusion-{'on' if self.fusion else 'off'}/{sampling}-sampling"

    @property
    def start(self) -> tuple[int, bool]:
        return (self.n_max, self.fusion)

    def env(self) -> dict[str, str]:
        return {} if self.fusion else {FUSION_ENV: "1"}

    def as_dict(self) -> dict[str, Any]:
        return {"n_max": self.n_max, "fusion": self.fusion, "gpu_sampling": self.gpu_sampling}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        return cls(int(data["n_max"]), bool(data["fusion"]), bool(data["gpu_sampling"]))


@dataclass(frozen=True)
class Catalogue:
    """The rendered argument lists (infra/server_args.py ``calibration_candidates``): one per
    (ctx size, n-max, GPU sampling), the production server's exactly, plus the stack's defaults and
    the values its stack file sets explicitly."""

    entries: list[dict[str, Any]]
    default: Candidate
    pinned: dict[str, Any]
    pinned_keys: dict[str, str]
    calibrated_n_max: tuple[int, ...] = N_MAX_VALUES

    @classmethod
    def load(cls, path: Path) -> Catalogue:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema") != SCHEMA:
            raise ValueError(f"{path}: candidates schema {data.get('schema')!r}, expected {SCHEMA}")
        if data.get("fusion_env") != FUSION_ENV:
            raise ValueError(f"{path}: fusion variable {data.get('fusion_env')!r}, expected {FUSION_ENV}")
        default = data["default"]
        return cls(
            entries=list(data["candidates"]),
            default=Candidate(int(default["n_max"]), True, bool(default["gpu_sampling"])),
            pinned=dict(data.get("pinned", {})),
            pinned_keys=dict(data.get("pinned_keys", {})),
            calibrated_n_max=tuple(int(n) for n in data.get("calibrated_n_max", N_MAX_VALUES)),
        )

    def args(self, ctx_size: int, n_max: int, gpu_sampling: bool) -> list[str]:
        for entry in self.entries:
            if (entry["ctx_size"], entry["n_max"], entry["gpu_sampling"]) == (ctx_size, n_max, gpu_sampling):
                return [str(a) for a in entry["args"]]
        raise KeyError(
            f"no rendered arguments for ctx {ctx_size}, n-max {n_max}, gpu sampling {gpu_sampling}"
        )


@dataclass(frozen=True)
class Plan:
    """Which candidates a calibration measures, in which order of server starts."""

    first_n_max: int = 2
    n_max: tuple[int, ...] = N_MAX_VALUES
    fusion: tuple[bool, ...] = FUSION_VALUES
    sampling: tuple[bool, ...] = SAMPLING_VALUES

    def starts(self) -> list[tuple[int, bool]]:
        """The stack's n-max first (the original's measured best), then plain decode (the answer
        when drafts are rarely accepted), then the rest nearest first; fusion on before off."""
        first = self.first_n_max if self.first_n_max in self.n_max else self.n_max[0]
        rest = sorted((n for n in self.n_max if n not in (first, 0)), key=lambda n: (abs(n - first), n))
        order = [first] + ([0] if 0 in self.n_max and first != 0 else []) + rest
        return [(n, fusion) for fusion in self.fusion for n in order]

    def candidates(self, start: tuple[int, bool]) -> list[Candidate]:
        return [Candidate(start[0], start[1], s) for s in self.sampling]


# ------------------------------------------------------------------------------------- measurement


@dataclass(frozen=True)
class Sample:
    tokens: int
    decode_ms: float
    drafted: int | None
    accepted: int | None

    @property
    def rate(self) -> float:
        return self.tokens / (self.decode_ms / 1000.0) if self.decode_ms > 0 else 0.0


@dataclass
class Result:
    candidate: Candidate
    samples: dict[int, Sample] = field(default_factory=dict)
    status: str = "pending"  # pending | running | measured | stopped | failed | skipped
    detail: str = ""

    @property
    def tok_s(self) -> float | None:
        """Every measured token over every second of decoding (the bench's headline quotient)."""
        tokens = sum(s.tokens for s in self.samples.values())
        ms = sum(s.decode_ms for s in self.samples.values())
        return tokens / (ms / 1000.0) if ms > 0 else None

    @property
    def acceptance(self) -> float | None:
        drafted = sum(s.drafted or 0 for s in self.samples.values())
        accepted = sum(s.accepted or 0 for s in self.samples.values())
        return accepted / drafted if drafted else None

    def as_dict(self) -> dict[str, Any]:
        tok_s, acceptance = self.tok_s, self.acceptance
        return {
            "name": self.candidate.name,
            **self.candidate.as_dict(),
            "status": self.status,
            "detail": self.detail,
            "prompts": len(self.samples),
            "tok_s": round(tok_s, 2) if tok_s is not None else None,
            "acceptance": round(acceptance, 4) if acceptance is not None else None,
            "per_prompt_tok_s": {PROMPTS[i][0]: round(s.rate, 2) for i, s in sorted(self.samples.items())},
        }


class MeasureError(RuntimeError):
    pass


class LaunchError(RuntimeError):
    pass


def http(
    method: str,
    url: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, bytes]:
    """One HTTP exchange: the status and body (an error status included); OSError when unreachable."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (our own URLs)
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


class ServerClient:
    """The chat requests of the measurement: greedy, prompt cache off, GPU sampling per request."""

    def __init__(self, base_url: str, api_key: str | None) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def chat(self, prompt: str, max_tokens: int, gpu_sampling: bool, timeout: float) -> Sample:
        body = {
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "cache_prompt": False,
            "stream": False,
            # llama-server's per-request switch; --backend-sampling only sets its default.
            "backend_sampling": gpu_sampling,
        }
        try:
            status, data = http(
                "POST", f"{self.base_url}/v1/chat/completions", json.dumps(body).encode(), self.headers,
                timeout=max(0.1, timeout),
            )  # fmt: skip
        except OSError as exc:
            raise MeasureError(f"the server stopped answering ({exc.__class__.__name__}: {exc})") from None
        if status != 200:
            raise MeasureError(f"chat request answered {status}: {data[:200].decode(errors='replace')}")
        try:
            timings = json.loads(data)["timings"]
            tokens = int(timings["predicted_n"])
            rate = float(timings["predicted_per_second"])
            decode_ms = float(timings.get("predicted_ms", tokens / rate * 1000.0 if rate > 0 else 0.0))
        except (ValueError, KeyError, TypeError) as exc:
            raise MeasureError(f"an answer without llama.cpp timings ({exc})") from None
        drafted = timings.get("draft_n")
        accepted = timings.get("draft_n_accepted")
        return Sample(
            tokens=tokens,
            decode_ms=decode_ms,
            drafted=int(drafted) if drafted is not None else None,
            accepted=int(accepted) if accepted is not None else None,
        )


def wait_healthy(url: str, alive: Callable[[], bool], log_tail: Callable[[], str], deadline: float) -> None:
    while time.monotonic() < deadline:
        if not alive():
            raise LaunchError(f"llama-server exited while loading: {log_tail()}")
        with contextlib.suppress(OSError):
            if http("GET", f"{url}/health", timeout=2.0)[0] == 200:
                return
        time.sleep(HEALTH_POLL_S)
    raise LaunchError(f"not healthy before the calibration's deadline: {log_tail()}")


@dataclass(frozen=True)
class Started:
    base_url: str
    api_key: str | None


class Runner(Protocol):
    def launch(
        self, args: list[str], env: dict[str, str], deadline: float
    ) -> contextlib.AbstractContextManager[Started]: ...


def _set_flag(args: list[str], flag: str, value: str) -> list[str]:
    out = list(args)
    if flag in out:
        out[out.index(flag) + 1] = value
    return out


def _one_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-3:])[:limit] or "no log output"


@dataclass
class DockerRunner:
    """Each start is the production image in its own container, published on loopback only, so
    neither the deploy gate, the door nor a load balancer ever sees a calibration server."""

    image: str
    model_dir: str
    container_model_dir: str
    port: int
    key_file: str | None = None
    container_key_file: str | None = None
    docker: str = "docker"
    name: str = CALIBRATION_CONTAINER
    production: str = PRODUCTION_CONTAINER

    def _docker(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.docker, *args], capture_output=True, text=True, timeout=DOCKER_TIMEOUT_S, check=False
        )

    def free_gpu(self) -> None:
        """The production container (left from an earlier run of the boot script) holds the GPU."""
        state = self._docker("inspect", "--format", "{{.State.Running}}", self.production)
        if state.stdout.strip() == "true":
            log(f"stopping {self.production}: the calibration needs the GPU to itself")
            self._docker("stop", self.production)

    @contextlib.contextmanager
    def launch(self, args: list[str], env: dict[str, str], deadline: float) -> Iterator[Started]:
        self._docker("rm", "-f", self.name)
        command = [
            "run",
            "-d",
            "--name",
            self.name,
            "--gpus",
            "all",
            "-p",
            f"127.0.0.1:{self.port}:{CONTAINER_PORT}",
        ]
        command += ["-v", f"{self.model_dir}:{self.container_model_dir}:ro"]
        if self.key_file and self.container_key_file:
            command += ["-v", f"{self.key_file}:{self.container_key_file}:ro"]
        for name, value in sorted(env.items()):
            command += ["-e", f"{name}={value}"]
        started = self._docker(*command, self.image, *args)
        try:
            if started.returncode != 0:
                raise LaunchError(f"docker run failed: {_one_line(started.stderr)}")

            def alive() -> bool:
                return (
                    self._docker("inspect", "--format", "{{.State.Running}}", self.name).stdout.strip()
                    == "true"
                )

            def tail() -> str:
                logs = self._docker("logs", "--tail", "20", self.name)
                return _one_line(logs.stdout + logs.stderr)

            url = f"http://127.0.0.1:{self.port}"
            wait_healthy(url, alive, tail, deadline)
            key = Path(self.key_file).read_text(encoding="utf-8").strip() if self.key_file else None
            yield Started(url, key)
        finally:
            self._docker("rm", "-f", self.name)


@dataclass
class LocalRunner:
    """A llama-server binary on this machine (the tests, the GPU bench, ``tune --launcher local``):
    the rendered arguments with the model, key file, host and port pointed at local ones."""

    binary: str
    model_path: str
    port: int
    key_file: str | None = None
    base_env: dict[str, str] | None = None
    log_dir: str | None = None

    @contextlib.contextmanager
    def launch(self, args: list[str], env: dict[str, str], deadline: float) -> Iterator[Started]:
        args = _set_flag(args, "--model", self.model_path)
        args = _set_flag(_set_flag(args, "--host", "127.0.0.1"), "--port", str(self.port))
        if self.key_file:
            args = _set_flag(args, "--api-key-file", self.key_file)
        log_path = Path(self.log_dir or "/tmp") / f"calibrate-{os.getpid()}-{self.port}.log"  # noqa: S108
        full_env = {**(self.base_env if self.base_env is not None else os.environ), **env}
        if not env:
            full_env.pop(FUSION_ENV, None)
        with log_path.open("wb") as out:
            process = subprocess.Popen(
                [self.binary, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=full_env,
            )
        try:
            url = f"http://127.0.0.1:{self.port}"
            wait_healthy(
                url,
                lambda: process.poll() is None,
                lambda: _one_line(log_path.read_text(errors="replace")),
                deadline,
            )
            key = Path(self.key_file).read_text(encoding="utf-8").strip() if self.key_file else None
            yield Started(url, key)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
            with contextlib.suppress(OSError):
                log_path.unlink()


# -------------------------------------------------------------------------------------- the search


@dataclass
class Noise:
    pairs: list[tuple[float, float]] = field(default_factory=list)

    @property
    def repeat(self) -> float:
        """Relative sd of one measurement, from the repeated prompts (log scale)."""
        if not self.pairs:
            return REPEAT_NOISE_PRIOR
        var = sum((math.log(a) - math.log(b)) ** 2 for a, b in self.pairs) / (2 * len(self.pairs))
        return max(REPEAT_NOISE_MIN, math.sqrt(var))


def cannot_win(c: Result, rival: Result, noise: Noise, prompts: int, same_start: bool) -> bool:
    """Whether ``c`` is behind ``rival`` by more than the rest of its prompts and the noise allow."""
    return behind(c, rival, noise, prompts, same_start) is not None


def behind(c: Result, rival: Result, noise: Noise, prompts: int, same_start: bool) -> float | None:
    """How far (relative) ``c`` trails ``rival`` on their common prompts, when that rules it out."""
    common = sorted(set(c.samples) & set(rival.samples))
    if not common or rival.candidate == c.candidate:
        return None
    diffs = [
        math.log(c.samples[i].rate / rival.samples[i].rate)
        for i in common
        if c.samples[i].rate > 0 and rival.samples[i].rate > 0
    ]
    k = len(diffs)
    if k == 0:
        return None
    mean = sum(diffs) / k
    # Two candidates that draft alike (same n-max) differ in kernels or sampling only, which a prompt
    # barely changes; with different drafting the ratio follows each prompt's acceptance.
    spread = PROMPT_SPREAD_MIN if c.candidate.n_max != rival.candidate.n_max else PROMPT_SPREAD_SAME_DRAFTS
    if k >= 3:
        observed = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (k - 1))
        spread = max(spread, observed)
    remaining = max(0, prompts - k)
    var = 2 * noise.repeat**2 / k + spread**2 * remaining / (prompts * k)
    if not same_start:
        var += 2 * START_DRIFT**2
    return 1.0 - math.exp(mean) if mean + Z_STOP * math.sqrt(var) < 0 else None


@dataclass
class Calibration:
    key: Key
    results: list[Result]
    noise: Noise
    elapsed_s: float
    budget_s: float
    load_s: list[float]
    max_tokens: int

    @property
    def winner(self) -> Result | None:
        done = [r for r in self.results if r.status == "measured" and r.tok_s is not None]
        return max(done, key=lambda r: r.tok_s or 0.0) if done else None

    def verdict(self, writer: str = "") -> dict[str, Any]:
        winner = self.winner
        skipped = [r.candidate.name for r in self.results if r.status == "skipped"]
        return {
            "schema": SCHEMA,
            "key": self.key.as_dict(),
            "date": utc_now(),
            "writer": writer,
            "winner": _summary(winner) if winner else None,
            "candidates": [r.as_dict() for r in self.results],
            "noise": {
                "repeat_rel_sd": round(self.noise.repeat, 4),
                "repeat_pairs": len(self.noise.pairs),
                "start_drift_assumed": START_DRIFT,
                "prompt_spread_min": PROMPT_SPREAD_MIN,
                "prompt_spread_same_drafts": PROMPT_SPREAD_SAME_DRAFTS,
                "z_stop": Z_STOP,
            },
            "prompts": [name for name, _ in PROMPTS],
            "max_tokens": self.max_tokens,
            "elapsed_s": round(self.elapsed_s, 1),
            "budget_s": self.budget_s,
            "load_s": [round(s, 2) for s in self.load_s],
            "complete": not skipped,
            "skipped": skipped,
            "stale": None,
        }


def _summary(result: Result) -> dict[str, Any]:
    tok_s, acceptance = result.tok_s, result.acceptance
    return {
        "name": result.candidate.name,
        **result.candidate.as_dict(),
        "tok_s": round(tok_s, 2) if tok_s is not None else None,
        "acceptance": round(acceptance, 4) if acceptance is not None else None,
    }


def calibrate(
    key: Key,
    plan: Plan,
    args_for: Callable[[Candidate], list[str]],
    runner: Runner,
    *,
    budget_s: float = DEFAULT_BUDGET_S,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    prompts: Sequence[str] = PROMPT_TEXTS,
    say: Callable[[str], None] = log,
    clock: Callable[[], float] = time.monotonic,
) -> Calibration:
    """Measure the plan's candidates within ``budget_s`` (the module docstring's search)."""
    began = clock()
    deadline = began + budget_s
    results = {c: Result(c) for start in plan.starts() for c in plan.candidates(start)}
    noise = Noise()
    loads: list[float] = []
    start_costs: list[float] = []
    first = True
    for start in plan.starts():
        group = [results[c] for c in plan.candidates(start)]
        # The first start always runs (its own deadline bounds it); later ones when one more fits.
        need = max(start_costs) if start_costs else 0.0
        if clock() + need > deadline:
            for r in group:
                r.status, r.detail = (
                    "skipped",
                    f"budget: {deadline - clock():.1f} s left, a start costs ~{need:.0f} s",
                )
            continue
        start_began = clock()
        # The start runs with the stack's GPU-sampling flag; each request then sets its own.
        args = args_for(Candidate(start[0], start[1], plan.sampling[0]))
        for r in group:
            r.status = "running"
        try:
            with runner.launch(args, group[0].candidate.env(), deadline) as server:
                loads.append(clock() - start_began)
                client = ServerClient(server.base_url, server.api_key)
                _measure_start(
                    client, group, results, noise, prompts, max_tokens, deadline, clock, repeat_first=first
                )
        except LaunchError as exc:
            for r in group:
                r.status, r.detail = "failed", f"did not start: {exc}"
        except MeasureError as exc:
            for r in group:
                if r.status == "running":
                    r.status, r.detail = "failed", str(exc)
        first = False
        start_costs.append(clock() - start_began)
        say(
            f"start n-max {start[0]}, fusion {'on' if start[1] else 'off'}: "
            + "; ".join(f"{r.candidate.name} {r.status} {_fmt(r.tok_s)} tok/s" for r in group)
            + f" ({clock() - start_began:.1f} s)"
        )
    return Calibration(
        key=key,
        results=list(results.values()),
        noise=noise,
        elapsed_s=clock() - began,
        budget_s=budget_s,
        load_s=loads,
        max_tokens=max_tokens,
    )


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _measure_start(
    client: ServerClient,
    group: list[Result],
    results: dict[Candidate, Result],
    noise: Noise,
    prompts: Sequence[str],
    max_tokens: int,
    deadline: float,
    clock: Callable[[], float],
    *,
    repeat_first: bool,
) -> None:
    def left() -> float:
        return min(REQUEST_TIMEOUT_S, deadline - clock())

    # Uncounted: the first request of each sampling mode builds its graph.
    for r in group:
        client.chat(WARMUP_PROMPT, WARMUP_TOKENS, r.candidate.gpu_sampling, left())
    for i, prompt in enumerate(prompts):
        active = [r for r in group if r.status == "running"]
        # Alternating the order cancels a drift within the start between the two candidates.
        for r in active if i % 2 == 0 else reversed(active):
            if clock() >= deadline:
                r.status, r.detail = "stopped", f"budget ran out after {len(r.samples)} prompts"
                continue
            r.samples[i] = client.chat(prompt, max_tokens, r.candidate.gpu_sampling, left())
            if repeat_first and i == 0 and clock() < deadline:
                again = client.chat(prompt, max_tokens, r.candidate.gpu_sampling, left())
                if r.samples[i].rate > 0 and again.rate > 0:
                    noise.pairs.append((r.samples[i].rate, again.rate))
        # A candidate with every prompt measured is done: it is compared at the end, not cut.
        for r in [r for r in group if r.status == "running" and len(r.samples) < len(prompts)]:
            rivals = [o for o in results.values() if o.status == "measured"]
            rivals += [o for o in group if o is not r and o.status == "running"]
            for rival in rivals:
                gap = behind(r, rival, noise, len(prompts), rival in group)
                if gap is not None:
                    r.status = "stopped"
                    r.detail = (
                        f"cannot win: {gap:.0%} behind {rival.candidate.name} on the prompts both ran, "
                        f"after {len(r.samples)} of {len(prompts)}"
                    )
                    break
    for r in group:
        if r.status == "running":
            r.status = "measured"


# ----------------------------------------------------------------------------------- the decision


@dataclass
class Choice:
    candidate: Candidate
    source: str  # verdict | calibrated | default
    tok_s: float | None = None
    acceptance: float | None = None
    notes: list[str] = field(default_factory=list)
    pinned: list[str] = field(default_factory=list)  # the stack-config keys that decided, short


def verdict_problem(doc: Any, key: Key) -> str | None:
    """Why a stored verdict cannot decide this boot, or None when it can."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        return f"schema {doc.get('schema') if isinstance(doc, dict) else None!r}, not {SCHEMA}"
    differences = key.differences(doc.get("key"))
    if differences:
        return "its key differs (" + "; ".join(differences) + ")"
    if doc.get("stale"):
        stale = doc["stale"]
        return f"marked stale: {stale.get('reason', '') if isinstance(stale, dict) else stale}"
    if not doc.get("winner"):
        return "it has no winner (no candidate was measured)"
    return None


def find_verdict(doc: Any, key: Key) -> tuple[dict[str, Any] | None, str | None]:
    """The stored verdict that decides for ``key``: the object's own, or one it keeps for another
    key (``others``: the verdicts it replaced, so members of two keys sharing a bucket, say one host
    that cannot turn ECC off, do not recalibrate each other's away). (verdict, None) or (None, why)."""
    problem = verdict_problem(doc, key)
    if problem is None:
        return doc, None
    for other in doc.get("others", []) if isinstance(doc, dict) else []:
        if verdict_problem(other, key) is None:
            return other, None
    return None, problem


def with_others(new: dict[str, Any], old: Any, key: Key) -> dict[str, Any]:
    """``new`` carrying the verdicts of other keys that ``old`` held (its own included), newest first."""
    kept: list[dict[str, Any]] = []
    if isinstance(old, dict):
        previous = {k: v for k, v in old.items() if k != "others"}
        for entry in [previous, *old.get("others", [])]:
            usable = isinstance(entry, dict) and entry.get("schema") == SCHEMA and not entry.get("stale")
            if usable and key.differences(entry.get("key")) and len(kept) < KEPT_OTHER_KEYS:
                kept.append(entry)
    return {**new, "others": kept}


def choose(doc: dict[str, Any], catalogue: Catalogue, source: str) -> Choice:
    """The verdict's winner, except where the stack file sets a value: that value wins, and of the
    measured candidates with it the fastest is taken (else the winner with the value put in)."""
    winner = Candidate.from_dict(doc["winner"])
    pinned = catalogue.pinned
    if not pinned:
        return Choice(winner, source, doc["winner"].get("tok_s"), doc["winner"].get("acceptance"))

    def fits(c: Candidate) -> bool:
        return ("spec_draft_n_max" not in pinned or c.n_max == pinned["spec_draft_n_max"]) and (
            "backend_sampling" not in pinned or c.gpu_sampling == pinned["backend_sampling"]
        )

    measured = [
        r
        for r in doc.get("candidates", [])
        if r.get("status") == "measured" and r.get("tok_s") is not None and fits(Candidate.from_dict(r))
    ]
    notes = []
    for name, value in pinned.items():
        theirs = getattr(winner, "n_max" if name == "spec_draft_n_max" else "gpu_sampling")
        if theirs != value:
            notes.append(
                f"{catalogue.pinned_keys.get(name, name)} {_show(value)} set in the stack config wins over "
                f"the verdict's {_show(theirs)}"
            )
        else:
            notes.append(f"{catalogue.pinned_keys.get(name, name)} {_show(value)} set in the stack config")
    keys = [catalogue.pinned_keys.get(name, name).rsplit(":", 1)[-1] for name in pinned]
    if measured:
        best = max(measured, key=lambda r: float(r["tok_s"]))
        return Choice(
            Candidate.from_dict(best), source, best.get("tok_s"), best.get("acceptance"), notes, keys
        )
    chosen = Candidate(
        int(pinned.get("spec_draft_n_max", winner.n_max)),
        winner.fusion,
        bool(pinned.get("backend_sampling", winner.gpu_sampling)),
    )
    notes.append("no measured candidate has the stack's value; its other options are the verdict's")
    return Choice(chosen, source, None, None, notes, keys)


def _show(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


# ------------------------------------------------------------------------------ the verdict in GCS


class GcsError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"GCS answered {status}: {message}")
        self.status = status


class MetadataToken:
    """The VM service account's access token from the metadata server, reused until near expiry.
    https://cloud.google.com/compute/docs/access/authenticate-workloads#applications"""

    def __init__(self, metadata_url: str = METADATA_URL) -> None:
        self.url = metadata_url.rstrip("/") + "/computeMetadata/v1/instance/service-accounts/default/token"
        self._token = ""
        self._expires = 0.0

    def __call__(self) -> str | None:
        if time.monotonic() >= self._expires:
            status, body = http("GET", self.url, headers={"Metadata-Flavor": "Google"})
            if status != 200:
                raise GcsError(status, "the metadata server gave no access token")
            doc = json.loads(body)
            self._token = str(doc["access_token"])
            self._expires = time.monotonic() + float(doc.get("expires_in", 0)) - 60
        return self._token


class Gcs:
    """The few Cloud Storage JSON API calls a verdict needs.
    https://cloud.google.com/storage/docs/json_api/v1/objects"""

    def __init__(self, base_url: str, token: Callable[[], str | None]) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token

    @classmethod
    def default_url(cls) -> str:
        # The variable Google's client libraries read for an emulator.
        return os.environ.get("STORAGE_EMULATOR_HOST") or GCS_URL

    def _call(
        self, method: str, path: str, query: dict[str, Any] | None = None, body: bytes | None = None,
        content_type: str = "application/json",
    ) -> bytes:  # fmt: skip
        url = self.base_url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Content-Type": content_type}
        token = self.token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            status, data = http(method, url, body, headers, timeout=GCS_TIMEOUT_S)
        except OSError as exc:
            raise GcsError(0, f"unreachable ({exc})") from None
        if status not in (200, 204):
            raise GcsError(status, data[:300].decode(errors="replace"))
        return data

    @staticmethod
    def _o(bucket: str, name: str) -> str:
        return f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}"

    def stat(self, bucket: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self._call("GET", self._o(bucket, name))))
        except GcsError as exc:
            if exc.status == 404:
                return None
            raise

    def read(self, bucket: str, name: str, generation: str) -> bytes:
        return self._call("GET", self._o(bucket, name), {"alt": "media", "generation": generation})

    def insert(self, bucket: str, name: str, data: bytes, *, if_generation_match: str) -> dict[str, Any]:
        """A multipart upload that GCS checks against the md5 we send, only if the precondition holds.
        https://cloud.google.com/storage/docs/data-validation (MD5 of a single-request upload)
        https://cloud.google.com/storage/docs/request-preconditions"""
        boundary = "qwen36-" + uuid.uuid4().hex
        meta = {"name": name, "contentType": "application/json", "md5Hash": _md5(data)}
        body = (
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode()
            + json.dumps(meta).encode()
            + f"\r\n--{boundary}\r\nContent-Type: application/json\r\n\r\n".encode()
            + data
            + f"\r\n--{boundary}--\r\n".encode()
        )
        path = f"/upload/storage/v1/b/{bucket}/o"
        query = {"uploadType": "multipart", "ifGenerationMatch": if_generation_match}
        return dict(
            json.loads(self._call("POST", path, query, body, f"multipart/related; boundary={boundary}"))
        )

    def copy(
        self, bucket: str, source: str, source_generation: str, dest: str, *, if_generation_match: str
    ) -> dict[str, Any]:
        """Server-side copy; ``ifGenerationMatch`` is the destination's (0: it must not exist).
        https://cloud.google.com/storage/docs/json_api/v1/objects/copy"""
        path = f"{self._o(bucket, source)}/copyTo/b/{bucket}/o/{urllib.parse.quote(dest, safe='')}"
        query = {"ifGenerationMatch": if_generation_match, "ifSourceGenerationMatch": source_generation}
        return dict(json.loads(self._call("POST", path, query, b"{}")))

    def delete(self, bucket: str, name: str, generation: str) -> None:
        self._call("DELETE", self._o(bucket, name), {"generation": generation})


def _md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()  # noqa: S324 (GCS's integrity field)


class ConflictError(RuntimeError):
    """Another writer changed the verdict since it was read (GCS 412)."""


class VerdictStore:
    """The verdict object next to the model, written as the model is: to a temporary name first,
    read back and checked, then promoted with a precondition on the generation this boot read, so
    a reader only ever finds a whole, checked verdict and two writers never overwrite each other
    unknowingly."""

    def __init__(self, gcs: Gcs, bucket: str, name: str) -> None:
        self.gcs, self.bucket, self.name = gcs, bucket, name

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.name}"

    def load(self) -> tuple[dict[str, Any] | None, str]:
        """The verdict and its generation ("0": there is none)."""
        meta = self.gcs.stat(self.bucket, self.name)
        if meta is None:
            return None, "0"
        generation = str(meta["generation"])
        try:
            doc = json.loads(self.gcs.read(self.bucket, self.name, generation))
        except GcsError as exc:
            if exc.status == 404:  # replaced between the two calls: read it again next time
                return None, generation
            raise
        except ValueError:
            return {"schema": None, "unreadable": True}, generation
        return (doc if isinstance(doc, dict) else {"schema": None}), generation

    def save(self, doc: dict[str, Any], expected_generation: str) -> str:
        """Writes ``doc`` over the generation read (``"0"``: none); its new generation."""
        data = json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"
        temp = f"{self.name}{TEMP_INFIX}{uuid.uuid4().hex[:12]}"
        made = self.gcs.insert(self.bucket, temp, data, if_generation_match="0")
        try:
            back = self.gcs.read(self.bucket, temp, str(made["generation"]))
            if back != data or json.loads(back) != doc:
                raise GcsError(0, f"gs://{self.bucket}/{temp} does not read back as written")
            try:
                final = self.gcs.copy(
                    self.bucket,
                    temp,
                    str(made["generation"]),
                    self.name,
                    if_generation_match=expected_generation,
                )
            except GcsError as exc:
                if exc.status == 412:
                    raise ConflictError(
                        f"{self.uri} changed since it was read (generation {expected_generation})"
                    ) from None
                raise
            if final.get("md5Hash") not in (None, _md5(data)) or int(final.get("size", len(data))) != len(
                data
            ):
                raise GcsError(0, f"{self.uri} after the promotion is not the checked temporary object")
            return str(final["generation"])
        finally:
            with contextlib.suppress(GcsError):
                self.gcs.delete(self.bucket, temp, str(made["generation"]))

    def mark_stale(self, key: Key, reason: str, details: dict[str, Any]) -> bool:
        """Marks the verdict of ``key`` stale, so the next boot calibrates again; False when the
        stored verdict is another key's or already stale (nothing to do)."""
        doc, generation = self.load()
        if doc is None:
            return False
        entry, _ = find_verdict(doc, key)
        if entry is None:
            return False
        entry["stale"] = {"reason": reason, "at": utc_now(), **details}
        try:
            self.save(doc, generation)
        except ConflictError:
            return False
        return True


# ------------------------------------------------------------------------------------------ the CLI


def gpu_identity(nvidia_smi: str = "nvidia-smi") -> tuple[str, str, str]:
    """(name, driver, ECC mode) of the first GPU."""
    out = subprocess.run(
        [nvidia_smi, "--query-gpu=name,driver_version,ecc.mode.current", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    name, driver, ecc = (part.strip() for part in out.stdout.splitlines()[0].split(","))
    return name, driver, ecc


def table(doc: dict[str, Any]) -> str:
    """The verdict as a fixed-width table."""
    lines = [f"{'candidate':34} {'status':9} {'prompts':>7} {'tok/s':>8} {'accept':>7}  detail"]
    for r in doc.get("candidates", []):
        acc = r.get("acceptance")
        lines.append(
            f"{r['name']:34} {r['status']:9} {r.get('prompts', 0):>7} {_fmt(r.get('tok_s')):>8} "
            f"{'n/a' if acc is None else f'{acc:.1%}':>7}  {r.get('detail', '')}"
        )
    winner = doc.get("winner") or {}
    noise = doc.get("noise", {})
    lines.append(
        f"winner: {winner.get('name', 'none')} ({_fmt(winner.get('tok_s'))} tok/s); "
        f"took {doc.get('elapsed_s')} s "
        f"of a {doc.get('budget_s')} s bound; repeat noise {noise.get('repeat_rel_sd', 0):.1%}; "
        f"complete: {doc.get('complete')}"
    )
    return "\n".join(lines)


def _write_outputs(out: Path, key: Key, choice: Choice, args: list[str], doc: dict[str, Any] | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "key.json").write_text(json.dumps(key.as_dict()) + "\n", encoding="utf-8")
    (out / "server-args.tmp").write_bytes(b"".join(a.encode() + b"\0" for a in args))
    (out / "server-args.tmp").replace(out / "server-args")
    env = [f"{k}={v}" for k, v in sorted(choice.candidate.env().items())]
    (out / "docker-env").write_text("".join(f"{line}\n" for line in env), encoding="utf-8")
    c = choice.candidate
    detail = (
        f"{c.name} ({choice.source}"
        + (f", {choice.tok_s:.1f} tok/s" if choice.tok_s else "")
        + (f", acceptance {choice.acceptance:.1%}" if choice.acceptance is not None else "")
        + ")"
        + ("; " + "; ".join(choice.notes) if choice.notes else "")
    )
    values = {
        "CALIB_SOURCE": choice.source,
        "CALIB_CHOICE": c.name,
        "CALIB_TOK_S": "" if choice.tok_s is None else f"{choice.tok_s:.1f}",
        "CALIB_ACCEPTANCE": "" if choice.acceptance is None else f"{choice.acceptance:.4f}",
        "CALIB_DETAIL": detail,
        "CALIB_PINNED": ",".join(choice.pinned),
    }
    (out / "choice.env").write_text(
        "".join(f"{k}={shlex.quote(v)}\n" for k, v in values.items()), encoding="utf-8"
    )
    # What the acceptance guard compares live traffic with, and the key it may mark stale.
    (out / "expect.json").write_text(
        json.dumps({"candidate": c.as_dict(), "acceptance": choice.acceptance, "source": choice.source})
        + "\n",
        encoding="utf-8",
    )
    if doc is not None:
        (out / "verdict.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def verdict_store(bucket: str, name: str, gcs_url: str = "", metadata_url: str = "") -> VerdictStore:
    """The verdict beside the model, read and written with this VM's token (none without a
    metadata server: the emulator's tests)."""
    token = MetadataToken(metadata_url) if metadata_url else (lambda: None)
    return VerdictStore(Gcs(gcs_url or Gcs.default_url(), token), bucket, name)


def save_verdict(store: VerdictStore, doc: dict[str, Any], generation: str) -> bool:
    try:
        store.save(doc, generation)
    except ConflictError as exc:
        log(f"another member wrote a verdict first ({exc}); this boot uses its own measurement")
        return False
    except (GcsError, OSError, KeyError, ValueError) as exc:
        log(f"warning: the verdict could not be written ({exc}); the next boot calibrates again")
        return False
    log(f"verdict written to {store.uri}")
    return True


def store_pending(args: argparse.Namespace) -> int:
    """The verdict a ``run --defer-store`` measured, into the bucket (then the pending file goes)."""
    pending_path = args.out / PENDING
    if not pending_path.is_file():
        return 0
    pending = json.loads(pending_path.read_text(encoding="utf-8"))
    # The cold start this boot measured (the ready report's figures: fetch rate and slices, load
    # time, time to ready), known only once the server answered, after the calibration.
    boot = pending["verdict"].setdefault("boot", {})
    boot.update(dict(fact.split("=", 1) for fact in args.boot_fact))
    store = verdict_store(args.bucket, args.verdict_object, args.gcs_url, args.metadata_url)
    save_verdict(store, pending["verdict"], str(pending["generation"]))
    pending_path.unlink()
    return 0


def run(args: argparse.Namespace) -> int:
    catalogue = Catalogue.load(args.candidates)
    if args.gpu_name is None:
        args.gpu_name, args.driver_version, args.ecc_mode = gpu_identity()
    key = Key(
        args.llama_cpp_build,
        args.model_sha256,
        args.gpu_name,
        args.driver_version,
        args.ecc_mode,
        args.ctx_size,
    )
    store = None
    if args.bucket:
        store = verdict_store(args.bucket, args.verdict_object, args.gcs_url, args.metadata_url)
    doc: dict[str, Any] | None = None
    stored: dict[str, Any] | None = None
    generation = "0"
    source = "verdict"
    if store is not None:
        try:
            stored, generation = store.load()
        except GcsError as exc:
            log(f"could not read the verdict {store.uri} ({exc}); calibrating without it")
            stored, generation = None, ""
        doc, problem = find_verdict(stored, key) if stored is not None else (None, "there is none")
        if doc is not None:
            log(f"verdict {store.uri} of {doc.get('date')} decides: {doc['winner']['name']}")
        else:
            log(f"the verdict {store.uri} does not apply: {problem}")
    if doc is None:
        source = "calibrated"
        plan = Plan(first_n_max=catalogue.default.n_max, n_max=catalogue.calibrated_n_max)
        runner: Runner
        if args.server_bin:
            runner = LocalRunner(args.server_bin, args.local_model, args.port, args.key_file)
        else:
            docker = DockerRunner(
                args.image,
                args.model_dir,
                args.container_model_dir,
                args.port,
                args.key_file,
                args.container_key_file,
            )
            docker.free_gpu()
            runner = docker
        log(f"calibrating {len(plan.starts())} server starts within {args.budget:g} s")
        log(f"the key: {json.dumps(key.as_dict())}")
        result = calibrate(
            key,
            plan,
            lambda c: catalogue.args(key.ctx_size, c.n_max, c.gpu_sampling),
            runner,
            budget_s=args.budget,
            max_tokens=args.max_tokens,
        )
        doc = with_others(result.verdict(writer=args.writer), stored, key)
        # Facts of the boot that measured it (the boot report's fields, infra/boot_protocol.py).
        doc["boot"] = dict(fact.split("=", 1) for fact in args.boot_fact)
        print(table(doc), file=sys.stderr, flush=True)
        if doc["winner"] is None:
            log("no candidate was measured to the end: serving the stack config's flags, no verdict written")
            choice = Choice(catalogue.default, "default", notes=["calibration measured nothing"])
            _write_outputs(
                args.out,
                key,
                choice,
                catalogue.args(key.ctx_size, choice.candidate.n_max, choice.candidate.gpu_sampling),
                doc,
            )
            return 0
        if store is not None and generation != "":
            if args.defer_store:
                # Stored by `calibrate.py store` once the served file has passed its sha256.
                args.out.mkdir(parents=True, exist_ok=True)
                pending = {"verdict": doc, "generation": generation}
                (args.out / PENDING).write_text(json.dumps(pending) + "\n", encoding="utf-8")
            else:
                save_verdict(store, doc, generation)
    choice = choose(doc, catalogue, source)
    if doc.get("skipped"):
        choice.notes.append(f"{len(doc['skipped'])} candidates did not fit the {doc.get('budget_s')} s bound")
    args_chosen = catalogue.args(key.ctx_size, choice.candidate.n_max, choice.candidate.gpu_sampling)
    _write_outputs(args.out, key, choice, args_chosen, doc)
    notes = "".join(f"; {note}" for note in choice.notes)
    log(f"serving {choice.candidate.name} ({choice.source}){notes}")
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="calibrate.py", description=__doc__.splitlines()[0] if __doc__ else None
    )
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="use the stored verdict, or calibrate and store one")
    r.add_argument("--candidates", type=Path, required=True, help="the rendered argument lists (JSON)")
    r.add_argument(
        "--out", type=Path, required=True, help="folder for the choice (server-args, choice.env, ...)"
    )
    r.add_argument("--llama-cpp-build", type=int, required=True)
    r.add_argument("--model-sha256", required=True)
    r.add_argument("--ctx-size", type=int, required=True)
    r.add_argument("--gpu-name", help="default: from nvidia-smi, with the driver and ECC mode")
    r.add_argument("--driver-version")
    r.add_argument("--ecc-mode")
    r.add_argument("--bucket", default="")
    r.add_argument("--verdict-object", default="")
    r.add_argument("--gcs-url", default="")
    r.add_argument("--metadata-url", default="")
    r.add_argument("--writer", default="", help="who writes the verdict (instance and boot id)")
    r.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, help="seconds (the bound)")
    r.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    r.add_argument(
        "--port", type=int, default=CONTAINER_PORT + 10, help="loopback port of the calibration server"
    )
    r.add_argument("--image", default="")
    r.add_argument("--model-dir", default="", help="docker: host folder of the model")
    r.add_argument("--container-model-dir", default="/models")
    r.add_argument("--key-file", default=None)
    r.add_argument("--container-key-file", default=None)
    r.add_argument("--server-bin", default="", help="a local llama-server instead of docker")
    r.add_argument("--local-model", default="", help="with --server-bin: the GGUF file")
    r.add_argument(
        "--boot-fact", action="append", default=[], metavar="NAME=VALUE", help="recorded in a new verdict"
    )
    r.add_argument(
        "--defer-store",
        action="store_true",
        help="leave a measured verdict in OUT for `store` (after the hash)",
    )
    st = sub.add_parser("store", help="store the verdict a `run --defer-store` left in OUT")
    st.add_argument("--out", type=Path, required=True)
    st.add_argument("--bucket", required=True)
    st.add_argument("--verdict-object", required=True)
    st.add_argument("--gcs-url", default="")
    st.add_argument("--metadata-url", default="")
    st.add_argument(
        "--boot-fact", action="append", default=[], metavar="NAME=VALUE", help="recorded in the verdict"
    )
    s = sub.add_parser("show", help="print a verdict file as a table")
    s.add_argument("verdict", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        if args.bucket and not args.verdict_object:
            parser.error("--bucket needs --verdict-object")
        if not args.server_bin and not (args.image and args.model_dir):
            parser.error("give --image and --model-dir (docker), or --server-bin and --local-model")
        if args.gpu_name is not None and (args.driver_version is None or args.ecc_mode is None):
            parser.error("--gpu-name needs --driver-version and --ecc-mode")
    if args.command in ("run", "store") and any("=" not in fact for fact in args.boot_fact):
        parser.error("--boot-fact takes NAME=VALUE")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # `timeout` ends a run past its bound with SIGTERM: unwind, so the calibration container goes too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    if args.command == "show":
        print(table(json.loads(args.verdict.read_text(encoding="utf-8"))))
        return 0
    try:
        return run(args) if args.command == "run" else store_pending(args)
    except (OSError, ValueError, KeyError) as exc:
        log(f"error: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
