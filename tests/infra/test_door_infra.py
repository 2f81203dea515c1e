"""The front door's resources under Pulumi's mocks: its Cloud Run service and what it runs, its
account and exactly its grants, the path to the server over the VPC, the network kept across a
destroy, the boot script's stop URL, and the dashboard. The service's environment is checked against
the door's own reader (door/config.py), so the contract between infra and the door cannot drift."""

from __future__ import annotations

import json
import shlex
import subprocess
from typing import Any

import pytest
from program_mocks import COMPUTE, GCP_PROJECT, MOCK_API_KEY, Deployment, deploy

from door import config as door_config
from infra import boot_protocol, door_archive
from infra.door import BASE_IMAGE, metric_types, wake_bound_s
from infra.grant_settle import SETTLE_S
from infra.network import NETWORK_DESCRIPTION

RUN = "gcp:cloudrunv2/service:Service"
OBJECT = "gcp:storage/bucketObject:BucketObject"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"
NETWORK = "gcp:compute/network:Network"
PROJECT_IAM = "gcp:projects/iAMMember:IAMMember"
SECRET_IAM = "gcp:secretmanager/secretIamMember:SecretIamMember"
BUCKET_IAM = "gcp:storage/bucketIAMMember:BucketIAMMember"
SERVICE_IDENTITY = "gcp:projects/serviceIdentity:ServiceIdentity"
AGENT = "serviceAccount:service-123456789012@serverless-robot-prod.iam.gserviceaccount.com"
DOOR_EMAIL = f"qwen36-dev-door@{GCP_PROJECT}.iam.gserviceaccount.com"
VM_EMAIL = f"qwen36-dev@{GCP_PROJECT}.iam.gserviceaccount.com"
STOP_URL = "https://qwen36-dev-door-123456789012.us-central1.run.app"


@pytest.fixture(scope="module")
def d() -> Deployment:
    return deploy("dev")


def _service(d: Deployment) -> dict[str, Any]:
    return dict(d.one(RUN).inputs)


def test_the_service_runs_the_archive_on_googles_python_without_a_build(d: Deployment) -> None:
    service = _service(d)
    assert service["name"] == "qwen36-dev-door" and service["location"] == "us-central1"
    (container,) = service["template"]["containers"]
    assert container["image"] == "scratch"
    assert container["baseImageUri"] == BASE_IMAGE.format(region="us-central1")
    # `python`, as the provider's own zip-deploy test runs it on this base image: `python3` might be
    # Ubuntu 22.04's 3.10 (main.py refuses any interpreter below 3.11: test_door_archive.py).
    assert (container["commands"], container["args"]) == (["python"], ["main.py"])
    source = container["sourceCode"]["cloudStorageSource"]
    archive = door_archive.build()
    obj = d.one(OBJECT).inputs
    # The object is named by the archive's bytes: an unchanged door redeploys nothing.
    assert obj["name"] == source["object"] == f"door/{archive.name}"
    assert source["bucket"] == obj["bucket"] == d.outputs["modelBucket"]
    assert source["generation"] == "1764590400000000"
    assert container["startupProbe"]["httpGet"]["path"] == "/health"
    assert container["resources"]["cpuIdle"] is True


def test_anyone_with_the_key_may_call_it_and_it_scales_to_zero(d: Deployment) -> None:
    service = _service(d)
    # No allUsers binding (domain-restricted sharing refuses one); the door checks the key itself.
    assert service["invokerIamDisabled"] is True and service["ingress"] == "INGRESS_TRAFFIC_ALL"
    assert not d.of_type("gcp:cloudrunv2/serviceIamMember:ServiceIamMember")
    scaling = service["template"]["scaling"]
    assert (scaling["minInstanceCount"], scaling["maxInstanceCount"]) == (0, 1)
    # The template's maximum is per revision; the service's bounds every revision together.
    assert service["scaling"] == {"maxInstanceCount": 1}
    assert service["template"]["timeout"] == "3600s" and service["deletionProtection"] is False


def test_the_environment_is_what_the_door_reads(d: Deployment) -> None:
    envs = _service(d)["template"]["containers"][0]["envs"]
    # No secret env reference (Cloud Run would check its grant at revision creation): the door reads
    # both secrets by name at runtime (contract A), and no key's value is in the service's spec.
    assert all("valueSource" not in e for e in envs)
    plain = {e["name"]: e["value"] for e in envs}
    assert plain["QWEN36_DOOR_API_KEY_SECRET"] == f"projects/{GCP_PROJECT}/secrets/qwen36-dev-api-key"
    assert plain["QWEN36_DOOR_KEYS_SECRET"] == f"projects/{GCP_PROJECT}/secrets/qwen36-dev-door-keys"
    assert plain["QWEN36_DOOR_KEYS_SECRET"] == d.outputs["keysSecret"]
    assert "QWEN36_DOOR_API_KEY" not in plain and "QWEN36_DOOR_SECRET_MANAGER_URL" not in plain
    assert MOCK_API_KEY not in json.dumps(envs)
    settings = door_config.from_env({**plain, "QWEN36_DOOR_API_KEY": MOCK_API_KEY})
    assert (settings.project, settings.region, settings.group) == (GCP_PROJECT, "us-central1", "qwen36-dev")
    assert settings.upstream_port == 8080 and settings.model_alias == "Qwen3.6-35B-A3B-Q4KXL-MTP"
    assert settings.stop_audiences == (STOP_URL,) and settings.stop_service_account == VM_EMAIL
    assert settings.wake_bound_s == 360 == wake_bound_s(120)
    # Every variable infra sets is one the door reads (a renamed one would silently do nothing).
    source = (door_archive.DOOR_DIR / "config.py").read_text()
    for name in plain:
        assert f'"{name.removeprefix(door_config.PREFIX)}"' in source, name


def test_its_account_holds_exactly_what_the_door_needs(d: Deployment) -> None:
    member = f"serviceAccount:{DOOR_EMAIL}"
    assert _service(d)["template"]["serviceAccount"] == DOOR_EMAIL
    grants = {
        (r.inputs["role"], bool(r.inputs.get("condition")))
        for r in d.of_type(PROJECT_IAM)
        if r.inputs["member"] == member
    }
    roles = {r.name: r.inputs for r in d.of_type("gcp:projects/iAMCustomRole:IAMCustomRole")}
    group_role = f"projects/{GCP_PROJECT}/roles/{roles['autostop-role']['roleId']}"
    read_role = f"projects/{GCP_PROJECT}/roles/{roles['autostop-read-role']['roleId']}"
    assert grants == {
        ("roles/monitoring.metricWriter", False),
        (group_role, False),  # IAM cannot scope a grant to one instance group manager
        (read_role, True),  # instances can be: this group's members only
    }
    secrets = [r.inputs for r in d.of_type(SECRET_IAM) if r.inputs["member"] == member]
    # Reading the program's key and the named-key set, nothing else of Secret Manager.
    assert sorted((s["secretId"], s["role"]) for s in secrets) == [
        ("qwen36-dev-api-key", "roles/secretmanager.secretAccessor"),
        ("qwen36-dev-door-keys", "roles/secretmanager.secretAccessor"),
    ]
    # The VM holds nothing of the group's: the door alone may wake and stop it.
    vm = {
        r.inputs["role"] for r in d.of_type(PROJECT_IAM) if r.inputs["member"] == f"serviceAccount:{VM_EMAIL}"
    }
    assert vm == {"roles/logging.logWriter", "roles/monitoring.metricWriter"}


def test_both_candidate_readers_of_the_source_get_its_read_once_the_agent_exists(d: Deployment) -> None:
    """No page says which identity fetches the archive: the agent and the door's account both may."""
    reads = {r.name: r for r in d.of_type(BUCKET_IAM) if r.name.startswith("door-source-read")}
    assert {name: r.inputs["member"] for name, r in reads.items()} == {
        "door-source-read": AGENT,
        "door-source-read-account": f"serviceAccount:{DOOR_EMAIL}",
    }
    expression = f'resource.name.startsWith("projects/_/buckets/{d.outputs["modelBucket"]}/objects/door/")'
    for grant in reads.values():
        assert grant.inputs["role"] == "roles/storage.objectViewer"
        assert grant.inputs["condition"]["expression"] == expression
    # The agent is asked for (it is created asynchronously at enablement) before its grant names it.
    (agent,) = d.of_type(SERVICE_IDENTITY)
    assert agent.inputs == {"project": GCP_PROJECT, "service": "run.googleapis.com"}
    agent_urn = d.registrations["door-run-agent"].urn
    assert agent_urn in d.registrations["door-source-read"].dependencies
    assert reads["door-source-read"].property_dependencies["member"] == (agent_urn,)


def test_the_service_waits_for_a_settle_that_runs_only_for_new_grants(d: Deployment) -> None:
    (settle,) = [r for r in d.of_type("command:local:Command") if r.name == "door-grants-settle"]
    argv = shlex.split(settle.inputs["create"])
    assert argv[1:3] == ["-m", "infra.grant_settle"] and float(argv[argv.index("--seconds") + 1]) == SETTLE_S
    # Replaced (so run again) only when a grant is new; an update waits for nothing.
    assert settle.inputs["triggers"] == [
        "door-run-agent-id",
        "door-source-read-id",
        "door-source-read-account-id",
    ]
    assert settle.inputs["update"] == "true"
    registered = d.registrations
    grants = {registered[n].urn for n in ("door-run-agent", "door-source-read", "door-source-read-account")}
    assert grants <= set(registered["door-grants-settle"].dependencies)
    assert registered["door-grants-settle"].urn in registered["door-service"].dependencies


def test_the_door_reaches_the_server_over_the_vpc_from_its_own_subnet(d: Deployment) -> None:
    vpc = _service(d)["template"]["vpcAccess"]
    assert vpc["egress"] == "PRIVATE_RANGES_ONLY"
    (nic,) = vpc["networkInterfaces"]
    subnets = {r.name: r.inputs for r in d.of_type(SUBNETWORK)}
    door_subnet = subnets["network-door-subnet"]
    # Names, as every provider sample passes them: no diff suppression there (Service.yaml).
    assert nic == {"network": "qwen36-dev", "subnetwork": door_subnet["name"]}
    assert COMPUTE not in json.dumps(vpc)
    assert door_subnet["ipCidrRange"] == "10.64.1.0/26" and door_subnet["region"] == "us-central1"


def test_the_vpc_and_the_door_subnet_outlive_destroy_and_are_adopted(d: Deployment) -> None:
    """Cloud Run holds a Direct VPC egress subnet 1-2 h after its service is gone, so both stay."""
    assert d.registrations["network-vpc"].retain_on_delete is True
    assert d.registrations["network-door-subnet"].retain_on_delete is True
    assert d.registrations["network-subnet"].retain_on_delete is False
    assert d.registrations["network-vpc"].import_id == "" == d.registrations["network-door-subnet"].import_id
    kept = deploy(
        "dev",
        kept_networks={"qwen36-dev": NETWORK_DESCRIPTION, "qwen36-dev-door-us-central1": "the door's"},
    )
    assert kept.registrations["network-vpc"].import_id == f"projects/{GCP_PROJECT}/global/networks/qwen36-dev"
    assert kept.registrations["network-door-subnet"].import_id == (
        f"projects/{GCP_PROJECT}/regions/us-central1/subnetworks/qwen36-dev-door-us-central1"
    )


# The provider's texts for a failed lookup (magic-modules transport/transport.go
# HandleDataSourceNotFoundError: a 404 is `fmt.Errorf("%s not found", id)`, anything else
# "Error when reading or editing <label>: <err>", the label "Network Not Found : <name>" from
# data_source_google_compute_network.go, "Subnetwork Not Found : <name>" from the subnetwork's), with
# googleapi.Error's own form "googleapi: Error <code>: <message>, <reason>" (google-api-go-client
# googleapi/googleapi.go Error()) and Compute's message for a missing permission.
NETWORK_ID = f"projects/{GCP_PROJECT}/global/networks/qwen36-dev"
SUBNET = "qwen36-dev-door-us-central1"
NETWORK_404 = f"{NETWORK_ID} not found"
NETWORK_403 = (
    "Error when reading or editing Network Not Found : qwen36-dev: googleapi: Error 403: Required "
    f"'compute.networks.get' permission for '{NETWORK_ID}', forbidden"
)
SUBNET_403 = (
    f"Error when reading or editing Subnetwork Not Found : {SUBNET}: googleapi: Error 403: Required "
    f"'compute.subnetworks.get' permission for 'projects/{GCP_PROJECT}/regions/us-central1/subnetworks/"
    f"{SUBNET}', forbidden"
)
COMPUTE_OFF = (
    "Error when reading or editing Network Not Found : qwen36-dev: googleapi: Error 403: Compute Engine "
    "API has not been used in project 123456789012 before or it is disabled. Enable it by visiting "
    "https://console.developers.google.com/apis/api/compute.googleapis.com/overview?project=123456789012 "
    "then retry., accessNotConfigured"
)


def test_only_the_providers_404_text_means_the_kept_network_is_absent() -> None:
    absent = deploy("dev", network_errors={"qwen36-dev": NETWORK_404})
    assert absent.registrations["network-vpc"].import_id == ""
    # Compute off: nothing of the stack can exist yet, and the program enables the API.
    assert (
        deploy("dev", network_errors={"qwen36-dev": COMPUTE_OFF}).registrations["network-vpc"].import_id == ""
    )
    # A denied read says "Not Found" too, but must not skip the import and the not-ours guard.
    with pytest.raises(Exception, match=r"Error 403: Required 'compute.networks.get' permission"):
        deploy("dev", network_errors={"qwen36-dev": NETWORK_403})
    with pytest.raises(Exception, match=r"Error 403: Required 'compute.subnetworks.get' permission"):
        deploy("dev", network_errors={SUBNET: SUBNET_403})


def test_a_vpc_of_our_name_that_is_not_ours_is_refused() -> None:
    with pytest.raises(Exception, match=r"a VPC named qwen36-dev already exists .* is not this stack.s"):
        deploy("dev", kept_networks={"qwen36-dev": "someone else's network"})


def test_without_a_door_nothing_of_it_exists_and_the_network_goes_with_destroy() -> None:
    d = deploy("dev", {"door": False})
    assert not d.of_type(RUN) and not d.of_type(OBJECT) and not d.of_type(DASHBOARD)
    assert {r.name for r in d.of_type(SUBNETWORK)} == {"network-subnet"}
    assert d.registrations["network-vpc"].retain_on_delete is False
    assert "dashboardUrl" not in d.outputs


def test_the_boot_script_asks_the_door_for_the_idle_stop(d: Deployment) -> None:
    script = d.one("gcp:compute/regionInstanceTemplate:RegionInstanceTemplate").inputs["metadata"][
        "startup-script"
    ]
    assert f"IDLE_STOP_DOOR_URL='{STOP_URL}'" in script
    bare = deploy("dev", {"door": False}).one("gcp:compute/regionInstanceTemplate:RegionInstanceTemplate")
    assert "IDLE_STOP_DOOR_URL=''" in bare.inputs["metadata"]["startup-script"]


def test_the_dashboard_shows_every_door_metric_beside_the_servers_own(d: Deployment) -> None:
    board = json.loads(d.one(DASHBOARD).inputs["dashboardJson"])
    assert board["displayName"] == "qwen36-dev: front door and server"
    text = json.dumps(board)
    shown = set(metric_types()) - {"custom.googleapis.com/qwen36/door/tokens_in"}  # shown with tokens_out
    for metric in (*shown, boot_protocol.ACCEPTANCE_METRIC_TYPE, boot_protocol.DECODE_RATE_METRIC_TYPE):
        assert metric in text, metric
    assert "custom.googleapis.com/qwen36/door/tokens_in" in text
    assert 'instance_name=~\\"qwen36-dev-.*\\"' in text  # the spend: this group's members only
    assert d.outputs["dashboardUrl"].startswith("https://console.cloud.google.com/monitoring/dashboards/")


def test_the_dashboard_has_a_per_key_panel_and_the_spend_split_by_share_of_tokens(d: Deployment) -> None:
    board = json.loads(d.one(DASHBOARD).inputs["dashboardJson"])
    widgets = {tile["widget"]["title"]: tile["widget"] for tile in board["mosaicLayout"]["tiles"]}
    requests = widgets["Requests by key (door, per minute)"]["xyChart"]["dataSets"]
    tokens = widgets["Prompt and completion tokens by key (door, per minute)"]["xyChart"]["dataSets"]
    for data_set, metric in [(requests[0], "requests"), (tokens[0], "tokens_in"), (tokens[1], "tokens_out")]:
        query = data_set["timeSeriesQuery"]["timeSeriesFilter"]
        assert query["filter"].startswith(f'metric.type="custom.googleapis.com/qwen36/door/{metric}"')
        assert query["aggregation"]["groupByFields"] == ["metric.label.key"]
    (spend,) = [w for title, w in widgets.items() if title.startswith("Estimated spend by key, last 30 days")]
    promql = spend["timeSeriesTable"]["dataSets"][0]["timeSeriesQuery"]["prometheusQuery"]
    hourly = d.outputs["estimatedHourlyCostUsd"]
    # Each key's prompt and completion tokens over all of them, times the 30 days' spend of the VM.
    assert promql == (
        "(sum by (key) (sum_over_time(custom_googleapis_com:qwen36_door_tokens_in_sum"
        '{monitored_resource="generic_task"}[30d])) + sum by (key) (sum_over_time('
        'custom_googleapis_com:qwen36_door_tokens_out_sum{monitored_resource="generic_task"}[30d]))) / '
        "scalar(sum(sum_over_time(custom_googleapis_com:qwen36_door_tokens_in_sum"
        '{monitored_resource="generic_task"}[30d])) + sum(sum_over_time('
        'custom_googleapis_com:qwen36_door_tokens_out_sum{monitored_resource="generic_task"}[30d]))) * '
        "scalar(sum(sum_over_time(compute_googleapis_com:instance_uptime"
        f'{{monitored_resource="gce_instance",instance_name=~"qwen36-dev-.*"}}[30d])) / 3600 * {hourly})'
    )
    tiles = board["mosaicLayout"]["tiles"]
    assert len({(t["xPos"], t["yPos"]) for t in tiles}) == len(tiles)  # no tile on top of another


def test_the_health_gate_ends_at_the_doors_url_and_a_new_door_revision_runs_it_again(d: Deployment) -> None:
    (gate,) = [r for r in d.of_type("command:local:Command") if r.name == "health-wait"]
    argv = shlex.split(gate.inputs["create"])
    assert argv[argv.index("--door-url") + 1] == d.outputs["apiBaseUrl"].removesuffix("/v1")
    assert argv[argv.index("--door-service") + 1] == "qwen36-dev-door"
    assert gate.inputs["triggers"][-1] == d.one(OBJECT).inputs["name"]


def test_the_settle_step_says_what_it_waits_for_and_for_how_long() -> None:
    from infra import grant_settle

    argv = shlex.split(grant_settle.command("the new reads of the door's source archive", 0.05))
    done = subprocess.run(argv, cwd=grant_settle.REPO_ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == [
        "settle: waiting 0 s for the new reads of the door's source archive to take effect before Cloud "
        "Run checks them (IAM: typically 2 min, 7 min or longer at times); only when the grants are new",
        "settle: the new reads of the door's source archive: 0 s passed",
    ]
