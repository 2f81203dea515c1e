"""The bench: per-workload decode speed, MTP acceptance and prompt speed, measured honestly.

One uncounted warm-up, then ``reps`` distinct greedy requests per workload with the prompt cache
off. Decode speed is the server's own ``timings.predicted_per_second`` (prompt processing
excluded); acceptance is ``draft_n_accepted / draft_n`` summed over the repetitions. The first
error stops the run; what was measured until then is kept and reported.

The headline is the token-weighted rate: all tokens generated over all decode time
(``sum(predicted_n) / sum(predicted_ms)``), the same quotient as the server's own ``/metrics``
(``tokens_predicted_total / tokens_predicted_seconds_total``). The mean of per-request rates is
reported next to it, with the slowest workload: a mean of rates weighs a short, fast request as
much as a long one, and on a server with a noisy neighbour it ran 5-6.5 % above ``/metrics``.
Per-request ``timings`` were seen to count one token fewer than ``/metrics`` (issue 15), which
would put the two about 1/predicted_n apart; the pinned b11434 build counted the same tokens both
ways in tests/measure/test_bench_server.py.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from qwen36.measure.client import Client, Completion, EndpointError
from qwen36.measure.defaults import DEFAULT_MAX_TOKENS, DEFAULT_REPS
from qwen36.measure.workloads import MAX_REPS, WARMUP_PROMPT, Workload

WARMUP_MAX_TOKENS = 16

NO_DRAFTS_NOTE = (
    "the server made no drafts (no draft_n in its timings), so acceptance is n/a: it runs without "
    "MTP; start it with --spec-type draft-mtp on an MTP model (stack config specDraftNMax > 0)"
)


@dataclass
class WorkloadResult:
    name: str
    samples: list[Completion] = field(default_factory=list)

    @property
    def decode_tps(self) -> float:
        return statistics.fmean(s.predicted_per_second for s in self.samples)

    @property
    def prompt_tps(self) -> float:
        return statistics.fmean(s.prompt_per_second for s in self.samples)

    @property
    def wall_s(self) -> float:
        return statistics.fmean(s.wall_s for s in self.samples)

    @property
    def predicted_n(self) -> int:
        return sum(s.predicted_n for s in self.samples)

    @property
    def decode_s(self) -> float:
        return sum(s.predicted_ms for s in self.samples) / 1000.0

    @property
    def weighted_tps(self) -> float | None:
        """Tokens over decode time across the repetitions."""
        return self.predicted_n / self.decode_s if self.decode_s > 0 else None

    @property
    def drafts(self) -> tuple[int, int] | None:
        """(accepted, drafted) summed over repetitions; None when the server reported no drafts."""
        with_drafts = [s for s in self.samples if s.draft_n is not None]
        if not with_drafts:
            return None
        return sum(s.draft_n_accepted or 0 for s in with_drafts), sum(s.draft_n or 0 for s in with_drafts)

    @property
    def acceptance(self) -> float | None:
        drafts = self.drafts
        if drafts is None or drafts[1] == 0:
            return None
        return drafts[0] / drafts[1]


# One sample of the Prometheus text format: a metric name, optional labels (whose quoted values
# may hold spaces and escaped quotes), the value and an optional timestamp.
# https://prometheus.io/docs/instrumenting/exposition_formats/#text-format-details
_SAMPLE = re.compile(
    r'(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(?P<value>\S+)(?:\s+-?\d+)?'
)
# llama-server's /metrics counters (tools/server, --metrics) behind the server's own figures.
SERVER_COUNTERS = {
    "drafted": "llamacpp:spec_decode_num_draft_tokens_total",
    "accepted": "llamacpp:spec_decode_num_accepted_tokens_total",
    "tokens": "llamacpp:tokens_predicted_total",
    "seconds": "llamacpp:tokens_predicted_seconds_total",
}


@dataclass(frozen=True)
class ServerCounters:
    drafted: float
    accepted: float
    tokens: float
    seconds: float

    @classmethod
    def parse(cls, text: str) -> ServerCounters | None:
        """The counters from Prometheus text; None without the decode ones (no --metrics), or where
        the text is not the exposition format at all (an HTML page, a proxy's junk)."""
        values: dict[str, float] = {}
        for line in text.splitlines():
            sample = _SAMPLE.fullmatch(line.strip())
            if sample is None:
                continue
            try:
                value = float(sample["value"])
            except ValueError:
                continue
            # A counter is finite and never negative; anything else is not llama-server's.
            if math.isfinite(value) and value >= 0:
                values[sample["name"]] = value
        if SERVER_COUNTERS["tokens"] not in values or SERVER_COUNTERS["seconds"] not in values:
            return None
        return cls(**{field: values.get(name, 0.0) for field, name in SERVER_COUNTERS.items()})

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted > 0 else None

    @property
    def decode_tps(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None

    def since(self, earlier: ServerCounters) -> ServerCounters:
        return ServerCounters(
            self.drafted - earlier.drafted,
            self.accepted - earlier.accepted,
            self.tokens - earlier.tokens,
            self.seconds - earlier.seconds,
        )


@dataclass
class BenchResult:
    url: str
    max_tokens: int
    reps: int
    planned: int
    workloads: list[WorkloadResult] = field(default_factory=list)
    error: EndpointError | None = None
    # The server's own /metrics at the start and the end of the run (None where it has none).
    server_before: ServerCounters | None = None
    server_after: ServerCounters | None = None

    @property
    def server_run(self) -> ServerCounters | None:
        """What the server counted during this run (every client's requests, not only ours)."""
        if self.server_before is None or self.server_after is None:
            return None
        return self.server_after.since(self.server_before)

    @property
    def measured(self) -> list[WorkloadResult]:
        return [w for w in self.workloads if w.samples]

    @property
    def completed(self) -> int:
        return sum(len(w.samples) for w in self.workloads)

    @property
    def weighted_tps(self) -> float | None:
        """The headline: every measured token over every second of decoding (as /metrics)."""
        tokens = sum(w.predicted_n for w in self.measured)
        seconds = sum(w.decode_s for w in self.measured)
        return tokens / seconds if seconds > 0 else None

    @property
    def mean_tps(self) -> float | None:
        measured = self.measured
        return statistics.fmean(w.decode_tps for w in measured) if measured else None

    @property
    def minimum(self) -> WorkloadResult | None:
        measured = self.measured
        return min(measured, key=lambda w: w.decode_tps) if measured else None

    @property
    def acceptance(self) -> float | None:
        drafts = [d for w in self.measured if (d := w.drafts) is not None]
        total = sum(d[1] for d in drafts)
        return sum(d[0] for d in drafts) / total if total else None

    @property
    def notes(self) -> list[str]:
        if self.measured and all(w.drafts is None for w in self.measured):
            return [NO_DRAFTS_NOTE]
        return []


def run_bench(
    client: Client,
    workloads: Sequence[Workload],
    *,
    reps: int = DEFAULT_REPS,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    warmup: bool = True,
    on_request: Callable[[str], None] | None = None,
) -> BenchResult:
    """Run the bench; never raises EndpointError (it lands in ``result.error``)."""
    if not 1 <= reps <= MAX_REPS:
        raise ValueError(f"reps must be between 1 and {MAX_REPS} (one distinct prompt per repetition)")
    result = BenchResult(url=client.url, max_tokens=max_tokens, reps=reps, planned=len(workloads) * reps)
    step = on_request or (lambda _label: None)
    try:
        client.check_health()
        result.server_before = _server_counters(client)
        if warmup:
            client.chat(WARMUP_PROMPT, min(max_tokens, WARMUP_MAX_TOKENS))
            step("warm-up")
        for workload in workloads:
            current = WorkloadResult(workload.name)
            result.workloads.append(current)
            for rep in range(reps):
                current.samples.append(client.chat(workload.prompt(rep), max_tokens))
                step(f"{workload.name} {rep + 1}/{reps}")
        result.server_after = _server_counters(client)
    except EndpointError as exc:
        result.error = exc
    return result


def _server_counters(client: Client) -> ServerCounters | None:
    """The server's /metrics counters, or None where it serves none (started without --metrics)."""
    try:
        return ServerCounters.parse(client.metrics())
    except EndpointError:
        return None
