"""The fleet's bounds and names, shared by infra/fleet.py, the boot script and the checks in infra/policy/.

Plain numbers with their sources and no imports, so the checks can run where pulumi_gcp is absent.
"""

from __future__ import annotations

import math

# One L4 decodes one stream of this model at ~90-100 tok/s (the project's measured figure, seed.md).
MEASURED_STREAM_TPS = 90
# A stream near the end of a full context, with drafts rejected and other slots busy, decodes
# slower: the bound assumes a third of the measured rate.
WORST_STREAM_FRACTION = 1 / 3
# The default context (ctxSize 56320) generated at the worst rate, plus the prompt's prefill.
MAX_STREAM_TOKENS = 56_320
PREFILL_ALLOWANCE_S = 120


# The longest streamed generation the endpoint must carry: ~33 minutes. A global external
# Application Load Balancer ends a response that outlives the backend service's timeout_sec (the
# default 30 s would cut almost every answer off), and it does not retry a broken stream.
# https://cloud.google.com/load-balancing/docs/backend-service#timeout-setting
def generation_bound_s(max_tokens: int = MAX_STREAM_TOKENS) -> int:
    return PREFILL_ALLOWANCE_S + math.ceil(max_tokens / (MEASURED_STREAM_TPS * WORST_STREAM_FRACTION))


GENERATION_BOUND_S = generation_bound_s()
# Connection draining may not exceed an hour; a member leaving the group (scale-in, update) keeps
# serving its open streams this long.
# https://cloud.google.com/load-balancing/docs/enabling-connection-draining
MAX_DRAINING_S = 3600


def draining_s(generation_s: int) -> int:
    return min(generation_s, MAX_DRAINING_S)


# A new member's cold start, from VM creation to a healthy llama-server, as measured for the
# single server (facts.md, "The original's measured cold-start phases on a spot g2-standard-8"):
# ~3.5 min with the model in the same-region GCS cache (which the first server fills), plus up to
# 90 s for the ECC-off reboot that every fresh host needs. The autoscaler ignores a new member's
# metric for this long; shorter and it would add servers again while the first ones still load.
# https://cloud.google.com/compute/docs/autoscaler/understanding-autoscaler-decisions#cool_down_period
MEASURED_COLD_START_S = 210
ECC_REBOOT_MAX_S = 90
COLD_START_BOUND_S = MEASURED_COLD_START_S + ECC_REBOOT_MAX_S

# Google's load balancers and health checkers reach the backends only from these ranges.
# https://cloud.google.com/load-balancing/docs/health-check-concepts#ip-ranges
GOOGLE_FRONT_END_RANGES = ("35.191.0.0/16", "130.211.0.0/22")

# The per-instance load signal: requests in flight (llama-server's requests_processing +
# requests_deferred), written by startup/metrics_publisher.py on each member's gce_instance.
LOAD_METRIC_TYPE = "custom.googleapis.com/qwen36/requests_in_flight"
# How often each member publishes. Cloud Monitoring takes at most one point per time series
# every 5 s (https://cloud.google.com/monitoring/quotas#custom_metrics_quotas); the autoscaler
# reads about once a minute, so 15 s gives it several fresh points per decision.
LOAD_METRIC_INTERVAL_S = 15
# Google's IAP TCP forwarding, the per-member tunnel's source (infra/network.IAP_SOURCE_RANGE).
# https://cloud.google.com/iap/docs/using-tcp-forwarding#create-firewall-rule
IAP_TCP_FORWARDING_RANGE = "35.235.240.0/20"
