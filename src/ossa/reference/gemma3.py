"""The Gemma 3 (text) and Gemma 2 forward pass in plain NumPy, written to be read (twin of
``csrc/model/gemma3.cpp``).

What differs from the Llama family (``model.forward``):
  - embeddings multiplied by sqrt(n_embd) (``embd_scale``);
  - RMSNorm over each head of q and k (Gemma 3; ``qk_norm``); every norm weight is the factor
    applied (HF's 1 + w, which the loader has already added);
  - each sublayer's output normalised again before it joins the residual stream (Gemma 2 and 3;
    Gemma 1 adds it as Llama does);
  - sliding-window layers (``layer_sliding``, ``sliding_window``) rotated with their own RoPE base
    (``rope_theta_swa``, unscaled), global layers with ``rope_theta`` and its scaling;
  - scores scaled by ``attn_scale`` (query_pre_attn_scalar^-1/2), and soft-capped (``attn_softcap``:
    Gemma 2 only; transformers ignores attn_logit_softcapping for Gemma 3); the final logits
    optionally soft-capped;
  - GeGLU: gelu_tanh(gate) * up, computed as g * sigmoid(2u), u = sqrt(2/pi) (g + 0.044715 g^3),
    which equals 0.5 g (1 + tanh(u)).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .model import apply_rope, attention, embed, finish_logits, rms_norm, rope_inv_freq


def gelu_tanh_glu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """PyTorch's gelu(gate, approximate="tanh") * up, in float32."""
    g = gate.astype(np.float32)
    inner = g + np.float32(0.044715) * (g * g * g)
    with np.errstate(over="ignore"):
        return (g / (np.float32(1) + np.exp(np.float32(-2 * math.sqrt(2 / math.pi)) * inner)) * up).astype(
            np.float32
        )


def forward_gemma3(c: dict[str, Any], w: dict[str, np.ndarray], token_ids: list[int], q8: Any) -> np.ndarray:
    """Logits [len(token_ids), n_vocab] of one sequence from position 0 (``q8``: the matmul input
    rounding of ``model.activation_rounding``)."""
    n_head, n_head_kv, hd, eps = c["n_head"], c["n_head_kv"], c["head_dim"], c["rms_eps"]
    post_norms = c["arch"] in ("gemma2", "gemma3") and not c["no_post_norms"]  # (VaultGemma: none)
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.ndim != 1 or len(ids) == 0 or ids.min() < 0 or ids.max() >= c["n_vocab"]:
        raise ValueError("token ids must be a non-empty list of ids within the vocabulary")
    n = len(ids)
    positions = np.arange(n)
    inv_freq = rope_inv_freq(c)
    local = dict(c, rope_theta=c["rope_theta_swa"], rope_scaling={"type": "none"})
    inv_freq_local = rope_inv_freq(local) if c["rope_theta_swa"] > 0 else inv_freq
    x = embed(c, w, ids)
    for i in range(c["n_layer"]):
        p = f"layers.{i}."
        sliding = bool(c["layer_sliding"]) and c["layer_sliding"][i]
        freq = inv_freq_local if sliding else inv_freq
        h = rms_norm(x, w[p + "attn_norm"], eps)
        q = (q8(h, p + "wq") @ w[p + "wq"].T).reshape(n, n_head, hd)
        k = (q8(h, p + "wk") @ w[p + "wk"].T).reshape(n, n_head_kv, hd)
        v = (q8(h, p + "wv") @ w[p + "wv"].T).reshape(n, n_head_kv, hd)
        if c["qk_norm"]:
            q, k = rms_norm(q, w[p + "q_norm"], eps), rms_norm(k, w[p + "k_norm"], eps)
        q = apply_rope(q, positions, freq, c["rope_style"])
        k = apply_rope(k, positions, freq, c["rope_style"])
        window = c["sliding_window"] if sliding else 0
        a = attention(q, k, v, scale=c["attn_scale"], window=window, softcap=c["attn_softcap"])
        out = q8(a, p + "wo") @ w[p + "wo"].T
        x = x + (rms_norm(out, w[p + "post_attn_norm"], eps) if post_norms else out)
        h = rms_norm(x, w[p + "ffn_norm"], eps)
        gate, up = q8(h, p + "w_gate") @ w[p + "w_gate"].T, q8(h, p + "w_up") @ w[p + "w_up"].T
        f = q8(gelu_tanh_glu(gate, up), p + "w_down") @ w[p + "w_down"].T
        x = x + (rms_norm(f, w[p + "post_ffn_norm"], eps) if post_norms else f)
    return finish_logits(c, q8(rms_norm(x, w["output_norm"], eps), "output") @ w["output"].T)
