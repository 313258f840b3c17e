"""Why ossa is Python over C++, in numbers, on ossa's own extension (issue 8).

Three experiments, one table each (time per unit of work and speed-up over pure Python):

1. y = 2x + 1 over 10,000,000 float64 values: a Python list comprehension, NumPy, a C++ loop in one
   thread (layers.affine_serial) and the same loop with OpenMP on all cores.
2. The fixed cost of a crossing, per call over 2,000,000 calls (median of the repeats): an empty
   Python loop iteration, a call of an empty Python function, of an empty C++ function bound with
   nanobind (layers.empty) and of one bound with pybind11 (benchmarks/pybind_empty, built here
   into $OSSA_HOME/bench/pybind_empty on first use).
3. Single-head attention softmax(QK^T/sqrt(d))V at seq 512, d 64: pure Python loops, NumPy, a naive
   C++ triple loop (float64) and ossa's production paged-attention kernel (float32 only), each with
   its maximum absolute error against NumPy float64.

    python benchmarks/layers.py [--quick]

The kernels are benchmarks/layers_ext, a small module of their own (ossa_layers) built with CMake into
$OSSA_HOME/bench on first use; the pybind11 row needs pybind11 (pip install ".[bench]") and is skipped
with a note without it.

What it shows: (1) the interpreter costs tens of nanoseconds per element, which any compiled loop
(NumPy or C++) removes; (2) every Python/C++ crossing has a fixed cost of the order of a Python call,
so the engine crosses per request and per batch, never per token; (3) a naive C++ loop loses to NumPy's
BLAS-backed matmul: speed comes from the right kernel (blocked, vectorised), not from the language.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np

HERE = Path(__file__).resolve().parent


def median_time(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``repeats`` calls of fn, in seconds."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fmt_time(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.2f} us"
    return f"{seconds * 1e9:.1f} ns"


def print_table(title: str, rows: list[tuple[str, float, str]], unit: str, extra: str = "") -> None:
    """rows: (name, seconds, extra column); the first row is the pure-Python reference."""
    base = rows[0][1]
    print(f"\n{title}")
    header = f"{'':<34} {unit:>12} {'vs Python':>10}" + (f"  {extra}" if extra else "")
    print(header)
    print("-" * len(header))
    for name, seconds, note in rows:
        speedup = base / seconds if seconds > 0 else math.inf
        print(f"{name:<34} {fmt_time(seconds):>12} {speedup:>9.1f}x" + (f"  {note}" if extra else ""))


def experiment_affine(layers: ModuleType, n: int, repeats: int) -> None:
    x = np.random.default_rng(0).standard_normal(n)
    x_list = x.tolist()
    y = np.empty_like(x)
    expected = 2.0 * x + 1.0

    rows: list[tuple[str, float, str]] = []
    rows.append(("Python list comprehension", median_time(lambda: [2.0 * v + 1.0 for v in x_list], 1), ""))
    rows.append(("NumPy 2.0 * x + 1.0", median_time(lambda: 2.0 * x + 1.0, repeats), ""))

    def numpy_in_place() -> None:
        np.multiply(x, 2.0, out=y)
        np.add(y, 1.0, out=y)

    rows.append(("NumPy in place (out=)", median_time(numpy_in_place, repeats), ""))
    rows.append(("C++ loop, 1 thread", median_time(lambda: layers.affine_serial(x, y), repeats), ""))
    assert np.array_equal(y, expected)
    y.fill(0.0)
    threads = os.cpu_count() or 1
    rows.append(
        (
            f"C++ loop, OpenMP {threads} threads",
            median_time(lambda: layers.affine_parallel(x, y, 0), repeats),
            "",
        )
    )
    assert np.array_equal(y, expected)
    print_table(f"1. y = 2x + 1 over {n:,} float64 (median of {repeats}; Python: 1 run)", rows, "time")


def build_extension(source: Path, name: str, sources: list[Path], cmake_args: list[str]) -> ModuleType:
    """Builds the CMake project in ``source`` into $OSSA_HOME/bench/<folder> (again only when one of
    ``sources`` changed) and imports its module ``name``."""
    home = Path(os.environ.get("OSSA_HOME", Path.home() / ".cache" / "ossa"))
    build = home / "bench" / source.name
    stamp = build / "source.stamp"
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()
    built = list(build.glob(f"{name}*.so"))
    if not built or not stamp.exists() or stamp.read_text() != digest:
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir(parents=True)
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        launcher = ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []
        subprocess.run(
            ["cmake", "-S", str(source), "-B", str(build), *generator, *launcher,
             "-DCMAKE_BUILD_TYPE=Release", f"-DPython_EXECUTABLE={sys.executable}", *cmake_args],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        subprocess.run(["cmake", "--build", str(build), "-j2"], check=True, stdout=subprocess.DEVNULL)
        stamp.write_text(digest)
        built = list(build.glob(f"{name}*.so"))
    spec = importlib.util.spec_from_file_location(name, built[0])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_layers() -> ModuleType:
    """benchmarks/layers_ext: the experiments' loops and ossa's attention kernel, as module ossa_layers."""
    source = HERE / "layers_ext"
    csrc = HERE.parent / "csrc"
    sources = (
        sorted(source.glob("*")) + sorted((csrc / "kernels").glob("*")) + sorted((csrc / "util").glob("*.h"))
    )
    return build_extension(source, "ossa_layers", [p for p in sources if p.is_file()], [])


def build_pybind_empty() -> ModuleType | None:
    """benchmarks/pybind_empty built with pybind11's CMake, or None when pybind11 is not installed."""
    try:
        import pybind11
    except ImportError:
        return None
    source = HERE / "pybind_empty"
    sources = sorted(p for p in source.glob("*") if p.is_file())
    return build_extension(source, "pybind_empty", sources, [f"-Dpybind11_DIR={pybind11.get_cmake_dir()}"])


def experiment_crossing(layers: ModuleType, n_calls: int, repeats: int) -> None:
    pybind_empty = build_pybind_empty()

    def py_empty() -> None:
        pass

    nb_empty = layers.empty
    pb_empty = pybind_empty.empty if pybind_empty is not None else None
    r = range(n_calls)

    # Each body is a plain for loop, so every row pays the same loop overhead; the last column
    # subtracts it to leave the cost of the call itself.
    def loop_only() -> None:
        for _ in r:
            pass

    def loop_py() -> None:
        for _ in r:
            py_empty()

    def loop_nb() -> None:
        for _ in r:
            nb_empty()

    def loop_pb() -> None:
        assert pb_empty is not None
        for _ in r:
            pb_empty()

    loops = [("loop", loop_only), ("py", loop_py), ("nb", loop_nb)]
    if pb_empty is not None:
        loops.append(("pb", loop_pb))
    per = {name: median_time(fn, repeats) / n_calls for name, fn in loops}
    loop = per["loop"]
    rows = [
        ("empty Python function", per["py"], fmt_time(per["py"] - loop)),
        ("empty C++ function, nanobind", per["nb"], fmt_time(per["nb"] - loop)),
    ]
    if "pb" in per:
        rows.append(("empty C++ function, pybind11", per["pb"], fmt_time(per["pb"] - loop)))
    else:
        print('(pybind11 is not installed: its row is skipped; pip install ".[bench]" adds it)')
    rows.append(("empty Python loop iteration", loop, "-"))
    print_table(
        f"2. Crossing cost per call, {n_calls:,} calls (median of {repeats})",
        rows, "per call", "call alone (minus the loop)",
    )  # fmt: skip


def python_attention(q: list[list[float]], k: list[list[float]], v: list[list[float]]) -> list[list[float]]:
    """softmax(q k^T / sqrt(d)) v with lists and loops only."""
    d = len(q[0])
    scale = 1.0 / math.sqrt(d)
    out = []
    for qi in q:
        scores = [sum(a * b for a, b in zip(qi, kj, strict=True)) * scale for kj in k]
        m = max(scores)
        p = [math.exp(s - m) for s in scores]
        total = sum(p)
        out.append([sum(p[j] * v[j][c] for j in range(len(v))) / total for c in range(d)])
    return out


def numpy_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = (q @ k.T) / math.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p @ v) / p.sum(axis=1, keepdims=True)


def experiment_attention(layers: ModuleType, seq: int, d: int, repeats: int) -> None:
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((seq, d)) for _ in range(3))
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    reference = numpy_attention(q, k, v)

    def err(out: object) -> str:
        return f"{float(np.max(np.abs(np.asarray(out, dtype=np.float64) - reference))):.1e}"

    ql, kl, vl = q.tolist(), k.tolist(), v.tolist()
    t0 = time.perf_counter()
    py_out = python_attention(ql, kl, vl)
    rows = [("pure Python loops (float64)", time.perf_counter() - t0, err(py_out))]
    rows.append(("NumPy (float64)", median_time(lambda: numpy_attention(q, k, v), repeats), "0 (reference)"))
    rows.append(("NumPy (float32 inputs)", median_time(lambda: numpy_attention(q32, k32, v32), repeats),
                 err(numpy_attention(q32, k32, v32))))  # fmt: skip
    rows.append(("naive C++ triple loop (float64)",
                 median_time(lambda: layers.naive_attention(q, k, v), repeats),
                 err(layers.naive_attention(q, k, v))))  # fmt: skip
    threads = os.cpu_count() or 1
    for t in sorted({1, threads}):
        rows.append((f"ossa paged_attention (f32), {t} thr",
                     median_time(lambda t=t: layers.paged_attention(q32, k32, v32, t), repeats),
                     err(layers.paged_attention(q32, k32, v32, t))))  # fmt: skip
    print_table(
        f"3. Single-head attention, seq {seq}, d {d} (median of {repeats}; Python: 1 run)",
        rows, "time", "max |err| vs NumPy f64",
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="a tenth of the sizes (a smoke run)")
    args = parser.parse_args()
    layers = build_layers()
    scale = 10 if args.quick else 1
    python = sys.version.split()[0]
    print(f"ossa layering benchmarks; {os.cpu_count()} CPUs; numpy {np.__version__}; Python {python}")
    experiment_affine(layers, 10_000_000 // scale, args.repeats)
    experiment_crossing(layers, 2_000_000 // scale, args.repeats)
    experiment_attention(layers, 512 // (2 if args.quick else 1), 64, args.repeats)


if __name__ == "__main__":
    main()
