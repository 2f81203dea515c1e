"""The README is the newcomer's page: a few screens, its two commands, and a way to every docs page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# A few screens: everything else lives in docs/, one page per concern.
MAX_LINES = 200


def test_the_two_commands_exist_and_ci_runs_the_test_one() -> None:
    readme = README.read_text()
    (block,) = re.findall(r"^## Two commands\n.*?^```bash\n(.*?)^```$", readme, re.M | re.S)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["scripts/deploy.sh", "scripts/test.sh"], commands
    for script in commands:
        assert (ROOT / script).stat().st_mode & 0o111, f"{script} must be executable"
    assert re.search(r"^bash scripts/test\.sh$", (ROOT / ".ci/run").read_text(), re.MULTILINE)


def test_the_readme_fits_a_few_screens() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_the_first_screen_answers_the_newcomers_questions() -> None:
    """What it is and costs, what it needs, the two commands, how to reach it and read the key, how
    to stop the bill, where the rest is: in that order, as the README's first sections."""
    headings = re.findall(r"^## (.+)$", README.read_text(), re.M)
    assert headings == [
        "Before the first deploy",
        "Two commands",
        "Reaching the server",
        "Stopping the bill",
        "Where the rest is",
    ]
    first = README.read_text().split("\n## ", 1)[0]
    assert "What it costs" in first


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)(?:#[\w-]+)?\)", README.read_text()))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages - linked == set(), "README's 'Where the rest is' must link every page"
