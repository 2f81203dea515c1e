"""qwen36-mtp-l4: Qwen3.6-35B-A3B with MTP on one spot L4. Wires the components; no logic here."""

import pulumi

from infra.api_key import ApiKey, ApiKeyArgs
from infra.apis import Apis, ApisArgs
from infra.config import deployment_name, load_config, load_gcp_project
from infra.health_gate import HealthGate, HealthGateArgs
from infra.identity import Identity, IdentityArgs
from infra.model_cache import ModelCache, ModelCacheArgs, model_object_name
from infra.network import NetworkAccess, NetworkAccessArgs
from infra.outputs import export_all
from infra.server import Server, ServerArgs
from infra.server_args import PORT
from infra.tooling_image import ToolingImage, ToolingImageArgs, choose_server_image

# Both read and validated before any resource is declared: a bad value stops here.
cfg = load_config()
project = load_gcp_project()
name = deployment_name(pulumi.get_stack())
labels = {"app": "qwen36-mtp-l4", "stack": name, "managed-by": "pulumi"}
network_tag = name

apis = Apis("apis", ApisArgs(project=project))
network = NetworkAccess(
    "network",
    NetworkAccessArgs(
        project=project, network_tag=network_tag, source_ranges=cfg.source_ranges, depends_on=[apis]
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

# The tooling image has docker and the server image baked in; without one the stock image is used.
tooling = (
    ToolingImage("tooling", ToolingImageArgs(cfg=cfg, project=project, depends_on=[apis]))
    if cfg.build_tooling_image
    else None
)
boot_image = choose_server_image(cfg, project, tooling)

server = Server(
    "server",
    ServerArgs(
        cfg=cfg,
        project=project,
        instance_name=name,
        image=boot_image.image,
        service_account_email=identity.email,
        bucket=cache.bucket_name,
        api_key_secret=api_key.secret_id if api_key else None,
        network_tag=network_tag,
        labels=labels,
        # The boot reads the bucket, the secret and through the firewall from its first second.
        depends_on=[apis, network, identity, cache] + ([api_key] if api_key else []),
    ),
)

# `pulumi up` ends only when the server answers: over HTTP when a source range is open, else by
# the boot's own report in guest attributes. A new VM or a changed boot script waits again.
gate = HealthGate(
    "health",
    HealthGateArgs(
        instance=server.instance,
        zone=server.zone,
        project=project,
        startup_script_sha256=server.startup_script_sha256,
        url=server.static_ip.apply(lambda ip: f"http://{ip}:{PORT}") if cfg.public_endpoint else None,
        api_key=api_key.api_key if api_key else None,
        timeout_minutes=cfg.health_timeout_minutes,
    ),
)

export_all(
    cfg,
    project=project,
    instance_name=server.instance_name,
    zone=server.zone,
    static_ip=gate.after(server.static_ip),
    bucket=cache.bucket_name,
    model_uri=cache.model_uri,
    api_key=api_key.api_key if api_key else None,
)
pulumi.export("startupScriptSha256", server.startup_script_sha256)
pulumi.export("modelCachePath", cache.probe.path)
pulumi.export("modelCacheNote", cache.probe.summary())
pulumi.export("bootImage", boot_image.image)
pulumi.export("bootImageNote", boot_image.summary)
