"""Random blocks of llama.cpp's quantized types for tests.

The `gguf` package cannot quantize most of these types, and random bytes exercise every bit of a
layout anyway: every byte of a block is random except its f16 scales (and minimums), which are set to
sane values so the weights stay finite and of ordinary size.
"""

from __future__ import annotations

import gguf
import numpy as np

QT = gguf.GGMLQuantizationType

# Byte offsets of each type's f16 fields (d, and dmin / m where it has one) inside a block.
F16_FIELDS: dict[str, tuple[int, ...]] = {
    "Q4_K": (0, 2),
    "Q6_K": (208,),
    "Q5_0": (0,),
    "Q5_1": (0, 2),
    "Q5_K": (0, 2),
    "Q2_K": (80, 82),
    "Q3_K": (108,),
    "IQ4_NL": (0,),
    "IQ4_XS": (0,),
    "Q4_0": (0,),
    "Q4_1": (0, 2),
    "Q8_0": (0,),
    "IQ2_XXS": (0,),
    "IQ2_XS": (0,),
    "IQ2_S": (0,),
    "IQ3_XXS": (0,),
    "IQ3_S": (0,),
    "IQ1_S": (0,),
}
# Byte offsets of each type's E8M0 exponent (a power-of-two scale, 2^(e - 127)).
E8M0_FIELDS: dict[str, tuple[int, ...]] = {"MXFP4": (0,)}
# The types added for the Q2_K..Q5_K_M, IQ4_XS and MXFP4 (gpt-oss) files (issue 17).
NEW_TYPES = ("Q5_0", "Q5_1", "Q5_K", "Q3_K", "Q2_K", "IQ4_NL", "IQ4_XS", "MXFP4")
# The i-quants below 4 bits (IQ1_*, IQ2_*, IQ3_* files).
IQ23_TYPES = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M")


def iq1m_d(blocks: np.ndarray) -> np.ndarray:
    """IQ1_M blocks [..., 56] -> their f16 d (spread over the top nibbles of the four scale words)."""
    words = np.ascontiguousarray(blocks[..., 48:56]).view("<u2").astype(np.uint32)
    bits = (words >> 12) << (4 * np.arange(4, dtype=np.uint32))
    return bits.sum(axis=-1).astype(np.uint16).view(np.float16)


def set_iq1m_d(blocks: np.ndarray, d: np.ndarray) -> None:
    """Writes the f16 values d [...] into IQ1_M blocks [..., 56] in place."""
    bits = np.asarray(d, np.float16).view(np.uint16).astype(np.uint32)[..., None]
    words = np.ascontiguousarray(blocks[..., 48:56]).view("<u2").astype(np.uint32)
    words = (words & 0x0FFF) | (((bits >> (4 * np.arange(4, dtype=np.uint32))) & 0xF) << 12)
    blocks[..., 48:56] = words.astype("<u2").view(np.uint8)


def random_blocks(
    type_name: str, rows: int, cols: int, rng: np.random.Generator, scale: float = 0.05
) -> np.ndarray:
    """Stored bytes uint8 [rows, row_bytes] of a random ``type_name`` matrix of ``cols`` columns."""
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[QT[type_name]]
    assert cols % block_elems == 0, (type_name, cols)
    raw = rng.integers(0, 256, size=(rows, cols // block_elems, block_bytes), dtype=np.uint8)
    for at in F16_FIELDS.get(type_name, ()):
        half = rng.uniform(-scale, scale, size=raw.shape[:2]).astype(np.float16)
        raw[..., at : at + 2] = half.view(np.uint8).reshape(raw.shape[:2] + (2,))
    for at in E8M0_FIELDS.get(type_name, ()):  # largest weight (6 x 2^(e - 127)) up to about `scale`
        top = 127 + int(np.floor(np.log2(scale / 6)))
        raw[..., at] = rng.integers(top - 3, top + 1, size=raw.shape[:2], dtype=np.uint8)
    if type_name == "IQ1_M":
        set_iq1m_d(raw, rng.uniform(-scale, scale, size=raw.shape[:2]).astype(np.float16))
    return np.ascontiguousarray(raw.reshape(rows, -1))


def split_product_error(
    got: np.ndarray, x: np.ndarray, w: np.ndarray, name: str, int8_matrices: dict[str, int]
) -> float:
    """How far a kernel's product ``got`` of activations x [n, cols] and matrix ``name`` (dequantized
    weights w [rows, cols]) is from the twin's, x rounded for that matrix by
    ``reference.model.activation_rounding`` with ``int8_matrices`` (f32 kernels otherwise): the
    largest error of an output relative to the sum of its products' magnitudes."""
    from ossa.reference import model as ref_model

    xs = ref_model.activation_rounding(False, False, False, int8_matrices)(x, name).astype(np.float64)
    w = w.astype(np.float64)
    return float(np.max(np.abs(got - xs @ w.T) / (np.abs(xs) @ np.abs(w).T)))
