"""The docs' generated parts, each from its source: ``--write`` rewrites them in place, ``--check``
exits 1 naming every part whose text and source disagree (tests/test_docs.py runs the check).

Usage: python scripts/gen_docs.py [--write | --check]   (no flag: list the parts and their sources)

A generated part sits between ``<!-- gen:NAME -->`` and ``<!-- /gen:NAME -->`` in README.md or a page
of docs/: on lines of their own for a table, inline for a figure inside a sentence. The comments
do not render, so a reader sees only the figure; whoever edits the source runs ``--write``.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from infra import cold_start, fleet_bounds, pricing  # noqa: E402
from infra.config import DEFAULT_IDLE_STOP_MINUTES, NOMINAL_MODEL_BYTES, StackConfig  # noqa: E402
from infra.output_reference import OUTPUTS, WHEN_TEXT  # noqa: E402
from qwen36.check import gcp as check_gcp  # noqa: E402
from qwen36.check import pulumi_version  # noqa: E402
from qwen36.errors import exit_code_table  # noqa: E402

README = ROOT / "README.md"
DOCS = ROOT / "docs"
BOOT_BENCH_RESULTS = ROOT / "bench" / "results" / "boot_bench.json"
GPU_RESULTS = ROOT / "bench" / "gpu" / "RESULTS.md"
CALIBRATION_RUN = ROOT / "bench" / "gpu" / "results" / "calibrate-h200-run1.table"
CALIBRATION_GPU = ROOT / "bench" / "gpu" / "results" / "calibrate-h200-gpu.txt"
MARK = re.compile(r"<!-- gen:(?P<name>[a-z0-9.-]+) -->(?P<body>.*?)<!-- /gen:(?P=name) -->", re.S)


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


# --- tables ----------------------------------------------------------------------------------


def config_table() -> str:
    """Every key of Pulumi.yaml, its type, default and description."""
    declared = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for key, spec in declared.items():
        default = spec.get("default")
        shown = json.dumps(default) if not isinstance(default, str) else default or '""'
        rows.append(f"| `{key}` | {spec['type']} | `{shown}` | {_cell(spec['description'])} |")
    return "\n".join(rows)


def outputs_table() -> str:
    """infra/output_reference.py: what each stack output is and when it is exported."""
    rows = ["| output | exported for | what |", "| --- | --- | --- |"]
    for group in OUTPUTS:
        keys = ", ".join(f"`{key}`" for key in group.keys)
        rows.append(f"| {keys} | {WHEN_TEXT[group.when]} | {_cell(group.what)} |")
    return "\n".join(rows)


def secure_boot_reasons_table() -> str:
    """infra/shielded.py: each reason the bake records for Secure Boot off, by its label code."""
    from infra import shielded

    rows = ["| `secure-boot-off` | why |", "| --- | --- |"]
    rows += [f"| `{code}` | {_cell(reason)} |" for code, reason in shielded.OFF_REASONS.items()]
    return "\n".join(rows)


def _phase_sum(phases: list[tuple[str, float]]) -> str:
    return " + ".join(f"{name} {seconds:g}" for name, seconds in phases if seconds)


def cold_start_table() -> str:
    """infra/cold_start.py: a new member's critical path, phase by phase, per image and model source."""
    c = cold_start
    cases = [
        (
            "the tooling image, the model from the bucket (every member once a build is baked)",
            "tooling",
            "gcs",
        ),
        ("the stock image, the model from the bucket (`useToolingImage: false`)", "stock", "gcs"),
        ("the model from Hugging Face (nothing staged yet)", "stock", "hub"),
    ]
    rows = ["| a new member boots | critical path (s) | serves after |", "| --- | --- | --- |"]
    for label, image, source in cases:
        docker = 0.0 if image == "tooling" else c.DOCKER_AND_PULL_S
        model = c.GCS_TO_RAM_S if source == "gcs" else c.HUB_DOWNLOAD_S
        fetch = ("GCS -> RAM", model) if source == "gcs" else ("hub -> RAM", model)
        longest = max([("docker install + pull", docker), fetch], key=lambda p: p[1])
        phases = [
            ("VM creation", c.VM_CREATE_S),
            ("ECC reboot", c.ECC_REBOOT_S),
            longest,
            ("load", c.LOAD_RAM_S),
        ]
        total = c.cold_start_s(image, source)  # type: ignore[arg-type]
        assert abs(sum(s for _, s in phases) - total) < 1e-9, label
        rows.append(f"| {label} | {_phase_sum(phases)} | {c.minutes(total)} ({total:g} s) |")
    return "\n".join(rows)


@cache
def _boot_bench() -> dict[str, object]:
    return dict(json.loads(BOOT_BENCH_RESULTS.read_text()))


BOOT_PATH_NOTES = {
    "new VM, GCS cache, baked image": "every member the group creates once the build is baked",
    "new VM, GCS cache, stock image": "`useToolingImage: false`",
    "new VM, first boot of a key (calibrates), baked image": "a build's first deployment",
}


def boot_bench_table() -> str:
    """bench/results/boot_bench.json: ours and the original's boot script in the boot sandbox."""
    rows = [
        "| path | critical path, ours (s) | ours | critical path, original (s) | original "
        "| ours ÷ original | sandbox overhead, ours / original | ÷ net of it |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in _boot_bench()["paths"]:  # type: ignore[attr-defined]
        note = BOOT_PATH_NOTES.get(p["name"])
        name = f"{p['name']} ({note})" if note else p["name"]
        ours, original = p["ours_s"], p["original_s"]
        net = (ours - p["ours_overhead_s"]) / max(original - p["original_overhead_s"], 1e-9)
        ours_path, original_path = _phase_sum(p["critical_ours"]), _phase_sum(p["critical_original"])
        rows.append(
            f"| {name} | {ours_path} | {ours:.0f} s | {original_path} | {original:.0f} s "
            f"| {ours / original:.2f} "
            f"| {p['ours_overhead_s']:.0f} s / {p['original_overhead_s']:.0f} s | {net:.2f} |"
        )
    return "\n".join(rows)


def _timelines() -> list:  # type: ignore[type-arg]
    from bench.first_deploy import timelines
    from tests.boot.durations import Durations

    return timelines(Durations(), cold_start.VM_CREATE_S, cold_start.IMAGE_CREATE_S)


def first_deploy_table() -> str:
    """bench/first_deploy.py: the first deployment of a build, with and without the bake."""
    rows = [
        "| way | endpoint first serves | `pulumi up` returns | outage of the move | each later repair |",
        "|---|---|---|---|---|",
    ]
    for t in _timelines():
        seconds = (t.serving_s, t.up_returns_s, t.outage_s, t.repair_s)
        rows.append(f"| {t.name} | " + " | ".join(f"{s:.0f} s" for s in seconds) + " |")
    return "\n".join(rows)


GPU_VARIANTS = {
    "plain": "plain",
    "gpu-sampling": "GPU sampling (`--backend-sampling`)",
    "mtp": "MTP",
    "mtp+gpu-sampling": "MTP + GPU sampling (the default)",
}


def gpu_decode_table() -> str:
    """bench/gpu/RESULTS.md's run for the docs: decode tok/s per variant on one H200."""
    text = GPU_RESULTS.read_text()
    section = text.split("## Run 2", 1)[1].split("\n## ", 1)[0]
    rows = ["| variant | decode tok/s, median (min-max) |", "|---|---|"]
    for variant, label in GPU_VARIANTS.items():
        match = re.search(rf"^{re.escape(variant)}\s+([\d.]+)\s+([\d.]+)-([\d.]+)", section, re.M)
        assert match, f"{GPU_RESULTS}: no {variant} row in Run 2"
        rows.append(f"| {label} | {match[1]} ({match[2]}-{match[3]}) |")
    return "\n".join(rows)


@cache
def _calibration_run() -> tuple[list[list[str]], dict[str, str]]:
    """bench/gpu/results/calibrate-h200-run1.table: startup/calibrate.py's table (columns two or more
    spaces apart) and its closing line."""
    rows, summary = [], {}
    for line in CALIBRATION_RUN.read_text().splitlines()[1:]:
        if line.startswith("winner: "):
            match = re.fullmatch(
                r"winner: (?P<winner>\S+) \((?P<tok_s>[\d.]+) tok/s\); took (?P<took>[\d.]+) s of a "
                r"(?P<bound>[\d.]+) s bound; repeat noise (?P<noise>[\d.]+%); complete: (?P<complete>\w+)",
                line,
            )
            assert match, f"{CALIBRATION_RUN}: an unexpected closing line {line!r}"
            summary = match.groupdict()
        elif line.strip():
            rows.append(re.split(r"\s{2,}", line.strip(), maxsplit=5))
    assert rows and summary, f"{CALIBRATION_RUN}: no candidates or no closing line"
    return rows, summary


def calibration_table() -> str:
    """bench/gpu/results/calibrate-h200-run1.table: the first-boot calibration on one H200."""
    out = [
        "| candidate | status | prompts | tok/s | acceptance | why it stopped |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for name, status, prompts, tok_s, accept, *detail in _calibration_run()[0]:
        out.append(f"| `{name}` | {status} | {prompts} | {tok_s} | {accept} | {_cell(''.join(detail))} |")
    return "\n".join(out)


def _calibration_gpu() -> str:
    name, driver, ecc, memory = (part.strip() for part in CALIBRATION_GPU.read_text().strip().split(","))
    return f"one {name} (driver {driver}, ECC {ecc.lower()}, {memory})"


def _door_resources() -> tuple[float, float]:
    """The door's vCPUs and GiB of memory, as infra/door.py asks Cloud Run for them."""
    from infra.door import CPU, MEMORY

    assert MEMORY.endswith("Mi"), MEMORY
    return float(CPU), int(MEMORY.removesuffix("Mi")) / 1024


def door_cost_table() -> str:
    """infra/pricing.py's Cloud Run prices and the door's size (infra/door.py)."""
    vcpus, memory_gib = _door_resources()
    return pricing.door_cost_table(vcpus=vcpus, memory_gib=memory_gib)


def _door_month(**kwargs: float) -> pricing.DoorMonth:
    vcpus, memory_gib = _door_resources()
    return pricing.door_month(vcpus=vcpus, memory_gib=memory_gib, **kwargs)  # type: ignore[arg-type]


def door_ttft_table() -> str:
    """infra/cold_start.py: the time to first token of a request after an idle stop, phase by phase."""
    rows = ["| phase | s |", "| --- | ---: |"]
    rows += [f"| {name} | {seconds:g} |" for name, seconds in cold_start.ttft_after_idle_stop_phases()]
    total = cold_start.ttft_after_idle_stop_s()
    rows.append(f"| **time to first token** | **{total:g}** ({cold_start.minutes(total)}) |")
    return "\n".join(rows)


def fleet_cost_table() -> str:
    """infra/pricing.py's list prices for the fleet's parts."""
    spot = pricing.estimate_hourly_cost(StackConfig()).usd_per_hour
    rule_month = pricing.LB_FORWARDING_RULE_USD_PER_HOUR * pricing.HOURS_PER_MONTH
    return "\n".join(
        [
            "| part | price |",
            "| --- | --- |",
            f"| each spot g2-standard-8 with its L4 | ~${spot:.2f}/h (spot prices float daily; disks and "
            "egress extra) |",
            f"| load balancer forwarding rule | ~${pricing.LB_FORWARDING_RULE_USD_PER_HOUR:.3f}/h "
            f"(~${rule_month:.0f}/month), plus ~${pricing.LB_USD_PER_GB_PROCESSED} per GB processed |",
            f"| Cloud Armor Standard | ${pricing.ARMOR_POLICY_USD_PER_MONTH:.0f}/month per policy + "
            f"${pricing.ARMOR_RULE_USD_PER_MONTH:.0f}/month per rule, plus "
            f"${pricing.ARMOR_USD_PER_MILLION_REQUESTS} per million requests |",
            "| Google-managed certificate | free |",
        ]
    )


# --- figures ---------------------------------------------------------------------------------


def _hourly(model: str) -> str:
    cfg = StackConfig(provisioning_model=model)  # type: ignore[arg-type]
    return f"~${pricing.estimate_hourly_cost(cfg).usd_per_hour:.2f}/h"


# A fleet that admits one range: Cloud Armor's rules for it (infra/fleet.py).
ONE_RANGE = ["203.0.113.0/24"]


def _armor_rules() -> int:
    from infra.fleet import armor_rules

    return len(armor_rules(ONE_RANGE))


def _fleet_hourly(servers: int) -> str:
    cfg = StackConfig(replicas=servers, source_ranges=ONE_RANGE)
    cost = pricing.estimate_fleet_cost(cfg, servers_now=servers, armor_rules=_armor_rules())
    return f"~${cost.now_usd_per_hour:.2f}/h"


def _edge_hourly() -> str:
    return f"~${pricing.edge_usd_per_hour(armor_rules=_armor_rules()):.2f}/h"


def _first_up() -> str:
    # A build's first deployment bakes the tooling image before it creates the group
    # (infra/tooling_image.py); bench/first_deploy.py names that way "bake before the server".
    (before,) = [t for t in _timelines() if t.name.startswith("bake before")]
    return cold_start.minutes(before.up_returns_s)


def _disk_month() -> str:
    cfg = StackConfig()
    return f"~${cfg.boot_disk_size_gb * pricing.DISK_USD_PER_GB_MONTH[cfg.boot_disk_type]:.0f}/month"


def _bucket_month() -> str:
    gb = NOMINAL_MODEL_BYTES / 1e9
    return f"~${gb * pricing.BUCKET_USD_PER_GB_MONTH:.2f}/month"


def _image_month() -> str:
    from infra.tooling_image import BUILDER_DISK_GB

    return f"~${BUILDER_DISK_GB * pricing.IMAGE_USD_PER_GB_MONTH:.0f}/month"


def _door_subnet() -> str:
    from infra.network import DOOR_SUBNET_CIDR

    return DOOR_SUBNET_CIDR


def _policy_rules() -> list[str]:
    """The rules of infra/policy/, each one mandatory policy of the pack (policy/pack.py)."""
    from infra import policy

    return [rule.__name__ for rule in (*policy.RULES, *policy.PROGRAM_RULES)]


def _calibration_budget() -> int:
    from infra.boot_script import CALIBRATION_BUDGET_S

    return CALIBRATION_BUDGET_S


def _costs() -> pricing.AutostopCosts:
    return pricing.autostop_costs(StackConfig())


FIGURES: dict[str, Callable[[], str]] = {
    "cost.spot-hour": lambda: _hourly("SPOT"),
    "cost.standard-hour": lambda: _hourly("STANDARD"),
    "cost.disk-month": _disk_month,
    "cost.bucket-month": _bucket_month,
    "cost.image-month": _image_month,
    "cost.always-on-month": lambda: f"${_costs().always_on:.0f}",
    "cost.autostop-month": lambda: f"${_costs().resize_to_zero:.0f}",
    "cost.idle-window": lambda: (
        f"~${pricing.estimate_hourly_cost(StackConfig()).usd_per_hour * DEFAULT_IDLE_STOP_MINUTES / 60:.2f}"
    ),
    "cost.fleet-2": lambda: _fleet_hourly(2),
    "cost.fleet-4": lambda: _fleet_hourly(4),
    "cost.fleet-edge": _edge_hourly,
    "cold-start.tooling": lambda: cold_start.COLD_START_TOOLING,
    "cold-start.stock": lambda: cold_start.COLD_START_STOCK,
    "cold-start.hub": lambda: cold_start.COLD_START_HUB,
    "first-deploy.up": _first_up,
    "idle.default": lambda: str(DEFAULT_IDLE_STOP_MINUTES),
    "fleet.timeout": lambda: cold_start.minutes(fleet_bounds.GENERATION_BOUND_S),
    "fleet.cooldown": lambda: f"{fleet_bounds.COLD_START_BOUND_S} s",
    "cost.door-idle": lambda: f"${_door_month(busy_hours_per_day=0, sessions_per_day=0).usd:.0f}",
    "cost.door-busy-month": lambda: f"~${_door_month().usd:.2f}",
    "cost.door-no-free-tier": lambda: f"~${_door_month().usd_without_free_tier:.0f}",
    "door.ttft": lambda: cold_start.minutes(cold_start.ttft_after_idle_stop_s()),
    "door.wake-bound": lambda: f"{StackConfig().door_wake_bound_seconds} s",
    "calib.budget": lambda: f"{_calibration_budget()} s",
    "calib.h200-took": lambda: f"{_calibration_run()[1]['took']} s",
    "calib.h200-winner": lambda: (
        f"`{_calibration_run()[1]['winner']}` at {_calibration_run()[1]['tok_s']} tok/s"
    ),
    "calib.h200-gpu": _calibration_gpu,
    "config.default-max-tokens": lambda: str(StackConfig().default_max_tokens),
    "config.max-ctx": lambda: str(StackConfig().max_ctx_size),
    "net.door-subnet": lambda: f"`{_door_subnet()}`",
    "policy.rules": lambda: str(len(_policy_rules())),
    "pulumi.min-version": pulumi_version.minimum,
    "check.worst-case": lambda: f"{check_gcp.worst_case_s():.0f} s",
    "check.call-bound": lambda: f"{check_gcp.READ_TIMEOUT_S:g} s",
    "check.tries": lambda: str(check_gcp.TRIES),
    "check.budget": lambda: f"{check_gcp.BUDGET_S:g} s",
}

TABLES: dict[str, Callable[[], str]] = {
    "config-reference": config_table,
    "outputs": outputs_table,
    "secure-boot-reasons": secure_boot_reasons_table,
    "cold-start": cold_start_table,
    "boot-bench": boot_bench_table,
    "first-deploy": first_deploy_table,
    "gpu-decode": gpu_decode_table,
    "autostop-cost": lambda: pricing.autostop_cost_table(StackConfig()),
    "fleet-cost": fleet_cost_table,
    "door-cost": door_cost_table,
    "door-ttft": door_ttft_table,
    "calibration-h200": calibration_table,
    "exit-codes": lambda: exit_code_table(),
}
GENERATORS = {**TABLES, **FIGURES}


def render(name: str) -> str:
    if name not in GENERATORS:
        raise KeyError(f"no generator named {name!r} in scripts/gen_docs.py")
    body = GENERATORS[name]()
    # A table stands apart from its markers by blank lines, as any Markdown renderer wants a block.
    return f"\n\n{body}\n\n" if name in TABLES else body


def expand(text: str) -> str:
    """The text with every generated part replaced by what its source gives now."""
    return MARK.sub(lambda m: f"<!-- gen:{m['name']} -->{render(m['name'])}<!-- /gen:{m['name']} -->", text)


def stale(path: Path) -> list[str]:
    """The names of the parts of ``path`` whose text differs from their source."""
    text = path.read_text()
    return sorted({m["name"] for m in MARK.finditer(text) if m["body"] != render(m["name"])})


def main(argv: list[str]) -> int:
    if "--write" in argv:
        for path in pages():
            text = path.read_text()
            if expand(text) != text:
                path.write_text(expand(text))
                print(f"updated {path.relative_to(ROOT)}")
        return 0
    if "--check" in argv:
        problems = [f"{path.relative_to(ROOT)}: {name}" for path in pages() for name in stale(path)]
        for problem in problems:
            print(f"stale: {problem} (python scripts/gen_docs.py --write)", file=sys.stderr)
        return 1 if problems else 0
    for name, generator in GENERATORS.items():
        print(f"{name}: {(generator.__doc__ or '').strip() or 'a figure'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
