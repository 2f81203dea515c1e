"""Where bench finds its server: flags, environment, then `pulumi stack output`.

The Pulumi CLI cannot run here (no CLI, no backend), so the stack-output path is exercised with a
stand-in `pulumi` executable on PATH that prints what the real one prints.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from qwen36.measure.client import normalize_url
from qwen36.measure.endpoint import EndpointConfigError, resolve


def _fake_pulumi(bin_dir: Path, outputs: dict[str, str], rc: int = 0) -> None:
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "pulumi"
    body = json.dumps(outputs)
    script.write_text(
        "#!/bin/sh\n"
        '[ "$1 $2 $3 $4" = "stack output --json --show-secrets" ] || { echo "unexpected: $*" >&2; exit 3; }\n'
        f"echo '{body}'\nexit {rc}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_flag_wins_over_environment() -> None:
    env = {"QWEN36_URL": "http://env:1", "QWEN36_API_KEY": "envkey"}
    endpoint = resolve("http://flag:2", None, environ=env)
    assert (endpoint.url, endpoint.api_key) == ("http://flag:2", "envkey")
    assert resolve(None, "flagkey", environ=env).api_key == "flagkey"
    assert resolve(None, None, environ=env).url == "http://env:1"


def test_outside_the_project_without_url_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(EndpointConfigError, match="pass --url"):
        resolve(None, None, cwd=tmp_path, environ={})


def test_inside_the_project_without_the_pulumi_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: x\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(EndpointConfigError, match=r"pulumi CLI is not installed.*--url and --api-key"):
        resolve(None, None, cwd=tmp_path, environ={})


def test_inside_the_project_reads_url_and_key_from_stack_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: x\n")
    sub = tmp_path / "docs"
    sub.mkdir()
    _fake_pulumi(tmp_path / "bin", {"apiBaseUrl": "http://203.0.113.7:8080/v1", "apiKey": "s3cret"})
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    endpoint = resolve(None, None, cwd=sub, environ={})
    assert (endpoint.url, endpoint.api_key) == ("http://203.0.113.7:8080/v1", "s3cret")
    assert normalize_url(endpoint.url) == "http://203.0.113.7:8080"


def test_a_stack_without_outputs_says_to_deploy_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: x\n")
    _fake_pulumi(tmp_path / "bin", {})
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(EndpointConfigError, match="pulumi up"):
        resolve(None, None, cwd=tmp_path, environ={})


def test_normalize_url() -> None:
    assert normalize_url("localhost:8080/") == "http://localhost:8080"
    assert normalize_url("https://h/v1/") == "https://h"
