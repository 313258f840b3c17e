"""Per-kernel matmul speed by weight type and row count: the numbers behind kernel decisions.

Random blocks of each type (sane scales), one matrix, `core.kernel_matmul_timed` (the weight
prepared as load_model prepares it), with and without the AMX kernels. Prints, per type and row
count, GB/s of the file's weight bytes and ms per product, from the calling thread's CPU time
(`--clock cpu`, the default: robust on a shared machine, right for --threads 1) or wall time
(`--clock wall`, needed for --threads 2). `--dram` uses a matrix of ~1 GB (past the caches: the
streaming rate of decode) instead of one of a few MB (in cache: the kernel's compute ceiling).

    OSSA_CORE_DIR=build/dev/csrc PYTHONPATH=src python benchmarks/kernel_rows.py \\
        --types Q4_K,Q6_K,Q8_0,BF16 --rows 1,16,64,256 [--threads 1] [--dram] [--clock wall]

No peer runs here: this is an internal microbenchmark (benchmarks/forward.py compares engines).
"""

from __future__ import annotations

import argparse
import os

import numpy as np

# ggml type id, values per block, bytes per block
TYPES = {
    "Q4_0": (2, 32, 18),
    "Q4_1": (3, 32, 20),
    "Q8_0": (8, 32, 34),
    "Q5_0": (6, 32, 22),
    "Q5_1": (7, 32, 24),
    "Q2_K": (10, 256, 84),
    "Q3_K": (11, 256, 110),
    "Q4_K": (12, 256, 144),
    "Q5_K": (13, 256, 176),
    "Q6_K": (14, 256, 210),
    "IQ4_NL": (20, 32, 18),
    "IQ4_XS": (23, 256, 136),
    "BF16": (30, 1, 2),
}
# Byte offsets of each type's f16 fields (d, and dmin / m where it has one) where not at the start.
F16_AT = {"Q2_K": (80, 82), "Q3_K": (108,), "Q6_K": (208,), "Q8_0": (0,), "Q5_0": (0,), "IQ4_NL": (0,),
          "IQ4_XS": (0,)}  # fmt: skip


def random_weight(name: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Stored bytes [rows, row_bytes]: random quants, f16 scales small enough for finite sums."""
    _, per_block, block_bytes = TYPES[name]
    if name == "BF16":
        w = rng.standard_normal((rows, cols)).astype(np.float32)
        return (w.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(rows, -1)
    nb = cols // per_block
    raw = rng.integers(0, 256, size=(rows, nb, block_bytes), dtype=np.uint8)

    def f16(lo: float, hi: float, n: int) -> np.ndarray:
        return rng.uniform(lo, hi, (rows, nb, n)).astype(np.float16).view(np.uint8)

    if name in F16_AT:
        for at in F16_AT[name]:
            raw[:, :, at : at + 2] = f16(1e-5, 1e-4, 1) if per_block == 256 else f16(1e-3, 1e-2, 1)
    elif name in ("Q4_K", "Q5_K"):
        raw[:, :, 0:4] = f16(1e-4, 1e-3, 2)
    else:  # Q4_0 (d), Q4_1 / Q5_1 (d, m)
        raw[:, :, 0 : 2 if name == "Q4_0" else 4] = f16(1e-3, 1e-2, 1 if name == "Q4_0" else 2)
    return np.ascontiguousarray(raw.reshape(rows, -1))


def seconds_per_product(core, raw, gid, rows, cols, x, reps, amx, clock, q8=False) -> float:  # noqa: ANN001
    """Best of `reps` products (the weight is prepared once, outside the timed runs); q8: the
    activations as 8-bit blocks (a model loaded with quantized_activations)."""
    runs = core.kernel_matmul_timed(raw, gid, rows, cols, x, reps, "float32", amx, clock == "cpu", q8)
    return max(1e-9, min(runs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="Q4_K,Q6_K,Q8_0,BF16")
    ap.add_argument("--rows", default="1,16,64,256", help="activation rows per product")
    ap.add_argument("--cols", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dram", action="store_true", help="a ~1 GB matrix instead of ~5 MB")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--q8", action="store_true", help="8-bit activation blocks (quantized_activations)")
    args = ap.parse_args()
    from ossa._native import core

    core.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    # "amx" (amx=True): the repacked kernels, AMX where the CPU has it, else AVX2 int8 for
    # Q4_0/Q4_1/Q8_0/Q4_K/Q6_K.
    modes = [True, False] if core.repack_default() else [False]
    print(f"threads={args.threads} clock={args.clock} dram={args.dram} q8={args.q8} "
          f"amx available={core.amx_available()} "
          f"avx2 int8={core.i8_avx2_available()}; "
          f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")  # fmt: skip
    print(f"{'type':5} {'matrix':>13} {'rows':>5} {'kernels':>7} {'ms':>9} {'GB/s':>7}")
    for name in args.types.split(","):
        gid, per_block, block_bytes = TYPES[name]
        row_bytes = args.cols // per_block * block_bytes
        out_rows = (1 << 30) // row_bytes // 16 * 16 if args.dram else 4096
        raw = random_weight(name, out_rows, args.cols, rng)
        for n in (int(r) for r in args.rows.split(",")):
            x = rng.standard_normal((n, args.cols)).astype(np.float32)
            reps = args.reps if not args.dram else 3
            for amx in modes:
                s = seconds_per_product(
                    core, raw, gid, out_rows, args.cols, x, reps, amx, args.clock, args.q8
                )
                print(f"{name:5} {f'{out_rows}x{args.cols}':>13} {n:5d} {'amx' if amx else 'f32':>7} "
                      f"{s * 1e3:9.3f} {raw.nbytes / s / 1e9:7.1f}", flush=True)  # fmt: skip
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
