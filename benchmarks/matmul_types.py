"""One matmul per GGUF type on one thread: ossa's f32 kernels against its AMX kernels, the choice
docs/quant-types.md records (which types get an AMX path, and whether it pays at one row).

The weights are random blocks of each type (tests/quant_blocks.py: every bit random, sane scales), the
activations random rows; each case is timed over --reps runs (best kept) with the weight repacked
once as the loader does. Prints GMAC/s and the ratio; one row is decode, 16+ rows prefill. Shapes:
a cached 2816 x 1024 matrix and a 4096 x 4096 one that streams from memory at one row, as a model's
weights do. Print the load with the numbers: other work on the machine moves them.

    OSSA_CORE_DIR=build/dev/csrc PYTHONPATH=src python benchmarks/matmul_types.py [--types Q3_K,Q5_K]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from quant_blocks import random_blocks  # noqa: E402

TYPES = ["Q5_0", "Q5_1", "IQ4_NL", "Q5_K", "IQ4_XS", "Q3_K", "Q2_K", "MXFP4"]
SHAPES = [(2816, 1024), (4096, 4096)]


def main() -> None:
    import gguf

    from ossa._native import core

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--rows", default="1,16,128,512")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    core.set_num_threads(1)
    print(f"load {' '.join(f'{v:.1f}' for v in os.getloadavg())}; AMX available: {core.amx_available()}")
    print("GMAC/s, best of --reps (x10 for one row): f32 kernels | AMX kernels | ratio")
    rng = np.random.default_rng(0)
    for t in args.types.split(","):
        qt = int(gguf.GGMLQuantizationType[t])
        for rows, cols in SHAPES:
            raw = np.ascontiguousarray(random_blocks(t, rows, cols, rng)).reshape(-1)
            cells = []
            for m in (int(r) for r in args.rows.split(",")):
                if rows * cols > 4096 * 1024 and m > 16:
                    continue  # the big matrix is for the streaming (decode) rows
                x = rng.standard_normal((m, cols)).astype(np.float32)
                reps = args.reps * 10 if m == 1 else args.reps
                # best of the runs of each path
                runs = [
                    core.kernel_matmul_timed(raw, qt, rows, cols, x, reps, amx=amx)[1:]
                    for amx in (False, True)
                ]
                g = [m * rows * cols / min(r) / 1e9 for r in runs]
                cells.append(f"{m:>4} rows {g[0]:6.1f} | {g[1]:6.1f} | {g[1] / g[0]:5.2f}x")
            print(f"{t:<7}{f'{rows}x{cols}':>10}  " + "   ".join(cells), flush=True)
    print(f"load {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
