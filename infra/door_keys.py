"""The front door's named keys: a Secret Manager secret the door reads at runtime and ``qwen36 keys``
writes, one version per edit of the set (its payload: ``qwen36/keys/keyset.py``, docs/door.md).

Pulumi creates the secret and nothing in it: a version managed here would be replaced by every
``pulumi up``, undoing each ``qwen36 keys add``. A secret without a version is an empty set to the door
and to the CLI. Its replication is the program's key's (``auto``), and ``pulumi destroy`` deletes it
with every version the CLI added (``projects.secrets.delete`` takes the secret's versions with it:
https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets/delete).
https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets/create
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

SUFFIX = "-door-keys"


def secret_id(deployment: str) -> str:
    """The key set's secret id: ``<deployment>-door-keys`` (contract C)."""
    return f"{deployment}{SUFFIX}"


@dataclass
class DoorKeysArgs:
    project: str
    deployment: str
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


class DoorKeys(pulumi.ComponentResource):
    """``secret_id`` is the secret's id, ``name`` its ``projects/<project>/secrets/<id>`` (the stack
    output ``keysSecret``, the door's ``QWEN36_DOOR_KEYS_SECRET``)."""

    secret: gcp.secretmanager.Secret
    secret_id: pulumi.Output[str]
    name: pulumi.Output[str]

    def __init__(self, name: str, args: DoorKeysArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:DoorKeys", name, None, opts)
        self.secret = gcp.secretmanager.Secret(
            f"{name}-secret",
            project=args.project,
            secret_id=secret_id(args.deployment),
            replication=gcp.secretmanager.SecretReplicationArgs(
                auto=gcp.secretmanager.SecretReplicationAutoArgs()
            ),
            labels=dict(args.labels),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.secret_id = self.secret.secret_id
        # By project id, not the number the API's own `name` carries: the CLI and the door read it as given.
        self.name = pulumi.Output.concat("projects/", args.project, "/secrets/", self.secret.secret_id)
        self.register_outputs({"secret_id": self.secret_id, "name": self.name})
