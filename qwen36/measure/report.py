"""Rendering of bench, load and tune results: rich tables, JSON documents, Markdown, a PNG chart.

The JSON documents are described by the JSON Schema files next to this module
(``bench.schema.json``, ``load.schema.json``, ``tune.schema.json``); ``tests/measure`` validates
real output against them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from infra.config import config_key
from qwen36.measure.bench import BenchResult
from qwen36.measure.client import EndpointError
from qwen36.measure.load import LoadResult, fleet_json, percentile, summary
from qwen36.measure.tune import TuneResult

SCHEMA_DIR = Path(__file__).parent
BENCH_SCHEMA_ID = "qwen36-bench/1"
LOAD_SCHEMA_ID = "qwen36-load/1"
TUNE_SCHEMA_ID = "qwen36-tune/1"
NA = "n/a"


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _fmt(value: float | None, digits: int = 1) -> str:
    return NA if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return NA if value is None else f"{value * 100:.1f} %"


def _error(error: EndpointError | None) -> dict[str, str] | None:
    return None if error is None else {"kind": error.kind, "message": error.message}


# --- bench ---------------------------------------------------------------------------------


def bench_json(result: BenchResult) -> dict[str, Any]:
    minimum = result.minimum
    workloads = []
    for w in result.workloads:
        drafts = w.drafts
        workloads.append(
            {
                "name": w.name,
                "reps": len(w.samples),
                "decode_tps": _r(w.decode_tps) if w.samples else None,
                "prompt_tps": _r(w.prompt_tps) if w.samples else None,
                "wall_s": _r(w.wall_s, 3) if w.samples else None,
                "predicted_n": w.predicted_n,
                "decode_s": _r(w.decode_s, 4),
                "weighted_decode_tps": _r(w.weighted_tps),
                "acceptance": _r(w.acceptance, 4),
                "draft_n": drafts[1] if drafts else None,
                "draft_n_accepted": drafts[0] if drafts else None,
                "samples": [
                    {
                        "prompt_n": s.prompt_n,
                        "prompt_tps": _r(s.prompt_per_second),
                        "predicted_n": s.predicted_n,
                        "decode_tps": _r(s.predicted_per_second),
                        "decode_ms": _r(s.predicted_ms, 3),
                        "draft_n": s.draft_n,
                        "draft_n_accepted": s.draft_n_accepted,
                        "wall_s": _r(s.wall_s, 3),
                    }
                    for s in w.samples
                ],
            }
        )
    return {
        "schema": BENCH_SCHEMA_ID,
        "url": result.url,
        "settings": {
            "max_tokens": result.max_tokens,
            "reps": result.reps,
            "temperature": 0,
            "cache_prompt": False,
        },
        "workloads": workloads,
        "summary": {
            "weighted_decode_tps": _r(result.weighted_tps),
            "mean_decode_tps": _r(result.mean_tps),
            "min_decode_tps": _r(minimum.decode_tps) if minimum else None,
            "min_workload": minimum.name if minimum else None,
            "acceptance": _r(result.acceptance, 4),
        },
        "planned": result.planned,
        "completed": result.completed,
        "complete": result.error is None and result.completed == result.planned,
        "error": _error(result.error),
        "notes": result.notes,
        "server": _server(result),
    }


def _server(result: BenchResult) -> dict[str, Any] | None:
    """The server's own /metrics: over this run and since it started."""
    run, total = result.server_run, result.server_after
    if run is None or total is None:
        return None
    return {
        "run_acceptance": _r(run.acceptance, 4),
        "run_decode_tps": _r(run.decode_tps),
        "run_drafted": int(run.drafted),
        "lifetime_acceptance": _r(total.acceptance, 4),
        "lifetime_decode_tps": _r(total.decode_tps),
    }


def server_line(result: BenchResult) -> str | None:
    """One line of the server's own acceptance and decode rate (its /metrics), or None."""
    doc = _server(result)
    if doc is None:
        return None
    return (
        f"server /metrics over this run: acceptance {_pct(doc['run_acceptance'])}, decode "
        f"{_fmt(doc['run_decode_tps'])} tok/s; since it started: acceptance "
        f"{_pct(doc['lifetime_acceptance'])}, decode {_fmt(doc['lifetime_decode_tps'])} tok/s"
    )


def bench_table(result: BenchResult) -> Table:
    table = Table(
        title=f"Decode speed at {result.url} ({result.max_tokens} tokens, "
        f"{result.reps} rep{'s' if result.reps != 1 else ''}, greedy)"
    )
    for column in ("Workload", "Decode tok/s", "MTP acceptance", "Prompt tok/s", "Wall s", "Reps"):
        table.add_column(column, justify="left" if column == "Workload" else "right")
    for w in result.measured:
        table.add_row(
            w.name, _fmt(w.decode_tps), _pct(w.acceptance), _fmt(w.prompt_tps), _fmt(w.wall_s, 2),
            str(len(w.samples)),
        )  # fmt: skip
    minimum = result.minimum
    if minimum is not None:
        table.add_section()
        table.add_row(
            "token-weighted (headline)", _fmt(result.weighted_tps), _pct(result.acceptance), "", "", ""
        )
        table.add_row("mean of requests", _fmt(result.mean_tps), "", "", "", "")
        table.add_row(f"minimum ({minimum.name})", _fmt(minimum.decode_tps), "", "", "", "")
    return table


def bench_markdown(result: BenchResult) -> str:
    lines = [
        "| Workload | Decode tok/s | MTP acceptance | Prompt tok/s | Wall s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {w.name} | {_fmt(w.decode_tps)} | {_pct(w.acceptance)} | {_fmt(w.prompt_tps)} "
        f"| {_fmt(w.wall_s, 2)} |"
        for w in result.measured
    ]
    minimum = result.minimum
    if minimum is not None:
        headline = _fmt(result.weighted_tps)
        lines.append(f"| **token-weighted (headline)** | **{headline}** | {_pct(result.acceptance)} | | |")
        lines.append(f"| mean of requests | {_fmt(result.mean_tps)} | | | |")
        lines.append(f"| **minimum ({minimum.name})** | **{_fmt(minimum.decode_tps)}** | | | |")
    lines.append("")
    lines.append(
        f"Greedy, prompt cache off, {result.max_tokens} new tokens, {result.reps} distinct prompt"
        f"{'s' if result.reps != 1 else ''} per "
        "workload after one uncounted warm-up; decode tok/s is the server's `timings.predicted_per_second`. "
        "The headline is token-weighted (all tokens over all decode time, as the server's `/metrics`); "
        "per-request `timings` may count one token fewer than `/metrics`."
    )
    return "\n".join(lines) + "\n"


def bench_png(result: BenchResult, path: Path) -> str | None:
    """Write a bar chart; returns a one-line reason when it cannot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (
            "--png needs matplotlib, which is not installed: pip install matplotlib (the table is unaffected)"
        )
    measured = result.measured
    if not measured:
        return "--png: nothing was measured, so no chart was written"
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar([w.name for w in measured], [w.decode_tps for w in measured], color="#4c72b0")
    if result.mean_tps is not None:
        ax.axhline(result.mean_tps, color="#dd8452", linestyle="--", label=f"mean {result.mean_tps:.1f}")
        ax.legend()
    ax.set_ylabel("decode tok/s")
    ax.set_title(f"Decode speed per workload ({result.max_tokens} tokens, greedy)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


# --- load ----------------------------------------------------------------------------------


def load_json(result: LoadResult) -> dict[str, Any]:
    latencies = result.latencies()
    per_request = summary(result.per_request_tps())
    return {
        "schema": LOAD_SCHEMA_ID,
        "url": result.url,
        "clients": result.clients,
        "max_tokens": result.max_tokens,
        "limits": {"requests": result.request_limit, "duration_s": result.duration_limit_s},
        "sent": result.sent,
        "succeeded": len(result.successes),
        "errors": result.errors_by_kind,
        "error_messages": result.error_messages,
        "accounted": result.accounted,
        "wall_s": _r(result.wall_s, 3),
        "aggregate_decode_tps": _r(result.aggregate_tps),
        "per_request_decode_tps": {k: _r(v) for k, v in per_request.items()},
        "latency_s": {
            "p50": _r(percentile(latencies, 50), 3),
            "p90": _r(percentile(latencies, 90), 3),
            "p95": _r(percentile(latencies, 95), 3),
            "p99": _r(percentile(latencies, 99), 3),
            "max": _r(max(latencies), 3) if latencies else None,
        },
        "startup_error": _error(result.startup_error),
        "stopped_early": result.stopped_early,
        "fleet": fleet_json(result),
    }


def load_table(result: LoadResult) -> Table:
    data = load_json(result)
    table = Table(title=f"Load: {result.clients} clients at {result.url}")
    table.add_column("Measure")
    table.add_column("Value", justify="right")
    per_request = data["per_request_decode_tps"]
    latency = data["latency_s"]
    errors = ", ".join(f"{kind} {count}" for kind, count in sorted(data["errors"].items())) or "none"
    rows = [
        ("requests sent", str(data["sent"])),
        ("succeeded", str(data["succeeded"])),
        ("errors", errors),
        ("aggregate decode tok/s", _fmt(data["aggregate_decode_tps"])),
        ("per-request decode tok/s (mean / min / max)",
         " / ".join(_fmt(per_request[k]) for k in ("mean", "min", "max"))),
        ("latency s (p50 / p95 / max)", " / ".join(_fmt(latency[k], 2) for k in ("p50", "p95", "max"))),
        ("run wall time s", _fmt(data["wall_s"], 2)),
        ("stopped early", data["stopped_early"] or "no"),
    ]  # fmt: skip
    if (fleet := data["fleet"]) is not None:
        low, high = _fmt(fleet["running_min"], 0), _fmt(fleet["running_max"], 0)
        rows.append(("servers running (min / max)", f"{low} / {high}"))
    for name, value in rows:
        table.add_row(name, value)
    return table


def load_markdown(result: LoadResult) -> str:
    table = load_table(result)
    names = list(table.columns[0].cells)
    values = list(table.columns[1].cells)
    lines = ["| Measure | Value |", "| --- | ---: |"]
    lines += [f"| {n} | {v} |" for n, v in zip(names, values, strict=True)]
    return "\n".join(lines) + "\n"


# --- tune ----------------------------------------------------------------------------------


def _trial_json(trial: Any) -> dict[str, Any]:
    return {
        "setting": trial.setting,
        "ok": trial.ok,
        "error": trial.error,
        "mean_decode_tps": _r(trial.mean_tps),
        "min_decode_tps": _r(trial.min_tps),
        "min_workload": trial.min_workload,
        "acceptance": _r(trial.acceptance, 4),
        "aggregate_decode_tps": _r(trial.aggregate_tps),
        "per_request_decode_tps": _r(trial.per_request_tps),
        "requests": trial.requests,
        "failed_requests": trial.failed_requests,
    }


def tune_json(result: TuneResult) -> dict[str, Any]:
    return {
        "schema": TUNE_SCHEMA_ID,
        "spec_draft_n_max": [_trial_json(t) for t in result.n_max],
        "spec_draft_p_min": [_trial_json(t) for t in result.p_min],
        "parallel": [_trial_json(t) for t in result.parallel],
        "fusion": [_trial_json(t) for t in result.fusion],
        "ctx_size": {
            "resolution": result.ctx_resolution,
            "at_upper_bound": result.ctx_at_upper_bound,
            "probes": [{"ctx_size": p.ctx_size, "ok": p.ok, "detail": p.detail} for p in result.ctx],
        },
        "winners": result.winners,
        "pulumi_config": result.config_lines(),
        "config_problem": result.config_problem(),
        "notes": result.notes,
    }


def _setting_name(key: str) -> str:
    """A config field's Pulumi key, or an environment variable's own name (upper case)."""
    return key if key.isupper() else config_key(key).partition(":")[2]


def tune_tables(result: TuneResult) -> list[Table]:
    tables = []
    for title, trials in (
        ("--spec-draft-n-max", result.n_max),
        ("--spec-draft-p-min", result.p_min),
        ("GGML_CUDA_DISABLE_FUSION", result.fusion),
    ):
        if not trials:
            continue
        table = Table(title=f"{title} sweep (ranked by the slowest workload)")
        for column in ("Setting", "Min tok/s", "Mean tok/s", "Acceptance", "Result"):
            table.add_column(column, justify="left" if column in ("Setting", "Result") else "right")
        for t in trials:
            setting = ", ".join(f"{_setting_name(k)}={v}" for k, v in t.setting.items())
            slowest = f"{_fmt(t.min_tps)} ({t.min_workload})" if t.min_workload else NA
            table.add_row(setting, slowest, _fmt(t.mean_tps), _pct(t.acceptance), t.error or "ok")
        tables.append(table)
    if result.parallel:
        table = Table(title="--parallel sweep (ranked by aggregate decode speed)")
        for column in ("Slots", "Aggregate tok/s", "Per-request tok/s", "Requests", "Result"):
            table.add_column(column, justify="right" if column != "Result" else "left")
        for t in result.parallel:
            table.add_row(
                str(t.setting["parallel"]), _fmt(t.aggregate_tps), _fmt(t.per_request_tps),
                f"{t.requests - t.failed_requests}/{t.requests}", t.error or "ok",
            )  # fmt: skip
        tables.append(table)
    if result.ctx:
        table = Table(title=f"--ctx-size search (resolution {result.ctx_resolution})")
        table.add_column("ctx-size", justify="right")
        table.add_column("Result")
        for p in result.ctx:
            table.add_row(str(p.ctx_size), ("ok: " if p.ok else "FAILED: ") + p.detail)
        tables.append(table)
    return tables


def print_tables(console: Console, tables: list[Table]) -> None:
    for table in tables:
        console.print(table)
