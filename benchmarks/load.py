"""Model load time: ossa (C++ mmap reader + validation) vs the `gguf` package and llama.cpp.

    OSSA_CORE_DIR=build/dev/csrc PYTHONPATH=src python benchmarks/load.py [MODEL]

Prints the median of several loads of the same file (warm page cache) and the ratio to ossa.
llama.cpp is run with vocab_only=False, use_mmap=True, i.e. a full model load without inference.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable


def bench(fn: Callable[[], object], repeat: int = 7) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    from ossa import models
    from ossa._native import core

    path = models.resolve(sys.argv[1] if len(sys.argv) > 1 else None)
    rows: list[tuple[str, float]] = [
        ("ossa core.load_model", bench(lambda: core.load_model(path))),
        ("ossa core.gguf_metadata", bench(lambda: core.gguf_metadata(path))),
    ]
    try:
        import gguf

        rows.append(("gguf.GGUFReader (Python)", bench(lambda: gguf.GGUFReader(path), repeat=3)))
    except ImportError:
        pass
    try:
        import llama_cpp

        def llama() -> object:
            return llama_cpp.Llama(model_path=path, n_ctx=64, n_threads=2, verbose=False, use_mmap=True)

        rows.append(("llama.cpp Llama(...)", bench(llama, repeat=3)))
    except ImportError:
        pass
    base = rows[0][1]
    print(f"model: {path}")
    print(f"{'loader':28s} {'median ms':>10s} {'x ossa load':>12s}")
    for name, t in rows:
        print(f"{name:28s} {t * 1e3:10.2f} {t / base:12.1f}")


if __name__ == "__main__":
    main()
