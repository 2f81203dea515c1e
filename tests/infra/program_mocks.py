"""Run the real Pulumi program under Pulumi's mocks and record what it asks GCP for.

GCP and the Pulumi engine are the boundary this machine cannot cross: the mocks stand in for
the providers (echoing inputs, adding the computed fields the program reads) and answer the
one invoke (the bucket listing); everything on our side of it (config, components, exports)
runs for real.
"""

from __future__ import annotations

import dataclasses
import json
import runpy
import secrets
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import config as runtime_config
from pulumi.runtime import rpc, settings
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.sync_await import _sync_await

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `infra` is imported from the repo root, as `pulumi up` does
    sys.path.insert(0, str(ROOT))

from infra.policy import Resource  # noqa: E402

PROJECT = "qwen36-mtp-l4"
GCP_PROJECT = "acme-llm-test"
STACKS = ("dev", "europe-west4", "asia-southeast1")
# What the mocked pulumi-random hands out as the generated API key.
MOCK_API_KEY = "k3yK3yK3yK3yK3yK3yK3yK3yK3yK3yK3yK3yK3yK3yK3yK3y"
MOCK_GLOBAL_IP = "203.0.113.80"
MOCK_PROJECT_NUMBER = "123456789012"
MOCK_IP = "203.0.113.10"
RUN_AGENT = f"service-{MOCK_PROJECT_NUMBER}@serverless-robot-prod.iam.gserviceaccount.com"
COMPUTE = "https://www.googleapis.com/compute/v1"
# The suffix GCE adds to a template's name prefix (the first template's; each next one counts up).
TEMPLATE_SUFFIX = "20261130223000000000000001"


def secret_value(value: Any) -> Any:
    """The plain value of an input that arrived marked secret; fails if it was not marked."""
    # pulumi.runtime.rpc's wire form of a secret, which is how the mocks receive it.
    assert isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig, value
    return value["value"]


class RecordingMocks(pulumi.runtime.Mocks):
    """Echo each resource's inputs as its state, plus the computed fields GCP would fill in."""

    def __init__(
        self,
        existing_buckets: Mapping[str, Mapping[str, str]] | None = None,
        *,
        fail_invokes: bool = False,
        tooling_image: bool = True,
        kept_networks: Mapping[str, str] | None = None,
        secure_boot_verdict: str | None = None,
        network_errors: Mapping[str, str] | None = None,
    ) -> None:
        self.secure_boot_verdict = secure_boot_verdict
        self.kept_networks = dict(kept_networks or {})
        self.network_errors = dict(network_errors or {})
        self.resources: list[Resource] = []
        self.calls: list[str] = []
        self.existing_buckets = dict(existing_buckets or {})
        self.fail_invokes = fail_invokes
        self.tooling_image = tooling_image

    def _count(self, token: str) -> int:
        """How many resources of this type came before the newest one."""
        return sum(r.type == token for r in self.resources) - 1

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        inputs = dict(args.inputs)
        self.resources.append(Resource(args.typ, args.name, inputs))
        state = dict(inputs)
        computed: Mapping[str, Callable[[], dict[str, Any]]] = {
            "gcp:compute/address:Address": lambda: {"address": MOCK_IP},
            # projects.serviceAccounts: email, and uniqueId ("the unique, stable numeric ID for the
            # service account": 21 digits), the `sub` of its ID tokens.
            "gcp:serviceaccount/account:Account": lambda: {
                "email": f"{inputs['accountId']}@{GCP_PROJECT}.iam.gserviceaccount.com",
                "uniqueId": str(100000000000000000000 + sum(map(ord, inputs["accountId"]))),
            },
            # services.generateServiceIdentity for run.googleapis.com: Cloud Run's service agent
            # (https://cloud.google.com/iam/docs/service-agents: service-NUMBER@serverless-robot-prod).
            "gcp:projects/serviceIdentity:ServiceIdentity": lambda: {
                "email": RUN_AGENT,
                "member": f"serviceAccount:{RUN_AGENT}",
            },
            "gcp:storage/bucket:Bucket": lambda: {
                "name": inputs.get("name") or f"{args.name}-9f8e7d6",
                "url": f"gs://{inputs.get('name') or args.name + '-9f8e7d6'}",
            },
            "random:index/randomPassword:RandomPassword": lambda: {"result": MOCK_API_KEY},
            # Random as the provider's is: a new deployment (a new state) draws a new suffix.
            "random:index/randomId:RandomId": lambda: {"hex": secrets.token_hex(int(inputs["byteLength"]))},
            "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate": lambda: {
                "selfLink": f"{COMPUTE}/projects/{GCP_PROJECT}/regions/{inputs['region']}/instanceTemplates/"
                f"{inputs['namePrefix']}{int(TEMPLATE_SUFFIX) + self._count(args.typ)}"
            },
            "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager": lambda: {
                "instanceGroup": f"{COMPUTE}/projects/{GCP_PROJECT}/regions/{inputs['region']}/"
                f"instanceGroups/"
                f"{inputs['name']}",
                "selfLink": f"{COMPUTE}/projects/{GCP_PROJECT}/regions/{inputs['region']}/"
                f"instanceGroupManagers/{inputs['name']}",
            },
            "gcp:compute/globalAddress:GlobalAddress": lambda: {"address": MOCK_GLOBAL_IP},
            "gcp:projects/iAMCustomRole:IAMCustomRole": lambda: {
                "name": f"projects/{GCP_PROJECT}/roles/{inputs['roleId']}"
            },
            "gcp:compute/healthCheck:HealthCheck": lambda: {
                "selfLink": f"{COMPUTE}/projects/{GCP_PROJECT}/global/healthChecks/{inputs['name']}"
            },
            "gcp:compute/network:Network": lambda: {
                "selfLink": f"{COMPUTE}/projects/{GCP_PROJECT}/global/networks/{inputs['name']}"
            },
            "gcp:compute/subnetwork:Subnetwork": lambda: {
                "selfLink": (
                    f"{COMPUTE}/projects/{GCP_PROJECT}/regions/{inputs['region']}/subnetworks/{inputs['name']}"
                )
            },
            # Cloud Run's legacy URL form (https://cloud.google.com/run/docs/triggering/https-request):
            # the service's `uri` output, which the door's exports use.
            "gcp:cloudrunv2/service:Service": lambda: {
                "uri": f"https://{inputs['name']}-a1b2c3d4e5-uc.a.run.app",
            },
            # A GCS object's generation: a 16-digit microsecond timestamp (objects resource).
            "gcp:storage/bucketObject:BucketObject": lambda: {"generation": 1764590400000000},
            "gcp:secretmanager/secret:Secret": lambda: {
                "name": f"projects/123456789012/secrets/{inputs['secretId']}"
            },
            # The bake's GPU test prints its verdict code last (infra/tooling_image.py GpuTest).
            "command:local:Command": lambda: (
                {"stdout": f"{self.secure_boot_verdict}\n"}
                if args.name.endswith("-gpu-test") and self.secure_boot_verdict is not None
                else {}
            ),
        }
        state.update(computed.get(args.typ, dict)())
        if args.typ.startswith("gcp:compute/"):
            # Every Compute resource has a self link; the fleet's chain passes them along.
            kind = args.typ.rsplit(":", 1)[-1]
            name = state.get("name") or args.name
            state.setdefault("selfLink", f"{COMPUTE}/projects/{GCP_PROJECT}/global/{kind}/{name}")
        resource_id = state.get("name") or f"{args.name}-id"
        return str(resource_id), state

    def call(self, args: pulumi.runtime.MockCallArgs) -> Any:
        self.calls.append(args.token)
        if self.fail_invokes:
            raise RuntimeError("PERMISSION_DENIED: storage.buckets.list")
        if args.token == "gcp:storage/getBuckets:getBuckets":
            prefix = args.args.get("prefix") or ""
            listed = [
                {
                    "name": b,
                    "labels": dict(labels),
                    "location": "US",
                    "selfLink": "",
                    "storageClass": "STANDARD",
                }
                for b, labels in self.existing_buckets.items()
                if b.startswith(prefix)
            ]
            return {"buckets": listed, "id": "buckets", "prefix": prefix, "project": args.args.get("project")}
        if args.token in ("gcp:compute/getNetwork:getNetwork", "gcp:compute/getSubnetwork:getSubnetwork"):
            # networks.get / subnetworks.get: a resource an earlier deployment kept (description, self
            # link); anything else is the provider's "not found", which the mocks answer with {}.
            name = args.args["name"]
            if name in self.network_errors:
                # The provider's error as the engine hands it back: a failure, which the SDK raises
                # as "invoke of <token> failed: <reason> (<property>)" (pulumi/runtime/invoke.py).
                return {}, [("", self.network_errors[name])]
            if name not in self.kept_networks:
                return {}
            scope = (
                "global/networks"
                if "Network:" in args.token
                else f"regions/{args.args['region']}/subnetworks"
            )
            return {
                "name": name,
                "description": self.kept_networks[name],
                "selfLink": f"{COMPUTE}/projects/{GCP_PROJECT}/{scope}/{name}",
            }
        if args.token == "gcp:organizations/getProject:getProject":
            # projects.get: the number names the deterministic run.app URL and Cloud Run's agent.
            return {"projectId": args.args.get("projectId"), "number": MOCK_PROJECT_NUMBER, "name": "acme"}
        if args.token == "gcp:compute/getImage:getImage" and self.tooling_image:
            # The family lookup's answer once a bake exists (images.getFromFamily: the newest image).
            family = args.args["family"]
            return {
                "name": f"{family}-0a1b2c3d-73012345",
                "family": family,
                "project": args.args.get("project"),
                # The GPU test's verdict label (images resource `labels`); none on an older bake.
                "labels": {"secure-boot": self.secure_boot_verdict} if self.secure_boot_verdict else {},
            }
        return {}


@dataclass(frozen=True)
class Registration:
    """The resource options the engine would see for one resource (the mocks' args lack them)."""

    urn: str
    parent: str
    dependencies: tuple[str, ...]
    retain_on_delete: bool
    delete_before_replace: bool
    import_id: str


class RecordingMonitor(MockMonitor):
    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.registrations: dict[str, Registration] = {}

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        recorded = getattr(self.mocks, "resources", None) or []
        # Registrations run concurrently: another resource may have been recorded since this one.
        mine = next(
            (
                i
                for i in range(len(recorded) - 1, -1, -1)
                if (recorded[i].type, recorded[i].name) == (request.type, request.name)
            ),
            None,
        )
        if mine is not None:
            # What the engine (and so the policy pack) also sees: the URN, ignoreChanges and the
            # resources each input was computed from (RegisterResourceRequest.propertyDependencies).
            recorded[mine] = dataclasses.replace(
                recorded[mine],
                urn=response.urn,
                ignore_changes=tuple(request.ignoreChanges),
                property_dependencies={
                    key: tuple(deps.urns) for key, deps in request.propertyDependencies.items()
                },
            )
        self.registrations[request.name] = Registration(
            urn=response.urn,
            parent=request.parent,
            dependencies=tuple(request.dependencies),
            retain_on_delete=bool(request.retainOnDelete),
            delete_before_replace=bool(request.deleteBeforeReplace),
            import_id=request.importId,
        )
        return response


@dataclass
class Deployment:
    """What one run of ``__main__.py`` declared and exported."""

    resources: list[Resource]
    outputs: dict[str, Any]
    secret_outputs: set[str]
    registrations: dict[str, Registration] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def of_type(self, token: str) -> list[Resource]:
        return [r for r in self.resources if r.type == token]

    def one(self, token: str) -> Resource:
        found = self.of_type(token)
        assert len(found) == 1, f"expected one {token}, got {[r.name for r in found]}"
        return found[0]


def project_defaults() -> dict[str, Any]:
    """What Pulumi adds to every stack's config before the program runs: each key's ``default`` in
    Pulumi.yaml that the stack leaves unset (ValidateStackConfigAndApplyProjectConfig, pulumi/pulumi
    sdk/go/common/workspace/project.go; its project_test.go, TestStackConfigIsInheritedFromProjectConfig).
    """
    declared = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    return {f"{PROJECT}:{key}": spec["default"] for key, spec in declared.items() if "default" in spec}


def stack_config(stack: str) -> dict[str, Any]:
    """The config bag of Pulumi.<stack>.yaml, as the stack file writes it."""
    document = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    return dict(document.get("config") or {})


def as_pulumi_config(values: Mapping[str, Any]) -> dict[str, str]:
    """The CLI hands the program every value as a string; non-strings as JSON."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}


def deploy(
    stack: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    gcp_project: str | None = GCP_PROJECT,
    existing_buckets: Sequence[str] = (),
    foreign_buckets: Mapping[str, Mapping[str, str]] | None = None,
    fail_invokes: bool = False,
    tooling_image: bool = True,
    kept_networks: Mapping[str, str] | None = None,
    secure_boot_verdict: str | None = None,
    network_errors: Mapping[str, str] | None = None,
) -> Deployment:
    """Run ``__main__.py`` for a stack file's config plus ``overrides`` (short keys) under mocks.

    ``existing_buckets`` exist in the project with this stack's labels (kept by an earlier
    deployment); ``foreign_buckets`` with the labels given; ``kept_networks``: VPC and subnet names
    that exist, with their descriptions (a door's network outlives a destroy); ``network_errors``: the
    error text the provider answers those names' lookups with. ``tooling_image``: the
    build's tooling family holds an image (every deployment after the first); without one the program
    bakes it. ``secure_boot_verdict``: the GPU test's verdict (the found image's label, or the bake's
    test output); None: an image without one.
    """
    ours = {"app": PROJECT, "stack": f"qwen36-{stack}", "managed-by": "pulumi"}
    buckets = {name: ours for name in existing_buckets} | dict(foreign_buckets or {})
    config = {**project_defaults(), **stack_config(stack)}
    config.update({f"{PROJECT}:{k}": v for k, v in (overrides or {}).items()})
    if gcp_project is not None:
        config["gcp:project"] = gcp_project
    mocks = RecordingMocks(
        buckets,
        fail_invokes=fail_invokes,
        tooling_image=tooling_image,
        kept_networks=kept_networks,
        secure_boot_verdict=secure_boot_verdict,
        network_errors=network_errors,
    )
    monitor = RecordingMonitor(mocks)
    settings.ROOT.set(None)  # a fresh stack resource, so one run's exports never leak into the next
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    runtime_config.set_all_config(as_pulumi_config(config), [])
    outputs: dict[str, Any] = {}
    secret: set[str] = set()

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")
        root = settings.get_root_resource()
        assert root is not None
        exported = {k: pulumi.Output.from_input(v) for k, v in root.outputs.items()}  # type: ignore[attr-defined]
        secret.update(k for k, o in exported.items() if _sync_await(o.is_secret()))
        return pulumi.Output.all(**exported).apply(outputs.update)

    program()
    return Deployment(mocks.resources, outputs, secret, monitor.registrations, mocks.calls)
