"""The README's promises that code can check: its config table and its two commands."""

from __future__ import annotations

import re
from pathlib import Path

from scripts.config_reference import README, readme_with_table

ROOT = Path(__file__).resolve().parent.parent


def test_config_table_matches_pulumi_yaml() -> None:
    readme = README.read_text()
    assert readme == readme_with_table(readme), "run: python scripts/config_reference.py --write"


def test_the_two_commands_exist_and_ci_runs_the_test_one() -> None:
    readme = README.read_text()
    for script in ("scripts/deploy.sh", "scripts/test.sh"):
        assert f"\n{script}" in readme
        assert (ROOT / script).stat().st_mode & 0o111, f"{script} must be executable"
    assert re.search(r"^bash scripts/test\.sh$", (ROOT / ".ci/run").read_text(), re.MULTILINE)


def test_every_command_named_in_the_readme_is_registered() -> None:
    from qwen36.__main__ import build_parser

    readme = README.read_text()
    named = set(re.findall(r"python -m qwen36 (\w+)", readme))
    parser = build_parser()
    choices = next(a.choices for a in parser._actions if a.choices)  # the subcommands
    assert named <= set(choices), named - set(choices)
