"""Property-based fuzzing of the CLI's argument parsers and of the stack config as the CLI reads it
(issue 21, item 7): whatever the input, the result is an exit code and one line, never a traceback.

Bounded for CI: a fixed number of examples each, no deadline per example (two shared cores), and
nothing reaches a network: the parsers stop before any command runs, and the config examples end at
the stack file or at a GCS bucket check against a closed loopback port.
"""

from __future__ import annotations

import argparse
import json
import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic.alias_generators import to_camel

from infra.config import PROJECT, StackConfig
from qwen36 import stage_gcs
from qwen36.__main__ import build_parser, main, parse
from qwen36.errors import Exit
from tests.cli.standins import closed_port

CODES = {int(code) for code in Exit}
EXAMPLES = 400


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every command's parser; one with verbs of its own (``keys list``) counts each verb."""
    out = {}
    for name, sub in _subparsers(parser).items():
        if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
            out.update({f"{name} {verb}": verb_parser for verb, verb_parser in _subparsers(sub).items()})
        else:
            out[name] = sub
    return out


PARSER = build_parser()
COMMANDS = _commands(PARSER)
FLAGS = {
    name: sorted({flag for a in sub._actions for flag in a.option_strings if flag not in ("-h", "--help")})
    for name, sub in COMMANDS.items()
}

# Issue 29: strings with control characters and non-ASCII (letters, marks, symbols, format characters
# such as U+202E, spaces of other scripts), on their own and inside otherwise plausible names.
hostile_chars = st.characters(
    codec="utf-8",
    categories=("Cc", "Cf", "Zs", "Zl", "Lo", "Ll", "Lu", "Mn", "So"),
    exclude_characters="\x00",
).filter(lambda c: not c.isascii() or ord(c) < 32 or ord(c) == 127 or c == " ")
hostile_texts = st.builds(
    lambda head, bad, tail: head + bad + tail,
    st.sampled_from(["", "acme-llm", "us-central1", "qwen36-dev", "http://127.0.0.1:9/", "main"]),
    st.text(hostile_chars, min_size=1, max_size=3),
    st.sampled_from(["", "x", "-a", "/v1"]),
)

values = st.one_of(
    st.sampled_from(
        ["nan", "inf", "-inf", "-1", "0", "1", "1e999", "-0", "", " ", "-", "--", "abc", "ftp://x", "http://[",
         "http://127.0.0.1:9", "/", "/nonexistent/x.json", ".", "a,b", ",", "1,2", "99999999999999999999",
         "KEY=VALUE", "ctxSize=abc", "0.5", "true", "\x00", "é", "-h"]
    ),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(min_value=1e15, max_value=1e308).map(repr),
    st.text(max_size=12),
    hostile_texts,
)  # fmt: skip


@st.composite
def argvs(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(sorted(COMMANDS)))
    tokens = draw(st.lists(st.one_of(st.sampled_from(FLAGS[command]), values), max_size=8))
    return [*command.split(), *tokens]


def _check(code: int, out: str, err: str) -> None:
    assert "Traceback" not in out + err
    assert code in CODES, (code, err)
    if code != 0:
        lines = err.splitlines()
        assert len(lines) == 1, err
        assert ": error: " in lines[0]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=argvs())
def test_any_command_line_parses_or_ends_in_one_usage_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        args = parse(argv)
    except SystemExit as done:
        code = 0 if done.code is None else done.code
        assert isinstance(code, int)
        captured = capsys.readouterr()
        _check(code, captured.out, captured.err)
        if code == 0:  # --help: the usage on stdout, nothing on stderr
            assert captured.err == "" and "usage:" in captured.out
    else:
        assert callable(args.func)
        for value in vars(args).values():
            # Nothing that passes the parser is a float the commands cannot bound.
            assert not (isinstance(value, float) and not math.isfinite(value)), (argv, value)
            if isinstance(value, int) and not isinstance(value, bool):
                assert value > -(2**63), (argv, value)


# The flags whose values reach GCE, gcloud, pulumi, an HTTP header or a URL: checked as they are read.
NAMED = {
    (command, flag)
    for command, sub in COMMANDS.items()
    for action in sub._actions
    for flag in action.option_strings
    if getattr(action.type, "__name__", "")
    in {"a project id", "a region name", "a GCE resource name", "a Pulumi stack name", "a zone name", "URL",
        "bucket_name", "object_name"}
}  # fmt: skip


def test_the_named_flags_are_found() -> None:
    assert {
        ("wait", "--door-url"),
        ("status", "--project"),
        ("stage", "--bucket"),
        ("tunnel", "--group"),
    } <= NAMED


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(sorted(NAMED)), text=hostile_texts)
def test_control_and_non_ascii_characters_are_refused_in_every_named_flag(
    which: tuple[str, str], text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No bad value accepted: a name, URL or key with a control or non-ASCII character is a usage
    line naming its flag (GCS object names are UTF-8, so only control characters count there)."""
    command, flag = which
    if flag == "--object" and all(c.isprintable() for c in text):
        return
    with pytest.raises(SystemExit) as done:
        parse([command, flag, text])
    captured = capsys.readouterr()
    assert done.value.code == Exit.USAGE, (which, text, captured.err)
    _check(Exit.USAGE, captured.out, captured.err)
    assert flag in captured.err


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["--debug", "-h", "--bogus"]), values), max_size=4))
def test_the_entry_point_itself(argv: list[str]) -> None:
    try:
        parse(argv)
    except SystemExit as done:
        assert done.code in (0, None, Exit.USAGE)


# --- the stack config, as `stage` reads it from Pulumi.<stack>.yaml --------------------------------

KEYS = [to_camel(name) for name in StackConfig.model_fields]
TEXT_KEYS = [
    to_camel(name)
    for name, info in StackConfig.model_fields.items()
    if info.annotation is str or "Literal" in str(info.annotation) or "list[str]" in str(info.annotation)
]


@settings(max_examples=EXAMPLES, deadline=None)
@given(key=st.sampled_from(TEXT_KEYS), text=hostile_texts)
def test_control_and_non_ascii_characters_are_refused_in_every_text_key(key: str, text: str) -> None:
    """Every string key refuses them where it is read, naming itself; modelFile alone takes
    non-ASCII letters (the hub, GCS and the VM's path take UTF-8), never a control character."""
    from infra.config import ConfigError, parse_config

    if key == "modelFile" and all(c.isprintable() for c in text):
        return
    bad = [text] if "list" in str(StackConfig.model_fields[_snake(key)].annotation) else text
    with pytest.raises(ConfigError) as err:
        parse_config({f"{PROJECT}:{key}": bad, f"{PROJECT}:door": False})
    assert err.value.key == f"{PROJECT}:{key}", err.value


def _snake(camel: str) -> str:
    return next(name for name in StackConfig.model_fields if to_camel(name) == camel)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats() | st.text(max_size=16),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
config_values = (
    json_values
    | json_values.map(lambda v: json.dumps(v, allow_nan=True))
    | st.sampled_from(
        ["", "0.0.0.0/0", '["0.0.0.0/1", "128.0.0.0/1"]', "262144", "false", "[exec_shell_command]", "nan"]
    )
)
documents = st.one_of(
    st.dictionaries(
        st.one_of(st.sampled_from(KEYS).map(lambda k: f"{PROJECT}:{k}"), st.text(max_size=10)),
        config_values,
        max_size=6,
    ).map(lambda config: yaml.safe_dump({"config": config})),
    st.text(max_size=60),
    st.sampled_from(["config: [unclosed", "config: 3", "- a\n- b", "config:\n  qwen36-mtp-l4:zones: {a: 1}"]),
)


@settings(
    max_examples=EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(document=documents)
def test_any_stack_file_ends_in_an_exit_code_and_one_line(
    document: str, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    project = tmp_path_factory.mktemp("project")
    (project / "Pulumi.fuzz.yaml").write_text(document, encoding="utf-8")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    # The bucket check's bounded retry is its own test's (tests/cli/test_faults.py): here only the
    # one line and the code matter, not 10 s of retries against the closed port per example.
    monkeypatch.setattr(stage_gcs, "BUCKET_RETRY_DEADLINE_S", 0.2)
    code = main(
        ["stage", "--stack", "fuzz", "--project-dir", str(project), "--bucket", "bkt", "--cache-dir",
         str(project / "cache"), "--from-hf"]
    )  # fmt: skip
    captured = capsys.readouterr()
    _check(code, captured.out, captured.err.replace("\r", ""))
    # A config that parsed reaches the bucket check, which the closed port refuses.
    assert code in (Exit.CONFIG, Exit.UNREACHABLE), captured.err
    if code == Exit.CONFIG:
        assert f"{PROJECT}:" in captured.err or "YAML" in captured.err or "mapping" in captured.err


def test_the_fuzzed_parsers_are_all_the_commands() -> None:
    assert set(COMMANDS) == {
        "stage",
        "bench",
        "load",
        "tune",
        "wait",
        "tunnel",
        "ssh",
        "logs",
        "wake",
        "status",
        "check",
        "keys list",
        "keys add",
        "keys rotate",
        "keys revoke",
        "verify",
    }
    assert all(FLAGS[c] for c in COMMANDS)
