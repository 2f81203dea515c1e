"""What each stack output is: the source of docs/outputs.md's table (scripts/gen_docs.py renders it).

tests/infra/test_output_reference.py runs the program under the mocks in every mode and checks that
it exports exactly these keys, each in the modes named here: an output added to the program without
a line here, or a line here for an output that is gone, fails the suite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

When = Literal["always", "door", "autostop", "fleet"]
WHEN_TEXT: dict[When, str] = {
    "always": "every stack",
    "door": "a single server with the front door (`door: true`, the default)",
    "autostop": "a single server with autostop on (`idleStopMinutes` > 0)",
    "fleet": "a fleet (`replicas` or `maxReplicas` >= 2)",
}


@dataclass(frozen=True)
class OutputGroup:
    keys: tuple[str, ...]
    when: When
    what: str


OUTPUTS: tuple[OutputGroup, ...] = (
    OutputGroup(
        ("webUiUrl", "apiBaseUrl", "metricsUrl"),
        "always",
        "the web UI and the OpenAI-compatible base URL (`.../v1`): the front door's HTTPS URL with a door, "
        "a fleet's load balancer (as `fleetApiBaseUrl`), else `http://localhost:8080` through the IAP "
        "tunnel; Prometheus metrics, always through the tunnel",
    ),
    OutputGroup(
        ("access",),
        "always",
        "how to reach the server (the door, a fleet's load balancer, the open `sourceRanges` or the tunnel), "
        "led by a `WARNING:` for "
        "any risk the config names on purpose",
    ),
    OutputGroup(("apiKey",), "always", "the API key (a secret: `pulumi stack output apiKey --show-secrets`)"),
    OutputGroup(
        ("groupName", "region", "zones"),
        "always",
        "where it runs: the group and the zones its member may run in (the member itself, its name, zone "
        "and address, changes with every repair: `qwen36 status` shows it)",
    ),
    OutputGroup(("modelBucket", "modelGcsUri"), "always", "the model cache"),
    OutputGroup(
        ("modelCachePath", "modelCacheNote"),
        "always",
        "whether the VM will find the model in the bucket or fall back to Hugging Face, and the cold "
        "start to expect",
    ),
    OutputGroup(
        ("bootImage", "bootImageNote"),
        "always",
        "the stock Deep Learning VM image or the tooling image, and what that means for the cold start",
    ),
    OutputGroup(
        ("secureBoot", "secureBootNote"),
        "always",
        "whether the servers boot with Secure Boot (the bake's GPU test proved it), and the one-line "
        "reason when they do not ([security](security.md#secure-boot))",
    ),
    OutputGroup(
        ("logsSerial", "logsContainer", "sshIap", "iapTunnel"),
        "always",
        "commands that find the group's current member first: `qwen36 logs --serial`, `qwen36 logs`, "
        "`qwen36 ssh`, `qwen36 tunnel`",
    ),
    OutputGroup(
        ("members", "stop", "start"),
        "always",
        "the group's members, and resizing it to 0 and back (gcloud)",
    ),
    OutputGroup(
        ("estimatedHourlyCostUsd", "estimatedHourlyCostNote"),
        "always",
        "an estimate of the hourly cost, with its source and date",
    ),
    OutputGroup(
        ("startupScriptSha256",),
        "always",
        "the boot script's hash (a change is a new instance template, which the group rolls out)",
    ),
    OutputGroup(
        ("dashboardUrl",),
        "door",
        "the Cloud Monitoring dashboard: the door's time to first token, wake holds and statuses beside "
        "the server's MTP acceptance and decode rate, and the spend of the last 30 days",
    ),
    OutputGroup(
        ("keysSecret",),
        "door",
        "the Secret Manager secret of the door's named keys (`projects/<project>/secrets/<id>`), which "
        "`qwen36 keys` edits: the program's key is the one named `default`",
    ),
    OutputGroup(
        ("wakeCommand", "statusCommand", "autostop"),
        "autostop",
        "`qwen36 wake` and `qwen36 status` for this stack, and what they read from it",
    ),
    OutputGroup(
        ("fleetWebUiUrl", "fleetApiBaseUrl", "fleetIp", "fleetDnsRecord", "fleetWarning"),
        "fleet",
        "the load balancer's endpoint, the DNS record a `domain` needs, and the clear-text warning "
        "without one",
    ),
    OutputGroup(
        ("fleetMembers", "fleetMemberMetrics", "fleetServersNow", "fleetServersMax"),
        "fleet",
        "the members, one member's `/metrics` through the tunnel, and the size now and at most",
    ),
    OutputGroup(
        ("fleetCostNowUsdPerHour", "fleetCostMaxUsdPerHour", "fleetCostNote"),
        "fleet",
        "the cost now and at the largest size, with its basis",
    ),
)
