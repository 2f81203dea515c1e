"""The calibration's parts that need no server: its copies of the bench's prompts and of infra's
names, the order of its starts, the stopping rule, and which candidate a verdict and the stack
file's explicit values choose."""

from __future__ import annotations

import json
from pathlib import Path

import accept_guard
import calibrate

from infra import boot_protocol
from infra.config import PROJECT, StackConfig, parse_config, stack_file_keys
from infra.model_cache import VERDICT_TEMP_INFIX
from infra.server_args import CALIBRATION_N_MAX, FUSION_ENV, calibration_candidates, server_args
from qwen36.measure import workloads
from tests.calib.conftest import write_candidates

KEY = calibrate.Key(11434, "ab" * 32, "NVIDIA L4", "580.95.05", "Disabled", 56320)


def test_the_prompts_are_the_benchs_own() -> None:
    by_name = {w.name: w.prompts for w in workloads.WORKLOADS}
    for name, prompt in calibrate.PROMPTS:
        assert prompt in by_name[name], name
    assert calibrate.WARMUP_PROMPT == workloads.WARMUP_PROMPT


def test_the_copied_names_match_infras() -> None:
    assert calibrate.FUSION_ENV == FUSION_ENV
    assert calibrate.N_MAX_VALUES == CALIBRATION_N_MAX
    assert calibrate.TEMP_INFIX == VERDICT_TEMP_INFIX
    assert accept_guard.GUEST_ATTR_PATH.endswith(f"/{boot_protocol.NAMESPACE}/{boot_protocol.KEY_ACCEPT}")


def test_every_rendered_argument_list_is_server_args_of_the_config_with_two_fields_changed(
    tmp_path: Path,
) -> None:
    cfg = StackConfig()
    catalogue = calibrate.Catalogue.load(write_candidates(tmp_path / "c.json", cfg))
    for ctx in (cfg.ctx_size, cfg.degraded_ctx_size):
        for n in CALIBRATION_N_MAX:
            for sampling in (True, False):
                changed = cfg.model_copy(update={"spec_draft_n_max": n, "backend_sampling": sampling})
                want = server_args(changed, model_path="/models/Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf",
                                   api_key_file=None, ctx_size=ctx)  # fmt: skip
                assert catalogue.args(ctx, n, sampling) == want
    assert catalogue.default == calibrate.Candidate(cfg.spec_draft_n_max, True, cfg.backend_sampling)
    # The production flags are one of them: a verdict that picks the defaults changes nothing.
    assert catalogue.args(cfg.ctx_size, cfg.spec_draft_n_max, cfg.backend_sampling) == server_args(
        cfg, model_path="/models/Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf", api_key_file=None
    )


def test_starts_begin_with_the_stacks_n_max_then_plain_decode_fusion_on_first() -> None:
    assert calibrate.Plan(first_n_max=2).starts() == [
        (2, True), (0, True), (1, True), (3, True), (2, False), (0, False), (1, False), (3, False),
    ]  # fmt: skip
    assert calibrate.Plan(first_n_max=0).starts()[:4] == [(0, True), (1, True), (2, True), (3, True)]


def _result(candidate: calibrate.Candidate, rates: list[float], status: str = "running") -> calibrate.Result:
    samples = {i: calibrate.Sample(64, 64 / r * 1000.0, None, None) for i, r in enumerate(rates)}
    return calibrate.Result(candidate, samples, status)


A = calibrate.Candidate(2, True, True)
B = calibrate.Candidate(0, True, True)


def test_a_candidate_far_behind_stops_after_one_prompt() -> None:
    noise = calibrate.Noise([(100.0, 101.0)])
    slow = _result(A, [40.0])
    fast = _result(B, [100.0, 98.0, 101.0, 99.0], "measured")
    assert calibrate.cannot_win(slow, fast, noise, 4, same_start=False)
    assert not calibrate.cannot_win(fast, slow, noise, 4, same_start=False)


def test_a_close_candidate_is_never_cut_across_server_starts() -> None:
    # 4 % behind on every prompt: within the start-to-start drift, so both run to the end.
    noise = calibrate.Noise([(100.0, 100.5)])
    behind = _result(A, [96.0, 96.0, 96.0, 96.0])
    ahead = _result(B, [100.0, 100.0, 100.0, 100.0], "measured")
    assert not calibrate.cannot_win(behind, ahead, noise, 4, same_start=False)
    # In one server, with the repeat noise measured at 0.5 %, the same gap decides.
    assert calibrate.cannot_win(behind, ahead, noise, 4, same_start=True)


def test_noisy_repeats_keep_candidates_running() -> None:
    quiet = calibrate.Noise([(100.0, 100.5)])
    noisy = calibrate.Noise([(100.0, 130.0), (100.0, 75.0)])
    behind = _result(A, [85.0, 85.0])
    ahead = _result(B, [100.0, 100.0])
    assert calibrate.cannot_win(behind, ahead, quiet, 4, same_start=True)
    assert not calibrate.cannot_win(behind, ahead, noisy, 4, same_start=True)
    assert noisy.repeat > 0.15
    assert quiet.repeat == calibrate.REPEAT_NOISE_MIN  # 0.35 % measured, below the floor


def _doc(tmp_path: Path, cfg: StackConfig) -> tuple[dict, calibrate.Catalogue]:
    catalogue = calibrate.Catalogue.load(write_candidates(tmp_path / "c.json", cfg))
    results = [
        _result(calibrate.Candidate(3, True, True), [99.0] * 4, "measured"),
        _result(calibrate.Candidate(2, False, True), [95.0] * 4, "measured"),
        _result(calibrate.Candidate(2, True, True), [94.0] * 4, "measured"),
        _result(calibrate.Candidate(0, True, False), [70.0] * 4, "measured"),
    ]
    doc = calibrate.Calibration(KEY, results, calibrate.Noise(), 1.0, 120.0, [], 64).verdict()
    return doc, catalogue


def test_without_explicit_values_the_verdicts_winner_is_served(tmp_path: Path) -> None:
    doc, catalogue = _doc(tmp_path, StackConfig())
    choice = calibrate.choose(doc, catalogue, "verdict")
    assert choice.candidate == calibrate.Candidate(3, True, True) and not choice.notes and not choice.pinned


def _stack_config(tmp_path: Path, stack_yaml: str, bag: dict[str, str]) -> StackConfig:
    """The config as `pulumi up` builds it: Pulumi.yaml's defaults in the bag for every key, the
    stack file deciding which of them the user set."""
    (tmp_path / "Pulumi.yaml").write_text("name: qwen36-mtp-l4\nruntime: python\n")
    (tmp_path / "Pulumi.dev.yaml").write_text(stack_yaml)
    defaults = {f"{PROJECT}:{k}": v for k, v in {"specDraftNMax": "2", "backendSampling": "true"}.items()}
    return parse_config({**defaults, **bag}, stack_keys=stack_file_keys("dev", tmp_path))


def test_pulumis_defaults_are_not_mistaken_for_the_users_values(tmp_path: Path) -> None:
    cfg = _stack_config(tmp_path, "config:\n  qwen36-mtp-l4:region: us-central1\n", {})
    assert not {"spec_draft_n_max", "backend_sampling"} & cfg.model_fields_set
    # The same value written in the stack file is the user's, though it equals the default.
    cfg = _stack_config(
        tmp_path, "config:\n  qwen36-mtp-l4:specDraftNMax: 2\n", {f"{PROJECT}:specDraftNMax": "2"}
    )
    assert "spec_draft_n_max" in cfg.model_fields_set
    # A value unlike the default is the user's wherever it came from (an ESC environment, say).
    cfg = _stack_config(tmp_path, "config: {}\n", {f"{PROJECT}:backendSampling": "false"})
    assert "backend_sampling" in cfg.model_fields_set


def test_an_explicit_n_max_wins_and_the_fastest_measured_candidate_with_it_is_served(tmp_path: Path) -> None:
    cfg = _stack_config(
        tmp_path, "config:\n  qwen36-mtp-l4:specDraftNMax: 2\n", {f"{PROJECT}:specDraftNMax": "2"}
    )
    doc, catalogue = _doc(tmp_path, cfg)
    assert catalogue.pinned == {"spec_draft_n_max": 2}
    choice = calibrate.choose(doc, catalogue, "verdict")
    assert choice.candidate == calibrate.Candidate(2, False, True)
    assert choice.notes == ["qwen36-mtp-l4:specDraftNMax 2 set in the stack config wins over the verdict's 3"]
    assert choice.pinned == ["specDraftNMax"]


def test_an_explicit_value_no_candidate_has_is_served_with_the_verdicts_other_options(tmp_path: Path) -> None:
    cfg = _stack_config(
        tmp_path, "config:\n  qwen36-mtp-l4:specDraftNMax: 5\n", {f"{PROJECT}:specDraftNMax": "5"}
    )
    doc, catalogue = _doc(tmp_path, cfg)
    choice = calibrate.choose(doc, catalogue, "verdict")
    assert choice.candidate == calibrate.Candidate(5, True, True)
    # Its argument list was rendered too, from server_args with the stack's own value.
    args = catalogue.args(cfg.ctx_size, 5, True)
    assert args[args.index("--spec-draft-n-max") + 1] == "5"


def test_the_candidates_document_names_only_stack_file_values_as_pinned(tmp_path: Path) -> None:
    cfg = _stack_config(tmp_path, "config:\n  qwen36-mtp-l4:backendSampling: false\n",
                        {f"{PROJECT}:backendSampling": "false"})  # fmt: skip
    doc = calibration_candidates(cfg, model_path="/m", api_key_file=None, ctx_sizes=(cfg.ctx_size,))
    assert doc["pinned"] == {"backend_sampling": False}
    assert json.loads(json.dumps(doc))["pinned_keys"] == {"backend_sampling": f"{PROJECT}:backendSampling"}
