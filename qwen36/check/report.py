"""The check's answer: one line per fact, each problem with its fix, and an exit code.

``ok`` and ``warn`` never fail the check; a single ``BLOCK`` (something that would stop the deploy
and that the deploy cannot fix by itself) makes it exit ``EXIT_BLOCKED``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

EXIT_CLEAR = 0
"""No blocker (warnings may have been printed)."""
EXIT_BLOCKED = 1
"""At least one BLOCK line: the deploy would stop there."""
EXIT_UNUSABLE = 2
"""The check could not run at all: a bad argument or no such stack file (argparse also exits 2)."""


class Level(Enum):
    OK = "ok"
    WARN = "warn"
    BLOCK = "BLOCK"


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


def summary(facts: list[Fact]) -> tuple[str, int]:
    """The closing line and the exit code."""
    blockers = sum(f.level is Level.BLOCK for f in facts)
    warnings = sum(f.level is Level.WARN for f in facts)
    counts = f"{blockers} blocker{'s' * (blockers != 1)}, {warnings} warning{'s' * (warnings != 1)}"
    if blockers:
        return f"result: {counts}: the deploy would stop; fix the BLOCK lines first", EXIT_BLOCKED
    if warnings:
        return f"result: {counts}: nothing blocks the deploy; read the warn lines", EXIT_CLEAR
    return f"result: {counts}: all clear", EXIT_CLEAR
