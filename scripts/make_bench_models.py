"""Benchmark models of real shapes with random weights, as GGUF files and a bf16 Hugging Face folder.

Shapes (layer counts, widths and heads of the public configs; the vocabulary and tokenizer are the
default model's, SmolLM2's 49,152 tokens, so the output matrix is 49,152 x hidden and tied):

    1b    Llama-3.2-1B:   16 layers, hidden 2048, ffn 8192, 32 heads, 8 KV heads
    1.5b  Qwen2.5-1.5B:   28 layers, hidden 1536, ffn 8960, 12 heads, 2 KV heads (qwen2: q/k/v biases)
    3b    Llama-3.2-3B:   28 layers, hidden 3072, ffn 8192, 24 heads, 8 KV heads

Every tensor is drawn from its own seeded generator (seed, shape name, tensor name), so the files are
the same bytes on every machine. The F16 GGUF is written with the `gguf` package, one tensor at a time
(memory stays at one tensor), then quantized by llama.cpp's own quantizer through llama-cpp-python
(`llama_model_quantize`) to each requested type: Q4_K_M, Q6_K, Q8_0 by default (Q5_K_M when this
build's quantizer and ossa both take it: pass --types). The bf16 HF folder (--hf) holds the same
values in Hugging Face's layout (llama.cpp's Q/K row interleave undone) for vLLM and transformers.

    python scripts/make_bench_models.py --shape 1b [--types Q4_K_M,Q8_0] [--hf] [--layers N]

Output: $OSSA_HOME/bench (default ~/.cache/ossa/bench), names like `llama-1b-Q4_K_M.gguf`,
`llama-1b-bf16-hf/`. A type `random-T` (T one of RANDOM_D_AT's: the i-quants that llama.cpp quantizes
only with an importance matrix) writes random T blocks directly, no llama.cpp needed. Existing outputs
are kept. `--layers N` makes a shallower model of the same shape (its file names say `-LN`).
`--perfgate` writes only the perf gate's model: 2 layers of the shape
(`llama-1b-L2-random-Q4_K_M.gguf`), random Q4_K / Q6_K blocks laid out as Q4_K_M, no llama.cpp needed
(the gate runs in CI, where llama-cpp-python is not installed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Shape:
    name: str
    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    rope_base: float
    context: int


SHAPES = {
    "1b": Shape("llama-1b", "llama", 16, 2048, 8192, 32, 8, 500000.0, 131072),
    "1.5b": Shape("qwen2-1.5b", "qwen2", 28, 1536, 8960, 12, 2, 1000000.0, 32768),
    "3b": Shape("llama-3b", "llama", 28, 3072, 8192, 24, 8, 500000.0, 131072),
}
DEFAULT_TYPES = ("Q4_K_M", "Q6_K", "Q8_0")
SEED = 20240


def bench_dir() -> Path:
    home = Path(os.environ.get("OSSA_HOME", Path.home() / ".cache" / "ossa"))
    d = home / "bench"
    d.mkdir(parents=True, exist_ok=True)
    return d


def default_model() -> str:
    """The default model's GGUF (its tokenizer metadata is copied); resolved as ossa resolves it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from ossa import models

    return models.resolve(None)


def stem(shape: Shape, layers: int) -> str:
    return shape.name + ("" if layers == shape.n_layer else f"-L{layers}")


def tensor_specs(s: Shape, layers: int) -> list[tuple[str, tuple[int, ...], float]]:
    """(GGUF name, numpy shape [rows, cols], standard deviation); 1-D tensors are the norms (and biases)."""
    hd = s.n_embd // s.n_head
    q, kv = s.n_head * hd, s.n_head_kv * hd
    specs: list[tuple[str, tuple[int, ...], float]] = [("token_embd.weight", (49152, s.n_embd), 0.02)]
    for i in range(layers):
        b = f"blk.{i}."
        specs += [
            (b + "attn_norm.weight", (s.n_embd,), 0.0),
            (b + "attn_q.weight", (q, s.n_embd), 0.02),
            (b + "attn_k.weight", (kv, s.n_embd), 0.02),
            (b + "attn_v.weight", (kv, s.n_embd), 0.02),
            (b + "attn_output.weight", (s.n_embd, q), 0.02),
            (b + "ffn_norm.weight", (s.n_embd,), 0.0),
            (b + "ffn_gate.weight", (s.n_ff, s.n_embd), 0.02),
            (b + "ffn_up.weight", (s.n_ff, s.n_embd), 0.02),
            (b + "ffn_down.weight", (s.n_embd, s.n_ff), 0.02),
        ]
        if s.arch == "qwen2":
            specs += [(b + "attn_q.bias", (q,), 0.02), (b + "attn_k.bias", (kv,), 0.02),
                      (b + "attn_v.bias", (kv,), 0.02)]  # fmt: skip
    specs.append(("output_norm.weight", (s.n_embd,), 0.0))
    return specs


def values(s: Shape, name: str, shape: tuple[int, ...], std: float) -> np.ndarray:
    """The tensor in Hugging Face's layout, float32: norms are 1 + small noise, the rest N(0, std)."""
    digest = hashlib.sha256(f"{SEED}/{s.name}/{name}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    if std == 0.0:
        return (1.0 + 0.05 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    return (std * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)


def permute_qk(m: np.ndarray, n_head: int) -> np.ndarray:
    """HF's two halves per head -> llama.cpp's interleaved (x0, x1) row pairs (what convert_hf does)."""
    rows, cols = m.shape
    return m.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def gguf_values(s: Shape, name: str, shape: tuple[int, ...], std: float) -> np.ndarray:
    v = values(s, name, shape, std)
    if s.arch == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
        v = permute_qk(v, s.n_head if "attn_q" in name else s.n_head_kv)
    return v


def add_metadata(w: Any, s: Shape, layers: int, name: str, file_type: int) -> None:
    """The architecture keys of the shape and the default model's tokenizer keys."""
    import gguf

    a = s.arch + "."
    w.add_string("general.name", name)
    w.add_uint32("general.file_type", file_type)
    keys = {
        "block_count": layers, "context_length": s.context, "embedding_length": s.n_embd,
        "feed_forward_length": s.n_ff, "attention.head_count": s.n_head,
        "attention.head_count_kv": s.n_head_kv, "rope.dimension_count": s.n_embd // s.n_head,
        "vocab_size": 49152,
    }  # fmt: skip
    for key, value in keys.items():
        w.add_uint32(a + key, value)
    w.add_float32(a + "rope.freq_base", s.rope_base)
    w.add_float32(a + "attention.layer_norm_rms_epsilon", 1e-5)
    copy_gguf_metadata(gguf.GGUFReader(default_model()), w, lambda key: key.startswith("tokenizer."))


def write_gguf(writer: Any, tmp: Path, dst: Path) -> str:
    """Writes out a gguf.GGUFWriter opened on ``tmp``, then renames the finished file to ``dst`` (an
    interrupted run leaves no half-written ``dst`` behind); returns ``str(dst)``."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.rename(dst)
    return str(dst)


def copy_gguf_metadata(reader: Any, writer: Any, keep: Callable[[str], bool]) -> None:
    """Copies the metadata keys of a gguf.GGUFReader that ``keep`` accepts into a gguf.GGUFWriter, with
    their value types (benchmarks/forward.py, forward_quants.py and moe.py write files this way too)."""
    import gguf

    for key, field in reader.fields.items():
        if keep(key):
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(key, field.contents(), vtype, sub_type=sub)


def write_f16(s: Shape, layers: int, out: Path) -> None:
    import gguf

    tmp = out.with_name(out.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), s.arch)
    add_metadata(w, s, layers, f"ossa bench {stem(s, layers)} (random weights)", 1)  # mostly F16
    specs = tensor_specs(s, layers)
    for name, shape, _ in specs:
        dt = np.float32 if len(shape) == 1 else np.float16
        w.add_tensor_info(name, shape, np.dtype(dt), int(np.prod(shape)) * np.dtype(dt).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape, std in specs:
        v = gguf_values(s, name, shape, std)
        w.write_tensor_data(v if v.ndim == 1 else v.astype(np.float16))
    w.close()
    tmp.rename(out)


def quantize(src: Path, dst: Path, type_name: str) -> None:
    import llama_cpp

    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{type_name}", None)
    if ftype is None:
        raise SystemExit(f"llama-cpp-python has no LLAMA_FTYPE_MOSTLY_{type_name}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = os.cpu_count() or 2
    tmp = dst.with_name(dst.name + ".tmp")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), params)
    if rc != 0:
        raise SystemExit(f"llama_model_quantize {type_name} failed ({rc})")
    tmp.rename(dst)


def write_hf(s: Shape, layers: int, out: Path) -> None:
    """bf16 safetensors, one shard per layer (memory stays at one layer), config and tokenizer."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoTokenizer

    hf_name = {
        "attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
        "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
        "attn_output.weight": "self_attn.o_proj.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
        "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
        "ffn_down.weight": "mlp.down_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
        "attn_k.bias": "self_attn.k_proj.bias", "attn_v.bias": "self_attn.v_proj.bias",
    }  # fmt: skip
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shards: dict[str, dict[str, torch.Tensor]] = {}
    for name, shape, std in tensor_specs(s, layers):
        if name.startswith("blk."):
            _, i, rest = name.split(".", 2)
            key, shard = f"model.layers.{i}.{hf_name[rest]}", f"layer-{int(i):03d}"
        else:
            top = {
                "token_embd.weight": "model.embed_tokens.weight",
                "output_norm.weight": "model.norm.weight",
            }
            key = top[name]
            shard = "top"
        shards.setdefault(shard, {})[key] = torch.from_numpy(values(s, name, shape, std)).to(torch.bfloat16)
    weight_map = {}
    n = len(shards)
    for k, (_, state) in enumerate(sorted(shards.items())):
        fname = f"model-{k + 1:05d}-of-{n:05d}.safetensors"
        save_file(state, str(tmp / fname), metadata={"format": "pt"})
        weight_map.update({key: fname for key in state})
    (tmp / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    src = Path(default_model())
    cfg = AutoConfig.for_model(
        s.arch, vocab_size=49152, hidden_size=s.n_embd, intermediate_size=s.n_ff, num_hidden_layers=layers,
        num_attention_heads=s.n_head, num_key_value_heads=s.n_head_kv, max_position_embeddings=s.context,
        rms_norm_eps=1e-5, rope_theta=s.rope_base, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
        torch_dtype="bfloat16",
    )  # fmt: skip
    cfg.save_pretrained(str(tmp))
    AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name).save_pretrained(str(tmp))
    tmp.rename(out)


def write_random_q4_k_m(s: Shape, layers: int, out: Path) -> None:
    """The shape's tensors as random Q4_K / Q6_K blocks in a Q4_K_M-like layout (Q6_K: attn_v,
    ffn_down and the tied token embedding / output matrix; Q4_K: the other matrices), without
    llama.cpp: every quant bit random, f16 scales drawn small enough for a finite forward. The perf
    gate's model (tools/perfgate): deterministic, numpy only, seconds to write."""
    import gguf
    from gguf import GGMLQuantizationType as QT

    tmp = out.with_name(out.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), s.arch)
    add_metadata(w, s, layers, f"ossa perfgate {stem(s, layers)} (random Q4_K_M blocks)", 15)
    for name, shape, std in tensor_specs(s, layers):
        if len(shape) == 1:
            w.add_tensor(name, values(s, name, shape, std))
            continue
        digest = hashlib.sha256(f"{SEED}/randq/{s.name}/{name}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        rows, cols = shape
        q6 = name.endswith(("attn_v.weight", "ffn_down.weight", "token_embd.weight"))
        qt = QT.Q6_K if q6 else QT.Q4_K
        nb, block_bytes = cols // 256, gguf.GGML_QUANT_SIZES[qt][1]
        raw = rng.integers(0, 256, size=(rows, nb, block_bytes), dtype=np.uint8)
        if q6:  # d: the last 2 bytes
            raw[:, :, 208:210] = rng.uniform(1e-5, 1e-4, (rows, nb, 1)).astype(np.float16).view(np.uint8)
        else:  # d, dmin: bytes 0..3
            raw[:, :, 0:4] = rng.uniform(1e-4, 1e-3, (rows, nb, 2)).astype(np.float16).view(np.uint8)
        raw = raw.reshape(rows, nb * block_bytes)
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qt)
    write_gguf(w, tmp, out)


# Random blocks of a type (``random-TYPE`` in --types): where the f16 scale d sits in each block (IQ1_M
# spreads it over the top nibbles of its four scale words, bytes 48..55).
RANDOM_D_AT = {"IQ2_XXS": 0, "IQ2_XS": 0, "IQ2_S": 0, "IQ3_XXS": 0, "IQ3_S": 0, "IQ1_S": 0, "IQ1_M": -1,
               "IQ4_XS": 0, "Q4_K": 0}  # fmt: skip


def write_random_type(s: Shape, layers: int, out: Path, type_name: str) -> None:
    """The shape's layer matrices as random ``type_name`` blocks (every bit random but the f16 scale d,
    drawn small), the tied token embedding / output matrix as random Q4_K: a speed benchmark's model of
    the types llama.cpp's quantizer writes only with an importance matrix (IQ2_*, IQ1_*), the same
    bytes on every machine. The weights are noise; the speed of a forward pass does not depend on them."""
    import gguf
    from gguf import GGMLQuantizationType as QT

    tmp = out.with_name(out.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), s.arch)
    add_metadata(w, s, layers, f"ossa bench {stem(s, layers)} (random {type_name} blocks)", 0)
    for name, shape, std in tensor_specs(s, layers):
        if len(shape) == 1:
            w.add_tensor(name, values(s, name, shape, std))
            continue
        digest = hashlib.sha256(f"{SEED}/rand-{type_name}/{s.name}/{name}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        rows, cols = shape
        t = "Q4_K" if name == "token_embd.weight" else type_name
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[QT[t]]
        nb = cols // block_elems
        raw = rng.integers(0, 256, size=(rows, nb, block_bytes), dtype=np.uint8)
        d = rng.uniform(1e-5, 1e-4, (rows, nb)).astype(np.float16)
        if RANDOM_D_AT[t] >= 0:
            at = RANDOM_D_AT[t]
            raw[:, :, at : at + 2] = d.view(np.uint8).reshape(rows, nb, 2)
            if t == "Q4_K":  # dmin
                raw[:, :, 2:4] = d.view(np.uint8).reshape(rows, nb, 2)
        else:  # IQ1_M: d's bits 4k..4k+3 in the top nibble of scale word k
            words = raw[:, :, 48:56].copy().view("<u2").astype(np.uint32) & 0x0FFF
            bits = d.view(np.uint16).astype(np.uint32)[..., None] >> (4 * np.arange(4, dtype=np.uint32))
            raw[:, :, 48:56] = (words | ((bits & 0xF) << 12)).astype("<u2").view(np.uint8)
        raw = raw.reshape(rows, nb * block_bytes)
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=QT[t])
    write_gguf(w, tmp, out)


def perfgate_model(shape: str = "1b", layers: int = 2) -> str:
    """The perf gate's K-quant model: `layers` layers of the shape, random Q4_K_M-layout blocks."""
    s = SHAPES[shape]
    out = bench_dir() / f"{stem(s, layers)}-random-Q4_K_M.gguf"
    if not out.exists():
        write_random_q4_k_m(s, layers, out)
    return str(out)


def make(shape: str, types: tuple[str, ...], hf: bool, layers: int | None = None) -> dict[str, str]:
    """Makes what is missing; returns {type or 'hf': path}."""
    s = SHAPES[shape]
    n = layers or s.n_layer
    d = bench_dir()
    base = stem(s, n)
    f16 = d / f"{base}-F16.gguf"
    paths = {}
    for t in types:
        p = d / f"{base}-{t}.gguf"
        if not p.exists() and t.startswith("random-"):
            print(f"writing {p}", flush=True)
            write_random_type(s, n, p, t.removeprefix("random-"))
        elif not p.exists():
            if not f16.exists():
                print(f"writing {f16}", flush=True)
                write_f16(s, n, f16)
            if t != "F16":
                print(f"quantizing {p.name}", flush=True)
                quantize(f16, p, t)
        paths[t] = str(p)
    if hf:
        p = d / f"{base}-bf16-hf"
        if not (p / "config.json").exists():
            print(f"writing {p}", flush=True)
            write_hf(s, n, p)
        paths["hf"] = str(p)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    ap.add_argument("--types", default=",".join(DEFAULT_TYPES), help="comma list of llama.cpp ftype names")
    ap.add_argument("--hf", action="store_true", help="also the bf16 Hugging Face folder (for vLLM)")
    ap.add_argument("--layers", type=int, default=None, help="fewer layers than the shape's (same widths)")
    ap.add_argument("--keep-f16", action="store_true", help="keep the F16 GGUF the quantized files came from")
    ap.add_argument("--perfgate", action="store_true", help="only the perf gate's random Q4_K_M model")
    args = ap.parse_args()
    if args.perfgate:
        print(perfgate_model(args.shape, args.layers or 2))
        return
    types = tuple(t.strip() for t in args.types.split(",") if t.strip())
    paths = make(args.shape, types, args.hf, args.layers)
    s = SHAPES[args.shape]
    f16 = bench_dir() / f"{stem(s, args.layers or s.n_layer)}-F16.gguf"
    if f16.exists() and not args.keep_f16 and "F16" not in types:
        f16.unlink()
    for k, p in paths.items():
        print(f"{k}: {p}")


if __name__ == "__main__":
    main()
