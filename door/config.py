"""The door's settings: every environment variable it reads, in one place (docs/door.md lists
them as the contract infra must satisfy)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PREFIX = "QWEN36_DOOR_"

# How long a request that finds the group at 0 is held before it gets a 503. The cold start of a
# wake on the baked image is ~92 s of boot (README's boot bench: ECC reboot 60 + GCS -> tmpfs 13 +
# load 6.5, with the sandbox's own overhead) plus the VM's creation and its boot up to the startup
# script (~45 s, assumed: not measured here). Twice the ~140 s that makes is 280 s; 300 s also
# covers a wake on the stock image (~250 s of boot, a new build's first member) with little margin.
DEFAULT_WAKE_BOUND_S = 300.0
# A streaming request held for a wake gets an SSE comment this often: far below the 30-60 s idle
# cut of common proxies (Knative's activator closed connections at 60 s, knative/serving#13208).
DEFAULT_HEARTBEAT_S = 10.0
# A streaming request waits this long for the server before the door commits to a 200 with
# heartbeats: a server that is up answers within it, and its own status (a 400, say) then passes.
DEFAULT_STREAM_GRACE_S = 1.0
DEFAULT_RETRY_AFTER_S = 30
DEFAULT_HEALTH_POLL_S = 2.0
# What the door remembers of a look at the group that found no server, so a UI tab polling /props
# while the server sleeps costs one Compute call every few seconds, not one per poll.
DEFAULT_PROBE_CACHE_S = 5.0
DEFAULT_METRICS_INTERVAL_S = 60.0
# How long the door keeps what it read of its keys (door/keys.py): at most 30 s, so that a
# revocation takes effect within 60 s even across a failed read.
DEFAULT_KEYS_CACHE_S = 30.0
DEFAULT_UPSTREAM_PORT = 8080
# Cloud Run caps an HTTP/1 request body at 32 MiB (https://cloud.google.com/run/quotas).
MAX_REQUEST_BYTES = 32 * 1024 * 1024
# A non-streaming answer is read whole before it is passed on (so its status and timings are known).
MAX_RESPONSE_BYTES = 64 * 1024 * 1024

COMPUTE_URL = "https://compute.googleapis.com/compute/v1"
MONITORING_URL = "https://monitoring.googleapis.com/v3"
METADATA_URL = "http://metadata.google.internal"
# Google's ID-token signing keys as JSON Web Keys: https://developers.google.com/identity/openid-connect/openid-connect#validatinganidtoken
CERTS_URL = "https://www.googleapis.com/oauth2/v3/certs"
SECRET_MANAGER_URL = "https://secretmanager.googleapis.com/v1"  # noqa: S105 (an endpoint, not a secret)
_SECRET_NAME = re.compile(r"projects/[^/]+/secrets/[A-Za-z0-9_-]{1,255}")


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Settings:
    api_key: str
    project: str
    region: str
    group: str
    api_key_secret: str = ""
    keys_secret: str = ""
    secret_manager_url: str = SECRET_MANAGER_URL
    keys_cache_s: float = DEFAULT_KEYS_CACHE_S
    upstream_port: int = DEFAULT_UPSTREAM_PORT
    model_alias: str = ""
    wake_bound_s: float = DEFAULT_WAKE_BOUND_S
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    stream_grace_s: float = DEFAULT_STREAM_GRACE_S
    retry_after_s: int = DEFAULT_RETRY_AFTER_S
    health_poll_s: float = DEFAULT_HEALTH_POLL_S
    probe_cache_s: float = DEFAULT_PROBE_CACHE_S
    stop_audiences: tuple[str, ...] = ()
    stop_service_account: str = ""
    stop_service_account_id: str = ""
    metrics: bool = True
    metrics_interval_s: float = DEFAULT_METRICS_INTERVAL_S
    service: str = "qwen36-door"
    compute_url: str = COMPUTE_URL
    monitoring_url: str = MONITORING_URL
    metadata_url: str = METADATA_URL
    certs_url: str = CERTS_URL

    @property
    def group_path(self) -> str:
        return f"/projects/{self.project}/regions/{self.region}/instanceGroupManagers/{self.group}"


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(PREFIX + name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{PREFIX}{name}={raw!r} is not a number") from None
    if value <= 0:
        raise ConfigError(f"{PREFIX}{name} must be > 0, not {raw}")
    return value


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(PREFIX + name, "").strip()
    if not value:
        raise ConfigError(f"{PREFIX}{name} is not set")
    return value


def _api_key(env: Mapping[str, str]) -> str:
    """The key from ``QWEN36_DOOR_API_KEY`` or from the file ``QWEN36_DOOR_API_KEY_FILE``, stripped
    of the trailing newline files carry: local runs and tests. On Cloud Run the door reads it from
    Secret Manager itself (``QWEN36_DOOR_API_KEY_SECRET``, door/keys.py)."""
    key = env.get(PREFIX + "API_KEY", "")
    path = env.get(PREFIX + "API_KEY_FILE", "")
    if path:
        key = Path(path).read_text(encoding="utf-8")
    key = key.strip()
    if not key and not env.get(PREFIX + "API_KEY_SECRET", "").strip():
        raise ConfigError(
            f"{PREFIX}API_KEY_SECRET (or {PREFIX}API_KEY, {PREFIX}API_KEY_FILE) is not set: "
            "the door never runs open"
        )
    return key


def _secret_name(env: Mapping[str, str], name: str) -> str:
    value = env.get(PREFIX + name, "").strip()
    if value and not _SECRET_NAME.fullmatch(value):
        raise ConfigError(f"{PREFIX}{name}={value!r} is not projects/<project>/secrets/<id>")
    return value


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    audiences = tuple(
        a.strip().rstrip("/") for a in env.get(PREFIX + "STOP_AUDIENCES", "").split(",") if a.strip()
    )
    return Settings(
        api_key=_api_key(env),
        project=_required(env, "PROJECT"),
        region=_required(env, "REGION"),
        group=_required(env, "GROUP"),
        api_key_secret=_secret_name(env, "API_KEY_SECRET"),
        keys_secret=_secret_name(env, "KEYS_SECRET"),
        secret_manager_url=env.get(PREFIX + "SECRET_MANAGER_URL", SECRET_MANAGER_URL).rstrip("/"),
        keys_cache_s=min(_float(env, "KEYS_CACHE_S", DEFAULT_KEYS_CACHE_S), DEFAULT_KEYS_CACHE_S),
        upstream_port=int(_float(env, "UPSTREAM_PORT", DEFAULT_UPSTREAM_PORT)),
        model_alias=env.get(PREFIX + "MODEL_ALIAS", ""),
        wake_bound_s=_float(env, "WAKE_BOUND_S", DEFAULT_WAKE_BOUND_S),
        heartbeat_s=_float(env, "HEARTBEAT_S", DEFAULT_HEARTBEAT_S),
        stream_grace_s=_float(env, "STREAM_GRACE_S", DEFAULT_STREAM_GRACE_S),
        retry_after_s=int(_float(env, "RETRY_AFTER_S", DEFAULT_RETRY_AFTER_S)),
        health_poll_s=_float(env, "HEALTH_POLL_S", DEFAULT_HEALTH_POLL_S),
        probe_cache_s=_float(env, "PROBE_CACHE_S", DEFAULT_PROBE_CACHE_S),
        stop_audiences=audiences,
        stop_service_account=env.get(PREFIX + "STOP_SERVICE_ACCOUNT", "").strip(),
        stop_service_account_id=env.get(PREFIX + "STOP_SERVICE_ACCOUNT_ID", "").strip(),
        metrics=env.get(PREFIX + "METRICS", "1") not in ("0", "false", "off", ""),
        metrics_interval_s=_float(env, "METRICS_INTERVAL_S", DEFAULT_METRICS_INTERVAL_S),
        # Cloud Run sets K_SERVICE to the service's name (the container runtime contract:
        # https://cloud.google.com/run/docs/container-contract#env-vars).
        service=env.get("K_SERVICE", "qwen36-door"),
        compute_url=env.get(PREFIX + "COMPUTE_URL", COMPUTE_URL).rstrip("/"),
        monitoring_url=env.get(PREFIX + "MONITORING_URL", MONITORING_URL).rstrip("/"),
        metadata_url=env.get(PREFIX + "METADATA_URL", METADATA_URL).rstrip("/"),
        certs_url=env.get(PREFIX + "CERTS_URL", CERTS_URL),
    )
