"""The rules issue 20 added (infra/policy/: the limits of every feature the program relies on),
each passing on the program and failing on a bad fixture; the rules that wait for the integrator
(policy_cases.PENDING_ON_MAIN) shown failing on today's main and passing on the intended shape."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from policy_cases import FLEET_RECIPES, check_settled, context, settled
from program_mocks import COMPUTE, GCP_PROJECT, Deployment, deploy
from test_gcp_rules import BAD_FIXTURES, FLEET_BAD_FIXTURES, ISSUE15_FIXTURES
from test_private_network import EGRESS_FIXTURES

from infra import policy
from infra.policy import PolicyContext, Resource

Edit = Callable[[list[Resource]], list[Resource]]
STACK_URN = "urn:pulumi:dev::qwen36-mtp-l4::"
DOOR_SUBNET_CIDR = "10.64.1.0/26"
DOOR_SA = f"qwen36-dev-door@{GCP_PROJECT}.iam.gserviceaccount.com"
NETWORK = f"{COMPUTE}/projects/{GCP_PROJECT}/global/networks/qwen36-dev"


@pytest.fixture(scope="module")
def single() -> Deployment:
    return deploy("dev")


@pytest.fixture(scope="module")
def fleet() -> Deployment:
    return deploy("dev", FLEET_RECIPES["fleet-fixed"])


@pytest.fixture(scope="module")
def baking() -> Deployment:
    return deploy("dev", tooling_image=False)


def edit(token: str, change: Callable[[dict[str, Any]], None], name: str | None = None) -> Edit:
    """A copy of the resources with the inputs of each of one type (or the named one) changed."""

    def apply(resources: list[Resource]) -> list[Resource]:
        found, out = False, []
        for r in resources:
            inputs = copy.deepcopy(dict(r.inputs))
            if r.type == token and (name is None or r.name == name):
                change(inputs)
                found = True
            out.append(dataclasses.replace(r, inputs=inputs))
        assert found, f"no {token} {name or ''} to edit"
        return out

    return apply


def drop(name: str) -> Edit:
    def apply(resources: list[Resource]) -> list[Resource]:
        assert any(r.name == name for r in resources), name
        return [r for r in resources if r.name != name]

    return apply


def door_cidr(cidr: str) -> Edit:
    """The door's subnet on another range, and the firewall rule that admits it following along."""
    subnet = edit(policy.SUBNETWORK, setting("ipCidrRange", cidr), "network-door-subnet")
    rule = edit(policy.FIREWALL, setting("sourceRanges", [cidr]), "network-door")
    return lambda resources: rule(subnet(resources))


def add(*extra: Resource) -> Edit:
    return lambda resources: [*resources, *extra]


def setting(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(inputs: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = inputs
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value

    return change


G, T, HC, B, FW = policy.GROUP, policy.TEMPLATE, policy.HEALTH_CHECK, policy.BUCKET, policy.FIREWALL
RUN, SUB = policy.CLOUD_RUN_SERVICE, policy.SUBNETWORK
BUCKET_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
PUBLIC_READER = Resource(
    BUCKET_MEMBER,
    "public-reader",
    {"bucket": "b", "role": "roles/storage.objectViewer", "member": "allUsers"},
)
OTHER_SERVICE_PUBLIC = Resource(
    "gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
    "admin-invoker",
    {
        "location": "us-central1",
        "name": "qwen36-dev-admin",
        "role": "roles/run.invoker",
        "member": "allUsers",
    },
)
SECRET_FOR_ALL = Resource(
    "gcp:secretmanager/secretIamMember:SecretIamMember",
    "key-for-all",
    {
        "secretId": "qwen36-dev-api-key",
        "role": "roles/secretmanager.secretAccessor",
        "member": "allAuthenticatedUsers",
    },
)
IGM_CONDITION = 'resource.name.endsWith("/regions/us-central1/instanceGroups/qwen36-dev")'

# fixture -> (rule, base: single | fleet | door, edit)
LIMIT_FIXTURES: dict[str, tuple[str, str, Edit]] = {
    "repair-zone-with-stateful-ip": (
        "alternate_zone_repair_supported",
        "fleet",
        edit(G, setting("statefulExternalIps", [{"interfaceName": "nic0", "deleteRule": "NEVER"}])),
    ),
    "repair-zone-even": (
        "alternate_zone_repair_supported",
        "fleet",
        edit(G, setting("distributionPolicyTargetShape", "EVEN")),
    ),
    "repair-zone-without-update": (
        "alternate_zone_repair_supported",
        "fleet",
        edit(G, setting("instanceLifecyclePolicy.forceUpdateOnRepair", "NO")),
    ),
    "unavailable-below-zones": (
        "regional_update_policy_fits_zones",
        "single",
        edit(G, setting("updatePolicy.maxUnavailableFixed", 2)),
    ),
    "surge-below-zones": (
        "regional_update_policy_fits_zones",
        "single",
        edit(G, setting("updatePolicy.maxSurgeFixed", 1)),
    ),
    "recreate-default-surge": (
        "regional_update_policy_fits_zones",
        "single",
        edit(G, setting("updatePolicy.maxSurgeFixed", None)),
    ),
    "nothing-may-change": (
        "regional_update_policy_fits_zones",
        "single",
        edit(G, setting("updatePolicy.maxUnavailableFixed", 0)),
    ),
    "any-redistributes": (
        "uneven_shape_needs_no_redistribution",
        "fleet",
        edit(
            G,
            lambda i: i.update(
                distributionPolicyTargetShape="ANY",
                updatePolicy={**i["updatePolicy"], "instanceRedistributionType": "PROACTIVE"},
            ),
        ),
    ),
    "balanced-canary": (
        "uneven_shape_single_version",
        "single",
        edit(
            G,
            lambda i: i["versions"].append(
                {**i["versions"][0], "name": "canary", "targetSize": {"fixed": 1}}
            ),
        ),
    ),
    "base-name-too-long": (
        "base_instance_name_valid",
        "single",
        edit(G, setting("baseInstanceName", "q" * 59)),
    ),
    "base-name-capitals": (
        "base_instance_name_valid",
        "single",
        edit(G, setting("baseInstanceName", "Qwen36-dev")),
    ),
    "health-check-capitals": ("gce_names_valid", "single", edit(HC, setting("name", "Qwen36-dev-health"))),
    "name-prefix-too-long": ("gce_names_valid", "single", edit(T, setting("namePrefix", "q" * 38 + "-"))),
    "label-key-capitals": ("labels_valid", "single", edit(B, setting("labels.Owner", "ops"))),
    "label-value-space": ("labels_valid", "single", edit(B, setting("labels.stack", "qwen36 dev"))),
    "too-many-labels": (
        "labels_valid",
        "single",
        edit(B, lambda i: i["labels"].update({f"k{n}": "v" for n in range(64)})),
    ),
    "tag-capitals": ("network_tags_valid", "single", edit(T, setting("tags", ["Qwen36-dev"]))),
    "startup-script-too-big": (
        "metadata_within_limits",
        "single",
        edit(T, lambda i: i["metadata"].update({"startup-script": "#" * (300 * 1024)})),
    ),
    "metadata-over-total": (
        "metadata_within_limits",
        "single",
        edit(T, lambda i: i["metadata"].update({f"blob-{n}": "#" * (200 * 1024) for n in range(3)})),
    ),
    "check-timeout-over-interval": (
        "health_check_timeout_within_interval",
        "single",
        edit(HC, setting("timeoutSec", 40)),
    ),
    "soft-delete-one-day": (
        "soft_delete_retention_valid",
        "single",
        edit(B, setting("softDeletePolicy.retentionDurationSeconds", 86400)),
    ),
    "account-id-short": (
        "service_account_id_valid",
        "single",
        edit(policy.SERVICE_ACCOUNT, setting("accountId", "q-1"), "identity-sa"),
    ),
    "account-id-dash-end": (
        "service_account_id_valid",
        "single",
        edit(policy.SERVICE_ACCOUNT, setting("accountId", "qwen36-dev-"), "identity-sa"),
    ),
    "secret-id-space": (
        "secret_id_valid",
        "single",
        edit(policy.SECRET, setting("secretId", "qwen36 dev key")),
    ),
    "role-id-dash": (
        "custom_role_valid",
        "single",
        edit(policy.CUSTOM_ROLE, setting("roleId", "qwen36-dev-autostop")),
    ),
    "role-title-long": ("custom_role_valid", "single", edit(policy.CUSTOM_ROLE, setting("title", "t" * 101))),
    "role-no-permissions": (
        "custom_role_valid",
        "single",
        edit(policy.CUSTOM_ROLE, setting("permissions", [])),
    ),
    "condition-on-instance-groups": (
        "iam_conditions_on_supported_types",
        "single",
        edit(BUCKET_MEMBER, setting("condition.expression", IGM_CONDITION), "identity-bucket-objectuser"),
    ),
    "condition-on-unknown-type": (
        "iam_conditions_on_supported_types",
        "single",
        edit(
            BUCKET_MEMBER,
            setting("condition.expression", 'resource.name == "projects/p/widgets/w"'),
            "identity-bucket-objectuser",
        ),
    ),
    "door-timeout-over-an-hour": (
        "cloud_run_service_limits",
        "door",
        edit(RUN, setting("template.timeout", "3601s")),
    ),
    "door-timeout-not-a-duration": (
        "cloud_run_service_limits",
        "door",
        edit(RUN, setting("template.timeout", "1h")),
    ),
    "door-deletion-protected": (
        "cloud_run_service_limits",
        "door",
        edit(RUN, setting("deletionProtection", None)),
    ),
    "door-default-account": (
        "cloud_run_service_limits",
        "door",
        edit(RUN, setting("template.serviceAccount", None)),
    ),
    "door-compute-account": (
        "cloud_run_service_limits",
        "door",
        edit(RUN, setting("template.serviceAccount", "123456789012-compute@developer.gserviceaccount.com")),
    ),
    "door-two-interfaces": (
        "cloud_run_service_limits",
        "door",
        edit(
            RUN,
            lambda i: i["template"]["vpcAccess"]["networkInterfaces"].append(
                i["template"]["vpcAccess"]["networkInterfaces"][0]
            ),
        ),
    ),
    "door-connector-too": (
        "cloud_run_service_limits",
        "door",
        edit(RUN, setting("template.vpcAccess.connector", "projects/p/locations/us-central1/connectors/c")),
    ),
    "door-name-capitals": ("cloud_run_service_limits", "door", edit(RUN, setting("name", "Qwen36-dev-door"))),
    "door-vpc-self-link": (
        "cloud_run_service_limits",
        "door",
        edit(
            RUN,
            lambda i: i["template"]["vpcAccess"]["networkInterfaces"][0].update(
                network="https://www.googleapis.com/compute/v1/projects/p/global/networks/qwen36-dev"
            ),
        ),
    ),
    "door-max-per-revision-only": ("cloud_run_service_limits", "door", edit(RUN, setting("scaling", None))),
    "door-runs-python3": (
        "cloud_run_service_limits",
        "door",
        edit(RUN, lambda i: i["template"]["containers"][0].update(commands=["python3"])),
    ),
    "dashboard-not-json": (
        "dashboard_json_valid",
        "door",
        edit(policy.DASHBOARD, setting("dashboardJson", "{displayName: x")),
    ),
    "dashboard-unnamed": (
        "dashboard_json_valid",
        "door",
        edit(policy.DASHBOARD, setting("dashboardJson", "{}")),
    ),
    "public-bucket-reader": ("unauthenticated_only_on_door", "door", add(PUBLIC_READER)),
    "other-public-service": ("unauthenticated_only_on_door", "door", add(OTHER_SERVICE_PUBLIC)),
    "secret-for-all-users": ("unauthenticated_only_on_door", "door", add(SECRET_FOR_ALL)),
    "door-invoker-admin": (
        "unauthenticated_only_on_door",
        "door",
        add(
            Resource(
                "gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
                "door-admin-for-all",
                {
                    "location": "us-central1",
                    "name": "qwen36-dev-door",
                    "role": "roles/run.admin",
                    "member": "allUsers",
                },
            )
        ),
    ),
    "invoker-check-off-elsewhere": (
        "unauthenticated_only_on_door",
        "door",
        add(
            Resource(
                RUN,
                "admin",
                {
                    "name": "qwen36-dev-admin",
                    "location": "us-central1",
                    "invokerIamDisabled": True,
                    "deletionProtection": False,
                    "template": {"serviceAccount": DOOR_SA},
                },
            )
        ),
    ),
    "door-subnet-too-small": ("direct_vpc_subnet_fits", "door", door_cidr("10.64.1.0/27")),
    "door-subnet-other-region": (
        "direct_vpc_subnet_fits",
        "door",
        edit(SUB, setting("region", "us-east1"), "network-door-subnet"),
    ),
    "door-subnet-not-ours": (
        "direct_vpc_subnet_fits",
        "door",
        edit(
            RUN,
            lambda i: i["template"]["vpcAccess"]["networkInterfaces"][0].update(subnetwork="shared"),
        ),
    ),
    "door-not-admitted": ("door_port_only_from_door", "door", drop("network-door")),
    "door-and-open-port": (
        "door_port_only_from_door",
        "door",
        add(
            Resource(
                FW,
                "network-server",
                {
                    "network": NETWORK,
                    "direction": "INGRESS",
                    "sourceRanges": ["198.51.100.7/32"],
                    "allows": [{"protocol": "tcp", "ports": ["8080"]}],
                    "targetTags": ["qwen36-dev"],
                },
            )
        ),
    ),
    "door-admitted-by-tag": (
        "door_port_only_from_door",
        "door",
        edit(FW, lambda i: i.update(sourceRanges=[], sourceTags=["qwen36-dev-door"]), "network-door"),
    ),
    "door-subnet-overlaps": ("subnets_do_not_overlap", "door", door_cidr("10.64.0.0/26")),
    "backend-port-unnamed": (
        "backend_port_name_on_group",
        "fleet",
        edit(policy.BACKEND_SERVICE, setting("portName", "https")),
    ),
}


def _base(which: str, single: Deployment, fleet: Deployment) -> tuple[list[Resource], PolicyContext]:
    if which == "fleet":
        return list(fleet.resources), context(fleet, FLEET_RECIPES["fleet-fixed"])
    # The single server's dump carries the front door (door: true is the default): "door" names the
    # fixtures that edit the door's resources.
    return list(single.resources), context(single, {})


@pytest.mark.parametrize("base", ["single", "fleet", "door"])
def test_each_base_passes_every_settled_rule(single: Deployment, fleet: Deployment, base: str) -> None:
    resources, ctx = _base(base, single, fleet)
    assert check_settled(resources, ctx) == []


@pytest.mark.parametrize("fixture", LIMIT_FIXTURES)
def test_each_limit_rule_fails_on_a_bad_fixture(single: Deployment, fleet: Deployment, fixture: str) -> None:
    rule, which, change = LIMIT_FIXTURES[fixture]
    resources, ctx = _base(which, single, fleet)
    # New against the unedited base: a pending rule's own failures on main are not the fixture's.
    before = {(v.rule, v.resource) for v in policy.check(resources, ctx)}
    violations = [v for v in policy.check(change(resources), ctx) if (v.rule, v.resource) not in before]
    assert violations, fixture
    assert {v.rule for v in violations} == {rule}, [str(v) for v in violations]


# --- the rules that wait for the integrator: failing on main, passing on the intended shape ----


def _random_role_id(resources: list[Resource]) -> list[Resource]:
    suffix = f"{STACK_URN}random:index/randomId:RandomId::autostop-suffix"
    return [
        dataclasses.replace(r, property_dependencies={**r.property_dependencies, "roleId": (suffix,)})
        if r.type == policy.CUSTOM_ROLE
        else r
        for r in resources
    ]


def _intended(resources: list[Resource]) -> list[Resource]:
    """Today's single-server dump as design decisions 1 and 3 shape it: no reserved IP or stateful
    policy, an unconditional resize grant, a role id with a random suffix."""
    no_ip = edit(G, setting("statefulExternalIps", None))(resources)
    no_ip = edit(
        T, lambda i: [a.pop("natIp", None) for a in i["networkInterfaces"][0].get("accessConfigs") or []]
    )(no_ip)
    no_ip = [r for r in no_ip if r.type != "gcp:compute/address:Address"]
    unconditional = edit(policy.PROJECT_IAM_MEMBER, setting("condition", None), "autostop-binding")(no_ip)
    return _random_role_id(unconditional)


REFRESHING = {"refresh": "always"}


def _fixed_role_id(resources: list[Resource]) -> list[Resource]:
    """The autostop role with its id no longer drawn from the random suffix (a fixed string)."""
    return [
        dataclasses.replace(
            r, property_dependencies={k: v for k, v in r.property_dependencies.items() if k != "roleId"}
        )
        if r.type == policy.CUSTOM_ROLE
        else r
        for r in resources
    ]


def _switched_out_of_band(resources: list[Resource]) -> list[Resource]:
    """The earlier first deployment's move: a local command that sets the group's template."""
    switch = Resource(
        policy.LOCAL_COMMAND,
        "image-switch-set-template",
        {"create": "gcloud compute instance-groups managed set-instance-template qwen36-dev --template=t"},
    )
    return [*resources, switch]


LIMIT_FIXTURES["role-id-fixed"] = ("custom_role_id_not_fixed", "single", _fixed_role_id)
LIMIT_FIXTURES["template-switched-out-of-band"] = (
    "no_out_of_band_template_switch",
    "single",
    _switched_out_of_band,
)


def test_the_intended_program_passes_the_pending_rules(single: Deployment) -> None:
    ctx = dataclasses.replace(context(single, {}), project_options=REFRESHING)
    assert policy.check(_intended(list(single.resources)), ctx) == []


def test_main_passes_the_rules_the_design_decisions_brought(single: Deployment, baking: Deployment) -> None:
    """No stateful IP, an unconditional grant under a random role id, the bake before the group,
    refresh before every update: each rule passes on the program as it is now."""
    decided = {
        "alternate_zone_repair_supported",
        "iam_conditions_on_supported_types",
        "custom_role_id_not_fixed",
        "no_out_of_band_template_switch",
        "refresh_before_update",
    }
    for d in (single, baking):
        assert not decided & {v.rule for v in policy.check(d.resources, context(d, {}))}


def test_refresh_is_needed_only_where_something_else_changes_the_group(
    single: Deployment, fleet: Deployment
) -> None:
    # The single server's size is the idle watcher's (ignoreChanges targetSize); a fixed fleet's is Pulumi's.
    assert [g.ignore_changes for g in single.of_type(G)] == [("targetSize",)]
    fixed = dataclasses.replace(context(fleet, FLEET_RECIPES["fleet-fixed"]), project_options={})
    assert "refresh_before_update" not in {v.rule for v in policy.check(fleet.resources, fixed)}
    autoscaled = deploy("dev", FLEET_RECIPES["fleet-autoscaled"])
    scaled = dataclasses.replace(context(autoscaled, FLEET_RECIPES["fleet-autoscaled"]), project_options={})
    assert "refresh_before_update" in {v.rule for v in policy.check(autoscaled.resources, scaled)}
    bare = dataclasses.replace(context(single, {}), project_options={})
    assert "refresh_before_update" in {v.rule for v in policy.check(single.resources, bare)}
    ok = dataclasses.replace(context(single, {}), project_options=REFRESHING)
    assert "refresh_before_update" not in {v.rule for v in policy.check(single.resources, ok)}


def test_a_role_id_from_a_random_resource_passes(single: Deployment) -> None:
    (role,) = _random_role_id([r for r in single.resources if r.name == "autostop-role"])
    assert list(policy.custom_role_id_not_fixed(role, PolicyContext())) == []
    # A dependency on something that is not random (the project's services) is still a fixed id.
    fixed = dataclasses.replace(
        role, property_dependencies={"roleId": (f"{STACK_URN}gcp:projects/service:Service::apis",)}
    )
    assert list(policy.custom_role_id_not_fixed(fixed, PolicyContext()))


def test_a_storage_object_condition_is_supported(single: Deployment) -> None:
    (writer,) = [r for r in single.resources if r.name == "identity-bucket-objectuser"]
    assert "/objects/" in writer.inputs["condition"]["expression"]
    assert list(policy.iam_conditions_on_supported_types(writer, PolicyContext())) == []


# --- values not known yet (a preview): a rule that needs one is skipped, not misjudged ---------


def test_an_unknown_value_skips_the_rule_that_needs_it(single: Deployment) -> None:
    (template,) = single.of_type(T)
    inputs = copy.deepcopy(dict(template.inputs))
    inputs["serviceAccount"]["email"] = policy.Unknown()
    inputs["metadata"]["startup-script"] = policy.Unknown()
    unknown = dataclasses.replace(template, inputs=inputs)
    skipped: list[str] = []
    violations = policy.check([unknown], PolicyContext(secrets=["k3y"]), skipped=skipped)
    assert violations == []
    assert f"own_service_account {T}::{template.name}" in skipped
    # The secret scan walks strings only and passes over the unknown script; it is not skipped.
    assert not [s for s in skipped if s.startswith("secret_stays_secret")]
    bad = dataclasses.replace(
        unknown, inputs={**inputs, "scheduling": {**inputs["scheduling"], "preemptible": False}}
    )
    assert {v.rule for v in policy.check([bad], PolicyContext())} == {"spot_is_preemptible_without_restart"}


def test_every_unknown_use_raises() -> None:
    value = policy.Unknown()
    for use in (
        bool,
        str,
        len,
        iter,
        lambda v: v == "x",
        lambda v: v < 1,
        lambda v: v.get("k"),
        lambda v: {v},
    ):
        with pytest.raises((policy.UnknownInput, TypeError)):
            use(value)


# --- coverage: every rule has a bad fixture and a link ------------------------------------------


def test_every_rule_has_a_bad_fixture() -> None:
    names = {rule.__name__ for rule in (*policy.RULES, *policy.PROGRAM_RULES)}
    fixtures = {
        rule
        for rule, *_ in (*BAD_FIXTURES.values(), *FLEET_BAD_FIXTURES.values(), *ISSUE15_FIXTURES.values())
    }
    fixtures |= {rule for rule, *_ in LIMIT_FIXTURES.values()}
    fixtures |= {rule for rule, *_ in EGRESS_FIXTURES.values()}
    # Fails on a context without Pulumi.yaml's option: test_refresh_is_needed_only_where_...
    fixtures |= {"refresh_before_update"}
    assert names == fixtures


def test_every_rule_has_a_link_and_a_description() -> None:
    names = {rule.__name__ for rule in (*policy.RULES, *policy.PROGRAM_RULES)}
    assert set(policy.RULE_LINKS) == names
    assert all(url.startswith("https://") for url in policy.RULE_LINKS.values())
    assert names >= policy.STACK_LEVEL_RULES


def test_the_fleet_recipes_pass_every_settled_rule() -> None:
    for name, overrides in FLEET_RECIPES.items():
        d = deploy("dev", overrides)
        assert settled(policy.check(d.resources, context(d, overrides))) == [], name
