"""The ``bench``, ``load`` and ``tune`` subcommands (registered into ``qwen36``).

Exit status (qwen36/errors.py): 0 when everything was measured; when an error stopped or spoiled
the run, the partial results are printed first, then one ``<command>: error:`` line and the code of
its cause (1 a failed measurement, 6 a refused key, 7 no answer); 2 for unusable arguments, which
include an output path that cannot be written (checked before the run). A report that still cannot
be written at the end is kept under the cache folder, and the error line says where (11).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qwen36.argtypes import (
    bounded_float,
    http_url,
    project_id,
    region_name,
    resource_name,
    stack_name,
    writable_file,
)
from qwen36.errors import (
    ConfigFileError,
    DeniedError,
    Exit,
    LocalIOError,
    QwenError,
    UnreachableError,
    UsageError,
)
from qwen36.measure.defaults import (
    DEFAULT_CLIENTS,
    DEFAULT_CTX_MAX,
    DEFAULT_CTX_MIN,
    DEFAULT_CTX_RESOLUTION,
    DEFAULT_LOAD_MAX_TOKENS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_N_MAX,
    DEFAULT_P_MIN,
    DEFAULT_PARALLEL,
    DEFAULT_REPS,
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_SERVERS_POLL_S,
    DEFAULT_TUNE_REPS,
)
from qwen36.measure.endpoint import API_KEY_ENV, URL_ENV
from qwen36.measure.workloads import MAX_REPS, WORKLOAD_NAMES

if TYPE_CHECKING:
    from rich.console import Console

    from infra.config import StackConfig
    from qwen36.measure.client import EndpointError
    from qwen36.measure.launcher import Launcher
    from qwen36.measure.tune import TuneResult

SWEEPS = ("n-max", "p-min", "parallel", "ctx", "fusion", "calibrate")
# fusion (GGML_CUDA_DISABLE_FUSION) matters on CUDA only: asked for by name, not part of the default.
DEFAULT_SWEEPS = ("n-max", "p-min", "parallel", "ctx")
_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
# One day: any wait or run longer is a typo, and 1e300 s overflows the clock (OverflowError).
MAX_SECONDS = 86400.0


def _stdout() -> Console:
    from rich.console import Console

    return Console(soft_wrap=True)


def _stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


def _endpoint_failure(error: EndpointError, suffix: str = "") -> QwenError:
    """The exit code of a measurement's failure by its kind (qwen36/errors.py's causes)."""
    from qwen36.measure import client

    message = error.message + suffix
    if error.kind == client.UNAUTHORIZED:
        return DeniedError(message)
    if error.kind in (client.UNREACHABLE, client.TIMEOUT):
        return UnreachableError(message)
    return QwenError(message, Exit.FAILED)


def _csv(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        try:
            values = [kind(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list") from None
        if not values:
            raise argparse.ArgumentTypeError(f"{text!r} lists no value")
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise argparse.ArgumentTypeError(f"{text!r} holds a value that is not a finite number")
        return values

    return parse


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
        return value

    return parse


def _key_value(text: str) -> str:
    key, sep, _ = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: give KEY=VALUE, e.g. --set threads=2")
    return text


def _size(text: str) -> int:
    unit = text[-1:].upper() if text[-1:].upper() in _SIZE_UNITS else ""
    number = text[:-1] if unit else text
    try:
        value = float(number) * _SIZE_UNITS[unit]
        if not math.isfinite(value) or value <= 0:
            raise ValueError(text)
        return int(value)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive size such as 512M or 2G") from None


def _add_endpoint(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", help=f"server root or OpenAI base URL (env {URL_ENV}; default: stack output)"
    )
    parser.add_argument("--api-key", help=f"bearer key (env {API_KEY_ENV}; default: stack output apiKey)")
    parser.add_argument(
        "--stack", type=stack_name, help="Pulumi stack to read outputs from (default: the selected one)"
    )
    parser.add_argument(
        "--timeout",
        type=bounded_float(MAX_SECONDS),
        default=DEFAULT_REQUEST_TIMEOUT_S,
        help="seconds per request",
    )


def _add_output(parser: argparse.ArgumentParser, *, markdown: bool = True) -> None:
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        type=writable_file(),
        help="JSON document to stdout or PATH (checked before the run)",
    )
    if markdown:
        parser.add_argument(
            "--markdown",
            nargs="?",
            const="-",
            metavar="PATH",
            type=writable_file(),
            help="Markdown table to stdout or PATH (checked before the run)",
        )


def fallback_dir() -> Path:
    """Where a report that could not be written where asked is kept instead."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "qwen36-mtp-l4" / "reports"


class _Reports:
    """Writes each report where asked; one that cannot be written is kept in ``fallback_dir()`` (or,
    failing that, printed to stdout), so a long run's results are never lost."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.kept: list[str] = []

    def emit(self, target: str | None, text: str, suffix: str) -> None:
        if target is None:
            return
        if target == "-":
            sys.stdout.write(text)
            return
        try:
            Path(target).write_text(text)
        except OSError as exc:
            self.kept.append(f"{target} ({exc.strerror or exc}): kept as {self._keep(text, suffix)}")

    def _keep(self, text: str, suffix: str) -> str:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        try:
            folder = fallback_dir()
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{self.command}-{stamp}-{os.getpid()}{suffix}"
            path.write_text(text)
            return str(path)
        except OSError:
            sys.stdout.write(text)
            return "stdout (above)"

    def check(self) -> None:
        if self.kept:
            raise LocalIOError("could not write " + "; ".join(self.kept))


@contextmanager
def _progress(total: int | None, enabled: bool) -> Iterator[Callable[[str], None]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("{task.description:<24}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=_stderr(), transient=True, disable=not enabled,
    )  # fmt: skip
    with progress:
        task = progress.add_task("starting", total=total)

        def advance(label: str) -> None:
            progress.update(task, advance=1, description=label)

        yield advance


def _check_endpoint(args: argparse.Namespace) -> None:
    """A given --url must be one httpx can send to; URLs from the environment or the stack are
    checked when they are read (``endpoint.resolve``)."""
    from qwen36.measure.endpoint import check_url

    if args.url is not None:
        check_url(args.url, "--url")  # an EndpointConfigError: a usage error (exit 2)


def _check_workloads(args: argparse.Namespace) -> None:
    if args.workloads is not None:
        unknown = sorted(set(args.workloads) - set(WORKLOAD_NAMES))
        if unknown:
            raise UsageError(f"--workloads: unknown {unknown}; choose from {', '.join(WORKLOAD_NAMES)}")


def _check_one_stdout(args: argparse.Namespace) -> None:
    if args.json == "-" and args.markdown == "-":
        raise UsageError("--json and --markdown cannot both go to stdout; give one of them a PATH")


def _check_bench(args: argparse.Namespace) -> None:
    _check_endpoint(args)
    if not 1 <= args.reps <= MAX_REPS:
        raise UsageError(f"--reps must be between 1 and {MAX_REPS} (one distinct prompt per repetition)")
    _check_workloads(args)
    _check_one_stdout(args)


def _check_load(args: argparse.Namespace) -> None:
    _check_endpoint(args)
    if args.requests is None and args.duration is None:
        raise UsageError("bound the run with --requests N, --duration SECONDS, or both")
    if args.group and not (args.region and args.project):
        raise UsageError("--group needs --region and --project (the group is regional)")
    _check_one_stdout(args)


def _check_tune(args: argparse.Namespace) -> None:
    if args.ctx_min > args.ctx_max:
        raise UsageError(f"--ctx-min {args.ctx_min} is above --ctx-max {args.ctx_max}")
    _check_workloads(args)
    if args.launcher == "local":
        if args.model is None:
            raise UsageError("--launcher local needs --model PATH (the GGUF file)")
        if not args.model.is_file():
            what = "a directory" if args.model.is_dir() else "no such file"
            raise UsageError(f"--model {args.model}: {what}; pass the GGUF file")
        if args.server_bin is not None and not (
            args.server_bin.is_file() and os.access(args.server_bin, os.X_OK)
        ):
            if args.server_bin.is_dir():
                what = "a directory; pass the llama-server binary itself"
            elif not args.server_bin.exists():
                what = "no such file"
            else:
                what = "not executable (chmod +x)"
            raise UsageError(f"--server-bin {args.server_bin}: {what}")
    if args.config is not None and not args.config.is_file():
        raise UsageError(f"--config {args.config}: not a file (a Pulumi.<stack>.yaml)")


def register(subparsers: Any) -> None:
    """Add ``bench``, ``load`` and ``tune`` to the project's CLI."""
    bench = subparsers.add_parser("bench", help="decode tok/s per workload, greedy, prompt cache off")
    _add_endpoint(bench)
    bench.add_argument(
        "--reps",
        type=_positive(int),
        default=DEFAULT_REPS,
        help=f"distinct prompts per workload (1-{MAX_REPS})",
    )
    bench.add_argument(
        "--max-tokens", type=_positive(int), default=DEFAULT_MAX_TOKENS, help="new tokens per request"
    )
    bench.add_argument("--workloads", type=_csv(str), help=f"subset of {','.join(WORKLOAD_NAMES)}")
    _add_output(bench)
    bench.add_argument(
        "--png", type=writable_file(".png"), help="also write a bar chart to this .png (needs matplotlib)"
    )
    bench.set_defaults(func=cmd_bench, check=_check_bench)

    load = subparsers.add_parser("load", help="N concurrent clients; aggregate tok/s, latency, errors")
    _add_endpoint(load)
    load.add_argument(
        "--clients",
        type=_positive(int),
        default=DEFAULT_CLIENTS,
        help="concurrent clients (match --parallel)",
    )
    load.add_argument("--requests", type=_positive(int), help="stop after this many requests")
    load.add_argument(
        "--duration",
        type=bounded_float(MAX_SECONDS),
        help="stop sending new requests after this many seconds (the first is always sent)",
    )
    load.add_argument(
        "--max-tokens", type=_positive(int), default=DEFAULT_LOAD_MAX_TOKENS, help="new tokens per request"
    )
    fleet = load.add_argument_group(
        "fleet", "the URL is a fleet's load balancer (fleetApiBaseUrl): a failed member is counted, not fatal"
    )
    fleet.add_argument("--fleet", action="store_true", help="keep sending when one member fails")
    fleet.add_argument(
        "--group",
        type=resource_name,
        help="also record the servers over time: the group's name (implies --fleet; fleetMembers)",
    )
    fleet.add_argument("--region", type=region_name, help="the group's region")
    fleet.add_argument("--project", type=project_id, help="the group's Google Cloud project")
    fleet.add_argument(
        "--servers-poll",
        type=bounded_float(MAX_SECONDS),
        default=DEFAULT_SERVERS_POLL_S,
        help="seconds between counts",
    )
    # A local Compute API stand-in.
    fleet.add_argument("--compute-endpoint", type=http_url, help=argparse.SUPPRESS)
    fleet.add_argument("--anonymous", action="store_true", help=argparse.SUPPRESS)
    _add_output(load)
    load.set_defaults(func=cmd_load, check=_check_load)

    tune = subparsers.add_parser(
        "tune",
        help="start the server with varied flags and find the best",
        description="On the VM (sudo, docker launcher) stop the production container first: "
        "sudo docker stop llama-server; start it again afterwards.",
    )
    tune.add_argument("--launcher", choices=("docker", "local"), default="docker")
    tune.add_argument("--server-bin", type=Path, help="local: llama-server binary (default: from PATH)")
    tune.add_argument("--model", type=Path, help="local: the GGUF file")
    tune.add_argument("--memory-limit", type=_size, help="local: cap the server's address space (e.g. 6G)")
    tune.add_argument(
        "--model-dir", type=Path, help="docker: host folder holding the GGUF (default: the VM's)"
    )
    tune.add_argument("--api-key-file", type=Path, help="docker: file with the API key (default: the VM's)")
    tune.add_argument("--api-key", help="local: start the server with this API key")
    tune.add_argument("--config", type=Path, help="a Pulumi.<stack>.yaml to start from")
    tune.add_argument(
        "--set",
        action="append",
        default=[],
        type=_key_value,
        metavar="KEY=VALUE",
        help="config override (camelCase)",
    )
    tune.add_argument(
        "--sweep",
        action="append",
        choices=SWEEPS,
        help="what to tune (repeatable; default all but fusion, which is CUDA's)",
    )
    tune.add_argument("--n-max", type=_csv(int), default=list(DEFAULT_N_MAX))
    tune.add_argument("--p-min", type=_csv(float), default=list(DEFAULT_P_MIN))
    tune.add_argument("--parallel", type=_csv(int), default=list(DEFAULT_PARALLEL))
    tune.add_argument("--ctx-min", type=_positive(int), default=DEFAULT_CTX_MIN)
    tune.add_argument("--ctx-max", type=_positive(int), default=DEFAULT_CTX_MAX)
    tune.add_argument("--ctx-resolution", type=_positive(int), default=DEFAULT_CTX_RESOLUTION)
    tune.add_argument("--reps", type=_positive(int), default=DEFAULT_TUNE_REPS)
    tune.add_argument("--max-tokens", type=_positive(int), default=DEFAULT_MAX_TOKENS)
    tune.add_argument("--workloads", type=_csv(str))
    tune.add_argument("--timeout", type=bounded_float(MAX_SECONDS), default=DEFAULT_REQUEST_TIMEOUT_S)
    _add_output(tune, markdown=False)
    cal = tune.add_argument_group(
        "calibrate", "--sweep calibrate: the boot's own calibration (startup/calibrate.py), run here"
    )
    cal.add_argument(
        "--budget", type=bounded_float(MAX_SECONDS), help="seconds (default: the boot's bound, 120)"
    )
    cal.add_argument(
        "--write-verdict", action="store_true", help="store the result as the bucket's verdict for every boot"
    )
    cal.add_argument("--bucket", help="the model bucket (stack output modelBucket)")
    cal.add_argument("--model-sha256", help="the model file's sha256 (default: the config's, else hashed)")
    cal.add_argument("--gpu", nargs=3, metavar=("NAME", "DRIVER", "ECC"), help="default: from nvidia-smi")
    tune.set_defaults(func=cmd_tune, check=_check_tune)


def cmd_bench(args: argparse.Namespace) -> int:
    from qwen36.measure import report
    from qwen36.measure.bench import run_bench
    from qwen36.measure.client import Client
    from qwen36.measure.endpoint import resolve
    from qwen36.measure.workloads import select

    workloads = select(args.workloads)
    endpoint = resolve(args.url, args.api_key, stack=args.stack)
    machine_output = "-" in (args.json, args.markdown)
    with (
        Client(endpoint.url, endpoint.api_key, args.timeout) as client,
        _progress(1 + len(workloads) * args.reps, enabled=True) as advance,
    ):
        result = run_bench(client, workloads, reps=args.reps, max_tokens=args.max_tokens, on_request=advance)
    if not machine_output and result.measured:
        _stdout().print(report.bench_table(result))
    reports = _Reports("bench")
    reports.emit(args.json, json.dumps(report.bench_json(result), indent=2) + "\n", ".json")
    reports.emit(args.markdown, report.bench_markdown(result), ".md")
    warn = _stderr()
    if not machine_output and (line := report.server_line(result)) is not None:
        _stdout().print(line, markup=False, highlight=False)
    for note in result.notes:
        warn.print(f"note: {note}", markup=False, highlight=False)
    if args.png is not None and (problem := report.bench_png(result, Path(args.png))):
        warn.print(f"note: {problem}", markup=False, highlight=False)
    if result.error is not None:
        done = f" (partial results: {result.completed} of {result.planned} requests measured)"
        raise _endpoint_failure(result.error, done if result.completed else "")
    reports.check()
    return 0


def cmd_load(args: argparse.Namespace) -> int:
    from qwen36.measure import report
    from qwen36.measure.client import EndpointError
    from qwen36.measure.endpoint import resolve
    from qwen36.measure.load import run_load

    endpoint = resolve(args.url, args.api_key, stack=args.stack)
    servers = None
    if args.group:
        from qwen36.measure.fleet_size import GroupSize

        credentials = None
        if args.anonymous:
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
        try:
            servers = GroupSize(
                args.project,
                args.region,
                args.group,
                api_endpoint=args.compute_endpoint,
                credentials=credentials,
            )
        except Exception as exc:  # e.g. no application-default credentials on this machine
            from qwen36.errors import as_error

            known = as_error(exc)
            if known is None:
                raise
            raise QwenError(
                f"cannot read the group through the Compute API ({known.message}); run without --group",
                known.exit_code,
            ) from exc
    # A duration-bound run has no known total: the bar then just pulses. The first request is sent
    # whatever the duration (qwen36/measure/load.py), so a tiny --duration still measures something.
    with _progress(args.requests, enabled=True) as advance:
        result = run_load(
            endpoint.url, endpoint.api_key, clients=args.clients, requests=args.requests,
            duration_s=args.duration, max_tokens=args.max_tokens, timeout_s=args.timeout,
            on_done=lambda o: advance("ok" if o.ok else o.error.kind if o.error else "?"),
            fleet=args.fleet, servers=servers, servers_poll_s=args.servers_poll,
        )  # fmt: skip
    if "-" not in (args.json, args.markdown) and result.startup_error is None:
        _stdout().print(report.load_table(result))
    reports = _Reports("load")
    reports.emit(args.json, json.dumps(report.load_json(result), indent=2) + "\n", ".json")
    reports.emit(args.markdown, report.load_markdown(result), ".md")
    if result.startup_error is not None:
        raise _endpoint_failure(result.startup_error)
    if result.errors_by_kind:
        first = next(iter(result.error_messages.values()))
        counts = ", ".join(f"{k} {n}" for k, n in result.errors_by_kind.items())
        stopped = ", stopped sending early" if result.stopped_early else ""
        failed = sum(result.errors_by_kind.values())
        message = f"{failed} of {result.sent} requests failed ({counts}{stopped}): {first}"
        # A run stopped by a refused key or an unreachable server ends with that cause's code.
        kind = result.stopped_early or ""
        raise _endpoint_failure(EndpointError(kind, message)) if kind else QwenError(message)
    reports.check()
    return 0


def _read_stack_file(path: Path) -> dict[str, Any]:
    from qwen36.stack_file import read_config

    try:
        raw = read_config(path)
    except OSError as exc:
        raise ConfigFileError(f"cannot read {path} ({exc})") from None
    # Secrets ({"secure": ...}) are ciphertext here and none of them sets a server flag.
    return {k: v for k, v in raw.items() if not isinstance(v, dict)}


def base_config(config_file: Path | None, overrides: list[str]) -> StackConfig:
    from infra.config import parse_config

    raw: dict[str, Any] = _read_stack_file(config_file) if config_file else {}
    for item in overrides:
        key, _, value = item.partition("=")
        raw[key if ":" in key else f"qwen36-mtp-l4:{key}"] = value
    return parse_config(raw)


def make_launcher(args: argparse.Namespace) -> Launcher:
    """The tune sweep's launcher (``_check_tune`` has checked --model for the local one)."""
    from qwen36.measure.launcher import DockerLauncher, LocalLauncher, local_server_binary, vm_model_and_key

    if args.launcher == "local":
        binary = local_server_binary(args.server_bin)
        return LocalLauncher(binary, args.model, api_key=args.api_key, memory_limit_bytes=args.memory_limit)
    model_dir, key_file = vm_model_and_key(args.model_dir, args.api_key_file)
    return DockerLauncher(model_dir, api_key_file=key_file)


def run_tune(
    args: argparse.Namespace, launcher: Launcher, base: StackConfig, say: Callable[[str], None]
) -> TuneResult:
    from qwen36.measure.tune import TuneResult, search_ctx, sweep_draft, sweep_fusion, sweep_parallel
    from qwen36.measure.workloads import select

    sweeps = args.sweep or list(DEFAULT_SWEEPS)
    workloads = select(args.workloads)
    bench_opts = {
        "reps": args.reps,
        "max_tokens": args.max_tokens,
        "timeout_s": args.timeout,
        "progress": say,
    }
    result = TuneResult(base)
    current = base
    if "n-max" in sweeps:
        result.n_max, best = sweep_draft(
            launcher, current, "spec_draft_n_max", args.n_max, workloads, **bench_opts
        )
        if best is not None:
            result.winners["spec_draft_n_max"] = best.setting["spec_draft_n_max"]
    current = current.model_copy(update=result.winners)
    if "p-min" in sweeps and current.spec_draft_n_max == 0:
        result.notes.append("p-min sweep skipped: without drafts (n-max 0) --spec-draft-p-min has no effect")
    elif "p-min" in sweeps:
        result.p_min, best = sweep_draft(
            launcher, current, "spec_draft_p_min", args.p_min, workloads, **bench_opts
        )
        if best is not None:
            result.winners["spec_draft_p_min"] = best.setting["spec_draft_p_min"]
    current = current.model_copy(update=result.winners)
    if "fusion" in sweeps:
        result.fusion, note = sweep_fusion(launcher, current, workloads, **bench_opts)
        result.notes.append(note)
    if "parallel" in sweeps:
        result.parallel, best = sweep_parallel(
            launcher, current, args.parallel, max_tokens=args.max_tokens, timeout_s=args.timeout, progress=say
        )
        if best is not None:
            result.winners["parallel"] = best.setting["parallel"]
    current = current.model_copy(update=result.winners)
    if "ctx" in sweeps:
        result.ctx_resolution = args.ctx_resolution
        result.ctx, best_ctx, at_bound = search_ctx(
            launcher,
            current,
            args.ctx_min,
            args.ctx_max,
            args.ctx_resolution,
            timeout_s=args.timeout,
            progress=say,
        )
        result.ctx_at_upper_bound = at_bound
        if best_ctx is not None:
            result.winners["ctx_size"] = best_ctx
    return result


def _check_sweeps(args: argparse.Namespace) -> None:
    """Each swept value must be within its config key's own range before any server starts. Only
    the key's range: whether a value fits beside the others is what the sweep measures."""
    from typing import Annotated

    from pydantic import TypeAdapter, ValidationError

    from infra.config import StackConfig, config_key

    sweeps = args.sweep or list(DEFAULT_SWEEPS)
    swept = {
        "n-max": ("spec_draft_n_max", args.n_max),
        "p-min": ("spec_draft_p_min", args.p_min),
        "parallel": ("parallel", args.parallel),
        "ctx": ("ctx_size", [args.ctx_min, args.ctx_max]),
    }
    for sweep, (field, values) in swept.items():
        if sweep not in sweeps:
            continue
        info = StackConfig.model_fields[field]
        adapter: TypeAdapter[Any] = TypeAdapter(Annotated[info.annotation, *info.metadata])  # type: ignore[arg-type]
        for value in values:
            try:
                adapter.validate_python(value, strict=True)
            except ValidationError as exc:
                reason = exc.errors()[0]["msg"]
                flag = "--ctx-min/--ctx-max" if sweep == "ctx" else f"--{sweep}"
                raise UsageError(f"{flag} {value!r}: {reason} ({config_key(field)})") from None


def cmd_tune(args: argparse.Namespace) -> int:
    from qwen36.measure import report

    if args.sweep and "calibrate" in args.sweep:
        return cmd_calibrate(args)
    _check_sweeps(args)
    base = base_config(args.config, args.set)
    launcher = make_launcher(args)
    err = _stderr()
    result = run_tune(
        args, launcher, base, lambda label: err.print(f"tune: {label}", markup=False, highlight=False)
    )
    reports = _Reports("tune")
    if args.json == "-":
        sys.stdout.write(json.dumps(report.tune_json(result), indent=2) + "\n")
    else:
        reports.emit(args.json, json.dumps(report.tune_json(result), indent=2) + "\n", ".json")
        out = _stdout()
        report.print_tables(out, report.tune_tables(result))
        for note in result.notes:
            out.print(f"note: {note}", markup=False, highlight=False)
        if result.ctx_at_upper_bound:
            out.print(
                f"note: ctx-size {args.ctx_max} (the top of the range) loaded; "
                "raise --ctx-max to look further"
            )
        if result.winners:
            out.print("Winners; put them into the stack config with:", markup=False)
            for line in result.config_lines():
                out.print(f"  {line}", markup=False, highlight=False)
        if (problem := result.config_problem()) is not None:
            out.print(f"note: with these values `pulumi up` would refuse the config: {problem}", markup=False)
    if not result.winners and not any(t.ok for t in result.fusion):
        raise QwenError("no setting could be measured: see the FAILED rows above")
    reports.check()
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """The calibration the first boot of a key runs, here; with --write-verdict its verdict is the
    one every later boot and fleet member reads (written the boot's way: temporary object, check,
    promotion over the generation read)."""
    from qwen36.measure import tune

    if len(args.sweep) > 1:
        raise UsageError("--sweep calibrate runs alone (it measures n-max, fusion and GPU sampling itself)")
    if args.write_verdict and not args.bucket:
        raise UsageError("--write-verdict needs --bucket (the stack output modelBucket)")
    base = base_config(args.config, args.set)
    runner = tune.calibration_runner(args, base)
    key = tune.calibration_key(args, base)
    err = _stderr()
    doc = tune.run_calibration(
        base, runner, key, budget_s=args.budget, max_tokens=args.max_tokens,
        say=lambda line: err.print(f"tune: {line}", markup=False, highlight=False),
    )  # fmt: skip
    calibrate = tune.startup_calibrate()
    reports = _Reports("tune")
    reports.emit(args.json, json.dumps(doc, indent=1) + "\n", ".json")
    if args.json != "-":
        print(calibrate.table(doc))
    if doc["winner"] is None:
        raise QwenError("no candidate was measured to the end: see the table")
    if args.write_verdict:
        try:
            uri = tune.write_verdict(doc, base, args.bucket)
        except (calibrate.GcsError, calibrate.ConflictError) as exc:
            raise QwenError(f"the verdict was not written: {exc}") from None
        print(f"verdict written to {uri}: every boot of this key uses it from now on")
    reports.check()
    return 0
