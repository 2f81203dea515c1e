"""The one reader of a stack file (``Pulumi.<stack>.yaml``) for the commands that read one
(``check``, ``stage``, ``tune --config``): YAML whose ``config`` maps keys to values.

A file that is not YAML, not UTF-8, or whose document or ``config`` is not a mapping (a list, a
string) is a :class:`qwen36.errors.ConfigFileError` (exit 3) naming the file; ``yaml.YAMLError`` is
neither an ``OSError`` nor a ``ValueError``, so a caller catching those let it through as a bug
(issue 29). A missing file stays ``FileNotFoundError``: each command says what it expected there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qwen36.errors import ConfigFileError


def read_config(path: Path) -> dict[str, Any]:
    """The stack file's ``config`` mapping (empty where it has none)."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"{path.name} is not UTF-8 text ({exc.reason}); fix or recreate it") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigFileError(
            f"{path.name} is not valid YAML ({exc}); fix it or recreate the stack"
        ) from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigFileError(
            f"{path.name} holds a YAML {type(document).__name__}, not a mapping with a 'config' key; "
            "fix it or recreate the stack"
        )
    config = document.get("config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ConfigFileError(f"{path.name}: its 'config' is not a mapping of keys to values; fix it")
    return dict(config)
