"""The exit codes are one table, generated from qwen36/errors.py, and the docs carry it verbatim."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qwen36 import errors
from qwen36.errors import CAUSES, Exit, QwenError, as_error, exit_code_table

ROOT = Path(__file__).resolve().parents[2]
START = "<!-- exit-codes:start (python -m qwen36.errors) -->"
END = "<!-- exit-codes:end -->"


def test_every_code_has_one_cause_and_what_to_do() -> None:
    assert set(CAUSES) == set(Exit)
    assert len({int(c) for c in Exit}) == len(Exit)
    for code, (meaning, action) in CAUSES.items():
        assert meaning, code
        assert action or code == Exit.OK, code


def test_each_error_class_carries_a_documented_code() -> None:
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, QwenError)]
    assert len(classes) >= 11
    for cls in classes:
        assert cls.exit_code in set(Exit), cls


# scripts/gen_docs.py writes the table between its own markers, inside these (`--write`).
GENERATED = re.compile(r"<!-- /?gen:exit-codes -->")


def test_the_docs_carry_the_generated_table() -> None:
    """Wherever the docs keep it (docs/development.md), between the markers."""
    copies = []
    for path in [*ROOT.glob("docs/**/*.md"), ROOT / "README.md"]:
        text = path.read_text()
        if START in text:
            between = text.split(START, 1)[1].split(END, 1)[0]
            copies.append((path, GENERATED.sub("", between).strip()))
    assert copies, f"no doc carries {START}"
    for path, table in copies:
        assert table == exit_code_table(), f"{path}: run python scripts/gen_docs.py --write"


def test_deploy_sh_uses_the_same_codes() -> None:
    script = (ROOT / "scripts" / "deploy.sh").read_text()
    used = {int(n) for n in re.findall(r"\bdie (\d+)", script)} | {130}
    assert used <= {int(c) for c in Exit}


def test_a_library_error_unknown_to_the_table_is_a_bug() -> None:
    assert as_error(ZeroDivisionError("x")) is None
    assert as_error(KeyboardInterrupt()).exit_code == Exit.INTERRUPTED  # type: ignore[union-attr]


def test_a_bug_is_one_line_and_its_traceback_only_on_request(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bug planted in a command: one line and 70; --debug or QWEN36_DEBUG=1 add the traceback."""
    from qwen36 import status
    from qwen36.__main__ import main

    def broken(args: object) -> int:
        return 1 // 0

    monkeypatch.setattr(status, "run", broken)
    monkeypatch.delenv(errors.DEBUG_ENV, raising=False)
    argv = ["status", "--project", "acme-llm", "--region", "us-central1", "--group", "g"]
    assert main(argv) == Exit.BUG
    err = capsys.readouterr().err
    assert err == (
        "status: error: internal error (ZeroDivisionError: integer division or modulo by zero); rerun with "
        "--debug (or QWEN36_DEBUG=1) for the traceback and report it\n"
    )
    assert main(["--debug", *argv]) == Exit.BUG
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "ZeroDivisionError" in err
    monkeypatch.setenv(errors.DEBUG_ENV, "1")
    assert main(argv) == Exit.BUG
    assert "Traceback" in capsys.readouterr().err
