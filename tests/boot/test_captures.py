"""No function of startup/*.sh whose stdout is captured (``$(f ...)``, ``<(f ...)``) can reach the
journal writers, ``log`` and ``phase_report``, which print to stdout: the line would become part of
the captured value. ``hf=$(hf_tool)`` did, and every first deployment failed with exit 127.

A static read of the scripts: function bodies, the words they run (quoted text dropped, except the
commands substituted inside double quotes), and the closure of who calls whom.
"""

from __future__ import annotations

import re
from pathlib import Path

STARTUP = Path(__file__).resolve().parents[2] / "startup"
JOURNAL_WRITERS = frozenset({"log", "phase_report"})
_DEFINITION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\(\) \{\s*$")
_CAPTURE = re.compile(r"[$<]\(\s*([A-Za-z_][A-Za-z0-9_]*)")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def code_of(line: str) -> str:
    """What runs on the line: no comment and no quoted text, except the commands substituted inside
    double quotes ("$(...)"), which run and are kept with their "$(" so captures stay visible."""
    out: list[str] = []
    quote = ""  # "", "'" or '"'
    depth = 0  # open $( inside double quotes
    i = 0
    while i < len(line):
        char = line[i]
        if quote == "'":
            quote = "" if char == "'" else quote
        elif quote == '"' and depth == 0:
            if char == "\\":
                i += 1
            elif char == '"':
                quote = ""
            elif line.startswith("$(", i):
                depth = 1
                out.append(" $(")
                i += 1
        elif char == "#" and quote == "" and (i == 0 or line[i - 1] in " \t"):
            break
        elif depth and char == "'":
            # Quoted text inside a substitution (an awk program) runs nothing of ours.
            end = line.find("'", i + 1)
            i = len(line) if end < 0 else end
            out.append(" ")
        else:
            if char in "'\"" and depth == 0:
                quote = char
                out.append(" ")
            elif depth and char == "(":
                depth += 1
                out.append(char)
            elif depth and char == ")":
                depth -= 1
                out.append(char if depth else ") ")
            else:
                out.append(char)
        i += 1
    return "".join(out)


def functions(texts: list[str]) -> dict[str, list[str]]:
    """Each function's body, as code lines, across all scripts (they are pasted into one)."""
    bodies: dict[str, list[str]] = {}
    for text in texts:
        current: str | None = None
        for line in text.splitlines():
            match = _DEFINITION.match(line)
            if match:
                current = match[1]
                bodies[current] = []
            elif current is not None and line == "}":
                current = None
            elif current is not None:
                bodies[current].append(code_of(line))
    return bodies


def captured(texts: list[str], defined: set[str]) -> set[str]:
    return {
        name
        for text in texts
        for line in text.splitlines()
        for name in _CAPTURE.findall(code_of(line))
        if name in defined
    }


def reaching(bodies: dict[str, list[str]], targets: frozenset[str]) -> set[str]:
    """Functions from which a call chain leads to one of ``targets``."""
    calls = {
        name: {w for line in body for w in _WORD.findall(line)} & bodies.keys()
        for name, body in bodies.items()
    }
    found = set(targets)
    while True:
        more = {name for name, callees in calls.items() if callees & found} - found
        if not more:
            return found
        found |= more


def audit(texts: list[str]) -> list[str]:
    bodies = functions(texts)
    bad = captured(texts, set(bodies)) & reaching(bodies, JOURNAL_WRITERS)
    return sorted(bad)


def scripts() -> list[str]:
    return [path.read_text() for path in sorted(STARTUP.glob("*.sh"))]


def test_no_captured_function_can_write_a_journal_line() -> None:
    texts = scripts()
    bodies = functions(texts)
    # The audit sees the scripts: their functions, and the captures the boot relies on.
    assert {"hf_tool", "fetch_from_hub", "report", "gcs_cp", "ga_decide"} <= bodies.keys()
    assert {"gcs_cp", "ga_decide", "utc_now", "one_line", "process_tree"} <= captured(texts, set(bodies))
    assert audit(texts) == []


def test_the_audit_finds_the_capture_that_broke_the_first_deployment() -> None:
    texts = scripts()
    broken = [text.replace("  hf_tool\n", "  hf=$(hf_tool)\n") for text in texts]
    assert broken != texts
    assert audit(broken) == ["hf_tool"]
    # A journal line inside quoted text is no call; one inside "$(...)" is.
    assert _WORD.findall(code_of('printf "last log lines: %s" "$(tr a "$(log x)")" # log')) == [
        "printf", "tr", "a", "log", "x",
    ]  # fmt: skip
    assert _WORD.findall(code_of("echo 'log this' \"it's\" ${x# } ok")) == ["echo", "x", "ok"]
    assert _WORD.findall(code_of("x=\"$(awk 'BEGIN { log(1) }') $(utc_now)\"")) == ["x", "awk", "utc_now"]
