"""README.md and docs/ say what the code and the benches say, and render as written.

- Every generated part (a table or figure between ``<!-- gen:NAME -->`` markers) is what its source
  gives now (scripts/gen_docs.py), and the recorded boot bench ran on today's phase table.
- Parsed as CommonMark with GFM tables by markdown-it-py: every relative link and anchor resolves,
  every image exists, and every table renders as a table with as many cells in each row as in its
  header (an unescaped ``|`` adds a cell; a line after a table without a blank line becomes a row).
- Every ``qwen36 <command>`` a page names is registered, every config key and stack output it names
  exists, and every config recipe (a bash block of ``pulumi config set`` lines) deploys under the
  program mocks.
- Facts a page keeps beside the code: every rule of the policy pack has its row in docs/limits.md,
  every figure of the boot's ready report its line in docs/boot.md, every live check what settles it,
  the door's poll copied into infra/cold_start.py is the door's, and no note for the integrator is left.
"""

from __future__ import annotations

import json
import re
import shlex
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
import yaml
from markdown_it import MarkdownIt
from markdown_it.token import Token

from infra.output_reference import OUTPUTS
from scripts import gen_docs

ROOT = Path(__file__).resolve().parent.parent
PAGES = gen_docs.pages()
IDS = [str(p.relative_to(ROOT)) for p in PAGES]
PROJECT = "qwen36-mtp-l4"
UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


@cache
def tokens(path: Path) -> list[Token]:
    return parser().parse(path.read_text())


def _text(inline: Token) -> str:
    return "".join(c.content for c in inline.children or [] if c.type in ("text", "code_inline"))


def slug(heading: str) -> str:
    """GitHub's heading anchor: lowercase, punctuation dropped, spaces to hyphens."""
    kept = "".join(ch for ch in heading.lower() if ch in " -_" or unicodedata.category(ch)[0] in ("L", "N"))
    return kept.replace(" ", "-")


@cache
def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    toks = tokens(path)
    for i, tok in enumerate(toks):
        if tok.type == "heading_open":
            base = slug(_text(toks[i + 1]))
            name, n = base, 0
            while name in found:  # GitHub numbers repeated headings: x, x-1, x-2
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def _links(path: Path) -> list[str]:
    out: list[str] = []
    for tok in tokens(path):
        for child in tok.children or []:
            if child.type == "link_open":
                out.append(str(child.attrs["href"]))
            elif child.type == "image":
                out.append(str(child.attrs["src"]))
    return out


# --- generated parts ------------------------------------------------------------------------


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_generated_parts_match_their_sources(path: Path) -> None:
    assert gen_docs.stale(path) == [], "run: python scripts/gen_docs.py --write"


def test_every_generator_is_used_and_every_part_has_one() -> None:
    used = {m["name"] for path in PAGES for m in gen_docs.MARK.finditer(path.read_text())}
    assert used - set(gen_docs.GENERATORS) == set(), "a part names no generator"
    assert set(gen_docs.GENERATORS) - used == set(), "a generator no page uses"


def test_the_recorded_boot_bench_ran_on_todays_phase_table() -> None:
    from bench.boot_bench import PATHS
    from tests.boot.durations import Durations

    recorded = json.loads(gen_docs.BOOT_BENCH_RESULTS.read_text())["paths"]
    d = Durations()
    assert [p["name"] for p in recorded] == [p.name for p in PATHS]
    for row, path in zip(recorded, PATHS, strict=True):
        for ours in (True, False):
            key = "critical_ours" if ours else "critical_original"
            # The calibration's seconds are what that run measured; every other phase is the table's.
            measured = (
                next((s for name, s in row[key] if name.startswith("calibrate")), None) if ours else None
            )
            assert [tuple(x) for x in row[key]] == path.critical(d, ours, measured), (
                f"{path.name}: the phase table changed since the recorded run; rerun "
                "python bench/boot_bench.py --json bench/results/boot_bench.json"
            )


def test_the_check_sees_a_stale_figure(tmp_path: Path) -> None:
    page = tmp_path / "x.md"
    page.write_text("A wake takes <!-- gen:cold-start.tooling -->~3 min<!-- /gen:cold-start.tooling -->.\n")
    assert gen_docs.stale(page) == ["cold-start.tooling"]
    page.write_text(gen_docs.expand(page.read_text()))
    assert gen_docs.stale(page) == []


# --- links and tables -----------------------------------------------------------------------


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    broken = []
    for href in _links(path):
        url = urlparse(href)
        if url.scheme or url.netloc:
            continue
        target = (path.parent / unquote(url.path)).resolve() if url.path else path
        if not target.exists():
            broken.append(f"{href}: no {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
        elif url.fragment and target.suffix == ".md" and url.fragment not in anchors(target):
            broken.append(f"{href}: no heading #{url.fragment} in {target.name}")
    assert broken == []


def _cells(line: str) -> int:
    return len(UNESCAPED_PIPE.split(line.strip().strip("|")))


def table_problems(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    in_tables: set[int] = set()
    in_code: set[int] = set()
    problems = []
    for tok in tokens(path):
        if tok.map is None:
            continue
        start, end = tok.map
        if tok.type in ("fence", "code_block", "html_block"):
            in_code.update(range(start, end))
        elif tok.type == "table_open":
            in_tables.update(range(start, end))
            header = _cells(lines[start])
            for n in range(start, end):
                if not lines[n].lstrip().startswith("|"):
                    problems.append(f"line {n + 1} renders as a table row: {lines[n][:60]!r}")
                elif _cells(lines[n]) != header:
                    problems.append(f"line {n + 1} has {_cells(lines[n])} cells, its header {header}")
    for n, line in enumerate(lines):
        if line.lstrip().startswith("|") and n not in in_tables and n not in in_code:
            problems.append(f"line {n + 1} looks like a table row but renders as text")
    return problems


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_every_table_renders_with_its_header_s_cells(path: Path) -> None:
    assert table_problems(path) == []


def test_the_table_check_sees_the_known_faults(tmp_path: Path) -> None:
    """An unescaped pipe inside code (GFM splits cells there too), a sentence glued under a table,
    and a table whose separator line is missing."""
    page = tmp_path / "t.md"
    page.write_text("| a | b |\n| --- | --- |\n| `x | y` | z |\ntrailing text\n\n| c | d |\n| e | f |\n")
    assert table_problems(page) == [
        "line 3 has 3 cells, its header 2",
        "line 4 renders as a table row: 'trailing text'",
        "line 6 looks like a table row but renders as text",
        "line 7 looks like a table row but renders as text",
    ]


def html_problems(path: Path) -> list[str]:
    """Comments (the generated parts' markers, the integrator's notes) must not change what renders:
    a line that starts with ``<!--`` opens an HTML block, which swallows the rest of its line as raw
    HTML (no Markdown inside it) and splits the paragraph it interrupts."""
    lines = path.read_text().splitlines()
    problems = []
    for tok in tokens(path):
        if tok.type != "html_block" or tok.map is None:
            continue
        start, _ = tok.map
        if re.sub(r"<!--.*?-->", "", tok.content, flags=re.S).strip():
            problems.append(f"line {start + 1} renders as raw HTML: {lines[start][:60]!r}")
        elif start > 0 and lines[start - 1].strip():
            problems.append(f"line {start + 1}: a comment that splits the paragraph above it")
    return problems


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_comments_do_not_change_what_renders(path: Path) -> None:
    assert html_problems(path) == []


def test_the_comment_check_sees_a_figure_that_starts_a_line(tmp_path: Path) -> None:
    page = tmp_path / "c.md"
    page.write_text(
        "A wake takes\n<!-- gen:x -->~2 min<!-- /gen:x --> from the bucket.\nAnd\n<!-- note -->\n"
    )
    assert html_problems(page) == [
        "line 2 renders as raw HTML: '<!-- gen:x -->~2 min<!-- /gen:x --> from the bucket.'",
        "line 4: a comment that splits the paragraph above it",
    ]


# --- names the pages use --------------------------------------------------------------------


def _code(path: Path) -> list[str]:
    """Every code block (less its shell comments) and inline code span of a page."""
    out = []
    for tok in tokens(path):
        if tok.type in ("fence", "code_block"):
            out.append("\n".join(line.split(" #")[0] for line in tok.content.splitlines()))
        for child in tok.children or []:
            if child.type == "code_inline":
                out.append(child.content)
    return out


def _subcommands() -> set[str]:
    from qwen36.__main__ import build_parser

    return set(next(a.choices for a in build_parser()._actions if a.choices))


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_every_qwen36_command_a_page_names_is_registered(path: Path) -> None:
    code = "\n".join(_code(path))
    named = set(re.findall(r"(?:^|[\s`($])qwen36 ([a-z][a-z-]*)", code))
    assert named <= _subcommands(), named - _subcommands()
    # The user's command is the console script; `python -m qwen36` only where the project's own
    # interpreter runs it (the VM's venv for `tune`, the gate's `wait`).
    bare = [
        m
        for m in re.finditer(r"(\S*)python -m qwen36( \w+)?", code)
        if m[1] != ".venv/bin/" and m[2] != " wait"
    ]
    assert bare == [], [m[0] for m in bare]


def _declared_keys() -> set[str]:
    return set(yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"])


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_every_config_key_and_output_a_page_names_exists(path: Path) -> None:
    code = "\n".join(_code(path))
    keys = set(re.findall(rf"{PROJECT}:(\w+)", code)) - {"key"}  # `qwen36-mtp-l4:<key>` is a placeholder
    assert keys <= _declared_keys(), keys - _declared_keys()
    outputs = {k for group in OUTPUTS for k in group.keys}
    named = set(re.findall(r"pulumi stack output (\w+)", code))
    assert named <= outputs, named - outputs


# --- recipes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    where: str
    overrides: dict[str, Any]


def _recipe(block: str) -> dict[str, Any] | None:
    """The config one bash block sets with `pulumi config set` lines, as the program's overrides."""
    values: dict[str, Any] = {}
    for line in block.splitlines():
        if not line.startswith("pulumi config set "):
            continue
        words = shlex.split(line, comments=True)
        args = [w for w in words[3:] if w != "--path"]
        key, value = args[0], args[1]
        namespace, _, name = key.partition(":")
        if namespace != PROJECT:
            continue
        item = re.fullmatch(r"(\w+)\[(\d+)\]", name)
        if item:
            listed = values.setdefault(item[1], [])
            assert int(item[2]) == len(listed), f"{key}: list items are set in order"
            listed.append(value)
        else:
            values[name] = value
    return values or None


def recipes() -> list[Recipe]:
    found = []
    for path in PAGES:
        for tok in tokens(path):
            if tok.type == "fence" and tok.info.strip() == "bash" and tok.map is not None:
                overrides = _recipe(tok.content)
                if overrides is not None:
                    found.append(Recipe(f"{path.relative_to(ROOT)}:{tok.map[0] + 1}", overrides))
    return found


RECIPES = recipes()


def test_the_docs_hold_recipes() -> None:
    assert len(RECIPES) >= 3, [r.where for r in RECIPES]


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.where for r in RECIPES])
def test_every_config_recipe_deploys_as_written(recipe: Recipe) -> None:
    """On the dev stack, with Pulumi.yaml's defaults applied as the CLI applies them, the program
    runs to its exports under the mocks: the recipe needs no key it does not show."""
    from tests.infra.program_mocks import deploy

    deployed = deploy("dev", recipe.overrides)
    assert deployed.outputs["apiBaseUrl"]


# --- facts the pages keep with the code -----------------------------------------------------------


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_no_page_keeps_a_note_for_the_integrator(path: Path) -> None:
    assert "<!-- integrator:" not in path.read_text()


def test_the_wake_figures_use_the_door_s_own_poll() -> None:
    """infra/cold_start.py copies the door's health poll (infra imports no door): the copies agree."""
    from door.config import DEFAULT_HEALTH_POLL_S
    from infra import cold_start

    assert cold_start.DOOR_HEALTH_POLL_S == DEFAULT_HEALTH_POLL_S


def test_the_limits_page_names_every_rule_of_the_pack() -> None:
    text = (ROOT / "docs" / "limits.md").read_text()
    missing = [name for name in gen_docs._policy_rules() if f"`{name}`" not in text]
    assert missing == [], "docs/limits.md: give each rule its row"


def test_the_boot_page_explains_every_figure_of_the_ready_report() -> None:
    from infra import boot_protocol

    names = [*boot_protocol.FIGURES, *boot_protocol.CALIBRATION_FIELDS]
    text = (ROOT / "docs" / "boot.md").read_text()
    assert [n for n in names if f"| `{n}`" not in text and f"`, `{n}`" not in text] == []


def test_the_calibration_run_s_winner_is_its_fastest_measured_candidate() -> None:
    """The closing line and the table of bench/gpu/results/calibrate-h200-run1.table agree."""
    rows, summary = gen_docs._calibration_run()
    measured = {name: float(tok_s) for name, status, _, tok_s, *_ in rows if status == "measured"}
    assert max(measured, key=measured.__getitem__) == summary["winner"]
    assert measured[summary["winner"]] == float(summary["tok_s"])
    assert float(summary["took"]) <= float(summary["bound"])


def test_every_live_check_says_what_settles_it() -> None:
    text = (ROOT / "docs" / "live-checks.md").read_text()
    items = re.split(r"^\d+\. ", text, flags=re.M)[1:]
    assert items and all("*Settles it:*" in item for item in items)
    # Each item says whether `qwen36 verify` settles it: "**verify:** none ..." or the line that does,
    # and every line of verify settles some item.
    from qwen36.verify.checks import NAMES

    said = [re.search(r"\*\*verify:\*\* (none\b|`([a-z-]+)`)", item) for item in items]
    assert all(said), [item[:60] for item, m in zip(items, said, strict=True) if not m]
    named = {name for item in items for name in re.findall(r"`([a-z-]+)`", item.split("**verify:**")[1])}
    assert {m[2] for m in said if m and m[2]} <= set(NAMES)
    assert set(NAMES) <= named, set(NAMES) - named
