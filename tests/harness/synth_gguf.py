"""Random-weight GGUF models of Qwen3.6-MoE's real architecture (``qwen35moe``) with an MTP head.

The test suite runs the real pinned llama-server against a ``TINY`` model (~2 MB, loads in
<0.1 s on CPU) so every production flag, MTP drafting included, is exercised without the 22 GB
model. ``REAL_WIDTH`` has the deployed model's layer widths (fewer layers) for GPU measurements.

Layout follows llama.cpp's loader for the pinned build (``src/models/qwen35moe.cpp``): the trunk
repeats three gated-delta-net layers and one gated full-attention layer, every layer is MoE with a
gated shared expert, and the MTP head is one extra full-attention layer counted in ``block_count``
with ``nextn_predict_layers = 1``.

``agree=True`` makes the trunk and the MTP head predict the same token (every embedding equal,
every residual write zero, the output head favouring one token, the MTP projection passing the
embedding through): greedy output is "aaaa..." and every draft is accepted, so a test can assert
acceptance. With random weights essentially no draft is accepted.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np

ARCH = "qwen35moe"
WEIGHT_STD = 0.02
# In agree mode the favoured token's logit is this times sqrt(n_embd): softmax ~1, so a draft
# passes any --spec-draft-p-min.
AGREE_LOGIT_SCALE = 50.0
AGREE_TOKEN = "a"

Init = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


@dataclass(frozen=True)
class ModelSpec:
    n_embd: int
    n_trunk_layers: int
    n_head: int
    n_head_kv: int
    head_dim: int
    rope_dim: int
    rope_sections: tuple[int, int, int, int]
    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    n_ff_shexp: int
    ssm_state: int  # head dim of the gated delta net's keys and values
    ssm_k_heads: int
    ssm_v_heads: int
    ssm_conv_kernel: int = 4
    full_attention_interval: int = 4
    context_length: int = 262_144
    # None: just the byte-level tokens, merges and specials (~270); else padded to this size.
    vocab_size: int | None = None
    rms_eps: float = 1e-6
    rope_freq_base: float = 10_000_000.0

    @property
    def n_layers(self) -> int:
        return self.n_trunk_layers + 1

    def is_linear_attention(self, layer: int) -> bool:
        return layer < self.n_trunk_layers and (layer + 1) % self.full_attention_interval != 0


TINY = ModelSpec(
    n_embd=64,
    n_trunk_layers=4,
    n_head=4,
    n_head_kv=2,
    head_dim=16,
    rope_dim=8,
    rope_sections=(2, 1, 1, 0),
    n_expert=8,
    n_expert_used=2,
    n_ff_exp=32,
    n_ff_shexp=32,
    ssm_state=16,
    ssm_k_heads=2,
    ssm_v_heads=4,
)

# Qwen3.6-35B-A3B's widths (its config.json) with 8 trunk layers instead of 40.
REAL_WIDTH = ModelSpec(
    n_embd=2048,
    n_trunk_layers=8,
    n_head=16,
    n_head_kv=2,
    head_dim=256,
    rope_dim=64,
    rope_sections=(11, 11, 10, 0),
    n_expert=256,
    n_expert_used=8,
    n_ff_exp=512,
    n_ff_shexp=512,
    ssm_state=128,
    ssm_k_heads=16,
    ssm_v_heads=32,
    vocab_size=248_320,
)

SPECS = {"tiny": TINY, "real": REAL_WIDTH}


# --- tokenizer -------------------------------------------------------------------------------

# A handful of merges: llama.cpp refuses a gpt2 vocab whose merges are empty, and the gguf writer
# silently drops an empty array.
_MERGES = ("Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "Ġt he", "a a")
_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


# llama.cpp's copy of the Qwen3.5 chat template (models/templates/Qwen3.5-4B.jinja in the b11434
# sdist), the family Qwen3.6 belongs to. With thinking on (the default) its generation prompt ends
# in an open `<think>`, so llama-server's parser hands what the model says back as
# `reasoning_content` until it closes the tag, as the deployed model's answers arrive.
THINKING_TEMPLATE = Path(__file__).resolve().parent / "templates" / "Qwen3.5-4B.jinja"


def _byte_chars() -> list[str]:
    """GPT-2's byte-to-unicode table: token i is byte i."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


@dataclass(frozen=True)
class Vocab:
    tokens: list[str]
    types: list[int]
    merges: list[str]
    eos: int
    pad: int

    def id_of(self, token: str) -> int:
        return self.tokens.index(token)


def build_vocab(size: int | None) -> Vocab:
    tokens = _byte_chars()
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for merge in _MERGES:
        tokens.append(merge.replace(" ", ""))
        types.append(gguf.TokenType.NORMAL)
    if size is not None:
        # Plain ASCII fillers: a random-weight model does generate them, and they must detokenize.
        filler = size - len(tokens) - len(_SPECIALS)
        if filler < 0:
            raise ValueError(
                f"vocab_size {size} is smaller than the {len(tokens) + len(_SPECIALS)} base tokens"
            )
        tokens += [f"[tok{i}]" for i in range(filler)]
        types += [gguf.TokenType.NORMAL] * filler
    for special in _SPECIALS:
        tokens.append(special)
        types.append(gguf.TokenType.CONTROL)
    return Vocab(
        tokens=tokens,
        types=[int(t) for t in types],
        merges=list(_MERGES),
        eos=tokens.index("<|im_end|>"),
        pad=tokens.index("<|endoftext|>"),
    )


# --- tensors ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorPlan:
    name: str
    shape: tuple[int, ...]  # numpy order: ggml's ne reversed
    init: Init
    keep_f32: bool = False


def _normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(WEIGHT_STD)


def _ones(_rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return np.ones(shape, dtype=np.float32)


def _zeros(_rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return np.zeros(shape, dtype=np.float32)


def _ssm_a(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    # The converter stores A = -exp(A_log): negative decay rates.
    return -np.exp(rng.uniform(-1.0, 1.0, shape)).astype(np.float32)


def _mtp_pass_embedding(_rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    # eh_proj maps concat(enorm(embedding), hnorm(hidden)) to n_embd: keep the embedding half.
    n_embd = shape[0]
    weight = np.zeros(shape, dtype=np.float32)
    weight[:, :n_embd] = np.eye(n_embd, dtype=np.float32)
    return weight


def _layer_plan(spec: ModelSpec, il: int, *, agree: bool) -> Iterator[TensorPlan]:
    e, p = spec.n_embd, f"blk.{il}."
    # A zero write to the residual stream keeps the hidden state equal to the embedding.
    write = _zeros if agree else _normal
    yield TensorPlan(p + "attn_norm.weight", (e,), _ones, keep_f32=True)
    yield TensorPlan(p + "post_attention_norm.weight", (e,), _ones, keep_f32=True)
    if spec.is_linear_attention(il):
        key_dim = spec.ssm_state * spec.ssm_k_heads
        value_dim = spec.ssm_state * spec.ssm_v_heads
        yield TensorPlan(p + "attn_qkv.weight", (2 * key_dim + value_dim, e), _normal)
        yield TensorPlan(p + "attn_gate.weight", (value_dim, e), _normal)
        # The CPU ssm_conv op asserts F32 weights.
        yield TensorPlan(
            p + "ssm_conv1d.weight", (2 * key_dim + value_dim, spec.ssm_conv_kernel), _normal, True
        )
        yield TensorPlan(p + "ssm_dt.bias", (spec.ssm_v_heads,), _normal, keep_f32=True)
        yield TensorPlan(p + "ssm_a", (spec.ssm_v_heads,), _ssm_a, keep_f32=True)
        yield TensorPlan(p + "ssm_beta.weight", (spec.ssm_v_heads, e), _normal)
        yield TensorPlan(p + "ssm_alpha.weight", (spec.ssm_v_heads, e), _normal)
        yield TensorPlan(p + "ssm_norm.weight", (spec.ssm_state,), _ones, keep_f32=True)
        yield TensorPlan(p + "ssm_out.weight", (e, value_dim), write)
    else:
        q_dim = spec.head_dim * spec.n_head
        kv_dim = spec.head_dim * spec.n_head_kv
        # Query and output gate share one projection, hence twice the query width.
        yield TensorPlan(p + "attn_q.weight", (2 * q_dim, e), _normal)
        yield TensorPlan(p + "attn_k.weight", (kv_dim, e), _normal)
        yield TensorPlan(p + "attn_v.weight", (kv_dim, e), _normal)
        yield TensorPlan(p + "attn_output.weight", (e, q_dim), write)
        yield TensorPlan(p + "attn_q_norm.weight", (spec.head_dim,), _ones, keep_f32=True)
        yield TensorPlan(p + "attn_k_norm.weight", (spec.head_dim,), _ones, keep_f32=True)
    n_exp, ff, sff = spec.n_expert, spec.n_ff_exp, spec.n_ff_shexp
    yield TensorPlan(p + "ffn_gate_inp.weight", (n_exp, e), _normal, keep_f32=True)
    yield TensorPlan(p + "ffn_gate_exps.weight", (n_exp, ff, e), _normal)
    yield TensorPlan(p + "ffn_up_exps.weight", (n_exp, ff, e), _normal)
    yield TensorPlan(p + "ffn_down_exps.weight", (n_exp, e, ff), write)
    yield TensorPlan(p + "ffn_gate_inp_shexp.weight", (e,), _normal, keep_f32=True)
    yield TensorPlan(p + "ffn_gate_shexp.weight", (sff, e), _normal)
    yield TensorPlan(p + "ffn_up_shexp.weight", (sff, e), _normal)
    yield TensorPlan(p + "ffn_down_shexp.weight", (e, sff), write)
    if il == spec.n_trunk_layers:
        yield TensorPlan(p + "nextn.eh_proj.weight", (e, 2 * e), _mtp_pass_embedding if agree else _normal)
        yield TensorPlan(p + "nextn.enorm.weight", (e,), _ones, keep_f32=True)
        yield TensorPlan(p + "nextn.hnorm.weight", (e,), _ones, keep_f32=True)


def tensor_plan(spec: ModelSpec, vocab: Vocab, *, agree: bool, seed: int = 0) -> list[TensorPlan]:
    n_vocab, e = len(vocab.tokens), spec.n_embd
    embed: Init = _normal
    head: Init = _normal
    if agree:
        favoured = vocab.id_of(AGREE_TOKEN)
        # One shared embedding vector; the favoured output row points along it.
        direction = np.random.default_rng([seed, 1]).standard_normal(e, dtype=np.float32)

        def embed(_rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
            return np.broadcast_to(direction, shape).copy()

        def head(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
            weight = _normal(rng, shape)
            weight[favoured] = AGREE_LOGIT_SCALE * direction / np.linalg.norm(direction)
            return weight

    plans = [
        TensorPlan("token_embd.weight", (n_vocab, e), embed),
        TensorPlan("output_norm.weight", (e,), _ones, keep_f32=True),
        TensorPlan("output.weight", (n_vocab, e), head),
    ]
    for il in range(spec.n_layers):
        plans.extend(_layer_plan(spec, il, agree=agree))
    return plans


# --- writer ----------------------------------------------------------------------------------


def _write_metadata(
    writer: gguf.GGUFWriter, spec: ModelSpec, vocab: Vocab, dtype: str, *, thinking: bool = False
) -> None:
    writer.add_name(f"qwen35moe-synthetic-{spec.n_embd}x{spec.n_trunk_layers}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layers)
    writer.add_nextn_predict_layers(1)
    writer.add_expert_count(spec.n_expert)
    writer.add_expert_used_count(spec.n_expert_used)
    writer.add_expert_feed_forward_length(spec.n_ff_exp)
    writer.add_expert_shared_feed_forward_length(spec.n_ff_shexp)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_key_length(spec.head_dim)
    writer.add_value_length(spec.head_dim)
    writer.add_layer_norm_rms_eps(spec.rms_eps)
    writer.add_rope_dimension_count(spec.rope_dim)
    writer.add_rope_dimension_sections(list(spec.rope_sections))
    writer.add_rope_freq_base(spec.rope_freq_base)
    writer.add_ssm_conv_kernel(spec.ssm_conv_kernel)
    writer.add_ssm_state_size(spec.ssm_state)
    writer.add_ssm_group_count(spec.ssm_k_heads)
    writer.add_ssm_time_step_rank(spec.ssm_v_heads)
    writer.add_ssm_inner_size(spec.ssm_state * spec.ssm_v_heads)
    writer.add_full_attention_interval(spec.full_attention_interval)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen35")
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.types)
    writer.add_token_merges(vocab.merges)
    writer.add_eos_token_id(vocab.eos)
    writer.add_pad_token_id(vocab.pad)
    writer.add_add_bos_token(False)
    writer.add_chat_template(THINKING_TEMPLATE.read_text() if thinking else _CHAT_TEMPLATE)


def write_qwen35moe_gguf(
    path: Path | str,
    spec: ModelSpec = TINY,
    *,
    seed: int = 0,
    agree: bool = False,
    dtype: str = "f32",
    progress: Callable[[str], None] | None = None,
    thinking: bool = False,
) -> Path:
    """Writes the model to ``path``, one tensor at a time (peak memory: the largest tensor).

    ``thinking``: the Qwen3.5 chat template (:data:`THINKING_TEMPLATE`) instead of a plain ChatML one.
    """
    if dtype not in ("f32", "f16"):
        raise ValueError(f"dtype must be f32 or f16, not {dtype!r}")
    path = Path(path)
    vocab = build_vocab(spec.vocab_size)
    plans = tensor_plan(spec, vocab, agree=agree, seed=seed)

    def out_dtype(plan: TensorPlan) -> type[np.floating]:
        return np.float32 if dtype == "f32" or plan.keep_f32 else np.float16

    writer = gguf.GGUFWriter(path, ARCH)
    _write_metadata(writer, spec, vocab, dtype, thinking=thinking)
    for plan in plans:
        itemsize = np.dtype(out_dtype(plan)).itemsize
        writer.add_tensor_info(
            plan.name, plan.shape, np.dtype(out_dtype(plan)), int(np.prod(plan.shape)) * itemsize
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for i, plan in enumerate(plans):
        writer.write_tensor_data(plan.init(rng, plan.shape).astype(out_dtype(plan), copy=False))
        if progress is not None:
            progress(f"[{i + 1}/{len(plans)}] {plan.name} {plan.shape}")
    writer.close()
    return path


def write_tiny_mtp_gguf(path: Path | str, seed: int = 0, agree: bool = False, thinking: bool = False) -> Path:
    return write_qwen35moe_gguf(path, TINY, seed=seed, agree=agree, thinking=thinking)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness.synth_gguf", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--spec", choices=sorted(SPECS), default="tiny")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--agree", action="store_true", help="trunk and MTP head agree: every draft accepted")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=("f32", "f16"), help="default: f32 for tiny, f16 for real")
    parser.add_argument("--trunk-layers", type=int, help="override the spec's trunk layer count")
    args = parser.parse_args(argv)
    spec = SPECS[args.spec]
    if args.trunk_layers is not None:
        spec = replace(spec, n_trunk_layers=args.trunk_layers)
    dtype = args.dtype or ("f16" if args.spec == "real" else "f32")
    started = time.monotonic()
    verbose = args.spec != "tiny"
    write_qwen35moe_gguf(
        args.out, spec, seed=args.seed, agree=args.agree, dtype=dtype, progress=print if verbose else None
    )
    size = args.out.stat().st_size
    print(f"wrote {args.out} ({size / 1e6:.1f} MB, {dtype}) in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
