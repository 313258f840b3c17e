"""DeepSeek V2 / V3's multi-head latent attention in NumPy (twin of ``csrc/model/mla.cpp``).

transformers decompresses every token's cached latent into each head's key and value::

    q_h       = [q_nope_h | rope(q_rope_h)]                  from x (directly, or through a low rank)
    [c, k_r]  = x @ wkv_a.T;  c = rmsnorm(c)                  one latent row per token, shared by heads
    k_h       = [c @ wk_b[h].T ... | rope(k_r)],  v_h = c @ wv_b[h].T
    o         = concat_h(softmax(q_h . k_h * scale) v_h) @ wo.T

Because q_nope_h . (W c) = (W.T q_nope_h) . c, ossa attends in the latent space instead: every head's
query becomes [rope(q_rope_h) | wk_b[h] q_nope_h] (wk_b[h] stored C x N, the product's matrix), every
key and value is the one row [rope(k_r) | c], and each head's output's latent part goes through
wv_b[h]. Same result up to rounding, an R + C row cached per token instead of H (N + R + V) values.
The tests check this form against transformers' decompressed one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .model import apply_rope, attention, rms_norm, temperature


def mla_attention(
    c: dict[str, Any],
    w: dict[str, np.ndarray],
    i: int,
    h: np.ndarray,
    positions: np.ndarray,
    inv_freq: np.ndarray,
    rounding: Callable[[np.ndarray, str], np.ndarray],
) -> np.ndarray:
    """Layer i's attention output (before the residual) for normalised rows h [n, n_embd] of one
    sequence from position 0; ``rounding(x, name)`` is the C++ kernels' rounding of matrix ``name``'s
    input."""
    query, row = mla_query_and_row(c, w, i, h, positions, inv_freq, rounding)
    out = attention(query, row[:, None, :], row[:, None, :], scale=c["attn_scale"])
    return mla_output(c, w, i, out.reshape(len(h), c["n_head"], -1), rounding)


def _layer_matmul(
    w: dict[str, np.ndarray], i: int, rounding: Callable[[np.ndarray, str], np.ndarray]
) -> Callable[[np.ndarray, str], np.ndarray]:
    """mm(x, name): x (rounded as the C++ kernels round matrix name's input) times layer i's matrix
    name, transposed, in float32."""
    p = f"layers.{i}."

    def mm(x: np.ndarray, name: str) -> np.ndarray:
        return (rounding(x, p + name) @ w[p + name].T).astype(np.float32)

    return mm


def mla_query_and_row(
    c: dict[str, Any],
    w: dict[str, np.ndarray],
    i: int,
    h: np.ndarray,
    positions: np.ndarray,
    inv_freq: np.ndarray,
    rounding: Callable[[np.ndarray, str], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Layer i's queries in the latent space [n, n_head, R + C] and the rows it caches [n, R + C]
    (the one KV head's key and value) for rows h at ``positions``."""
    a, eps, style = c["mla"], c["rms_eps"], c["rope_style"]
    heads, nope, rope, lat = c["n_head"], a["qk_nope"], a["qk_rope"], a["kv_lora_rank"]
    factor, p, n = c["rope_scaling"]["attn_factor"], f"layers.{i}.", len(h)
    mm = _layer_matmul(w, i, rounding)
    if a["q_lora_rank"]:
        q = mm(rms_norm(mm(h, "wq_a"), w[p + "q_a_norm"], eps), "wq_b")
    else:
        q = mm(h, "wq")
    q = q.reshape(n, heads, nope + rope)
    kv = mm(h, "wkv_a")
    latent = rms_norm(kv[:, :lat], w[p + "kv_a_norm"], eps)
    k_rope = apply_rope(kv[:, None, lat:], positions, inv_freq, style, factor)[:, 0]
    q_rope = apply_rope(q[:, :, nope:], positions, inv_freq, style, factor)
    q_latent = np.stack([mm(q[:, j, :nope], f"wk_b.{j}") for j in range(heads)], axis=1)
    query = np.concatenate([q_rope, q_latent], axis=-1) * temperature(c, positions)[:, None, None]
    return query.astype(np.float32), np.concatenate([k_rope, latent], axis=-1)


def mla_output(
    c: dict[str, Any],
    w: dict[str, np.ndarray],
    i: int,
    out: np.ndarray,
    rounding: Callable[[np.ndarray, str], np.ndarray],
) -> np.ndarray:
    """Layer i's attention output from the heads' attended rows out [n, n_head, R + C]: each head's
    latent part through its wv_b, then wo."""
    rope, mm = c["mla"]["qk_rope"], _layer_matmul(w, i, rounding)
    o = np.concatenate([mm(out[:, j, rope:], f"wv_b.{j}") for j in range(c["n_head"])], axis=-1)
    return mm(o, "wo")
