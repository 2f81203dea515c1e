"""The CLI run in-process through its real entry point (argparse registration and the dispatcher)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from qwen36.__main__ import main
from tests.measure.servers import CliRun


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliRun]:
    """Runs ``python -m qwen36 <command> ...`` through ``qwen36.__main__.main``, in this process."""
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("QWEN36_URL", raising=False)
    monkeypatch.delenv("QWEN36_API_KEY", raising=False)

    def run(*argv: str) -> CliRun:
        capsys.readouterr()
        code = main(list(argv))
        captured = capsys.readouterr()
        return CliRun(code, captured.out, captured.err)

    return run
