"""Mixture-of-experts forward speed: ossa vs llama.cpp (llama-cpp-python) on the same GGUF files.

No small real MoE model is available offline, so this builds one shaped like Qwen3-30B-A3B scaled
down (hidden 768, 8 layers, 32 experts of 256 rows, 8 used per token, q/k norm) with random weights,
as `qwen3moe` GGUF files in Q8_0 and Q4_0 (the tokenizer of the default model copied in, so
llama.cpp can load them; routers F32, as llama.cpp's quantizer keeps them), cached under
$OSSA_HOME/bench. Prefill (128 and 512 tokens) and decode (after a 128-token prompt), same threads,
best of repeated runs (forward.py's ossa_speed / llama_speed), tok/s and the ratio ossa / llama.cpp.

    OSSA_CORE_DIR=build/moe/csrc PYTHONPATH=src python benchmarks/moe.py [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode-steps", type=int, default=32)
    ap.add_argument("--types", default="Q8_0,Q4_0")
    args = ap.parse_args()
    from ossa import models
    from ossa._native import core

    default = models.resolve("smollm2-135m")
    kernels = kernels_label(core)
    s = SHAPE
    print(f"synthetic qwen3moe: {s}; threads={args.threads}; ossa kernels: {kernels}")
    print(f"{'type':6} {'phase':12} {'ossa tok/s':>11} {'llama.cpp':>10} {'ratio':>6}")
    for t in args.types.split(","):
        path = build(bench_dir() / f"qwen3moe-synthetic-{t}.gguf", t, default)
        # Each engine in its own process with its own environment (forward.speed_isolated).
        o = speed_isolated("ossa", path, args.threads, args.decode_steps, False)
        ll = speed_isolated("llama", path, args.threads, args.decode_steps, False)
        for phase in ("prefill 128", "prefill 512", "decode"):
            mine, peer = o.get(phase, float("nan")), ll.get(phase, float("nan"))
            print(f"{t:6} {phase:12} {mine:11.1f} {peer:10.1f} {mine / peer:6.2f}")


if __name__ == "__main__":
    main()
