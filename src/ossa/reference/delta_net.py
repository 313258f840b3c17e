"""Qwen3.5's gated delta-net layers, LFM2's short convolutions and Mamba-2 layers (twin of
``csrc/model/delta_net.cpp``), written to be read.

A delta-net layer keeps, per sequence, a recurrent state instead of K/V rows: the last
``conv_kernel - 1`` inputs of a causal depthwise convolution and, per value head, a k_dim x v_dim
matrix S. For each token, in order:

    qkv  = norm(x) @ ssm_qkv^T                      (then the convolution over time, and SiLU)
    q, k = l2norm(q) / sqrt(k_dim), l2norm(k)       (per key head; value head h reads key head kh(h))
    beta = sigmoid(x @ ssm_beta^T),  g = a_neg * softplus(x @ ssm_alpha^T + dt_bias)
    S    = exp(g) S;   S += k (beta (v - S^T k))^T;   o = S^T q
    out  = ssm_out(rmsnorm(o, ssm_norm) * silu(x @ ssm_z^T))

LFM2's short convolution keeps only a convolution's last inputs: [B | C | x] = norm(x) @ in_proj^T, then
out_proj(C * conv(B * x)).

A Mamba-2 layer (Granite 4.0-H) keeps the convolution's last inputs and, per head, a head_dim x d_state
matrix S:

    [z | x | B | C | dt] = norm(x) @ ssm_in^T          ([x | B | C] through the convolution, its bias, SiLU)
    dt = softplus(dt + dt_bias),  S = exp(dt a) S + dt x B^T,  y = S C + D x      (head h: group g(h) of B, C)
    out = ssm_out(group_rmsnorm(y * silu(z), ssm_norm))

A sequence whose chunk starts at position 0 starts from a zero state. The tokens run one after another
(the recurrent form), as in C++, so chunking does not change the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .model import rms_norm, silu


class DeltaState:
    """One sequence's states, every recurrent layer: conv [layer] = [(K - 1), channels] inputs (a
    delta-net's conv_dim, a short convolution's n_embd, Mamba-2's [x | B | C]), ssm [layer] = [n_v_heads,
    k_dim, v_dim] (delta-net layers) or [n_heads, head_dim, d_state] (Mamba-2)."""

    def __init__(self, c: dict[str, Any]) -> None:
        d, sc, m = c["delta"], c["conv"], c["ssm"]
        conv_dim = 2 * d["n_k_heads"] * d["k_dim"] + d["n_v_heads"] * d["v_dim"]
        self.conv = {i: np.zeros((d["conv_kernel"] - 1, conv_dim), np.float32) for i in d["layers"]}
        self.conv.update({i: np.zeros((sc["kernel"] - 1, c["n_embd"]), np.float32) for i in sc["layers"]})
        self.ssm = {i: np.zeros((d["n_v_heads"], d["k_dim"], d["v_dim"]), np.float32) for i in d["layers"]}
        if m["layers"]:  # Mamba-2: [n_heads, head_dim, d_state] states
            m_conv, hd = m["d_inner"] + 2 * m["n_groups"] * m["d_state"], m["d_inner"] // m["n_heads"]
            self.conv.update({i: np.zeros((m["conv_kernel"] - 1, m_conv), np.float32) for i in m["layers"]})
            self.ssm.update({i: np.zeros((m["n_heads"], hd, m["d_state"]), np.float32) for i in m["layers"]})
        m1 = c["mamba1"]  # Mamba-1: x's convolution inputs, [d_inner, d_state] states
        for i in m1["layers"]:
            self.conv[i] = np.zeros((m1["conv_kernel"] - 1, m1["d_inner"]), np.float32)
            self.ssm[i] = np.zeros((m1["d_inner"], m1["d_state"]), np.float32)

    def copy_from(self, other: DeltaState) -> None:
        for i in self.conv:
            self.conv[i][...] = other.conv[i]
        for i in self.ssm:
            self.ssm[i][...] = other.ssm[i]


def _causal_conv(state: np.ndarray, x: np.ndarray, taps: np.ndarray, fresh: bool) -> np.ndarray:
    """The chunk x [m, channels] through the depthwise convolution taps [channels, K] after the state's
    K - 1 inputs (zeroed first when ``fresh``), tap by tap as C++ sums them; the state then keeps the
    last K - 1 inputs."""
    if fresh:
        state[...] = 0
    m, k = len(x), taps.shape[1]
    inputs = np.concatenate([state, x])  # [K - 1 + m, channels]
    y = np.zeros(x.shape, np.float32)
    for j in range(k):
        y = y + taps[:, j] * inputs[j : j + m]
    state[...] = inputs[m:]
    return y


def short_conv(
    c: dict[str, Any],
    w: dict[str, np.ndarray],
    i: int,
    h: np.ndarray,
    positions: np.ndarray,
    seq_start: Sequence[int],
    states: Sequence[DeltaState],
    q8: Any,
) -> np.ndarray:
    """Layer i's short-convolution output [n, n_embd] (before the residual) for the normalised tokens h,
    sequence s owning tokens [seq_start[s], seq_start[s + 1]) and states[s]."""
    p, e = f"layers.{i}.", c["n_embd"]
    bcx = np.einsum("ij,kj->ik", q8(h, p + "sc_in"), w[p + "sc_in"])
    b, cc, x = bcx[:, :e], bcx[:, e : 2 * e], bcx[:, 2 * e :]
    bx = (b * x).astype(np.float32)
    y = np.empty(bx.shape, np.float32)
    for s, state in enumerate(states):
        lo, hi = seq_start[s], seq_start[s + 1]
        if hi > lo:
            y[lo:hi] = _causal_conv(state.conv[i], bx[lo:hi], w[p + "sc_conv"], positions[lo] == 0)
    y = (cc * y).astype(np.float32)
    return np.einsum("ij,kj->ik", q8(y, p + "sc_out"), w[p + "sc_out"])  # type: ignore[no-any-return]


def _softplus(x: np.ndarray) -> np.ndarray:
    """softplus as torch computes it (x itself above 20)."""
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20)))).astype(np.float32)


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
            ssm[...] = 0
        m = hi - lo
        y = _causal_conv(conv, qkv[lo:hi], w[p + "ssm_conv"], positions[lo] == 0)
        y = silu(y)
        q = _l2norm(y[:, : nk * kd].reshape(m, nk, kd), 1.0 / np.sqrt(np.float32(kd)))[:, kh]
        k = _l2norm(y[:, nk * kd : 2 * nk * kd].reshape(m, nk, kd))[:, kh]
        v = y[:, 2 * nk * kd :].reshape(m, heads, vd)
        beta = (1 / (1 + np.exp(-b[lo:hi]))).astype(np.float32)
        x = a[lo:hi] + w[p + "ssm_dt"]
        g = w[p + "ssm_a"] * _softplus(x)
        decay = np.exp(g).astype(np.float32)
        for t in range(m):
            ssm *= decay[t][:, None, None]
            delta = (v[t] - np.einsum("hij,hi->hj", ssm, k[t])) * beta[t][:, None]
            ssm += k[t][:, :, None] * delta[:, None, :]
            o[lo + t] = np.einsum("hij,hi->hj", ssm, q[t])
    gated = rms_norm(o, w[p + "ssm_norm"], eps) * silu(z.reshape(len(h), heads, vd))
    gated = gated.reshape(len(h), heads * vd)
    return np.einsum("ij,kj->ik", q8(gated, p + "ssm_out"), w[p + "ssm_out"])  # type: ignore[no-any-return]


def gate_attention(q_gate: np.ndarray, n_head: int, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Qwen3.5's wq output [n, n_head * 2 * head_dim] split into the query [n, n_head * head_dim] and
    sigmoid(gate) of the same shape (the attention's output is multiplied by it)."""
    n = len(q_gate)
    qg = q_gate.reshape(n, n_head, 2, head_dim)
    gate = (1 / (1 + np.exp(-qg[:, :, 1]))).astype(np.float32)
    return np.ascontiguousarray(qg[:, :, 0]).reshape(n, -1), gate.reshape(n, -1)


def mamba2(
    c: dict[str, Any],
    w: dict[str, np.ndarray],
    i: int,
    h: np.ndarray,
    positions: np.ndarray,
    seq_start: Sequence[int],
    states: Sequence[DeltaState],
    q8: Any,
) -> np.ndarray:
    """Layer i's Mamba-2 output [n, n_embd] (before the residual) for the normalised tokens h, sequence s
    owning tokens [seq_start[s], seq_start[s + 1]) and states[s]."""
    m, p, eps = c["ssm"], f"layers.{i}.", c["rms_eps"]
    di, ns, nh, ng = m["d_inner"], m["d_state"], m["n_heads"], m["n_groups"]
    hd, conv_dim = di // nh, di + 2 * ng * m["d_state"]
    proj = np.einsum("ij,kj->ik", q8(h, p + "ssm_in"), w[p + "ssm_in"])
    u = c["mup"]
    if u["active"]:  # (Falcon-H1: the input's multiplier times each of the five segments')
        gn = ng * ns
        widths = [di, di, gn, gn, proj.shape[1] - 2 * di - 2 * gn]
        f = np.float32(u["ssm_in"]) * np.asarray(u["zxbcdt"], np.float32)
        proj = proj * np.repeat(f, widths)
    z, xbc, dt_raw = proj[:, :di], proj[:, di : di + conv_dim], proj[:, di + conv_dim :]
    group = np.arange(nh) // (nh // ng)  # the B / C group of each head
    y = np.empty((len(h), nh, hd), np.float32)
    for s, state in enumerate(states):
        lo, hi = seq_start[s], seq_start[s + 1]
        if hi == lo:
            continue
        ssm = state.ssm[i]
        if positions[lo] == 0:  # a new (or recomputed) sequence
            ssm[...] = 0
        conv = _causal_conv(state.conv[i], xbc[lo:hi], w[p + "ssm_conv"], positions[lo] == 0)
        conv = silu(conv + w[p + "ssm_conv_b"] if m["conv_bias"] else conv)
        x = conv[:, :di].reshape(-1, nh, hd)
        b = conv[:, di : di + ng * ns].reshape(-1, ng, ns)[:, group]  # [m, nh, ns]
        cc = conv[:, di + ng * ns :].reshape(-1, ng, ns)[:, group]
        dt = _softplus(dt_raw[lo:hi] + w[p + "ssm_dt"])  # [m, nh]
        decay = np.exp(dt * w[p + "ssm_a"]).astype(np.float32)
        for t in range(hi - lo):
            dtb = dt[t][:, None] * b[t]  # [nh, ns]
            ssm[...] = ssm * decay[t][:, None, None] + x[t][:, :, None] * dtb[:, None, :]
            y[lo + t] = np.einsum("hpn,hn->hp", ssm, cc[t]) + w[p + "ssm_d"][:, None] * x[t]
    normed = y.reshape(len(h), di) * silu(z)
    if m["gated_norm"]:  # (Falcon-H1's mixers may have none)
        groups = normed.reshape(len(h), ng, di // ng)
        normed = rms_norm(groups, w[p + "ssm_norm"].reshape(ng, di // ng), eps).reshape(len(h), di)
    if u["active"]:  # (Falcon-H1's ssm_out_multiplier)
        normed = normed * np.float32(u["ssm_out"])
    return np.einsum("ij,kj->ik", q8(normed, p + "ssm_out"), w[p + "ssm_out"])  # type: ignore[no-any-return]


def mamba1(
    c: dict[str, Any],
    w: dict[str, np.ndarray],
    i: int,
    h: np.ndarray,
    positions: np.ndarray,
    seq_start: Sequence[int],
    states: Sequence[DeltaState],
    q8: Any,
) -> np.ndarray:
    """Layer i's Mamba-1 output [n, n_embd] (before the residual): in_proj [x | z]; x through the causal
    convolution (its bias) and SiLU; x_proj [dt_low | B | C] (Falcon-Mamba: each RMS-normalised without
    weights); dt = softplus(dt_proj dt_low + dt_bias); per channel c, h = exp(dt A) h + dt B x, y = h . C +
    D x; y * SiLU(z) through out_proj."""
    m, p = c["mamba1"], f"layers.{i}."
    di, ns, r = m["d_inner"], m["d_state"], m["dt_rank"]
    proj = np.einsum("ij,kj->ik", q8(h, p + "ssm_in"), w[p + "ssm_in"])
    x_all, z = proj[:, :di], proj[:, di:]
    y = np.empty((len(h), di), np.float32)
    for s, state in enumerate(states):
        lo, hi = seq_start[s], seq_start[s + 1]
        if hi == lo:
            continue
        ssm = state.ssm[i]
        if positions[lo] == 0:  # a new (or recomputed) sequence
            ssm[...] = 0
        conv = _causal_conv(state.conv[i], x_all[lo:hi], w[p + "ssm_conv"], positions[lo] == 0)
        x = silu(conv + w[p + "ssm_conv_b"] if m["conv_bias"] else conv)
        dbc = np.einsum("ij,kj->ik", q8(x, p + "ssm_x"), w[p + "ssm_x"])
        dt_low, b, cc = dbc[:, :r], dbc[:, r : r + ns], dbc[:, r + ns :]
        if m["dt_b_c_rms"]:  # (Jamba's norms have weights, Falcon-Mamba's none)
            dt_low, b, cc = (
                v / np.sqrt(np.mean(v * v, -1, keepdims=True) + m["bc_eps"]) for v in (dt_low, b, cc)
            )
            if m["dt_b_c_weights"]:
                dt_low, b, cc = (
                    dt_low * w[p + "ssm_dt_norm"],
                    b * w[p + "ssm_b_norm"],
                    cc * w[p + "ssm_c_norm"],
                )
        dt = _softplus(
            np.einsum("ij,kj->ik", q8(dt_low, p + "ssm_dt_w"), w[p + "ssm_dt_w"]) + w[p + "ssm_dt"]
        )
        for t in range(hi - lo):
            ssm[...] = np.exp(dt[t][:, None] * w[p + "ssm_a"]) * ssm + (dt[t] * x[t])[:, None] * b[t]
            y[lo + t] = ssm @ cc[t] + w[p + "ssm_d"] * x[t]
    gated = (y * silu(z)).astype(np.float32)
    return np.einsum("ij,kj->ik", q8(gated, p + "ssm_out"), w[p + "ssm_out"])  # type: ignore[no-any-return]


def is_recurrent(c: dict[str, Any], i: int) -> bool:
    """Whether layer i keeps a recurrent state instead of K/V (a delta-net, short-convolution, Mamba-2 or
    Mamba-1 layer; twin of ModelConfig::recurrent)."""
    return (i in c["delta"]["layers"] or i in c["conv"]["layers"] or i in c["ssm"]["layers"]) or i in c[
        "mamba1"
    ]["layers"]


def has_recurrent(c: dict[str, Any]) -> bool:
    """Whether the model has any recurrent layer."""
    return bool(c["delta"]["layers"] or c["conv"]["layers"] or c["ssm"]["layers"] or c["mamba1"]["layers"])


def recurrent_layer(
    c: dict[str, Any],
    w: dict[str, np.ndarray],
    i: int,
    h: np.ndarray,
    positions: np.ndarray,
    seq_start: Sequence[int],
    states: Sequence[DeltaState],
    q8: Any,
) -> np.ndarray:
    """Layer i's output (before the residual) when it is a recurrent layer: a delta-net (Qwen3.5), a
    short convolution (LFM2) or a Mamba-2 layer (Granite 4.0-H)."""
    layer = (
        delta_net
        if i in c["delta"]["layers"]
        else mamba2
        if i in c["ssm"]["layers"]
        else mamba1
        if i in c["mamba1"]["layers"]
        else short_conv
    )
    return layer(c, w, i, h, positions, seq_start, states, q8)
