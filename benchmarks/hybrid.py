"""Hybrid recurrent models' forward speed and agreement: ossa vs llama.cpp (llama-cpp-python) on the same
GGUF files.

No real file is available offline, so this writes random-weight ones, laid out as llama.cpp's
converter writes them, with the default model's tokenizer (49,152 tokens, fewer than the real ones':
the output matrix is a smaller share of a step than in the real files):

- ``--arch qwen35`` (default), shaped like Qwen3.5-0.8B: hidden 1024, 24 layers of which every 4th is
  gated attention with 8 query / 2 KV heads of 256 dims, a quarter of each rotated; the other 18 gated
  delta-nets with 16 key and 16 value heads of 128 and a 4-tap convolution; SwiGLU of 3584 rows; tied.
- ``--arch lfm2``, shaped like LFM2-1.2B: hidden 2048, 16 layers, attention (32 query / 8 KV heads of
  64) at layers 2, 5, 8, 10, 12 and 14, gated short convolutions of 3 taps elsewhere; SwiGLU of 8192
  rows; tied.
- ``--arch granitehybrid``, shaped like Granite 4.0-H's 1B-class model (the family's proportions):
  hidden 1536, 40 layers of which every 10th (9, 19, 29, 39) is attention without RoPE (12 query / 4
  KV heads of 128), the others Mamba-2 (48 heads of 64, state 128, one group, 4 taps with a bias);
  a dense SwiGLU of 4096 rows; Granite's multipliers; tied.
- ``--arch nemotron_h``, Nemotron Nano 2 (9B)'s block geometry, its first 10 blocks (M-M-M-M*-): hidden
  4480; Mamba-2 blocks of 128 heads x 80 with state 128 in 8 groups (4 taps with a bias), relu2
  feed-forward blocks of 15680 rows, one attention block (40 query / 8 KV heads of 128, no RoPE); untied.
  (1.6B parameters: the full model's blocks at a fifth of its depth.)
- ``--arch falcon_h1``, shaped like Falcon-H1-1.5B: hidden 2048, 24 layers each running attention (8
  query / 2 KV heads of 128, NeoX RoPE) beside a Mamba-2 mixer (d_ssm 3072: 48 heads of 64, state 256, one
  group, 4 taps with a bias, no mixer norm), SwiGLU of 4096 rows; untied (the multipliers folded into the
  weights, as llama.cpp's converter writes such files).
- ``--arch mamba2``, Mamba-Codestral-7B's layer geometry, its first 8 layers: hidden 4096, Mamba-2
  mixers of 128 heads x 64 with state 128 in 8 groups, 4 taps with a bias; untied.
- ``--arch mamba``, Falcon-Mamba-7B's layer geometry, its first 8 layers: hidden 4096, Mamba-1 mixers of
  8192 channels with state 16, dt rank 256, 4 taps with a bias, dt / B / C RMS-normalised; untied.
- ``--arch gemma4``, shaped like Gemma 4 E2B (not a recurrent model; here for its llama.cpp-shaped file):
  hidden 1536, 35 layers, every 5th global (8 query / 1 KV head of 512, a quarter of the frequencies
  turning), the others sliding over 512 tokens (heads of 256); the last 20 layers read the K/V of layers
  13 and 14 and have double-wide GeGLUs (12288 rows, 6144 before); per-layer embeddings of 256 per
  layer; tied, soft-capped at 30.
- ``--arch gemma3n``, shaped like Gemma 3n E2B: hidden 2048, 30 layers, every 5th global (8 query / 2 KV
  heads of 256), the others sliding over 512 tokens; the last 10 read the K/V of layers 18 and 19; GeGLUs
  of 8192 rows, the first 10 layers' gates cut at 0.95; 4 AltUp streams, LAuReL of rank 64, per-layer
  inputs of 256 per layer; tied, soft-capped at 30. (llama.cpp's fixed shape of the family: its 20
  layers with K/V, 10 sparse layers, per-layer inputs of 256.)

F16 written here, the other types made by llama.cpp's own quantizer (llama_model_quantize), cached
under $OSSA_HOME/bench.

For each type: the logits of a 64-token prompt from ossa and from llama.cpp (max |difference| over
max |logit|: both read the same weights, so this checks the file's conventions at full size: value
head order, the decay's sign, the norms' 1 + w, the convolution's layout), then prefill (128, 512
tokens) and decode (after 128 tokens; ``--decode-contexts``: also after longer prompts), each engine
in its own process with its own environment, best of repeated runs, tok/s and ossa / llama.cpp.

    OSSA_CORE_DIR=build/dev/csrc PYTHONPATH=src python benchmarks/hybrid.py [--arch lfm2] [--types Q8_0]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forward import bench_dir, kernels_label, speed_isolated  # noqa: E402
from make_bench_models import copy_gguf_metadata, quantize, write_gguf  # noqa: E402

LFM2 = dict(n_embd=2048, n_layer=16, attention=(2, 5, 8, 10, 12, 14), n_head=32, n_head_kv=8, head_dim=64,
            n_ff=8192, conv=3)  # fmt: skip
GRANITE = dict(n_embd=1536, n_layer=40, attention=(9, 19, 29, 39), n_head=12, n_head_kv=4, head_dim=128,
               n_ff=4096, d_inner=3072, n_heads=48, d_state=128, n_groups=1, conv=4)  # fmt: skip
NEMOTRON = dict(n_embd=4480, pattern="M-M-M-M*-", n_head=40, n_head_kv=8, head_dim=128, n_ff=15680,
                d_inner=10240, n_heads=128, d_state=128, n_groups=8, conv=4)  # fmt: skip
FALCON_H1 = dict(n_embd=2048, n_layer=24, n_head=8, n_head_kv=2, head_dim=128, n_ff=4096, d_inner=3072,
                 n_heads=48, d_state=256, n_groups=1, conv=4)  # fmt: skip
CODESTRAL_MAMBA = dict(n_embd=4096, n_layer=8, d_inner=8192, n_heads=128, d_state=128, n_groups=8, conv=4)
FALCON_MAMBA = dict(n_embd=4096, n_layer=8, d_inner=8192, d_state=16, dt_rank=256, conv=4)
# Gemma 4 E2B's layout: 35 layers (every 5th global), the last 20 reading the K/V of layers 13 / 14
# with double-wide MLPs, per-layer embeddings of 256 (the table over the default tokenizer's 49,152 ids).
GEMMA4_E2B = dict(n_embd=1536, n_layer=35, n_head=8, n_head_kv=1, head_dim=256, global_head_dim=512,
                  n_ff=6144, shared=20, ple=256, window=512, pattern=5)  # fmt: skip
# Gemma 3n E2B's layout (as llama.cpp fixes it: 20 layers with their own K/V, 10 sparse, PLE 256).
GEMMA3N_E2B = dict(n_embd=2048, n_layer=30, n_head=8, n_head_kv=2, head_dim=256, n_ff=8192, shared=10,
                   ple=256, window=512, pattern=5, altup=4, laurel=64, sparse=10)  # fmt: skip
SHAPE = dict(n_embd=1024, n_layer=24, interval=4, n_head=8, n_head_kv=2, head_dim=256, n_ff=3584,
             n_k=16, n_v=16, k_dim=128, v_dim=128, conv=4)  # fmt: skip


class RandomGGUF:
    """A random-weight GGUF file being written, with the default model's tokenizer: matrices F16 of
    standard deviation 1/sqrt(cols), vectors F32 around `base`, drawn in the order they are added
    (one generator per file, seed 0)."""

    def __init__(self, dst: Path, arch: str, tokenizer_gguf: str) -> None:
        import gguf

        reader = gguf.GGUFReader(tokenizer_gguf)
        self.n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
        self.dst, self.tmp = dst, dst.with_suffix(".tmp")
        self.w = gguf.GGUFWriter(str(self.tmp), arch)
        copy_gguf_metadata(reader, self.w, lambda name: name.startswith("tokenizer."))
        self.rng = np.random.default_rng(0)

    def mat(self, name: str, rows: int, cols: int) -> None:
        values = self.rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)
        self.w.add_tensor(name, values.astype(np.float16))

    def vec(self, name: str, n: int, base: float = 1.0, spread: float = 0.1, rows: int = 1) -> None:
        values = (base + spread * self.rng.standard_normal(n, dtype=np.float32)).astype(np.float32)
        self.w.add_tensor(name, values.reshape(rows, n // rows) if rows > 1 else values)

    def embeddings(self, e: int) -> None:
        self.w.add_tensor(
            "token_embd.weight",
            self.rng.standard_normal((self.n_vocab, e), dtype=np.float32).astype(np.float16),
        )

    def attention(self, p: str, e: int, n_head: int, n_head_kv: int, hd: int, q_rows: int = 0) -> None:
        """attn_q (q_rows rows, default n_head x hd), attn_k and attn_v."""
        self.mat(p + "attn_q.weight", q_rows or n_head * hd, e)
        self.mat(p + "attn_k.weight", n_head_kv * hd, e)
        self.mat(p + "attn_v.weight", n_head_kv * hd, e)

    def ssm_only_keys(self, e: int, n_layer: int) -> None:
        """The keys of a model of mixers alone (Mamba-1 / Mamba-2): no attention heads, no feed-forward."""
        self.w.add_context_length(1 << 20)
        self.w.add_embedding_length(e)
        self.w.add_block_count(n_layer)
        self.w.add_feed_forward_length(0)
        self.w.add_head_count(0)

    def ends(self, e: int) -> None:
        """The norm epsilon, vocabulary size and file type keys, then the embeddings, the final norm and an
        untied output matrix."""
        self.w.add_layer_norm_rms_eps(1e-5)
        self.w.add_vocab_size(self.n_vocab)
        self.w.add_file_type(1)  # MOSTLY_F16
        self.embeddings(e)
        self.vec("output_norm.weight", e)
        self.mat("output.weight", self.n_vocab, e)

    def mamba2(self, p: str, e: int, d: int, h: int, g: int, n: int, conv: int, norm: bool = True) -> None:
        """A Mamba-2 mixer as llama.cpp's converter writes it: ssm_a and ssm_d n x 1, the norm (where
        ``norm``) n_groups rows."""
        conv_dim = d + 2 * g * n
        self.mat(p + "ssm_in.weight", 2 * d + 2 * g * n + h, e)
        taps = 0.5 * self.rng.standard_normal((conv_dim, conv))
        self.w.add_tensor(p + "ssm_conv1d.weight", taps.astype(np.float32))
        self.vec(p + "ssm_conv1d.bias", conv_dim, base=0.0)
        self.vec(p + "ssm_dt.bias", h, base=-2.0, spread=0.5)
        self.w.add_tensor(p + "ssm_a", -np.exp(0.5 * self.rng.standard_normal((h, 1))).astype(np.float32))
        self.w.add_tensor(p + "ssm_d", np.ones((h, 1), np.float32))
        if norm:
            self.vec(p + "ssm_norm.weight", d, rows=g)
        self.mat(p + "ssm_out.weight", e, d)

    def ffn(self, p: str, e: int, ff: int, gate: bool = True) -> None:
        if gate:
            self.mat(p + "ffn_gate.weight", ff, e)
        self.mat(p + "ffn_up.weight", ff, e)
        self.mat(p + "ffn_down.weight", e, ff)

    def finish(self) -> str:
        return write_gguf(self.w, self.tmp, self.dst)


def build_f16(dst: Path, tokenizer_gguf: str) -> str:
    """Writes the Qwen3.5-0.8B-shaped file (matrices F16, norms and the delta-net's vectors F32) once."""
    if dst.exists():
        return str(dst)
    s, k = SHAPE, "qwen35."
    f = RandomGGUF(dst, "qwen35", tokenizer_gguf)
    w = f.w
    e, hd, q = s["n_embd"], s["head_dim"], s["n_head"] * s["head_dim"]
    conv_dim = 2 * s["n_k"] * s["k_dim"] + s["n_v"] * s["v_dim"]
    inner = s["n_v"] * s["v_dim"]
    w.add_context_length(262144)
    w.add_embedding_length(e)
    w.add_block_count(s["n_layer"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd // 4)
    w.add_array(k + "rope.dimension_sections", [11, 11, 10, 0])
    w.add_rope_freq_base(10_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_uint32(k + "full_attention_interval", s["interval"])
    w.add_uint32(k + "ssm.conv_kernel", s["conv"])
    w.add_uint32(k + "ssm.state_size", s["k_dim"])
    w.add_uint32(k + "ssm.group_count", s["n_k"])
    w.add_uint32(k + "ssm.time_step_rank", s["n_v"])
    w.add_uint32(k + "ssm.inner_size", inner)
    w.add_vocab_size(f.n_vocab)
    w.add_file_type(1)  # MOSTLY_F16
    f.embeddings(e)
    f.vec("output_norm.weight", e)
    for i in range(s["n_layer"]):
        p = f"blk.{i}."
        f.vec(p + "attn_norm.weight", e)
        f.vec(p + "post_attention_norm.weight", e)
        if (i + 1) % s["interval"]:  # a gated delta-net
            f.mat(p + "attn_qkv.weight", conv_dim, e)
            f.mat(p + "attn_gate.weight", inner, e)
            f.mat(p + "ssm_beta.weight", s["n_v"], e)
            f.mat(p + "ssm_alpha.weight", s["n_v"], e)
            taps = 0.5 * f.rng.standard_normal((conv_dim, s["conv"]))
            w.add_tensor(p + "ssm_conv1d.weight", taps.astype(np.float32))
            f.vec(p + "ssm_dt.bias", s["n_v"], base=0.0, spread=0.5)
            w.add_tensor(p + "ssm_a", -np.exp(0.5 * f.rng.standard_normal(s["n_v"])).astype(np.float32))
            f.vec(p + "ssm_norm.weight", s["v_dim"])
            f.mat(p + "ssm_out.weight", e, inner)
        else:  # gated attention: [query | gate] per head
            f.attention(p, e, s["n_head"], s["n_head_kv"], hd, q_rows=2 * q)
            f.vec(p + "attn_q_norm.weight", hd)
            f.vec(p + "attn_k_norm.weight", hd)
            f.mat(p + "attn_output.weight", e, q)
        f.ffn(p, e, s["n_ff"])
    return f.finish()


def build_lfm2_f16(dst: Path, tokenizer_gguf: str) -> str:
    """Writes the LFM2-1.2B-shaped file (matrices F16, norms and convolution taps F32) once."""
    if dst.exists():
        return str(dst)
    s = LFM2
    f = RandomGGUF(dst, "lfm2", tokenizer_gguf)
    w = f.w
    e, hd = s["n_embd"], s["head_dim"]
    w.add_context_length(128000)
    w.add_embedding_length(e)
    w.add_block_count(s["n_layer"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv([s["n_head_kv"] if i in s["attention"] else 0 for i in range(s["n_layer"])])
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_uint32("lfm2.shortconv.l_cache", s["conv"])
    w.add_vocab_size(f.n_vocab)
    w.add_file_type(1)  # MOSTLY_F16
    f.embeddings(e)
    f.vec("token_embd_norm.weight", e)  # (LFM2's final norm)
    for i in range(s["n_layer"]):
        p = f"blk.{i}."
        f.vec(p + "attn_norm.weight", e)
        f.vec(p + "ffn_norm.weight", e)
        if i in s["attention"]:
            f.attention(p, e, s["n_head"], s["n_head_kv"], hd)
            f.vec(p + "attn_q_norm.weight", hd)
            f.vec(p + "attn_k_norm.weight", hd)
            f.mat(p + "attn_output.weight", e, s["n_head"] * hd)
        else:
            f.mat(p + "shortconv.in_proj.weight", 3 * e, e)
            taps = f.rng.standard_normal((e, s["conv"])) / np.sqrt(s["conv"])
            w.add_tensor(p + "shortconv.conv.weight", taps.astype(np.float32))
            f.mat(p + "shortconv.out_proj.weight", e, e)
        f.ffn(p, e, s["n_ff"])
    return f.finish()


def _ssm_keys(w: Any, k: str, s: dict[str, Any]) -> None:
    """The ssm.* sizes llama.cpp's converter writes for a Mamba-2 hybrid (time_step_rank: the heads)."""
    w.add_uint32(k + "ssm.conv_kernel", s["conv"])
    w.add_uint32(k + "ssm.state_size", s["d_state"])
    w.add_uint32(k + "ssm.group_count", s["n_groups"])
    w.add_uint32(k + "ssm.inner_size", s["d_inner"])
    w.add_uint32(k + "ssm.time_step_rank", s["n_heads"])


def build_granite_f16(dst: Path, tokenizer_gguf: str) -> str:
    """Writes the Granite-4.0-H-1B-class file (matrices F16; norms, convolution taps and the Mamba-2
    vectors F32, as llama.cpp's converter keeps them) once."""
    if dst.exists():
        return str(dst)
    s, k = GRANITE, "granitehybrid."
    f = RandomGGUF(dst, "granitehybrid", tokenizer_gguf)
    w = f.w
    e, hd = s["n_embd"], s["head_dim"]
    w.add_context_length(1 << 20)
    w.add_embedding_length(e)
    w.add_block_count(s["n_layer"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv([s["n_head_kv"] if i in s["attention"] else 0 for i in range(s["n_layer"])])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(10_000.0)
    w.add_bool(k + "rope.scaling.finetuned", False)  # (Granite 4.0-H: no RoPE)
    w.add_layer_norm_rms_eps(1e-5)
    _ssm_keys(w, k, s)
    w.add_expert_shared_feed_forward_length(s["n_ff"])
    w.add_embedding_scale(12.0)  # (the multipliers of Granite 4.0's configs)
    w.add_residual_scale(0.22)
    w.add_attention_scale(0.0078125)
    w.add_logit_scale(6.0)
    w.add_vocab_size(f.n_vocab)
    w.add_file_type(1)  # MOSTLY_F16
    f.embeddings(e)
    f.vec("output_norm.weight", e)
    for i in range(s["n_layer"]):
        p = f"blk.{i}."
        f.vec(p + "attn_norm.weight", e)
        f.vec(p + "ffn_norm.weight", e)
        if i in s["attention"]:
            f.attention(p, e, s["n_head"], s["n_head_kv"], hd)
            f.mat(p + "attn_output.weight", e, s["n_head"] * hd)
        else:
            f.mamba2(p, e, s["d_inner"], s["n_heads"], s["n_groups"], s["d_state"], s["conv"])
        f.ffn(p, e, s["n_ff"])
    return f.finish()


def build_nemotron_f16(dst: Path, tokenizer_gguf: str) -> str:
    """Writes the Nemotron-Nano-2-block file (matrices F16; norms, convolution taps and the Mamba-2
    vectors F32) once, with the keys llama.cpp's converter writes (per-layer KV heads and feed-forward
    sizes, the norm's epsilon under both keys)."""
    if dst.exists():
        return str(dst)
    s, k = NEMOTRON, "nemotron_h."
    f = RandomGGUF(dst, "nemotron_h", tokenizer_gguf)
    w = f.w
    e, hd, kinds = s["n_embd"], s["head_dim"], s["pattern"]
    w.add_context_length(131072)
    w.add_embedding_length(e)
    w.add_block_count(len(kinds))
    w.add_feed_forward_length([s["n_ff"] if c == "-" else 0 for c in kinds])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv([s["n_head_kv"] if c == "*" else 0 for c in kinds])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_layer_norm_eps(1e-5)
    _ssm_keys(w, k, s)
    w.add_vocab_size(f.n_vocab)
    w.add_file_type(1)  # MOSTLY_F16
    f.embeddings(e)
    f.vec("output_norm.weight", e)
    f.mat("output.weight", f.n_vocab, e)
    for i, kind in enumerate(kinds):
        p = f"blk.{i}."
        f.vec(p + "attn_norm.weight", e)
        if kind == "*":
            f.attention(p, e, s["n_head"], s["n_head_kv"], hd)
            f.mat(p + "attn_output.weight", e, s["n_head"] * hd)
        elif kind == "-":
            f.ffn(p, e, s["n_ff"], gate=False)
        else:
            f.mamba2(p, e, s["d_inner"], s["n_heads"], s["n_groups"], s["d_state"], s["conv"])
    return f.finish()


def build_falconh1_f16(dst: Path, tokenizer_gguf: str) -> str:
    """Writes the Falcon-H1-1.5B-shaped file (matrices F16; norms, taps and the Mamba-2 vectors F32) once,
    with the keys and names llama.cpp's converter writes (the MLP's norm blk.{i}.ffn_norm, no mixer norm)."""
    if dst.exists():
        return str(dst)
    s, k = FALCON_H1, "falcon-h1."
    f = RandomGGUF(dst, "falcon-h1", tokenizer_gguf)
    w = f.w
    e, hd = s["n_embd"], s["head_dim"]
    w.add_context_length(131072)
    w.add_embedding_length(e)
    w.add_block_count(s["n_layer"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(1e11)
    _ssm_keys(w, k, s)
    f.ends(e)
    for i in range(s["n_layer"]):
        p = f"blk.{i}."
        f.vec(p + "attn_norm.weight", e)
        f.vec(p + "ffn_norm", e)
        f.attention(p, e, s["n_head"], s["n_head_kv"], hd)
        f.mat(p + "attn_output.weight", e, s["n_head"] * hd)
        f.mamba2(p, e, s["d_inner"], s["n_heads"], s["n_groups"], s["d_state"], s["conv"], norm=False)
        f.ffn(p, e, s["n_ff"])
    return f.finish()


def build_mamba2_f16(dst: Path, tokenizer_gguf: str) -> str:
    """Writes the Mamba-Codestral-7B-layer file (matrices F16; norms, taps and the Mamba-2 vectors F32) once,
    with the keys llama.cpp's converter writes (no attention heads, feed_forward_length 0)."""
    if dst.exists():
        return str(dst)
    s = CODESTRAL_MAMBA
    f = RandomGGUF(dst, "mamba2", tokenizer_gguf)
    w = f.w
    e = s["n_embd"]
    f.ssm_only_keys(e, s["n_layer"])
    _ssm_keys(w, "mamba2.", s)
    f.ends(e)
    for i in range(s["n_layer"]):
        p = f"blk.{i}."
        f.vec(p + "attn_norm.weight", e)
        f.mamba2(p, e, s["d_inner"], s["n_heads"], s["n_groups"], s["d_state"], s["conv"])
    return f.finish()


def build_mamba_f16(dst: Path, tokenizer_gguf: str) -> str:
    """Writes the Falcon-Mamba-7B-layer file (matrices F16; norms, taps and the mixer's vectors F32) once,
    with the keys llama.cpp's converter writes (no attention heads, no feed-forward, ssm.dt_b_c_rms)."""
    if dst.exists():
        return str(dst)
    s, k = FALCON_MAMBA, "mamba."
    f = RandomGGUF(dst, "mamba", tokenizer_gguf)
    w = f.w
    e, d, n, r = s["n_embd"], s["d_inner"], s["d_state"], s["dt_rank"]
    f.ssm_only_keys(e, s["n_layer"])
    w.add_uint32(k + "ssm.conv_kernel", s["conv"])
    w.add_uint32(k + "ssm.inner_size", d)
    w.add_uint32(k + "ssm.state_size", n)
    w.add_uint32(k + "ssm.time_step_rank", r)
    w.add_bool(k + "ssm.dt_b_c_rms", True)
    f.ends(e)
    for i in range(s["n_layer"]):
        p = f"blk.{i}."
        f.vec(p + "attn_norm.weight", e)
        f.mat(p + "ssm_in.weight", 2 * d, e)
        taps = 0.5 * f.rng.standard_normal((d, s["conv"]))
        f.w.add_tensor(p + "ssm_conv1d.weight", taps.astype(np.float32))
        f.vec(p + "ssm_conv1d.bias", d, base=0.0)
        f.mat(p + "ssm_x.weight", r + 2 * n, d)
        f.mat(p + "ssm_dt.weight", d, r)
        f.vec(p + "ssm_dt.bias", d, base=-2.0, spread=0.5)
        a = -np.tile(np.arange(1, n + 1, dtype=np.float32), (d, 1))  # (S4D-real: -1 ... -n per channel)
        f.w.add_tensor(p + "ssm_a", a)
        f.vec(p + "ssm_d", d)
        f.mat(p + "ssm_out.weight", e, d)
    return f.finish()


def build_gemma4_f16(dst: Path, tokenizer_gguf: str) -> str:
    """Writes the Gemma-4-E2B-shaped file (matrices F16; norms, scalars and rope_freqs F32) once, with the
    keys and names llama.cpp's converter writes (key_length / key_length_swa, per-layer feed_forward_length,
    the sliding pattern, shared_kv_layers, the proportional RoPE's rope_freqs)."""
    if dst.exists():
        return str(dst)
    s = GEMMA4_E2B
    f = RandomGGUF(dst, "gemma4", tokenizer_gguf)
    w = f.w
    e, n, hd, ghd, ple = s["n_embd"], s["n_layer"], s["head_dim"], s["global_head_dim"], s["ple"]
    sliding = [(i + 1) % s["pattern"] != 0 for i in range(n)]
    first_shared = n - s["shared"]
    ffs = [s["n_ff"] * (2 if i >= first_shared else 1) for i in range(n)]
    w.add_context_length(131072)
    w.add_embedding_length(e)
    w.add_block_count(n)
    w.add_feed_forward_length(ffs)
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_key_length(ghd)
    w.add_value_length(ghd)
    w.add_key_length_swa(hd)
    w.add_value_length_swa(hd)
    w.add_rope_freq_base(1e6)
    w.add_rope_freq_base_swa(1e4)
    w.add_rope_dimension_count(ghd)
    w.add_rope_dimension_count_swa(hd)
    w.add_sliding_window(s["window"])
    w.add_sliding_window_pattern(sliding)
    w.add_shared_kv_layers(s["shared"])
    w.add_embedding_length_per_layer_input(ple)
    w.add_final_logit_softcapping(30.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(f.n_vocab)
    w.add_file_type(1)  # MOSTLY_F16
    f.embeddings(e)  # (tied output)
    f.vec("output_norm.weight", e)
    f.w.add_tensor(
        "per_layer_token_embd.weight",
        f.rng.standard_normal((f.n_vocab, n * ple), dtype=np.float32).astype(np.float16),
    )
    f.mat("per_layer_model_proj.weight", n * ple, e)
    f.vec("per_layer_proj_norm.weight", ple)
    freqs = [1.0] * (ghd // 8) + [1e30] * (ghd // 2 - ghd // 8)
    f.w.add_tensor("rope_freqs.weight", np.array(freqs, np.float32))
    for i in range(n):
        p, d = f"blk.{i}.", hd if sliding[i] else ghd
        f.vec(p + "attn_norm.weight", e)
        f.mat(p + "attn_q.weight", s["n_head"] * d, e)
        # (q / k norms around d^-1/4: Gemma 4 does not scale its scores, and unit-RMS heads would give
        # scores of sqrt(d) spread, a softmax so sharp that a random model turns chaotic: rounding of
        # 1e-7 growing to whole logits within a few positions, which no agreement check survives)
        f.vec(p + "attn_q_norm.weight", d, base=d**-0.25, spread=0.01)
        if i < first_shared:
            f.mat(p + "attn_k.weight", s["n_head_kv"] * d, e)
            f.mat(p + "attn_v.weight", s["n_head_kv"] * d, e)
            f.vec(p + "attn_k_norm.weight", d, base=d**-0.25, spread=0.01)
        f.mat(p + "attn_output.weight", e, s["n_head"] * d)
        f.vec(p + "post_attention_norm.weight", e)
        f.vec(p + "ffn_norm.weight", e)
        f.ffn(p, e, ffs[i])
        f.vec(p + "post_ffw_norm.weight", e)
        f.mat(p + "inp_gate.weight", ple, e)
        f.mat(p + "proj.weight", e, ple)
        f.vec(p + "post_norm.weight", e)
        f.vec(p + "layer_output_scale.weight", 1, base=0.5, spread=0.05)
    return f.finish()


def build_gemma3n_f16(dst: Path, tokenizer_gguf: str) -> str:
    """Writes the Gemma-3n-E2B-shaped file (matrices and the streams' 3-D projections F16; norms, the AltUp
    coefficients and scales F32) once, with the keys and names llama.cpp's converter writes (the sliding
    pattern, shared_kv_layers, the AltUp keys, activation_sparsity_scale; every layer's K/V tensors, which
    the released checkpoints hold)."""
    if dst.exists():
        return str(dst)
    s = GEMMA3N_E2B
    f = RandomGGUF(dst, "gemma3n", tokenizer_gguf)
    w = f.w
    e, n, hd, ple, a, r = s["n_embd"], s["n_layer"], s["head_dim"], s["ple"], s["altup"], s["laurel"]
    sliding = [(i + 1) % s["pattern"] != 0 for i in range(n)]
    w.add_context_length(32768)
    w.add_embedding_length(e)
    w.add_block_count(n)
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(1e6)
    w.add_rope_freq_base_swa(1e4)
    w.add_sliding_window(s["window"])
    w.add_sliding_window_pattern(sliding)
    w.add_shared_kv_layers(s["shared"])
    w.add_embedding_length_per_layer_input(ple)
    w.add_altup_active_idx(0)
    w.add_altup_num_inputs(a)
    cut = 1.6448535919189453  # (torch's float32 Phi^-1(0.95), as the converter writes it)
    w.add_activation_sparsity_scale([cut] * s["sparse"] + [float("-inf")] * (n - s["sparse"]))
    w.add_final_logit_softcapping(30.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(f.n_vocab)
    w.add_file_type(1)  # MOSTLY_F16
    f.embeddings(e)  # (tied output)
    f.vec("output_norm.weight", e)
    f.w.add_tensor(
        "per_layer_token_embd.weight",
        f.rng.standard_normal((f.n_vocab, n * ple), dtype=np.float32).astype(np.float16),
    )
    f.mat("per_layer_model_proj.weight", n * ple, e)
    f.vec("per_layer_proj_norm.weight", ple)
    for name in ("altup_proj.weight", "altup_unembd_proj.weight"):
        stack = f.rng.standard_normal((a - 1, e, e), dtype=np.float32) / np.sqrt(e)
        f.w.add_tensor(name, stack.astype(np.float16))
    for i in range(n):
        p = f"blk.{i}."
        f.vec(p + "attn_norm.weight", e)
        f.attention(p, e, s["n_head"], s["n_head_kv"], hd)
        # (q / k norms around d^-1/4, as for Gemma 4: its scores are not scaled either)
        f.vec(p + "attn_q_norm.weight", hd, base=hd**-0.25, spread=0.01)
        f.vec(p + "attn_k_norm.weight", hd, base=hd**-0.25, spread=0.01)
        f.mat(p + "attn_output.weight", e, s["n_head"] * hd)
        f.vec(p + "post_attention_norm.weight", e)
        f.vec(p + "ffn_norm.weight", e)
        f.ffn(p, e, s["n_ff"])
        f.vec(p + "post_ffw_norm.weight", e)
        f.mat(p + "inp_gate.weight", ple, e)
        f.mat(p + "proj.weight", e, ple)
        f.vec(p + "post_norm.weight", e)
        f.w.add_tensor(
            p + "altup_correct_coef.weight", (0.1 * f.rng.standard_normal((a, a))).astype(np.float32)
        )
        f.vec(p + "altup_correct_scale.weight", e)
        f.w.add_tensor(
            p + "altup_predict_coef.weight", (0.1 * f.rng.standard_normal((a * a, a))).astype(np.float32)
        )
        f.mat(p + "altup_router.weight", a, e)
        f.vec(p + "altup_router_norm.weight", e)
        f.mat(p + "laurel_l.weight", r, e)
        f.mat(p + "laurel_r.weight", e, r)
        f.vec(p + "laurel_post_norm.weight", e)
    return f.finish()


def agreement(path: str, n: int = 64) -> tuple[float, float]:
    """max |ossa - llama.cpp| / max |llama.cpp| over the logits of an n-token prompt (one process): ossa
    exact, and ossa loaded with quantized_activations (llama.cpp's own scheme: activations rounded to
    8-bit blocks for quantized matrices, where its F16 matmuls round them to f16)."""
    import llama_cpp

    from ossa._native import core

    ids = [int(t) for t in np.random.default_rng(1).integers(100, 40000, n)]
    llm = llama_cpp.Llama(path, n_ctx=256, logits_all=True, verbose=False, n_threads=2)
    llm.eval(ids)
    peer = np.asarray(llm.scores[:n], dtype=np.float32)
    scale = float(np.max(np.abs(peer)))
    out = []
    for quantized in (False, True):
        ours = core.model_logits(core.load_model(path, quantized_activations=quantized), ids)
        out.append(float(np.max(np.abs(ours - peer))) / scale)
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode-steps", type=int, default=32)
    ap.add_argument("--types", default="F16,Q8_0,Q4_K_M")
    archs = ["qwen35", "lfm2", "granitehybrid", "nemotron_h", "falcon_h1", "mamba2", "mamba", "gemma4",
             "gemma3n"]  # fmt: skip
    ap.add_argument("--arch", choices=archs, default="qwen35")
    ap.add_argument("--decode-contexts", default="", help="also decode after prompts this long (1024,4096)")
    args = ap.parse_args()
    from ossa import models
    from ossa._native import core

    default = models.resolve("smollm2-135m")
    stem = {"qwen35": "qwen35-0.8b-shape", "lfm2": "lfm2-1.2b-shape", "granitehybrid": "granite4-h-1b-shape",
            "nemotron_h": "nemotron-nano2-10-blocks",
            "falcon_h1": "falcon-h1-1.5b-shape", "mamba2": "mamba-codestral-7b-8-layers",
            "mamba": "falcon-mamba-7b-8-layers", "gemma4": "gemma4-e2b-shape",
            "gemma3n": "gemma3n-e2b-shape"}[args.arch]  # fmt: skip
    build = {"qwen35": build_f16, "lfm2": build_lfm2_f16, "granitehybrid": build_granite_f16,
             "nemotron_h": build_nemotron_f16, "falcon_h1": build_falconh1_f16, "mamba2": build_mamba2_f16,
             "mamba": build_mamba_f16, "gemma4": build_gemma4_f16,
             "gemma3n": build_gemma3n_f16}[args.arch]  # fmt: skip
    f16 = build(bench_dir() / f"{stem}-F16.gguf", default)
    files = []
    for t in args.types.split(","):
        path = Path(f16) if t == "F16" else bench_dir() / f"{stem}-{t}.gguf"
        if not path.exists():
            quantize(Path(f16), path, t)
        files.append((t, str(path)))
    shape = {"qwen35": SHAPE, "lfm2": LFM2, "granitehybrid": GRANITE, "nemotron_h": NEMOTRON,
             "falcon_h1": FALCON_H1, "mamba2": CODESTRAL_MAMBA, "mamba": FALCON_MAMBA,
             "gemma4": GEMMA4_E2B, "gemma3n": GEMMA3N_E2B}[args.arch]  # fmt: skip
    print(f"synthetic {args.arch}: {shape}; threads={args.threads}; ossa kernels: {kernels_label(core)}")
    contexts = tuple(int(v) for v in args.decode_contexts.split(",") if v)
    print(f"{'type':7} {'phase':12} {'ossa tok/s':>11} {'llama.cpp':>10} {'ratio':>6}")
    for t, path in files:
        exact, quant = agreement(path)
        print(f"{t:7} logits vs llama.cpp, max |diff| / max |logit|: {exact:.2e} (ossa exact), "
              f"{quant:.2e} (ossa with quantized activations, llama.cpp's scheme)")  # fmt: skip
        o = speed_isolated("ossa", path, args.threads, args.decode_steps, False, contexts)
        ll = speed_isolated("llama", path, args.threads, args.decode_steps, False, contexts)
        for phase in ("prefill 128", "prefill 512", "decode", *[f"decode @{n}" for n in contexts]):
            mine, peer = o.get(phase, float("nan")), ll.get(phase, float("nan"))
            print(f"{t:7} {phase:12} {mine:11.1f} {peer:10.1f} {mine / peer:6.2f}")


if __name__ == "__main__":
    main()
