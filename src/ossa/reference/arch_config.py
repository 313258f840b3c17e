"""Hyper-parameters of the architectures beyond the Llama family (twin of ``csrc/model/arch_config.cpp``).

Each function returns the keyword arguments of ``loader._config`` for one architecture and source;
docs/models.md says what each key means and where llama.cpp's GGUF files leave a value implicit.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _pattern_layers(n_layer: int, pattern: int) -> list[bool]:
    """Gemma's sliding_window_pattern: layer i is global when (i + 1) % pattern == 0."""
    return [pattern > 0 and (i + 1) % pattern != 0 for i in range(n_layer)]


def _window(w: int) -> int:
    if not 0 <= w <= 1 << 30:
        raise ValueError(f"invalid sliding window {w}")
    return int(w)


def gemma3_gguf(md: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """Gemma 3 keys of a GGUF file (``common`` holds the shared ones already read). Where llama.cpp's
    converter writes nothing, llama.cpp's assumptions: every 6th layer global, local RoPE base 10000,
    scores scaled by head_dim^-1/2, or (n_embd / n_head)^-1/2 for the 62-layer 27B."""
    k = "gemma3."
    out: dict[str, Any] = {"rope_style": "neox", "qk_norm": True}
    out["embd_scale"] = math.sqrt(np.float32(common["n_embd"]))
    window = _window(md.get(k + "attention.sliding_window", 0))
    out["sliding_window"] = window
    if window > 0:
        pattern = md.get(k + "attention.sliding_window_pattern", 6)
        if isinstance(pattern, list):
            if len(pattern) != common["n_layer"]:
                raise ValueError("gemma3.attention.sliding_window_pattern must be one bool per layer")
            out["layer_sliding"] = [bool(v) for v in pattern]
        else:
            out["layer_sliding"] = _pattern_layers(common["n_layer"], pattern)
        out["rope_theta_swa"] = md.get(k + "rope.freq_base_swa", 10000.0)
    scale = md.get(k + "attention.scale", 0.0)
    if common["n_layer"] == 62:
        scalar = float(common["n_embd"] // common["n_head"])
    else:
        scalar = float(common["head_dim"])
    out["attn_scale"] = scale if scale > 0 else 1.0 / math.sqrt(scalar)
    out["final_softcap"] = md.get(k + "final_logit_softcapping", 0.0)
    return out


def gemma3_hf(c: dict[str, Any]) -> dict[str, Any]:
    """Every config key of a Gemma3TextConfig dict, with its defaults for the keys a file leaves out."""

    def get(key: str, default: Any) -> Any:
        v = c.get(key)
        return default if v is None else v

    if get("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise ValueError(f"hidden_activation {c['hidden_activation']!r} is not supported")
    if get("attention_bias", False) or get("use_bidirectional_attention", False):
        raise ValueError("attention_bias / use_bidirectional_attention are not supported")
    n_layer, n_embd = get("num_hidden_layers", 26), get("hidden_size", 2304)
    theta, theta_swa = get("rope_theta", 1e6), get("rope_local_base_freq", 1e4)
    scaling = c.get("rope_scaling")
    params = c.get("rope_parameters")
    if params is not None:
        full, local = params.get("full_attention"), params.get("sliding_attention")
        if isinstance(full, dict):
            theta, scaling = full.get("rope_theta", theta), full
        if isinstance(local, dict):
            theta_swa = local.get("rope_theta", theta_swa)
            if local.get("rope_type", "default") != "default":
                raise ValueError("RoPE scaling of the sliding layers is not supported")
    rope_scaling: dict[str, Any] = {}
    if isinstance(scaling, dict):
        stype = scaling.get("rope_type", scaling.get("type", "default"))
        if stype == "linear":
            rope_scaling = {"type": "linear", "factor": scaling.get("factor", 1.0)}
        elif stype != "default":
            raise ValueError(f"unsupported rope scaling type '{stype}'")
    window = _window(get("sliding_window", 4096))
    types = c.get("layer_types")
    if types is not None:
        if len(types) != n_layer or any(t not in ("sliding_attention", "full_attention") for t in types):
            raise ValueError("config 'layer_types' must list one known type per layer")
        sliding = [t == "sliding_attention" for t in types]
    else:
        sliding = _pattern_layers(n_layer, get("sliding_window_pattern", 6))
    return dict(
        n_vocab=get("vocab_size", 262208), n_embd=n_embd, n_layer=n_layer,
        n_head=get("num_attention_heads", 8), n_head_kv=get("num_key_value_heads", 4),
        head_dim=get("head_dim", 256), n_ff=get("intermediate_size", 9216),
        n_ctx_train=get("max_position_embeddings", 131072), rms_eps=get("rms_norm_eps", 1e-6),
        rope_theta=theta, rope_theta_swa=theta_swa, rope_scaling=rope_scaling, rope_style="neox",
        qkv_bias=False, qk_norm=True, tied_embeddings=bool(get("tie_word_embeddings", True)),
        sliding_window=window, layer_sliding=sliding if window > 0 else [],
        attn_scale=1.0 / math.sqrt(get("query_pre_attn_scalar", 256)),
        final_softcap=get("final_logit_softcapping", 0.0),
        embd_scale=math.sqrt(np.float32(n_embd)),
    )  # fmt: skip
