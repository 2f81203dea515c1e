"""qwen36-mtp-l4: Qwen3.6-35B-A3B with MTP on one spot L4. Wires the components; no logic here."""

import pulumi

from infra.api_key import ApiKey, ApiKeyArgs
from infra.apis import Apis, ApisArgs
from infra.autostop import IGNORE_CHANGES as AUTOSTOP_IGNORES
from infra.autostop import Autostop, AutostopArgs
from infra.autostop import export_outputs as export_autostop
from infra.config import deployment_name, load_config, load_gcp_project
from infra.dashboard import Dashboard, DashboardArgs
from infra.door import FrontDoor, FrontDoorArgs, project_number
from infra.door_keys import DoorKeys, DoorKeysArgs
from infra.fleet import Fleet, FleetArgs, export_fleet
from infra.health_gate import HealthGate, HealthGateArgs
from infra.identity import Identity, IdentityArgs
from infra.model_cache import ModelCache, ModelCacheArgs, model_object_name
from infra.network import NetworkAccess, NetworkAccessArgs
from infra.outputs import export_all
from infra.server_group import ServerGroup, ServerGroupArgs
from infra.tooling_image import ToolingImage, ToolingImageArgs, choose_server_image, find_tooling_image

# Both read and validated before any resource is declared: a bad value stops here.
cfg = load_config()
project = load_gcp_project()
name = deployment_name(pulumi.get_stack())
labels = {"app": "qwen36-mtp-l4", "stack": name, "managed-by": "pulumi"}
network_tag = name

apis = Apis("apis", ApisArgs(project=project, door=cfg.front_door))
network = NetworkAccess(
    "network",
    NetworkAccessArgs(
        project=project,
        region=cfg.region,
        network_tag=network_tag,
        # A fleet's clients reach the load balancer, where Cloud Armor enforces sourceRanges; its
        # members' 8080 admits only Google's ranges. With a door, 8080 admits the door's subnet.
        source_ranges=[] if cfg.fleet else cfg.source_ranges,
        door=cfg.front_door,
        # Internal addresses only, unless externalIp: the internet through Cloud NAT.
        nat=not cfg.external_ip,
        depends_on=[apis],
    ),
)
cache = ModelCache(
    "model-cache",
    ModelCacheArgs(cfg=cfg, project=project, deployment=name, labels=labels, depends_on=[apis]),
)
identity = Identity(
    "identity",
    IdentityArgs(
        project=project,
        account_id=name,
        bucket=cache.bucket_name,
        self_stage_model=cfg.self_stage_model,
        model_object=model_object_name(cfg),
        depends_on=[apis],
    ),
)
api_key = (
    ApiKey(
        "api-key",
        ApiKeyArgs(
            project=project,
            secret_id=f"{name}-api-key",
            accessor_member=identity.member,
            labels=labels,
            depends_on=[apis],
        ),
    )
    if cfg.api_key
    else None
)

# The single server's endpoint: HTTPS, the key, wake on request (the key is required with a door).
with_door = cfg.front_door and api_key is not None and network.door_subnetwork is not None
# The door's named keys beside the program's one (`qwen36 keys` adds them).
door_keys = (
    DoorKeys("keyset", DoorKeysArgs(project=project, deployment=name, labels=labels, depends_on=[apis]))
    if with_door
    else None
)
door = (
    FrontDoor(
        "door",
        FrontDoorArgs(
            cfg=cfg,
            project=project,
            project_number=project_number(project),
            deployment=name,
            group_name=name,
            network=network.network_name,
            subnetwork=network.door_subnetwork,
            bucket=cache.bucket_name,
            api_key_secret=api_key.secret_id,
            keys_secret=door_keys.secret_id,
            vm_account_email=identity.email,
            vm_account_id=identity.unique_id,
            labels=labels,
            depends_on=[apis, network, cache, api_key],
        ),
    )
    if door_keys is not None and api_key is not None and network.door_subnetwork is not None
    else None
)

# The tooling image has docker and the server image baked in. Where the build's family holds none yet,
# it is baked first: the group's template names the baked image, so the group waits for the bake.
found_image = find_tooling_image(cfg, project)
tooling = (
    ToolingImage(
        "tooling",
        ToolingImageArgs(
            cfg=cfg,
            project=project,
            deployment=name,
            network=network.network_name,
            subnetwork=network.subnetwork_name,
            depends_on=[apis, network],
        ),
    )
    if cfg.build_tooling_image and cfg.use_tooling_image and found_image is None
    else None
)
boot_image = choose_server_image(cfg, found_image, tooling)

server = ServerGroup(
    "server",
    ServerGroupArgs(
        cfg=cfg,
        project=project,
        group_name=name,
        image=boot_image.image,
        service_account_email=identity.email,
        bucket=cache.bucket_name,
        api_key_secret=api_key.secret_id if api_key else None,
        network_tag=network_tag,
        # An autoscaler owns the size of an autoscaled group, the idle watcher resizes a single
        # server's group to 0 and `qwen36 wake` back: Pulumi must not set the size back on its own.
        target_size=None if cfg.autoscaled else cfg.replicas,
        ignore_changes=list(AUTOSTOP_IGNORES)
        if cfg.autoscaled or cfg.autostop_minutes or cfg.front_door
        else [],
        network=network.network,
        subnetwork=network.subnetwork,
        labels=labels,
        door_url=door.stop_url if door is not None else None,
        secure_boot=boot_image.secure_boot,
        # The boot reads the bucket, the secret and through the firewall from its first second.
        depends_on=[apis, network, identity, cache] + ([api_key] if api_key else []),
    ),
)

# Who may read and resize the group: the door (wake, and the idle stop the VM asks it for), else the
# VM's own watcher. IAM cannot narrow the grant to one group: infra/autostop.py says why and what
# that allows.
autostop = (
    Autostop(
        "autostop",
        AutostopArgs(
            project=project,
            deployment=name,
            member=door.member if door is not None else identity.member,
            read_members_of=name if door is not None else None,
            depends_on=[apis],
        ),
    )
    if door is not None or cfg.autostop_minutes
    else None
)

# More than one server: one endpoint through Google's load balancer, sized by their load when autoscaled.
fleet = (
    Fleet(
        "fleet",
        FleetArgs(
            cfg=cfg,
            project=project,
            region=cfg.region,
            instance_group=server.instance_group,
            group=server.group.self_link,
            health_check=server.health_check.self_link,
            deployment=name,
            labels=labels,
            depends_on=[apis],
        ),
    )
    if cfg.fleet
    else None
)

# `pulumi up` ends only when a member of the group answers, by the boot's own report in guest
# attributes, and, with a door, when the door's URL reaches it. A new template (any change to the VM)
# or a new door revision waits again.
gate = HealthGate(
    "health",
    HealthGateArgs(
        project=project,
        region=server.region,
        group_name=server.group_name,
        template_id=server.template_id,
        startup_script_sha256=server.startup_script_sha256,
        api_key=api_key.api_key if api_key else None,
        door_url=door.url if door is not None else None,
        door_service=door.service.name if door is not None else None,
        door_revision=door.source.name if door is not None else None,
        timeout_minutes=cfg.health_timeout_minutes,
        depends_on=[server.group],
    ),
)

export_all(
    cfg,
    project=project,
    group_name=gate.after(server.group_name),
    bucket=cache.bucket_name,
    model_uri=cache.model_uri,
    api_key=api_key.api_key if api_key else None,
    door_url=door.url if door is not None else None,
    fleet_origin=fleet.origin if fleet is not None else None,
)
if fleet is not None:
    export_fleet(
        cfg,
        fleet,
        project=project,
        region=cfg.region,
        group_name=server.group_name,
        servers_now=server.group.target_size,
    )
if autostop is not None and cfg.autostop_minutes:
    export_autostop(
        stack=pulumi.get_stack(),
        project=project,
        region=cfg.region,
        group_name=server.group_name,
        size=cfg.replicas,
        url=None,
        timeout_minutes=cfg.health_timeout_minutes,
        idle_minutes=cfg.autostop_minutes,
    )
# What the door measures beside the server's own figures and the month's spend.
if door is not None:
    dashboard = Dashboard(
        "dashboard", DashboardArgs(cfg=cfg, project=project, group_name=name, depends_on=[apis])
    )
    pulumi.export("dashboardUrl", dashboard.url)
if door_keys is not None:
    pulumi.export("keysSecret", door_keys.name)
pulumi.export("startupScriptSha256", server.startup_script_sha256)
pulumi.export("modelCachePath", cache.probe.path)
pulumi.export("modelCacheNote", cache.probe.summary())
pulumi.export("bootImage", boot_image.image)
pulumi.export("bootImageNote", boot_image.summary)
pulumi.export("secureBoot", boot_image.secure_boot.apply(lambda d: d.on))
pulumi.export("secureBootNote", boot_image.secure_boot.apply(lambda d: d.reason_line or "Secure Boot on"))
