"""``__main__.py`` for each stack file under Pulumi's mocks: what it asks GCP for, and what it exports."""

from __future__ import annotations

import hashlib
from typing import Any

import pulumi
import pytest
from program_mocks import (
    COMPUTE,
    GCP_PROJECT,
    MOCK_API_KEY,
    TEMPLATE_SUFFIX,
    Deployment,
    deploy,
    secret_value,
    stack_config,
)

from infra.boot_script import render_boot_script
from infra.config import parse_config
from infra.model_cache import model_bucket_name, model_object_name
from infra.tooling_image import tooling_family

INSTANCE = "gcp:compute/instance:Instance"
TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
GROUP = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"
HEALTH_CHECK = "gcp:compute/healthCheck:HealthCheck"
HEALTH_CHECK_RANGES = ["35.191.0.0/16", "130.211.0.0/22"]
FIREWALL = "gcp:compute/firewall:Firewall"
NETWORK = "gcp:compute/network:Network"
SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"
BUCKET = "gcp:storage/bucket:Bucket"
ACCOUNT = "gcp:serviceaccount/account:Account"
BUCKET_IAM = "gcp:storage/bucketIAMMember:BucketIAMMember"
PROJECT_IAM = "gcp:projects/iAMMember:IAMMember"
CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
SECRET = "gcp:secretmanager/secret:Secret"
SECRET_VERSION = "gcp:secretmanager/secretVersion:SecretVersion"
SECRET_IAM = "gcp:secretmanager/secretIamMember:SecretIamMember"
PASSWORD = "random:index/randomPassword:RandomPassword"
ADDRESS = "gcp:compute/address:Address"
SERVICE = "gcp:projects/service:Service"
IAP_RANGE = "35.235.240.0/20"
NO_KEY = "qwen36-mtp-l4:apiKey"


def sa_email(d: Deployment, account: str = "identity-sa") -> str:
    """The email of one of the program's service accounts (the VM's by default; the door's is door-sa)."""
    (found,) = [r for r in d.of_type(ACCOUNT) if r.name == account]
    return f"{found.inputs['accountId']}@{GCP_PROJECT}.iam.gserviceaccount.com"


def test_every_stack_file_is_a_valid_config_in_its_own_region(stack: str) -> None:
    cfg = parse_config(stack_config(stack))
    assert len(cfg.zones) >= 2, "one zone gives the group nowhere to go in a stockout"
    assert all(zone.startswith(f"{cfg.region}-") for zone in cfg.zones)
    assert {"dev": "us-central1"}.get(stack, stack) == cfg.region


def test_components_own_their_children(deployed: Deployment) -> None:
    components = {r.name: r.type for r in deployed.resources if r.type.startswith("qwen36:infra:")}
    assert components == {
        "apis": "qwen36:infra:Apis",
        "network": "qwen36:infra:NetworkAccess",
        "model-cache": "qwen36:infra:ModelCache",
        "identity": "qwen36:infra:Identity",
        "api-key": "qwen36:infra:ApiKey",
        "server": "qwen36:infra:ServerGroup",
        "health": "qwen36:infra:HealthGate",
        "autostop": "qwen36:infra:Autostop",
        "door": "qwen36:infra:FrontDoor",
        "keyset": "qwen36:infra:DoorKeys",
        "dashboard": "qwen36:infra:Dashboard",
    }
    urns = {name: deployed.registrations[name].urn for name in components}
    for resource in deployed.resources:
        if resource.name in components:
            continue
        owner = next(c for c in components if resource.name.startswith(f"{c}-"))
        assert deployed.registrations[resource.name].parent == urns[owner], resource.name


def test_apis_enabled_and_left_on(deployed: Deployment) -> None:
    services = deployed.of_type(SERVICE)
    assert {s.inputs["service"] for s in services} == {
        "compute.googleapis.com",
        "storage.googleapis.com",
        "secretmanager.googleapis.com",
        "iap.googleapis.com",
        "iam.googleapis.com",
        "cloudresourcemanager.googleapis.com",
        "monitoring.googleapis.com",
        "logging.googleapis.com",
        # The front door on Cloud Run; its source deploy builds nothing (no Cloud Build, no Registry).
        "run.googleapis.com",
    }
    assert all(s.inputs["disableOnDestroy"] is False and s.inputs["project"] == GCP_PROJECT for s in services)


# The API that serves each kind of GCP resource the program declares; the project IAM members go
# through Cloud Resource Manager's setIamPolicy, the service account through the IAM API.
SERVING_API = {
    "gcp:compute/": "compute.googleapis.com",
    "gcp:storage/": "storage.googleapis.com",
    "gcp:secretmanager/": "secretmanager.googleapis.com",
    "gcp:serviceaccount/": "iam.googleapis.com",
    "gcp:projects/iAMMember:": "cloudresourcemanager.googleapis.com",
    "gcp:projects/iAMCustomRole:": "iam.googleapis.com",
    "gcp:cloudrunv2/": "run.googleapis.com",
    "gcp:monitoring/": "monitoring.googleapis.com",
    "gcp:projects/serviceIdentity:": "serviceusage.googleapis.com",
}
# On in every project (https://cloud.google.com/service-usage/docs/enabled-service#default): the
# program needs not enable it.
ENABLED_BY_DEFAULT = {"serviceusage.googleapis.com"}


def test_every_resource_has_its_api_enabled(deployed: Deployment) -> None:
    enabled = {s.inputs["service"] for s in deployed.of_type(SERVICE)} | ENABLED_BY_DEFAULT
    gcp_types = {r.type for r in deployed.resources if r.type.startswith("gcp:") and r.type != SERVICE}
    gcp_types.discard("gcp:organizations/getProject:getProject")
    for token in gcp_types:
        api = next((a for prefix, a in SERVING_API.items() if token.startswith(prefix)), None)
        assert api is not None, f"no serving API known for {token}: add it to SERVING_API"
        assert api in enabled, f"{token} needs {api}, which the program does not enable"


def test_network_is_our_own_vpc_with_a_private_google_access_subnet(deployed: Deployment, stack: str) -> None:
    cfg = parse_config(stack_config(stack))
    vpc = deployed.one(NETWORK).inputs
    subnets = {r.name: r.inputs for r in deployed.of_type(SUBNETWORK)}
    assert set(subnets) == {"network-subnet", "network-door-subnet"}
    subnet = subnets["network-subnet"]
    assert vpc["name"] == f"qwen36-{stack}" and vpc["autoCreateSubnetworks"] is False
    assert subnet["region"] == cfg.region and subnet["privateIpGoogleAccess"] is True
    vpc_link = f"{COMPUTE}/projects/{GCP_PROJECT}/global/networks/qwen36-{stack}"
    subnet_link = f"{COMPUTE}/projects/{GCP_PROJECT}/regions/{cfg.region}/subnetworks/{subnet['name']}"
    (nic,) = deployed.one(TEMPLATE).inputs["networkInterfaces"]
    assert nic["network"] == vpc_link and nic["subnetwork"] == subnet_link
    assert all(r.inputs["network"] == vpc_link for r in deployed.of_type(FIREWALL))


def test_the_servers_port_admits_only_the_door_iap_and_health_checks(deployed: Deployment) -> None:
    rules = {r.name: r.inputs for r in deployed.of_type(FIREWALL)}
    assert set(rules) == {"network-iap", "network-health-checks", "network-door"}
    vm = deployed.one(TEMPLATE).inputs
    door_subnet = next(r.inputs for r in deployed.of_type(SUBNETWORK) if r.name == "network-door-subnet")
    # Direct VPC egress is admitted by its subnet's range: ingress rules cannot name Cloud Run by tag.
    assert rules["network-door"]["sourceRanges"] == [door_subnet["ipCidrRange"]] == ["10.64.1.0/26"]
    assert rules["network-door"]["allows"] == [{"protocol": "tcp", "ports": ["8080"]}]
    iap, probes = rules["network-iap"], rules["network-health-checks"]
    assert iap["sourceRanges"] == [IAP_RANGE]
    assert iap["allows"] == [{"protocol": "tcp", "ports": ["22", "8080"]}]
    assert probes["sourceRanges"] == ["35.191.0.0/16", "130.211.0.0/22"]
    assert probes["allows"] == [{"protocol": "tcp", "ports": ["8080"]}]
    for rule in rules.values():
        assert rule["targetTags"] == vm["tags"]
        assert rule["direction"] == "INGRESS"


def test_network_with_ranges_opens_8080_to_them_only(stack: str) -> None:
    d = deploy(
        stack, {"door": False, "externalIp": True, "sourceRanges": ["198.51.100.7/32", "203.0.113.0/24"]}
    )
    rules = {r.name: r.inputs for r in d.of_type(FIREWALL)}
    assert set(rules) == {"network-server", "network-iap", "network-health-checks"}
    public = rules["network-server"]
    assert public["sourceRanges"] == ["198.51.100.7/32", "203.0.113.0/24"]
    assert public["allows"] == [{"protocol": "tcp", "ports": ["8080"]}]
    assert public["targetTags"] == d.one(TEMPLATE).inputs["tags"]


def test_model_bucket_is_private_regional_and_kept(deployed: Deployment, stack: str) -> None:
    bucket = deployed.one(BUCKET)
    cfg = parse_config(stack_config(stack))
    assert bucket.inputs["location"] == cfg.region.upper()
    assert bucket.inputs["uniformBucketLevelAccess"] is True
    assert bucket.inputs["publicAccessPrevention"] == "enforced"
    assert bucket.inputs["forceDestroy"] is False
    assert deployed.registrations[bucket.name].retain_on_delete is True
    # A cache: no 7 days of billed soft-deleted copies of a replaced 22 GB object.
    assert bucket.inputs["softDeletePolicy"] == {"retentionDurationSeconds": 0}
    assert (
        bucket.inputs["labels"]["app"] == "qwen36-mtp-l4"
        and bucket.inputs["labels"]["stack"] == f"qwen36-{stack}"
    )


def test_model_bucket_kept_by_an_earlier_deployment_is_adopted(stack: str) -> None:
    cfg = parse_config(stack_config(stack))
    bucket = model_bucket_name(GCP_PROJECT, f"qwen36-{stack}", cfg.region)
    d = deploy(stack, existing_buckets=[f"{bucket}-other", bucket])
    assert d.registrations["model-cache-bucket"].import_id == bucket
    assert d.one(BUCKET).inputs["name"] == bucket
    fresh = deploy(stack, existing_buckets=[f"{bucket}-other"])
    assert fresh.registrations["model-cache-bucket"].import_id == ""


def test_bucket_listing_failure_stops_the_deploy() -> None:
    with pytest.raises(Exception, match="PERMISSION_DENIED"):
        deploy("dev", fail_invokes=True)


def test_model_bucket_opt_out_is_destroyed_with_contents() -> None:
    cfg = parse_config(stack_config("dev"))
    existing = model_bucket_name(GCP_PROJECT, "qwen36-dev", cfg.region)
    d = deploy("dev", {"keepModelBucket": False}, existing_buckets=[existing])
    bucket = d.one(BUCKET)
    assert bucket.inputs["forceDestroy"] is True
    assert d.registrations[bucket.name].retain_on_delete is False
    # Kept while keepModelBucket was true, so adopted now (a create would fail with 409); the
    # import then updates it to forceDestroy true.
    assert d.registrations[bucket.name].import_id == existing


def test_a_bucket_of_our_name_that_is_not_ours_is_refused_with_a_message() -> None:
    cfg = parse_config(stack_config("dev"))
    name = model_bucket_name(GCP_PROJECT, "qwen36-dev", cfg.region)
    for labels in ({}, {"app": "qwen36-mtp-l4", "stack": "qwen36-prod"}):
        with pytest.raises(Exception, match=rf"gs://{name} already exists .* is not this stack's") as raised:
            deploy("dev", foreign_buckets={name: labels})
        assert "app=qwen36-mtp-l4, stack=qwen36-dev" in str(raised.value)


def test_identity_is_dedicated_and_least_privilege(deployed: Deployment) -> None:
    member = f"serviceAccount:{sa_email(deployed)}"
    bucket_name = deployed.outputs["modelBucket"]
    bucket_grants = {
        (b.inputs["bucket"], b.inputs["role"], b.inputs["member"])
        for b in deployed.of_type(BUCKET_IAM)
        if b.name.startswith("identity-")
    }
    assert bucket_grants == {
        (bucket_name, "roles/storage.objectViewer", member),
        (bucket_name, "roles/storage.objectUser", member),
    }
    # Writing is held to the one model object (replace a bad copy, complete its metadata) and to
    # the calibration verdict next to it with its temporary copies (startup/calibrate.py).
    writers = {
        b.inputs["condition"]["title"]: b.inputs["condition"]["expression"]
        for b in deployed.of_type(BUCKET_IAM)
        if b.inputs["role"] == "roles/storage.objectUser"
    }
    # Cloud Run's service agent reads the door's source archives there, and nothing else.
    (source_read,) = [b.inputs for b in deployed.of_type(BUCKET_IAM) if b.name == "door-source-read"]
    assert source_read["member"] == (
        "serviceAccount:service-123456789012@serverless-robot-prod.iam.gserviceaccount.com"
    )
    assert source_read["condition"]["expression"] == (
        f'resource.name.startsWith("projects/_/buckets/{bucket_name}/objects/door/")'
    )
    model = (
        f"projects/_/buckets/{bucket_name}/objects/"
        "models/unsloth/Qwen3.6-35B-A3B-MTP-GGUF/Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf"
    )
    assert writers == {
        "model-object-only": f'resource.name == "{model}"',
        "calibration-verdict-only": (
            f'resource.name == "{model}.verdict.json" '
            f'|| resource.name.startsWith("{model}.verdict.json.tmp-")'
        ),
    }
    (reader,) = [b for b in deployed.of_type(BUCKET_IAM) if b.name == "identity-bucket-objectviewer"]
    assert "condition" not in reader.inputs
    project_grants = {
        (p.inputs["project"], p.inputs["role"], p.inputs["member"]) for p in deployed.of_type(PROJECT_IAM)
    }
    roles = {r.name: r.inputs for r in deployed.of_type(CUSTOM_ROLE)}
    group_role = f"projects/{GCP_PROJECT}/roles/{roles['autostop-role']['roleId']}"
    read_role = f"projects/{GCP_PROJECT}/roles/{roles['autostop-read-role']['roleId']}"
    stem = deployed.outputs["groupName"].replace("-", "_")
    assert roles["autostop-role"]["roleId"].startswith(f"{stem}_group_")
    assert sorted(roles["autostop-role"]["permissions"]) == [
        "compute.instanceGroupManagers.get",
        "compute.instanceGroupManagers.update",
    ]
    assert roles["autostop-read-role"]["permissions"] == ["compute.instances.get"]
    door = f"serviceAccount:{sa_email(deployed, 'door-sa')}"
    # The VM holds no Compute permission at all: the door alone may read and resize the group.
    assert project_grants == {
        (GCP_PROJECT, "roles/logging.logWriter", member),
        (GCP_PROJECT, "roles/monitoring.metricWriter", member),
        (GCP_PROJECT, "roles/monitoring.metricWriter", door),
        (GCP_PROJECT, group_role, door),
        (GCP_PROJECT, read_role, door),
    }
    # The only conditional project grant: the door reads this group's members and no other VM.
    (conditional,) = [p.inputs for p in deployed.of_type(PROJECT_IAM) if p.inputs.get("condition")]
    assert conditional["role"] == read_role
    group = deployed.outputs["groupName"]
    assert conditional["condition"]["expression"] == (
        'resource.type == "compute.googleapis.com/Instance" && '
        f'resource.name.extract("/instances/{{name}}").matches("^{group}-[a-z0-9]{{4}}$")'
    )
    vm = deployed.one(TEMPLATE).inputs
    assert vm["serviceAccount"] == {
        "email": sa_email(deployed),
        "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
    }


def test_without_self_staging_the_vm_only_reads_the_bucket_and_writes_the_verdict() -> None:
    d = deploy("dev", {"selfStageModel": False})
    grants = [
        (b.inputs["role"], (b.inputs.get("condition") or {}).get("title"))
        for b in d.of_type(BUCKET_IAM)
        if b.name.startswith("identity-")
    ]
    assert grants == [
        ("roles/storage.objectViewer", None),
        ("roles/storage.objectUser", "calibration-verdict-only"),
    ]


def _secret(d: Deployment, name: str) -> dict[str, Any]:
    (secret,) = [r.inputs for r in d.of_type(SECRET) if r.name == name]
    return dict(secret)


def test_api_key_generated_stored_and_readable_by_the_server_and_the_door_only(deployed: Deployment) -> None:
    password = deployed.one(PASSWORD).inputs
    assert password["length"] == 48 and password["special"] is False
    secret = _secret(deployed, "api-key-secret")
    assert secret["replication"] == {"auto": {}}
    version = deployed.one(SECRET_VERSION).inputs
    assert secret_value(version["secretData"]) == MOCK_API_KEY  # and kept secret in the state
    grants = {r.name: r.inputs for r in deployed.of_type(SECRET_IAM) if r.name != "door-keys-accessor"}
    assert {g["member"] for g in grants.values()} == {
        f"serviceAccount:{sa_email(deployed)}",
        f"serviceAccount:{sa_email(deployed, 'door-sa')}",
    }
    for grant in grants.values():
        assert grant["role"] == "roles/secretmanager.secretAccessor"
        assert grant["secretId"] == secret["secretId"]
    assert deployed.outputs["apiKey"] == MOCK_API_KEY
    assert "apiKey" in deployed.secret_outputs
    # The VM waits for the stored key (and its grant) before its boot script asks for it.
    deps = deployed.registrations[deployed.one(TEMPLATE).name].dependencies
    for name in ("api-key-version", "api-key-accessor", "identity-bucket-objectviewer", "network-iap"):
        assert deployed.registrations[name].urn in deps, name


def test_the_door_keys_secret_holds_no_version_of_pulumis_and_only_the_door_reads_it(
    deployed: Deployment, stack: str
) -> None:
    """`qwen36 keys` adds its versions: one managed here would undo each of them on the next `pulumi up`."""
    keys = _secret(deployed, "keyset-secret")
    assert keys["secretId"] == f"qwen36-{stack}-door-keys"
    assert keys["replication"] == _secret(deployed, "api-key-secret")["replication"] == {"auto": {}}
    assert keys["labels"] == _secret(deployed, "api-key-secret")["labels"]
    assert keys["labels"]["app"] == "qwen36-mtp-l4"
    (version,) = deployed.of_type(SECRET_VERSION)  # the program's key's only
    assert version.name == "api-key-version"
    readers = [r.inputs for r in deployed.of_type(SECRET_IAM) if r.inputs["secretId"] == keys["secretId"]]
    assert [(g["member"], g["role"]) for g in readers] == [
        (f"serviceAccount:{sa_email(deployed, 'door-sa')}", "roles/secretmanager.secretAccessor")
    ]
    assert deployed.outputs["keysSecret"] == f"projects/{GCP_PROJECT}/secrets/qwen36-{stack}-door-keys"
    assert "keysSecret" not in deploy("dev", {"door": False}).outputs


def test_api_key_off_creates_no_key() -> None:
    d = deploy("dev", {"apiKey": False, "door": False})
    assert not d.of_type(PASSWORD) and not d.of_type(SECRET) and not d.of_type(SECRET_IAM)
    assert d.outputs["apiKey"] is None


def test_no_bare_vm(deployed: Deployment) -> None:
    assert not deployed.of_type(INSTANCE), "the server is a group member, never a bare instance"


def test_template_carries_the_spot_server_and_its_security(deployed: Deployment, stack: str) -> None:
    cfg = parse_config(stack_config(stack))
    assert cfg.image_project == "deeplearning-platform-release"
    assert cfg.image_family == "common-cu129-ubuntu-2204-nvidia-580"
    family = tooling_family(cfg.llama_cpp_build)
    vm = deployed.one(TEMPLATE).inputs
    assert vm["region"] == cfg.region and vm["namePrefix"] == f"qwen36-{stack}-"
    assert vm["machineType"] == "g2-standard-8"
    assert vm["guestAccelerators"] == [{"type": "nvidia-l4", "count": 1}]
    assert vm["scheduling"] == {
        "provisioningModel": "SPOT",
        "preemptible": True,
        "automaticRestart": False,
        "onHostMaintenance": "TERMINATE",
        "instanceTerminationAction": "DELETE",
    }
    assert vm["disks"] == [
        {
            "boot": True,
            "autoDelete": True,
            # The build's tooling family (the mocks' lookup finds it, as after the first deployment).
            "sourceImage": f"projects/{GCP_PROJECT}/global/images/family/{family}",
            "diskSizeGb": 100,
            "diskType": "pd-ssd",
        }
    ]
    assert vm["shieldedInstanceConfig"] == {
        "enableSecureBoot": False,
        "enableVtpm": True,
        "enableIntegrityMonitoring": True,
    }
    metadata = dict(vm["metadata"])
    assert metadata.pop("startup-script").startswith("#!")
    assert metadata == {
        "enable-oslogin": "TRUE",
        "serial-port-enable": "FALSE",
        "block-project-ssh-keys": "TRUE",
        "enable-guest-attributes": "TRUE",
    }
    assert "metadataStartupScript" not in vm  # a template carries the script as metadata only
    assert vm["labels"]["app"] == "qwen36-mtp-l4" and vm["labels"]["managed-by"] == "pulumi"
    assert vm["tags"] == [f"qwen36-{stack}"]


def test_group_runs_the_template_in_the_regions_l4_zones(deployed: Deployment, stack: str) -> None:
    cfg = parse_config(stack_config(stack))
    group = deployed.one(GROUP).inputs
    name = f"qwen36-{stack}"
    assert (group["name"], group["baseInstanceName"], group["region"]) == (name, name, cfg.region)
    template_link = (
        f"{COMPUTE}/projects/{GCP_PROJECT}/regions/{cfg.region}/instanceTemplates/{name}-{TEMPLATE_SUFFIX}"
    )
    assert group["versions"] == [{"name": "primary", "instanceTemplate": template_link}]
    assert group["targetSize"] == 1
    assert group["distributionPolicyZones"] == cfg.zones
    assert group["distributionPolicyTargetShape"] == "BALANCED"
    assert group["namedPorts"] == [{"name": "http", "port": 8080}]
    assert group["instanceLifecyclePolicy"] == {
        "defaultActionOnFailure": "REPAIR",
        "forceUpdateOnRepair": "YES",
        "onRepair": {"allowChangingZone": "YES"},
    }
    check = deployed.one(HEALTH_CHECK).inputs
    assert check["httpHealthCheck"] == {"port": 8080, "requestPath": "/health"}
    assert group["autoHealingPolicies"] == {
        "healthCheck": f"{COMPUTE}/projects/{GCP_PROJECT}/global/healthChecks/{check['name']}",
        "initialDelaySec": cfg.health_timeout_minutes * 60,
    }
    # No two L4s at once: the old member goes before the new one comes; a regional group's fixed
    # maxUnavailable must then be at least its number of zones.
    assert group["updatePolicy"] == {
        "type": "PROACTIVE",
        "minimalAction": "REPLACE",
        "mostDisruptiveAllowedAction": "REPLACE",
        "instanceRedistributionType": "NONE",
        "replacementMethod": "RECREATE",
        "maxSurgeFixed": 0,
        "maxUnavailableFixed": len(cfg.zones),
    }
    # Alternate-zone repair is not supported with any stateful configuration.
    assert not {"statefulExternalIps", "statefulInternalIps", "statefulDisks"} & group.keys()
    assert group["waitForInstances"] is False


def test_initial_delay_follows_the_cold_start_bound_within_gce_limits() -> None:
    assert (
        deploy("dev", {"healthTimeoutMinutes": 5}).one(GROUP).inputs["autoHealingPolicies"]["initialDelaySec"]
        == 300
    )
    assert (
        deploy("dev", {"healthTimeoutMinutes": 90})
        .one(GROUP)
        .inputs["autoHealingPolicies"]["initialDelaySec"]
        == 3600
    )


def test_a_fleet_rolls_out_new_members_before_it_removes_old_ones() -> None:
    d = deploy("dev", {"replicas": 2, "sourceRanges": ["198.51.100.7/32"]})
    group = d.one(GROUP).inputs
    assert group["targetSize"] == 2
    # A regional group's fixed surge is 0 or at least its zone count; unavailable 0 keeps every
    # server up through a rollout. https://cloud.google.com/compute/docs/instance-groups/regional-mig-updates
    policy = group["updatePolicy"]
    assert (policy["replacementMethod"], policy["maxSurgeFixed"], policy["maxUnavailableFixed"]) == (
        "SUBSTITUTE",
        3,
        0,
    )


def test_members_have_no_external_address_and_none_is_reserved(deployed: Deployment) -> None:
    assert not deployed.of_type(ADDRESS)
    (nic,) = deployed.one(TEMPLATE).inputs["networkInterfaces"]
    assert nic["network"].endswith(f"/global/networks/{deployed.outputs['groupName']}")
    assert not nic.get("accessConfigs")
    assert "staticIp" not in deployed.outputs


def test_standard_provisioning_restarts_but_still_terminates_for_maintenance() -> None:
    vm = deploy("dev", {"provisioningModel": "STANDARD"}).one(TEMPLATE).inputs
    assert vm["scheduling"] == {
        "provisioningModel": "STANDARD",
        "preemptible": False,
        "automaticRestart": True,
        "onHostMaintenance": "TERMINATE",
    }


def test_startup_script_is_rendered_for_the_real_bucket_and_secret(deployed: Deployment, stack: str) -> None:
    script = deployed.one(TEMPLATE).inputs["metadata"]["startup-script"]
    assert deployed.outputs["startupScriptSha256"] == hashlib.sha256(script.encode()).hexdigest()
    cfg = parse_config(stack_config(stack))
    expected = render_boot_script(
        cfg,
        bucket=deployed.outputs["modelBucket"],
        api_key_secret=_secret(deployed, "api-key-secret")["secretId"],
        project=GCP_PROJECT,
        door_url=f"https://qwen36-{stack}-door-123456789012.{cfg.region}.run.app",
    )
    assert script == expected
    assert MOCK_API_KEY not in script


def test_startup_script_changes_with_the_config() -> None:
    base = deploy("dev").outputs["startupScriptSha256"]
    assert deploy("dev", {"ctxSize": 32768}).outputs["startupScriptSha256"] != base


def test_exports_private_by_default(deployed: Deployment, stack: str) -> None:
    cfg = parse_config(stack_config(stack))
    out = deployed.outputs
    name = out["groupName"]
    assert name == deployed.one(GROUP).inputs["name"] == f"qwen36-{stack}"
    assert (out["region"], out["zones"]) == (cfg.region, cfg.zones)
    # The door is the endpoint (its service's uri); llama-server's metrics only through the tunnel.
    door = f"https://qwen36-{stack}-door-a1b2c3d4e5-uc.a.run.app"
    assert out["webUiUrl"] == f"{door}/"
    assert out["apiBaseUrl"] == f"{door}/v1"
    assert out["metricsUrl"] == "http://localhost:8080/metrics"
    assert out["modelGcsUri"] == f"gs://{out['modelBucket']}/{model_object_name(cfg)}"
    assert out["modelBucket"] == model_bucket_name(GCP_PROJECT, name, cfg.region)
    # Members change name and zone: the commands find the current one through the group.
    where = f"--project={GCP_PROJECT} --region={cfg.region} --group={name}"
    assert out["iapTunnel"] == f"qwen36 tunnel {where}"
    assert out["iapTunnel"] in out["access"] and door in out["access"]
    assert out["logsSerial"] == f"qwen36 logs --serial {where}"
    assert out["logsContainer"] == f"qwen36 logs {where}"
    assert out["sshIap"] == f"qwen36 ssh {where}"
    group = f"{name} --region={cfg.region} --project={GCP_PROJECT}"
    assert out["members"] == f"gcloud compute instance-groups managed list-instances {group}"
    assert out["stop"] == f"gcloud compute instance-groups managed resize {group} --size=0"
    assert out["start"] == f"gcloud compute instance-groups managed resize {group} --size=1"
    assert "instanceName" not in out and "zone" not in out and "delete" not in out
    assert out["estimatedHourlyCostUsd"] == 0.24
    note = out["estimatedHourlyCostNote"]
    assert "estimate" in note and "Source:" in note and "2026-11-30" in note
    assert ("us-central1 prices" in note) == (cfg.region != "us-central1")
    assert out.keys() - deployed.secret_outputs == out.keys() - {"apiKey"}


def test_an_open_range_names_the_members_changing_address_and_the_tunnel() -> None:
    out = deploy(
        "europe-west4", {"door": False, "externalIp": True, "sourceRanges": ["198.51.100.7/32"]}
    ).outputs
    assert out["apiBaseUrl"] == "http://localhost:8080/v1"
    assert "198.51.100.7/32" in out["access"] and "changes with every repair" in out["access"]
    assert out["iapTunnel"] in out["access"]


def test_on_demand_cost_estimate() -> None:
    out = deploy("dev", {"provisioningModel": "STANDARD"}).outputs
    assert out["estimatedHourlyCostUsd"] == 0.81


def test_missing_gcp_project_fails_before_any_resource() -> None:
    # A RunError: Pulumi prints its message as one line, with no Python traceback.
    with pytest.raises(pulumi.RunError) as err:
        deploy("dev", gcp_project=None)
    assert str(err.value).startswith("gcp:project: ")
    assert "pulumi config set gcp:project" in str(err.value)


def test_invalid_value_fails_before_any_resource() -> None:
    with pytest.raises(pulumi.RunError) as err:
        deploy("dev", {"zones": ["europe-west4-a"]})
    assert str(err.value).startswith("qwen36-mtp-l4:zones: ")
    assert "'europe-west4-a' is not in region 'us-central1'" in str(err.value)


def test_the_old_zone_key_says_to_use_zones() -> None:
    with pytest.raises(pulumi.RunError) as err:
        deploy("dev", {"zone": "us-central1-a"})
    assert str(err.value).startswith("qwen36-mtp-l4:zone: ")
    assert "use qwen36-mtp-l4:zones" in str(err.value)


def test_every_cloud_resource_waits_for_the_apis(deployed: Deployment) -> None:
    by_urn = {reg.urn: name for name, reg in deployed.registrations.items()}
    services = {r.name for r in deployed.of_type(SERVICE)}

    def upstream(name: str, seen: set[str]) -> set[str]:
        for urn in deployed.registrations[name].dependencies:
            dep = by_urn[urn]
            if dep not in seen:
                seen.add(dep)
                upstream(dep, seen)
        return seen

    for r in deployed.resources:
        if r.type.startswith("gcp:") and r.type != SERVICE:
            assert services <= upstream(r.name, set()), r.name


def test_startup_script_without_api_key_has_no_secret_to_fetch() -> None:
    d = deploy("dev", {"apiKey": False, "door": False})
    cfg = parse_config({**stack_config("dev"), NO_KEY: False, "qwen36-mtp-l4:door": False})
    script = d.one(TEMPLATE).inputs["metadata"]["startup-script"]
    assert script == render_boot_script(
        cfg, bucket=d.outputs["modelBucket"], api_key_secret=None, project=GCP_PROJECT
    )
