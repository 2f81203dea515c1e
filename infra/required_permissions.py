"""What the deployer's own account must be allowed to do, by what the program creates: the one list.

``qwen36 check`` tests these with Cloud Resource Manager's ``projects.testIamPermissions``
(https://cloud.google.com/resource-manager/reference/rest/v1/projects/testIamPermissions) before the
deploy; ``tests/check/test_required_permissions.py`` runs the program under Pulumi's mocks for several
stack configs and fails when it declares a resource type that no group here covers, or when a group
covers a type the program no longer declares.

Each group is one kind of thing the program (or ``scripts/deploy.sh``) creates: the Pulumi types it
declares, the API that serves it, the stack configs it appears in (``when``, a key of ``CONDITIONS``),
a predefined role that holds its permissions (the fix a project owner can grant), and each permission
with the call that needs it. The create/get/update/delete set of a resource is what the provider's
CRUD calls check; ``.use``/``.useReadOnly`` is checked when another resource refers to it.
https://cloud.google.com/compute/docs/access/iam-permissions
https://cloud.google.com/iam/docs/permissions-reference
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from infra.config import StackConfig


@dataclass(frozen=True)
class Permission:
    name: str
    why: str


@dataclass(frozen=True)
class ResourceGroup:
    name: str
    declares: tuple[str, ...]
    """Pulumi type tokens (``gcp:compute/network:Network``), or the script that makes it outside Pulumi."""
    service: str
    """The API that serves it: a disabled one fails the deploy unless something enables it first."""
    enabled_by: str
    """What enables ``service`` before it is needed (``infra/apis.py`` enables the program's own)."""
    when: str
    role: str
    permissions: tuple[Permission, ...]


def _p(*pairs: tuple[str, str]) -> tuple[Permission, ...]:
    return tuple(Permission(name, why) for name, why in pairs)


def _crud(kind: str, what: str, *verbs: str) -> list[tuple[str, str]]:
    return [(f"{kind}.{verb}", f"{verb} {what}") for verb in verbs]


# ``bakes``: the build's tooling-image family holds no image yet, so this deploy bakes one
# (infra/tooling_image.py); only the Compute API can tell, so the caller passes it in.
Condition = Callable[[StackConfig, bool], bool]
CONDITIONS: dict[str, Condition] = {
    "always": lambda cfg, bakes: True,
    "api_key": lambda cfg, bakes: cfg.api_key,
    # __main__.py makes the group's resize role for the door's wake and for the idle stop.
    "resize_role": lambda cfg, bakes: cfg.front_door or cfg.autostop_minutes > 0,
    "bucket_destroyed": lambda cfg, bakes: not cfg.keep_model_bucket,
    "bakes": lambda cfg, bakes: bakes and cfg.use_tooling_image and cfg.build_tooling_image,
    "fleet": lambda cfg, bakes: cfg.fleet,
    "fleet_http": lambda cfg, bakes: cfg.fleet and not cfg.domain,
    "fleet_https": lambda cfg, bakes: cfg.fleet and bool(cfg.domain),
    "autoscaled": lambda cfg, bakes: cfg.autoscaled,
    "door": lambda cfg, bakes: cfg.front_door,
    "nat": lambda cfg, bakes: not cfg.external_ip,
    "external_ip": lambda cfg, bakes: cfg.external_ip,
}

APIS = "infra/apis.py"

GROUPS: tuple[ResourceGroup, ...] = (
    ResourceGroup(
        name="APIs",
        declares=("gcp:projects/service:Service",),
        service="serviceusage.googleapis.com",
        # On in every new project: https://cloud.google.com/service-usage/docs/enabled-service#default
        enabled_by="every new project",
        when="always",
        role="roles/serviceusage.serviceUsageAdmin",
        permissions=_p(
            ("serviceusage.services.enable", "enable the APIs of infra/apis.py"),
            ("serviceusage.services.get", "read an API's state back"),
            ("serviceusage.services.list", "list the project's enabled APIs"),
        ),
    ),
    ResourceGroup(
        name="Cloud Run's service agent",
        # infra/door.py asks Service Usage for Cloud Run's agent before granting it the source read
        # (services.generateServiceIdentity). Its reference names no permission; serviceusage.services.use
        # is assumed (unconfirmed: the live check reads it).
        # https://cloud.google.com/service-usage/docs/reference/rest/v1beta1/services/generateServiceIdentity
        declares=("gcp:projects/serviceIdentity:ServiceIdentity",),
        service="serviceusage.googleapis.com",
        enabled_by="every new project",
        when="door",
        role="roles/serviceusage.serviceUsageAdmin",
        permissions=_p(
            ("serviceusage.services.use", "make Cloud Run's service agent exist before its grant")
        ),
    ),
    ResourceGroup(
        name="network",
        declares=(
            "gcp:compute/network:Network",
            "gcp:compute/subnetwork:Subnetwork",
            "gcp:compute/firewall:Firewall",
        ),
        service="compute.googleapis.com",
        enabled_by=APIS,
        when="always",
        role="roles/compute.networkAdmin and roles/compute.securityAdmin",
        permissions=_p(
            *_crud("compute.networks", "the stack's VPC", "create", "get", "delete"),
            ("compute.networks.updatePolicy", "add the firewall rules to the VPC"),
            *_crud("compute.subnetworks", "the VPC's subnet", "create", "get", "delete"),
            *_crud("compute.firewalls", "the ingress rules", "create", "get", "update", "delete"),
            ("compute.globalOperations.get", "wait for the VPC's and the rules' operations"),
            ("compute.regionOperations.get", "wait for the subnet's operations"),
        ),
    ),
    ResourceGroup(
        name="external IPs",
        # An access config on the members' template and the builder's --address: no resource of its own.
        declares=(),
        service="compute.googleapis.com",
        enabled_by=APIS,
        when="external_ip",
        role="roles/compute.networkUser",
        permissions=_p(
            ("compute.subnetworks.useExternalIp", "give the members and the builder ephemeral external IPs"),
        ),
    ),
    ResourceGroup(
        name="cloud nat",
        declares=("gcp:compute/router:Router", "gcp:compute/routerNat:RouterNat"),
        service="compute.googleapis.com",
        enabled_by=APIS,
        when="nat",
        role="roles/compute.networkAdmin",
        permissions=_p(
            # A NAT is part of its router: the provider creates, updates and deletes it with a PATCH
            # of the router (magic-modules resource_compute_router_nat).
            *_crud(
                "compute.routers", "the Cloud Router and its Cloud NAT", "create", "get", "update", "delete"
            ),
            ("compute.networks.updatePolicy", "add the router to the VPC"),
            ("compute.regionOperations.get", "wait for the router's operations"),
        ),
    ),
    ResourceGroup(
        name="model cache",
        declares=("gcp:storage/bucket:Bucket", "gcp:storage/bucketIAMMember:BucketIAMMember"),
        service="storage.googleapis.com",
        enabled_by=APIS,
        when="always",
        role="roles/storage.admin",
        permissions=_p(
            ("storage.buckets.list", "find a bucket kept by an earlier deployment (infra/model_cache.py)"),
            *_crud("storage.buckets", "the model bucket", "create", "get", "update", "delete"),
            ("storage.buckets.getIamPolicy", "read the bucket's grants"),
            ("storage.buckets.setIamPolicy", "let the server's account read (and self-stage) the model"),
            ("storage.objects.get", "the preview's look at the cached model (infra/cache_probe.py)"),
        ),
    ),
    ResourceGroup(
        name="model cache (destroyed with the stack)",
        declares=("gcp:storage/bucket:Bucket",),
        service="storage.googleapis.com",
        enabled_by=APIS,
        when="bucket_destroyed",
        role="roles/storage.admin",
        permissions=_p(
            ("storage.objects.list", "empty the bucket on destroy (keepModelBucket: false)"),
            ("storage.objects.delete", "empty the bucket on destroy (keepModelBucket: false)"),
        ),
    ),
    ResourceGroup(
        name="service accounts",
        declares=("gcp:serviceaccount/account:Account",),
        service="iam.googleapis.com",
        enabled_by=APIS,
        when="always",
        role="roles/iam.serviceAccountAdmin and roles/iam.serviceAccountUser",
        permissions=_p(
            *_crud("iam.serviceAccounts", "the server's own account", "create", "get", "update", "delete"),
            (
                "iam.serviceAccounts.actAs",
                "run the group's members (and the image builder) as their accounts",
            ),
        ),
    ),
    ResourceGroup(
        name="project grants",
        declares=("gcp:projects/iAMMember:IAMMember",),
        service="cloudresourcemanager.googleapis.com",
        enabled_by=APIS,
        when="always",
        role="roles/resourcemanager.projectIamAdmin",
        permissions=_p(
            ("resourcemanager.projects.get", "read the project"),
            ("resourcemanager.projects.getIamPolicy", "read the project's grants"),
            ("resourcemanager.projects.setIamPolicy", "grant the server's account its log and metric roles"),
        ),
    ),
    ResourceGroup(
        name="API key",
        declares=(
            "gcp:secretmanager/secret:Secret",
            "gcp:secretmanager/secretVersion:SecretVersion",
            "gcp:secretmanager/secretIamMember:SecretIamMember",
            "random:index/randomPassword:RandomPassword",
        ),
        service="secretmanager.googleapis.com",
        enabled_by=APIS,
        when="api_key",
        role="roles/secretmanager.admin",
        permissions=_p(
            *_crud("secretmanager.secrets", "the API key's secret", "create", "get", "update", "delete"),
            ("secretmanager.secrets.getIamPolicy", "read the secret's grants"),
            ("secretmanager.secrets.setIamPolicy", "let the server's account read the key"),
            ("secretmanager.versions.add", "store the generated key"),
            ("secretmanager.versions.get", "read the version back"),
            ("secretmanager.versions.access", "read the key back into the stack's state"),
            ("secretmanager.versions.destroy", "destroy the key with the stack"),
        ),
    ),
    ResourceGroup(
        name="server group",
        declares=(
            "gcp:compute/healthCheck:HealthCheck",
            "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate",
            "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager",
        ),
        service="compute.googleapis.com",
        enabled_by=APIS,
        when="always",
        role="roles/compute.instanceAdmin.v1 and roles/iam.serviceAccountUser",
        permissions=_p(
            *_crud("compute.healthChecks", "the autohealing check", "create", "get", "delete"),
            ("compute.healthChecks.useReadOnly", "attach the check to the group"),
            *_crud("compute.instanceTemplates", "the server's template", "create", "get", "delete"),
            ("compute.instanceTemplates.useReadOnly", "run the group on the template"),
            *_crud(
                "compute.instanceGroupManagers", "the regional group", "create", "get", "update", "delete"
            ),
            # What creating the members asks of the caller, as creating VMs does.
            # https://cloud.google.com/compute/docs/instance-groups/creating-groups-of-managed-instances
            ("compute.instances.create", "let the group create its members"),
            ("compute.instances.setMetadata", "give the members their boot script and metadata"),
            ("compute.instances.setTags", "tag the members for the firewall rules"),
            ("compute.instances.setLabels", "label the members"),
            ("compute.instances.setServiceAccount", "run the members as the server's account"),
            ("compute.disks.create", "create the members' boot disks"),
            ("compute.images.useReadOnly", "boot from the Deep Learning VM or the tooling image"),
            ("compute.subnetworks.use", "put the members on the stack's subnet"),
            ("compute.regionOperations.get", "wait for the template's and the group's operations"),
            ("compute.globalOperations.get", "wait for the health check's operations"),
        ),
    ),
    ResourceGroup(
        name="health gate",
        declares=("command:local:Command",),
        service="compute.googleapis.com",
        enabled_by=APIS,
        when="always",
        role="roles/compute.instanceAdmin.v1",
        permissions=_p(
            ("compute.instanceGroupManagers.get", "follow the group's members and errors (qwen36/group.py)"),
            ("compute.instances.get", "read the member's last start"),
            ("compute.instances.getGuestAttributes", "read the member's boot report"),
            ("compute.instances.getSerialPortOutput", "show the boot's last lines when it fails"),
        ),
    ),
    ResourceGroup(
        name="tooling image bake",
        declares=(
            "command:local:Command",
            "gcp:compute/image:Image",
            "gcp:serviceaccount/account:Account",
            "gcp:projects/iAMMember:IAMMember",
        ),
        service="compute.googleapis.com",
        enabled_by=APIS,
        when="bakes",
        role="roles/compute.instanceAdmin.v1 and roles/compute.storageAdmin",
        permissions=_p(
            *_crud(
                "compute.instances",
                "the image builder, a VM made with gcloud",
                "create",
                "get",
                "stop",
                "delete",
            ),
            ("compute.instances.setMetadata", "give the builder the bake script"),
            ("compute.instances.setServiceAccount", "run the builder as its own account"),
            ("compute.instances.setLabels", "label the builder"),
            ("compute.instances.getGuestAttributes", "follow the bake's report"),
            ("compute.disks.create", "create the builder's disk"),
            ("compute.disks.useReadOnly", "make the image from the builder's disk"),
            ("compute.images.create", "create the tooling image"),
            ("compute.images.get", "read the image back"),
            ("compute.images.getFromFamily", "find the build's image family"),
            ("compute.subnetworks.use", "put the builder on the stack's subnet"),
            # The GPU test (infra/tooling_image.py GpuTest): a second pass with Secure Boot off, and
            # the verdict on the image (or the candidate deprecated out of the family).
            ("compute.instances.start", "boot the GPU test VM again with Secure Boot off"),
            ("compute.instances.updateShieldedInstanceConfig", "turn Secure Boot off on the GPU test VM"),
            ("compute.images.setLabels", "label the tooling image with the GPU test's verdict"),
            ("compute.images.deprecate", "take a candidate without a working GPU out of the family"),
            ("compute.zoneOperations.get", "wait for the builder's operations"),
        ),
    ),
    ResourceGroup(
        name="resize role",
        # The role id's random suffix needs no Google permission (a local provider).
        declares=("gcp:projects/iAMCustomRole:IAMCustomRole", "random:index/randomId:RandomId"),
        service="iam.googleapis.com",
        enabled_by=APIS,
        when="resize_role",
        role="roles/iam.roleAdmin",
        permissions=_p(
            *_crud("iam.roles", "the resize role", "create", "get", "update", "delete"),
            ("iam.roles.undelete", "take back a role deleted within 7 days"),
        ),
    ),
    ResourceGroup(
        name="load balancer",
        declares=(
            "gcp:compute/globalAddress:GlobalAddress",
            "gcp:compute/securityPolicy:SecurityPolicy",
            "gcp:compute/backendService:BackendService",
            "gcp:compute/uRLMap:URLMap",
            "gcp:compute/globalForwardingRule:GlobalForwardingRule",
        ),
        service="compute.googleapis.com",
        enabled_by=APIS,
        when="fleet",
        role="roles/compute.loadBalancerAdmin and roles/compute.securityAdmin",
        permissions=_p(
            *_crud("compute.globalAddresses", "the fleet's address", "create", "get", "delete"),
            ("compute.globalAddresses.use", "give the address to the forwarding rule"),
            *_crud("compute.securityPolicies", "the Cloud Armor policy", "create", "get", "update", "delete"),
            ("compute.securityPolicies.use", "attach the policy to the backend"),
            *_crud("compute.backendServices", "the backend service", "create", "get", "update", "delete"),
            ("compute.backendServices.use", "route the URL map to it"),
            ("compute.backendServices.setSecurityPolicy", "put Cloud Armor in front of it"),
            ("compute.instanceGroups.use", "use the server group as the backend"),
            ("compute.healthChecks.useReadOnly", "check the backends"),
            *_crud("compute.urlMaps", "the URL map", "create", "get", "delete"),
            ("compute.urlMaps.use", "give the map to the proxy"),
            *_crud("compute.globalForwardingRules", "the forwarding rule", "create", "get", "delete"),
            ("compute.globalOperations.get", "wait for the load balancer's operations"),
        ),
    ),
    ResourceGroup(
        name="load balancer (HTTP)",
        declares=("gcp:compute/targetHttpProxy:TargetHttpProxy",),
        service="compute.googleapis.com",
        enabled_by=APIS,
        when="fleet_http",
        role="roles/compute.loadBalancerAdmin",
        permissions=_p(
            *_crud("compute.targetHttpProxies", "the HTTP proxy", "create", "get", "delete"),
            ("compute.targetHttpProxies.use", "give the proxy to the forwarding rule"),
        ),
    ),
    ResourceGroup(
        name="load balancer (HTTPS)",
        declares=(
            "gcp:compute/targetHttpsProxy:TargetHttpsProxy",
            "gcp:compute/managedSslCertificate:ManagedSslCertificate",
        ),
        service="compute.googleapis.com",
        enabled_by=APIS,
        when="fleet_https",
        role="roles/compute.loadBalancerAdmin",
        permissions=_p(
            *_crud("compute.targetHttpsProxies", "the HTTPS proxy", "create", "get", "delete"),
            ("compute.targetHttpsProxies.use", "give the proxy to the forwarding rule"),
            *_crud("compute.sslCertificates", "the managed certificate", "create", "get", "delete"),
        ),
    ),
    ResourceGroup(
        name="autoscaler",
        declares=("gcp:compute/regionAutoscaler:RegionAutoscaler",),
        service="compute.googleapis.com",
        enabled_by=APIS,
        when="autoscaled",
        role="roles/compute.instanceAdmin.v1",
        permissions=_p(
            *_crud("compute.autoscalers", "the fleet's autoscaler", "create", "get", "update", "delete")
        ),
    ),
    ResourceGroup(
        name="dashboard",
        declares=("gcp:monitoring/dashboard:Dashboard",),
        service="monitoring.googleapis.com",
        enabled_by=APIS,
        when="door",
        role="roles/monitoring.dashboardEditor",
        permissions=_p(
            *_crud(
                "monitoring.dashboards",
                "the door's and the server's dashboard",
                "create",
                "get",
                "update",
                "delete",
            ),
        ),
    ),
    ResourceGroup(
        name="front door",
        # infra/door.py: the Cloud Run service (its invoker check off: the door checks the key), its
        # source archive in the model bucket; its account and grants are the accounts' and grants' groups.
        declares=("gcp:cloudrunv2/service:Service", "gcp:storage/bucketObject:BucketObject"),
        service="run.googleapis.com",
        enabled_by=APIS,
        when="door",
        role="roles/run.admin and roles/iam.serviceAccountUser",
        permissions=_p(
            *_crud("run.services", "the door's Cloud Run service", "create", "get", "update", "delete"),
            ("run.services.getIamPolicy", "read who may call the door"),
            ("run.services.setIamPolicy", "turn the invoker check off: the door checks the API key itself"),
            *_crud(
                "storage.objects", "the door's source archive in the model bucket", "create", "get", "delete"
            ),
            ("run.operations.get", "wait for the service's rollout"),
            ("iam.serviceAccounts.actAs", "run the door as its own account"),
        ),
    ),
    ResourceGroup(
        name="door key set",
        # infra/door_keys.py: the named keys' secret, which the program creates empty; `qwen36 keys`
        # then reads and adds its versions, and reads each key's usage from the door's series, with
        # these same credentials.
        declares=("gcp:secretmanager/secret:Secret", "gcp:secretmanager/secretIamMember:SecretIamMember"),
        service="secretmanager.googleapis.com",
        enabled_by=APIS,
        when="door",
        role="roles/secretmanager.admin and roles/monitoring.viewer",
        permissions=_p(
            *_crud("secretmanager.secrets", "the door's key set", "create", "get", "delete"),
            ("secretmanager.secrets.setIamPolicy", "let the door's account read the key set"),
            ("secretmanager.versions.access", "`qwen36 keys` reads the key set"),
            ("secretmanager.versions.add", "`qwen36 keys add`, `rotate` and `revoke` write a new key set"),
            ("monitoring.timeSeries.list", "`qwen36 keys list` and `qwen36 status` read each key's usage"),
        ),
    ),
    ResourceGroup(
        name="secrets key (Cloud KMS)",
        # The Pulumi secrets provider (gcpkms://): scripts/deploy.sh makes the key ring and key with
        # gcloud before the first `pulumi stack init`; every later command encrypts and decrypts with it.
        declares=("scripts/deploy.sh",),
        service="cloudkms.googleapis.com",
        enabled_by="scripts/deploy.sh",
        when="always",
        role="roles/cloudkms.admin and roles/cloudkms.cryptoKeyEncrypterDecrypter",
        permissions=_p(
            ("cloudkms.keyRings.create", "create the stack's key ring"),
            ("cloudkms.keyRings.get", "find the key ring"),
            ("cloudkms.cryptoKeys.create", "create the secrets key"),
            ("cloudkms.cryptoKeys.get", "find the key"),
            ("cloudkms.cryptoKeyVersions.useToEncrypt", "encrypt the stack's secrets (the API key)"),
            ("cloudkms.cryptoKeyVersions.useToDecrypt", "read the stack's secrets back"),
        ),
    ),
)


def applicable(cfg: StackConfig, *, bakes: bool) -> list[ResourceGroup]:
    """The groups this stack's config creates; ``bakes``: this deploy bakes the tooling image."""
    return [group for group in GROUPS if CONDITIONS[group.when](cfg, bakes)]


def required(groups: Iterable[ResourceGroup]) -> list[str]:
    """Every permission the groups need, once each, sorted."""
    return sorted({p.name for group in groups for p in group.permissions})
