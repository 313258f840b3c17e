"""Qwen3.5's gated delta-net layers (twin of ``csrc/model/delta_net.cpp``), written to be read.

A delta-net layer keeps, per sequence, a recurrent state instead of K/V rows: the last
``conv_kernel - 1`` inputs of a causal depthwise convolution and, per value head, a k_dim x v_dim
matrix S. For each token, in order:

    qkv  = norm(x) @ ssm_qkv^T                      (then the convolution over time, and SiLU)
    q, k = l2norm(q) / sqrt(k_dim), l2norm(k)       (per key head; value head h reads key head kh(h))
    beta = sigmoid(x @ ssm_beta^T),  g = a_neg * softplus(x @ ssm_alpha^T + dt_bias)
    S    = exp(g) S;   S += k (beta (v - S^T k))^T;   o = S^T q
    out  = ssm_out(rmsnorm(o, ssm_norm) * silu(x @ ssm_z^T))

A sequence whose chunk starts at position 0 starts from a zero state. The tokens run one after another
(the recurrent form), as in C++, so chunking does not change the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .model import rms_norm


class DeltaState:
    """One sequence's states, every delta-net layer: conv [layer] = [(K - 1), conv_dim] inputs,
    ssm [layer] = [n_v_heads, k_dim, v_dim]."""

    def __init__(self, c: dict[str, Any]) -> None:
        d = c["delta"]
        conv_dim = 2 * d["n_k_heads"] * d["k_dim"] + d["n_v_heads"] * d["v_dim"]
        self.conv = {i: np.zeros((d["conv_kernel"] - 1, conv_dim), np.float32) for i in d["layers"]}
        self.ssm = {i: np.zeros((d["n_v_heads"], d["k_dim"], d["v_dim"]), np.float32) for i in d["layers"]}

    def copy_from(self, other: DeltaState) -> None:
        for i in self.conv:
            self.conv[i][...] = other.conv[i]
            self.ssm[i][...] = other.ssm[i]


def _silu(x: np.ndarray) -> np.ndarray:
    return (x / (np.float32(1) + np.exp(-x))).astype(np.float32)


def _l2norm(x: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """x over its last axis times 1 / sqrt(sum(x^2) + 1e-6) (summed in float64), times ``scale``."""
    total = np.sum(x.astype(np.float64) ** 2, axis=-1, keepdims=True)
    inv = (1.0 / np.sqrt(total + 1e-6)).astype(np.float32)
    return (x * inv * np.float32(scale)).astype(np.float32)


def key_heads(d: dict[str, Any]) -> np.ndarray:
    """The key head each value head reads: tiled (GGUF) h % n_k, or grouped (HF) h // (n_v / n_k)."""
    h = np.arange(d["n_v_heads"])
    return h % d["n_k_heads"] if d["v_tiled"] else h // (d["n_v_heads"] // d["n_k_heads"])


def delta_net(
    c: dict[str, Any],
    w: dict[str, np.ndarray],
    i: int,
    h: np.ndarray,
    positions: np.ndarray,
    seq_start: Sequence[int],
    states: Sequence[DeltaState],
    q8: Any,
) -> np.ndarray:
    """Layer i's delta-net output [n, n_embd] (before the residual) for the tokens h [n, n_embd]
    (normalised), sequence s owning tokens [seq_start[s], seq_start[s + 1]) and states[s]."""
    d, p, eps = c["delta"], f"layers.{i}.", c["rms_eps"]
    nk, kd, vd, heads = d["n_k_heads"], d["k_dim"], d["v_dim"], d["n_v_heads"]
    qkv, z, b, a = (
        np.einsum("ij,kj->ik", q8(h, p + m), w[p + m]) for m in ("ssm_qkv", "ssm_z", "ssm_beta", "ssm_alpha")
    )
    kh = key_heads(d)
    o = np.empty((len(h), heads, vd), np.float32)
    for s, state in enumerate(states):
        lo, hi = seq_start[s], seq_start[s + 1]
        if hi == lo:
            continue
        conv, ssm = state.conv[i], state.ssm[i]
        if positions[lo] == 0:  # a new (or recomputed) sequence
            conv[...] = 0
            ssm[...] = 0
        m, taps = hi - lo, d["conv_kernel"]
        inputs = np.concatenate([conv, qkv[lo:hi]])  # [K - 1 + m, conv_dim]
        y = np.zeros((m, inputs.shape[1]), np.float32)
        for j in range(taps):  # (tap by tap, as C++ sums them)
            y = y + w[p + "ssm_conv"][:, j] * inputs[j : j + m]
        conv[...] = inputs[m:]
        y = _silu(y)
        q = _l2norm(y[:, : nk * kd].reshape(m, nk, kd), 1.0 / np.sqrt(np.float32(kd)))[:, kh]
        k = _l2norm(y[:, nk * kd : 2 * nk * kd].reshape(m, nk, kd))[:, kh]
        v = y[:, 2 * nk * kd :].reshape(m, heads, vd)
        beta = (1 / (1 + np.exp(-b[lo:hi]))).astype(np.float32)
        x = a[lo:hi] + w[p + "ssm_dt"]
        g = w[p + "ssm_a"] * np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20)))).astype(np.float32)
        decay = np.exp(g).astype(np.float32)
        for t in range(m):
            ssm *= decay[t][:, None, None]
            delta = (v[t] - np.einsum("hij,hi->hj", ssm, k[t])) * beta[t][:, None]
            ssm += k[t][:, :, None] * delta[:, None, :]
            o[lo + t] = np.einsum("hij,hi->hj", ssm, q[t])
    gated = rms_norm(o, w[p + "ssm_norm"], eps) * _silu(z.reshape(len(h), heads, vd))
    gated = gated.reshape(len(h), heads * vd)
    return np.einsum("ij,kj->ik", q8(gated, p + "ssm_out"), w[p + "ssm_out"])  # type: ignore[no-any-return]


def gate_attention(q_gate: np.ndarray, n_head: int, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Qwen3.5's wq output [n, n_head * 2 * head_dim] split into the query [n, n_head * head_dim] and
    sigmoid(gate) of the same shape (the attention's output is multiplied by it)."""
    n = len(q_gate)
    qg = q_gate.reshape(n, n_head, 2, head_dim)
    gate = (1 / (1 + np.exp(-qg[:, :, 1]))).astype(np.float32)
    return np.ascontiguousarray(qg[:, :, 0]).reshape(n, -1), gate.reshape(n, -1)
