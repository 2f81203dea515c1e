"""GCP's rules and our own, checked over the inputs the program gives each resource.

Neither the SDK nor a mocked deployment enforces any of these (the SDK checks only keyword
names), and GCE would reject several of them only at `pulumi up` time, mid-deployment, or
accept them silently (an open firewall, the default service account). Inputs use the wire
shape Pulumi sends to providers: camelCase keys, nested Args as dicts.

Pure Python with no Pulumi import: the tests run these rules over the mock-recorded resources,
and the policy pack (policy/pack.py, run by ``pulumi preview/up --policy-pack policy``) adapts the
engine's ResourceValidationArgs / StackValidationArgs to the same functions. Every rule carries the
link that states its constraint (``RULE_LINKS``); docs/limits.md tables them.

The rules live by family in this package's modules; this module lists them (RULES, PROGRAM_RULES,
RULE_LINKS) and runs them (check).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from infra.policy.compute import (  # noqa: F401 (the rules' names, as infra.policy.X)
    AUTOSCALER,
    AUTOSCALER_SHAPES,
    DEFAULT_HEALTH_CHECK_S,
    GROUP,
    MAX_BASE_INSTANCE_NAME,
    MAX_INITIAL_DELAY_S,
    MAX_METADATA_KEY,
    MAX_METADATA_TOTAL_BYTES,
    MAX_METADATA_VALUE_BYTES,
    REGION_AUTOSCALER,
    UNEVEN_SHAPES,
    _builder_create,
    _changed_outside,
    _group_named,
    _groups,
    alternate_zone_repair_supported,
    autohealing_delay_in_range,
    autoscaler_needs_even_or_balanced,
    autoscaler_waits_for_cold_start,
    backend_port_name_on_group,
    base_instance_name_valid,
    builder_not_default_account,
    gpu_terminates_on_maintenance,
    health_check_timeout_within_interval,
    metadata_within_limits,
    no_out_of_band_template_switch,
    own_service_account,
    refresh_before_update,
    regional_update_policy_fits_zones,
    secure_boot_on,
    shielded_vm_on,
    spot_is_preemptible_without_restart,
    uneven_shape_needs_no_redistribution,
    uneven_shape_single_version,
)
from infra.policy.core import (  # noqa: F401 (the rules' names, as infra.policy.X)
    _VMS,
    BACKEND_SERVICE,
    DEFAULT_SA_SUFFIX,
    FIREWALL,
    HEALTH_CHECK,
    HEALTH_CHECK_RANGES,
    INSTANCE,
    INSTANCE_TEMPLATE,
    LOCAL_COMMAND,
    MAX_GCE_NAME,
    REGION_GROUP,
    REGION_INSTANCE_TEMPLATE,
    SERVING_PORT,
    SUBNETWORK,
    TEMPLATE,
    PolicyContext,
    ProgramRule,
    Resource,
    Rule,
    UnknownInput,
    Violation,
    _documented_secure_boot_reasons,
    _instances,
    _last,
)
from infra.policy.door import (  # noqa: F401 (the rules' names, as infra.policy.X)
    CLOUD_RUN_SERVICE,
    DASHBOARD,
    DOOR_SUFFIX,
    MAX_CLOUD_RUN_TIMEOUT_S,
    MAX_DIRECT_VPC_PREFIX,
    PUBLIC_MEMBERS,
    RUN_INVOKER,
    _door_subnets,
    _duration_s,
    _is_door,
    cloud_run_service_limits,
    dashboard_json_valid,
    direct_vpc_subnet_fits,
    door_port_only_from_door,
    unauthenticated_only_on_door,
)
from infra.policy.egress import (  # noqa: F401 (the rules' names, as infra.policy.X)
    ROUTER_NAT,
    nat_logging_off,
    no_external_ip_unless_opted_in,
    vm_subnets_private_egress,
)
from infra.policy.iam import (  # noqa: F401 (the rules' names, as infra.policy.X)
    _ACCOUNT_ID,
    _RESOURCE_NAME_LITERAL,
    _ROLE_ID,
    BROAD_COMPUTE_ROLES,
    CONDITION_COLLECTIONS,
    CUSTOM_ROLE,
    MAX_ROLE_TITLE,
    PROJECT_IAM_BINDING,
    PROJECT_IAM_MEMBER,
    SERVICE_ACCOUNT,
    UNCONDITIONABLE_COLLECTIONS,
    Unknown,
    _conditions,
    _grants,
    _show,
    custom_role_id_not_fixed,
    custom_role_valid,
    iam_conditions_on_supported_types,
    no_project_compute_admin_for_service_accounts,
    service_account_id_valid,
    urn_type,
)
from infra.policy.names import (  # noqa: F401 (the rules' names, as infra.policy.X)
    _LABEL_KEY,
    _LABEL_VALUE,
    _RFC1035,
    MAX_LABELS,
    MAX_NAME_PREFIX,
    _bad_gce_name,
    gce_names_valid,
    labels_valid,
    network_tags_valid,
)
from infra.policy.network import (  # noqa: F401 (the rules' names, as infra.policy.X)
    _ANYWHERE,
    _ANYWHERE_V6,
    _DEFAULT_NETWORK,
    _PUBLIC_SCHEMES,
    SSH_PORT,
    _admits,
    _opens,
    _port_in,
    _port_ranges,
    _serving_port_sources,
    backend_timeout_covers_generation,
    fleet_port_only_from_google,
    health_checks_admitted,
    no_default_network,
    no_open_firewall,
    no_ssh_from_anywhere,
    public_backend_has_armor,
    subnets_do_not_overlap,
)
from infra.policy.storage import (  # noqa: F401 (the rules' names, as infra.policy.X)
    _BUCKET_NAME,
    _GOOGLE_LIKE,
    _SECRET_ID,
    BUCKET,
    RANDOM_PASSWORD,
    SECRET,
    SECRET_VERSION,
    SOFT_DELETE_RANGE_S,
    _strings,
    private_bucket,
    secret_id_valid,
    secret_stays_secret,
    soft_delete_retention_valid,
    valid_bucket_name,
)

RULES: tuple[Rule, ...] = (
    spot_is_preemptible_without_restart,
    gpu_terminates_on_maintenance,
    shielded_vm_on,
    own_service_account,
    no_open_firewall,
    private_bucket,
    secret_stays_secret,
    uneven_shape_needs_no_redistribution,
    autohealing_delay_in_range,
    backend_timeout_covers_generation,
    autoscaler_waits_for_cold_start,
    public_backend_has_armor,
    fleet_port_only_from_google,
    no_project_compute_admin_for_service_accounts,
    no_default_network,
    no_ssh_from_anywhere,
    secure_boot_on,
    valid_bucket_name,
    builder_not_default_account,
    alternate_zone_repair_supported,
    regional_update_policy_fits_zones,
    uneven_shape_single_version,
    base_instance_name_valid,
    gce_names_valid,
    labels_valid,
    network_tags_valid,
    metadata_within_limits,
    health_check_timeout_within_interval,
    soft_delete_retention_valid,
    service_account_id_valid,
    secret_id_valid,
    custom_role_valid,
    custom_role_id_not_fixed,
    iam_conditions_on_supported_types,
    cloud_run_service_limits,
    no_out_of_band_template_switch,
    dashboard_json_valid,
    no_external_ip_unless_opted_in,
    nat_logging_off,
)
PROGRAM_RULES: tuple[ProgramRule, ...] = (
    autoscaler_needs_even_or_balanced,
    health_checks_admitted,
    unauthenticated_only_on_door,
    direct_vpc_subnet_fits,
    door_port_only_from_door,
    subnets_do_not_overlap,
    backend_port_name_on_group,
    refresh_before_update,
    vm_subnets_private_egress,
)
# Rules that need more than one resource's inputs in the pack: the secret values (RandomPassword's
# result), the stack's size (fleet), or the resources an input was computed from (property
# dependencies, which ResourceValidationArgs lacks). policy/pack.py runs them over the whole stack.
STACK_LEVEL_RULES = frozenset(
    {"secret_stays_secret", "fleet_port_only_from_google", "custom_role_id_not_fixed"}
)
COMPUTE_REST = "https://cloud.google.com/compute/docs/reference/rest/v1"
MIG_DOCS = "https://cloud.google.com/compute/docs/instance-groups"
# The document that states each rule's constraint (docs/limits.md tables them with the reasons).
RULE_LINKS: Mapping[str, str] = {
    "spot_is_preemptible_without_restart": "https://cloud.google.com/compute/docs/instances/create-use-spot",
    "gpu_terminates_on_maintenance": "https://cloud.google.com/compute/docs/gpus/gpu-host-maintenance",
    "shielded_vm_on": "https://cloud.google.com/compute/shielded-vm/docs/shielded-vm",
    "own_service_account": "https://cloud.google.com/compute/docs/access/service-accounts#default_service_account",
    "no_open_firewall": "https://cloud.google.com/vpc/docs/firewalls#firewall_rule_components",
    "private_bucket": "https://cloud.google.com/storage/docs/public-access-prevention",
    "secret_stays_secret": "https://cloud.google.com/compute/docs/metadata/overview",
    "uneven_shape_needs_no_redistribution": f"{MIG_DOCS}/regional-mig-set-target-distribution-shape",
    "autohealing_delay_in_range": f"{MIG_DOCS}/autohealing-instances-in-migs",
    "backend_timeout_covers_generation": "https://cloud.google.com/load-balancing/docs/backend-service#timeout-setting",
    "autoscaler_waits_for_cold_start": "https://cloud.google.com/compute/docs/autoscaler/understanding-autoscaler-decisions",
    "public_backend_has_armor": "https://cloud.google.com/armor/docs/security-policy-overview",
    "fleet_port_only_from_google": "https://cloud.google.com/load-balancing/docs/firewall-rules",
    "no_project_compute_admin_for_service_accounts": "https://cloud.google.com/compute/docs/access/iam#predefined_roles",
    "no_default_network": "https://cloud.google.com/vpc/docs/vpc#default-network",
    "no_ssh_from_anywhere": "https://cloud.google.com/iap/docs/using-tcp-forwarding#create-firewall-rule",
    "secure_boot_on": "https://cloud.google.com/compute/docs/gpus/install-drivers-gpu#secure-boot",
    "valid_bucket_name": "https://cloud.google.com/storage/docs/buckets#naming",
    "builder_not_default_account": "https://cloud.google.com/compute/docs/access/service-accounts#default_service_account",
    "alternate_zone_repair_supported": f"{MIG_DOCS}/repair-vm-in-alternate-zone",
    "regional_update_policy_fits_zones": f"{MIG_DOCS}/regional-mig-updates",
    "uneven_shape_single_version": f"{MIG_DOCS}/regional-mig-set-target-distribution-shape",
    "base_instance_name_valid": f"{COMPUTE_REST}/regionInstanceGroupManagers",
    "gce_names_valid": "https://cloud.google.com/compute/docs/naming-resources",
    "labels_valid": "https://cloud.google.com/compute/docs/labeling-resources#requirements",
    "network_tags_valid": "https://cloud.google.com/vpc/docs/add-remove-network-tags",
    "metadata_within_limits": "https://cloud.google.com/compute/docs/metadata/setting-custom-metadata#limitations",
    "health_check_timeout_within_interval": f"{COMPUTE_REST}/healthChecks",
    "soft_delete_retention_valid": "https://cloud.google.com/storage/docs/soft-delete",
    "service_account_id_valid": "https://cloud.google.com/iam/docs/service-accounts-create",
    "secret_id_valid": "https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets/create",
    "custom_role_valid": "https://cloud.google.com/iam/docs/creating-custom-roles",
    "custom_role_id_not_fixed": "https://cloud.google.com/iam/docs/creating-custom-roles#deleting-custom-role",
    "iam_conditions_on_supported_types": "https://cloud.google.com/iam/docs/conditions-resource-attributes",
    "cloud_run_service_limits": "https://cloud.google.com/run/docs/configuring/request-timeout",
    "no_out_of_band_template_switch": f"{COMPUTE_REST}/instanceTemplates/delete",
    "dashboard_json_valid": "https://cloud.google.com/monitoring/api/ref_v3/rest/v1/projects.dashboards",
    "autoscaler_needs_even_or_balanced": f"{MIG_DOCS}/regional-mig-set-target-distribution-shape",
    "health_checks_admitted": "https://cloud.google.com/load-balancing/docs/health-check-concepts#ip-ranges",
    "unauthenticated_only_on_door": "https://cloud.google.com/run/docs/authenticating/public",
    "direct_vpc_subnet_fits": "https://cloud.google.com/run/docs/configuring/vpc-direct-vpc",
    "door_port_only_from_door": "https://cloud.google.com/run/docs/configuring/vpc-direct-vpc",
    "subnets_do_not_overlap": "https://cloud.google.com/vpc/docs/subnets#valid-ranges",
    "backend_port_name_on_group": "https://cloud.google.com/load-balancing/docs/backend-service#named_ports",
    "refresh_before_update": "https://www.pulumi.com/docs/iac/concepts/projects/project-file/",
    "no_external_ip_unless_opted_in": "https://cloud.google.com/compute/docs/ip-addresses#externaladdresses",
    "nat_logging_off": "https://cloud.google.com/nat/docs/monitoring",
    "vm_subnets_private_egress": "https://cloud.google.com/vpc/docs/private-google-access",
}


def describe(rule: Callable[..., Any]) -> str:
    """A rule's one-line description: its docstring's first sentence, or its name."""
    doc = " ".join((rule.__doc__ or "").split())
    return doc or rule.__name__.replace("_", " ")


def run_rule(rule: Rule, resource: Resource, ctx: PolicyContext) -> tuple[list[str], bool]:
    """The rule's messages for one resource, and whether it stopped at a value not known yet."""
    messages: list[str] = []
    try:
        messages.extend(rule(resource, ctx))
    except UnknownInput:
        return messages, True
    return messages, False


def run_program_rule(
    rule: ProgramRule, resources: Sequence[Resource], ctx: PolicyContext
) -> tuple[list[tuple[Resource, str]], bool]:
    found: list[tuple[Resource, str]] = []
    try:
        found.extend(rule(resources, ctx))
    except UnknownInput:
        return found, True
    return found, False


def check(
    resources: Iterable[Resource],
    ctx: PolicyContext,
    rules: Sequence[Rule] = RULES,
    program_rules: Sequence[ProgramRule] = PROGRAM_RULES,
    skipped: list[str] | None = None,
) -> list[Violation]:
    """Every violation; ``skipped`` collects ``rule resource`` pairs that met a value not known yet."""
    listed = list(resources)
    found: list[Violation] = []
    for resource in listed:
        for rule in rules:
            messages, unknown = run_rule(rule, resource, ctx)
            found += [Violation(rule.__name__, f"{resource.type}::{resource.name}", m) for m in messages]
            if unknown and skipped is not None:
                skipped.append(f"{rule.__name__} {resource.type}::{resource.name}")
    for program_rule in program_rules:
        pairs, unknown = run_program_rule(program_rule, listed, ctx)
        found += [Violation(program_rule.__name__, f"{r.type}::{r.name}", m) for r, m in pairs]
        if unknown and skipped is not None:
            skipped.append(program_rule.__name__)
    return found
