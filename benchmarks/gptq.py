"""GPTQ / AWQ speed on a real shape: a Qwen3-1.7B-shaped folder with random weights laid out as GPTQ's
Int4 releases (4-bit, groups of 128, symmetric: stored as Q4_0) or AWQ's (4-bit, groups of 128, zero
points: stored as Q5_0): 28 layers, hidden 2048, 16 heads / 8 K/V heads of 128, MLP 6144, 151936 tokens,
bf16 embeddings tied to the output. Prefill of 128 / 512 tokens and decode after 128, ossa alone (llama.cpp
reads no GPTQ / AWQ folder; its Q4_0 / Q5_0 files run the same kernels: benchmarks/forward.py), with the load
time (the words are unpacked into GGUF blocks at load). Decode is also given as the bytes of weights read
per token over the measured read bandwidth.

Run: OSSA_CORE_DIR=build/dev/csrc PYTHONPATH=src python benchmarks/gptq.py [--kind gptq|awq] [--act-order]
[--threads 2] [--layers 28] (the folder, ~1.2 GB, is written once into $OSSA_HOME/bench, default
~/.cache/ossa/bench)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fp8 import bench, projection_elements, write_qwen3_folder  # noqa: E402

GROUP = 128


def projection(kind: str, act_order: bool) -> Any:
    """Random packed 4-bit words, f16 scales per group of 128 columns and row, zero points (GPTQ: all 8,
    stored as 7; AWQ: random) in the kind's layout (loader.cpp's gptq_linear has both); with
    ``act_order`` GPTQ's desc_act groups (g_idx a random order's, shared by q / k / v and gate / up)."""
    orders: dict[str, np.ndarray] = {}

    def make(name: str, rows: int, cols: int, rng: np.random.Generator) -> dict[str, Any]:
        groups = cols // GROUP
        words = rng.integers(0, 1 << 32, (cols, rows // 8) if kind == "awq" else (cols // 8, rows), np.uint32)
        if kind == "awq":
            zeros = rng.integers(0, 1 << 32, (groups, rows // 8), np.uint32)
        else:
            zeros = np.full((groups, rows // 8), 0x77777777, np.uint32)
        scales = rng.uniform(1e-3, 1e-2, (groups, rows)).astype(np.float16)
        out = {name + ".qweight": (words.view(np.int32), "I32"), name + ".scales": (scales, "F16"),
               name + ".qzeros": (zeros.view(np.int32), "I32")}  # fmt: skip
        if kind == "gptq":
            key = name.replace("k_proj", "q_proj").replace("v_proj", "q_proj").replace("up_proj", "gate_proj")
            order = orders.setdefault(key, rng.permutation(cols)) if act_order else np.arange(cols)
            out[name + ".g_idx"] = ((order // GROUP).astype(np.int32), "I32")
        return out

    return make


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=("gptq", "awq"), default="gptq")
    ap.add_argument("--act-order", action="store_true", help="GPTQ's desc_act groups (g_idx a permutation)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--decode", type=int, default=32)
    args = ap.parse_args()
    home = Path(os.environ.get("OSSA_HOME", Path.home() / ".cache" / "ossa"))
    if args.kind == "gptq":
        qc = {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": args.act_order, "sym": True,
              "checkpoint_format": "gptq"}  # fmt: skip
    else:
        qc = {"quant_method": "awq", "bits": 4, "group_size": GROUP, "zero_point": True, "version": "gemm"}
    kind = args.kind + ("-act-order" if args.act_order and args.kind == "gptq" else "")
    out = home / "bench" / f"qwen3-1.7b-{kind}-{args.layers}l"
    path = write_qwen3_folder(out, args.layers, projection(args.kind, args.act_order), qc)
    block = 18 if args.kind == "gptq" else 22  # (bytes a block of 32: Q4_0 / Q5_0)
    label = f"Qwen3-1.7B-{'GPTQ-Int4' if args.kind == 'gptq' else 'AWQ'} shape, {args.layers} layers"
    label += ", act-order" if "act-order" in kind else ""
    bench(path, label, args.threads, args.decode, projection_elements(args.layers) * block // 32)


if __name__ == "__main__":
    main()
