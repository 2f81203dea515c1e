"""The stack configuration: read once from Pulumi config, validated before any resource exists.

Every key lives in the project namespace (``qwen36-mtp-l4:<key>``) and is declared, with its
default and description, in ``Pulumi.yaml``; ``tests/infra/test_pulumi_yaml.py`` keeps the two in step.
Errors name the Pulumi config key, the value that was given and what is allowed.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from infra import config_rules as rules
from infra.config_rules import covers_public_internet, exposes_public_internet
from infra.fleet_bounds import IAP_TCP_FORWARDING_RANGE
from infra.llama_cpp import FIRST_KNOWN_BUILD, LLAMA_CPP_BUILD
from infra.names import deployment_name as deployment_name

PROJECT = "qwen36-mtp-l4"
T = TypeVar("T")

# G2 machine types that carry exactly one L4, with their vCPUs and memory. g2-standard-4 is
# left out on purpose: loading the 22 GB model without mmap needs ~24 GB of host RAM and it has 16.
# https://cloud.google.com/compute/docs/gpus#l4-gpus
G2_MACHINE_TYPES: dict[str, tuple[int, int]] = {
    "g2-standard-8": (8, 32),
    "g2-standard-12": (12, 48),
    "g2-standard-16": (16, 64),
    "g2-standard-32": (32, 128),
}

# What the boot disk must hold besides the model: the Deep Learning VM image (its own disk is
# 50 GB) and the llama.cpp CUDA image once pulled (~5 GB), with room for logs and apt.
BOOT_DISK_BASE_GB = 50
SERVER_IMAGE_GB = 6
DISK_HEADROOM_GB = 4
GIB = 1024**3

# Nominal size of the default model file, used for disk sizing when modelSizeBytes is not pinned.
NOMINAL_MODEL_BYTES = 23_000_000_000

# What fits the L4 (ctxSize is checked against it). The reference is the deployed config at the
# pinned build: ctx 56320 with MTP n-max 2 beside the default model left ~480 MiB of the L4 free
# (the original's nvidia-smi); the KV cache costs 22.0 KiB a token and MTP's draft context 448 MiB
# at that ctx, and n-max 3 costs 64 MiB more than 2 (measured on an H200 with a real-width model,
# docs' facts: "Measured on the H200, 2026-12-01"). The L4 has 24 GB of GDDR6
# (https://cloud.google.com/compute/docs/gpus#l4-gpus), 24 GiB of it usable with ECC off (ECC on
# takes ~1.5 GiB, which is why the degraded mode serves a smaller context). Everything else the
# server holds (CUDA's context, compute buffers) is the remainder at the reference.
MIB = 1024**2
L4_MEMORY_MIB = 24 * 1024
REFERENCE_CTX = 56320
REFERENCE_FREE_MIB = 480
KV_MIB_PER_TOKEN = 22.0 / 1024
MTP_DRAFT_MIB = 448
MTP_DRAFT_N_MAX = 2
MTP_MIB_PER_EXTRA_DRAFT = 64
# Kept free beyond the estimate: the builds measured differ by ~70 MiB, and allocations fragment.
FIT_SPARE_MIB = 256
# The remainder at the reference holds llama.cpp's compute buffers as the deployed flags size them:
# llama.cpp reserves its worst-case graph for one micro-batch, so the buffer grows with ubatchSize
# (and a logical batch bounds the micro-batch). Those flags, ubatchSize 64 and batchSize 512, are
# the only ones measured (the L4 reference and the H200 runs both used them; facts: "the deployed
# flags"), so a larger value is refused rather than guessed: nothing measured says it fits.
MEASURED_UBATCH = 64
MEASURED_BATCH = 512
# The default model's file, whose real size the fit and the disk use whatever a smaller
# modelSizeBytes says; `stage` refuses a file further than this share from it where nothing else
# (a pin, the hub) can tell.
DEFAULT_MODEL = ("unsloth/Qwen3.6-35B-A3B-MTP-GGUF", "Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf")
DEFAULT_MODEL_SIZE_TOLERANCE = 0.10

# The L4 zones of the default region (gcloud compute accelerator-types list --filter="name=nvidia-l4").
DEFAULT_ZONES = ("us-central1-a", "us-central1-b", "us-central1-c")
# A deliberate ceiling: every replica is one more L4 billed by the hour.
MAX_REPLICAS = 8
# Pulumi applies Pulumi.yaml's config defaults to every stack before the program runs
# (ValidateStackConfigAndApplyProjectConfig in pulumi/pulumi sdk/go/common/workspace/project.go;
# its project_test.go, TestStackConfigIsInheritedFromProjectConfig), so a default is indistinguishable
# from a value the user set. tests/infra/test_pulumi_yaml.py keeps this equal to Pulumi.yaml's.
DEFAULT_IDLE_STOP_MINUTES = 30

_ZONE_RE = re.compile(r"^(?P<region>[a-z]+-[a-z]+[0-9]+)-[a-z]$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_ALIAS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_TOOL_NAMES = {"all", "read_file", "file_glob_search", "grep_search", "exec_shell_command", "write_file"}
_ARCH_RE = re.compile(r"^[a-z0-9_]{1,64}$")
# A domain name for the Google-managed certificate: lowercase labels of letters, digits and '-',
# at least two of them, no wildcard (managed certificates do not issue wildcards).
# https://cloud.google.com/load-balancing/docs/ssl-certificates/google-managed-certs#domain-names
_DOMAIN_RE = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")


class ConfigError(ValueError):
    """A stack config value that cannot be deployed; ``key`` is the full Pulumi config key."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")


class StackConfig(BaseModel):
    """The whole stack config. Field names are snake_case; Pulumi keys are their camelCase aliases."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        strict=True,
    )

    # Placement and machine.
    region: str = "us-central1"
    zones: list[str] = Field(default_factory=lambda: list(DEFAULT_ZONES))
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    machine_type: str = "g2-standard-8"
    accelerator_type: Literal["nvidia-l4"] = "nvidia-l4"
    accelerator_count: Literal[1] = 1
    provisioning_model: Literal["SPOT", "STANDARD"] = "SPOT"
    boot_disk_type: Literal["pd-ssd", "pd-balanced"] = "pd-ssd"
    boot_disk_size_gb: int = Field(default=100, le=65536)
    image_project: str = "deeplearning-platform-release"
    image_family: str = "common-cu129-ubuntu-2204-nvidia-580"
    use_tooling_image: bool = True
    build_tooling_image: bool = True

    # The model and its cache.
    model_repo: str = DEFAULT_MODEL[0]
    model_file: str = DEFAULT_MODEL[1]
    model_revision: str = "main"
    model_sha256: str = ""
    model_size_bytes: int = Field(default=0, ge=0)
    model_architecture: str = "qwen35moe"
    keep_model_bucket: bool = True
    self_stage_model: bool = True

    # llama-server.
    llama_cpp_build: int = Field(default=LLAMA_CPP_BUILD, ge=1)
    ctx_size: int = Field(default=56320, ge=512, le=262144)
    degraded_ctx_size: int = Field(default=8192, ge=512, le=262144)
    parallel: int = Field(default=1, ge=1, le=64)
    spec_draft_n_max: int = Field(default=2, ge=0, le=16)
    spec_draft_p_min: float = Field(default=0.0, ge=0.0, le=1.0)
    ubatch_size: int = Field(default=64, ge=1, le=8192)
    batch_size: int = Field(default=512, ge=1, le=65536)
    alias: str = "Qwen3.6-35B-A3B-Q4KXL-MTP"
    threads: int = Field(default=0, ge=0, le=256)
    backend_sampling: bool = True
    tools: list[str] = Field(default_factory=list)
    # A request without max_tokens stops here (llama-server's --n-predict). Qwen's model card asks
    # for ~32,768 output tokens for most queries, thinking included, so no answer it calls normal
    # is cut; a runaway or abandoned generation (a closed web UI tab keeps generating: the UI's
    # X-Conversation-Id stream resume) then holds the slot ~6 min at 91 tok/s instead of the whole
    # 56,320-token context (~10 min). 0: no default cap.
    default_max_tokens: int = Field(default=32768, ge=0, le=262144)

    # Access.
    source_ranges: list[str] = Field(default_factory=list)
    allow_public_internet: bool = False
    api_key: bool = True
    door: bool = True
    # An ephemeral external address on every VM (the members and the image builder) for their egress,
    # as before Cloud NAT; false (the default): internal addresses only, Cloud NAT for the internet
    # and Private Google Access for Google's APIs (infra/network.py).
    external_ip: bool = False
    # How long the door holds a request for a wake; infra/door.py's wake_bound_s derives the default.
    door_wake_bound_seconds: int = Field(default=360, ge=180, le=3000)
    # The two risks a reachable endpoint can carry, each refused unless named (access says so).
    expose_server_tools: bool = False
    expose_without_api_key: bool = False
    health_timeout_minutes: int = Field(default=20, ge=1, le=120)

    # Fleet: more than one server behind one load-balanced endpoint (infra/fleet.py).
    min_replicas: int = Field(default=0, ge=0, le=MAX_REPLICAS)
    max_replicas: int = Field(default=0, ge=0, le=MAX_REPLICAS)
    domain: str = ""

    # Cost. 30 minutes is many times a cached cold start (docs/autostop.md), so a coffee break or a
    # meeting does not cost a wake, while a forgotten endpoint stops within half an hour instead of
    # billing all night. 0 turns it off.
    idle_stop_minutes: int = Field(default=DEFAULT_IDLE_STOP_MINUTES, ge=0, le=1440)

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        return rules.check_region(value)

    @field_validator("zones")
    @classmethod
    def _zone_shape(cls, zones: list[str]) -> list[str]:
        if not zones:
            raise ValueError("must list at least one zone of `region` that offers nvidia-l4")
        for zone in zones:
            if not _ZONE_RE.fullmatch(zone):
                raise ValueError(f"{zone!r} is not a zone name such as 'us-central1-a'")
        if len(set(zones)) != len(zones):
            raise ValueError("lists a zone twice")
        return zones

    @field_validator("machine_type")
    @classmethod
    def _machine_type(cls, machine_type: str) -> str:
        if machine_type not in G2_MACHINE_TYPES:
            allowed = ", ".join(G2_MACHINE_TYPES)
            raise ValueError(f"must be a G2 machine type with one L4 and >= 32 GB RAM: {allowed}")
        return machine_type

    @field_validator("model_sha256")
    @classmethod
    def _sha256(cls, value: str) -> str:
        if value and not _SHA256_RE.fullmatch(value):
            raise ValueError("must be 64 lowercase hex digits, or empty to take the hub's LFS sha256")
        return value

    @field_validator("model_repo")
    @classmethod
    def _repo(cls, value: str) -> str:
        # The hub's own check (huggingface_hub.utils.validate_repo_id): ASCII word characters, '.'
        # and '-', at most 96 a part, no '--' or '..'.
        if not re.fullmatch(r"[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}", value, re.ASCII) or (
            "--" in value or ".." in value
        ):
            raise ValueError("must be a Hugging Face repo id such as 'owner/name'")
        return value

    @field_validator("model_file")
    @classmethod
    def _file(cls, value: str) -> str:
        # It becomes a GCS object name and a path on the VM: no control character or backslash.
        # https://cloud.google.com/storage/docs/objects#naming
        unsafe = any(not c.isprintable() or c == "\\" for c in value)
        if unsafe or not value.endswith(".gguf") or value.startswith("/") or ".." in value.split("/"):
            raise ValueError("must be a relative path to a .gguf file inside the repo")
        return value

    @field_validator("image_project", "image_family", "model_revision")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip() or value != value.strip():
            raise ValueError("must be a non-empty name without surrounding spaces")
        return value

    @field_validator("image_project")
    @classmethod
    def _image_project(cls, value: str) -> str:
        # Google's public image projects predate the restricted strings (google-containers).
        return rules.check_project_id(value, new_project_rules=False)

    @field_validator("image_family")
    @classmethod
    def _image_family(cls, value: str) -> str:
        return rules.check_rfc1035(value, "an image family name")

    @field_validator("model_revision")
    @classmethod
    def _revision(cls, value: str) -> str:
        return rules.check_revision(value)

    @field_validator("llama_cpp_build")
    @classmethod
    def _build(cls, value: int) -> int:
        if value < FIRST_KNOWN_BUILD:
            raise ValueError(
                f"must be a llama.cpp build the program's server flags are known for: b{FIRST_KNOWN_BUILD} "
                f"or later (the pinned one is {LLAMA_CPP_BUILD}; infra/llama_cpp.py)"
            )
        return value

    @field_validator("model_architecture")
    @classmethod
    def _architecture(cls, value: str) -> str:
        if not _ARCH_RE.fullmatch(value):
            raise ValueError(
                "must be a GGUF general.architecture such as 'qwen35moe' (lowercase letters, digits, '_')"
            )
        return value

    @field_validator("alias")
    @classmethod
    def _alias(cls, value: str) -> str:
        if not _ALIAS_RE.fullmatch(value):
            raise ValueError("must be 1-64 characters of letters, digits, '.', '_' or '-'")
        return value

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - _TOOL_NAMES)
        if unknown:
            raise ValueError(f"unknown tool(s) {unknown}; allowed: {sorted(_TOOL_NAMES)}")
        return value

    @field_validator("source_ranges")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        for cidr in value:
            rules.parse_cidr(cidr)
        return value

    @field_validator("domain")
    @classmethod
    def _domain(cls, value: str) -> str:
        if value and not _DOMAIN_RE.fullmatch(value):
            raise ValueError(
                "must be a lowercase DNS name such as 'llm.example.com' (no scheme, port, path or wildcard), "
                "or empty for plain HTTP"
            )
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> StackConfig:
        # Pulumi applies Pulumi.yaml's default to every stack that leaves the key unset, so the
        # default reaches the program as a value like any other: a fleet, which never autostops,
        # takes the default (and 0) without complaint and refuses only a value someone chose.
        if self.fleet and self.idle_stop_minutes not in (0, DEFAULT_IDLE_STOP_MINUTES):
            raise _FieldError(
                "idle_stop_minutes",
                "autostop stops a single server; a fleet scales on its load instead "
                f"(use minReplicas for its floor), so leave idleStopMinutes unset "
                f"(its default, {DEFAULT_IDLE_STOP_MINUTES}, does nothing in a fleet) or 0",
            )
        for zone in self.zones:
            match = _ZONE_RE.fullmatch(zone)
            if match and match["region"] != self.region:
                raise _FieldError("zones", f"zone {zone!r} is not in region {self.region!r}")
        self._range_checks()
        self._exposure_checks()
        if self.min_boot_disk_gb > self.boot_disk_size_gb:
            raise _FieldError(
                "boot_disk_size_gb",
                f"{self.boot_disk_size_gb} GB cannot hold the OS image, the server image and the model; "
                f"use at least {self.min_boot_disk_gb}",
            )
        if self.ubatch_size > self.batch_size:
            raise _FieldError("ubatch_size", f"must not exceed batchSize ({self.batch_size})")
        for field, value, measured in (
            ("ubatch_size", self.ubatch_size, MEASURED_UBATCH),
            ("batch_size", self.batch_size, MEASURED_BATCH),
        ):
            if value > measured:
                raise _FieldError(
                    field,
                    f"the L4 fit (model, KV, MTP and llama.cpp's compute buffer, which grows with the "
                    f"micro-batch) was measured only up to ubatchSize {MEASURED_UBATCH} and batchSize "
                    f"{MEASURED_BATCH}; use at most {measured}",
                )
        if self.degraded_ctx_size > self.ctx_size:
            raise _FieldError("degraded_ctx_size", f"must not exceed ctxSize ({self.ctx_size})")
        if self.threads > self.vcpus:
            raise _FieldError("threads", f"{self.machine_type} has {self.vcpus} vCPUs; use 0 for all of them")
        self._fleet_checks()
        self._external_ip_check()
        # The door's own needs: with it, no risk key can make apiKey false or a range work.
        self._door_checks()
        self._fit_check()
        return self

    def _range_checks(self) -> None:
        try:
            rules.check_range_count(self.source_ranges, fleet=self.fleet)
        except ValueError as exc:
            raise _FieldError("source_ranges", str(exc)) from None
        if exposes_public_internet(self.source_ranges) and not self.allow_public_internet:
            if "0.0.0.0/0" in self.source_ranges:
                whole = "0.0.0.0/0 opens the server to the whole internet"
            elif covers_public_internet(self.source_ranges):
                whole = "together these ranges open the server to the whole internet"
            else:
                share = rules.public_addresses(self.source_ranges) / rules.PUBLIC_IPV4_ADDRESSES
                whole = (
                    f"these ranges admit {share:.1%} of the public IPv4 space, more than one /8 "
                    f"({rules.MAX_PRIVATE_SHARE_ADDRESSES} addresses), which is a share of the internet"
                )
            raise _FieldError(
                "source_ranges",
                f"{whole}; also set allowPublicInternet: true to mean it, or list your own ranges",
            )

    def _door_checks(self) -> None:
        if not self.front_door:
            return
        # The door is the endpoint on the internet; the key is its only lock (it never runs open).
        if not self.api_key:
            raise _FieldError(
                "api_key",
                "the front door (door: true) is an HTTPS endpoint on the internet and checks the API key "
                "before anything else; keep apiKey: true, or set door: false to reach the server only "
                "through an IAP tunnel",
            )
        # Cloud Run gives the door no client address we could trust for a range check (no source
        # settles how its front end fills X-Forwarded-For), and the VM's port never opens with a door.
        if self.source_ranges:
            raise _FieldError(
                "source_ranges",
                "with the front door (door: true) the endpoint is the door's HTTPS URL, which admits "
                "whoever has the API key and opens no port on the VM; leave sourceRanges empty, or set "
                "door: false and externalIp: true to open the VM's port to these ranges instead",
            )

    def _external_ip_check(self) -> None:
        # sourceRanges of a single server without a door open the VM's own port 8080, which the
        # internet reaches only on an external address (Cloud NAT carries no inbound connection:
        # https://cloud.google.com/nat/docs/overview).
        opened = [r for r in self.source_ranges if r != IAP_TCP_FORWARDING_RANGE]
        if opened and not self.fleet and not self.door and not self.external_ip:
            raise _FieldError(
                "source_ranges",
                "with door: false, sourceRanges open port 8080 on the VM's own address, and the VMs have "
                "no external address unless externalIp: true; set externalIp: true to mean it, or leave "
                "sourceRanges empty and reach the server through an IAP tunnel",
            )

    def _exposure_checks(self) -> None:
        if self.fleet and self.door and "door" in self.model_fields_set:
            raise _FieldError(
                "door",
                "the front door serves the single server; a fleet is reached through its load balancer, "
                "so leave door unset or false",
            )
        if not self.reachable_beyond_iap:
            return
        who = self.reached_by
        if self.tools and not self.expose_server_tools:
            raise _FieldError(
                "tools",
                f"server-side tools run commands and write files on the VM for anyone who reaches the "
                f"endpoint, and {who} can; set exposeServerTools: true to mean it, or reach the server "
                "only through IAP (door: false and empty sourceRanges)",
            )
        # The door never runs open (infra/door.py): _door_checks refuses a keyless door outright.
        if not self.api_key and not self.expose_without_api_key and not self.front_door:
            raise _FieldError(
                "api_key",
                f"without an API key the endpoint serves whoever reaches it, and {who} can; set "
                "exposeWithoutApiKey: true to mean it, or keep apiKey: true",
            )

    def _fit_check(self) -> None:
        most = self.max_ctx_size
        if self.ctx_size > most:
            model_gb = self.fit_model_bytes / 1e9
            raise _FieldError(
                "ctx_size",
                f"does not fit the L4 beside a {model_gb:.1f} GB model: at most {most} by the estimate "
                f"(KV {KV_MIB_PER_TOKEN * 1024:.1f} KiB a token, MTP's draft context "
                f"{self.mtp_draft_mib} MiB at {REFERENCE_CTX}, measured at the pinned build, in "
                f"{L4_MEMORY_MIB} MiB with ECC off, {FIT_SPARE_MIB} MiB kept spare); lower ctxSize, "
                "specDraftNMax or the model (modelSizeBytes)",
            )

    def _fleet_checks(self) -> None:
        if self.min_replicas and not self.max_replicas:
            raise _FieldError(
                "min_replicas", "autoscaling needs maxReplicas too (>= 2); leave both at 0 for a fixed size"
            )
        if self.max_replicas:
            if self.replicas > 1:
                raise _FieldError(
                    "replicas",
                    "set either replicas (a fixed size) or minReplicas/maxReplicas (autoscaling), not both",
                )
            if self.max_replicas < 2:
                raise _FieldError(
                    "max_replicas",
                    "must be >= 2 to autoscale (one server is the single-server mode: "
                    "leave maxReplicas at 0)",
                )
            # The autoscaler reads a per-instance custom metric on gce_instance, and with such a
            # metric a group cannot scale in to zero.
            # https://cloud.google.com/compute/docs/autoscaler/scaling-cloud-monitoring-metrics
            if self.min_replicas < 1:
                raise _FieldError(
                    "min_replicas",
                    "must be >= 1: an autoscaler on a per-instance metric cannot scale the group "
                    "below one server",
                )
            if self.min_replicas > self.max_replicas:
                raise _FieldError("min_replicas", f"must not exceed maxReplicas ({self.max_replicas})")
        if not self.fleet:
            if self.domain:
                raise _FieldError(
                    "domain",
                    "a certificate lives on the fleet's load balancer; set replicas >= 2 or "
                    "maxReplicas >= 2, or leave domain empty for the single server",
                )
            return
        # The load balancer's address is public: Cloud Armor must know whom to admit. There is no
        # IAP-only fleet (IAP on a load balancer wants browser sign-in or OIDC tokens, which OpenAI
        # clients do not send), so an empty list is refused rather than deployed as an endpoint
        # that answers everyone with 403.
        if not self.source_ranges:
            raise _FieldError(
                "source_ranges",
                "a fleet is reached through a public load balancer, and Cloud Armor admits only these "
                "ranges; list your clients' CIDR ranges (0.0.0.0/0 also needs allowPublicInternet: true)",
            )

    @property
    def vcpus(self) -> int:
        return G2_MACHINE_TYPES[self.machine_type][0]

    @property
    def server_threads(self) -> int:
        return self.threads or self.vcpus

    @property
    def model_bytes_for_sizing(self) -> int:
        return self.model_size_bytes or NOMINAL_MODEL_BYTES

    @property
    def default_model(self) -> bool:
        return (self.model_repo, self.model_file) == DEFAULT_MODEL

    @property
    def fit_model_bytes(self) -> int:
        """The model's size for the L4 fit and the disk: modelSizeBytes (or the nominal), but never less
        than the default model's own size for the default model (issue 29: modelSizeBytes 1 let
        ctxSize 262144 through for the 23 GB file)."""
        pinned = self.model_bytes_for_sizing
        return max(pinned, NOMINAL_MODEL_BYTES) if self.default_model else pinned

    @property
    def min_boot_disk_gb(self) -> int:
        model_gb = math.ceil(self.fit_model_bytes / GIB)
        return BOOT_DISK_BASE_GB + SERVER_IMAGE_GB + DISK_HEADROOM_GB + model_gb

    @property
    def builder_zone(self) -> str:
        """The zone for single-VM jobs (the tooling image builder): the first of ``zones``."""
        return self.zones[0]

    @property
    def autoscaled(self) -> bool:
        """Whether an autoscaler owns the group's size (minReplicas..maxReplicas)."""
        return self.max_replicas > 0

    @property
    def autostop_minutes(self) -> int:
        """idleStopMinutes where it applies: a single server (a fleet never resizes itself to 0)."""
        return 0 if self.fleet else self.idle_stop_minutes

    @property
    def fleet(self) -> bool:
        """Whether more than one server may run, behind the load balancer of infra/fleet.py."""
        return self.replicas > 1 or self.max_replicas > 1

    @property
    def max_servers(self) -> int:
        return self.max_replicas if self.autoscaled else self.replicas

    @property
    def initial_servers(self) -> int:
        return self.min_replicas if self.autoscaled else self.replicas

    @property
    def front_door(self) -> bool:
        """Whether the single server is reached through the front door (infra/door.py); a fleet's
        way in is its load balancer."""
        return self.door and not self.fleet

    @property
    def public_endpoint(self) -> bool:
        """Whether any source range outside Google's IAP proxies may reach port 8080."""
        return bool(self.source_ranges)

    @property
    def reachable_beyond_iap(self) -> bool:
        """Whether anything but an IAP tunnel can reach the endpoint: the door and a fleet's load
        balancer are on the internet, and any source range other than IAP's own opens the port."""
        return self.fleet or self.front_door or any(r != IAP_TCP_FORWARDING_RANGE for r in self.source_ranges)

    @property
    def reached_by(self) -> str:
        if self.fleet:
            return "the fleet's public load balancer"
        if self.front_door:
            return "the front door (on the internet, door: true)"
        return f"sourceRanges {', '.join(self.source_ranges)}"

    @property
    def mtp_draft_mib(self) -> int:
        """MTP's draft context at the reference ctx: 0 without drafts; 64 MiB per draft token past 2
        (one measurement, n-max 3, extended linearly)."""
        if self.spec_draft_n_max == 0:
            return 0
        return MTP_DRAFT_MIB + MTP_MIB_PER_EXTRA_DRAFT * max(0, self.spec_draft_n_max - MTP_DRAFT_N_MAX)

    @property
    def max_ctx_size(self) -> int:
        """The largest ctxSize the estimate fits on the L4 beside this model, a multiple of 256.

        The draft context was measured at one ctx only, so it is read both as fixed and as growing
        with ctx, and the stricter reading wins (they agree at the reference)."""
        reference_need = (
            NOMINAL_MODEL_BYTES / MIB + KV_MIB_PER_TOKEN * REFERENCE_CTX + MTP_DRAFT_MIB + REFERENCE_FREE_MIB
        )
        runtime = L4_MEMORY_MIB - reference_need
        room = L4_MEMORY_MIB - FIT_SPARE_MIB - runtime - self.fit_model_bytes / MIB
        mtp = self.mtp_draft_mib
        fixed = (room - mtp) / KV_MIB_PER_TOKEN
        most = fixed if fixed <= REFERENCE_CTX else room / (KV_MIB_PER_TOKEN + mtp / REFERENCE_CTX)
        return max(0, int(most) // 256 * 256)

    def risk_notes(self) -> list[str]:
        """The risks the user named on purpose, for the ``access`` output to say plainly."""
        notes = []
        if self.reachable_beyond_iap and self.tools:
            notes.append(
                f"WARNING: server-side tools ({', '.join(self.tools)}) are on and {self.reached_by} can "
                "reach them: whoever gets in can run commands and write files on the VM "
                "(exposeServerTools: true)."
            )
        if self.reachable_beyond_iap and not self.api_key:
            notes.append(
                f"WARNING: there is no API key and {self.reached_by} can reach the endpoint: whoever "
                "gets in can use the model (exposeWithoutApiKey: true)."
            )
        return notes


class _FieldError(ValueError):
    """Raised inside the model validator to blame one field rather than the whole model."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


def config_key(field: str) -> str:
    return f"{PROJECT}:{to_camel(field)}"


# Keys of earlier versions, with what replaced them.
_REMOVED_KEYS = {
    "zone": (
        "was removed: the server is now a regional managed instance group; use "
        f"{PROJECT}:zones, a list of the region's L4 zones, e.g. "
        '`pulumi config set --path "zones[0]" us-central1-a`'
    ),
}


def _field_types() -> dict[str, Any]:
    return {to_camel(name): info.annotation for name, info in StackConfig.model_fields.items()}


def _decode(key: str, raw: Any, annotation: Any) -> Any:
    """Pulumi hands every value over as a string; non-string keys hold JSON (true, 42, ["a"])."""
    if _is_text(annotation) or not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        raise ConfigError(f"{PROJECT}:{key}", f"{raw!r} is not a valid {_type_name(annotation)}") from None


def _is_text(annotation: Any) -> bool:
    """Plain strings and choices of strings (``Literal["SPOT", "STANDARD"]``) arrive undecoded."""
    if get_origin(annotation) is Literal:
        return all(isinstance(arg, str) for arg in get_args(annotation))
    return annotation is str


def _type_name(annotation: Any) -> str:
    names = {bool: "boolean (true or false)", int: "integer", float: "number"}
    return names.get(annotation, "JSON list of strings" if "list" in str(annotation) else "value")


def parse_config(raw: Mapping[str, Any], *, stack_keys: Collection[str] | None = None) -> StackConfig:
    """Validate the ``qwen36-mtp-l4:*`` entries of a Pulumi config bag (other namespaces are ignored).

    ``stack_keys``: the full keys the stack file itself sets. Pulumi hands the program every key
    Pulumi.yaml declares a default for, whether the stack sets it or not
    (https://www.pulumi.com/blog/project-config-mvp/: "a default for all stacks"), so the bag alone
    cannot tell a default from a choice. Given the stack file's keys, a value that equals its
    default and is not in the stack file is left to the default, and ``model_fields_set`` then
    holds exactly what the user set: in the stack file, or to anything but the default.
    """
    types = _field_types()
    defaults = _field_defaults()
    data: dict[str, Any] = {}
    for full_key, value in sorted(raw.items()):
        namespace, _, key = full_key.partition(":")
        if namespace != PROJECT:
            continue
        if key in _REMOVED_KEYS:
            raise ConfigError(full_key, f"{value!r}: {_REMOVED_KEYS[key]}")
        if key not in types:
            known = ", ".join(sorted(types))
            close = difflib.get_close_matches(key, types, n=1, cutoff=0.6)
            hint = f"did you mean {PROJECT}:{close[0]}? " if close else ""
            raise ConfigError(full_key, f"unknown key; {hint}the keys of this project are: {known}")
        decoded = _decode(key, value, types[key])
        if stack_keys is not None and full_key not in stack_keys and _same(decoded, defaults[key]):
            continue
        data[key] = decoded
    try:
        return StackConfig.model_validate(data)
    except ValidationError as exc:
        raise _as_config_error(exc, data) from None


def _as_config_error(exc: ValidationError, data: Mapping[str, Any]) -> ConfigError:
    error = exc.errors()[0]
    ctx_error = error.get("ctx", {}).get("error")
    if isinstance(ctx_error, _FieldError):
        key = to_camel(ctx_error.field)
        # A key left at its default is blamed with the default it has.
        value = data.get(key, _field_defaults()[key])
        return ConfigError(f"{PROJECT}:{key}", f"{value!r}: {ctx_error}")
    loc = [str(part) for part in error["loc"]]
    key = loc[0] if loc else "?"
    value = data.get(key, error.get("input"))
    message = str(ctx_error) if ctx_error is not None else error["msg"]
    where = f"[{loc[1]}] " if len(loc) > 1 else ""
    return ConfigError(f"{PROJECT}:{key}", f"{where}{value!r}: {message}")


def load_config() -> StackConfig:
    """Read the running Pulumi program's config (CLI-provided and test-set values alike).

    A bad value reaches the user as ``pulumi.RunError``: Pulumi's Python host prints a RunError's
    message as one line and a stack trace for anything else."""
    import pulumi
    from pulumi.runtime import config as runtime_config

    raw = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    stack_keys = stack_file_keys(pulumi.get_stack())
    return _for_pulumi(lambda values: parse_config(values, stack_keys=stack_keys), raw)


def _same(value: Any, default: Any) -> bool:
    """Equal and of one type: ``True == 1`` must not make a mistyped value vanish before validation."""
    return type(value) is type(default) and value == default


def _field_defaults() -> dict[str, Any]:
    fields = StackConfig.model_fields.items()
    return {to_camel(name): info.get_default(call_default_factory=True) for name, info in fields}


def stack_file_keys(stack: str, project_dir: Path | None = None) -> set[str] | None:
    """The config keys ``Pulumi.<stack>.yaml`` sets, or None when it cannot be read (then every value
    in the config bag counts as set, a default included). Pulumi runs a Python program in the project
    folder, where the stack file lives unless Pulumi.yaml's ``stackConfigDir`` moves it.
    https://www.pulumi.com/docs/iac/concepts/projects/stack-settings-file/
    https://www.pulumi.com/docs/reference/pulumi-yaml/ (stackConfigDir)"""
    import yaml

    root = project_dir or Path.cwd()
    try:
        project = yaml.safe_load((root / "Pulumi.yaml").read_text(encoding="utf-8")) or {}
        folder = root / str(project.get("stackConfigDir") or ".")
        document = yaml.safe_load((folder / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return None
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        return set()
    # A short key is in the project's namespace (https://www.pulumi.com/docs/iac/concepts/config/).
    return {key if ":" in str(key) else f"{PROJECT}:{key}" for key in config}


GCP_PROJECT_KEY = "gcp:project"


def require_gcp_project(raw: Mapping[str, Any]) -> str:
    """The Google Cloud project from the gcp provider's own config key, checked before anything is built."""
    project = str(raw.get(GCP_PROJECT_KEY) or "")
    if not project.strip():
        raise ConfigError(
            GCP_PROJECT_KEY,
            "is not set; run `pulumi config set gcp:project <your-project-id>` "
            "(the project that will own the VM, bucket and secret)",
        )
    try:
        return rules.check_project_id(project)
    except ValueError as exc:
        raise ConfigError(GCP_PROJECT_KEY, f"{project!r}: {exc}") from None


def load_gcp_project() -> str:
    from pulumi.runtime import config as runtime_config

    raw = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    return _for_pulumi(require_gcp_project, raw)


def _for_pulumi(read: Callable[[Mapping[str, Any]], T], raw: Mapping[str, Any]) -> T:
    import pulumi

    try:
        return read(raw)
    except ConfigError as exc:
        raise pulumi.RunError(str(exc)) from None
