"""The server's API key: random, a Pulumi secret, and in Secret Manager for the VM to fetch.

The VM reads it at boot with its own service account, so the key never sits in instance
metadata (readable by anyone with compute.instances.get) or in the startup script's log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp
import pulumi_random as random

API_KEY_LENGTH = 48
ACCESSOR_ROLE = "roles/secretmanager.secretAccessor"


@dataclass
class ApiKeyArgs:
    project: pulumi.Input[str]
    secret_id: str
    accessor_member: pulumi.Input[str]
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


class ApiKey(pulumi.ComponentResource):
    """``api_key`` is a Pulumi secret; ``secret_id`` names the Secret Manager secret holding it."""

    api_key: pulumi.Output[str]
    secret_id: pulumi.Output[str]
    secret: gcp.secretmanager.Secret

    def __init__(self, name: str, args: ApiKeyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:ApiKey", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        # Letters and digits only: the key travels in HTTP headers and shell variables unquoted-safe.
        password = random.RandomPassword(
            f"{name}-value", length=API_KEY_LENGTH, special=False, opts=pulumi.ResourceOptions(parent=self)
        )
        self.secret = gcp.secretmanager.Secret(
            f"{name}-secret",
            project=args.project,
            secret_id=args.secret_id,
            replication=gcp.secretmanager.SecretReplicationArgs(
                auto=gcp.secretmanager.SecretReplicationAutoArgs()
            ),
            labels=dict(args.labels),
            opts=child,
        )
        gcp.secretmanager.SecretVersion(
            f"{name}-version",
            secret=self.secret.id,
            secret_data=password.result,
            opts=pulumi.ResourceOptions(parent=self),
        )
        gcp.secretmanager.SecretIamMember(
            f"{name}-accessor",
            project=args.project,
            secret_id=self.secret.secret_id,
            role=ACCESSOR_ROLE,
            member=args.accessor_member,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.api_key = pulumi.Output.secret(password.result)
        self.secret_id = self.secret.secret_id
        self.register_outputs({"api_key": self.api_key, "secret_id": self.secret_id})
