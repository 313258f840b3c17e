"""The kernels of the layering benchmarks (benchmarks/layers.py, built from benchmarks/layers_ext as
their own small module): each checked against NumPy before its time means anything."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    """The module benchmarks/layers.py measures, built as it builds it (CMake, into $OSSA_HOME/bench)."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is needed to build benchmarks/layers_ext")
    spec = importlib.util.spec_from_file_location("layers_benchmark", ROOT / "benchmarks" / "layers.py")
    assert spec is not None and spec.loader is not None
    layers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layers)
    return layers.build_layers()  # type: ignore[no-any-return]


def numpy_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = (q.astype(np.float64) @ k.astype(np.float64).T) / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p @ v.astype(np.float64)) / p.sum(axis=1, keepdims=True)


def test_affine_kernels_match_numpy(bench: ModuleType) -> None:
    x = np.random.default_rng(0).standard_normal(100_003)
    for fn in (bench.affine_serial, lambda x, y: bench.affine_parallel(x, y, 2)):
        y = np.zeros_like(x)
        fn(x, y)
        assert np.array_equal(y, 2.0 * x + 1.0)
    with pytest.raises(ValueError, match="x has 100003 values but y has 3"):
        bench.affine_serial(x, np.zeros(3))
    with pytest.raises(TypeError):  # y is written in place: never a converted copy
        bench.affine_serial(x, np.zeros(x.shape, np.float32))
    assert bench.empty() is None


@pytest.mark.parametrize(("seq", "d"), [(1, 8), (37, 64), (512, 64)])
def test_attention_kernels_match_numpy(bench: ModuleType, seq: int, d: int) -> None:
    rng = np.random.default_rng(seq)
    q, k, v = (rng.standard_normal((seq, d)) for _ in range(3))
    expected = numpy_attention(q, k, v)
    assert np.max(np.abs(bench.naive_attention(q, k, v) - expected)) < 1e-12
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    for threads in (1, 2):
        out = bench.paged_attention(q32, k32, v32, threads)
        assert out.dtype == np.float32 and out.shape == (seq, d)
        assert np.max(np.abs(out - numpy_attention(q32, k32, v32))) < 1e-5


def test_attention_rejects_bad_shapes(bench: ModuleType) -> None:
    a = np.zeros((4, 8))
    with pytest.raises(ValueError, match="same shape"):
        bench.naive_attention(a, np.zeros((5, 8)), a)
    with pytest.raises(ValueError, match="empty"):
        bench.paged_attention(*(np.zeros((0, 8), np.float32) for _ in range(3)))
