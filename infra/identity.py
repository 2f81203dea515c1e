"""The server's own service account, with only what the boot needs.

The default compute account carries project Editor in many projects; with the cloud-platform
scope that would hand the VM (and anything that breaks into llama-server) the whole project.
https://cloud.google.com/compute/docs/access/service-accounts#default_service_account
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from infra.model_cache import VERDICT_SUFFIX, VERDICT_TEMP_INFIX

BUCKET_READ_ROLE = "roles/storage.objectViewer"
# Lets a boot that took the hub fill the cache for later boots, replace a cache object that failed
# its sha256 (objectCreator cannot overwrite) and complete a missing sha256 in its metadata. The
# condition holds it to the one model object: nothing else in the bucket can be written or deleted.
# https://cloud.google.com/storage/docs/access-control/iam-roles
# https://cloud.google.com/iam/docs/conditions-resource-attributes#resource-name
BUCKET_WRITE_ROLE = "roles/storage.objectUser"
PROJECT_ROLES = ("roles/logging.logWriter", "roles/monitoring.metricWriter")
# The calibration verdict (startup/calibrate.py) is written by every member, self-staging or not:
# objectUser again (create a temporary copy, read it back, copy it over the verdict, which replaces
# it, and delete the copy), held by its condition to the verdict and its temporary copies only.
# https://cloud.google.com/iam/docs/conditions-attribute-reference#resource-name (startsWith)
VERDICT_CONDITION_TITLE = "calibration-verdict-only"


@dataclass
class IdentityArgs:
    project: pulumi.Input[str]
    account_id: str
    bucket: pulumi.Input[str]
    self_stage_model: bool
    # The model object's name in the bucket (infra.model_cache.model_object_name).
    model_object: str = ""
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


class Identity(pulumi.ComponentResource):
    """Read access to the model bucket only (create too when self-staging), logs and metrics."""

    account: gcp.serviceaccount.Account
    email: pulumi.Output[str]
    unique_id: pulumi.Output[str]
    """The account's numeric id: the ``sub`` of its ID tokens (the door's idle-stop check)."""
    member: pulumi.Output[str]

    def __init__(self, name: str, args: IdentityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:Identity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        self.account = gcp.serviceaccount.Account(
            f"{name}-sa",
            project=args.project,
            account_id=args.account_id,
            display_name="qwen36-mtp-l4 llama-server VM",
            description="Reads the model cache and the API key; writes logs and metrics",
            opts=child,
        )
        self.email = self.account.email
        self.unique_id = self.account.unique_id
        self.member = self.account.email.apply(lambda email: f"serviceAccount:{email}")
        gcp.storage.BucketIAMMember(
            f"{name}-bucket-{BUCKET_READ_ROLE.split('.')[-1].lower()}",
            bucket=args.bucket,
            role=BUCKET_READ_ROLE,
            member=self.member,
            opts=pulumi.ResourceOptions(parent=self),
        )
        if args.self_stage_model:
            gcp.storage.BucketIAMMember(
                f"{name}-bucket-{BUCKET_WRITE_ROLE.split('.')[-1].lower()}",
                bucket=args.bucket,
                role=BUCKET_WRITE_ROLE,
                member=self.member,
                condition=gcp.storage.BucketIAMMemberConditionArgs(
                    title="model-object-only",
                    description="Write, replace and update the model object, nothing else",
                    expression=pulumi.Output.concat(
                        'resource.name == "projects/_/buckets/',
                        args.bucket,
                        "/objects/",
                        args.model_object,
                        '"',
                    ),
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
        if args.model_object:
            verdict = args.model_object + VERDICT_SUFFIX
            gcp.storage.BucketIAMMember(
                f"{name}-bucket-verdict",
                bucket=args.bucket,
                role=BUCKET_WRITE_ROLE,
                member=self.member,
                condition=gcp.storage.BucketIAMMemberConditionArgs(
                    title=VERDICT_CONDITION_TITLE,
                    description="Write and replace the calibration verdict next to the model, nothing else",
                    expression=verdict_condition(args.bucket, verdict),
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
        for role in PROJECT_ROLES:
            gcp.projects.IAMMember(
                f"{name}-{role.split('/')[-1].replace('.', '-').lower()}",
                project=args.project,
                role=role,
                member=self.member,
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"email": self.email})


def verdict_condition(bucket: pulumi.Input[str], verdict: str) -> pulumi.Output[str]:
    """The verdict object itself, or one of its temporary copies (the verdict's name + ``.tmp-``)."""
    prefix = pulumi.Output.concat("projects/_/buckets/", bucket, "/objects/", verdict)
    return pulumi.Output.concat(
        'resource.name == "', prefix, '" || resource.name.startsWith("', prefix, VERDICT_TEMP_INFIX, '")'
    )
