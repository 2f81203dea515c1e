"""The CLI run in-process through its real argparse registration."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from qwen36.measure import register
from tests.measure.servers import CliRun


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliRun]:
    """Runs ``qwen36 <command> ...`` through the real argparse registration, in this process."""
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("QWEN36_URL", raising=False)
    monkeypatch.delenv("QWEN36_API_KEY", raising=False)

    def run(*argv: str) -> CliRun:
        parser = argparse.ArgumentParser(prog="qwen36")
        register(parser.add_subparsers(required=True))
        args = parser.parse_args(list(argv))
        capsys.readouterr()
        code = args.func(args)
        captured = capsys.readouterr()
        return CliRun(code, captured.out, captured.err)

    return run
