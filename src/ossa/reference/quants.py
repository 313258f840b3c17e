"""Dequantization of llama.cpp's block formats to float32 (twin of ``dequantize_row`` in tensor.cpp).

Each value is an exact product of a block scale and a quant plus at most one rounded float32
addition, computed in the same order as the C++ code, so results are bitwise equal.
"""

from __future__ import annotations

import numpy as np

# ggml type id -> (name, elements per block, bytes per block)
TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    20: ("IQ4_NL", 32, 18),
    23: ("IQ4_XS", 256, 136),
    30: ("BF16", 1, 2),
    39: ("MXFP4", 32, 17),
}

_ALL_NAMES = (
    "F32 F16 Q4_0 Q4_1 Q4_2 Q4_3 Q5_0 Q5_1 Q8_0 Q8_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K IQ2_XXS IQ2_XS "
    "IQ3_XXS IQ1_S IQ4_NL IQ3_S IQ2_S IQ4_XS I8 I16 I32 I64 F64 IQ1_M BF16 Q4_0_4_4 Q4_0_4_8 Q4_0_8_8 "
    "TQ1_0 TQ2_0 IQ4_NL_4_4 IQ4_NL_4_8 IQ4_NL_8_8 MXFP4"
).split()


def type_name(type_id: int) -> str:
    """ggml's name of a type id, also for types ossa does not read."""
    return _ALL_NAMES[type_id] if 0 <= type_id < len(_ALL_NAMES) else f"type {type_id}"


def row_bytes(type_id: int, cols: int) -> int:
    _, block_elems, block_bytes = TYPES[type_id]
    return cols // block_elems * block_bytes


def _f16(raw: np.ndarray) -> np.ndarray:
    """[..., 2] uint8 little-endian halves -> float32 [...]."""
    return np.ascontiguousarray(raw).view("<f2")[..., 0].astype(np.float32)


def dequantize(raw: np.ndarray, type_id: int, cols: int) -> np.ndarray:
    """Dequantize ``raw`` (uint8 [rows, row_bytes]), rows of ``cols`` values, to float32 [rows, cols].
    A damaged file's infinite scales give inf/NaN values, silently, as in C++."""
    with np.errstate(invalid="ignore", over="ignore"):
        return _dequantize(raw, type_id, cols)


def _dequantize(raw: np.ndarray, type_id: int, cols: int) -> np.ndarray:
    if type_id not in TYPES:
        raise ValueError(f"unsupported tensor type '{type_name(type_id)}'")
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    rows = raw.shape[0]
    name, block_elems, block_bytes = TYPES[type_id]
    if name == "F32":
        return raw.view("<f4").astype(np.float32).reshape(rows, cols)
    if name == "F16":
        return raw.view("<f2").astype(np.float32).reshape(rows, cols)
    if name == "BF16":
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(rows, cols)
    blocks = raw.reshape(rows, cols // block_elems, block_bytes)
    if name == "Q4_0":
        d = _f16(blocks[..., 0:2])[..., None]
        qs = blocks[..., 2:18]
        q = np.concatenate([qs & 0xF, qs >> 4], axis=-1).astype(np.int32) - 8
        out = q.astype(np.float32) * d
    elif name == "Q4_1":
        d = _f16(blocks[..., 0:2])[..., None]
        m = _f16(blocks[..., 2:4])[..., None]
        qs = blocks[..., 4:20]
        q = np.concatenate([qs & 0xF, qs >> 4], axis=-1)
        out = q.astype(np.float32) * d + m
    elif name == "Q8_0":
        d = _f16(blocks[..., 0:2])[..., None]
        out = blocks[..., 2:34].view(np.int8).astype(np.float32) * d
    elif name == "Q4_K":
        out = _dequantize_q4_k(blocks)
    elif name == "Q6_K":
        out = _dequantize_q6_k(blocks)
    else:
        out = _MORE[name](blocks)
    return out.reshape(rows, cols).astype(np.float32)


def _k4_scales_mins(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit scales and minimums packed in the 12 bytes ``s`` of a Q4_K / Q5_K block."""
    s = s.astype(np.int32)
    sc = np.empty(s.shape[:-1] + (8,), np.int32)
    mn = np.empty_like(sc)
    sc[..., :4] = s[..., 0:4] & 63
    mn[..., :4] = s[..., 4:8] & 63
    sc[..., 4:] = (s[..., 8:12] & 0xF) | ((s[..., 0:4] >> 6) << 4)
    mn[..., 4:] = (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)
    return sc, mn


def _dequantize_q4_k(blocks: np.ndarray) -> np.ndarray:
    # f16 d | f16 dmin | scales[12] (8 six-bit scales and mins) | qs[128]
    d = _f16(blocks[..., 0:2])[..., None]
    dmin = _f16(blocks[..., 2:4])[..., None]
    sc, mn = _k4_scales_mins(blocks[..., 4:16])
    qs = blocks[..., 16:144].reshape(blocks.shape[:-1] + (4, 32))
    # sub-block 2j uses the low nibbles of chunk j, sub-block 2j+1 the high ones
    q = np.stack([qs & 0xF, qs >> 4], axis=-2).reshape(blocks.shape[:-1] + (8, 32)).astype(np.float32)
    d_sub = (d * sc.astype(np.float32))[..., None]
    m_sub = (dmin * mn.astype(np.float32))[..., None]
    return (d_sub * q - m_sub).reshape(blocks.shape[:-1] + (256,))


def _dequantize_q6_k(blocks: np.ndarray) -> np.ndarray:
    # ql[128] | qh[64] | int8 scales[16] | f16 d; two halves of 128 values
    ql = blocks[..., 0:128].astype(np.int32)
    qh = blocks[..., 128:192].astype(np.int32)
    sc = blocks[..., 192:208].view(np.int8).astype(np.float32)
    d = _f16(blocks[..., 208:210])
    out = np.empty(blocks.shape[:-1] + (256,), np.float32)
    for half in range(2):
        lo = ql[..., 64 * half : 64 * half + 64]
        hi = qh[..., 32 * half : 32 * half + 32]
        s = sc[..., 8 * half : 8 * half + 8]
        quads = [
            (lo[..., 0:32] & 0xF) | (((hi >> 0) & 3) << 4),
            (lo[..., 32:64] & 0xF) | (((hi >> 2) & 3) << 4),
            (lo[..., 0:32] >> 4) | (((hi >> 4) & 3) << 4),
            (lo[..., 32:64] >> 4) | (((hi >> 6) & 3) << 4),
        ]
        for k, q in enumerate(quads):
            # value l of quad k uses scale is + 2k with is = l // 16
            scale = np.repeat(s[..., 2 * k : 2 * k + 2], 16, axis=-1)
            out[..., 128 * half + 32 * k : 128 * half + 32 * k + 32] = (
                d[..., None] * scale * (q - 32).astype(np.float32)
            )
    return out


# ---- Q5_0, Q5_1, Q5_K, Q2_K, Q3_K, IQ4_NL, IQ4_XS ------------------------------------------------
# Every value below is again an exact product of scales and a small integer (at most 24 significant
# bits) plus at most one rounded addition, so any evaluation order gives the same float32.

# IQ4_NL / IQ4_XS: a 4-bit index selects one of these 16 int8 levels (a non-linear grid).
IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int32)


def _nibbles32(qs: np.ndarray) -> np.ndarray:
    """16 bytes -> 32 indices: element j is the low nibble of qs[j], element j + 16 the high one."""
    return np.concatenate([qs & 0xF, qs >> 4], axis=-1).astype(np.int32)


def _bits32(qh: np.ndarray) -> np.ndarray:
    """4 bytes (a little-endian u32) -> its 32 bits, bit j for element j."""
    word = np.ascontiguousarray(qh).view("<u4").astype(np.int64)  # [..., 1]
    return ((word >> np.arange(32)) & 1).astype(np.int32)


def _dequantize_q5_0(blocks: np.ndarray) -> np.ndarray:
    # f16 d | u32 qh (fifth bits) | qs[16] (low nibbles); w = (q - 16) * d
    d = _f16(blocks[..., 0:2])[..., None]
    q = _nibbles32(blocks[..., 6:22]) | (_bits32(blocks[..., 2:6]) << 4)
    return (q - 16).astype(np.float32) * d


def _dequantize_q5_1(blocks: np.ndarray) -> np.ndarray:
    # f16 d | f16 m | u32 qh | qs[16]; w = q * d + m
    d = _f16(blocks[..., 0:2])[..., None]
    m = _f16(blocks[..., 2:4])[..., None]
    q = _nibbles32(blocks[..., 8:24]) | (_bits32(blocks[..., 4:8]) << 4)
    return q.astype(np.float32) * d + m


def _crumbs(qs: np.ndarray) -> np.ndarray:
    """[..., 64] bytes of 2-bit quants -> [..., 256]: element 128h + 32s + l is bits 2s, 2s+1 of
    qs[32h + l] (the Q2_K / Q3_K order)."""
    q = qs.astype(np.int32).reshape(qs.shape[:-1] + (2, 1, 32)) >> (2 * np.arange(4)).reshape(4, 1)
    return (q & 3).reshape(qs.shape[:-1] + (256,))


def _dequantize_q2_k(blocks: np.ndarray) -> np.ndarray:
    # scales[16] (low nibble: scale, high nibble: minimum of each 16 values) | qs[64] | f16 d | f16 dmin
    sc = blocks[..., 0:16].astype(np.int32)
    d = _f16(blocks[..., 80:82])[..., None]
    dmin = _f16(blocks[..., 82:84])[..., None]
    scale = np.repeat(d * (sc & 0xF).astype(np.float32), 16, axis=-1)
    minimum = np.repeat(dmin * (sc >> 4).astype(np.float32), 16, axis=-1)
    return scale * _crumbs(blocks[..., 16:80]).astype(np.float32) - minimum


def _dequantize_q3_k(blocks: np.ndarray) -> np.ndarray:
    # hmask[32] | qs[64] | scales[12] (16 six-bit signed scales) | f16 d; w = d * scale * q, q in -4..3
    hmask = blocks[..., 0:32].astype(np.int32)
    s = blocks[..., 96:108].astype(np.int32)
    d = _f16(blocks[..., 108:110])[..., None]
    low = np.concatenate([s[..., 0:8] & 0xF, s[..., 0:8] >> 4], axis=-1)  # scale g: bits 0..3
    high = (s[..., 8:12, None] >> (2 * np.arange(4))) & 3  # [..., byte, g // 4]
    high = np.swapaxes(high, -1, -2).reshape(s.shape[:-1] + (16,))  # scale g: bits 4, 5
    scale = np.repeat(d * ((low | (high << 4)) - 32).astype(np.float32), 16, axis=-1)
    # the third bit of element 128h + 32s + l is bit 4h + s of hmask[l]; clear means "minus 4"
    hbit = (hmask[..., None, :] >> np.arange(8).reshape(8, 1)) & 1  # [..., 4h + s, l]
    q = _crumbs(blocks[..., 32:96]) - 4 * (1 - hbit.reshape(hmask.shape[:-1] + (256,)))
    return scale * q.astype(np.float32)


def _dequantize_q5_k(blocks: np.ndarray) -> np.ndarray:
    # f16 d | f16 dmin | scales[12] (as Q4_K) | qh[32] | qs[128]; 8 sub-blocks of 32
    d = _f16(blocks[..., 0:2])[..., None]
    dmin = _f16(blocks[..., 2:4])[..., None]
    sc, mn = _k4_scales_mins(blocks[..., 4:16])
    qh = blocks[..., 16:48].astype(np.int32)
    qs = blocks[..., 48:176].reshape(blocks.shape[:-1] + (4, 32)).astype(np.int32)
    # sub-block j: nibbles of chunk j // 2 (low for even j), fifth bit = bit j of qh[l]
    low = np.stack([qs & 0xF, qs >> 4], axis=-2).reshape(blocks.shape[:-1] + (8, 32))
    q = low | (((qh[..., None, :] >> np.arange(8).reshape(8, 1)) & 1) << 4)
    d_sub = (d * sc.astype(np.float32))[..., None]
    m_sub = (dmin * mn.astype(np.float32))[..., None]
    return (d_sub * q.astype(np.float32) - m_sub).reshape(blocks.shape[:-1] + (256,))


def _dequantize_iq4_nl(blocks: np.ndarray) -> np.ndarray:
    # f16 d | qs[16]; w = d * IQ4_LEVELS[index]
    d = _f16(blocks[..., 0:2])[..., None]
    return IQ4_LEVELS[_nibbles32(blocks[..., 2:18])].astype(np.float32) * d


def _dequantize_iq4_xs(blocks: np.ndarray) -> np.ndarray:
    # f16 d | u16 scales_h | scales_l[4] | qs[128]; 8 sub-blocks of 32, each with a 6-bit scale - 32
    d = _f16(blocks[..., 0:2])[..., None]
    high = np.ascontiguousarray(blocks[..., 2:4]).view("<u2").astype(np.int32)  # [..., 1]
    sl = blocks[..., 4:8].astype(np.int32)
    low = np.stack([sl & 0xF, sl >> 4], axis=-1).reshape(sl.shape[:-1] + (8,))
    ls = (low | (((high >> (2 * np.arange(8))) & 3) << 4)) - 32
    qs = blocks[..., 8:136].reshape(blocks.shape[:-1] + (8, 16))
    levels = IQ4_LEVELS[_nibbles32(qs)].astype(np.float32)
    return ((d * ls.astype(np.float32))[..., None] * levels).reshape(blocks.shape[:-1] + (256,))


# MXFP4 (gpt-oss): twice the E2M1 values (exact int8 levels) times half the E8M0 scale.
MXFP4_LEVELS = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int32)


def mxfp4_scale(e: np.ndarray) -> np.ndarray:
    """E8M0 exponent bytes -> 2^(e - 128) as float32, exactly (e < 2: subnormal)."""
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - np.uint32(1)) << np.uint32(23))
    return bits.astype(np.uint32).view(np.float32)


def _dequantize_mxfp4(blocks: np.ndarray) -> np.ndarray:
    # u8 e | qs[16] (nibbles as Q4_0's); w = MXFP4_LEVELS[index] * 2^(e - 128)
    d = mxfp4_scale(blocks[..., 0:1])
    return MXFP4_LEVELS[_nibbles32(blocks[..., 1:17])].astype(np.float32) * d


_MORE = {
    "Q5_0": _dequantize_q5_0, "Q5_1": _dequantize_q5_1, "Q2_K": _dequantize_q2_k, "Q3_K": _dequantize_q3_k,
    "Q5_K": _dequantize_q5_k, "IQ4_NL": _dequantize_iq4_nl, "IQ4_XS": _dequantize_iq4_xs,
    "MXFP4": _dequantize_mxfp4,
}  # fmt: skip


def e4m3_values(codes: np.ndarray) -> np.ndarray:
    """FP8 E4M3 bytes (OCP's E4M3FN: bias 7, no infinities, S.1111.111 NaN) as float32, exactly:
    the integer q of value q * 2^-9 ((8 + m) << (e - 1), or m for subnormals), twin of half.h's
    e4m3_q."""
    c = codes.astype(np.int64)
    e, m = (c >> 3) & 15, c & 7
    v = (np.where(e == 0, m, (8 + m) << np.maximum(e - 1, 0)) * (1.0 / 512.0)).astype(np.float32)
    v = np.where(c & 0x80, -v, v)  # (0x80: -0.0)
    return np.where((c & 0x7F) == 0x7F, np.float32(np.nan), v)


def dequantize_fp8(codes: np.ndarray, scales: np.ndarray, block: tuple[int, int] | None) -> np.ndarray:
    """A folder's FP8 matrix (uint8 E4M3 codes [rows, cols]) times its scales (float32, one per
    ``block`` of rows x columns, or a single one: ``block`` None) as float32: each weight the E4M3 value
    times its scale rounded once, as transformers' FineGrainedFP8 dequantization (twin of loader.cpp's
    fp8_linear and kernels/matmul_fp8.cpp)."""
    rows, cols = codes.shape
    s = scales.astype(np.float32)
    if s.size == 1 or block is None:
        full = np.full((rows, cols), s.reshape(-1)[0], np.float32)
    else:
        bn, bk = block
        full = np.repeat(np.repeat(s, bn, axis=0)[:rows], bk, axis=1)[:, :cols]
    return (e4m3_values(codes) * full).astype(np.float32)


def act_quantize(x: np.ndarray, mode: str, scale: float = 0.0) -> np.ndarray:
    """compressed-tensors' activation quantization of each row of x (float32), as its fake-quantizing
    forward computes it (twin of kernels/matmul.cpp's act_quantize_rows): s = ``scale`` (static), or per
    row max |x| / 127.5 ("int8") or / 448 ("fp8") with 0 replaced by float32's epsilon; x / s clamped to
    [-128, 127] and rounded half to even, or clamped to +-448 and rounded to the nearest E4M3 value; then
    q * s."""
    x = np.asarray(x, dtype=np.float32)
    fp8 = mode == "fp8"
    if scale:
        s = np.full((*x.shape[:-1], 1), np.float32(scale), np.float32)
    else:
        s = (np.max(np.abs(x), axis=-1, keepdims=True) / np.float32(448.0 if fp8 else 127.5)).astype(
            np.float32
        )
        s = np.where(s == 0, np.finfo(np.float32).eps, s).astype(np.float32)
    t = np.clip((x / s).astype(np.float32), -448.0 if fp8 else -128.0, 448.0 if fp8 else 127.0)
    if fp8:
        _, e = np.frexp(np.abs(t))
        step = np.where(np.abs(t) < 2.0**-6, 2.0**-9, np.ldexp(1.0, e - 4)).astype(np.float32)
        q = (np.rint(t / step) * step).astype(np.float32)
    else:
        q = np.rint(t).astype(np.float32)
    return (q * s).astype(np.float32)


class QdqLinear:
    """A compressed-tensors W8A8 / FP8 matrix: the dequantized weights ``w`` (float32 [rows, cols]) times
    activations quantized by ``act_quantize(x, mode, scale)`` first (``x @ w.T`` does both)."""

    __array_ufunc__ = None

    def __init__(self, w: np.ndarray, mode: str, scale: float = 0.0) -> None:
        self.w = np.asarray(w, dtype=np.float32)
        self.mode, self.scale = mode, scale
        self.shape = self.w.shape
        self.ndim = 2

    def reshape(self, *shape: int) -> QdqLinear:
        return self  # (a matrix already)

    @property
    def T(self) -> _QdqLinearT:  # noqa: N802 (numpy's name)
        return _QdqLinearT(self)

    def apply(self, x: np.ndarray) -> np.ndarray:
        xq = act_quantize(x, self.mode, self.scale)
        return np.einsum("ij,kj->ik", xq.reshape(-1, xq.shape[-1]), self.w).reshape(*xq.shape[:-1], -1)


class _QdqLinearT:
    __array_ufunc__ = None

    def __init__(self, w: QdqLinear) -> None:
        self.w = w

    def __rmatmul__(self, x: np.ndarray) -> np.ndarray:
        return self.w.apply(x)


class BitLinear:
    """BitNet b1.58's matrix as transformers' BitLinear (or, scale_mul, its AutoBitLinear) runs a packed
    checkpoint (twin of
    kernels/matmul_bitnet.cpp): ternary values ``ternary`` (int8 [rows, cols], -1 / 0 / 1) with one
    ``scale`` (the checkpoint's weight_scale). ``x @ w.T`` quantizes each row of x to int8 by its
    absolute maximum (s = 127 * (1 / max(max |x|, 1e-5)), round half to even, clamp to [-128, 127]), sums
    the integer products exactly and returns float32(sum) / (scale * s), all in float32."""

    __array_ufunc__ = None  # (x @ w.T: numpy leaves the product to _Transposed.__rmatmul__)

    def __init__(self, ternary: np.ndarray, scale: float, scale_mul: bool = False) -> None:
        self.ternary = np.ascontiguousarray(ternary, dtype=np.int8)
        self.scale = np.float32(scale)
        self.scale_mul = scale_mul  # (AutoBitLinear: the product times scale, float(sum) / s * scale)
        self.shape = self.ternary.shape
        self.ndim = 2

    @staticmethod
    def unpack(packed: np.ndarray, scale: float, name: str = "", scale_mul: bool = False) -> BitLinear:
        """From transformers' packing (uint8 [rows / 4, cols], four values along the rows a byte: bits
        2i..2i+1 of packed row p hold row i * rows / 4 + p as w + 1)."""
        codes = np.concatenate([(packed >> (2 * i)) & 3 for i in range(4)]).astype(np.int8)
        if (codes == 3).any():
            raise ValueError(f"BitNet matrix '{name}' holds a value outside -1, 0, 1")
        return BitLinear(codes - 1, scale, scale_mul)

    def reshape(self, *shape: int) -> BitLinear:
        return self  # (a matrix already: loader's _take reshapes whatever it takes)

    @property
    def T(self) -> _BitLinearT:  # noqa: N802 (numpy's name)
        return _BitLinearT(self)

    def apply(self, x: np.ndarray) -> np.ndarray:
        """x [n, cols] (float32) -> [n, rows]."""
        x = np.asarray(x, dtype=np.float32)
        m = np.max(np.abs(x), axis=-1, keepdims=True)
        # (torch's 127 / tensor is 127 * reciprocal(tensor): two roundings)
        s = (np.float32(127.0) * (np.float32(1.0) / np.maximum(m, np.float32(1e-5)))).astype(np.float32)
        q = np.clip(np.rint(x * s), -128, 127)
        q = np.where(np.isnan(q), 0, q).astype(np.int64)
        dots = q @ self.ternary.T.astype(np.int64)
        if self.scale_mul:
            return (dots.astype(np.float32) / s * self.scale).astype(np.float32)
        return (dots.astype(np.float32) / (self.scale * s)).astype(np.float32)


class _BitLinearT:
    __array_ufunc__ = None

    def __init__(self, w: BitLinear) -> None:
        self.w = w

    def __rmatmul__(self, x: np.ndarray) -> np.ndarray:
        return self.w.apply(x)
