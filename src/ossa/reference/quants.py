"""Dequantization of llama.cpp's block formats to float32 (twin of ``dequantize_row`` in tensor.cpp).

Each value is an exact product of a block scale and a quant plus at most one rounded float32
addition, computed in the same order as the C++ code, so results are bitwise equal.
"""

from __future__ import annotations

import numpy as np

from ossa.reference.iq_grids import codebook

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
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    29: ("IQ1_M", 256, 56),
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


# ---- The i-quants below 4 bits: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M ---------------
# 256-value blocks of groups of 8 (4 for IQ3_*) values, each group an entry of a fixed codebook
# (ossa.reference.iq_grids) with its signs; a weight is an integer q times a scale per 16 or 32 values:
#   IQ2_*:   q = +-level (8, 25, 43),          scale = d (2 ls + 1) / 8   (llama.cpp: d (0.5 + ls) / 4)
#   IQ3_XXS: q = +-level (4 .. 62),            scale = d (2 ls + 1) / 4   (d (0.5 + ls) / 2)
#   IQ3_S:   q = +-level (1 .. 15),            scale = d (2 ls + 1)
#   IQ1_*:   q = 8 level +- 1 (level -1, 0, 1), scale = d (2 ls + 1) / 8  (d (2 ls + 1) (level +- 1/8))
# Every product has at most 22 significant bits: exact in float32, as llama.cpp's and gguf's are.


def _u16(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw).view("<u2").astype(np.int64)


def _u32(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw).view("<u4").astype(np.int64)


def _bits8(byte: np.ndarray) -> np.ndarray:
    """[...] bytes -> [..., 8] their bits, bit j at j."""
    return (byte[..., None].astype(np.int64) >> np.arange(8)) & 1


def _signs7(s7: np.ndarray) -> np.ndarray:
    """7-bit sign fields -> [..., 8] signs (+1 / -1): bits 0..6, and bit 7 making the count of minus
    signs even (llama.cpp's ksigns table)."""
    bits = _bits8(s7 & 0x7F)
    bits[..., 7] = bits[..., :7].sum(axis=-1) & 1
    return 1 - 2 * bits


def _iq_weights(q: np.ndarray, scale: np.ndarray, per: int) -> np.ndarray:
    """q [..., 256] integers, scale [..., 256 / per] float32 -> the block's 256 weights."""
    return (np.repeat(scale, per, axis=-1) * q.astype(np.float32)).astype(np.float32)


def _scale16(nibbles: np.ndarray, d: np.ndarray, div: float) -> np.ndarray:
    """[..., 8] bytes of two 4-bit ls each (low nibble first) -> [..., 16] d (2 ls + 1) / div."""
    ls = np.stack([nibbles & 0xF, nibbles >> 4], axis=-1).reshape(nibbles.shape[:-1] + (16,))
    return d * (2 * ls.astype(np.float32) + 1) / np.float32(div)


def _dequantize_iq2_xxs(blocks: np.ndarray) -> np.ndarray:
    # f16 d | per 32 values: u8 index[4] (8 values each), u32 (4 x 7 sign bits, ls in bits 28..31)
    d = _f16(blocks[..., 0:2])[..., None]
    groups = blocks[..., 2:66].reshape(blocks.shape[:-1] + (8, 8))
    aux = _u32(groups[..., 4:8])  # [..., 8, 1]
    signs = _signs7(aux >> (7 * np.arange(4)))  # [..., 8, 4, 8]
    q = codebook("IQ2_XXS")[groups[..., 0:4]] * signs
    scale = d * (2 * (aux[..., 0] >> 28).astype(np.float32) + 1) / np.float32(8)
    return _iq_weights(q.reshape(blocks.shape[:-1] + (256,)), scale, 32)


def _dequantize_iq2_xs(blocks: np.ndarray) -> np.ndarray:
    # f16 d | u16 qs[32] (9-bit index, 7 sign bits) | scales[8] (a 4-bit ls per 16 values)
    d = _f16(blocks[..., 0:2])[..., None]
    qs = _u16(blocks[..., 2:66].reshape(blocks.shape[:-1] + (32, 2)))[..., 0]
    q = codebook("IQ2_XS")[qs & 511] * _signs7(qs >> 9)
    scale = _scale16(blocks[..., 66:74], d, 8)
    return _iq_weights(q.reshape(blocks.shape[:-1] + (256,)), scale, 16)


def _dequantize_iq2_s(blocks: np.ndarray) -> np.ndarray:
    # f16 d | qs[32] (index bits 0..7) | signs[32] | qh[8] (index bits 8, 9: 2 per group) | scales[8]
    d = _f16(blocks[..., 0:2])[..., None]
    qh = (blocks[..., 66:74, None].astype(np.int64) >> (2 * np.arange(4))) & 3
    index = blocks[..., 2:34].astype(np.int64) | (qh.reshape(blocks.shape[:-1] + (32,)) << 8)
    q = codebook("IQ2_S")[index] * (1 - 2 * _bits8(blocks[..., 34:66]))
    scale = _scale16(blocks[..., 74:82], d, 8)
    return _iq_weights(q.reshape(blocks.shape[:-1] + (256,)), scale, 16)


def _dequantize_iq3_xxs(blocks: np.ndarray) -> np.ndarray:
    # f16 d | qs[64] (an 8-bit index per 4 values) | per 32 values a u32 (4 x 7 sign bits, ls >> 28)
    d = _f16(blocks[..., 0:2])[..., None]
    aux = _u32(blocks[..., 66:98].reshape(blocks.shape[:-1] + (8, 4)))  # [..., 8, 1]
    signs = _signs7(aux >> (7 * np.arange(4)))  # [..., 8, 4, 8]
    q = codebook("IQ3_XXS")[blocks[..., 2:66]].reshape(signs.shape) * signs
    scale = d * (2 * (aux[..., 0] >> 28).astype(np.float32) + 1) / np.float32(4)
    return _iq_weights(q.reshape(blocks.shape[:-1] + (256,)), scale, 32)


def _dequantize_iq3_s(blocks: np.ndarray) -> np.ndarray:
    # f16 d | qs[64] (index bits 0..7) | qh[8] (bit 8 of each index) | signs[32] | scales[4] (ls per 32)
    d = _f16(blocks[..., 0:2])[..., None]
    high = _bits8(blocks[..., 66:74]).reshape(blocks.shape[:-1] + (64,))
    index = blocks[..., 2:66].astype(np.int64) | (high << 8)
    q = codebook("IQ3_S")[index].reshape(blocks.shape[:-1] + (256,))
    q = q * (1 - 2 * _bits8(blocks[..., 74:106]).reshape(q.shape))
    sc = blocks[..., 106:110]
    ls = np.stack([sc & 0xF, sc >> 4], axis=-1).reshape(blocks.shape[:-1] + (8,))
    return _iq_weights(q, d * (2 * ls.astype(np.float32) + 1), 32)


def _iq1_values(index: np.ndarray, minus: np.ndarray) -> np.ndarray:
    """Codebook entries [..., 8] (levels -1, 0, 1) as 8 level + 1, or - 1 where ``minus``."""
    return 8 * codebook("IQ1")[index] + np.where(minus, -1, 1)[..., None]


def _dequantize_iq1_s(blocks: np.ndarray) -> np.ndarray:
    # f16 d | qs[32] (index bits 0..7) | per 32 values a u16 (4 x 3 index bits, ls in 12..14, the
    # delta's sign in 15)
    d = _f16(blocks[..., 0:2])[..., None]
    qh = _u16(blocks[..., 34:50].reshape(blocks.shape[:-1] + (8, 2)))  # [..., 8, 1]
    index = blocks[..., 2:34].reshape(blocks.shape[:-1] + (8, 4)).astype(np.int64)
    index = index | (((qh >> (3 * np.arange(4))) & 7) << 8)
    q = _iq1_values(index, np.broadcast_to((qh >> 15) == 1, index.shape))
    scale = d * (2 * ((qh[..., 0] >> 12) & 7).astype(np.float32) + 1) / np.float32(8)
    return _iq_weights(q.reshape(blocks.shape[:-1] + (256,)), scale, 32)


def _dequantize_iq1_m(blocks: np.ndarray) -> np.ndarray:
    # qs[32] (index bits 0..7) | qh[16] (a nibble per group: 3 index bits, the delta's sign) |
    # u16 scales[4]: a 3-bit ls per 16 values in bits 0..11, and d's f16 bits 4k..4k+3 in word k's 12..15
    sc = _u16(blocks[..., 48:56].reshape(blocks.shape[:-1] + (4, 2)))[..., 0]  # [..., 4]
    d_bits = ((sc >> 12) << (4 * np.arange(4))).sum(axis=-1).astype(np.uint16)
    d = d_bits.view(np.float16).astype(np.float32)[..., None]
    qh = blocks[..., 32:48].astype(np.int64)
    nib = np.stack([qh & 0xF, qh >> 4], axis=-1).reshape(blocks.shape[:-1] + (32,))
    q = _iq1_values(blocks[..., 0:32].astype(np.int64) | ((nib & 7) << 8), (nib & 8) != 0)
    ls = ((sc[..., None] >> (3 * np.arange(4))) & 7).reshape(blocks.shape[:-1] + (16,))
    scale = d * (2 * ls.astype(np.float32) + 1) / np.float32(8)
    return _iq_weights(q.reshape(blocks.shape[:-1] + (256,)), scale, 16)


_MORE = {
    "Q5_0": _dequantize_q5_0, "Q5_1": _dequantize_q5_1, "Q2_K": _dequantize_q2_k, "Q3_K": _dequantize_q3_k,
    "Q5_K": _dequantize_q5_k, "IQ4_NL": _dequantize_iq4_nl, "IQ4_XS": _dequantize_iq4_xs,
    "MXFP4": _dequantize_mxfp4, "IQ2_XXS": _dequantize_iq2_xxs, "IQ2_XS": _dequantize_iq2_xs,
    "IQ2_S": _dequantize_iq2_s, "IQ3_XXS": _dequantize_iq3_xxs, "IQ3_S": _dequantize_iq3_s,
    "IQ1_S": _dequantize_iq1_s, "IQ1_M": _dequantize_iq1_m,
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
