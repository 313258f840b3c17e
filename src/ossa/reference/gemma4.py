"""The Gemma 4 (text) forward pass in plain NumPy, written to be read (twin of ``csrc/model/gemma4.cpp``).

What differs from Gemma 3 (``gemma3.py``):
  - attention shapes per layer (``layer_head_dim``, ``layer_n_head_kv``): the global layers have wider
    heads and fewer KV heads than the sliding ones; where a layer has no ``wv`` (``attention_k_eq_v``)
    V is K's projection, taken before K's norm and RoPE;
  - q and k RMS-normalised per head with weights, V without one; scores unscaled (``attn_scale`` 1);
  - RoPE: the sliding layers' own base over their whole head; the global layers' "proportional" one,
    NeoX pairs over their whole head with only the first ``rope_pairs`` frequencies turning;
  - the last layers attend to the K/V of an earlier layer of their kind (``kv_source``), computing no
    K/V of their own; their MLPs may be twice as wide (``layer_n_ff``);
  - per-layer embeddings (``ple_dim`` P): a token table row [n_layer * P] times sqrt(P), plus the
    embeddings' projection times n_embd^-1/2 RMS-normalised per layer, the sum times 2^-1/2; after each
    layer's feed-forward, x += norm(proj(gelu_tanh(gate(x)) * input_layer));
  - each layer's output times its ``out_scale`` (transformers' layer_scalar) when the file has one;
  - norms multiply by their stored weights (no 1 + w).

Gemma 3n (``altup`` > 0: ``paged_forward_3n``) runs the same attention, MLP and per-layer inputs inside
AltUp's streams: the residual is ``altup`` rows, the embeddings and their projections rescaled to the
embeddings' magnitude. Each layer predicts every stream from a router over the first (the active one),
runs on the prediction of the first: LAuReL (a low-rank branch, normalised, beside the attention), the
attention (its output normalised, added, the sum with LAuReL's times 2^-1/2), the MLP (the first layers'
gates made sparse: relu(gate - (mean + std * cut))), then corrects every stream from the router over the
output, and adds the per-layer branch (on the corrected first stream, scaled) to the others. At the end
the other streams are projected back, rescaled to the first's magnitude, and all averaged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .gemma3 import gelu_tanh_glu
from .model import apply_rope, embed, finish_logits, rms_norm


def head_dim(c: dict[str, Any], layer: int) -> int:
    return int(c["layer_head_dim"][layer]) if c["layer_head_dim"] else int(c["head_dim"])


def n_head_kv(c: dict[str, Any], layer: int) -> int:
    return int(c["layer_n_head_kv"][layer]) if c["layer_n_head_kv"] else int(c["n_head_kv"])


def kv_source(c: dict[str, Any], layer: int) -> int:
    return int(c["kv_source"][layer]) if c["kv_source"] else layer


def kv_pool(c: dict[str, Any], n_slots: int, dtype: str = "float32") -> dict[int, np.ndarray]:
    """The K/V cache: for each layer that keeps its own, [2 (K | V), n_slots, n_head_kv * head_dim]."""
    return {
        i: np.zeros((2, n_slots, n_head_kv(c, i) * head_dim(c, i)), dtype=np.dtype(dtype))
        for i in range(c["n_layer"])
        if kv_source(c, i) == i
    }


def rope_tables(c: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(global, sliding) inverse frequencies: the global layers' over half their head, the first
    ``rope_pairs`` base^(-2i / head_dim), the rest 0; the sliding layers' plain, with their base."""
    hd_full = next((head_dim(c, i) for i in range(c["n_layer"]) if not c["layer_sliding"][i]), c["head_dim"])
    full = np.zeros(hd_full // 2, dtype=np.float32)
    i = np.arange(min(c["rope_pairs"], hd_full // 2))
    full[: len(i)] = (1.0 / np.power(float(c["rope_theta"]), 2.0 * i / hd_full)).astype(np.float32)
    hd = c["head_dim"]
    swa = (1.0 / np.power(float(c["rope_theta_swa"]), 2.0 * np.arange(hd // 2) / hd)).astype(np.float32)
    return full, swa


def per_layer_inputs(
    c: dict[str, Any], w: dict[str, np.ndarray], ids: np.ndarray, x: np.ndarray, q8: Any
) -> Any:
    """[n, n_layer, P]: (norm(proj(x) * n_embd^-1/2) + table[ids] * sqrt(P)) * 2^-1/2, in that order."""
    n, n_layer, p = len(ids), c["n_layer"], c["ple_dim"]
    proj = _linear(q8(x, "ple_model_proj"), w["ple_model_proj"]) * np.float32(1.0 / math.sqrt(c["n_embd"]))
    proj = rms_norm(proj.reshape(n, n_layer, p), w["ple_proj_norm"], c["rms_eps"])
    tok = w["ple_tok_embd"][ids].astype(np.float32).reshape(n, n_layer, p) * np.float32(math.sqrt(p))
    return ((proj + tok) * np.float32(1.0 / math.sqrt(2.0))).astype(np.float32)


def experts(c: dict[str, Any], w: dict[str, np.ndarray], i: int, x: np.ndarray, q8: Any) -> np.ndarray:
    """Layer i's experts for the residual rows x: routed by norm(x) (no weight) times router_scale times
    n_embd^-1/2 (a softmax over the experts, the k best renormalised, each times its expert_scale), run on
    norm(x, ffn_norm_2) with GeGLU, summed in expert order (moe.cpp's with MoeCall)."""
    from .moe import route

    p, eps, k = f"layers.{i}.", c["rms_eps"], c["moe"]["n_expert_used"]
    r = rms_norm(x, np.ones(x.shape[-1], dtype=np.float32), eps)
    r = r * w[p + "router_scale"] * np.float32(1.0 / math.sqrt(c["n_embd"]))
    logits = r @ w[p + "router"].T
    h = rms_norm(x, w[p + "ffn_norm_2"], eps)
    out = np.zeros_like(h)
    for t in range(len(h)):
        chosen, weight = route(logits[t], k, True)
        for e, we in zip(chosen, weight * w[p + "expert_scale"][chosen], strict=True):
            pe = f"{p}experts.{e}."
            gate, up = (q8(h[t : t + 1], pe + m) @ w[pe + m].T for m in ("w_gate", "w_up"))
            out[t] += we * (q8(gelu_tanh_glu(gate, up), pe + "w_down") @ w[pe + "w_down"].T)[0]
    return out.astype(np.float32)


def _linear(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    return np.einsum("ij,kj->ik", x, weight)  # (runner._linear's fixed-order dot products)


def forward_gemma4(c: dict[str, Any], w: dict[str, np.ndarray], token_ids: list[int], q8: Any) -> np.ndarray:
    """Logits [len(token_ids), n_vocab] of one sequence from position 0."""
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.ndim != 1 or len(ids) == 0 or ids.min() < 0 or ids.max() >= c["n_vocab"]:
        raise ValueError("token ids must be a non-empty list of ids within the vocabulary")
    n = len(ids)
    every = np.arange(n)
    return paged_forward(c, w, kv_pool(c, n), ids, every, every, [0, n], [every], every, q8)


def _attention(
    c: dict[str, Any],
    w: dict[str, np.ndarray],
    i: int,
    h: np.ndarray,
    pool: dict[int, np.ndarray],
    pos: np.ndarray,
    slots: np.ndarray,
    seq_start: Sequence[int],
    ctx_slots: Sequence[np.ndarray],
    freq: np.ndarray,
    q8: Any,
) -> np.ndarray:
    """Layer i's attention of the normalised rows h (twin of gemma4.cpp's attention, then wo): q (and, in
    a layer with its own K/V, k and v written to the pool at ``slots``) with their norms and RoPE of
    ``freq``, the attention over the cache of kv_source(i) per sequence, projected by wo."""
    from .runner import _paged_attention

    eps, n_head, n = c["rms_eps"], c["n_head"], len(h)
    p, hd, kvh, sliding = f"layers.{i}.", head_dim(c, i), n_head_kv(c, i), bool(c["layer_sliding"][i])
    q = _linear(q8(h, p + "wq"), w[p + "wq"]).reshape(n, n_head, hd)
    q = apply_rope(rms_norm(q, w[p + "q_norm"], eps), pos, freq, "neox")
    src = kv_source(c, i)
    if src == i:  # (its own K/V; V = K's projection where the layer has no wv)
        k = _linear(q8(h, p + "wk"), w[p + "wk"])
        v = _linear(q8(h, p + "wv"), w[p + "wv"]) if p + "wv" in w else k.copy()
        k = apply_rope(rms_norm(k.reshape(n, kvh, hd), w[p + "k_norm"], eps), pos, freq, "neox")
        v = rms_norm(v.reshape(n, kvh, hd), np.ones(hd, dtype=np.float32), eps)
        pool[i][0, slots] = k.reshape(n, kvh * hd)
        pool[i][1, slots] = v.reshape(n, kvh * hd)
    attn = np.empty((n, n_head * hd), dtype=np.float32)
    for s in range(len(seq_start) - 1):
        lo, hi = seq_start[s], seq_start[s + 1]
        if hi == lo:
            continue
        kc = pool[src][0, ctx_slots[s]].astype(np.float32).reshape(-1, kvh, hd)
        vc = pool[src][1, ctx_slots[s]].astype(np.float32).reshape(-1, kvh, hd)
        window = c["sliding_window"] if sliding else 0
        attn[lo:hi] = _paged_attention(q[lo:hi], kc, vc, pos[lo:hi], c["attn_scale"], window)
    return _linear(q8(attn, p + "wo"), w[p + "wo"])


def _per_layer_branch(
    c: dict[str, Any], w: dict[str, np.ndarray], i: int, x: np.ndarray, inputs: np.ndarray, q8: Any
) -> np.ndarray:
    """Layer i's per-layer branch of the rows x: norm(proj(gelu_tanh(gate(x)) * its per-layer inputs))."""
    p = f"layers.{i}."
    g = gelu_tanh_glu(_linear(q8(x, p + "ple_gate"), w[p + "ple_gate"]), inputs)
    return rms_norm(_linear(q8(g, p + "ple_proj"), w[p + "ple_proj"]), w[p + "ple_norm"], c["rms_eps"])


def _magnitude(x: np.ndarray) -> np.ndarray:
    """sqrt(mean(x^2)) of each row, [n, 1] (the mean in float64, as gemma4.cpp's)."""
    return np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True)).astype(np.float32)


def _rescaled(y: np.ndarray, target: np.ndarray) -> np.ndarray:
    """y times target / sqrt(max(mean(y^2), 1e-5)) per row."""
    mean_sq = np.maximum(np.mean(y.astype(np.float64) ** 2, axis=-1, keepdims=True).astype(np.float32), 1e-5)
    return (y * target / np.sqrt(mean_sq).astype(np.float32)).astype(np.float32)


def _modalities(c: dict[str, Any], w: dict[str, np.ndarray], p: str, x: np.ndarray) -> np.ndarray:
    """AltUp's router, [n, altup]: tanh(router @ (norm(x) / n_embd))."""
    h = rms_norm(x, w[p + "altup_router_norm"], c["rms_eps"]) * np.float32(1.0 / c["n_embd"])
    return np.tanh(h.astype(np.float64) @ w[p + "altup_router"].astype(np.float64).T).astype(np.float32)


def _sparse_gate(gate: np.ndarray, cut: float) -> np.ndarray:
    """relu(gate - (mean + std * cut)) per row (the std over the row, divided by its length)."""
    g64 = gate.astype(np.float64)
    mean = g64.mean(axis=-1, keepdims=True)
    std = np.sqrt(((g64 - mean) ** 2).mean(axis=-1, keepdims=True))
    cutoff = mean.astype(np.float32) + std.astype(np.float32) * np.float32(cut)
    return np.maximum(gate - cutoff, 0).astype(np.float32)


def paged_forward_3n(
    c: dict[str, Any],
    w: dict[str, np.ndarray],
    pool: dict[int, np.ndarray],
    ids: np.ndarray,
    pos: np.ndarray,
    slots: np.ndarray,
    seq_start: Sequence[int],
    ctx_slots: Sequence[np.ndarray],
    rows: np.ndarray,
    q8: Any,
) -> np.ndarray:
    """Gemma 3n's step (``paged_forward``'s arguments; the module docstring has the order)."""
    eps, n, a = c["rms_eps"], len(ids), c["altup"]
    x0 = embed(c, w, ids)
    ple = per_layer_inputs(c, w, np.where(ids < len(w["ple_tok_embd"]), ids, 0), x0, q8)
    freq_full, freq_swa = rope_tables(c)
    target = _magnitude(x0)
    alt = [x0] + [_rescaled(_linear(q8(x0, f"altup_proj.{s}"), w[f"altup_proj.{s}"]), target) for s in
                  range(a - 1)]  # fmt: skip
    root_half = np.float32(math.sqrt(2.0))
    for i in range(c["n_layer"]):
        p, sliding = f"layers.{i}.", bool(c["layer_sliding"][i])
        # predict: pred_j = sum_k coef[j][k] alt_k + alt_j, the coefficients from the active stream
        coef = (_modalities(c, w, p, alt[0]) @ w[p + "altup_predict"].T).reshape(n, a, a)
        pred = [
            (sum(alt[k] * coef[:, j, k : k + 1] for k in range(a)) + alt[j]).astype(np.float32)
            for j in range(a)
        ]
        active = pred[0]
        h = rms_norm(active, w[p + "attn_norm"], eps)
        lau = _linear(
            q8(_linear(q8(h, p + "laurel_l"), w[p + "laurel_l"]), p + "laurel_r"), w[p + "laurel_r"]
        )
        lau = h + rms_norm(lau, w[p + "laurel_norm"], eps)
        attn = _attention(
            c, w, i, h, pool, pos, slots, seq_start, ctx_slots, freq_swa if sliding else freq_full, q8
        )
        out = rms_norm(attn, w[p + "post_attn_norm"], eps)
        x = ((out + active + lau) / root_half).astype(np.float32)
        h = rms_norm(x, w[p + "ffn_norm"], eps)
        gate, up = _linear(q8(h, p + "w_gate"), w[p + "w_gate"]), _linear(q8(h, p + "w_up"), w[p + "w_up"])
        cut = c["layer_sparsity"][i] if c["layer_sparsity"] else -math.inf
        if math.isfinite(cut):
            gate = _sparse_gate(gate, cut)
        f = _linear(q8(gelu_tanh_glu(gate, up), p + "w_down"), w[p + "w_down"])
        x = x + rms_norm(f, w[p + "post_ffn_norm"], eps)
        # correct: alt_k = pred_k + (x - pred_0) * (coef_k + 1), from the router over the output
        corr = _modalities(c, w, p, x) @ w[p + "altup_correct"].T + np.float32(1.0)
        alt = [((x - pred[0]) * corr[:, k : k + 1] + pred[k]).astype(np.float32) for k in range(a)]
        first = alt[0] * w[p + "altup_correct_scale"] if c["altup_correct_scale"] else alt[0]
        o = _per_layer_branch(c, w, i, first, ple[:, i], q8)
        alt = [alt[0]] + [(s + o).astype(np.float32) for s in alt[1:]]
    target = _magnitude(alt[0])
    x = alt[0]
    for s in range(a - 1):
        x = x + _rescaled(_linear(q8(alt[s + 1], f"altup_unembd.{s}"), w[f"altup_unembd.{s}"]), target)
    x = (x * np.float32(1.0 / a)).astype(np.float32)
    h = q8(rms_norm(x[rows], w["output_norm"], eps), "output")
    return finish_logits(c, _linear(h, w["output"]))


def paged_forward(
    c: dict[str, Any],
    w: dict[str, np.ndarray],
    pool: dict[int, np.ndarray],
    ids: np.ndarray,
    pos: np.ndarray,
    slots: np.ndarray,
    seq_start: Sequence[int],
    ctx_slots: Sequence[np.ndarray],
    rows: np.ndarray,
    q8: Any,
) -> np.ndarray:
    """One step over a paged pool (``kv_pool``): the tokens ``ids`` at positions ``pos`` write their
    K/V at ``slots``; sequence s's tokens are ids[seq_start[s]:seq_start[s + 1]] and its context the
    pool slots ``ctx_slots[s]`` in position order. Returns the logits of the token indices ``rows``."""
    if c["altup"]:
        return paged_forward_3n(c, w, pool, ids, pos, slots, seq_start, ctx_slots, rows, q8)
    eps = c["rms_eps"]
    x = embed(c, w, ids)
    ple = per_layer_inputs(c, w, ids, x, q8) if c["ple_dim"] else None
    freq_full, freq_swa = rope_tables(c)
    for i in range(c["n_layer"]):
        p = f"layers.{i}."
        freq = freq_swa if c["layer_sliding"][i] else freq_full
        h = rms_norm(x, w[p + "attn_norm"], eps)
        out = _attention(c, w, i, h, pool, pos, slots, seq_start, ctx_slots, freq, q8)
        x = x + rms_norm(out, w[p + "post_attn_norm"], eps)
        h = rms_norm(x, w[p + "ffn_norm"], eps)
        gate, up = _linear(q8(h, p + "w_gate"), w[p + "w_gate"]), _linear(q8(h, p + "w_up"), w[p + "w_up"])
        f = _linear(q8(gelu_tanh_glu(gate, up), p + "w_down"), w[p + "w_down"])
        if i in c["moe"]["layers"]:  # the experts beside the MLP, from the same residual
            f = rms_norm(f, w[p + "post_ffn_norm_1"], eps) + rms_norm(
                experts(c, w, i, x, q8), w[p + "post_ffn_norm_2"], eps
            )
        x = x + rms_norm(f, w[p + "post_ffn_norm"], eps)
        if ple is not None:  # the per-layer branch
            x = x + _per_layer_branch(c, w, i, x, ple[:, i], q8)
        if p + "out_scale" in w:
            x = (x * w[p + "out_scale"].reshape(-1)[0]).astype(np.float32)
    h = q8(rms_norm(x[rows], w["output_norm"], eps), "output")
    return finish_logits(c, _linear(h, w["output"]))
