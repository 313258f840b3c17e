"""The matmul kernel alone: ossa vs oneDNN's bf16 and f32 GEMM (through torch), speed and error.

The weights are the default model's own (SmolLM2-135M-Instruct Q4_1, layer 0: the attention query,
the MLP gate and the MLP down projection); the activations are random rows, 1 to 2048 of them (one
decode step of one sequence up to a 16 x 128-token prefill). ossa multiplies the file's Q4_1 bytes
as the engine does (AMX where the CPU has it: activations split into bf16 hi + lo, the block's scale
and minimum applied in f32), and, as "ossa-bf", as with dtype "bfloat16" (weights and activations
rounded to bf16, one tile product per step); torch multiplies the same weights dequantized, in bf16
(vLLM-CPU's numerics: oneDNN's AMX GEMM) and in f32. Each is timed over --reps runs (best kept) on the same
number of threads, and compared with a float64 product of the dequantized weights: the error is the
largest |y - y64| over the output, relative to sum |x| |w| of that output.

    OSSA_CORE_DIR=build/lead/csrc PYTHONPATH=src python benchmarks/matmul.py [--threads 2]

This is where prefill time goes (the matmuls are ~80% of it) and why vLLM-CPU's prefill is faster:
oneDNN's bf16 GEMM does one tile product per weight block and accumulates over the whole row, where
ossa does two (hi and lo activations) and stores each block's products to scale them in f32, which
keeps quantized weights exact and the error near f32's. torch.matmul is a stand-in for vLLM's own
oneDNN calls: at some shapes (128 rows here) it picks a much slower path.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forward import kernels_label  # noqa: E402

TENSORS = ["blk.0.attn_q.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_down.weight"]


def load_weights(path: str) -> list[tuple[str, np.ndarray, int, int, int, np.ndarray]]:
    """(name, raw bytes, ggml type, rows, cols, dequantized f32 [rows, cols]) of TENSORS."""
    import gguf
    from gguf.quants import dequantize

    reader = gguf.GGUFReader(path)
    by_name = {t.name: t for t in reader.tensors}
    out = []
    for name in TENSORS:
        t = by_name[name]
        cols, rows = (int(x) for x in t.shape)
        raw = np.ascontiguousarray(t.data).reshape(-1).view(np.uint8)
        w = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(rows, cols)
        out.append((name, raw, int(t.tensor_type), rows, cols, w))
    return out


def torch_matmul(x, w, reps: int):  # type: ignore[no-untyped-def]
    """(x @ w.T, best seconds over reps runs after a warm-up run)."""
    y = x @ w.T
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        x @ w.T
        best = min(best, time.perf_counter() - t)
    return y, best


def rel_error(y: np.ndarray, x: np.ndarray, w: np.ndarray) -> float:
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    scale = np.abs(x64) @ np.abs(w64).T
    return float(np.max(np.abs(y.astype(np.float64) - x64 @ w64.T) / scale))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="GGUF file (default: the default model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="1,16,128,512,2048", help="activation rows, comma-separated")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()

    import torch

    import ossa.models
    from ossa._native import core

    path = args.model or str(ossa.models.resolve(ossa.models.DEFAULT_MODEL))
    core.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    kernel = kernels_label(core)
    print(f"matmul: {path}, {args.threads} threads; ossa's {kernel} vs torch {torch.__version__} (oneDNN)")
    print("GMAC/s (best of --reps); err: max |y - y64| / sum |x||w|")
    header = (
        f"{'weight':<22}{'shape':>11}{'rows':>6}  {'ossa':>7} {'ossa-bf':>7} {'bf16':>7} {'f32':>7}  "
        f"{'ossa/f32':>8} {'o-bf/bf16':>9}  {'err ossa':>9} {'err o-bf':>9} {'err bf16':>9} {'err f32':>9}"
    )
    print(header)
    print("-" * len(header))
    rng = np.random.default_rng(0)
    for name, raw, gtype, rows, cols, w in load_weights(path):
        wb = torch.from_numpy(w).to(torch.bfloat16)
        wf = torch.from_numpy(w)
        for m in (int(r) for r in args.rows.split(",")):
            x = rng.standard_normal((m, cols)).astype(np.float32)
            xb, xf = torch.from_numpy(x).to(torch.bfloat16), torch.from_numpy(x)
            reps = args.reps if m >= 128 else args.reps * 10
            t_ossa = min(core.kernel_matmul_timed(raw, gtype, rows, cols, x, reps + 1)[1:])
            t_obf = min(core.kernel_matmul_timed(raw, gtype, rows, cols, x, reps + 1, dtype="bfloat16")[1:])
            with torch.inference_mode():
                yb, t_bf16 = torch_matmul(xb, wb, reps)
                yf, t_f32 = torch_matmul(xf, wf, reps)
            y_bf16, y_f32 = yb.float().numpy(), yf.numpy()
            y_ossa = core.kernel_matmul(raw, gtype, rows, cols, x)
            y_obf = core.kernel_matmul(raw, gtype, rows, cols, x, dtype="bfloat16")
            macs = m * rows * cols / 1e9
            g = [macs / t for t in (t_ossa, t_obf, t_bf16, t_f32)]
            errs = [rel_error(y, x, w) for y in (y_ossa, y_obf, y_bf16, y_f32)]
            print(
                f"{name.replace('.weight', ''):<22}{f'{rows}x{cols}':>11}{m:>6}  {g[0]:>7.1f} {g[1]:>7.1f} "
                f"{g[2]:>7.1f} {g[3]:>7.1f}  {g[0] / g[3]:>7.2f}x {g[1] / g[2]:>8.2f}x  "
                f"{errs[0]:>9.1e} {errs[1]:>9.1e} {errs[2]:>9.1e} {errs[3]:>9.1e}"
            )


if __name__ == "__main__":
    main()
