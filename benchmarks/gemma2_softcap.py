"""What Gemma 2's attention soft-capping costs: two random-weight Q8_0 GGUF files with Gemma 2 2B's
layer shapes (hidden 2304, 8 heads / 4 KV heads of 256, ff 9216, window 4096; 4 layers and a 4096-token
vocabulary, so that attention's share of a step is a real layer's), one with
``gemma2.attn_logit_softcapping = 50`` and one without, written to $OSSA_HOME/bench on first use.
Prints prefill tok/s (512 and 2048 tokens, in 512-token chunks, best of 2) and decode ms a step at a
2048-token context, alternating the files twice.

    PYTHONPATH=src python benchmarks/gemma2_softcap.py [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from arch_decode import gemma_file  # noqa: E402


def gemma2_file(out: Path, softcap: bool, n_layer: int = 4) -> str:
    """Gemma 2 2B's layer shapes (hidden 2304, 8 heads / 4 KV heads of 256, ff 9216, window 4096), a
    4096-token vocabulary; attention soft-capping at 50 or none, final soft-capping at 30."""
    caps = {"gemma2.attn_logit_softcapping": 50.0} if softcap else {}
    caps["gemma2.final_logit_softcapping"] = 30.0
    return gemma_file(out, "gemma2", (2304, n_layer, 8, 4, 256, 9216, 4096), 8192, 1e4, 4096, caps)


def measure(path: str) -> str:
    from ossa._native import core

    m = core.load_model(path)
    vocab = m.config["n_vocab"]
    out = []
    block, chunk = 16, 512
    for n in (512, 2048):
        n_blocks = (n + 64) // block + 2
        table = list(range(n_blocks))
        ids = np.random.default_rng(0).integers(0, vocab, n).tolist()
        best = float("inf")
        for _ in range(2):
            r = core.ModelRunner(m, n_blocks, block, chunk)
            t0 = time.perf_counter()
            for s in range(0, n, chunk):
                k = min(chunk, n - s)
                pos = list(range(s, s + k))
                r.forward(ids[s : s + k], pos, pos, [0, k], [s + k], [0, n_blocks], table, [k - 1])
            best = min(best, time.perf_counter() - t0)
        out.append(f"prefill {n}: {n / best:6.1f} tok/s")
        if n == 2048:
            t0 = time.perf_counter()
            for s in range(32):
                p = n + s
                r.forward([1], [p], [p], [0, 1], [p + 1], [0, n_blocks], table, [0])
            out.append(f"decode at {n}: {(time.perf_counter() - t0) / 32 * 1e3:5.2f} ms/step")
    return "  ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from ossa._native import core

    core.set_num_threads(args.threads)
    bench = Path(os.environ.get("OSSA_HOME", Path.home() / ".cache" / "ossa")) / "bench"
    bench.mkdir(parents=True, exist_ok=True)
    files = {
        "capped  ": gemma2_file(bench / "gemma2-2b-4layers-softcap-Q8_0.gguf", True),
        "uncapped": gemma2_file(bench / "gemma2-2b-4layers-Q8_0.gguf", False),
    }
    print(f"threads {args.threads}, load {os.getloadavg()[0]:.2f}")
    for _ in range(2):
        for name, path in files.items():
            print(name, measure(path))


if __name__ == "__main__":
    main()
