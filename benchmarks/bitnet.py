"""BitNet b1.58 speed on a real shape: a microsoft/bitnet-b1.58-2B-4T-shaped folder with random weights
(30 layers, hidden 2560, 20 heads / 5 K/V heads, MLP 6912, 128256 tokens, bf16 embeddings tied to the
output), packed as transformers' BitLinear reads it (uint8, four ternary values a byte, a weight_scale
each). Prefill of 128 / 512 tokens and decode after 128, ossa alone: llama.cpp reads no such folder (its
bitnet GGUF files hold TQ1_0 / TQ2_0 weights and quantize activations per block of 256, not per row), and
Microsoft's bitnet.cpp is a fork not on PyPI. Decode is also given as the bytes of weights read per token
over the measured read bandwidth.

Run: OSSA_CORE_DIR=build/dev/csrc PYTHONPATH=src python benchmarks/bitnet.py [--threads 2] [--layers 30]
(the folder, ~1.2 GB, is written once into $OSSA_HOME/bench, default ~/.cache/ossa/bench)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

SHAPE = dict(hidden_size=2560, intermediate_size=6912, num_attention_heads=20, num_key_value_heads=5,
             vocab_size=128256, max_position_embeddings=4096, rms_norm_eps=1e-5,
             rope_theta=500000.0)  # fmt: skip


def write_folder(out: Path, layers: int) -> str:
    """The packed random folder (numpy alone: no torch)."""
    if (out / "model.safetensors").exists():
        return str(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    e, f = SHAPE["hidden_size"], SHAPE["intermediate_size"]
    hd = e // SHAPE["num_attention_heads"]
    kv = SHAPE["num_key_value_heads"] * hd

    def bf16(a: np.ndarray) -> np.ndarray:  # (stored as uint16 bits: safetensors' BF16 via a view below)
        return (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)

    tensors: dict[str, np.ndarray] = {}
    dtypes: dict[str, str] = {}
    emb = rng.standard_normal((SHAPE["vocab_size"], e), dtype=np.float32) * np.float32(0.02)
    tensors["model.embed_tokens.weight"] = bf16(emb)
    tensors["model.norm.weight"] = bf16(np.ones(e, np.float32))
    for i in range(layers):
        p = f"model.layers.{i}."
        for name, (rows, cols) in {"self_attn.q_proj": (e, e), "self_attn.k_proj": (kv, e),
                                   "self_attn.v_proj": (kv, e), "self_attn.o_proj": (e, e),
                                   "mlp.gate_proj": (f, e), "mlp.up_proj": (f, e),
                                   "mlp.down_proj": (e, f)}.items():  # fmt: skip
            codes = rng.integers(0, 3, (4, rows // 4, cols), dtype=np.uint8)
            tensors[p + name + ".weight"] = codes[0] | codes[1] << 2 | codes[2] << 4 | codes[3] << 6
            tensors[p + name + ".weight_scale"] = bf16(np.asarray([1.7], np.float32))
        for name, n in (("input_layernorm", e), ("post_attention_layernorm", e),
                        ("self_attn.attn_sub_norm", e), ("mlp.ffn_sub_norm", f)):  # fmt: skip
            tensors[p + name + ".weight"] = bf16(np.ones(n, np.float32))
    for name, t in tensors.items():
        dtypes[name] = "U8" if t.dtype == np.uint8 else "BF16"
    tmp = out / "model.safetensors.tmp"
    _save(tmp, tensors, dtypes)
    config = {"architectures": ["BitNetForCausalLM"], "model_type": "bitnet", "num_hidden_layers": layers,
              "hidden_act": "relu2", "tie_word_embeddings": True, "torch_dtype": "bfloat16",
              "quantization_config": {"quant_method": "bitnet", "linear_class": "bitlinear",
                                      "quantization_mode": "offline"}, **SHAPE}  # fmt: skip
    (out / "config.json").write_text(json.dumps(config))
    os.replace(tmp, out / "model.safetensors")
    return str(out)


def _save(path: Path, tensors: dict[str, np.ndarray], dtypes: dict[str, str]) -> None:
    """A safetensors file (the format's header and data, written directly: the bf16 arrays are uint16
    bits, which safetensors.numpy would label U16)."""
    header: dict[str, object] = {}
    offset = 0
    for name, t in tensors.items():
        header[name] = {
            "dtype": dtypes[name],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + t.nbytes],
        }
        offset += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
        for t in tensors.values():
            fh.write(np.ascontiguousarray(t).tobytes())


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import forward

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--decode", type=int, default=32)
    args = ap.parse_args()
    home = Path(os.environ.get("OSSA_HOME", Path.home() / ".cache" / "ossa"))
    path = write_folder(home / "bench" / f"bitnet-2b4t-{args.layers}l", args.layers)
    speed = forward.ossa_speed(path, args.threads, args.decode)
    e, f = SHAPE["hidden_size"], SHAPE["intermediate_size"]
    kv = SHAPE["num_key_value_heads"] * e // SHAPE["num_attention_heads"]
    ternary = args.layers * (2 * e * e + 2 * kv * e + 3 * e * f) // 4
    per_token = ternary + 2 * SHAPE["vocab_size"] * e  # (+ the tied bf16 output matrix)
    bw = forward.read_bandwidth(args.threads)
    print(f"BitNet b1.58 2B4T shape, {args.layers} layers, random weights, {args.threads} threads")
    for k, v in speed.items():
        print(f"  {k:12s} {v:8.1f} tok/s")
    gbs = per_token * speed["decode"] / 1e9
    read = f"{per_token / 1e6:.0f} MB a token ({ternary / 1e6:.0f} MB ternary)"
    print(
        f"  decode reads {read}: {gbs:.1f} GB/s, {gbs / (bw / 1e9):.2f} of the measured {bw / 1e9:.1f} GB/s"
    )


if __name__ == "__main__":
    main()
