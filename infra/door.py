"""The front door: the single server's endpoint, a Cloud Run service (``door/``) on its own HTTPS URL.

It checks the API key before anything else, wakes the group when a request finds it at size 0 and
holds the request while the server boots, and proxies to the current member's internal address over
Direct VPC egress from a subnet of the stack's VPC (infra/network.py: the only source the firewall
admits to the server's port besides Google's health checkers and IAP). It scales to zero, so idle it
costs nothing; the VM's idle watcher asks it for the idle stop (``POST /_qwen36/idle-stop`` with the
VM's ID token), so it is the only identity that may resize the group (infra/autostop.py).

How it is deployed (docs/door.md has the options and the reasons): Cloud Run's source deploy
without a build. The container is ``scratch`` on Google's Python base image, with the code from a
tar.gz in the model bucket that ``infra/door_archive.py`` packs deterministically from ``door/`` and
its pinned pure-Python wheels, so nothing is built and no Docker runs on the user's machine, and a
revision is made exactly when the archive's bytes change. No Cloud Build, no Artifact Registry, no
build account. https://cloud.google.com/run/docs/deploying-source-code (the provider's "Cloudrunv2
Service Zip Deploy" example: pulumi_gcp/cloudrunv2/service.py)

Who may call it: anyone who has the key. Cloud Run's own invoker check is turned off
(``invoker_iam_disabled``) rather than granted to ``allUsers``: OpenAI clients send no Google identity,
and the ``allUsers`` binding is refused in every organization with domain-restricted sharing
(``iam.allowedPolicyMemberDomains``, on by default in organizations created since 2024), which the
invoker setting is not. https://cloud.google.com/run/docs/securing/managing-access#invoker_check
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_gcp as gcp

from infra import door_archive, grant_settle
from infra.cold_start import cold_start_s
from infra.config import StackConfig
from infra.names import suffixed_id
from infra.server_args import PORT

# Google's Python runtime for source deploys (the base-images page gives
# REGION-docker.pkg.dev/serverless-runtimes/STACK/runtimes/RUNTIME_ID; the door is pure Python and
# runs on any 3.11+). https://cloud.google.com/docs/buildpacks/base-images
BASE_IMAGE = "{region}-docker.pkg.dev/serverless-runtimes/google-22-full/runtimes/python313"
SOURCE_PREFIX = "door"
# The interpreter by the name the provider's own acceptance test of this shape runs on the same base
# image (magic-modules mmv1/third_party/terraform/services/cloudrunv2/
# resource_cloud_run_v2_service_zip_deploy_test.go.tmpl: ``command = ["python"]``, ``args =
# ["main.py"]``, ``google-22-full/runtimes/python313``). ``python3`` could be Ubuntu 22.04's own 3.10
# (the ``google-22`` stack's system interpreter) if the runtime's is not first on PATH; no page we
# read says which comes first. main.py also refuses, in one line, any interpreter below 3.11.
COMMAND = ("python",)
# The archive is written here before Pulumi uploads it (an asset is read by path).
ARCHIVE_CACHE = Path.home() / ".cache" / "qwen36-mtp-l4" / "door"
# One instance holds every request in flight, which the idle veto relies on (the door refuses the
# stop while it holds or streams one), except briefly: "this maximum setting can be exceeded for a
# brief period due to circumstances such as traffic spikes"
# (https://cloud.google.com/run/docs/configuring/max-instances), and the template's maximum is per
# revision, so a rollout's old and new revisions each may run one. The service-level maximum, the
# "combined maximum number of instances for all revisions receiving traffic" (pulumi_gcp 10.2.0
# ``ServiceScalingArgs``), is set too; the VM watcher's own in-flight check covers the rest of the
# gap. It holds up to Cloud Run's most concurrent requests. https://cloud.google.com/run/docs/about-concurrency
MAX_INSTANCES = 1
CONCURRENCY = 1000
# Cloud Run's longest request: the wake bound plus the longest generation must fit.
# https://cloud.google.com/run/docs/configuring/request-timeout
REQUEST_TIMEOUT = "3600s"
# A whole vCPU (a fractional one allows a concurrency of 1), billed only while requests run.
# https://cloud.google.com/run/docs/configuring/billing-settings
CPU = "1"
MEMORY = "512Mi"
# Service-account ids: 6-30 characters. https://cloud.google.com/iam/docs/service-accounts-create
MAX_ACCOUNT_ID = 30
ACCOUNT_SUFFIX = "-door"
METRIC_WRITER = "roles/monitoring.metricWriter"
KEY_ACCESSOR = "roles/secretmanager.secretAccessor"
METRICS_FILE = door_archive.DOOR_DIR / "metrics.json"


def service_name(deployment: str) -> str:
    return f"{deployment}-door"


def account_id(deployment: str) -> str:
    return suffixed_id(deployment, ACCOUNT_SUFFIX, max_length=MAX_ACCOUNT_ID)


def deterministic_url(service: str, project_number: str, region: str) -> str:
    """The service's URL computed before it exists: https://SERVICE-PROJECT_NUMBER.REGION.run.app.

    The door's env must name the URL its ID tokens are minted for, and the VM's boot script calls
    it: the service's own ``uri`` output would make the service wait on itself.
    https://cloud.google.com/run/docs/triggering/https-request#deterministic
    """
    return f"https://{service}-{project_number}.{region}.run.app"


def wake_bound_s(calibration_budget_s: float) -> int:
    """How long the door holds a request for a wake: twice a cold start on the baked image from the
    cache (infra/cold_start.py), plus the first boot of a key's calibration, rounded up to 30 s."""
    seconds = 2 * cold_start_s("tooling", "gcs") + calibration_budget_s
    return int(-(-seconds // 30) * 30)


def project_number(project: str) -> str:
    """The project's number (the deterministic URL and Cloud Run's service agent are named by it)."""
    return str(gcp.organizations.get_project(project_id=project).number)


def door_metrics() -> dict[str, dict[str, Any]]:
    """The door's custom metrics by name, from door/metrics.json (read as data: infra imports no door)."""
    return {m["name"]: m for m in json.loads(METRICS_FILE.read_text(encoding="utf-8"))["metrics"]}


def metric_types() -> list[str]:
    return [m["type"] for m in door_metrics().values()]


@dataclass
class FrontDoorArgs:
    cfg: StackConfig
    project: str
    project_number: str
    deployment: str
    group_name: str
    network: pulumi.Input[str]
    """The VPC's name, for Direct VPC egress (see ``network_interfaces`` below)."""
    subnetwork: pulumi.Input[str]
    """The door's own subnet's name (infra/network.py ``door_subnet``), for Direct VPC egress."""
    bucket: pulumi.Input[str]
    """Where the source archive lives (the model bucket)."""
    api_key_secret: pulumi.Input[str]
    """The Secret Manager secret id of the API key."""
    keys_secret: pulumi.Input[str]
    """The Secret Manager secret id of the named-key set (infra/door_keys.py)."""
    vm_account_email: pulumi.Input[str]
    """The server VM's service account: the only one whose ID token may ask for the idle stop."""
    vm_account_id: pulumi.Input[str]
    """That account's unique id (``gcp.serviceaccount.Account.unique_id``): the token's ``sub``."""
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


class FrontDoor(pulumi.ComponentResource):
    """The door's account, its source archive and its Cloud Run service."""

    account: gcp.serviceaccount.Account
    member: pulumi.Output[str]
    """The door's account as an IAM member: the holder of the group's resize grant."""
    email: pulumi.Output[str]
    source: gcp.storage.BucketObject
    agent: gcp.projects.ServiceIdentity
    """Cloud Run's service agent, made to exist before its grant."""
    source_reads: list[gcp.storage.BucketIAMMember]
    settle: pulumi.Resource
    service: gcp.cloudrunv2.Service
    url: pulumi.Output[str]
    """The door's HTTPS origin as Cloud Run reports it: apiBaseUrl and webUiUrl."""
    stop_url: str
    """The deterministic URL the VM's idle watcher calls (and the audience of its ID token)."""

    def __init__(self, name: str, args: FrontDoorArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:FrontDoor", name, None, opts)
        cfg = args.cfg
        first = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        child = pulumi.ResourceOptions(parent=self)
        service = service_name(args.deployment)
        self.stop_url = deterministic_url(service, args.project_number, cfg.region)
        self.account = gcp.serviceaccount.Account(
            f"{name}-sa",
            project=args.project,
            account_id=account_id(args.deployment),
            display_name="qwen36-mtp-l4 front door",
            description="The Cloud Run front door: reads the API key, wakes and stops its server group",
            opts=first,
        )
        self.email = self.account.email
        self.member = self.account.email.apply(lambda email: f"serviceAccount:{email}")
        gcp.projects.IAMMember(
            f"{name}-metric-writer", project=args.project, role=METRIC_WRITER, member=self.member, opts=child
        )
        # The two secrets it reads at runtime: the program's key and the named-key set.
        secret_reads = [
            gcp.secretmanager.SecretIamMember(
                f"{name}-{role}-accessor",
                project=args.project,
                secret_id=secret,
                role=KEY_ACCESSOR,
                member=self.member,
                opts=child,
            )
            for role, secret in (("key", args.api_key_secret), ("keys", args.keys_secret))
        ]
        archive = door_archive.write(ARCHIVE_CACHE)
        self.source = gcp.storage.BucketObject(
            f"{name}-source",
            bucket=args.bucket,
            name=f"{SOURCE_PREFIX}/{archive.name}",
            source=pulumi.FileAsset(str(archive)),
            content_type="application/gzip",
            opts=first,
        )
        # Who fetches ``sourceCode.cloudStorageSource`` is not settled by any page we read (the
        # provider's zip-deploy test runs as the default compute account, which holds Editor), so both
        # candidates get the same read, held to the door's prefix: Cloud Run's service agent and the
        # door's own account. The agent is created asynchronously when run.googleapis.com is enabled;
        # ServiceIdentity asks Service Usage for it (services.generateServiceIdentity,
        # https://cloud.google.com/service-usage/docs/reference/rest/v1beta1/services/generateServiceIdentity)
        # and its grant binds the member it returns, so the grant never names an agent that does not
        # exist yet (a 400 "Service account ... does not exist", which the provider retries only in
        # narrow cases: magic-modules transport/error_retry_predicates.go).
        self.agent = gcp.projects.ServiceIdentity(
            f"{name}-run-agent", project=args.project, service="run.googleapis.com", opts=first
        )
        readers = {"source-read": self.agent.member, "source-read-account": self.member}
        self.source_reads = [
            gcp.storage.BucketIAMMember(
                f"{name}-{role}",
                bucket=args.bucket,
                role="roles/storage.objectViewer",
                member=member,
                condition=gcp.storage.BucketIAMMemberConditionArgs(
                    title="door-source-only",
                    description="The front door's source archives, nothing else",
                    expression=pulumi.Output.concat(
                        'resource.name.startsWith("projects/_/buckets/',
                        args.bucket,
                        f'/objects/{SOURCE_PREFIX}/")',
                    ),
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, self.agent]),
            )
            for role, member in readers.items()
        ]
        # New grants take "typically 2 minutes, potentially 7 minutes or longer" to take effect
        # (https://cloud.google.com/iam/docs/access-change-propagation), and Cloud Run checks what the
        # revision needs when it creates it: a first create that fails is not retried (Service.yaml:
        # an OpAsync create with no error_retry_predicates) but tainted (taint_resource_on_failed_create,
        # magic-modules #10298), the "fails the first time, passes on a rerun" of
        # terraform-provider-google #16350, #13786 and #17245. So the service waits for a settle step
        # that runs only when these grants are new (infra/grant_settle.py). The API key is read at
        # run time, not at the revision's creation, and the gate's door look waits out its grant.
        self.settle = grant_settle.settle_step(
            f"{name}-grants-settle",
            grants=[self.agent, *self.source_reads],
            what="the new reads of the door's source archive",
            opts=child,
        )
        env = {
            "QWEN36_DOOR_PROJECT": args.project,
            "QWEN36_DOOR_REGION": cfg.region,
            "QWEN36_DOOR_GROUP": args.group_name,
            "QWEN36_DOOR_UPSTREAM_PORT": str(PORT),
            "QWEN36_DOOR_MODEL_ALIAS": cfg.alias,
            "QWEN36_DOOR_WAKE_BOUND_S": str(cfg.door_wake_bound_seconds),
            "QWEN36_DOOR_STOP_AUDIENCES": self.stop_url,
        }
        envs = [gcp.cloudrunv2.ServiceTemplateContainerEnvArgs(name=k, value=v) for k, v in env.items()]
        envs += [
            gcp.cloudrunv2.ServiceTemplateContainerEnvArgs(
                name="QWEN36_DOOR_STOP_SERVICE_ACCOUNT", value=args.vm_account_email
            ),
            # Its unique id too: a token whose `sub` (or `azp`) is the account's id passes without an
            # `email` claim (door/idtoken.py says why).
            gcp.cloudrunv2.ServiceTemplateContainerEnvArgs(
                name="QWEN36_DOOR_STOP_SERVICE_ACCOUNT_ID", value=args.vm_account_id
            ),
            # The secrets by name, read by the door itself at runtime: a secret env reference is checked
            # by Cloud Run when the revision is created, seconds after the grant, which IAM may not have
            # propagated yet (terraform-provider-google #16350, #13786, #17245); the door answers 503
            # until it can read them. No key's value is ever in the service's spec.
            # https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access
            gcp.cloudrunv2.ServiceTemplateContainerEnvArgs(
                name="QWEN36_DOOR_API_KEY_SECRET",
                value=pulumi.Output.concat("projects/", args.project, "/secrets/", args.api_key_secret),
            ),
            gcp.cloudrunv2.ServiceTemplateContainerEnvArgs(
                name="QWEN36_DOOR_KEYS_SECRET",
                value=pulumi.Output.concat("projects/", args.project, "/secrets/", args.keys_secret),
            ),
        ]
        self.service = gcp.cloudrunv2.Service(
            f"{name}-service",
            project=args.project,
            name=service,
            location=cfg.region,
            description="qwen36-mtp-l4 front door: the API key, wake on request, the proxy to the server",
            ingress="INGRESS_TRAFFIC_ALL",
            invoker_iam_disabled=True,
            # A stack's `pulumi destroy` must be able to delete it (the provider defaults to true).
            deletion_protection=False,
            labels=dict(args.labels),
            # Bounds all revisions together (the template's maximum is per revision): MAX_INSTANCES.
            scaling=gcp.cloudrunv2.ServiceScalingArgs(max_instance_count=MAX_INSTANCES),
            template=gcp.cloudrunv2.ServiceTemplateArgs(
                service_account=self.account.email,
                timeout=REQUEST_TIMEOUT,
                max_instance_request_concurrency=CONCURRENCY,
                scaling=gcp.cloudrunv2.ServiceTemplateScalingArgs(
                    min_instance_count=0, max_instance_count=MAX_INSTANCES
                ),
                # Only private ranges through the VPC: Google's APIs stay on Cloud Run's own path. The
                # network and subnet by name, the form of every provider sample and test
                # (cloudrunv2_service_directvpc.tf.tmpl: network = "default"): Service.yaml's
                # networkInterfaces.network/subnetwork are default_from_api with no diff suppression,
                # so a self link the API echoes in another form would make a new revision every `up`.
                vpc_access=gcp.cloudrunv2.ServiceTemplateVpcAccessArgs(
                    egress="PRIVATE_RANGES_ONLY",
                    network_interfaces=[
                        gcp.cloudrunv2.ServiceTemplateVpcAccessNetworkInterfaceArgs(
                            network=args.network, subnetwork=args.subnetwork
                        )
                    ],
                ),
                containers=[
                    gcp.cloudrunv2.ServiceTemplateContainerArgs(
                        image="scratch",
                        base_image_uri=BASE_IMAGE.format(region=cfg.region),
                        commands=list(COMMAND),
                        args=["main.py"],
                        source_code=gcp.cloudrunv2.ServiceTemplateContainerSourceCodeArgs(
                            cloud_storage_source=gcp.cloudrunv2.ServiceTemplateContainerSourceCodeCloudStorageSourceArgs(
                                bucket=args.bucket,
                                object=self.source.name,
                                generation=self.source.generation.apply(str),
                            )
                        ),
                        envs=envs,
                        resources=gcp.cloudrunv2.ServiceTemplateContainerResourcesArgs(
                            limits={"cpu": CPU, "memory": MEMORY}, cpu_idle=True, startup_cpu_boost=True
                        ),
                        startup_probe=gcp.cloudrunv2.ServiceTemplateContainerStartupProbeArgs(
                            http_get=gcp.cloudrunv2.ServiceTemplateContainerStartupProbeHttpGetArgs(
                                path="/health"
                            )
                        ),
                    )
                ],
            ),
            # A revision that cannot read the source fails to start, and one that cannot read the keys
            # yet answers 503: every grant first, and the source's reads given time to take effect.
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[*args.depends_on, *self.source_reads, *secret_reads, self.settle],
            ),
        )
        self.url = self.service.uri
        self.register_outputs({"url": self.url, "stop_url": self.stop_url, "email": self.email})
