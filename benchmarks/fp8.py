"""FP8 speed on a real shape: a Qwen3-1.7B-shaped folder with random weights laid out as Qwen/Qwen3-1.7B-FP8
(28 layers, hidden 2048, 16 heads / 8 K/V heads of 128, MLP 6144, 151936 tokens, bf16 embeddings tied to
the output; every projection E4M3 with a float32 scale per 128 x 128 block: quantization_config
quant_method "fp8"). Prefill of 128 / 512 tokens and decode after 128, ossa alone (llama.cpp reads no FP8
folder; its nearest type, Q8_0, is another quantization of the weights), with the load time. Decode is
also given as the bytes of weights read per token over the measured read bandwidth.

Run: OSSA_CORE_DIR=build/dev/csrc PYTHONPATH=src python benchmarks/fp8.py [--threads 2] [--layers 28]
(the folder, ~2.1 GB, is written once into $OSSA_HOME/bench, default ~/.cache/ossa/bench)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

SHAPE = dict(hidden_size=2048, intermediate_size=6144, num_attention_heads=16, num_key_value_heads=8,
             head_dim=128, vocab_size=151936, max_position_embeddings=4096, rms_norm_eps=1e-6,
             rope_theta=1000000.0)  # fmt: skip


def write_qwen3_folder(out: Path, layers: int, projection: Any, quantization_config: dict[str, Any]) -> str:
    """A random Qwen3-1.7B-shaped folder (numpy alone: no torch) whose projections are the tensors
    ``projection(name, rows, cols, rng)`` returns (name -> (array, safetensors dtype)): bf16 embeddings tied
    to the output, unit norms; written once."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bitnet import _save

    if (out / "model.safetensors").exists():
        return str(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    e, f, hd = SHAPE["hidden_size"], SHAPE["intermediate_size"], SHAPE["head_dim"]
    q, kv = SHAPE["num_attention_heads"] * hd, SHAPE["num_key_value_heads"] * hd

    def bf16(a: np.ndarray) -> np.ndarray:  # (uint16 bits, labelled BF16 by _save)
        return (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)

    tensors: dict[str, np.ndarray] = {}
    dtypes: dict[str, str] = {}
    emb = rng.standard_normal((SHAPE["vocab_size"], e), dtype=np.float32) * np.float32(0.02)
    tensors["model.embed_tokens.weight"] = bf16(emb)
    tensors["model.norm.weight"] = bf16(np.ones(e, np.float32))
    for i in range(layers):
        p = f"model.layers.{i}."
        for name, (rows, cols) in {"self_attn.q_proj": (q, e), "self_attn.k_proj": (kv, e),
                                   "self_attn.v_proj": (kv, e), "self_attn.o_proj": (e, q),
                                   "mlp.gate_proj": (f, e), "mlp.up_proj": (f, e),
                                   "mlp.down_proj": (e, f)}.items():  # fmt: skip
            for key, (t, dtype) in projection(p + name, rows, cols, rng).items():
                tensors[key], dtypes[key] = t, dtype
        for name in ("input_layernorm", "post_attention_layernorm"):
            tensors[p + name + ".weight"] = bf16(np.ones(e, np.float32))
        for name in ("self_attn.q_norm", "self_attn.k_norm"):
            tensors[p + name + ".weight"] = bf16(np.ones(hd, np.float32))
    for name, t in tensors.items():
        dtypes.setdefault(name, "F32" if t.dtype == np.float32 else "BF16")
    tmp = out / "model.safetensors.tmp"
    _save(tmp, tensors, dtypes)
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": layers,
              "hidden_act": "silu", "tie_word_embeddings": True, "torch_dtype": "bfloat16",
              "quantization_config": quantization_config, **SHAPE}  # fmt: skip
    (out / "config.json").write_text(json.dumps(config))
    os.replace(tmp, out / "model.safetensors")
    return str(out)


def fp8_projection(name: str, rows: int, cols: int, rng: np.random.Generator) -> dict[str, Any]:
    """Random E4M3 codes (no NaN) with a float32 scale per 128 x 128 block."""
    codes = rng.integers(0, 0x7F, (rows, cols), dtype=np.uint8)
    codes |= rng.integers(0, 2, (rows, cols), dtype=np.uint8) << 7
    scales = rng.uniform(1e-4, 1e-3, ((rows + 127) // 128, (cols + 127) // 128)).astype(np.float32)
    return {name + ".weight": (codes, "F8_E4M3"), name + ".weight_scale_inv": (scales, "F32")}


def bench(path: str, label: str, threads: int, decode: int, weight_bytes: int) -> None:
    """Load time (best of 2), prefill / decode speed, and decode's bytes a token (the quantized
    projections' ``weight_bytes`` plus the tied bf16 output matrix) over the measured read bandwidth."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import forward

    from ossa._native import core

    core.set_num_threads(threads)
    loads = []
    for _ in range(2):
        t0 = time.perf_counter()
        core.load_model(path)
        loads.append(time.perf_counter() - t0)
    speed = forward.ossa_speed(path, threads, decode)
    per_token = weight_bytes + 2 * SHAPE["vocab_size"] * SHAPE["hidden_size"]
    bw = forward.read_bandwidth(threads)
    print(f"{label}, random weights, {threads} threads")
    print(f"  load         {min(loads):8.2f} s (best of 2)")
    for k, v in speed.items():
        print(f"  {k:12s} {v:8.1f} tok/s")
    gbs = per_token * speed["decode"] / 1e9
    read = f"{per_token / 1e6:.0f} MB a token ({weight_bytes / 1e6:.0f} MB quantized)"
    print(
        f"  decode reads {read}: {gbs:.1f} GB/s, {gbs / (bw / 1e9):.2f} of the measured {bw / 1e9:.1f} GB/s"
    )


def projection_elements(layers: int) -> int:
    """The quantized projections' weights of ``layers`` layers."""
    e, f, hd = SHAPE["hidden_size"], SHAPE["intermediate_size"], SHAPE["head_dim"]
    q, kv = SHAPE["num_attention_heads"] * hd, SHAPE["num_key_value_heads"] * hd
    return layers * (2 * q * e + 2 * kv * e + 3 * e * f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--decode", type=int, default=32)
    args = ap.parse_args()
    home = Path(os.environ.get("OSSA_HOME", Path.home() / ".cache" / "ossa"))
    qc = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    path = write_qwen3_folder(
        home / "bench" / f"qwen3-1.7b-fp8-{args.layers}l", args.layers, fp8_projection, qc
    )
    fp8 = projection_elements(args.layers) * 132 // 128  # (codes and their scales)
    bench(path, f"Qwen3-1.7B-FP8 shape, {args.layers} layers", args.threads, args.decode, fp8)


if __name__ == "__main__":
    main()
