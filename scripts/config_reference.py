"""Print the README's config reference table from Pulumi.yaml (tests/test_readme.py keeps them equal).

Usage: python scripts/config_reference.py [--write]   (--write updates README.md in place)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START = "<!-- config-reference:start (scripts/config_reference.py --write; tests/test_readme.py) -->"
END = "<!-- config-reference:end -->"


def config_table() -> str:
    declared = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for key, spec in declared.items():
        default = spec.get("default")
        shown = json.dumps(default) if not isinstance(default, str) else default or '""'
        meaning = spec["description"].replace("|", "\\|")
        rows.append(f"| `{key}` | {spec['type']} | `{shown}` | {meaning} |")
    return "\n".join(rows)


def readme_with_table(readme: str) -> str:
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{config_table()}\n{END}{tail}"


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        README.write_text(readme_with_table(README.read_text()))
    else:
        print(config_table())
