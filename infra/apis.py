"""The Google APIs the deployment needs, enabled once and left enabled on destroy."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

# secretmanager holds the API key; iap carries SSH and the 8080 tunnel when no range is open.
# iam creates the VM's service account and cloudresourcemanager grants it project roles (log and
# metric writer); neither is among the APIs a new project starts with, and without them the first
# `pulumi up` fails with SERVICE_DISABLED on the account or the project IAM member.
# https://cloud.google.com/service-usage/docs/enabled-service#default
# https://cloud.google.com/iam/docs/service-accounts-create#before-you-begin
REQUIRED_SERVICES = (
    "compute.googleapis.com",
    "storage.googleapis.com",
    "secretmanager.googleapis.com",
    "iap.googleapis.com",
    "iam.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    # An autoscaled fleet's members publish their load as a custom metric the autoscaler reads, and
    # the idle watcher records each stop in Cloud Logging (the deleted VM takes its journal along).
    "monitoring.googleapis.com",
    "logging.googleapis.com",
)


# The front door (infra/door.py) runs on Cloud Run; its source deploy needs no Cloud Build.
DOOR_SERVICES = ("run.googleapis.com",)


@dataclass
class ApisArgs:
    project: pulumi.Input[str]
    door: bool = False


class Apis(pulumi.ComponentResource):
    """Enables each service; other projects' workloads may use them, so destroy leaves them on."""

    services: list[gcp.projects.Service]

    def __init__(self, name: str, args: ApisArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:Apis", name, None, opts)
        self.services = [
            gcp.projects.Service(
                f"{name}-{service.split('.')[0]}",
                project=args.project,
                service=service,
                # Disabling a shared API on destroy would break anything else in the project using it.
                disable_on_destroy=False,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for service in (*REQUIRED_SERVICES, *(DOOR_SERVICES if args.door else ()))
        ]
        self.register_outputs({"services": [s.service for s in self.services]})
