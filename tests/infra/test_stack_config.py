"""Every invalid stack value fails before any resource, naming its key, the value and what is allowed."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from program_mocks import PROJECT, as_pulumi_config
from pydantic.alias_generators import to_camel

from infra.config import (
    G2_MACHINE_TYPES,
    ConfigError,
    StackConfig,
    covers_public_internet,
    deployment_name,
    parse_config,
    require_gcp_project,
)
from infra.config_rules import (
    MAX_ARMOR_SOURCE_RANGES,
    MAX_FIREWALL_SOURCE_RANGES,
    MAX_PRIVATE_SHARE_ADDRESSES,
    public_addresses,
)

PUBLIC_PIECES = (
    "1.0.0.0/8", "2.0.0.0/7", "4.0.0.0/6", "8.0.0.0/7", "11.0.0.0/8", "12.0.0.0/6", "16.0.0.0/4",
    "32.0.0.0/3", "64.0.0.0/2", "128.0.0.0/1",
)  # fmt: skip

# key -> (bad value, a fragment the message must contain to say what is allowed)
INVALID: dict[str, tuple[str, Any, str]] = {
    "zone-shape": ("zones", ["us-central1"], "zone name"),
    "zone-other-region": ("zones", ["europe-west4-a"], "not in region"),
    "zone-twice": ("zones", ["us-central1-a", "us-central1-a"], "twice"),
    "zones-not-a-list": ("zones", "us-central1-a", "list"),
    "zone-key-removed": ("zone", "us-central1-a", "use qwen36-mtp-l4:zones"),
    "replicas-zero": ("replicas", 0, "1"),
    "replicas-many": ("replicas", 9, "8"),
    "machine-not-g2": ("machineType", "n1-standard-8", "g2-standard-8"),
    "machine-too-small": ("machineType", "g2-standard-4", "32 GB"),
    "accelerator": ("acceleratorType", "nvidia-tesla-t4", "nvidia-l4"),
    "two-gpus": ("acceleratorCount", 2, "1"),
    "provisioning": ("provisioningModel", "PREEMPTIBLE", "SPOT"),
    "disk-type": ("bootDiskType", "pd-standard", "pd-ssd"),
    "disk-too-small": ("bootDiskSizeGb", 50, "at least"),
    "disk-not-int": ("bootDiskSizeGb", "lots", "integer"),
    "sha256": ("modelSha256", "abc123", "64"),
    "size-negative": ("modelSizeBytes", -1, "0"),
    "repo": ("modelRepo", "no-owner", "owner/name"),
    "file-ext": ("modelFile", "model.bin", ".gguf"),
    "file-escape": ("modelFile", "../x.gguf", "relative"),
    "ctx-small": ("ctxSize", 100, "512"),
    "degraded-above-ctx": ("degradedCtxSize", 65536, "ctxSize"),
    "parallel": ("parallel", 0, "1"),
    "n-max": ("specDraftNMax", 17, "16"),
    "p-min": ("specDraftPMin", "1.5", "1"),
    "ubatch-above-batch": ("ubatchSize", 1024, "batchSize"),
    "alias": ("alias", "bad alias!", "letters"),
    "threads": ("threads", 9, "vCPUs"),
    "tools": ("tools", ["rm_rf"], "allowed"),
    "cidr": ("sourceRanges", ["not-a-cidr"], "CIDR"),
    "cidr-host-bits": ("sourceRanges", ["10.0.0.1/8"], "CIDR"),
    "cidr-v6": ("sourceRanges", ["2001:db8::/32"], "IPv4"),
    "public-without-opt-in": ("sourceRanges", ["0.0.0.0/0"], "allowPublicInternet"),
    # Issue 21: two halves of the internet are the internet.
    "public-in-halves": ("sourceRanges", ["0.0.0.0/1", "128.0.0.0/1"], "allowPublicInternet"),
    # Every public address, around the private 10.0.0.0/8: still the whole internet.
    "public-in-pieces": ("sourceRanges", [*PUBLIC_PIECES], "allowPublicInternet"),
    # Issue 21: what the default front door makes reachable from the internet.
    "tools-behind-the-door": ("tools", ["exec_shell_command", "write_file"], "exposeServerTools"),
    "keyless-behind-the-door": (
        "apiKey",
        False,
        "door: false to reach the server only through an IAP tunnel",
    ),
    "ctx-beyond-the-l4": ("ctxSize", 262144, "at most 63744"),
    "ctx-just-beyond-the-l4": ("ctxSize", 65536, "at most 63744"),
    "empty-image-family": ("imageFamily", "", "non-empty"),
    "empty-image-project": ("imageProject", "", "non-empty"),
    "empty-revision": ("modelRevision", "", "non-empty"),
    "blank-revision": ("modelRevision", " ", "non-empty"),
    "architecture": ("modelArchitecture", "Qwen 3", "general.architecture"),
    "max-tokens-negative": ("defaultMaxTokens", -1, "0"),
    "bool": ("apiKey", "yes", "boolean"),
    "bool-keep": ("keepModelBucket", "maybe", "boolean"),
    "timeout": ("healthTimeoutMinutes", 0, "1"),
    "build": ("llamaCppBuild", 0, "1"),
    "unknown-key": ("ctxsize", 4096, "did you mean qwen36-mtp-l4:ctxSize?"),
    # Issue 29: values GCE, the hub or a shell refuse, refused where they are read.
    "image-family-spaces": ("imageFamily", "common cu129", "RFC 1035"),
    "image-family-semicolon": ("imageFamily", "common;reboot", "RFC 1035"),
    "image-family-capitals": ("imageFamily", "Common-CU129", "RFC 1035"),
    "image-family-long": ("imageFamily", "a" * 200, "1-63"),
    "image-project-space": ("imageProject", "my project", "project id"),
    "revision-shell": ("modelRevision", "main; rm -rf /", "40 hex"),
    "revision-escape": ("modelRevision", "../../etc", "no '..'"),
    "revision-non-ascii": ("modelRevision", "mäin", "branch or tag"),
    "build-one": ("llamaCppBuild", 1, "b9803"),
    "repo-non-ascii": ("modelRepo", "ünsloth/model", "owner/name"),
    "cidr-netmask": ("sourceRanges", ["10.0.0.0/255.0.0.0"], "'10.0.0.0/8', not a netmask"),
    "cidr-hostmask": ("sourceRanges", ["10.0.0.0/0.255.255.255"], "not a netmask"),
    "ubatch-never-measured": ("ubatchSize", 128, "measured only up to ubatchSize 64"),
    "batch-never-measured": ("batchSize", 1024, "measured only up to ubatchSize 64 and batchSize 512"),
}


@pytest.mark.parametrize("as_cli_passes_it", [False, True], ids=["yaml-values", "cli-strings"])
@pytest.mark.parametrize("case", INVALID)
def test_invalid_value_names_key_value_and_what_is_allowed(case: str, as_cli_passes_it: bool) -> None:
    key, value, allowed = INVALID[case]
    bag = {f"{PROJECT}:{key}": value}
    with pytest.raises(ConfigError) as err:
        parse_config(as_pulumi_config(bag) if as_cli_passes_it else bag)
    assert err.value.key == f"{PROJECT}:{key}"
    message = str(err.value)
    shown = value[0] if isinstance(value, list) else value
    if case == "unknown-key":
        shown = key
    assert str(shown) in message, message
    assert allowed in message, message


@pytest.mark.parametrize(
    "overrides",
    [
        {"door": False, "externalIp": True, "sourceRanges": ["0.0.0.0/0"], "allowPublicInternet": True},
        {"threads": 8, "provisioningModel": "STANDARD", "bootDiskType": "pd-balanced"},
        {"machineType": "g2-standard-16", "threads": 16, "tools": ["read_file"], "door": False},
        {"tools": ["all"], "door": False, "externalIp": True, "sourceRanges": ["35.235.240.0/20"]},
        {"tools": ["all"], "exposeServerTools": True},
        {
            "apiKey": False,
            "exposeWithoutApiKey": True,
            "door": False,
            "externalIp": True,
            "sourceRanges": ["198.51.100.7/32"],
        },
        {"apiKey": False, "door": False},
        {"ctxSize": 63744},
        {"ctxSize": 77056, "specDraftNMax": 0},
        {"ctxSize": 56320, "specDraftNMax": 3},
        # The largest exposure without allowPublicInternet: one /8's worth of public addresses.
        {"sourceRanges": ["11.0.0.0/8"], "door": False, "externalIp": True},
        {
            "sourceRanges": ["11.0.0.0/9", "11.128.0.0/9", "10.0.0.0/8", "192.168.0.0/16"],
            "door": False,
            "externalIp": True,
        },
        {"sourceRanges": ["203.0.113.7"], "door": False, "externalIp": True},
        {"ubatchSize": 32, "batchSize": 256},
        {"modelRevision": "0123456789abcdef0123456789abcdef01234567"},
        {"modelRevision": "refs/pr/12"},
        {
            "imageProject": "ubuntu-os-accelerator-images",
            "imageFamily": "ubuntu-accelerator-2204-amd64-with-nvidia-580",
        },
        {"modelRepo": "acme/small", "modelFile": "tiny.gguf", "modelSizeBytes": 1},
        {"region": "asia-southeast1", "zones": ["asia-southeast1-b"], "specDraftPMin": 0.5},
        {
            "region": "europe-west4",
            "zones": ["europe-west4-a", "europe-west4-c"],
            "replicas": 2,
            "sourceRanges": ["198.51.100.7/32"],
        },
        {"modelFile": "smaller.gguf", "modelSizeBytes": 20 * 1024**3, "bootDiskSizeGb": 80, "ctxSize": 8192},
    ],
)
def test_valid_combinations_are_accepted(overrides: dict[str, Any]) -> None:
    for bag in ({f"{PROJECT}:{k}": v for k, v in overrides.items()},):
        assert isinstance(parse_config(bag), StackConfig)
        assert isinstance(parse_config(as_pulumi_config(bag)), StackConfig)


def test_disk_minimum_follows_the_model_size() -> None:
    bag = {f"{PROJECT}:modelSizeBytes": 200 * 1024**3}
    with pytest.raises(ConfigError) as err:
        parse_config(bag)
    assert err.value.key == f"{PROJECT}:bootDiskSizeGb"


def test_an_empty_zone_list_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({f"{PROJECT}:zones": []})
    assert err.value.key == f"{PROJECT}:zones" and "at least one zone" in str(err.value)


def test_other_namespaces_are_ignored() -> None:
    assert parse_config({"gcp:project": "p", "gcp:region": "x"}) == StackConfig()


def test_gcp_project_is_required_by_its_own_key() -> None:
    assert require_gcp_project({"gcp:project": "acme-llm"}) == "acme-llm"
    assert require_gcp_project({"gcp:project": "example.com:acme-llm"}) == "example.com:acme-llm"
    for missing in ({}, {"gcp:project": ""}, {"gcp:project": "  "}):
        with pytest.raises(ConfigError) as err:
            require_gcp_project(missing)
        assert err.value.key == "gcp:project"


@given(st.text(min_size=0, max_size=80))
def test_deployment_name_is_always_a_valid_service_account_id(stack: str) -> None:
    name = deployment_name(stack)
    assert 6 <= len(name) <= 30
    assert name[0].isalpha() and name[-1] != "-"
    assert set(name) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")


# --- property: the loader accepts or raises ConfigError, never anything else -----------------

KEYS = [to_camel(name) for name in StackConfig.model_fields]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)
# Values as YAML stack files hold them, and as the CLI hands them over (strings, JSON inside).
values = json_values | json_values.map(lambda v: json.dumps(v, allow_nan=True)) | st.text(max_size=30)
likely_values = st.sampled_from(
    [
        "true",
        "false",
        "0",
        "-1",
        "1e999",
        "NaN",
        "[]",
        '["0.0.0.0/0"]',
        "{}",
        "null",
        "g2-standard-4",
        "SPOT",
        "",
    ]
)
keys = st.sampled_from(KEYS) | st.text(max_size=12)
full_keys = st.builds(
    lambda ns, k: f"{ns}:{k}", st.sampled_from([PROJECT, PROJECT, "gcp", ""]), keys
) | st.text(max_size=20)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(full_keys, values | likely_values, max_size=8))
def test_loader_accepts_or_raises_config_error(raw: dict[str, Any]) -> None:
    try:
        cfg = parse_config(raw)
    except ConfigError as err:
        assert err.key.startswith(PROJECT)  # the key it blames, in the project namespace
        assert err.message
    else:
        assert isinstance(cfg, StackConfig)


# Plausible values per key, so that examples get past the field checks to the cross-checks.
cidrs = st.builds(
    lambda a, n: f"{a}/{n}", st.ip_addresses(v=4).map(str), st.integers(0, 32)
) | st.sampled_from(["0.0.0.0/0", "10.0.0.0/8", "::/0"])
zones = st.builds(
    lambda r, z: f"{r}-{z}",
    st.sampled_from(["us-central1", "europe-west4", "asia-southeast1"]),
    st.sampled_from("abcz"),
)
PLAUSIBLE = {
    "region": st.sampled_from(["us-central1", "europe-west4", "asia-southeast1", "mars-north1"]),
    "zones": st.lists(zones, max_size=3),
    "replicas": st.integers(-1, 10),
    "machineType": st.sampled_from([*G2_MACHINE_TYPES, "g2-standard-4", "a2-highgpu-1g"]),
    "provisioningModel": st.sampled_from(["SPOT", "STANDARD", "spot"]),
    "bootDiskSizeGb": st.integers(-10, 70000),
    "modelSizeBytes": st.integers(-1, 2**50),
    "ctxSize": st.integers(0, 300000),
    "degradedCtxSize": st.integers(0, 300000),
    "ubatchSize": st.integers(0, 10000),
    "batchSize": st.integers(0, 70000),
    "threads": st.integers(-1, 300),
    "specDraftPMin": st.floats(-1, 2) | st.just(float("nan")),
    "sourceRanges": st.lists(cidrs, max_size=3),
    "allowPublicInternet": st.booleans(),
    "tools": st.lists(st.sampled_from(["all", "read_file", "rm"]), max_size=2),
    "apiKey": st.booleans(),
    "door": st.booleans(),
    "exposeServerTools": st.booleans(),
    "exposeWithoutApiKey": st.booleans(),
    "specDraftNMax": st.integers(-1, 17),
    "modelRevision": st.sampled_from(["main", "", " ", "abc123"]),
    "defaultMaxTokens": st.integers(-1, 300000),
}


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({}, optional=PLAUSIBLE), st.booleans())
def test_loader_on_plausible_values_accepts_or_raises_config_error(
    values: dict[str, Any], as_cli: bool
) -> None:
    bag = {f"{PROJECT}:{k}": v for k, v in values.items()}
    try:
        cfg = parse_config(as_pulumi_config(bag) if as_cli else bag)
    except ConfigError as err:
        assert err.key.startswith(f"{PROJECT}:")
    else:
        assert all(zone.startswith(f"{cfg.region}-") for zone in cfg.zones)
        assert cfg.replicas >= 1 and cfg.min_boot_disk_gb <= cfg.boot_disk_size_gb
        assert "0.0.0.0/0" not in cfg.source_ranges or cfg.allow_public_internet
        assert not covers_public_internet(cfg.source_ranges) or cfg.allow_public_internet
        assert cfg.ctx_size <= cfg.max_ctx_size
        if cfg.reachable_beyond_iap:
            assert not cfg.tools or cfg.expose_server_tools
            assert cfg.api_key or cfg.expose_without_api_key


# --- issue 21: the holes a new user found, each closed with the key, the value and what is allowed -----


def _error(bag: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        parse_config({f"{PROJECT}:{k}": v for k, v in bag.items()})
    return err.value


def test_a_remote_shell_for_anyone_is_refused_even_with_allow_public_internet() -> None:
    """The exact config of the report: tools, no key, the whole internet, and the opt-in for it."""
    err = _error(
        {
            "tools": ["exec_shell_command", "write_file"],
            "apiKey": False,
            "sourceRanges": ["0.0.0.0/0"],
            "allowPublicInternet": True,
        }
    )
    assert str(err) == (
        "qwen36-mtp-l4:tools: ['exec_shell_command', 'write_file']: server-side tools run commands and "
        "write files on the VM for anyone who reaches the endpoint, and the front door (on the internet, "
        "door: true) can; set exposeServerTools: true to mean it, or reach the server only through IAP "
        "(door: false and empty sourceRanges)"
    )
    err = _error(
        {
            "tools": ["exec_shell_command"],
            "exposeServerTools": True,
            "apiKey": False,
            "door": False,
            "sourceRanges": ["0.0.0.0/0"],
            "allowPublicInternet": True,
        }
    )
    assert err.key == f"{PROJECT}:apiKey"
    assert "sourceRanges 0.0.0.0/0 can; set exposeWithoutApiKey: true" in str(err)


def test_the_two_halves_of_the_internet_need_the_opt_in() -> None:
    err = _error({"sourceRanges": ["0.0.0.0/1", "128.0.0.0/1"], "door": False, "externalIp": True})
    assert str(err) == (
        "qwen36-mtp-l4:sourceRanges: ['0.0.0.0/1', '128.0.0.0/1']: together these ranges open the server "
        "to the whole internet; also set allowPublicInternet: true to mean it, or list your own ranges"
    )


def test_a_keyless_endpoint_is_refused_where_more_than_iap_reaches_it() -> None:
    for reach in ({"door": False, "externalIp": True, "sourceRanges": ["203.0.113.7/32"]}, {"replicas": 2}):
        bag = {"apiKey": False, **reach}
        if reach.get("replicas"):
            bag["sourceRanges"] = ["198.51.100.0/24"]
        err = _error(bag)
        assert err.key == f"{PROJECT}:apiKey" and "exposeWithoutApiKey: true" in str(err), str(err)
    # The door never runs open: no risk key makes a keyless door.
    for bag in ({"apiKey": False}, {"apiKey": False, "exposeWithoutApiKey": True}):
        err = _error(bag)
        assert err.key == f"{PROJECT}:apiKey" and "door: false" in str(err), str(err)
    only_iap = parse_config({f"{PROJECT}:apiKey": False, f"{PROJECT}:door": False})
    assert only_iap.risk_notes() == []


def test_named_risks_are_said_plainly() -> None:
    cfg = parse_config(
        {
            f"{PROJECT}:tools": ["exec_shell_command"],
            f"{PROJECT}:exposeServerTools": True,
            f"{PROJECT}:apiKey": False,
            f"{PROJECT}:exposeWithoutApiKey": True,
            f"{PROJECT}:door": False,
            f"{PROJECT}:externalIp": True,
            f"{PROJECT}:sourceRanges": ["203.0.113.7/32"],
        }
    )
    assert cfg.risk_notes() == [
        "WARNING: server-side tools (exec_shell_command) are on and sourceRanges 203.0.113.7/32 can "
        "reach them: whoever gets in can run commands and write files on the VM (exposeServerTools: true).",
        "WARNING: there is no API key and sourceRanges 203.0.113.7/32 can reach the endpoint: whoever "
        "gets in can use the model (exposeWithoutApiKey: true).",
    ]


def test_the_door_is_the_single_servers_only() -> None:
    err = _error({"replicas": 2, "sourceRanges": ["198.51.100.0/24"], "door": True})
    assert err.key == f"{PROJECT}:door" and "single server" in str(err)
    fleet = parse_config({f"{PROJECT}:replicas": 2, f"{PROJECT}:sourceRanges": ["198.51.100.0/24"]})
    assert not fleet.front_door and StackConfig().front_door


def test_ctx_size_that_cannot_fit_the_l4_is_refused_with_the_estimate() -> None:
    err = _error({"ctxSize": 262144})
    assert str(err) == (
        "qwen36-mtp-l4:ctxSize: 262144: does not fit the L4 beside a 23.0 GB model: at most 63744 by the "
        "estimate (KV 22.0 KiB a token, MTP's draft context 448 MiB at 56320, measured at the pinned build, "
        "in 24576 MiB with ECC off, 256 MiB kept spare); lower ctxSize, specDraftNMax or the model "
        "(modelSizeBytes)"
    )
    # The estimate follows the model and the drafts: a smaller model or no MTP leaves more room.
    assert StackConfig().max_ctx_size == 63744
    assert StackConfig(spec_draft_n_max=0).max_ctx_size > 75000
    smaller = StackConfig(
        model_file="smaller.gguf", model_size_bytes=20 * 1024**3, ctx_size=8192, boot_disk_size_gb=80
    )
    assert smaller.max_ctx_size > 100000
    # The default model is fitted at its own size, whatever modelSizeBytes claims (issue 29).
    assert StackConfig(model_size_bytes=22_000_000_000).max_ctx_size == StackConfig().max_ctx_size
    err = _error({"ctxSize": 262144, "modelSizeBytes": 1})
    assert err.key == f"{PROJECT}:ctxSize" and "beside a 23.0 GB model: at most 63744" in str(err)
    assert StackConfig(model_size_bytes=1).min_boot_disk_gb == StackConfig().min_boot_disk_gb
    # n-max 3 costs 64 MiB more and the deployed ctx still fits (the facts' own reading).
    assert StackConfig(spec_draft_n_max=3).max_ctx_size >= 56320


ALIKE = [
    ("Dev", "dev"),
    ("my_stack", "my-stack"),
    ("a.b", "a-b"),
    ("x" * 40 + "1", "x" * 40 + "2"),
    ("dev-0123abcd", "Dev-0123abcd"),
]


@pytest.mark.parametrize(("a", "b"), ALIKE)
def test_stack_names_that_normalise_alike_get_distinct_resource_names(a: str, b: str) -> None:
    assert deployment_name(a) != deployment_name(b)


def test_safe_stack_names_keep_their_resource_names() -> None:
    assert [deployment_name(s) for s in ("dev", "europe-west4", "asia-southeast1")] == [
        "qwen36-dev",
        "qwen36-europe-west4",
        "qwen36-asia-southeast1",
    ]
    assert deployment_name("Dev") == "qwen36-dev-9c24f45a"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60), st.text(max_size=60))
def test_deployment_name_is_injective(a: str, b: str) -> None:
    if a != b:
        assert deployment_name(a) != deployment_name(b)


@pytest.mark.parametrize(
    ("overrides", "key", "says"),
    [
        ({"apiKey": False}, "apiKey", "checks the API key"),
        ({"sourceRanges": ["198.51.100.7/32"]}, "sourceRanges", "opens no port on the VM"),
    ],
)
def test_the_front_door_needs_the_key_and_opens_no_range(
    overrides: dict[str, Any], key: str, says: str
) -> None:
    """The door is an endpoint on the internet whose only lock is the key; with it, sourceRanges would
    open nothing (the VM's port admits the door's subnet only), so both are refused, naming door: false."""
    with pytest.raises(ConfigError) as err:
        parse_config({f"{PROJECT}:{k}": v for k, v in overrides.items()})
    assert err.value.key == f"{PROJECT}:{key}"
    assert says in str(err.value) and "door: false" in str(err.value)
    assert isinstance(
        parse_config(
            {f"{PROJECT}:{k}": v for k, v in {**overrides, "door": False, "externalIp": True}.items()}
        ),
        StackConfig,
    )


@pytest.mark.parametrize(
    "project",
    ["my project", "MyProject", "google", "acme-google-llm", "a/b", "short", "x" * 31, "acme-", "1acme-llm",
     "other/../acme-llm", "acme-llm\n", "ácme-llm"],
)  # fmt: skip
def test_a_project_id_gce_refuses_is_refused_with_the_rule(project: str) -> None:
    """https://cloud.google.com/resource-manager/docs/creating-managing-projects (issue 29)."""
    with pytest.raises(ConfigError) as err:
        require_gcp_project({"gcp:project": project})
    assert err.value.key == "gcp:project"
    assert "project id" in str(err.value) or "restricted string" in str(err.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [("modelRevision", "main\nx"), ("modelRevision", "main\x00"), ("modelFile", "a\x00b.gguf"),
     ("modelFile", "a\nb.gguf"), ("imageFamily", "family\n"), ("imageProject", "acme-llm\n"),
     ("alias", "qwen\u200b"), ("modelRepo", "owner/name\n"), ("domain", "llm.example.com\n")],
)  # fmt: skip
def test_control_characters_are_refused_where_they_are_read(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({f"{PROJECT}:{key}": value})
    assert err.value.key == f"{PROJECT}:{key}" and repr(value) in str(err.value)


# --- issue 29: exposure by size, not by exact cover -------------------------------------------------

ALL_BUT_ONE = [
    str(n) for n in ipaddress.IPv4Network("0.0.0.0/0").address_exclude(ipaddress.IPv4Network("8.8.8.8/32"))
]


def _ranges(ranges: list[str], **more: Any) -> StackConfig:
    # A single server's sourceRanges reach the VM's own address: only with externalIp.
    config = {f"{PROJECT}:door": False, f"{PROJECT}:externalIp": True, f"{PROJECT}:sourceRanges": ranges}
    return parse_config({**config, **more})


def test_the_exposure_boundary_on_both_sides() -> None:
    """The largest set accepted admits exactly one /8's worth of public addresses; one more is refused."""
    largest = ["11.0.0.0/8", "10.0.0.0/8", "127.0.0.0/8"]  # private and loopback blocks count for nothing
    assert public_addresses(largest) == MAX_PRIVATE_SHARE_ADDRESSES
    assert _ranges(largest).source_ranges == largest
    smallest = ["11.0.0.0/8", "12.0.0.0/32"]
    assert public_addresses(smallest) == MAX_PRIVATE_SHARE_ADDRESSES + 1
    with pytest.raises(ConfigError) as err:
        _ranges(smallest)
    assert err.value.key == f"{PROJECT}:sourceRanges"
    assert "more than one /8 (16777216 addresses)" in str(err.value)
    assert "allowPublicInternet" in str(err.value)
    assert isinstance(_ranges(smallest, **{f"{PROJECT}:allowPublicInternet": True}), StackConfig)


@pytest.mark.parametrize(
    "ranges",
    [ALL_BUT_ONE, ["0.0.0.0/1"], [f"{n}.0.0.0/8" for n in range(1, 224) if n not in (10, 127, 100)][1:]],
    ids=["all-but-8.8.8.8", "half", "220-public-slash-8s"],
)
def test_most_of_the_internet_needs_the_opt_in(ranges: list[str]) -> None:
    assert len(ALL_BUT_ONE) == 32
    with pytest.raises(ConfigError) as err:
        _ranges(ranges)
    assert "share of the internet; also set allowPublicInternet: true" in str(err.value)
    # In a fleet the same list would become Cloud Armor rules: refused there too.
    with pytest.raises(ConfigError):
        parse_config({f"{PROJECT}:replicas": 2, f"{PROJECT}:sourceRanges": ranges[:1990]})


def test_the_range_count_is_bounded_by_the_firewall_and_cloud_armor() -> None:
    many = [str(ipaddress.IPv4Address("11.0.0.0") + i) + "/32" for i in range(MAX_FIREWALL_SOURCE_RANGES + 1)]
    assert len(_ranges(many[:-1]).source_ranges) == MAX_FIREWALL_SOURCE_RANGES
    with pytest.raises(ConfigError) as err:
        _ranges(many)
    assert "5001 ranges are more than one firewall rule takes (5000: https://" in str(err.value)
    fleet = {f"{PROJECT}:replicas": 2}
    assert parse_config({**fleet, f"{PROJECT}:sourceRanges": many[:MAX_ARMOR_SOURCE_RANGES]}).fleet
    with pytest.raises(ConfigError) as err:
        parse_config({**fleet, f"{PROJECT}:sourceRanges": many[: MAX_ARMOR_SOURCE_RANGES + 1]})
    assert "1991 ranges are more than one Cloud Armor policy takes (1990: 199 rules of 10" in str(err.value)


@given(st.text(min_size=1, max_size=60), st.text(min_size=1, max_size=60))
def test_long_stack_names_never_share_the_door_or_builder_account(a: str, b: str) -> None:
    """The door's and the builder's ids keep 8 hex digits of the name's hash (issue 29: 3 were left)."""
    from infra.door import account_id
    from infra.tooling_image import builder_account_id

    one, two = deployment_name(a), deployment_name(b)
    for derive in (account_id, builder_account_id):
        assert 6 <= len(derive(one)) <= 30 and derive(one)[0].isalpha()
        if one != two:
            assert derive(one) != derive(two)
    assert account_id(deployment_name("dev")) == "qwen36-dev-door"
