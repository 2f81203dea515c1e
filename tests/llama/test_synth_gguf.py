"""The tiny model generator: deterministic, the real architecture's metadata, the real widths on request."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np

from tests.harness.synth_gguf import (
    REAL_WIDTH,
    THINKING_TEMPLATE,
    TINY,
    build_vocab,
    tensor_plan,
    write_qwen35moe_gguf,
)

# Qwen3.6-35B-A3B at 8 trunk layers + MTP, F16 (the GPU measurement's figure): ~17 GB.
REAL_WIDTH_F16_BYTES = 17.19e9
MAX_TINY_BYTES = 3_000_000


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _field(reader: gguf.GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


def test_tiny_is_deterministic_per_seed(tmp_path: Path) -> None:
    a = write_qwen35moe_gguf(tmp_path / "a.gguf", TINY, seed=7)
    b = write_qwen35moe_gguf(tmp_path / "b.gguf", TINY, seed=7)
    c = write_qwen35moe_gguf(tmp_path / "c.gguf", TINY, seed=8)
    assert _sha(a) == _sha(b) != _sha(c)
    assert a.stat().st_size < MAX_TINY_BYTES


def test_tiny_has_the_qwen35moe_mtp_layout(tmp_path: Path) -> None:
    reader = gguf.GGUFReader(write_qwen35moe_gguf(tmp_path / "m.gguf", TINY))
    assert _field(reader, "general.architecture") == "qwen35moe"
    assert _field(reader, "qwen35moe.block_count") == TINY.n_trunk_layers + 1
    assert _field(reader, "qwen35moe.nextn_predict_layers") == 1
    assert _field(reader, "tokenizer.ggml.pre") == "qwen35"
    assert len(_field(reader, "tokenizer.ggml.merges")) > 0  # type: ignore[arg-type]
    names = {t.name for t in reader.tensors}
    mtp = TINY.n_trunk_layers
    assert {
        f"blk.{mtp}.nextn.eh_proj.weight",
        f"blk.{mtp}.nextn.enorm.weight",
        f"blk.{mtp}.attn_q.weight",
    } <= names
    # Three gated-delta-net layers, then one full-attention layer.
    assert {
        f"blk.{i}.ssm_conv1d.weight" for i in range(3)
    } <= names and "blk.3.ssm_conv1d.weight" not in names
    assert "blk.3.attn_q.weight" in names and "blk.0.attn_q.weight" not in names


def test_f16_keeps_conv_and_norms_f32(tmp_path: Path) -> None:
    reader = gguf.GGUFReader(write_qwen35moe_gguf(tmp_path / "m.gguf", TINY, dtype="f16"))
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert types["blk.0.ssm_conv1d.weight"] == gguf.GGMLQuantizationType.F32
    assert types["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32
    assert types["blk.0.ffn_up_exps.weight"] == gguf.GGMLQuantizationType.F16


def test_agree_makes_embeddings_equal_and_favours_one_token(tmp_path: Path) -> None:
    reader = gguf.GGUFReader(write_qwen35moe_gguf(tmp_path / "m.gguf", TINY, agree=True))
    tensors = {t.name: np.asarray(t.data) for t in reader.tensors}
    embd = tensors["token_embd.weight"]
    assert np.all(embd == embd[0])
    favoured = build_vocab(None).id_of("a")
    logits = tensors["output.weight"] @ embd[0]
    assert int(np.argmax(logits)) == favoured


def test_real_width_plan_has_the_deployed_widths() -> None:
    vocab = build_vocab(REAL_WIDTH.vocab_size)
    plans = {p.name: p for p in tensor_plan(REAL_WIDTH, vocab, agree=False)}
    assert len(vocab.tokens) == 248_320
    assert plans["token_embd.weight"].shape == (248_320, 2048)
    assert plans["blk.0.ffn_gate_exps.weight"].shape == (256, 512, 2048)
    assert plans["blk.3.attn_q.weight"].shape == (2 * 16 * 256, 2048)
    assert plans["blk.3.attn_k.weight"].shape == (2 * 256, 2048)
    # q and k of 16 heads x 128, v of 32 heads x 128
    assert plans["blk.0.attn_qkv.weight"].shape == (2 * 16 * 128 + 32 * 128, 2048)
    total = sum(int(np.prod(p.shape)) * (4 if p.keep_f32 else 2) for p in plans.values())
    assert abs(total - REAL_WIDTH_F16_BYTES) / REAL_WIDTH_F16_BYTES < 0.01
    fewer = tensor_plan(replace(REAL_WIDTH, n_trunk_layers=4), vocab, agree=False)
    assert {p.name for p in fewer if p.name.startswith("blk.4.nextn")} == {
        "blk.4.nextn.eh_proj.weight",
        "blk.4.nextn.enorm.weight",
        "blk.4.nextn.hnorm.weight",
    }


def test_thinking_carries_the_qwen35_template(tmp_path: Path) -> None:
    plain = gguf.GGUFReader(write_qwen35moe_gguf(tmp_path / "p.gguf", TINY))
    thinking = gguf.GGUFReader(write_qwen35moe_gguf(tmp_path / "t.gguf", TINY, thinking=True))
    template = _field(thinking, "tokenizer.chat_template")
    assert template == THINKING_TEMPLATE.read_text()
    assert "<think>" in str(template) and "<think>" not in str(_field(plain, "tokenizer.chat_template"))
