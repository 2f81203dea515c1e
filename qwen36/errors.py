"""The CLI's one error path: every expected failure is a :class:`QwenError` with a one-line message
and an exit code from :class:`Exit`; ``qwen36/__main__.py`` prints it and exits with it.

Library exceptions that reach the dispatcher (a Google API error, no credentials, a dropped
connection, a local file that cannot be written) are turned into the same form by :func:`as_error`,
so the same cause gives the same code in every command. Anything else is a bug in our own code:
one line that says so, and the traceback only with ``--debug`` or ``QWEN36_DEBUG=1``.

``python -m qwen36.errors`` prints the exit-code table the docs carry (tests/cli keep them equal).
"""

from __future__ import annotations

import enum
import subprocess
from typing import Any

DEBUG_ENV = "QWEN36_DEBUG"
# One line on a terminal: longer library messages are cut here.
MAX_DETAIL = 300


class Exit(enum.IntEnum):
    """Exit codes, one per cause; ``CAUSES`` says what each means and what to do."""

    OK = 0
    FAILED = 1
    USAGE = 2
    CONFIG = 3
    VERIFY = 4
    NO_CREDENTIALS = 5
    DENIED = 6
    UNREACHABLE = 7
    NOT_FOUND = 8
    MISSING_TOOL = 9
    API_ERROR = 10
    LOCAL_IO = 11
    UNCHECKED = 12
    BUG = 70  # sysexits.h EX_SOFTWARE
    INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


CAUSES: dict[Exit, tuple[str, str]] = {
    Exit.OK: ("done", ""),
    Exit.FAILED: (
        "the command ran and what it waits for or measures failed: the server did not become ready, "
        "has no running member, requests failed",
        "read the line (and the diagnosis above it); `qwen36 status` shows the group",
    ),
    Exit.USAGE: (
        "a flag or argument is wrong (unknown, missing, out of range, NaN, an output path that "
        "cannot be written)",
        "fix the flag the line names; `--help` lists them",
    ),
    Exit.CONFIG: (
        "the stack config is invalid, or its stack file (Pulumi.STACK.yaml) is not YAML",
        "fix the key the line names (`pulumi config set ...`)",
    ),
    Exit.VERIFY: (
        "content is not what the stack pins: a sha256, size or GGUF architecture that disagrees",
        "use the pinned file, fix modelSha256/modelSizeBytes, or `stage --force`",
    ),
    Exit.NO_CREDENTIALS: (
        "no usable Google credentials on this machine",
        "`gcloud auth application-default login`",
    ),
    Exit.DENIED: (
        "the credentials or the API key were refused (HTTP 401/403, an organization policy)",
        "grant the role the line names, or pass the right key",
    ),
    Exit.UNREACHABLE: (
        "a service did not answer, kept answering 429/5xx after the bounded retries, or answered what "
        "is not its API (an HTML page, junk, JSON of another shape: often a proxy or captive portal)",
        "check the network, the URL or the service's status page, and rerun",
    ),
    Exit.NOT_FOUND: (
        "the stack, its outputs, the group, the bucket or the hub file does not exist",
        "check the name; deploy first (`pulumi up`) when the stack has no outputs yet",
    ),
    Exit.MISSING_TOOL: (
        "a command-line tool the command needs (pulumi, gcloud, llama-server) is not installed",
        "install it, or pass the values it would have read (e.g. --project/--region/--group)",
    ),
    Exit.API_ERROR: (
        "a cloud API refused the request for a reason retrying does not fix (400, 409, 412, quota)",
        "read the API's message in the line",
    ),
    Exit.LOCAL_IO: (
        "a local file or folder could not be read or written",
        "check the path and its permissions; a report that could not be written is kept where the line says",
    ),
    Exit.UNCHECKED: (
        "`qwen36 check` found no blocker but could not read every fact it checks (an API refused, did "
        "not answer or answered junk), so it cannot say the deploy will pass",
        "read the UNREAD lines and their fixes, then rerun; `scripts/deploy.sh --skip-check` deploys anyway",
    ),
    Exit.BUG: (
        "a bug in this project's code",
        f"rerun with --debug (or {DEBUG_ENV}=1) for the traceback and report it",
    ),
    Exit.INTERRUPTED: ("interrupted (Ctrl-C); what the command started was stopped", "rerun it"),
}


class QwenError(Exception):
    """An expected failure: ``message`` is one line that names what failed and what to do."""

    exit_code: int = Exit.FAILED

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(one_line(message))
        self.message = one_line(message)
        if exit_code is not None:
            self.exit_code = int(exit_code)


class UsageError(QwenError):
    exit_code = Exit.USAGE


class ConfigFileError(QwenError):
    exit_code = Exit.CONFIG


class VerifyError(QwenError):
    exit_code = Exit.VERIFY


class CredentialsError(QwenError):
    exit_code = Exit.NO_CREDENTIALS


class DeniedError(QwenError):
    exit_code = Exit.DENIED


class UnreachableError(QwenError):
    exit_code = Exit.UNREACHABLE


class NotFoundError(QwenError):
    exit_code = Exit.NOT_FOUND


class MissingToolError(QwenError):
    exit_code = Exit.MISSING_TOOL


class ApiError(QwenError):
    exit_code = Exit.API_ERROR


class LocalIOError(QwenError):
    exit_code = Exit.LOCAL_IO


class BadAnswerError(QwenError):
    """A cloud API answered something that is not its documented answer (qwen36/cloud_answers.py)."""

    exit_code = Exit.UNREACHABLE


def one_line(text: str, limit: int = 0) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters when given."""
    flat = " ".join(str(text).split())
    if limit and len(flat) > limit:
        return flat[: limit - 1] + "…"
    return flat


def detail(exc: BaseException) -> str:
    """An exception's own message, one line and bounded, with its type when the message is empty."""
    text = one_line(str(exc), MAX_DETAIL)
    return text or type(exc).__name__


# ------------------------------------------------------------------------------ library errors


def _google_api_error(exc: Exception) -> QwenError | None:
    try:
        from google.api_core import exceptions as gexc
    except ImportError:  # pragma: no cover (a dependency of every Google client we use)
        return None
    if not isinstance(exc, gexc.GoogleAPIError):
        return None
    text = detail(exc)
    if isinstance(exc, gexc.NotFound):
        return NotFoundError(f"the API answered 404 Not Found: {text}; check the names given")
    if isinstance(exc, gexc.Unauthorized):
        return CredentialsError(
            f"the API refused the credentials (401): {text}; run `gcloud auth application-default login`"
        )
    if isinstance(exc, gexc.Forbidden | gexc.PermissionDenied):
        return DeniedError(f"the API denied the request (403): {text}; grant the role it names")
    if is_transient_google(exc):
        return UnreachableError(f"the API kept failing: {text}; rerun later")
    return ApiError(f"the API refused the request: {text}")


def is_transient_google(exc: BaseException) -> bool:
    """429 and 5xx answers the Google client libraries raise, which a retry may cure."""
    try:
        from google.api_core import exceptions as gexc
    except ImportError:  # pragma: no cover
        return False
    return isinstance(
        exc,
        gexc.TooManyRequests
        | gexc.InternalServerError
        | gexc.BadGateway
        | gexc.ServiceUnavailable
        | gexc.GatewayTimeout
        | gexc.DeadlineExceeded,
    )


def is_connection_error(exc: BaseException) -> bool:
    """A dropped or refused connection, a DNS failure or a timeout, in any of the HTTP stacks used."""
    try:
        import requests
    except ImportError:  # pragma: no cover
        requests = None  # type: ignore[assignment]
    try:
        import httpx
    except ImportError:  # pragma: no cover
        httpx = None  # type: ignore[assignment]
    try:
        from google.auth import exceptions as auth_exc
    except ImportError:  # pragma: no cover
        auth_exc = None  # type: ignore[assignment]
    kinds: list[type[BaseException]] = [ConnectionError, TimeoutError]
    if requests is not None:
        kinds += [requests.exceptions.ConnectionError, requests.exceptions.Timeout]
    if httpx is not None:
        kinds.append(httpx.TransportError)
    try:
        import httpx2  # huggingface_hub 2.x's HTTP client
    except ImportError:
        pass
    else:
        kinds.append(httpx2.TransportError)
    if auth_exc is not None:
        kinds.append(auth_exc.TransportError)
    return isinstance(exc, tuple(kinds))


def as_error(exc: BaseException) -> QwenError | None:
    """The expected-failure form of a library exception; None for anything else (a bug)."""
    if isinstance(exc, QwenError):
        return exc
    if isinstance(exc, KeyboardInterrupt):
        return QwenError("interrupted", Exit.INTERRUPTED)
    try:
        from google.auth import exceptions as auth_exc
    except ImportError:  # pragma: no cover
        auth_exc = None  # type: ignore[assignment]
    if auth_exc is not None and isinstance(exc, auth_exc.DefaultCredentialsError):
        return CredentialsError(
            f"no usable Google application-default credentials ({detail(exc)[:160]}); run "
            "`gcloud auth application-default login`"
        )
    if auth_exc is not None and isinstance(exc, auth_exc.RefreshError):
        return CredentialsError(
            f"the Google credentials could not be refreshed ({detail(exc)}); run "
            "`gcloud auth application-default login` again"
        )
    if not isinstance(exc, Exception):
        return None
    google = _google_api_error(exc)
    if google is not None:
        return google
    unparsed = _unparsed_answer(exc)
    if unparsed is not None:
        return unparsed
    if is_connection_error(exc):
        return UnreachableError(
            f"no answer ({type(exc).__name__}: {detail(exc)}); check the network or the endpoint and rerun"
        )
    config = _config_error(exc)
    if config is not None:
        return config
    if isinstance(exc, subprocess.TimeoutExpired):
        return UnreachableError(f"`{_argv(exc.cmd)}` did not finish within {exc.timeout:g} s; rerun")
    if isinstance(exc, FileNotFoundError) and exc.filename and "/" not in str(exc.filename):
        return MissingToolError(f"{exc.filename} is not installed (not on PATH)")
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        return LocalIOError(f"cannot use{where}: {exc.strerror or detail(exc)}")
    return None


def _unparsed_answer(exc: Exception) -> QwenError | None:
    """protobuf's ParseError comes only from a client library reading an answer: a net under the
    boundary (qwen36/cloud_answers.py), which names the API and what came back."""
    try:
        from google.protobuf.json_format import ParseError
    except ImportError:  # pragma: no cover (google-cloud-compute's own dependency)
        return None
    if isinstance(exc, ParseError):
        return BadAnswerError(
            f"a Google API answered what is not its documented JSON ({detail(exc)}); a proxy or "
            "captive portal may stand in the way: check the network and rerun"
        )
    return None


def _config_error(exc: Exception) -> QwenError | None:
    try:
        from infra.config import ConfigError
    except ImportError:  # pragma: no cover
        return None
    if isinstance(exc, ConfigError):
        return ConfigFileError(str(exc))
    return None


def _argv(cmd: Any) -> str:
    return " ".join(cmd) if isinstance(cmd, list | tuple) else str(cmd)


# ------------------------------------------------------------------------------------ the table


def exit_code_table() -> str:
    """The Markdown table of exit codes (the docs carry it verbatim)."""
    rows = ["| code | meaning | what to do |", "| ---: | --- | --- |"]
    for code in Exit:
        meaning, action = CAUSES[code]
        rows.append(f"| {int(code)} | {meaning} | {action} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(exit_code_table())
