"""``python -m qwen36 check`` against the fake APIs: each blocker changes exactly its own lines, and the
exit code says whether the deploy would stop.

The whole output of the all-clear project is written out once (``ALL_CLEAR``); every other test
stages one problem on a copy of that project and asserts the full output line by line: the lines
that change, and that every other line stays as it was. The credentials are the user kind
``gcloud auth application-default login`` leaves, refreshed by google-auth against the fake's token
endpoint; one test finds a service-account key through ``GOOGLE_APPLICATION_CREDENTIALS`` instead,
and one runs the real CLI in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import google.auth
import pytest
import yaml

from qwen36.__main__ import main
from qwen36.errors import Exit
from tests.gcp_fake.credentials import service_account_file, user_credentials
from tests.gcp_fake.project import FakeProject
from tests.gcp_fake.server import fake_gcp

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "tests" / "deploy" / "pulumi_stub.py"
PROJECT = "acme-llm"
FAMILY = "qwen36-mtp-l4-tooling-b11434"
IMAGE = f"{FAMILY}-0a1b2c3d-73012345"
EDIT = "edit"
SEE = "gcloud org-policies describe {c} --project=acme-llm --effective"
EXCEPTION = (
    "ask your organization's policy administrator for an exception on project acme-llm "
    "(e.g. gcloud org-policies reset {c} --project=acme-llm, which needs roles/orgpolicy.policyAdmin); "
    "see it: " + SEE
)
ASK = (
    "ask for {n} at https://console.cloud.google.com/iam-admin/quotas?project=acme-llm (filter by {m}); "
    "see it: {show}"
)
PROJECT_SHOW = "gcloud compute project-info describe --project=acme-llm --format='json(quotas)'"
REGION_SHOW = "gcloud compute regions describe us-central1 --project=acme-llm --format='json(quotas)'"
ROLES = (
    "gcloud projects get-iam-policy acme-llm --flatten='bindings[].members' "
    "--filter='bindings.members:user:alice@example.com' --format='value(bindings.role)'"
)

PULUMI_OK = "ok    pulumi: v3.210.0 (the deploy needs v3.174.0 or later)"
ALL_CLEAR = [
    "check: stack dev (Pulumi.dev.yaml)",
    PULUMI_OK,
    "ok    credentials: user account alice@example.com (from `gcloud auth application-default login`); "
    "quota project acme-llm",
    "ok    project: acme-llm (gcp:project in Pulumi.dev.yaml): region us-central1, zones us-central1-a, "
    "us-central1-b, us-central1-c, 1 server of g2-standard-8 with 1 nvidia-l4 (SPOT)",
    "ok    apis: all 11 the deploy calls are enabled",
    "ok    billing: enabled (billingAccounts/0123AB-4567CD-89EF01)",
    "ok    quota GPUS_ALL_REGIONS: limit 4 in all regions, 0 in use: the stack needs 1",
    "ok    quota PREEMPTIBLE_NVIDIA_L4_GPUS: limit 4 in us-central1, 0 in use: the stack needs 1",
    "ok    zones: nvidia-l4 is offered in us-central1-a, us-central1-b, us-central1-c",
    f"ok    tooling image: {IMAGE} in family {FAMILY}: no bake",
    "ok    org policy compute.vmExternalIpAccess: not restricted",
    "ok    org policy compute.requireShieldedVm: not enforced",
    "ok    org policy compute.requireOsLogin: not enforced (and would not block: the members and the "
    "image builder set enable-oslogin=TRUE)",
    "ok    org policy gcp.resourceLocations: not set",
    "ok    org policy compute.trustedImageProjects: not set",
    "ok    org policy iam.disableServiceAccountCreation: not enforced",
    "ok    org policy compute.disableGuestAttributesAccess: not enforced",
    "ok    org policy gcp.restrictServiceUsage: not set",
    "ok    org policy gcp.restrictNonCmekServices: not set",
    "ok    org policy compute.restrictNonConfidentialComputing: not set",
    "ok    org policy run.managed.requireInvokerIam: not enforced (the door turns Cloud Run's invoker "
    "check off and checks the key)",
    "ok    org policy run.allowedIngress: not set",
    "ok    org policy run.allowedVPCEgress: not set",
    "ok    permissions: all 95 the deploy needs are granted (infra/required_permissions.py)",
    "result: 0 blockers, 0 warnings: all clear",
]

PROJECT_AT = next(i for i, line in enumerate(ALL_CLEAR) if line.startswith("ok    project:"))


def with_lines(replace: dict[str, str | list[str]], result: str) -> list[str]:
    """``ALL_CLEAR`` with the line of each subject (``"quota GPUS_ALL_REGIONS"``) replaced, and the result."""
    out: list[str] = []
    for line in ALL_CLEAR[:-1]:
        subject = line[6:].split(":", 1)[0]
        new = replace.get(subject, line)
        out += new if isinstance(new, list) else [new]
    unused = set(replace) - {line[6:].split(":", 1)[0] for line in ALL_CLEAR}
    assert not unused, f"no line for {unused}"
    return [*out, result]


def blocked(n: int, warnings: int = 0) -> str:
    return (
        f"result: {n} blocker{'s' * (n != 1)}, {warnings} warning{'s' * (warnings != 1)}: "
        "the deploy would stop; fix the BLOCK lines first"
    )


def unchecked(subjects: list[str], blockers: int = 0, warnings: int = 0) -> str:
    n = len(subjects)
    return (
        f"result: could not check: {n} fact{'s' * (n != 1)} unread ({', '.join(dict.fromkeys(subjects))}); "
        f"{blockers} blocker{'s' * (blockers != 1)}, {warnings} warning{'s' * (warnings != 1)} in the rest; "
        "fix the UNREAD lines and rerun (scripts/deploy.sh --skip-check deploys without the check)"
    )


def warned(n: int) -> str:
    return f"result: 0 blockers, {n} warning{'s' * (n != 1)}: nothing blocks the deploy; read the warn lines"


@pytest.fixture
def project() -> FakeProject:
    return FakeProject(project_id=PROJECT, families={FAMILY: IMAGE})


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    write_stack(tmp_path, {})
    return tmp_path


def write_stack(directory: Path, overrides: dict[str, Any], *, gcp_project: str | None = PROJECT) -> None:
    document = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    config = dict(document["config"])
    config.update({f"qwen36-mtp-l4:{k}": v for k, v in overrides.items()})
    if gcp_project:
        config["gcp:project"] = gcp_project
    (directory / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}))


Runner = Callable[..., tuple[list[str], int]]


def pulumi_on_path(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tests/deploy/pulumi_stub.py as `pulumi` on PATH (its `pulumi version` prints v3.210.0)."""
    bin_dir = directory / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "pulumi"
    stub.write_text(f'#!/bin/sh\nexec {sys.executable} {STUB} "$@"\n')
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return bin_dir


@pytest.fixture
def check(
    project: FakeProject,
    project_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[Runner]:
    """Runs the check against the fake with the user's ADC; returns (stdout lines, exit code)."""
    pulumi_on_path(tmp_path, monkeypatch)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    with fake_gcp(project) as root:

        def run(*extra: str, quota_project: str | None = PROJECT, adc: Any = None) -> tuple[list[str], int]:
            creds = user_credentials(root, quota_project=quota_project)
            monkeypatch.setattr(google.auth, "default", adc or (lambda scopes=None, **kw: (creds, None)))
            capsys.readouterr()
            code = main(
                ["check", "--stack", "dev", "--project-dir", str(project_dir), "--api-root", root, *extra]
            )
            return capsys.readouterr().out.splitlines(), code

        yield run


def test_all_clear(check: Runner, project: FakeProject) -> None:
    lines, code = check()
    assert lines == ALL_CLEAR
    assert code == 0
    # What it read, and that every call carried the quota project of the ADC.
    api_calls = [r for r in project.requests if r.path != "/token"]
    assert {r.headers.get("x-goog-user-project") for r in api_calls} == {PROJECT}
    assert [r.path for r in api_calls][:3] == [
        f"/serviceusage/v1/projects/{PROJECT}/services:batchGet",
        f"/cloudbilling/v1/projects/{PROJECT}/billingInfo",
        f"/compute/v1/projects/{PROJECT}",
    ]


def test_no_gpu_quota_in_all_regions(check: Runner, project: FakeProject) -> None:
    project.project_quotas["GPUS_ALL_REGIONS"] = (0, 0)
    lines, code = check()
    assert lines == with_lines(
        {
            "quota GPUS_ALL_REGIONS": "BLOCK quota GPUS_ALL_REGIONS: limit 0 in all regions: the stack needs "
            "1; "
            "fix: " + ASK.format(n=1, m="GPUS_ALL_REGIONS", show=PROJECT_SHOW)
        },
        blocked(1),
    )
    assert code == 1


def test_no_spot_l4_quota_in_the_region(check: Runner, project: FakeProject) -> None:
    project.region_quotas["us-central1"].update(PREEMPTIBLE_NVIDIA_L4_GPUS=(0, 0), NVIDIA_L4_GPUS=(0, 0))
    lines, code = check()
    assert lines == with_lines(
        {
            "quota PREEMPTIBLE_NVIDIA_L4_GPUS": "BLOCK quota PREEMPTIBLE_NVIDIA_L4_GPUS: limit 0 in "
            "us-central1: "
            "the stack needs 1; fix: " + ASK.format(n=1, m="PREEMPTIBLE_NVIDIA_L4_GPUS", show=REGION_SHOW)
        },
        blocked(1),
    )
    assert code == 1


def test_no_spot_quota_but_on_demand_quota_warns(check: Runner, project: FakeProject) -> None:
    project.region_quotas["us-central1"].update(PREEMPTIBLE_NVIDIA_L4_GPUS=(0, 0), NVIDIA_L4_GPUS=(2, 1))
    lines, code = check()
    assert lines == with_lines(
        {
            "quota PREEMPTIBLE_NVIDIA_L4_GPUS": "warn  quota PREEMPTIBLE_NVIDIA_L4_GPUS: 0 in us-central1: "
            "spot "
            "servers then count against NVIDIA_L4_GPUS (limit 2, 1 in use), per the Spot VM docs; fix: ask "
            "for 1 "
            "PREEMPTIBLE_NVIDIA_L4_GPUS at "
            "https://console.cloud.google.com/iam-admin/quotas?project=acme-llm "
            f"to keep them apart; see it: {REGION_SHOW}"
        },
        warned(1),
    )
    assert code == 0


def test_on_demand_servers_need_the_on_demand_quota(
    check: Runner, project: FakeProject, project_dir: Path
) -> None:
    write_stack(project_dir, {"provisioningModel": "STANDARD"})
    project.region_quotas["us-central1"]["NVIDIA_L4_GPUS"] = (0, 0)
    lines, code = check()
    expected = with_lines(
        {
            "quota PREEMPTIBLE_NVIDIA_L4_GPUS": "BLOCK quota NVIDIA_L4_GPUS: limit 0 in us-central1: the "
            "stack "
            "needs 1; fix: " + ASK.format(n=1, m="NVIDIA_L4_GPUS", show=REGION_SHOW)
        },
        blocked(1),
    )
    expected[PROJECT_AT] = expected[PROJECT_AT].replace("(SPOT)", "(STANDARD)")
    assert lines == expected
    assert code == 1


def test_an_autoscaled_fleet_above_the_quota_warns_and_below_its_floor_blocks(
    check: Runner, project: FakeProject, project_dir: Path
) -> None:
    write_stack(
        project_dir,
        {"minReplicas": 2, "maxReplicas": 4, "sourceRanges": ["203.0.113.0/24"], "idleStopMinutes": 0},
    )
    project.region_quotas["us-central1"]["PREEMPTIBLE_NVIDIA_L4_GPUS"] = (3, 0)
    project.project_quotas["GPUS_ALL_REGIONS"] = (1, 0)
    lines, code = check()
    by_subject = {line[6:].split(":", 1)[0]: line for line in lines[1:-1]}
    assert by_subject["quota GPUS_ALL_REGIONS"] == (
        "BLOCK quota GPUS_ALL_REGIONS: limit 1 in all regions: the stack needs 2, up to 4 when it scales "
        "out; "
        "fix: " + ASK.format(n=4, m="GPUS_ALL_REGIONS", show=PROJECT_SHOW)
    )
    assert by_subject["quota PREEMPTIBLE_NVIDIA_L4_GPUS"] == (
        "warn  quota PREEMPTIBLE_NVIDIA_L4_GPUS: limit 3 in us-central1: the autoscaler can reach only 3 of "
        "4; "
        "fix: " + ASK.format(n=4, m="PREEMPTIBLE_NVIDIA_L4_GPUS", show=REGION_SHOW)
    )
    # The fleet's load balancer adds its own constraint and its permissions.
    assert by_subject["org policy compute.restrictLoadBalancerCreationForTypes"] == (
        "ok    org policy compute.restrictLoadBalancerCreationForTypes: not set"
    )
    assert lines[-1] == blocked(1, 1) and code == 1


def test_org_policies_that_block_and_one_that_does_not(check: Runner, project: FakeProject) -> None:
    project.policies.update(
        {
            "compute.vmExternalIpAccess": {"rules": [{"denyAll": True}]},
            "compute.requireOsLogin": {"rules": [{"enforce": True}]},
            "gcp.resourceLocations": {"rules": [{"values": {"allowedValues": ["in:europe-locations"]}}]},
            "compute.trustedImageProjects": {"rules": [{"values": {"allowedValues": ["projects/acme-llm"]}}]},
        }
    )
    lines, code = check()
    ip = "compute.vmExternalIpAccess"
    assert lines == with_lines(
        {
            f"org policy {ip}": f"ok    org policy {ip}: restricted; does not block: the stack needs no "
            "external IP (Cloud NAT carries the VMs' egress)",
            "org policy compute.requireOsLogin": "ok    org policy compute.requireOsLogin: enforced; does "
            "not "
            "block: the members and the image builder set enable-oslogin=TRUE",
            "org policy gcp.resourceLocations": "BLOCK org policy gcp.resourceLocations: refuses "
            "us-central1, "
            "us-central1-a, us-central1-b, us-central1-c: the VMs, subnet, template, group and bucket "
            "live in us-central1 and its zones; scripts/deploy.sh's KMS key ring for the stack's secrets is "
            "in global, and so is the API key's secret (automatic replication); fix: "
            "deploy to a region the policy allows (qwen36-mtp-l4:region and :zones in Pulumi.dev.yaml), or "
            + EXCEPTION.format(c="gcp.resourceLocations"),
            "org policy compute.trustedImageProjects": "BLOCK org policy compute.trustedImageProjects: "
            "refuses "
            "projects/deeplearning-platform-release: the servers boot "
            "deeplearning-platform-release/common-cu129-ubuntu-2204-nvidia-580 and this project's tooling "
            "image; fix: " + EXCEPTION.format(c="compute.trustedImageProjects"),
        },
        blocked(2),
    )
    assert code == 1


def test_external_ips_denied_pass_without_the_opt_in_and_block_with_it(
    check: Runner, project: FakeProject, project_dir: Path
) -> None:
    ip = "compute.vmExternalIpAccess"
    project.policies[ip] = {"rules": [{"denyAll": True}]}
    lines, code = check()
    assert f"ok    org policy {ip}: restricted; does not block: the stack needs no external IP " in "\n".join(
        lines
    )
    assert code == 0
    write_stack(project_dir, {"externalIp": True})
    lines, code = check()
    line = next(x for x in lines if f"org policy {ip}:" in x)
    assert line == (
        f"BLOCK org policy {ip}: denies every VM an external IP: externalIp: true gives the members (and "
        "the image builder) ephemeral external IPs for their egress to apt, ghcr.io and Hugging Face; fix: "
        "set externalIp: false (the stack then uses Cloud NAT), or " + EXCEPTION.format(c=ip)
    )
    assert code == 1


def test_a_value_group_the_check_cannot_expand_is_a_warning_not_a_guess(
    check: Runner, project: FakeProject
) -> None:
    # "global" (the KMS key ring, the secret) is in no group the check can expand; us-central1 is in
    # in:us-locations.
    project.policies["gcp.resourceLocations"] = {
        "rules": [{"values": {"allowedValues": ["in:us-locations"]}}]
    }
    lines, code = check()
    assert lines == with_lines(
        {
            "org policy gcp.resourceLocations": "warn  org policy gcp.resourceLocations: may refuse global "
            "(a "
            "value group or subtree the check cannot expand): the VMs, subnet, template, group and bucket "
            "live in us-central1 and its zones; scripts/deploy.sh's KMS key ring for the stack's secrets is "
            "in global, and so is the API key's secret (automatic replication); fix: "
            f"read it: {SEE.format(c='gcp.resourceLocations')}"
        },
        warned(1),
    )
    assert code == 0


@pytest.mark.parametrize(
    ("label", "warns"), [({"secure-boot": "on"}, False), ({"secure-boot": "no-gpu"}, True), ({}, True)]
)
def test_shielded_vm_policy_warns_only_when_the_last_verdict_was_off(
    check: Runner, project: FakeProject, label: dict[str, str], warns: bool
) -> None:
    project.policies["compute.requireShieldedVm"] = {"rules": [{"enforce": True}]}
    project.image_labels[IMAGE] = label
    lines, code = check()
    line = next(x for x in lines if "org policy compute.requireShieldedVm:" in x)
    if not warns:
        assert line == (
            "ok    org policy compute.requireShieldedVm: enforced; the image builder and the servers run "
            "with Secure Boot on (the bake's last verdict was on)"
        )
        return
    reason = "no-gpu" if label else "unverified"
    assert (
        line.startswith(
            "warn  org policy compute.requireShieldedVm: enforced, and the servers would run with Secure "
            "Boot "
            "off (Secure Boot off: "
        )
        and f"({reason})" in line
    )
    assert "fix: bake again" in line and EXCEPTION.format(c="compute.requireShieldedVm") in line
    assert code == 0


def test_shielded_vm_policy_passes_a_deploy_that_bakes(check: Runner, project: FakeProject) -> None:
    project.policies["compute.requireShieldedVm"] = {"rules": [{"enforce": True}]}
    project.families.clear()
    lines, _ = check()
    line = next(x for x in lines if "org policy compute.requireShieldedVm:" in x)
    assert line.startswith("ok    org policy compute.requireShieldedVm: enforced;") and "proves" in line


def test_a_missing_permission_names_it_its_reason_and_the_role(check: Runner, project: FakeProject) -> None:
    project.denied = {"compute.instanceGroupManagers.create", "iam.serviceAccounts.actAs"}
    lines, code = check()
    assert lines == with_lines(
        {
            "permissions": [
                "BLOCK permissions for service accounts: 1 missing: iam.serviceAccounts.actAs (run the "
                "group's "
                "members (and the image builder) as their accounts); fix: ask a project owner for "
                f"roles/iam.serviceAccountAdmin and roles/iam.serviceAccountUser on acme-llm; yours: {ROLES}",
                "BLOCK permissions for server group: 1 missing: compute.instanceGroupManagers.create (create "
                "the "
                "regional group); fix: ask a project owner for roles/compute.instanceAdmin.v1 and "
                f"roles/iam.serviceAccountUser on acme-llm; yours: {ROLES}",
                # The door runs as its own account too: the same missing permission, its own reason.
                "BLOCK permissions for front door: 1 missing: iam.serviceAccounts.actAs (run the door as its "
                "own account); fix: ask a project owner for roles/run.admin and roles/iam.serviceAccountUser "
                f"on acme-llm; yours: {ROLES}",
            ]
        },
        blocked(3),
    )
    assert code == 1


def test_a_disabled_api_the_caller_may_not_enable_blocks(check: Runner, project: FakeProject) -> None:
    project.enabled -= {"iap.googleapis.com", "iam.googleapis.com"}
    project.denied = {"serviceusage.services.enable"}
    lines, code = check()
    assert lines == with_lines(
        {
            "apis": "BLOCK apis: iam, iap are disabled; the deploy enables them (infra/apis.py), but you may "
            "not (serviceusage.services.enable is not granted); fix: ask a project owner to run: gcloud "
            "services enable iam.googleapis.com iap.googleapis.com --project=acme-llm",
            "permissions": "BLOCK permissions for APIs: 1 missing: serviceusage.services.enable (enable the "
            "APIs "
            "of infra/apis.py); fix: ask a project owner for roles/serviceusage.serviceUsageAdmin on "
            "acme-llm; "
            f"yours: {ROLES}",
        },
        blocked(2),
    )
    assert code == 1


def test_a_zone_without_l4(check: Runner, project_dir: Path) -> None:
    write_stack(project_dir, {"zones": ["us-central1-a", "us-central1-b", "us-central1-f"]})
    lines, code = check()
    expected = with_lines(
        {
            "zones": [
                "ok    zones: nvidia-l4 is offered in us-central1-a, us-central1-b",
                "BLOCK zone us-central1-f: nvidia-l4 is not offered there; fix: list only zones that offer "
                "it in "
                "qwen36-mtp-l4:zones (Pulumi.dev.yaml); zones of us-central1 that offer it: us-central1-a, "
                "us-central1-b, us-central1-c",
            ],
        },
        blocked(1),
    )
    expected[PROJECT_AT] = expected[PROJECT_AT].replace(
        "us-central1-b, us-central1-c, 1 server", "us-central1-b, us-central1-f, 1 server"
    )
    assert lines == expected
    assert code == 1


def test_billing_disabled(check: Runner, project: FakeProject) -> None:
    project.billing_enabled, project.billing_account = False, ""
    lines, code = check()
    assert lines == with_lines(
        {
            "billing": "BLOCK billing: not enabled on acme-llm: no billing account is linked, and GCE "
            "creates no "
            "VM without it; fix: gcloud billing projects link acme-llm --billing-account=<ACCOUNT_ID> (the "
            "accounts you may use: gcloud billing accounts list)"
        },
        blocked(1),
    )
    assert code == 1


def test_compute_not_enabled_yet_says_to_enable_it_to_read_the_quotas(
    check: Runner, project: FakeProject
) -> None:
    project.enabled.discard("compute.googleapis.com")
    lines, code = check()
    expected = [
        line
        for line in with_lines(
            {
                "apis": "ok    apis: compute is disabled; the deploy enables it (infra/apis.py)",
                "quota GPUS_ALL_REGIONS": "UNREAD quotas: the GPU quotas, the zones and the tooling image "
                "not read: compute.googleapis.com is "
                "disabled in project acme-llm: the deploy enables it, but a new project's GPU quotas are "
                "often "
                "0 until asked for; enable it now to read them; fix: gcloud services enable "
                "compute.googleapis.com --project=acme-llm, then rerun the check",
                # The tooling image's family unread: the bake's permissions are asked for too.
                "permissions": "ok    permissions: all 106 the deploy needs are granted "
                "(infra/required_permissions.py)",
            },
            unchecked(["quotas"]),
        )
        if not line.startswith(("ok    quota PREEMPTIBLE", "ok    zones", "ok    tooling image"))
    ]
    assert lines == expected
    assert code == Exit.UNCHECKED


def test_the_org_policy_api_disabled_in_the_quota_project_is_one_unread_line(
    check: Runner, project: FakeProject
) -> None:
    project.enabled.discard("orgpolicy.googleapis.com")
    lines, code = check()
    policies = [line for line in ALL_CLEAR if line.startswith("ok    org policy ")]
    expected = [line for line in ALL_CLEAR[:-1] if line not in policies[1:]]
    expected[expected.index(policies[0])] = (
        "UNREAD org policies: the organization policies not read: orgpolicy.googleapis.com is disabled in "
        "project "
        "123456789012; fix: gcloud services enable orgpolicy.googleapis.com --project=123456789012, then "
        "rerun "
        "the check"
    )
    assert lines == [*expected, unchecked(["org policies"])]
    assert code == Exit.UNCHECKED


def test_a_first_deploy_that_bakes_tests_the_bakes_permissions_too(
    check: Runner, project: FakeProject
) -> None:
    project.families.clear()
    project.denied = {"compute.images.create"}
    lines, code = check()
    assert lines == with_lines(
        {
            "tooling image": f"ok    tooling image: family {FAMILY} is empty: this deploy bakes it before "
            "it creates the group",
            "permissions": "BLOCK permissions for tooling image bake: 1 missing: compute.images.create "
            "(create the "
            "tooling image); fix: ask a project owner for roles/compute.instanceAdmin.v1 and "
            f"roles/compute.storageAdmin on acme-llm; yours: {ROLES}",
        },
        blocked(1),
    )
    assert code == 1


def test_no_credentials(check: Runner) -> None:
    def none(scopes: Any = None, **kw: Any) -> Any:
        raise google.auth.exceptions.DefaultCredentialsError(
            "Your default credentials were not found. To set up Application Default Credentials, see "
            "https://cloud.google.com/docs/authentication/external/set-up-adc for more information."
        )

    lines, code = check(adc=none)
    assert lines == [
        "check: stack dev (Pulumi.dev.yaml)",
        PULUMI_OK,
        "BLOCK credentials: no application-default credentials (Your default credentials were not found. To "
        "set up Application Default Credentials, see https://cloud.google.com/docs/authentication/external/"
        "set-up-adc for more information.); fix: gcloud auth application-default login",
        blocked(1),
    ]
    assert code == 1


def test_no_project_anywhere(check: Runner, project_dir: Path) -> None:
    write_stack(project_dir, {}, gcp_project=None)
    lines, code = check()
    assert lines == [
        *ALL_CLEAR[:PROJECT_AT],
        "BLOCK project: none: Pulumi.dev.yaml has no gcp:project and gcloud has no project configured; fix: "
        "gcloud config set project <id>, or pulumi config set gcp:project <id> -s dev",
        blocked(1),
    ]
    assert code == 1


def test_an_invalid_stack_config_is_a_blocker_and_no_stack_file_cannot_run(
    check: Runner, project_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_stack(project_dir, {"zones": ["europe-west4-a"]})
    lines, code = check()
    assert lines == [
        "check: stack dev (Pulumi.dev.yaml)",
        PULUMI_OK,
        "BLOCK config: qwen36-mtp-l4:zones: ['europe-west4-a']: zone 'europe-west4-a' is not in region "
        "'us-central1'; fix: edit Pulumi.dev.yaml",
        blocked(1),
    ]
    assert code == 1
    assert main(["check", "--stack", "prod", "--project-dir", str(project_dir)]) == Exit.NOT_FOUND
    assert capsys.readouterr().err == (
        f"check: error: no Pulumi.prod.yaml in {project_dir}; stacks: dev (--stack names one, "
        "--project-dir the folder of Pulumi.yaml)\n"
    )


def test_a_service_account_key_found_through_the_environment(
    project: FakeProject, project_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """google-auth's own discovery: the key file's token endpoint for the REST calls, and a self-signed
    JWT for google-cloud-compute's (which the fake checks against the key); the real CLI, as a process."""
    email = f"deployer@{PROJECT}.iam.gserviceaccount.com"
    bin_dir = pulumi_on_path(tmp_path, monkeypatch)
    with fake_gcp(project) as root:
        key = tmp_path / "key.json"
        project.jwt_public_key = service_account_file(key, root, project=PROJECT, email=email)
        env = {
            **os.environ,
            "GOOGLE_APPLICATION_CREDENTIALS": str(key),
            "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
            "NO_PROXY": "127.0.0.1",
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        done = subprocess.run(
            [sys.executable, "-m", "qwen36", "check", "--project-dir", str(project_dir), "--api-root", root],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    lines = done.stdout.splitlines()
    expected = list(ALL_CLEAR)
    expected[PROJECT_AT - 1] = f"ok    credentials: service account {email}"
    assert lines == expected, done.stderr
    assert done.returncode == 0
    compute = [r for r in project.requests if r.path.startswith("/compute/")]
    assert compute and all(r.headers["authorization"].count(".") == 2 for r in compute), "self-signed JWTs"


def test_the_front_door_brings_its_constraints_and_permissions(check: Runner, project: FakeProject) -> None:
    project.policies.update(
        {
            "run.managed.requireInvokerIam": {"rules": [{"enforce": True}]},
            "run.allowedIngress": {"rules": [{"values": {"allowedValues": ["internal"]}}]},
        }
    )
    project.denied = {"run.services.setIamPolicy"}
    lines, code = check()
    invoker, ingress = "run.managed.requireInvokerIam", "run.allowedIngress"
    assert lines == with_lines(
        {
            f"org policy {invoker}": f"BLOCK org policy {invoker}: enforced: Cloud Run services must keep "
            "the invoker IAM check, which the front door turns off (OpenAI clients send the API key, not a "
            "Google identity); fix: set door: false (the server is then reached through an IAP tunnel), "
            "or " + EXCEPTION.format(c=invoker),
            f"org policy {ingress}": f"BLOCK org policy {ingress}: refuses all: the front door is reached "
            "from the internet on its run.app URL (ingress all); "
            f"fix: {EXCEPTION.format(c=ingress)}",
            "permissions": "BLOCK permissions for front door: 1 missing: run.services.setIamPolicy (turn "
            "the invoker check off: the door checks the API key itself); fix: ask a project owner for "
            f"roles/run.admin and roles/iam.serviceAccountUser on acme-llm; yours: {ROLES}",
        },
        blocked(3),
    )
    assert code == 1


@pytest.mark.parametrize(
    ("allowed", "line"),
    [
        (["all-traffic"], "BLOCK org policy run.allowedVPCEgress: refuses private-ranges-only: the front "
         "door's Direct VPC egress sends only private ranges through the VPC (PRIVATE_RANGES_ONLY: its calls "
         "to Google APIs go out directly); fix: " + EXCEPTION.format(c="run.allowedVPCEgress")),
        (["private-ranges-only"], "ok    org policy run.allowedVPCEgress: allows what the stack creates"),
        (["is:PRIVATE_RANGES_ONLY", "all-traffic"],
         "ok    org policy run.allowedVPCEgress: allows what the stack creates"),
    ],
)  # fmt: skip
def test_the_doors_vpc_egress_against_run_allowed_vpc_egress(
    check: Runner, project: FakeProject, allowed: list[str], line: str
) -> None:
    project.policies["run.allowedVPCEgress"] = {"rules": [{"values": {"allowedValues": allowed}}]}
    lines, code = check()
    blocks = line.startswith("BLOCK")
    assert lines == with_lines(
        {"org policy run.allowedVPCEgress": line}, blocked(1) if blocks else ALL_CLEAR[-1]
    )
    assert code == (1 if blocks else 0)
    # What the check compares with is what the door sets (one setting, read where it is made).
    assert 'egress="PRIVATE_RANGES_ONLY"' in (ROOT / "infra" / "door.py").read_text()


def test_without_the_door_vpc_egress_is_not_asked(check: Runner, project_dir: Path) -> None:
    write_stack(project_dir, {"door": False})
    lines, _ = check()
    assert not [line for line in lines if "run.allowedVPCEgress" in line]
