"""Mixture-of-experts forward speed: ossa vs llama.cpp (llama-cpp-python) on the same GGUF files.

No real MoE model is available offline, so this builds random-weight ones (the tokenizer of the
default model copied in, so llama.cpp can load them; routers F32, as llama.cpp's quantizer keeps
them), cached under $OSSA_HOME/bench:

- `--arch qwen3moe` (default): shaped like Qwen3-30B-A3B scaled down (hidden 768, 8 layers, 32
  experts of 256 rows, 8 used per token, q/k norm), in each of `--types` (Q8_0 and Q4_0).
- `--arch gpt-oss`: gpt-oss-20b's layer at full width (hidden 2880, 64 query / 8 KV heads of 64, 32
  experts of 2880 rows, 4 used per token, sinks, biases, 128-token window on even layers, YaRN) for
  `--layers` layers (default 8 of its 24), the experts in MXFP4 as released (random codes and
  exponents written directly) and the rest Q8_0; the vocabulary is the default model's (49,152, not
  gpt-oss's 201,088), so the output matrix is a smaller share of a decode step than in the real file.
- `--arch deepseek2`: DeepSeek-V2-Lite's layer at full width (hidden 2048, 16 heads, latent attention
  with kv rank 512 and 128 + 64 query/key dims per head, 128 for values; 64 experts of 1408 rows, 6
  used per token by softmax, 2 shared experts; layer 0 dense with 10944 rows) for `--layers` layers
  (default 6 of its 27), with V2 / V3's query bottleneck (rank 1536: llama.cpp reads a file without
  q_lora_rank only at V2-Lite's 26 or 27 layers), laid out as llama.cpp's current converter writes
  it (attn_k_b / attn_v_b), Q8_0 matrices (random int8 codes and scales written directly), norms and
  routers F32.
- `--arch llama4`: Llama-4-Scout's layer at full width (hidden 5120, 40 query / 8 KV heads of 128; 16
  experts of 8192 rows, one a token by the sigmoid of its router logit on the expert's input, beside a
  shared expert of 8192; every 4th layer without RoPE and with the attention temperature, the others
  chunked, q / k normalised) for `--layers` layers (default 4 of its 48: one NoPE layer), Q8_0
  matrices written directly, norms and routers F32; untied, the default model's vocabulary (49,152,
  not Scout's 202,048).
- `--arch minimax-m2`: MiniMax-M2's layer at full width (hidden 3072, 48 query / 8 KV heads of 128 with
  q / k norms over all heads and RoPE on 64 of each head's dimensions; 256 experts of 1536 rows, 8 a token
  by sigmoid score plus a selection bias) for `--layers` layers (default 2 of its 62), Q8_0 matrices
  written directly, norms, routers and biases F32; untied, the default model's vocabulary.

Prefill (128 and 512 tokens) and decode (after a 128-token prompt; `--decode-contexts 1024,4096`: also
after longer prompts, where the attention over the cache counts), same threads, best of repeated runs
(forward.py's ossa_speed / llama_speed), each engine in its own process with its own environment,
tok/s and the ratio ossa / llama.cpp.

    OSSA_CORE_DIR=build/moe/csrc PYTHONPATH=src python benchmarks/moe.py [--threads 2] [--arch gpt-oss]
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
from make_bench_models import copy_gguf_metadata, write_gguf  # noqa: E402  (forward put scripts/ on the path)

SHAPE = dict(n_embd=768, n_layer=8, n_head=12, n_head_kv=4, head_dim=64, n_expert=32, n_expert_used=8,
             n_ff_expert=256)  # fmt: skip


def build(dst: Path, type_name: str, tokenizer_gguf: str) -> str:
    """Writes the synthetic Qwen3-MoE model as `type_name` (norms and routers F32) once."""
    if dst.exists():
        return str(dst)
    import gguf
    from gguf.quants import quantize

    s = SHAPE
    reader = gguf.GGUFReader(tokenizer_gguf)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    tmp = dst.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), "qwen3moe")
    copy_gguf_metadata(reader, w, lambda name: name.startswith("tokenizer."))
    w.add_context_length(4096)
    w.add_embedding_length(s["n_embd"])
    w.add_block_count(s["n_layer"])
    w.add_feed_forward_length(4 * s["n_embd"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_dimension_count(s["head_dim"])
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(n_vocab)
    w.add_expert_count(s["n_expert"])
    w.add_expert_used_count(s["n_expert_used"])
    w.add_expert_feed_forward_length(s["n_ff_expert"])
    qtype = gguf.GGMLQuantizationType[type_name]
    rng = np.random.default_rng(0)

    def add(name: str, *shape: int, quant: bool = True) -> None:
        x = (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[-1])).astype(np.float32)
        if "norm" in name:
            x = (0.5 + rng.random(shape, dtype=np.float32)).astype(np.float32)
        if quant and len(shape) >= 2:
            q = quantize(x, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
        else:
            w.add_tensor(name, x)

    e, hd, ne, f = s["n_embd"], s["head_dim"], s["n_expert"], s["n_ff_expert"]
    add("token_embd.weight", n_vocab, e)
    add("output_norm.weight", e)
    add("output.weight", n_vocab, e)
    for i in range(s["n_layer"]):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", e)
        add(p + "attn_q.weight", s["n_head"] * hd, e)
        add(p + "attn_k.weight", s["n_head_kv"] * hd, e)
        add(p + "attn_v.weight", s["n_head_kv"] * hd, e)
        add(p + "attn_output.weight", e, s["n_head"] * hd)
        add(p + "attn_q_norm.weight", hd)
        add(p + "attn_k_norm.weight", hd)
        add(p + "ffn_norm.weight", e)
        add(p + "ffn_gate_inp.weight", ne, e, quant=False)
        add(p + "ffn_gate_exps.weight", ne, f, e)
        add(p + "ffn_up_exps.weight", ne, f, e)
        add(p + "ffn_down_exps.weight", ne, e, f)
    return write_gguf(w, tmp, dst)


GPT_OSS = dict(n_embd=2880, n_head=64, n_head_kv=8, head_dim=64, n_expert=32, n_expert_used=4, n_ff=2880,
               window=128)  # fmt: skip


def build_gpt_oss(dst: Path, n_layer: int, tokenizer_gguf: str) -> str:
    """Writes the gpt-oss-20b-wide model of ``n_layer`` layers once (see the module docstring)."""
    if dst.exists():
        return str(dst)
    import gguf
    from gguf.quants import quantize

    s = GPT_OSS
    reader = gguf.GGUFReader(tokenizer_gguf)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    tmp = dst.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), "gpt-oss")
    copy_gguf_metadata(reader, w, lambda name: name.startswith("tokenizer."))
    e, hd, ne, f = s["n_embd"], s["head_dim"], s["n_expert"], s["n_ff"]
    w.add_context_length(131072)
    w.add_embedding_length(e)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(f)
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(150000.0)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(32.0)
    w.add_rope_scaling_orig_ctx_len(4096)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_sliding_window(s["window"])
    w.add_expert_count(ne)
    w.add_expert_used_count(s["n_expert_used"])
    w.add_expert_feed_forward_length(f)
    w.add_vocab_size(n_vocab)
    w.add_file_type(38)  # MOSTLY_MXFP4_MOE
    rng = np.random.default_rng(0)

    def dense(name: str, rows: int, cols: int) -> None:
        x = (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(np.float32)
        q = quantize(x, gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def f32(name: str, *shape: int, base: float = 0.0, spread: float = 0.02) -> None:
        w.add_tensor(name, (base + spread * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32))

    def experts(name: str, rows: int, cols: int) -> None:
        # MXFP4 blocks: an E8M0 byte (largest |weight| 6 x 2^(e - 127) near 3 / sqrt(cols)), 16 code bytes.
        top = 127 + int(np.floor(np.log2(3 / np.sqrt(cols) / 6)))
        raw = rng.integers(0, 256, size=(ne, rows, cols // 32, 17), dtype=np.uint8)
        raw[..., 0] = rng.integers(top - 1, top + 1, size=raw.shape[:3], dtype=np.uint8)
        w.add_tensor(name, raw.reshape(ne, rows, -1), raw_shape=(ne, rows, cols // 32 * 17),
                     raw_dtype=gguf.GGMLQuantizationType.MXFP4)  # fmt: skip

    dense("token_embd.weight", n_vocab, e)
    f32("output_norm.weight", e, base=1.0)
    dense("output.weight", n_vocab, e)
    for i in range(n_layer):
        p = f"blk.{i}."
        f32(p + "attn_norm.weight", e, base=1.0)
        f32(p + "post_attention_norm.weight", e, base=1.0)
        dense(p + "attn_q.weight", s["n_head"] * hd, e)
        dense(p + "attn_k.weight", s["n_head_kv"] * hd, e)
        dense(p + "attn_v.weight", s["n_head_kv"] * hd, e)
        dense(p + "attn_output.weight", e, s["n_head"] * hd)
        f32(p + "attn_q.bias", s["n_head"] * hd)
        f32(p + "attn_k.bias", s["n_head_kv"] * hd)
        f32(p + "attn_v.bias", s["n_head_kv"] * hd)
        f32(p + "attn_output.bias", e)
        f32(p + "attn_sinks.weight", s["n_head"], spread=1.0)
        f32(p + "ffn_gate_inp.weight", ne, e, spread=1 / np.sqrt(e))
        f32(p + "ffn_gate_inp.bias", ne)
        experts(p + "ffn_gate_exps.weight", f, e)
        experts(p + "ffn_up_exps.weight", f, e)
        experts(p + "ffn_down_exps.weight", e, f)
        f32(p + "ffn_gate_exps.bias", ne, f)
        f32(p + "ffn_up_exps.bias", ne, f)
        f32(p + "ffn_down_exps.bias", ne, e)
    return write_gguf(w, tmp, dst)


class RandomQ8:
    """Random tensors added to a GGUF writer: Q8_0 matrices written as blocks directly (an f16 scale
    putting the largest |weight| near 3 / sqrt(cols), 32 random int8 codes: no float copy of a large
    model), F32 vectors around ``base``. One generator (seed 0), drawn in the order they are added."""

    def __init__(self, w: Any) -> None:
        import gguf

        self.w, self.rng, self.q8 = w, np.random.default_rng(0), gguf.GGMLQuantizationType.Q8_0

    def mat(self, name: str, *shape: int) -> None:
        cols = shape[-1]
        raw = self.rng.integers(-127, 128, size=(*shape[:-1], cols // 32, 34), dtype=np.int8).view(np.uint8)
        scale = np.full((*shape[:-1], cols // 32), 3 / np.sqrt(cols) / 127, dtype=np.float16)
        raw[..., 0:2] = scale[..., None].view(np.uint8).reshape(*scale.shape, 2)
        shape_raw = (*shape[:-1], cols // 32 * 34)
        self.w.add_tensor(name, raw.reshape(*shape[:-1], -1), raw_shape=shape_raw, raw_dtype=self.q8)

    def f32(self, name: str, *shape: int, base: float = 0.0, spread: float = 0.02) -> None:
        values = base + spread * self.rng.standard_normal(shape, dtype=np.float32)
        self.w.add_tensor(name, values.astype(np.float32))


V2_LITE = dict(n_embd=2048, n_head=16, q_lora=1536, kv_lora=512, nope=128, rope=64, v=128, n_expert=64,
               n_expert_used=6, n_ff_expert=1408, n_shared=2, n_ff_dense=10944)  # fmt: skip


def build_deepseek2(dst: Path, n_layer: int, tokenizer_gguf: str) -> str:
    """Writes the DeepSeek-V2-Lite-wide model of ``n_layer`` layers once (see the module docstring)."""
    if dst.exists():
        return str(dst)
    import gguf

    s, k = V2_LITE, "deepseek2."
    reader = gguf.GGUFReader(tokenizer_gguf)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    tmp = dst.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), "deepseek2")
    copy_gguf_metadata(reader, w, lambda name: name.startswith("tokenizer."))
    e, h, lat, nope, rope, v = s["n_embd"], s["n_head"], s["kv_lora"], s["nope"], s["rope"], s["v"]
    ne, f = s["n_expert"], s["n_ff_expert"]
    w.add_context_length(163840)
    w.add_embedding_length(e)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(s["n_ff_dense"])
    w.add_head_count(h)
    w.add_head_count_kv(1)
    w.add_rope_dimension_count(rope)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_uint32(k + "attention.q_lora_rank", s["q_lora"])
    w.add_uint32(k + "attention.kv_lora_rank", lat)
    w.add_key_length(lat + rope)
    w.add_value_length(lat)
    w.add_uint32(k + "attention.key_length_mla", nope + rope)
    w.add_uint32(k + "attention.value_length_mla", v)
    w.add_uint32(k + "leading_dense_block_count", 1)
    w.add_expert_count(ne)
    w.add_expert_used_count(s["n_expert_used"])
    w.add_expert_feed_forward_length(f)
    w.add_uint32(k + "expert_shared_count", s["n_shared"])
    w.add_float32(k + "expert_weights_scale", 1.0)
    w.add_bool(k + "expert_weights_norm", False)
    w.add_uint32(k + "expert_gating_func", 1)
    w.add_vocab_size(n_vocab)
    w.add_file_type(7)  # MOSTLY_Q8_0
    r = RandomQ8(w)
    mat, f32 = r.mat, r.f32

    mat("token_embd.weight", n_vocab, e)
    f32("output_norm.weight", e, base=1.0)
    mat("output.weight", n_vocab, e)
    for i in range(n_layer):
        p = f"blk.{i}."
        f32(p + "attn_norm.weight", e, base=1.0)
        mat(p + "attn_q_a.weight", s["q_lora"], e)
        f32(p + "attn_q_a_norm.weight", s["q_lora"], base=1.0)
        mat(p + "attn_q_b.weight", h * (nope + rope), s["q_lora"])
        mat(p + "attn_kv_a_mqa.weight", lat + rope, e)
        f32(p + "attn_kv_a_norm.weight", lat, base=1.0)
        mat(p + "attn_k_b.weight", h, lat, nope)
        mat(p + "attn_v_b.weight", h, v, lat)
        mat(p + "attn_output.weight", e, h * v)
        f32(p + "ffn_norm.weight", e, base=1.0)
        if i == 0:
            mat(p + "ffn_gate.weight", s["n_ff_dense"], e)
            mat(p + "ffn_up.weight", s["n_ff_dense"], e)
            mat(p + "ffn_down.weight", e, s["n_ff_dense"])
            continue
        f32(p + "ffn_gate_inp.weight", ne, e, spread=1 / np.sqrt(e))
        mat(p + "ffn_gate_exps.weight", ne, f, e)
        mat(p + "ffn_up_exps.weight", ne, f, e)
        mat(p + "ffn_down_exps.weight", ne, e, f)
        mat(p + "ffn_gate_shexp.weight", s["n_shared"] * f, e)
        mat(p + "ffn_up_shexp.weight", s["n_shared"] * f, e)
        mat(p + "ffn_down_shexp.weight", e, s["n_shared"] * f)
    return write_gguf(w, tmp, dst)


SCOUT = dict(n_embd=5120, n_head=40, n_head_kv=8, head_dim=128, n_expert=16, n_expert_used=1,
             n_ff_expert=8192, n_ff=16384)  # fmt: skip


def build_llama4(dst: Path, n_layer: int, tokenizer_gguf: str) -> str:
    """Writes the Llama-4-Scout-wide model of ``n_layer`` layers once (see the module docstring)."""
    if dst.exists():
        return str(dst)
    import gguf

    s = SCOUT
    reader = gguf.GGUFReader(tokenizer_gguf)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    tmp = dst.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), "llama4")
    copy_gguf_metadata(reader, w, lambda name: name.startswith("tokenizer."))
    e, hd, ne, f = s["n_embd"], s["head_dim"], s["n_expert"], s["n_ff_expert"]
    w.add_context_length(10485760)
    w.add_embedding_length(e)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(ne)
    w.add_expert_used_count(s["n_expert_used"])
    w.add_expert_feed_forward_length(f)
    w.add_interleave_moe_layer_step(1)
    w.add_vocab_size(n_vocab)
    w.add_file_type(7)  # MOSTLY_Q8_0
    r = RandomQ8(w)
    mat, f32 = r.mat, r.f32

    mat("token_embd.weight", n_vocab, e)
    f32("output_norm.weight", e, base=1.0)
    mat("output.weight", n_vocab, e)
    for i in range(n_layer):
        p = f"blk.{i}."
        f32(p + "attn_norm.weight", e, base=1.0)
        mat(p + "attn_q.weight", s["n_head"] * hd, e)
        mat(p + "attn_k.weight", s["n_head_kv"] * hd, e)
        mat(p + "attn_v.weight", s["n_head_kv"] * hd, e)
        mat(p + "attn_output.weight", e, s["n_head"] * hd)
        f32(p + "ffn_norm.weight", e, base=1.0)
        f32(p + "ffn_gate_inp.weight", ne, e, spread=1 / np.sqrt(e))
        mat(p + "ffn_gate_exps.weight", ne, f, e)
        mat(p + "ffn_up_exps.weight", ne, f, e)
        mat(p + "ffn_down_exps.weight", ne, e, f)
        mat(p + "ffn_gate_shexp.weight", f, e)
        mat(p + "ffn_up_shexp.weight", f, e)
        mat(p + "ffn_down_shexp.weight", e, f)
    return write_gguf(w, tmp, dst)


MINIMAX = dict(n_embd=3072, n_head=48, n_head_kv=8, head_dim=128, rotary=64, n_expert=256, n_expert_used=8,
               n_ff_expert=1536)  # fmt: skip


def build_minimax(dst: Path, n_layer: int, tokenizer_gguf: str) -> str:
    """Writes the MiniMax-M2-wide model of ``n_layer`` layers once (see the module docstring)."""
    if dst.exists():
        return str(dst)
    import gguf

    s = MINIMAX
    reader = gguf.GGUFReader(tokenizer_gguf)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    tmp = dst.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), "minimax-m2")
    copy_gguf_metadata(reader, w, lambda name: name.startswith("tokenizer."))
    e, hd, ne, f = s["n_embd"], s["head_dim"], s["n_expert"], s["n_ff_expert"]
    w.add_context_length(196608)
    w.add_embedding_length(e)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(f)
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(s["rotary"])
    w.add_rope_freq_base(5e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(ne)
    w.add_expert_used_count(s["n_expert_used"])
    w.add_expert_feed_forward_length(f)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_vocab_size(n_vocab)
    w.add_file_type(7)  # MOSTLY_Q8_0
    r = RandomQ8(w)
    mat, f32 = r.mat, r.f32
    mat("token_embd.weight", n_vocab, e)
    f32("output_norm.weight", e, base=1.0)
    mat("output.weight", n_vocab, e)
    for i in range(n_layer):
        p = f"blk.{i}."
        f32(p + "attn_norm.weight", e, base=1.0)
        mat(p + "attn_q.weight", s["n_head"] * hd, e)
        mat(p + "attn_k.weight", s["n_head_kv"] * hd, e)
        mat(p + "attn_v.weight", s["n_head_kv"] * hd, e)
        mat(p + "attn_output.weight", e, s["n_head"] * hd)
        f32(p + "attn_q_norm.weight", s["n_head"] * hd, base=1.0)
        f32(p + "attn_k_norm.weight", s["n_head_kv"] * hd, base=1.0)
        f32(p + "ffn_norm.weight", e, base=1.0)
        f32(p + "ffn_gate_inp.weight", ne, e, spread=1 / np.sqrt(e))
        f32(p + "exp_probs_b.bias", ne, spread=0.01)
        mat(p + "ffn_gate_exps.weight", ne, f, e)
        mat(p + "ffn_up_exps.weight", ne, f, e)
        mat(p + "ffn_down_exps.weight", ne, e, f)
    return write_gguf(w, tmp, dst)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode-steps", type=int, default=32)
    ap.add_argument("--types", default="Q8_0,Q4_0", help="qwen3moe: the files' types")
    ap.add_argument(
        "--arch", choices=["qwen3moe", "gpt-oss", "deepseek2", "llama4", "minimax-m2"], default="qwen3moe"
    )
    ap.add_argument(
        "--decode-contexts", default="", help="also decode after prompts of these lengths (1024,4096)"
    )
    ap.add_argument(
        "--layers",
        type=int,
        default=0,
        help="gpt-oss: layers of the 20b width (default 8 of its 24); "
        "deepseek2: of V2-Lite's width (default 6 of its 27); llama4: of Scout's (default 4 of its 48); "
        "minimax-m2: of MiniMax-M2's (default 2 of its 62)",
    )
    args = ap.parse_args()
    from ossa import models
    from ossa._native import core

    default = models.resolve("smollm2-135m")
    kernels = kernels_label(core)
    if args.arch == "minimax-m2":
        layers = args.layers or 2
        print(f"synthetic minimax-m2: {MINIMAX}, {layers} layers; threads={args.threads}")
        name = f"minimax-m2-wide-{layers}l-Q8_0.gguf"
        files = [("Q8_0", build_minimax(bench_dir() / name, layers, default))]
    elif args.arch == "llama4":
        layers = args.layers or 4
        print(f"synthetic llama4: {SCOUT}, {layers} layers; threads={args.threads}")
        name = f"llama4-scout-wide-{layers}l-Q8_0.gguf"
        files = [("Q8_0", build_llama4(bench_dir() / name, layers, default))]
    elif args.arch == "deepseek2":
        layers = args.layers or 6
        print(f"synthetic deepseek2: {V2_LITE}, {layers} layers; threads={args.threads}")
        name = f"deepseek-v2-lite-wide-qlora-{layers}l-Q8_0.gguf"
        files = [("Q8_0", build_deepseek2(bench_dir() / name, layers, default))]
    elif args.arch == "gpt-oss":
        args.layers = args.layers or 8
        print(f"synthetic gpt-oss: {GPT_OSS}, {args.layers} layers; threads={args.threads}")
        name = f"gpt-oss-20b-wide-{args.layers}l-MXFP4.gguf"
        files = [("MXFP4", build_gpt_oss(bench_dir() / name, args.layers, default))]
    else:
        print(f"synthetic qwen3moe: {SHAPE}; threads={args.threads}")
        files = [
            (t, build(bench_dir() / f"qwen3moe-synthetic-{t}.gguf", t, default))
            for t in args.types.split(",")
        ]
    print(f"ossa kernels: {kernels}")
    print(f"{'type':6} {'phase':12} {'ossa tok/s':>11} {'llama.cpp':>10} {'ratio':>6}")
    for t, path in files:
        # Each engine in its own process with its own environment (forward.speed_isolated).
        contexts = tuple(int(v) for v in args.decode_contexts.split(",") if v)
        o = speed_isolated("ossa", path, args.threads, args.decode_steps, False, contexts)
        ll = speed_isolated("llama", path, args.threads, args.decode_steps, False, contexts)
        for phase in ("prefill 128", "prefill 512", "decode", *[f"decode @{n}" for n in contexts]):
            mine, peer = o.get(phase, float("nan")), ll.get(phase, float("nan"))
            print(f"{t:6} {phase:12} {mine:11.1f} {peer:10.1f} {mine / peer:6.2f}")


if __name__ == "__main__":
    main()
