"""A boot's measured phases beside what the cold-start model (infra/cold_start.py) assumed for each.

The ready report (guest attribute ``qwen36/report``, infra/boot_protocol.py) carries the fetch's
source, rate, slices and seconds, the load and the time to ready; the ECC step's path (a reboot, a GPU
reset, ECC already off, or degraded) is in the boot's journal on the serial console, where
startup/boot.sh ``step_ecc`` writes it. The model is wrong wherever the two disagree: that is what
the first live run is for, so a disagreement is printed, never failed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from infra import boot_protocol, cold_start
from infra.config import StackConfig
from qwen36.errors import as_error
from qwen36.verify.checks import Check, fail, ok

if TYPE_CHECKING:
    from qwen36.group import Member
    from qwen36.status import GroupApi

# startup/model.sh GCS_COMPONENTS and GCS_COMPONENT_MIB (startup/ is the VM's room): the slices
# `gcloud storage cp` makes of the model, min(ceil(size / 256 MiB), 32). tests/verify holds them equal.
GCS_COMPONENTS = 32
GCS_COMPONENT_MIB = 256
MIB = 1024 * 1024
# How much of the serial console to read: the whole boot's journal, both boots of an ECC reboot.
SERIAL_LINES = 20000

# The ECC step's journal lines (startup/boot.sh step_ecc and ecc_reset; tests/verify checks that the
# script still writes each of these texts).
_ECC_REPORT = re.compile(r"qwen36: phase=ecc (?P<detail>.*)$")
_ECC_RESET = re.compile(r"by a GPU reset in (?P<s>\d+) s, no reboot")
_ECC_REBOOT_ASKED = "ECC disabled for the next boot"
_ECC_REBOOT_TOOK = re.compile(
    r"ECC reboot path: from the reboot request to this boot's ECC check took (?P<s>\d+) s"
)
_ECC_DEGRADED = "degraded:"


@dataclass(frozen=True)
class EccPath:
    path: str
    """reboot | gpu-reset | off-at-boot | degraded | unknown"""
    seconds: float | None = None
    detail: str = ""


def ecc_path(serial: list[str]) -> EccPath:
    """The path the last boot's ECC step took, from its journal lines."""
    reports = [m["detail"] for line in serial if (m := _ECC_REPORT.search(line))]
    took = [float(m["s"]) for line in serial if (m := _ECC_REBOOT_TOOK.search(line))]
    if not reports:
        return EccPath("unknown", detail="no ECC line on the serial console")
    last = reports[-1]
    if last.startswith(_ECC_DEGRADED):
        return EccPath("degraded", detail=last)
    if reset := _ECC_RESET.search(last):
        return EccPath("gpu-reset", float(reset["s"]), last)
    if any(r.startswith(_ECC_REBOOT_ASKED) for r in reports[:-1]) or took:
        return EccPath("reboot", took[-1] if took else None, last)
    return EccPath("off-at-boot", detail=last)


@dataclass(frozen=True)
class Assumed:
    fetch_s: float | None
    fetch_mb_s: float | None
    fetch_slices: int | None
    load_s: float
    ready_s: float
    ecc: str
    ecc_s: float


def assumed(cfg: StackConfig, fetch_from: str | None, ecc: EccPath, calibrate_s: float) -> Assumed:
    """What infra/cold_start.py assumed for a boot with this source and ECC path."""
    size = cfg.model_bytes_for_sizing
    fetch = {"gcs": cold_start.GCS_TO_RAM_S, "hub": cold_start.HUB_DOWNLOAD_S}.get(fetch_from or "")
    docker = 0.0 if cfg.use_tooling_image else cold_start.DOCKER_AND_PULL_S
    # ready-s counts from this boot's kernel start: the VM's creation and an ECC reboot's first boot
    # are before it; a GPU reset is in it.
    ready = max(docker, fetch or 0.0, cold_start.SECRET_READ_S) + cold_start.LOAD_RAM_S + calibrate_s
    if ecc.path == "gpu-reset":
        ready += cold_start.GPU_RESET_S
    return Assumed(
        fetch_s=fetch,
        fetch_mb_s=round(size / 1e6 / fetch, 1) if fetch else None,
        fetch_slices=min(math.ceil(size / (GCS_COMPONENT_MIB * MIB)), GCS_COMPONENTS)
        if fetch_from == "gcs"
        else None,
        load_s=cold_start.LOAD_RAM_S,
        ready_s=round(ready, 1),
        ecc="gpu-reset" if ecc.path == "gpu-reset" else "reboot",
        ecc_s=cold_start.GPU_RESET_S if ecc.path == "gpu-reset" else cold_start.ECC_REBOOT_S,
    )


def phases(
    name: str, member: str, zone: str, attributes: dict[str, str], serial: list[str], cfg: StackConfig
) -> Check:
    """The ``boot`` (or ``wake-boot``) line of ``member``."""
    value = attributes.get(boot_protocol.KEY_REPORT)
    where = f"{member} in {zone}"
    if not value:
        return fail(name, f"{where} has no boot report", "`qwen36 logs --serial` shows how far it got")
    try:
        report = boot_protocol.parse_report(value)
    except boot_protocol.ReportFormatError as exc:
        return fail(name, f"{where}: unreadable boot report ({exc})", "`qwen36 logs --serial`")
    if not report.ready:
        return fail(
            name,
            f"{where}'s last report is '{report.phase}': {report.detail[:200]}",
            "`qwen36 status`; `qwen36 logs --serial` shows the boot",
        )
    figures = boot_protocol.ready_figures(report)
    if figures is None:
        return fail(
            name,
            f"{where}'s ready report carries no figures ({report.detail[:120]})",
            "its boot script predates the figures: `pulumi up` rolls out the current one",
        )
    fields = boot_protocol.detail_fields(report.detail)
    calibrate_s = _number(fields.get(boot_protocol.FIELD_CALIBRATE_S)) or 0.0
    ecc = ecc_path(serial)
    model = assumed(cfg, figures.fetch_from, ecc, calibrate_s)
    data: dict[str, Any] = {
        "member": member,
        "zone": zone,
        "boot_id": report.boot_id,
        "fetch_from": figures.fetch_from,
        "fetch_mb_s": figures.fetch_mb_s,
        "fetch_slices": figures.fetch_slices,
        "fetch_s": figures.fetch_s,
        "load_s": figures.load_s,
        "ready_s": figures.ready_s,
        "calibrate_s": calibrate_s,
        "ecc_path": ecc.path,
        "ecc_s": ecc.seconds,
        "assumed": {
            "fetch_mb_s": model.fetch_mb_s,
            "fetch_slices": model.fetch_slices,
            "fetch_s": model.fetch_s,
            "load_s": model.load_s,
            "ready_s": model.ready_s,
            "ecc_path": model.ecc,
            "ecc_s": model.ecc_s,
        },
    }
    parts = [f"fetch from {figures.fetch_from or '?'}"]
    if figures.fetch_mb_s is not None or model.fetch_mb_s is not None:
        parts.append(f"{_v(figures.fetch_mb_s)} MB/s (model {_v(model.fetch_mb_s)})")
    if figures.fetch_slices is not None or model.fetch_slices is not None:
        parts.append(f"{_v(figures.fetch_slices)} slices (model {_v(model.fetch_slices)})")
    if figures.fetch_s is not None or model.fetch_s is not None:
        parts.append(f"{_v(figures.fetch_s)} s (model {_v(model.fetch_s)})")
    calibrated = f", with calibrate-s {calibrate_s:g}" if calibrate_s else ""
    line = (
        f"{where} (boot {report.boot_id}): " + ", ".join(parts)
        + f"; load {_v(figures.load_s)} s (model {model.load_s:g}); ready {_v(figures.ready_s)} s after "
        f"boot (model {model.ready_s:g}{calibrated})"
        + f"; ECC path {ecc.path}" + (f" {ecc.seconds:g} s" if ecc.seconds is not None else "")
        + f" (model {model.ecc} {model.ecc_s:g} s)"
    )  # fmt: skip
    return ok(name, line, **data)


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _v(value: float | int | None) -> str:
    return "n/a" if value is None else f"{value:g}"


@dataclass(frozen=True)
class Serving:
    """A member's boot as ``verify`` reads it once: its guest attributes and its serial console."""

    name: str
    zone: str
    attributes: dict[str, str]
    serial: list[str]

    @property
    def report(self) -> boot_protocol.Report | None:
        value = self.attributes.get(boot_protocol.KEY_REPORT)
        try:
            return boot_protocol.parse_report(value) if value else None
        except boot_protocol.ReportFormatError:
            return None

    @property
    def boot_id(self) -> str:
        report = self.report
        return report.boot_id if report else ""

    def check(self, name: str, cfg: StackConfig) -> Check:
        return phases(name, self.name, self.zone, self.attributes, self.serial, cfg)


def read_serving(api: GroupApi, member: Member) -> Serving:
    attributes = api.guest_attributes(member)
    try:
        serial = api.reader.serial_tail(member.target(api.where.project), SERIAL_LINES)
    except Exception as exc:
        # No serial console (a 403 on getSerialPortOutput): the ECC path is then "unknown".
        if as_error(exc) is None:
            raise
        serial = []
    return Serving(member.name, member.zone, attributes, serial)
