"""Group errors that cannot clear while the deployer waits: the gate ends at once on them.

GCE reports why a member was not created in the group's ``listErrors`` and in each managed
instance's ``lastAttempt.errors`` (qwen36/group.py). A stockout clears by itself; these do not:

* an organization-policy violation: code ``CONDITION_NOT_MET`` (the API's 412 conditionNotMet) with
  "Constraint constraints/<name> violated for project ...", e.g. an instance group's
  ``[CONDITION_NOT_MET]: Instance '...' creation failed: Constraint constraints/compute.vmExternalIpAccess
  violated for project 291560455175. Add instance ... to the constraint to use external IP with it.``
  (2i2c-org/infrastructure#489) and ``Error 412: Constraint constraints/compute.requireShieldedVm violated
  for project ...`` (fortinet/fortigate-terraform-deploy#34, gardener/gardener-extension-provider-gcp#415).
  The constraint in the message decides, so a 412 on a stale fingerprint is not taken for one.
* a missing permission: GCE's message "Required '<permission>' permission for '<resource>'", which a
  group's member error carries with who was acting, e.g. "Instance 'wpt-agent-xxxxx' creation failed:
  Required 'compute.images.useReadOnly' permission for 'projects/...' (when acting as
  '...@cloudservices.gserviceaccount.com')" (catchpoint/WebPageTest.agent-install#6), or
  "Permission '<permission>' denied on ..." (the IAM form, e.g.
  GoogleCloudPlatform/cloud-run-release-manager#81);
  an operation error code seen with them is PERMISSIONS_ERROR (google/syzkaller#3131). The group acts as
  the project's Google APIs service agent, whose roles nothing in the deploy changes, so IAM propagation
  (a fresh grant may answer 403 for minutes, https://cloud.google.com/iam/docs/access-change-propagation)
  is no reason to wait. One exception waits: an error about a service account, or the code
  SERVICE_ACCOUNT_ACCESS_DENIED (kubicorn/kubicorn#475), since the deploy creates the members' account
  just before the group, and creating an account is eventually consistent (the provider's own note
  on google_service_account; GoogleCloudPlatform/magic-modules#14547): it may clear, and the wait is
  bounded anyway.
* a quota error (``QUOTA_EXCEEDED``) already ends the wait in qwen36/health.py, with its own message.

A zone that does not offer the GPU ("The resource 'projects/.../zones/<zone>/acceleratorTypes/<type>'
was not found", the create error seen in fastai/course-v3#430) is reported, not fatal: the group can
still place its member in another of its zones.
"""

from __future__ import annotations

import re
import shlex

from qwen36.group import GroupError, GroupTarget

PREFLIGHT = "qwen36 check --stack <stack> lists every blocker it can see before a deploy"
_CONSTRAINT = re.compile(r"Constraint (constraints/[A-Za-z0-9_.]+) violated")
_REQUIRED = re.compile(r"Required '(?P<permission>[A-Za-z0-9_.]+)' permission for '(?P<resource>[^']+)'")
_DENIED = re.compile(
    r"Permission '(?P<permission>[A-Za-z0-9_.]+)' denied on "
    r"(?P<resource>.+?)(?: \(or it may not exist\))?\.?$"
)
_ACTING = re.compile(r"\(when acting as '(?P<who>[^']+)'\)")
_NO_ACCELERATOR = re.compile(
    r"zones/(?P<zone>[a-z0-9-]+)/acceleratorTypes/(?P<type>[a-z0-9-]+)' was not found"
)
PERMISSION_CODES = ("PERMISSIONS_ERROR",)
ACCOUNT_CODE = "SERVICE_ACCOUNT_ACCESS_DENIED"
_ACCOUNT = re.compile(r"service ?account|\.iam\.gserviceaccount\.com", re.IGNORECASE)


def cannot_clear(error: GroupError, group: GroupTarget) -> str | None:
    """Why the wait must end now (one line: what, and the command that shows it), or None."""
    return org_policy(error, group) or permission(error, group)


def describe_command(project: str, constraint: str) -> str:
    """The command that shows a constraint's effective policy (``constraint`` without its prefix)."""
    return f"gcloud org-policies describe {constraint} --project={shlex.quote(project)} --effective"


def roles_command(project: str, member: str) -> str:
    """The command that lists the project roles ``member`` holds."""
    return (
        f"gcloud projects get-iam-policy {shlex.quote(project)} --flatten='bindings[].members' "
        f"--filter='bindings.members:{member}' --format='value(bindings.role)'"
    )


def org_policy(error: GroupError, group: GroupTarget) -> str | None:
    match = _CONSTRAINT.search(error.message)
    if match is None:
        return None
    constraint = match[1]
    short = constraint.removeprefix("constraints/")
    return (
        f"the organization policy {constraint} refuses the server ({error.code}: {error.message}); "
        f"GCE will not create it while the policy stands. See it: {describe_command(group.project, short)}; "
        f"an exception for the project is the policy administrator's ({PREFLIGHT})"
    )


def permission(error: GroupError, group: GroupTarget) -> str | None:
    if error.code == ACCOUNT_CODE:
        return None
    match = _REQUIRED.search(error.message) or _DENIED.search(error.message)
    if match is not None and _ACCOUNT.search(match["resource"]):
        return None
    if match is None:
        if error.code in PERMISSION_CODES:
            return _permission_line(error, group, "", "")
        return None
    return _permission_line(error, group, match["permission"], match["resource"])


def _permission_line(error: GroupError, group: GroupTarget, name: str, resource: str) -> str:
    acting = _ACTING.search(error.message)
    who = acting["who"] if acting else ""
    what = f"{name} on {resource}" if name else "a permission"
    everyone = f"gcloud projects get-iam-policy {shlex.quote(group.project)}"
    show = roles_command(group.project, who) if who else everyone
    holder = who or "the account that creates the members"
    return (
        f"a missing permission: {holder} lacks {what} ({error.code}: {error.message}); the group retries "
        f"but cannot succeed until it is granted. See its roles: {show} ({PREFLIGHT})"
    )


def zone_without_accelerator(error: GroupError) -> str | None:
    """A line for a member refused in a zone that does not offer the GPU, else None."""
    match = _NO_ACCELERATOR.search(error.message)
    if match is None:
        return None
    return (
        f"group: zone {match['zone']} does not offer {match['type']} ({error.code}); the group can still "
        "use its other zones, but drop this one from qwen36-mtp-l4:zones "
        f"(gcloud compute accelerator-types list --filter=name={match['type']})"
    )
