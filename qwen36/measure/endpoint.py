"""Where the server is and which key it wants: flags, then environment, then the stack outputs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from qwen36.argtypes import api_key_problem
from qwen36.errors import Exit, QwenError

URL_ENV = "QWEN36_URL"
API_KEY_ENV = "QWEN36_API_KEY"
STACK_OUTPUT_TIMEOUT_S = 60
# The deployed stack exports these (see __main__.py); apiBaseUrl may end in /v1.
URL_OUTPUTS = ("apiBaseUrl", "webUiUrl")
KEY_OUTPUT = "apiKey"


class EndpointConfigError(QwenError):
    """No usable URL; the message says where to get one."""

    exit_code = Exit.USAGE


def check_url(url: str, source: str) -> str:
    """``url`` if httpx can send to it: http(s), a host, a valid port. A bare ``host:port`` gets
    ``http://`` (as ``normalize_url`` does); any other scheme is refused rather than prefixed."""
    text = url.strip()
    if not text:
        raise EndpointConfigError(f"{source} is empty; give the server's URL, e.g. http://localhost:8080")
    if not text.isascii() or any(ord(c) < 33 or ord(c) == 127 for c in text):
        raise EndpointConfigError(
            f"{source} {url!r} holds a space, a control or a non-ASCII character (an IDN host in its "
            "xn-- form)"
        )
    candidate = text if "://" in text else f"http://{text}"
    try:
        parts = urlsplit(candidate)
        port = parts.port
    except ValueError as exc:
        raise EndpointConfigError(f"{source} {url!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise EndpointConfigError(f"{source} {url!r}: only http:// and https:// URLs are served here")
    if not parts.hostname:
        raise EndpointConfigError(f"{source} {url!r} names no host")
    del port  # parsed only to refuse a bad one
    return text


@dataclass(frozen=True)
class Endpoint:
    url: str
    api_key: str | None
    source: str


def project_root(start: Path) -> Path | None:
    """The nearest folder holding Pulumi.yaml, i.e. whether we run inside the project."""
    for folder in (start, *start.parents):
        if (folder / "Pulumi.yaml").is_file():
            return folder
    return None


def stack_outputs(root: Path, stack: str | None = None) -> dict[str, object]:
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise EndpointConfigError(
            "the pulumi CLI is not installed, so the endpoint cannot be read from the stack outputs: "
            f"pass --url and --api-key (or set {URL_ENV} and {API_KEY_ENV})",
            Exit.MISSING_TOOL,
        )
    command = [pulumi, "stack", "output", "--json", "--show-secrets"]
    if stack:
        command += ["--stack", stack]
    try:
        result = subprocess.run(
            command, cwd=root, capture_output=True, text=True, timeout=STACK_OUTPUT_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise EndpointConfigError(
            f"'pulumi stack output' took over {STACK_OUTPUT_TIMEOUT_S} s: "
            "check `pulumi whoami`, or pass --url",
            Exit.UNREACHABLE,
        ) from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no error text"])[-1]
        raise EndpointConfigError(
            f"'pulumi stack output' failed ({last}): select a stack (pulumi stack select) or pass --url",
            Exit.NOT_FOUND,
        )
    try:
        outputs = json.loads(result.stdout or "{}")
    except json.JSONDecodeError:
        raise EndpointConfigError(
            "'pulumi stack output --json' did not print JSON: pass --url", Exit.FAILED
        ) from None
    return outputs if isinstance(outputs, dict) else {}


def resolve(
    url: str | None,
    api_key: str | None,
    *,
    cwd: Path | None = None,
    stack: str | None = None,
    environ: dict[str, str] | None = None,
) -> Endpoint:
    env = os.environ if environ is None else environ
    key = api_key or env.get(API_KEY_ENV) or None
    if key is not None:
        check_key(key, "--api-key" if api_key else API_KEY_ENV)
    if url:
        return Endpoint(check_url(url, "--url"), key, "--url")
    if env.get(URL_ENV):
        return Endpoint(check_url(env[URL_ENV], URL_ENV), key, URL_ENV)
    root = project_root((cwd or Path.cwd()).resolve())
    if root is None:
        raise EndpointConfigError(
            f"no endpoint given: pass --url (or set {URL_ENV}), or run inside the project to use "
            "the stack outputs"
        )
    outputs = stack_outputs(root, stack)
    found = next((str(outputs[name]) for name in URL_OUTPUTS if outputs.get(name)), None)
    if found is None:
        raise EndpointConfigError(
            "the stack has no apiBaseUrl output yet: run `pulumi up` first, or pass --url", Exit.NOT_FOUND
        )
    stack_key = outputs.get(KEY_OUTPUT)
    if key is None and stack_key:
        key = check_key(str(stack_key), "the stack's apiKey output")
    return Endpoint(check_url(found, "the stack's apiBaseUrl output"), key, "pulumi stack output")


def check_key(key: str, source: str) -> str:
    problem = api_key_problem(key)
    if problem:
        raise EndpointConfigError(f"the API key from {source} {problem}")
    return key
