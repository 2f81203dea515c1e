"""The check's answer: one line per fact, each problem with its fix, and an exit code.

``ok`` and ``warn`` never fail the check; a single ``BLOCK`` (something that would stop the deploy
and that the deploy cannot fix by itself) makes it exit ``EXIT_BLOCKED``. A fact the check could not
read (an API that refused, gave no answer, answered junk, or was not asked once the check's time was
spent) is ``UNREAD``: never a pass, so without a blocker the check ends "could not check" and exits
``EXIT_UNCHECKED``, which ``scripts/deploy.sh`` stops on unless told ``--skip-check``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from qwen36.errors import Exit

EXIT_CLEAR = 0
"""No blocker (warnings may have been printed)."""
EXIT_BLOCKED = 1
"""At least one BLOCK line: the deploy would stop there."""
EXIT_UNCHECKED = int(Exit.UNCHECKED)
"""No BLOCK line, but at least one UNREAD: the check cannot say the deploy would pass."""


class Level(Enum):
    OK = "ok"
    WARN = "warn"
    BLOCK = "BLOCK"
    UNREAD = "UNREAD"


@dataclass(frozen=True)
class Fact:
    level: Level
    subject: str
    text: str
    fix: str = ""

    def line(self) -> str:
        fix = f"; fix: {self.fix}" if self.fix else ""
        return f"{self.level.value:<5} {self.subject}: {self.text}{fix}"


def ok(subject: str, text: str) -> Fact:
    return Fact(Level.OK, subject, text)


def warn(subject: str, text: str, fix: str = "") -> Fact:
    return Fact(Level.WARN, subject, text, fix)


def block(subject: str, text: str, fix: str) -> Fact:
    return Fact(Level.BLOCK, subject, text, fix)


def unread(subject: str, text: str, fix: str) -> Fact:
    return Fact(Level.UNREAD, subject, text, fix)


def summary(facts: list[Fact]) -> tuple[str, int]:
    """The closing line and the exit code."""
    blockers = sum(f.level is Level.BLOCK for f in facts)
    warnings = sum(f.level is Level.WARN for f in facts)
    missed = [f.subject for f in facts if f.level is Level.UNREAD]
    read = f"{blockers} blocker{'s' * (blockers != 1)}, {warnings} warning{'s' * (warnings != 1)}"
    counts = read + (f", {len(missed)} unread" if missed else "")
    if blockers:
        return f"result: {counts}: the deploy would stop; fix the BLOCK lines first", EXIT_BLOCKED
    if missed:
        subjects = ", ".join(dict.fromkeys(missed))
        return (
            f"result: could not check: {len(missed)} fact{'s' * (len(missed) != 1)} unread ({subjects}); "
            f"{read} in the rest; fix the UNREAD lines and rerun "
            "(scripts/deploy.sh --skip-check deploys without the check)",
            EXIT_UNCHECKED,
        )
    if warnings:
        return f"result: {counts}: nothing blocks the deploy; read the warn lines", EXIT_CLEAR
    return f"result: {counts}: all clear", EXIT_CLEAR
