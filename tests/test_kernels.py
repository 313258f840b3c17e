"""Matmul kernels per weight type against the gguf package's dequantization (a real oracle), and
their batch invariance: a row's result is bitwise the same alone, inside any tile, with 1 or 2 threads.

Every test runs both compute paths of a native build: the f32 kernels and, where the CPU has AMX,
the AMX kernels (Q4_0/Q4_1/Q8_0/BF16 and Q5_0/Q5_1/IQ4_NL/Q5_K/IQ4_XS repacked for bf16 tiles,
Q4_K/Q6_K/Q2_K/Q3_K for int8 tiles and VNNI; F16/F32 stay on the f32 kernels), or without AMX the
int8 kernels: with VNNI Q4_K/Q6_K/Q5_0/Q5_1/IQ4_NL/Q5_K/IQ4_XS/MXFP4/Q2_K/Q3_K on VPDPBUSD and Q8_0
on AVX2, with AVX2 only every quantized type (F32/F16/BF16 stay on the f32 kernels)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize, quantize
from quant_blocks import IQ23_TYPES, NEW_TYPES, random_blocks

from ossa._native import core

QT = gguf.GGMLQuantizationType
QUANTIZED = ["Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"]
# Q5_0/Q5_1/Q5_K/Q3_K/Q2_K/IQ4_NL/IQ4_XS: no matmul_q8.cpp kernel; 8-bit activations only where the
# build repacks them for the int8 kernels (core.kernel_takes_q8).
MORE = list(NEW_TYPES) + list(IQ23_TYPES)
# Types with a matmul_q8.cpp-style kernel for 8-bit activations in every build (the i-quants below 4
# bits: matmul_iq23.cpp's q8_dot_iq23).
Q8_TYPES = QUANTIZED + list(IQ23_TYPES)
FLOATS = ["F32", "F16", "BF16"]
MODES = ["f32"] + (
    ["amx"] if core.repack_default() else []
)  # "amx": the repacked kernels (AMX, or AVX2 int8)
# AMX splits activations into bf16 hi + lo: 16 of 24 bits kept, so each product is off by at most
# ~2^-16 of |x| |w| (measured max ~1.5e-5; f32 kernels ~1e-7).
TOLERANCE = {"f32": 1e-6, "amx": 4e-5}
AMX_TYPES = {"Q4_0", "Q4_1", "Q4_K", "Q6_K", "Q8_0", "BF16"}
AMX_TYPES |= {"Q5_0", "Q5_1", "IQ4_NL", "Q5_K", "IQ4_XS"}  # matmul_amx_ext.cpp
AMX_TYPES |= {"Q2_K", "Q3_K"}  # matmul_amx_q23k.cpp (int8 pieces, as Q4_K)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> object:
    return request.param


def make_weight(type_name: str, rows: int, cols: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stored bytes [rows, row_bytes] of a random weight, and its float32 dequantization."""
    rng = np.random.default_rng(seed)
    t = QT[type_name]
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    if type_name == "F32":
        raw = w.view(np.uint8)
    elif type_name == "F16":
        raw = w.astype(np.float16).view(np.uint8)
    elif type_name in ("Q4_K", "Q6_K"):
        # gguf-py cannot quantize K-quants; random blocks with sane f16 scales exercise every bit.
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[t]
        nb = cols // block_elems
        raw = rng.integers(0, 256, size=(rows, nb, block_bytes), dtype=np.uint8)
        scale = (rng.uniform(0.001, 0.02, size=(rows, nb)).astype(np.float16)).view(np.uint8)
        if type_name == "Q4_K":  # d at bytes 0..1, dmin at 2..3
            raw[:, :, 0:2] = scale.reshape(rows, nb, 2)
            raw[:, :, 2:4] = (scale.view(np.float16) / 2).view(np.uint8).reshape(rows, nb, 2)
        else:  # d is the last two bytes
            raw[:, :, 208:210] = scale.reshape(rows, nb, 2)
        raw = raw.reshape(rows, nb * block_bytes)
    elif type_name in MORE:
        raw = random_blocks(type_name, rows, cols, rng)
    else:
        raw = quantize(w, t)
    raw = np.ascontiguousarray(raw).reshape(rows, -1)
    return raw, dequantize(raw, t).astype(np.float32).reshape(rows, cols)


def run(
    raw: np.ndarray, type_name: str, rows: int, cols: int, x: np.ndarray, q8: bool = False, mode: str = "f32"
) -> np.ndarray:
    """y = x @ W^T; q8 selects the 8-bit activation path for quantized weights, mode the kernels
    (the weight repacked for AMX or not, as a model's load option decides)."""
    return core.kernel_matmul(
        raw.reshape(-1), int(QT[type_name]), rows, cols, np.ascontiguousarray(x), q8, amx=mode == "amx"
    )


@pytest.mark.parametrize("type_name", QUANTIZED + FLOATS + MORE)
def test_matmul_matches_dequantized_reference(type_name: str, mode: str) -> None:
    rows, cols = 37, 512
    raw, w = make_weight(type_name, rows, cols, seed=1)
    x = np.random.default_rng(2).standard_normal((6, cols)).astype(np.float32)
    y = run(raw, type_name, rows, cols, x, mode=mode)
    # f32 activations (the default): a float32 product with the dequantized weights.
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    scale = np.abs(x).astype(np.float64) @ np.abs(w.T).astype(np.float64)
    assert np.max(np.abs(y - ref) / scale) < TOLERANCE[mode if type_name in AMX_TYPES else "f32"]
    takes_q8 = core.kernel_takes_q8(int(QT[type_name]), rows, cols, amx=mode == "amx")
    assert takes_q8 == (type_name in Q8_TYPES) or mode == "amx"
    if not takes_q8 and type_name not in FLOATS:  # q8=True changes nothing
        np.testing.assert_array_equal(run(raw, type_name, rows, cols, x, q8=True, mode=mode), y)
    if takes_q8:
        y = run(raw, type_name, rows, cols, x, q8=True, mode=mode)
        # 8-bit activations: exact up to f32 rounding against the values the kernel multiplies...
        qs, d = core.kernel_quantize_q8(x)
        xq = (qs.reshape(6, -1, 32) * d[:, :, None]).reshape(6, cols)
        ref = xq.astype(np.float64) @ w.T.astype(np.float64)
        scale = np.abs(xq).astype(np.float64) @ np.abs(w.T).astype(np.float64)
        assert np.max(np.abs(y - ref) / scale) < 1e-6
        # ...and within the activation quantization error of the float product.
        full = x.astype(np.float64) @ w.T.astype(np.float64)
        assert np.max(np.abs(y - full) / scale) < 1e-2


@pytest.mark.parametrize("type_name", QUANTIZED + MORE)
def test_f32_kernels_decode_weights_exactly(type_name: str) -> None:
    # Multiplying by the identity reads every weight out through the kernel's own decoding: each
    # output is one weight times 1 plus products with 0, so it equals the dequantized weight exactly.
    rows, cols = 21, 512
    raw, w = make_weight(type_name, rows, cols, seed=16)
    for n in (1, 5, 8, cols):  # every tile shape
        eye = np.eye(cols, dtype=np.float32)[:n]
        np.testing.assert_array_equal(run(raw, type_name, rows, cols, eye, mode="f32"), w.T[:n])


# Q8_0 joins the int8 kernels only where there is no AMX (on AMX: the bf16 tiles); Q2_K / Q3_K
# wherever there is VNNI (AMX or not); Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL / Q5_K / IQ4_XS / MXFP4 with
# VNNI and no AMX (AMX machines keep them on the bf16 tiles); Q5_0 / Q5_1 / Q5_K / IQ4_NL / IQ4_XS / Q2_K /
# Q3_K / Q4_0 / Q4_1 on AVX2 without VNNI.
VNNI_ONLY = core.i8_vnni_available() and not core.amx_available()
INT8_TYPES = (
    ["Q4_K", "Q6_K"]
    + (["Q8_0"] if core.i8_avx2_available() else [])
    + (["Q2_K", "Q3_K"] if core.i8_vnni_available() else [])
    + (["Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q5_K", "IQ4_XS", "MXFP4"] if VNNI_ONLY else [])
    + (
        ["Q5_0", "Q5_1", "Q5_K", "IQ4_NL", "IQ4_XS", "Q2_K", "Q3_K", "Q4_0", "Q4_1"]
        if core.i8_avx2_available() and not core.i8_vnni_available()
        else []
    )
)
# Where a block's weights with every quant 0 sit, for the types with minimums: (block bytes, first
# quant byte).
MIN_TYPES = {"Q4_K": (144, 16), "Q5_K": (176, 16), "Q4_1": (20, 4), "Q5_1": (24, 4)}
BLOCK32_TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "MXFP4")


@pytest.mark.skipif(not core.repack_default(), reason="no AMX or AVX2 int8 kernels, or OSSA_AMX=0")
@pytest.mark.parametrize("type_name", INT8_TYPES)
@pytest.mark.parametrize("cols", [1024, 1056])
def test_int8_kernels_multiply_the_twins_split(type_name: str, cols: int) -> None:
    # Q4_K and Q6_K on the repacked kernels (AMX-INT8 / VNNI, or AVX2 where there is no AMX),
    # Q8_0 without AMX, Q2_K / Q3_K (pieces per 64 values) and, without AMX, Q4_0 / Q4_1 / Q5_0 /
    # Q5_1 / IQ4_NL / Q5_K / IQ4_XS on VNNI (Q5_0 / Q5_1 / Q5_K / IQ4_NL / IQ4_XS on AVX2 without
    # VNNI) multiply the activations' int8 pieces (reference.model.split_int8) exactly, in int32,
    # then scale in f32:
    # within f32 rounding of the product with the twin's split values, for a decode row, every tail
    # of the few-row kernels and a prefill batch, on activations whose blocks mix large and small
    # magnitudes. The minimums (Q4_K, Q5_K, Q4_1, Q5_1, Q2_K) multiply the sums of the split
    # activations too, so the product is the twin's split_int8(x) @ w.T (with the sums of the
    # unsplit values it is ~4e-6 off here). Q8_0's quants take every int8 value, -128 included;
    # IQ4's levels run from -127 to 113. Q3_K's kernels multiply v = sc u (u = q3 + 4) and subtract
    # the minimum 4 sc per group (-3 sc for sc < 0) as a second f32 term: both terms are up to ~2x
    # the weights' size, so their f32 roundings are too (measured 3.9e-6 here). (The f32 kernels are
    # 2e-6 to 2e-4 off the split product here, measured: the bounds tell the two apart.) 1056
    # columns: an odd number of 32-column blocks (a repacked Q8_0 group then starts 32 bytes into a
    # cache line).
    from ossa.reference.model import split_int8

    if cols % 256 != 0 and type_name not in BLOCK32_TYPES:
        pytest.skip("super-blocks of 256 columns")
    # (Q2_K / Q3_K: per 64 values with VNNI, matmul_amx_q23k.cpp; per 32 on AVX2, as Q4_K's)
    block = 64 if type_name in ("Q2_K", "Q3_K") and core.i8_vnni_available() else 32
    bound = 1e-5 if type_name == "Q3_K" else 1e-6
    rows = 40
    raw, w = make_weight(type_name, rows, cols, seed=21)
    if type_name == "Q8_0":  # d (2 bytes) then 32 int8 quants per block: random bytes, all of them
        blocks = raw.reshape(rows, -1, 34).copy()
        blocks[:, :, 2:] = np.random.default_rng(23).integers(0, 256, blocks[:, :, 2:].shape, dtype=np.uint8)
        blocks[0, 0, 2:] = 0x80  # a block of -128 only
        raw = blocks.reshape(rows, -1)
        w = dequantize(raw, QT.Q8_0).astype(np.float32).reshape(rows, cols)
    w = w.astype(np.float64)
    mins = np.zeros_like(w)
    # The weights with every quant 0 are the minimums: -dmin m (Q4_K, Q5_K), m (Q4_1, Q5_1).
    if type_name in MIN_TYPES:
        block_bytes, quants_at = MIN_TYPES[type_name]
        zq = raw.reshape(rows, -1, block_bytes).copy()
        zq[:, :, quants_at:] = 0
        mins = dequantize(zq.reshape(rows, -1), QT[type_name]).astype(np.float64).reshape(rows, cols)
    rng = np.random.default_rng(22)
    x = (rng.standard_normal((40, cols)) * np.exp(2 * rng.standard_normal((40, cols)))).astype(np.float32)
    x[3, :32] = 0.0  # an all-zero block
    xs = split_int8(x, block)
    ref = xs @ w.T
    scale = np.abs(xs) @ (np.abs(w - mins) + np.abs(mins)).T
    full = run(raw, type_name, rows, cols, x, mode="amx")
    assert np.max(np.abs(full - ref) / scale) < bound
    for n in (1, 2, 3, 4, 5, 7, 8, 9):  # alone and in every few-row tile: bitwise the batch's rows
        np.testing.assert_array_equal(run(raw, type_name, rows, cols, x[:n], mode="amx"), full[:n])
    # The split itself is within 1 / (127 * 4096) (~1.9e-6) of each block's largest value, plus
    # float32 rounding.
    blocks = x.reshape(40, -1, block).astype(np.float64)
    err = np.abs(xs.reshape(blocks.shape) - blocks).max(axis=-1)
    assert np.all(err <= np.abs(blocks).max(axis=-1) * 2e-6)


@pytest.mark.parametrize("mode_name", MODES)
def test_mxfp4_scales_over_the_whole_exponent_range(mode_name: str) -> None:
    # MXFP4's E8M0 byte e scales a block by 2^(e - 127) (held as twice the E2M1 value times
    # 2^(e - 128)): the kernels build that float from e's bits, subnormal for e < 2. Activations of
    # integers with a +-127 in every block split exactly (a0 = x, d = 1), so every product and sum is
    # exact in f32 on both the f32 tiles and the int8 loop: the output equals the float64 product
    # bit for bit, for exponents from the subnormal scales to 2^73.
    rows, cols = 18, 64
    rng = np.random.default_rng(41)
    raw = rng.integers(0, 256, size=(rows, cols // 32, 17), dtype=np.uint8)
    exps = [0, 1, 2, 3, 4, 64, 126, 127, 128, 129, 200]
    raw[:, :, 0] = np.array([exps[n % len(exps)] for n in range(rows)], dtype=np.uint8)[:, None]
    raw = raw.reshape(rows, -1)
    w = dequantize(raw, QT.MXFP4).astype(np.float64).reshape(rows, cols)
    x = rng.integers(-127, 128, size=(5, cols)).astype(np.float32)
    x[:, ::32] = 127.0
    expect = (x.astype(np.float64) @ w.T).astype(np.float32)
    assert np.any((w != 0) & (np.abs(w) < np.finfo(np.float32).tiny))  # subnormal weights
    np.testing.assert_array_equal(run(raw, "MXFP4", rows, cols, x, mode=mode_name), expect)


@pytest.mark.skipif(
    not (core.repack_default() and core.i8_avx2_available() and not core.i8_vnni_available()),
    reason="AVX2 without VNNI only (VNNI and AMX builds have one Q4_0 / Q4_1 kernel for both modes)",
)
@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1"])
def test_avx2_q4_0_and_q4_1_take_a_kernel_per_activation_mode(type_name: str) -> None:
    # AVX2 without VNNI repacks Q4_0 / Q4_1 for the int16 kernel (the exact three pieces as two int16
    # ones, VPMADDWD) in an exact load and for the VPMADDUBSW one (one piece) in a load with 8-bit
    # activations. Exact: the twin's split product (test_int8_kernels_multiply_the_twins_split),
    # not the f32 kernels' bits. 8-bit: the same rounded inputs as matmul_q8.cpp's dot products,
    # summed in another order (within f32 rounding of each other, not bitwise). Both bitwise batch
    # invariant over the few-row tiles.
    from ossa.reference.model import split_int8

    rows, cols = 48, 1024
    raw, w = make_weight(type_name, rows, cols, seed=31)
    x = np.random.default_rng(32).standard_normal((9, cols)).astype(np.float32)
    exact = run(raw, type_name, rows, cols, x, mode="amx")
    f32 = run(raw, type_name, rows, cols, x)
    assert not np.array_equal(exact, f32)
    xs = split_int8(x, 32)
    scale = np.abs(xs) @ np.abs(w.astype(np.float64)).T
    assert np.max(np.abs(exact - xs @ w.T.astype(np.float64)) / scale) < 1e-6
    int8 = run(raw, type_name, rows, cols, x, q8=True, mode="amx")
    dots = run(raw, type_name, rows, cols, x, q8=True)
    assert not np.array_equal(int8, dots)
    assert np.max(np.abs(int8 - dots)) < 1e-5 * np.max(np.abs(dots))
    for n in (1, 2, 3, 4, 5):  # the kernels' few-row tiles: bitwise the batch's rows
        np.testing.assert_array_equal(run(raw, type_name, rows, cols, x[:n], mode="amx"), exact[:n])
        np.testing.assert_array_equal(run(raw, type_name, rows, cols, x[:n], q8=True, mode="amx"), int8[:n])


def test_quantize_q8_is_round_to_nearest() -> None:
    x = np.random.default_rng(3).standard_normal((3, 64)).astype(np.float32)
    qs, d = core.kernel_quantize_q8(x)
    blocks = x.reshape(3, 2, 32)
    expect_d = np.abs(blocks).max(axis=2) / np.float32(127)
    np.testing.assert_array_equal(d, expect_d)
    inv = np.float32(127) / np.abs(blocks).max(axis=2)  # the int8 kernels' scaling (their first piece)
    np.testing.assert_array_equal(qs.reshape(3, 2, 32), np.rint(blocks * inv[:, :, None]))


@pytest.mark.parametrize("q8", [False, True])
@pytest.mark.parametrize("type_name", QUANTIZED + FLOATS + MORE)
@pytest.mark.parametrize("cols", [256, 768])
def test_matmul_is_batch_invariant(type_name: str, cols: int, q8: bool, mode: str) -> None:
    if q8 and type_name in MORE and type_name not in Q8_TYPES and mode != "amx":
        pytest.skip("no 8-bit activation path for this type (q8 is the same f32 run)")
    rows = 45  # not a multiple of the 16-row scheduling chunk
    raw, _ = make_weight(type_name, rows, cols, seed=4)
    # Up to 150 rows: several 16-row AMX blocks and two 128-row work items.
    x = np.random.default_rng(5).standard_normal((150, cols)).astype(np.float32)
    alone = np.stack([run(raw, type_name, rows, cols, x[i : i + 1], q8, mode=mode)[0] for i in range(len(x))])
    try:
        for threads in (1, 2):
            core.set_num_threads(threads)
            for n in (1, 3, 4, 5, 8, 11, 16, 17, 40, 150):
                np.testing.assert_array_equal(
                    run(raw, type_name, rows, cols, x[:n], q8, mode=mode), alone[:n]
                )
            # A row in a different tile position (shifted by one) is still the same.
            np.testing.assert_array_equal(run(raw, type_name, rows, cols, x[1:], q8, mode=mode), alone[1:])
    finally:
        core.set_num_threads(2)


def test_float_matmul_odd_columns() -> None:
    rows, cols = 5, 45  # masked tail
    raw, w = make_weight("F32", rows, cols, seed=6)
    x = np.random.default_rng(7).standard_normal((3, cols)).astype(np.float32)
    y = run(raw, "F32", rows, cols, x)
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-5, atol=1e-5)


def test_timed_matmul_checks_its_input(mode: str) -> None:
    # benchmarks/matmul.py's hook: the same checks as kernel_matmul, one time per run.
    raw, _ = make_weight("Q4_1", 32, 64, seed=9)
    x = np.random.default_rng(3).standard_normal((20, 64)).astype(np.float32)
    seconds = core.kernel_matmul_timed(raw.reshape(-1), int(QT["Q4_1"]), 32, 64, x, 3)
    assert len(seconds) == 3 and all(s > 0 for s in seconds)
    # benchmarks/kernel_rows.py: the calling thread's CPU time instead (a product's CPU time is >= 0).
    cpu = core.kernel_matmul_timed(raw.reshape(-1), int(QT["Q4_1"]), 32, 64, x, 3, cpu_time=True)
    assert len(cpu) == 3 and all(s >= 0 for s in cpu)
    with pytest.raises(ValueError):
        core.kernel_matmul_timed(raw.reshape(-1), int(QT["Q4_1"]), 32, 64, x, 0)
    with pytest.raises(ValueError):
        core.kernel_matmul_timed(raw.reshape(-1), int(QT["Q4_1"]), 32, 48, np.zeros((1, 48), np.float32), 1)


def test_matmul_rejects_bad_shapes() -> None:
    raw, _ = make_weight("Q8_0", 4, 64, seed=8)
    with pytest.raises(ValueError):
        run(raw, "Q8_0", 4, 48, np.zeros((1, 48), np.float32))
    with pytest.raises(ValueError):
        run(raw, "Q8_0", 4, 64, np.zeros((1, 32), np.float32))
    with pytest.raises(ValueError):
        core.kernel_matmul(raw.reshape(-1), 99, 4, 64, np.zeros((1, 64), np.float32))


def bf16(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even; the twin's rounding), as float64."""
    from ossa.reference.model import _bf16

    return _bf16(a).astype(np.float64)


def run_bf16(
    raw: np.ndarray, type_name: str, rows: int, cols: int, x: np.ndarray, mode: str = "f32"
) -> np.ndarray:
    """y = x @ W^T as load_model(dtype="bfloat16") multiplies: W and x rounded to bf16."""
    return core.kernel_matmul(
        raw.reshape(-1),
        int(QT[type_name]),
        rows,
        cols,
        np.ascontiguousarray(x),
        dtype="bfloat16",
        amx=mode == "amx",
    )


@pytest.mark.parametrize("type_name", QUANTIZED + FLOATS + MORE)
def test_bf16_compute_matches_rounded_product(type_name: str, mode: str) -> None:
    # dtype "bfloat16": the product of the bf16-rounded weights and activations, accumulated in f32
    # (AMX tile products, or the f32 kernels on a BF16 copy without AMX), for every weight type.
    rows, cols = 45, 512
    raw, w = make_weight(type_name, rows, cols, seed=11)
    x = np.random.default_rng(12).standard_normal((37, cols)).astype(np.float32)
    y = run_bf16(raw, type_name, rows, cols, x, mode=mode)
    ref = bf16(x) @ bf16(w).T
    scale = np.abs(bf16(x)) @ np.abs(bf16(w)).T
    assert np.max(np.abs(y - ref) / scale) < 1e-6
    # ...which is bf16's error away from the float product (what dtype "float32" computes).
    full = x.astype(np.float64) @ w.T.astype(np.float64)
    err = np.max(np.abs(y - full) / scale)
    assert 1e-5 < err < 2e-2


@pytest.mark.parametrize("type_name", ["Q4_1", "Q6_K", "BF16", "Q5_K", "Q3_K", "IQ4_XS"])
@pytest.mark.parametrize("cols", [256, 1536])
def test_bf16_compute_is_batch_invariant(type_name: str, cols: int, mode: str) -> None:
    rows = 80  # two 32-column items and a lone 16-row group
    raw, _ = make_weight(type_name, rows, cols, seed=13)
    x = np.random.default_rng(14).standard_normal((300, cols)).astype(np.float32)
    alone = np.stack(
        [run_bf16(raw, type_name, rows, cols, x[i : i + 1], mode=mode)[0] for i in range(0, 300, 7)]
    )
    try:
        for threads in (1, 2):
            core.set_num_threads(threads)
            for n in (1, 2, 16, 17, 33, 300):
                got = run_bf16(raw, type_name, rows, cols, x[:n], mode=mode)
                np.testing.assert_array_equal(got[::7], alone[: len(got[::7])])
            np.testing.assert_array_equal(
                run_bf16(raw, type_name, rows, cols, x[7:], mode=mode)[::7], alone[1:]
            )
    finally:
        core.set_num_threads(2)


def test_bf16_compute_rejects_bad_input() -> None:
    raw, _ = make_weight("F32", 4, 48, seed=15)
    x = np.zeros((2, 48), np.float32)
    with pytest.raises(ValueError, match="multiple of 32"):
        run_bf16(raw, "F32", 4, 48, x)  # a row that is not whole 32-value steps
    with pytest.raises(ValueError, match="dtype"):
        core.kernel_matmul(raw.reshape(-1), int(QT["F32"]), 4, 48, x, dtype="float16")
