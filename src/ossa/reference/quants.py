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
    8: ("Q8_0", 32, 34),
    12: ("Q4_K", 256, 144),
    14: ("Q6_K", 256, 210),
    30: ("BF16", 1, 2),
}

_ALL_NAMES = (
    "F32 F16 Q4_0 Q4_1 Q4_2 Q4_3 Q5_0 Q5_1 Q8_0 Q8_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K IQ2_XXS IQ2_XS "
    "IQ3_XXS IQ1_S IQ4_NL IQ3_S IQ2_S IQ4_XS I8 I16 I32 I64 F64 IQ1_M BF16 Q4_0_4_4 Q4_0_4_8 Q4_0_8_8 "
    "TQ1_0 TQ2_0"
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
    """Dequantize ``raw`` (uint8 [rows, row_bytes]), rows of ``cols`` values, to float32 [rows, cols]."""
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
    else:
        out = _dequantize_q6_k(blocks)
    return out.reshape(rows, cols).astype(np.float32)


def _dequantize_q4_k(blocks: np.ndarray) -> np.ndarray:
    # f16 d | f16 dmin | scales[12] (8 six-bit scales and mins) | qs[128]
    d = _f16(blocks[..., 0:2])[..., None]
    dmin = _f16(blocks[..., 2:4])[..., None]
    s = blocks[..., 4:16].astype(np.int32)
    sc = np.empty(blocks.shape[:-1] + (8,), np.int32)
    mn = np.empty_like(sc)
    sc[..., :4] = s[..., 0:4] & 63
    mn[..., :4] = s[..., 4:8] & 63
    sc[..., 4:] = (s[..., 8:12] & 0xF) | ((s[..., 0:4] >> 6) << 4)
    mn[..., 4:] = (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)
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
