"""``qwen36 check`` when the APIs do not answer as documented: never exit 0, each call within its bound.

Every API of the fake (tests/gcp_fake) answers the same fault: 401, 403, 429, 500 (Google's error
body for each, https://cloud.google.com/apis/design/errors#handling_errors), a 502 HTML page and junk
(what a proxy, a captive portal or a load balancer's own error page send: no Google document
describes them, they stand for whatever is not the API), a closed port and a blackhole (a port that
takes the connection and never answers). The token endpoint answers (the credentials are fine), so
every line after the project's is about the APIs. The backoff's pauses are recorded, not slept; the
blackhole runs with short timeouts, and the run is held to the bound the check computes from them
(``gcp.worst_case_s``).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import google.auth
import pytest

from qwen36.__main__ import main
from qwen36.check import gcp
from qwen36.errors import Exit
from tests.check.test_check import ALL_CLEAR, FAMILY, IMAGE, PROJECT, PROJECT_AT, pulumi_on_path, write_stack
from tests.gcp_fake.credentials import user_credentials
from tests.gcp_fake.project import HANG, FakeProject, Fault
from tests.gcp_fake.server import fake_gcp

HTML_502 = (
    b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1>"
    b"<p>The proxy server received an invalid response from an upstream server.</p></body></html>"
)
JUNK = b"\x00\xff\xfe garbage \x1b[2J"


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(gcp, "SLEEP", slept.append)
    return slept


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def run_check(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fault: Fault | None,
    *,
    api_root: str | None = None,
) -> tuple[list[str], int, float]:
    project = FakeProject(project_id=PROJECT, families={FAMILY: IMAGE}, fault=fault)
    write_stack(tmp_path, {})
    pulumi_on_path(tmp_path, monkeypatch)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    with fake_gcp(project) as root:
        creds = user_credentials(root, quota_project=PROJECT)
        monkeypatch.setattr(google.auth, "default", lambda scopes=None, **kw: (creds, None))
        capsys.readouterr()
        started = time.monotonic()
        code = main(["check", "--project-dir", str(tmp_path), "--api-root", api_root or root])
        elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return out.splitlines(), code, elapsed


UNREAD_ALL = (
    "result: could not check: 8 facts unread (apis, billing, quotas, zones, tooling image, org policies, "
    "permissions)"
)
NETWORK = "fix: check the network and https://status.cloud.google.com, then rerun the check"
PROXY = "fix: check the network (a proxy or captive portal answers for Google?), then rerun the check"
HTML_SEEN = "an HTML page ('<!DOCTYPE html><html><head><title>502 Bad Gateway</title></…')"

# The first line after the project's, for each fault: what answered, and what to do about it.
CASES = {
    "401": (
        Fault(401),
        "UNREAD apis: the project's APIs not read (401: Request had invalid authentication credentials.); "
        "fix: gcloud auth application-default login, then rerun the check",
    ),
    "403": (
        Fault(403),
        "UNREAD apis: the project's APIs not read (403: The caller does not have permission); fix: read the "
        "API's message: a role or the quota project's grant is missing; then rerun the check",
    ),
    "429": (
        Fault(429),
        "UNREAD apis: the project's APIs not read (429: Quota exceeded for quota metric 'Read requests' of "
        f"service. (after 3 tries)); {NETWORK}",
    ),
    "500": (
        Fault(500),
        "UNREAD apis: the project's APIs not read (500: Internal error encountered. (after 3 tries)); "
        + NETWORK,
    ),
    "502 html": (
        Fault(502, HTML_502, "text/html"),
        f"UNREAD apis: the project's APIs not read (502: {HTML_SEEN} (after 3 tries)); {NETWORK}",
    ),
    "200 junk": (
        Fault(200, JUNK, "application/octet-stream"),
        "UNREAD apis: the project's APIs not read (serviceusage answered 16 bytes that are not UTF-8 text "
        f"(b'\\x00\\xff\\xfe garbage '), not JSON); {PROXY}",
    ),
    "closed port": (
        None,
        "UNREAD apis: the project's APIs not read (serviceusage gave no answer (the connection was refused "
        f"or dropped) (after 3 tries)); {NETWORK}",
    ),
    "blackhole": (
        Fault(HANG),
        "UNREAD apis: the project's APIs not read (serviceusage gave no answer (no answer within 0.5 s) "
        f"(after 3 tries)); {NETWORK}",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_api_failing_the_same_way_is_never_a_pass(
    case: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    pauses: list[float],
) -> None:
    fault, first = CASES[case]
    # Short bounds, so that the blackhole's timeouts take seconds; the pauses are recorded.
    monkeypatch.setattr(gcp, "READ_TIMEOUT_S", 0.5)
    monkeypatch.setattr(gcp, "BUDGET_S", 20.0)
    lines, code, elapsed = run_check(
        tmp_path, monkeypatch, capsys, fault, api_root=closed_port() if case == "closed port" else None
    )
    assert code == Exit.UNCHECKED, lines
    assert lines[: PROJECT_AT + 1] == ALL_CLEAR[: PROJECT_AT + 1]
    facts = [line for line in lines[PROJECT_AT + 1 : -1] if not line.startswith("wait  ")]
    assert facts[0] == first
    assert all(line.startswith("UNREAD ") for line in facts), facts
    assert [line.split(":", 1)[0] for line in facts] == [
        "UNREAD apis", "UNREAD billing", "UNREAD quotas", "UNREAD quotas", "UNREAD zones",
        "UNREAD tooling image", "UNREAD org policies", "UNREAD permissions",
    ]  # fmt: skip
    assert lines[-1].startswith(UNREAD_ALL + "; 0 blockers, 0 warnings in the rest; fix the UNREAD lines")
    # Each retry said so first, and the run stayed within the bound the check computes from its own.
    waits = [line for line in lines if line.startswith("wait  ")]
    assert len(waits) == len(pauses)
    assert all(0 < p <= 2 * gcp.BACKOFF_S for p in pauses)
    if (fault is not None and fault.status in (429, 500, 502)) or case in ("closed port", "blackhole"):
        assert waits[0].startswith("wait  serviceusage: ") and waits[0].endswith(
            "trying again in 0.5 s (try 2 of 3)"
        )
    else:
        assert waits == []
    # The rest of the run (python, the pulumi stand-in, the token) is given 10 s on a loaded machine.
    assert elapsed < gcp.worst_case_s() + 10


def test_a_blackhole_past_the_budget_is_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], pauses: list[float]
) -> None:
    monkeypatch.setattr(gcp, "READ_TIMEOUT_S", 0.5)
    monkeypatch.setattr(gcp, "BUDGET_S", 0.3)
    lines, code, _ = run_check(tmp_path, monkeypatch, capsys, Fault(HANG))
    assert code == Exit.UNCHECKED
    assert lines[PROJECT_AT + 1] == (
        "UNREAD apis: the project's APIs not read (serviceusage gave no answer (no answer within 0.5 s)); "
        + NETWORK
    )
    assert lines[PROJECT_AT + 2] == (
        "UNREAD billing: the billing account not read (not tried: the check's 0.3 s for the APIs were "
        "spent); fix: check the network, then rerun the check"
    )


def test_a_transient_answer_then_the_real_one_is_all_clear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], pauses: list[float]
) -> None:
    lines, code, _ = run_check(tmp_path, monkeypatch, capsys, Fault(503, times=2))
    assert code == 0
    assert lines == [
        *ALL_CLEAR[: PROJECT_AT + 1],
        "wait  serviceusage: 503: The service is currently unavailable.; trying again in 0.5 s (try 2 of 3)",
        "wait  serviceusage: 503: The service is currently unavailable.; trying again in 1 s (try 3 of 3)",
        *ALL_CLEAR[PROJECT_AT + 1 :],
    ]
    assert pauses == [0.5, 1.0]


# Wrong-shaped 200s, one API at a time: each is unread, never a finding (a "missing" permission, a
# "disabled" API). The documented shapes are those tests/gcp_fake/shapes.py cites for each method.
SHAPES = {
    ":testIamPermissions": (
        b'{"permissions": "all"}',
        "UNREAD permissions: your permissions not read (cloudresourcemanager answered JSON of another shape "
        '({"permissions": "all"}), not a subset of the permissions asked); ' + PROXY,
    ),
    ":testIamPermissions ": (
        b'{"grants": []}',
        "UNREAD permissions: your permissions not read (cloudresourcemanager answered JSON of another shape "
        '({"grants": []}), not a list of permissions); ' + PROXY,
    ),
    "services:batchGet": (
        b"{}",
        "UNREAD apis: the project's APIs not read (serviceusage answered JSON of another shape ({}), not a "
        "list of services); " + PROXY,
    ),
    "services:batchGet ": (
        b'{"services": [{"name": "x", "state": "ON"}]}',
        "UNREAD apis: the project's APIs not read (serviceusage answered JSON of another shape "
        '({"services": [{"name": "x", "state": "ON"}]}), not a service\'s state); ' + PROXY,
    ),
    "/billingInfo": (
        b"[1,2,3]",
        "UNREAD billing: the billing account not read (cloudbilling answered JSON of another shape ([1, 2, "
        "3]), not a project's billing info); " + PROXY,
    ),
    ":getEffectivePolicy": (
        b"null",
        "UNREAD org policies: the organization policies not read (orgpolicy answered JSON of another shape "
        "(null), not a policy); " + PROXY,
    ),
    "/compute/v1/projects/acme-llm": (
        b'{"quotas": 5}',
        "UNREAD quotas: the project's GPU quota not read (compute Projects.get answered JSON of another "
        'shape ({"quotas": 5}), not its documented JSON); ' + PROXY,
    ),
}


@pytest.mark.parametrize("where", list(SHAPES))
def test_a_wrong_shaped_answer_is_unread_never_a_finding(
    where: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    pauses: list[float],
) -> None:
    body, line = SHAPES[where]
    fault = Fault(200, body, path_contains=where.strip(), times=1)
    lines, code, _ = run_check(tmp_path, monkeypatch, capsys, fault)
    assert code == Exit.UNCHECKED, lines
    assert line in lines
    assert not [x for x in lines if x.startswith("BLOCK")]
    assert pauses == []


def test_a_disabled_service_usage_api_is_a_blocker_with_its_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project_enabled = set(FakeProject().enabled) - {"serviceusage.googleapis.com"}
    lines, code = _with_enabled(tmp_path, monkeypatch, capsys, project_enabled)
    assert code == Exit.FAILED
    assert lines[PROJECT_AT + 1] == (
        "BLOCK apis: serviceusage.googleapis.com is disabled in project 123456789012: the deploy enables the "
        "APIs it needs through it, and nothing else can be read about them; fix: gcloud services enable "
        "serviceusage.googleapis.com --project=123456789012"
    )
    assert lines[-1] == "result: 1 blocker, 0 warnings: the deploy would stop; fix the BLOCK lines first"


def test_a_project_with_every_api_disabled_blocks_and_passes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines, code = _with_enabled(tmp_path, monkeypatch, capsys, set())
    assert code == Exit.FAILED
    facts = lines[PROJECT_AT + 1 : -1]
    assert facts[0].startswith("BLOCK apis: serviceusage.googleapis.com is disabled")
    assert all(line.startswith("UNREAD ") for line in facts[1:]), facts
    assert facts[1] == (
        "UNREAD billing: the billing account not read: cloudbilling.googleapis.com is disabled in project "
        "123456789012; fix: gcloud services enable cloudbilling.googleapis.com --project=123456789012, then "
        "rerun the check"
    )
    assert (
        lines[-1]
        == "result: 1 blocker, 0 warnings, 7 unread: the deploy would stop; fix the BLOCK lines first"
    )


def _with_enabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], enabled: set[str]
) -> tuple[list[str], int]:
    original = FakeProject.__init__

    def init(self: FakeProject, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        self.enabled = set(enabled)

    monkeypatch.setattr(FakeProject, "__init__", init)
    lines, code, _ = run_check(tmp_path, monkeypatch, capsys, None)
    return lines, code


def test_a_stack_file_that_is_not_yaml_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "Pulumi.dev.yaml").write_text("config: [unclosed\n")
    assert main(["check", "--project-dir", str(tmp_path)]) == Exit.CONFIG
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("check: error: Pulumi.dev.yaml is not valid YAML (")
    assert line.endswith("); fix it or recreate the stack")


@pytest.mark.parametrize(
    ("version", "line", "code"),
    [
        ("v3.173.0", "BLOCK pulumi: v3.173.0 is older than v3.174.0, which the deploy needs for "
         "import-then-update of the kept VPC, subnet and bucket (pulumi/pulumi#19339); fix: upgrade it: "
         "https://www.pulumi.com/docs/install/", Exit.MISSING_TOOL),
        ("v3.174.0", "ok    pulumi: v3.174.0 (the deploy needs v3.174.0 or later)", 0),
        ("v3.211.0-alpha.1767", "ok    pulumi: v3.211.0 (the deploy needs v3.174.0 or later)", 0),
        ("warning: no version", "UNREAD pulumi: `pulumi version` printed 'warning: no version', not a "
         "version; fix: reinstall it: https://www.pulumi.com/docs/install/", Exit.UNCHECKED),
    ],
)  # fmt: skip
def test_the_pulumi_cli_version(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    version: str,
    line: str,
    code: int,
) -> None:
    monkeypatch.setenv("PULUMI_STUB_VERSION", version)
    lines, exit_code, _ = run_check(tmp_path, monkeypatch, capsys, None)
    assert lines[1] == line
    assert exit_code == code


def test_no_pulumi_cli_is_exit_9_after_the_other_facts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = FakeProject(project_id=PROJECT, families={FAMILY: IMAGE})
    write_stack(tmp_path, {})
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with fake_gcp(project) as root:
        creds = user_credentials(root, quota_project=PROJECT)
        monkeypatch.setattr(google.auth, "default", lambda scopes=None, **kw: (creds, None))
        code = main(["check", "--project-dir", str(tmp_path), "--api-root", root])
    lines = capsys.readouterr().out.splitlines()
    assert code == Exit.MISSING_TOOL
    assert lines[1] == (
        "BLOCK pulumi: the Pulumi CLI is not installed (not on PATH); fix: install it: "
        "https://www.pulumi.com/docs/install/"
    )
    assert lines[2:-1] == ALL_CLEAR[2:-1]
