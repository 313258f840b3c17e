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


def _gguf_layer_pattern(md: dict[str, Any], key: str, n_layer: int) -> list[bool] | None:
    """A bool per layer under ``key`` (True: sliding); None when absent or an integer."""
    pattern = md.get(key)
    if not isinstance(pattern, list):
        return None
    if len(pattern) != n_layer or not all(isinstance(v, bool) for v in pattern):
        raise ValueError(f"{key} must be one bool per layer")
    return [bool(v) for v in pattern]


def _hf_layer_types(c: dict[str, Any], n_layer: int) -> list[bool] | None:
    """config.json's layer_types (True: "sliding_attention"); None when absent."""
    types = c.get("layer_types")
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != n_layer:
        raise ValueError("config 'layer_types' must list one type per layer")
    if any(t not in ("sliding_attention", "full_attention") for t in types):
        raise ValueError("config 'layer_types' holds an unknown layer type")
    return [t == "sliding_attention" for t in types]


def window_gguf(arch: str, md: dict[str, Any], n_layer: int) -> dict[str, Any]:
    """{arch}.attention.sliding_window over every layer, or the layers a bool per layer in
    {arch}.attention.sliding_window_pattern marks (llama.cpp's converter writes the key for Phi-3 only)."""
    key = arch + ".attention.sliding_window"
    window = _window(md.get(key, 0))
    if window == 0:
        return {"sliding_window": 0, "layer_sliding": []}
    layers = _gguf_layer_pattern(md, key + "_pattern", n_layer)
    if layers is None and arch == "olmo2":  # llama.cpp's OLMo 3 conversions: every 4th layer full
        layers = _sliding_but_every(n_layer, 4)
    return {"sliding_window": window, "layer_sliding": layers if layers is not None else [True] * n_layer}


def _exaone4_window(window: int, layers: list[bool]) -> dict[str, Any]:
    """EXAONE 4: with a window, the global layers attend without RoPE."""
    if not window:
        return {"sliding_window": 0, "layer_sliding": [], "layer_nope": []}
    return {"sliding_window": window, "layer_sliding": layers, "layer_nope": [not s for s in layers]}


def exaone4_hf(c: dict[str, Any], n_layer: int) -> dict[str, Any]:
    """EXAONE 4's config.json: sliding_window (transformers' default 4096; null: none) on the layers of
    layer_types, else of sliding_window_pattern (an int n: all but every n-th layer; a string of L / G
    letters repeated over the layers; default 4); the global layers without RoPE when windowed."""
    window = _window(4096 if "sliding_window" not in c else (c["sliding_window"] or 0))
    layers = _hf_layer_types(c, n_layer)
    if layers is None:
        pattern = c.get("sliding_window_pattern")
        pattern = 4 if pattern is None else pattern
        if isinstance(pattern, str):  # L: sliding, G: global, repeated over the layers
            if not pattern or set(pattern) - {"L", "G"}:
                raise ValueError("config 'sliding_window_pattern' must be an integer or L/G letters")
            layers = [pattern[i % len(pattern)] == "L" for i in range(n_layer)]
        elif isinstance(pattern, int) and not isinstance(pattern, bool) and pattern >= 1:
            layers = _sliding_but_every(n_layer, pattern)
        else:
            raise ValueError("config 'sliding_window_pattern' must be >= 1")
    return _exaone4_window(window, layers)


def exaone4_gguf(md: dict[str, Any], n_layer: int) -> dict[str, Any]:
    """EXAONE 4 from GGUF, as llama.cpp reads it: a window only for the 64-layer (32B) model
    (attention.sliding_window, default 4096) on all but every 4th layer; a sliding_window_pattern key
    names the layers for any depth."""
    key = "exaone4.attention.sliding_window"
    layers = _gguf_layer_pattern(md, key + "_pattern", n_layer)
    if layers is None and n_layer != 64:
        return _exaone4_window(0, [])
    if layers is None:
        layers = _sliding_but_every(n_layer, 4)
    return _exaone4_window(_window(md.get(key, 4096)), layers)


def exaone_moe_gguf(md: dict[str, Any], n_layer: int) -> dict[str, Any]:
    """EXAONE MoE (K-EXAONE) from GGUF (twin of exaone_moe_config_gguf): the MTP layers llama.cpp's
    converter appends left out; EXAONE 4's window (its pattern, else all but every 4th layer) and NoPE
    global layers where the file gives a window."""
    key = "exaone-moe.attention.sliding_window"
    n_layer = _without_mtp_layers("exaone-moe", md, n_layer)
    window = _window(md.get(key, 0))
    if not window:
        return {"n_layer": n_layer, **_exaone4_window(0, [])}
    layers = _gguf_layer_pattern(md, key + "_pattern", n_layer)
    layers = _sliding_but_every(n_layer, 4) if layers is None else layers
    return {"n_layer": n_layer, **_exaone4_window(window, layers)}


def olmo3_hf(c: dict[str, Any], n_layer: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """OLMo 3's window (sliding_window, default 4096, on the layers of layer_types, default all but
    every 4th) and its sliding layers' own unscaled RoPE base (``rope_theta_swa``, when their
    parameters differ from the full layers'); and the full layers' rope parameters (transformers 5's
    rope_parameters["full_attention"]; None: the top-level keys)."""
    window = _window(4096 if c.get("sliding_window") is None else c["sliding_window"])
    layers = _hf_layer_types(c, n_layer) or _sliding_but_every(n_layer, 4)
    params = c.get("rope_parameters") or {}
    full, local = params.get("full_attention"), params.get("sliding_attention")
    top = 10000.0 if c.get("rope_theta") is None else c["rope_theta"]
    full_theta = (full or {}).get("rope_theta", top)
    local_theta = (local or {}).get("rope_theta", top) if local is not None else full_theta
    scaling = full if full is not None else (c.get("rope_scaling") or {})
    scaled = scaling.get("rope_type", scaling.get("type", "default")) != "default"
    out: dict[str, Any] = {"sliding_window": window, "layer_sliding": layers if window else []}
    if window == 0:
        out["sliding_window"] = 0
    if window and (scaled or local_theta != full_theta):
        out["rope_theta_swa"] = float(np.float32(local_theta))
    return out, full


def window_hf(arch: str, c: dict[str, Any], n_layer: int) -> dict[str, Any]:
    """The sliding window of a config.json as transformers applies it: Mistral / Mixtral on every layer
    (a missing key: Mistral's default 4096, Mixtral's none; null: none); the Qwen families only with
    use_sliding_window, on the layers of layer_types, else from max_window_layers on (Qwen2, Qwen3),
    the even-numbered layers below it (Qwen2-MoE), or every layer (Qwen3-MoE)."""
    none: dict[str, Any] = {"sliding_window": 0, "layer_sliding": []}
    if arch == "starcoder2":  # (a window on every layer where the config sets one)
        window = _window(c.get("sliding_window") or 0)
        return {"sliding_window": window, "layer_sliding": [True] * n_layer} if window else none
    if arch in ("mistral", "mixtral"):
        default = 4096 if arch == "mistral" and "sliding_window" not in c else 0
        window = _window(default if c.get("sliding_window") is None else c["sliding_window"])
        every = [True] * n_layer
        if c.get("model_type") == "ministral" and window:  # (Ministral 8B: its layer_types)
            every = _hf_layer_types(c, n_layer) or every
        return {"sliding_window": window, "layer_sliding": every} if window and any(every) else none
    if c.get("model_type") == "cwm":  # CwmConfig: layer_types, else 3 of every 4 layers
        window = _window(8192 if "sliding_window" not in c else c.get("sliding_window") or 0)
        pattern = _hf_layer_types(c, n_layer) or [i % 4 != 0 for i in range(n_layer)]
        return {"sliding_window": window, "layer_sliding": pattern} if window and any(pattern) else none
    if arch == "dots1":  # Dots1Config: layer_types, else from max_window_layers (62) on
        window = _window(4096 if "sliding_window" not in c else c.get("sliding_window") or 0)
        layers = _hf_layer_types(c, n_layer)
        if layers is None:
            first = c.get("max_window_layers")
            layers = [i >= (62 if first is None else first) for i in range(n_layer)]
        return {"sliding_window": window, "layer_sliding": layers} if window and any(layers) else none
    if arch not in ("qwen2", "qwen3", "qwen2moe", "qwen3moe", "qwen2vl") or not c.get("use_sliding_window"):
        return none
    window = _window(4096 if c.get("sliding_window") is None else c["sliding_window"])
    if window == 0:
        return none
    if arch == "qwen3moe":
        return {"sliding_window": window, "layer_sliding": [True] * n_layer}
    layers = _hf_layer_types(c, n_layer)
    if layers is None:
        first = c.get("max_window_layers")
        first = 28 if first is None else first
        if arch == "qwen2moe":
            layers = [i % 2 == 0 and i < first for i in range(n_layer)]
        else:
            layers = [i >= first for i in range(n_layer)]
    return {"sliding_window": window, "layer_sliding": layers} if any(layers) else none


def yarn_hf(c: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    """YaRN from a config.json's rope_scaling / rope_parameters ``s``, as transformers'
    _compute_yarn_parameters reads it (see csrc/model/arch_config.h, yarn_config_hf)."""

    def get(d: dict[str, Any], key: str, default: Any) -> Any:
        v = d.get(key)
        return default if v is None else v

    max_pos = get(c, "max_position_embeddings", 0)
    original = get(c, "original_max_position_embeddings", get(s, "original_max_position_embeddings", max_pos))
    if not isinstance(original, int) or not 0 < original <= 1 << 30:
        raise ValueError("invalid original_max_position_embeddings for YaRN")
    factor = float(get(s, "factor", (max_pos or original) / original))
    if not (factor > 0 and math.isfinite(factor)):
        raise ValueError("invalid YaRN factor")

    def mscale(m: float) -> float:
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    attn = get(s, "attention_factor", 0.0)
    if attn <= 0:
        m, m_all = get(s, "mscale", 0.0), get(s, "mscale_all_dim", 0.0)
        attn = mscale(m) / mscale(m_all) if m and m_all else mscale(1.0)
    return {
        "type": "yarn", "factor": factor, "original_max_position": original, "attn_factor": attn,
        "beta_fast": get(s, "beta_fast", 0) or 32.0, "beta_slow": get(s, "beta_slow", 0) or 1.0,
        "truncate": bool(get(s, "truncate", True)),
    }  # fmt: skip


def _positive(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
        raise ValueError(f"invalid {name} {v!r}")
    return float(v)


def granite_gguf(md: dict[str, Any], arch: str = "granite") -> dict[str, Any]:
    """Granite's multipliers in GGUF (llama.cpp's keys under the architecture's prefix, granite or
    granitemoe; absent: 1, and head_dim^-1/2 for scores)."""
    k = arch + "."
    scale = md.get(k + "attention.scale", 0.0)
    return {
        "embd_scale": _positive(md.get(k + "embedding_scale", 1.0), "embedding_scale"),
        "residual_scale": _positive(md.get(k + "residual_scale", 1.0), "residual_scale"),
        "logit_scale": _positive(md.get(k + "logit_scale", 1.0), "logit_scale"),
        "attn_scale": 0.0 if scale == 0 else _positive(scale, "attention.scale"),
    }


def granite_hf(c: dict[str, Any]) -> dict[str, Any]:
    """Granite's config.json multipliers (GraniteConfig's defaults: 1; attention_multiplier is the
    scores' scale itself)."""

    def get(key: str) -> float:
        return _positive(1.0 if c.get(key) is None else c[key], key)

    return {
        "embd_scale": get("embedding_multiplier"), "residual_scale": get("residual_multiplier"),
        "attn_scale": get("attention_multiplier"), "logit_scale": get("logits_scaling"),
    }  # fmt: skip


def granite_swa_hf(c: dict[str, Any], n_layer: int, scaled: bool) -> dict[str, Any]:
    """GraniteSWA / GraniteMoeSWA (twin of granite_swa_config_hf): a window (sliding_window, default 128,
    null none) on the layers of layer_types (default all but every 4th from layer 0), sinks, and
    layer_rope_theta (0: NoPE; one base for the full layers, one for the sliding ones, the latter as
    rope_theta_swa: refused under rope scaling)."""
    window = _window(128 if "sliding_window" not in c else (c["sliding_window"] or 0))
    layers: list[bool] = []
    if window:
        layers = _hf_layer_types(c, n_layer) or [i % 4 != 0 for i in range(n_layer)]
    out: dict[str, Any] = {"sliding_window": window, "layer_sliding": layers, "attn_sinks": True}
    thetas = c.get("layer_rope_theta")
    if thetas is None:
        return out
    if not isinstance(thetas, list) or len(thetas) != n_layer:
        raise ValueError("config 'layer_rope_theta' must list one base per layer")
    bases: dict[bool, float] = {}
    for i, t in enumerate(thetas):
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t >= 0 or not np.isfinite(t):
            raise ValueError("config 'layer_rope_theta' holds an invalid base")
        if t == 0:
            continue
        sliding = bool(layers) and layers[i]
        if bases.setdefault(sliding, float(t)) != float(t):
            raise ValueError(
                "config 'layer_rope_theta' gives layers of one attention type different RoPE bases"
            )
    nope = [t == 0 for t in thetas]
    if any(nope):
        out["layer_nope"] = nope
    full, local = bases.get(False), bases.get(True)
    if full is not None or local is not None:
        out["rope_theta"] = float(np.float32(full if full is not None else local))
    if full is not None and local is not None and local != full:
        if scaled:
            raise ValueError(
                "config 'layer_rope_theta' gives the sliding layers their own RoPE base under rope scaling"
            )
        out["rope_theta_swa"] = float(np.float32(local))
    return out


def gpt_oss_gguf(md: dict[str, Any], common: dict[str, Any], o_bias: bool) -> dict[str, Any]:
    """gpt-oss: attention sinks, the output bias where the file has it, the window on the even-numbered
    layers (llama.cpp's hard-coded pattern, unless a sliding_window_pattern key says otherwise)."""
    out = window_gguf("gpt-oss", md, common["n_layer"])
    if out["sliding_window"] and "gpt-oss.attention.sliding_window_pattern" not in md:
        out["layer_sliding"] = [i % 2 == 0 for i in range(common["n_layer"])]
    return {**out, "attn_sinks": True, "o_bias": o_bias}


def gpt_oss_hf(c: dict[str, Any], n_layer: int) -> dict[str, Any]:
    """gpt-oss from config.json: sliding_window (default 128) on the layers layer_types marks (default:
    the even-numbered ones), attention_bias (default true: q/k/v and output biases), sinks."""
    window = _window(128 if c.get("sliding_window") is None else c["sliding_window"])
    layers: list[bool] = []
    if window:
        layers = _hf_layer_types(c, n_layer) or [i % 2 == 0 for i in range(n_layer)]
    bias = c.get("attention_bias")
    return {"sliding_window": window, "layer_sliding": layers, "attn_sinks": True,
            "o_bias": True if bias is None else bool(bias)}  # fmt: skip


def _nope_every(n_layer: int, interval: int) -> list[bool]:
    return [interval > 0 and (i + 1) % interval == 0 for i in range(n_layer)]


def _nope_layers_hf(c: dict[str, Any], n_layer: int) -> list[bool]:
    """config.json's NoPE layers (twin of nope_layers_hf): no_rope_layers (1 = RoPE; at least one entry
    per layer) or, absent or empty, every no_rope_layer_interval-th (default 4)."""
    flags = c.get("no_rope_layers")
    if not flags:
        interval = c.get("no_rope_layer_interval")
        interval = 4 if interval is None else interval
        if not isinstance(interval, int) or interval < 0:
            raise ValueError(f"invalid no_rope_layer_interval {interval!r}")
        return _nope_every(n_layer, interval)
    if not isinstance(flags, list) or len(flags) < n_layer or any(f not in (0, 1) for f in flags[:n_layer]):
        raise ValueError("config 'no_rope_layers' must hold 0 or 1 per layer")
    return [f == 0 for f in flags[:n_layer]]


def _sliding_but_every(n_layer: int, interval: int) -> list[bool]:
    """A window on every layer but each interval-th (OLMo 3, EXAONE 4's hybrid layout)."""
    return [not v for v in _nope_every(n_layer, interval)]


def smollm3_gguf(n_layer: int) -> dict[str, Any]:
    """SmolLM3 from GGUF: every 4th layer without RoPE, as llama.cpp hard-codes (no key holds it)."""
    return {"layer_nope": _nope_every(n_layer, 4)}


def smollm3_hf(c: dict[str, Any], n_layer: int) -> dict[str, Any]:
    """SmolLM3's config.json: the NoPE layers (no_rope_layers, 1 = uses RoPE; else every
    no_rope_layer_interval-th, default 4) and the window of use_sliding_window (the layers of
    layer_types, by default the NoPE ones)."""
    nope = _nope_layers_hf(c, n_layer)
    out: dict[str, Any] = {"layer_nope": nope if any(nope) else [], "sliding_window": 0, "layer_sliding": []}
    if not c.get("use_sliding_window"):
        return out
    window = _window(c.get("sliding_window") or 0)
    layers = _hf_layer_types(c, n_layer)
    if layers is None:
        layers = nope
    if window and any(layers):
        out.update(sliding_window=window, layer_sliding=layers)
    return out


def gemma3_gguf(md: dict[str, Any], common: dict[str, Any], arch: str = "gemma3") -> dict[str, Any]:
    """Gemma 3 (or Gemma 2: ``arch``) keys of a GGUF file (``common`` holds the shared ones already
    read). Where llama.cpp's converter writes nothing, llama.cpp's assumptions: Gemma 3 every 6th layer
    global with local RoPE base 10000, Gemma 2 every other layer sliding (from the first) with one
    RoPE base; scores scaled by head_dim^-1/2, or (n_embd / n_head)^-1/2 for the 27B models (62 layers
    for Gemma 3, 46 for Gemma 2). Gemma 2 also soft-caps its attention scores. Gemma 1 (``gemma``):
    no window, no caps, no q/k norms."""
    gemma2, gemma1 = arch == "gemma2", arch == "gemma"
    k = arch + "."
    out: dict[str, Any] = {"rope_style": "neox", "qk_norm": arch == "gemma3"}
    out["embd_scale"] = math.sqrt(np.float32(common["n_embd"]))
    window = 0 if gemma1 else _window(md.get(k + "attention.sliding_window", 0))
    out["sliding_window"] = window
    if window > 0:
        layers = _gguf_layer_pattern(md, k + "attention.sliding_window_pattern", common["n_layer"])
        if layers is None:
            pattern = md.get(k + "attention.sliding_window_pattern", 2 if gemma2 else 6)
            layers = _pattern_layers(common["n_layer"], pattern)
        out["layer_sliding"] = layers
        if not gemma2:
            out["rope_theta_swa"] = md.get(k + "rope.freq_base_swa", 10000.0)
    scale = md.get(k + "attention.scale", 0.0)
    if not gemma1 and common["n_layer"] == (46 if gemma2 else 62):
        scalar = float(common["n_embd"] // common["n_head"])
    else:
        scalar = float(common["head_dim"])
    out["attn_scale"] = scale if scale > 0 else 1.0 / math.sqrt(scalar)
    out["final_softcap"] = md.get(k + "final_logit_softcapping", 0.0)
    if gemma2:
        out["attn_softcap"] = md.get(k + "attn_logit_softcapping", 0.0)
    return out


def gemma3_hf(c: dict[str, Any], arch: str = "gemma3") -> dict[str, Any]:
    """Every config key of a Gemma3TextConfig dict (or a Gemma2Config / GemmaConfig one: ``arch``),
    with the class's defaults for the keys a file leaves out."""
    gemma1, gemma2 = arch == "gemma", arch == "gemma2"
    before3 = gemma1 or gemma2  # GemmaConfig and Gemma2Config share these defaults

    def get(key: str, default: Any) -> Any:
        v = c.get(key)
        return default if v is None else v

    def cap(key: str, default: float) -> float:  # absent: the class's default; null: no capping
        return 0.0 if key in c and c[key] is None else get(key, default)

    # Gemma 1 configs name it hidden_act (often "gelu", meaning the tanh approximation, as vLLM and
    # llama.cpp take it).
    act = get("hidden_activation", get("hidden_act", "gelu_pytorch_tanh") if gemma1 else "gelu_pytorch_tanh")
    if act != "gelu_pytorch_tanh" and not (gemma1 and act == "gelu"):
        raise ValueError(f"hidden_activation {act!r} is not supported")
    if get("attention_bias", False) or get("use_bidirectional_attention", False):
        raise ValueError("attention_bias / use_bidirectional_attention are not supported")
    n_layer, n_embd = get("num_hidden_layers", 26), get("hidden_size", 2304)
    theta = get("rope_theta", 1e4 if before3 else 1e6)
    theta_swa = 0.0 if before3 else get("rope_local_base_freq", 1e4)
    scaling = c.get("rope_scaling")
    params = c.get("rope_parameters")
    if params is not None:
        full, local = params.get("full_attention"), params.get("sliding_attention")
        if full is None and local is None:  # one set of parameters for every layer
            theta, scaling = params.get("rope_theta", theta), params
            theta_swa = 0.0 if before3 else theta
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
    window = 0 if gemma1 else _window(get("sliding_window", 4096))
    sliding = _hf_layer_types(c, n_layer)
    if sliding is None:
        sliding = _pattern_layers(n_layer, get("sliding_window_pattern", 2 if before3 else 6))
    return dict(
        n_vocab=get("vocab_size", 256000 if before3 else 262208), n_embd=n_embd, n_layer=n_layer,
        n_head=get("num_attention_heads", 8), n_head_kv=get("num_key_value_heads", 4),
        head_dim=get("head_dim", 256), n_ff=get("intermediate_size", 9216),
        n_ctx_train=get("max_position_embeddings", 8192 if before3 else 131072),
        rms_eps=get("rms_norm_eps", 1e-6), rope_theta=theta, rope_theta_swa=theta_swa,
        rope_scaling=rope_scaling, rope_style="neox", qkv_bias=False, qk_norm=arch == "gemma3",
        tied_embeddings=bool(get("tie_word_embeddings", True)),
        sliding_window=window, layer_sliding=sliding if window > 0 else [],
        attn_scale=1.0 / math.sqrt(get("query_pre_attn_scalar", get("head_dim", 256) if gemma1 else 256)),
        final_softcap=cap("final_logit_softcapping", 30.0 if gemma2 else 0.0),
        attn_softcap=cap("attn_logit_softcapping", 50.0) if gemma2 else 0.0,
        embd_scale=math.sqrt(np.float32(n_embd)),
    )  # fmt: skip


def _longrope_attn_factor(factor: float, original: int) -> float:
    """transformers' default: sqrt(1 + ln(factor) / ln(original)), or 1 for factor <= 1."""
    if factor <= 1.0 or original <= 1:
        return 1.0
    return math.sqrt(1 + math.log(factor) / math.log(original))


def rotated(dims: int, head_dim: int) -> int:
    """The rotated dimensions of a partial RoPE: 0 when the whole head rotates; an odd, empty or too-wide
    count refused (twin of arch_config.cpp's rotated_dims)."""
    if not (0 < dims <= head_dim and dims % 2 == 0):
        raise ValueError(f"invalid rotated dimensions {dims}")
    return 0 if dims == head_dim else int(dims)


def _check_longrope(scaling: dict[str, Any], rope_dim: int, head_dim: int) -> None:
    half = (rope_dim or head_dim) // 2
    factors = list(scaling["long_factor"]) + list(scaling["short_factor"])
    if len(scaling["long_factor"]) != half or len(scaling["short_factor"]) != half:
        raise ValueError(f"LongRoPE factors must hold {half} values each")
    if not all(np.isfinite(v) and v > 0 for v in factors):
        raise ValueError("invalid LongRoPE factor")


def phi3_gguf(
    md: dict[str, Any], common: dict[str, Any], tensor: Any, names: set[Any], arch: str = "phi3"
) -> dict[str, Any]:
    """Phi-3 keys of a GGUF file (Phi-3.5-MoE's alike): partial rotary (rope.dimension_count), LongRoPE
    from llama.cpp's rope_factors_long / rope_factors_short tensors, attention.sliding_window over every
    layer."""
    k = arch + "."
    out: dict[str, Any] = {"rope_style": "neox"}
    out["rope_dim"] = rotated(md.get(k + "rope.dimension_count", common["head_dim"]), common["head_dim"])
    out.update(window_gguf(arch, md, common["n_layer"]))
    out.update(_longrope_gguf(arch, md, {**common, **out}, tensor, names))
    return out


def phi3_hf(c: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """Phi-3 keys of a config.json: partial_rotary_factor, "longrope" / "su" rope scaling, sliding_window."""
    if (c.get("hidden_act") or "silu") != "silu":
        raise ValueError(f"hidden_act {c['hidden_act']!r} is not supported")
    s = c.get("rope_scaling") or c.get("rope_parameters") or {}
    partial = s.get("partial_rotary_factor", c.get("partial_rotary_factor") or 1.0)
    if not 0 < partial <= 1:
        raise ValueError("invalid partial_rotary_factor")
    out: dict[str, Any] = {"rope_style": "neox"}
    out["rope_dim"] = rotated(int(common["head_dim"] * partial), common["head_dim"])
    window = _window(c.get("sliding_window") or 0)
    out["sliding_window"] = window
    out["layer_sliding"] = [True] * common["n_layer"] if window > 0 else []
    return {**out, **longrope_hf(c, {**common, **out})}


def longrope_hf(c: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """LongRoPE ("longrope" / "su") from a config.json's rope scaling (Phi-3's, MiniCPM3's; twin of
    arch_config.cpp's longrope_config_hf): factors over the rotated dimensions, the original context,
    the cos / sin factor; {} for another type."""
    out: dict[str, Any] = {}
    s = c.get("rope_scaling") or c.get("rope_parameters") or {}
    if s.get("rope_type", s.get("type")) in ("longrope", "su"):
        # The top-level key wins (transformers copies it into rope_parameters).
        original = c.get("original_max_position_embeddings") or s.get("original_max_position_embeddings")
        original = max(1, min(original or common["n_ctx_train"], 1 << 30))
        factor = s.get("factor") or common["n_ctx_train"] / original
        scaling = {
            "type": "longrope",
            "original_max_position": original,
            "long_factor": list(s["long_factor"]),
            "short_factor": list(s["short_factor"]),
            "attn_factor": s.get("attention_factor") or _longrope_attn_factor(factor, original),
        }
        _check_longrope(scaling, common["rope_dim"], common["head_dim"])
        out["rope_scaling"] = scaling
    return out


def minicpm3_hf(c: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """MiniCPM3 (twin of minicpm3_config_hf): DeepSeek V2's latent attention with rotate_half RoPE,
    LongRoPE, and Granite's multipliers: embeddings times scale_emb, each sublayer's output times
    scale_depth / sqrt(layers), logits divided by hidden / dim_model_base (null: 1)."""
    out = dict(deepseek2_hf(c, common), rope_style="neox")
    out.update(longrope_hf(c, {**common, **out}))
    out.update(_minicpm_multipliers(c, common, 12.0, 1.4, 256.0))
    return out


def _minicpm_multipliers(
    c: dict[str, Any], common: dict[str, Any], emb: float, depth_dflt: float, base_dflt: float
) -> dict[str, Any]:
    """MiniCPM's three multipliers from config.json (twin of arch_config.cpp's minicpm_multipliers_hf):
    embeddings times scale_emb, each sublayer's output times scale_depth / sqrt(layers), logits divided by
    hidden / dim_model_base (a null scale_depth / dim_model_base: 1); the config class's defaults given."""
    n, e = common["n_layer"], common["n_embd"]
    depth = (
        math.sqrt(n) if "scale_depth" in c and c["scale_depth"] is None else c.get("scale_depth", depth_dflt)
    )
    base = e if "dim_model_base" in c and c["dim_model_base"] is None else c.get("dim_model_base", base_dflt)
    out = {"embd_scale": float(np.float32(c.get("scale_emb", emb))),
           "residual_scale": float(np.float32(depth / math.sqrt(n))),
           "logit_scale": float(np.float32(e / base))}  # fmt: skip
    if not (out["embd_scale"] > 0 and out["residual_scale"] > 0 and 0 < out["logit_scale"] < math.inf):
        raise ValueError("invalid scale_emb, scale_depth or dim_model_base")
    return out


def minicpm_hf(c: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """MiniCPM 1 / 2 / 4 (model_type minicpm; twin of minicpm_config_hf): Llama's layers with Granite's
    multipliers from scale_emb, scale_depth, dim_model_base (MiniCPMConfig's defaults 1, 1, 1) and LongRoPE
    where rope_scaling says; MiniCPM-MoE (num_experts) refused."""
    if (c.get("num_experts") or 0) > 0:
        raise ValueError("MiniCPM with experts (num_experts) is not supported")
    out = longrope_hf(c, {"rope_dim": 0, **common})
    out.update(_minicpm_multipliers(c, common, 1.0, 1.0, 1.0))
    return out


def phimoe_hf(c: dict[str, Any], scaling: dict[str, Any] | None) -> dict[str, Any]:
    """Phi-3.5-MoE from a config.json, after phi3_hf: LayerNorms with biases, q / k / v / o biases where
    attention_bias, LongRoPE's factor on cos / sin from short_mscale (long_mscale must equal it; twin of
    arch_config.cpp's phimoe_config_hf)."""
    bias = bool(c.get("attention_bias") or False)
    out: dict[str, Any] = {"layer_norm": True, "norm_bias": True, "qkv_bias": bias, "o_bias": bias}
    s = c.get("rope_scaling") or c.get("rope_parameters") or {}
    short = s.get("short_mscale") or 0.0
    if scaling is not None and scaling.get("type") == "longrope" and short > 0:
        if (s.get("long_mscale") or short) != short:
            raise ValueError("short_mscale and long_mscale differ (not supported)")
        out["rope_scaling"] = dict(scaling, attn_factor=short)
    return out


def _mla(
    common: dict[str, Any], q_lora: int, kv_lora: int, nope: int, rope: int, v: int, mscale_coef: float
) -> dict[str, Any]:
    """DeepSeek's latent attention into the config (twin of arch_config.cpp's mla_config): one cached
    row of qk_rope + kv_lora_rank values per token (head_dim, one KV head), its first qk_rope rotated,
    scores scaled by 1/sqrt(qk_nope + qk_rope) times YaRN's mscale squared."""
    checks = (("q_lora_rank", q_lora, 0), ("kv_lora_rank", kv_lora, 1), ("qk_nope_head_dim", nope, 1),
              ("qk_rope_head_dim", rope, 2), ("v_head_dim", v, 1))  # fmt: skip
    for name, x, lo in checks:
        if not lo <= x <= 65536:
            raise ValueError(f"invalid {name} {x}")
    if rope % 2:
        raise ValueError(f"odd qk_rope_head_dim {rope}")
    scaling = common.get("rope_scaling") or {}
    mscale = 1.0
    if scaling.get("type") == "yarn" and scaling["factor"] > 1 and mscale_coef > 0:
        mscale = 1.0 + mscale_coef * math.log(float(np.float32(scaling["factor"])))
    return {
        "mla": {"q_lora_rank": q_lora, "kv_lora_rank": kv_lora, "qk_nope": nope, "qk_rope": rope,
                "v_head_dim": v},
        "head_dim": rope + kv_lora, "n_head_kv": 1, "rope_dim": rope,
        "attn_scale": mscale * mscale / math.sqrt(nope + rope),
    }  # fmt: skip


def glm4moe_gguf(
    md: dict[str, Any], common: dict[str, Any], names: set[Any], arch: str = "glm4moe"
) -> dict[str, Any]:
    """GLM-4.5 / 4.6 from GGUF (Ling 2.0's bailingmoe2 alike; twin of glm4moe_config_gguf): NeoX RoPE on
    rope.dimension_count dimensions; the last nextn_predict_layers blocks (the multi-token-prediction
    layer) are not run; q / k norms where the file has them."""
    k = arch + "."
    dims = md.get(k + "rope.dimension_count", common["head_dim"])
    return {"rope_style": "neox", "rope_dim": rotated(dims, common["head_dim"]),
            "n_layer": _without_mtp_layers(arch, md, common["n_layer"]),
            "qk_norm": "blk.0.attn_q_norm.weight" in names}  # fmt: skip


def _without_mtp_layers(arch: str, md: dict[str, Any], n_layer: int) -> int:
    """The layers run: block_count less the multi-token-prediction layers llama.cpp's converter
    appends (nextn_predict_layers; twin of skip_mtp_layers)."""
    nextn = md.get(arch + ".nextn_predict_layers", 0)
    if not 0 <= nextn < n_layer:
        raise ValueError(f"invalid {arch}.nextn_predict_layers {nextn}")
    return int(n_layer - nextn)


def _temperature(scale: float, length: int, scale_name: str, length_name: str) -> dict[str, Any]:
    """Llama 4's attention temperature from its two values (0 scale: off; twin of set_temperature)."""
    if not scale:
        return {}
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"invalid {scale_name} {scale}")
    if length < 1:
        raise ValueError(f"{scale_name} without {length_name}")
    return {"attn_temp_scale": float(np.float32(scale)), "attn_temp_length": int(length)}


def glm4moe_hf(c: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """GLM-4.5 / 4.6 from a config.json (twin of glm4moe_config_hf): partial_rotary_factor (in
    rope_parameters or top-level; Glm4MoeConfig's default 0.5), attention_bias, use_qk_norm."""
    params = c.get("rope_parameters") or {}
    top = c.get("partial_rotary_factor")
    partial = params.get("partial_rotary_factor", 0.5 if top is None else top)  # (variants: glm_variant_keys)
    if not 0 < partial <= 1:
        raise ValueError("invalid partial_rotary_factor")
    return {"rope_style": "neox", "rope_dim": rotated(int(common["head_dim"] * partial), common["head_dim"]),
            "qkv_bias": bool(c.get("attention_bias")), "qk_norm": bool(c.get("use_qk_norm"))}  # fmt: skip


def glm4_gguf(md: dict[str, Any], common: dict[str, Any], arch: str = "glm4") -> dict[str, Any]:
    """GLM-4 (dense; ChatGLM3 / GLM-4-9B-Chat: chatglm) from GGUF (twin of glm4_config_gguf): RoPE on
    interleaved pairs of the first rope.dimension_count dimensions."""
    dims = md.get(arch + ".rope.dimension_count", common["head_dim"])
    return {"rope_style": "interleaved", "rope_dim": rotated(dims, common["head_dim"])}


def glm4_hf(c: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """GLM-4 (dense) from a config.json (twin of glm4_config_hf): partial_rotary_factor as GLM-4.5's,
    on interleaved pairs; attention_bias (Glm4Config's default true); no q / k norms."""
    out = glm4moe_hf(c, common)
    bias = c.get("attention_bias")
    out.update(rope_style="interleaved", qkv_bias=True if bias is None else bool(bias), qk_norm=False)
    return out


def temperature_gguf(arch: str, md: dict[str, Any]) -> dict[str, Any]:
    """Llama 4's attention temperature (twin of temperature_config_gguf)."""
    k = arch + "."
    # (Ministral 3's files carry no length: llama.cpp's mistral3 takes the original context's)
    default = md.get(k + "rope.scaling.original_context_length", md.get(k + "context_length", 0))
    return _temperature(md.get(k + "attention.temperature_scale", 0.0),
                        md.get(k + "attention.temperature_length", default if arch == "mistral3" else 0),
                        k + "attention.temperature_scale", k + "attention.temperature_length")  # fmt: skip


def llama4_gguf(md: dict[str, Any], n_layer: int, rope_theta: float) -> dict[str, Any]:
    """Llama 4 (text) from GGUF, as llama.cpp reads it (twin of llama4_config_gguf): every 4th layer
    NoPE with full attention and the temperature (0.1, floor 8192, positions from 1), the others
    chunked over 8192 positions (sliding_window_pattern: another period); q / k normalised after RoPE
    unless the model has 128 experts; sliding_window 0: RoPE and full attention everywhere."""
    out: dict[str, Any] = {"rope_style": "interleaved", "qk_l2_norm": md.get("llama4.expert_count", 0) != 128,
                           "sliding_window": 0, "layer_sliding": [], "layer_nope": []}  # fmt: skip
    if "llama4.attention.sliding_window" in md and md["llama4.attention.sliding_window"] == 0:
        return out
    if md.get("llama4.rope.freq_base_swa", rope_theta) != rope_theta:
        raise ValueError("a chunked-attention RoPE base other than llama4.rope.freq_base is not supported")
    key = "llama4.attention.sliding_window_pattern"
    chunked = _gguf_layer_pattern(md, key, n_layer)
    if chunked is None:  # a period: the last layer of each is full attention
        period = md.get(key, 4)
        if not 0 <= period <= n_layer + 1:
            raise ValueError(f"invalid {key}")
        chunked = [period == 0 or i % period < period - 1 for i in range(n_layer)]
    nope = _nope_every(n_layer, 4)
    out.update(layer_nope=nope if any(nope) else [], attn_temp_scale=float(np.float32(0.1)),
               attn_temp_length=8192, attn_temp_offset=1, attn_temp_nope=True)  # fmt: skip
    if any(chunked):
        out.update(sliding_window=8192, attn_chunked=True, layer_sliding=chunked)
    return out


def llama4_hf(c: dict[str, Any], n_layer: int) -> dict[str, Any]:
    """Llama 4 (text) from a config.json (twin of llama4_config_hf): no_rope_layers (1 = RoPE; absent
    or empty: every no_rope_layer_interval-th layer NoPE), layer_types / attention_chunk_size (chunked
    where a layer has RoPE), attn_temperature_tuning (a bool, or a number: nonzero = on) with attn_scale
    / floor_scale, use_qk_norm, the dense layers' intermediate_size_mlp."""
    n_ff = c.get("intermediate_size_mlp", 16384)
    if not isinstance(n_ff, int) or n_ff < 1:
        raise ValueError("invalid intermediate_size_mlp")
    use_qk = c.get("use_qk_norm")
    out: dict[str, Any] = {"rope_style": "interleaved", "n_ff": n_ff}
    out["qk_l2_norm"] = True if use_qk is None else use_qk
    nope = _nope_layers_hf(c, n_layer)
    chunk = _window(c["attention_chunk_size"] if "attention_chunk_size" in c and c["attention_chunk_size"]
                    is not None else (0 if "attention_chunk_size" in c else 8192))  # fmt: skip
    types = c.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n_layer:
            raise ValueError("config 'layer_types' must list one type per layer")
        if any(t not in ("chunked_attention", "full_attention") for t in types):
            raise ValueError("config 'layer_types' holds an unknown layer type")
        chunked = [t == "chunked_attention" for t in types]
    else:
        chunked = [chunk > 0 and not n for n in nope]
    if chunk > 0 and any(chunked):
        out.update(sliding_window=chunk, attn_chunked=True, layer_sliding=chunked)
    else:
        out.update(sliding_window=0, layer_sliding=[])
    tuning = c.get("attn_temperature_tuning")
    if (tuning is None or bool(tuning)) and any(nope):
        scale, floor = c.get("attn_scale"), c.get("floor_scale")
        out.update(_temperature(0.1 if scale is None else scale, 8192 if floor is None else floor,
                                "attn_scale", "floor_scale"))  # fmt: skip
        out.update(attn_temp_offset=1, attn_temp_nope=True)
    out["layer_nope"] = nope if any(nope) else []
    return out


def _cohere(arch: str, logit_scale: float, window: int, sliding: list[bool]) -> dict[str, Any]:
    """Cohere's shared keys (twin of cohere_common)."""
    if not (np.isfinite(logit_scale) and logit_scale > 0):
        raise ValueError(f"invalid logit_scale {logit_scale}")
    out: dict[str, Any] = {"rope_style": "interleaved", "layer_norm": True, "parallel_block": True,
                           "logit_scale": float(np.float32(1.0 / logit_scale)), "sliding_window": 0,
                           "layer_sliding": [], "layer_nope": []}  # fmt: skip
    if arch == "cohere2" and window:
        nope = [not s for s in sliding]
        out.update(sliding_window=window, layer_sliding=sliding, layer_nope=nope if any(nope) else [])
    return out


def cohere_gguf(arch: str, md: dict[str, Any], n_layer: int, qk_norm: bool) -> dict[str, Any]:
    """Cohere from GGUF (twin of cohere_config_gguf): layer_norm_epsilon, logit_scale, the q / k norms
    where the file has them, cohere2's window over llama.cpp's fixed pattern (3 sliding, 1 full)."""
    k = arch + "."
    sliding = _gguf_layer_pattern(md, k + "attention.sliding_window_pattern", n_layer)
    out = _cohere(arch, md.get(k + "logit_scale", 1.0), _window(md.get(k + "attention.sliding_window", 0)),
                  sliding if sliding is not None else _pattern_layers(n_layer, 4))  # fmt: skip
    out.update(rms_eps=float(np.float32(md.get(k + "attention.layer_norm_epsilon", 1e-5))), qk_norm=qk_norm,
               qk_norm_heads=qk_norm)  # fmt: skip
    return out


def cohere_hf(arch: str, c: dict[str, Any], n_layer: int) -> dict[str, Any]:
    """Cohere from a config.json (twin of cohere_config_hf): layer_norm_eps, logit_scale, use_qk_norm
    (Command R+), cohere2's sliding_window over layer_types (else every sliding_window_pattern-th full)."""
    qk = arch != "cohere2" and bool(c.get("use_qk_norm", False))
    window = (
        0 if "sliding_window" in c and c["sliding_window"] is None else _window(c.get("sliding_window", 4096))
    )
    sliding = _hf_layer_types(c, n_layer)
    if sliding is None:
        pattern = c.get("sliding_window_pattern")
        sliding = _pattern_layers(n_layer, 4 if pattern is None else pattern)
    out = _cohere(arch, c.get("logit_scale", 0.0625), window, sliding)
    eps = c.get("layer_norm_eps")
    out.update(rms_eps=float(np.float32(1e-5 if eps is None else eps)), qk_norm=qk, qk_norm_heads=qk)
    return out


def _minimax_rope(dims: int, head_dim: int) -> dict[str, Any]:
    if not (2 <= dims <= head_dim and dims % 2 == 0):
        raise ValueError(f"invalid rotary_dim {dims}")
    return {"qk_norm": True, "rope_style": "neox", "rope_dim": 0 if dims == head_dim else dims}


def minimax_gguf(md: dict[str, Any], head_dim: int) -> dict[str, Any]:
    """MiniMax-M2 from GGUF (twin of minimax_config_gguf): q / k norms over all heads, NeoX RoPE on
    rope.dimension_count dimensions."""
    return _minimax_rope(md.get("minimax-m2.rope.dimension_count", head_dim), head_dim)


def minimax_hf(c: dict[str, Any], head_dim: int) -> dict[str, Any]:
    """MiniMax-M2 from a config.json (twin of minimax_config_hf): rotary_dim, else partial_rotary_factor
    (rope_parameters' or top-level) times head_dim."""
    partial = (c.get("rope_parameters") or {}).get(
        "partial_rotary_factor", c.get("partial_rotary_factor", 1.0)
    )
    dims = c.get("rotary_dim")
    return _minimax_rope(int(partial * head_dim) if dims is None else dims, head_dim)


def mistral3_gguf(md: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """Ministral 3 from GGUF (twin of mistral3_config_gguf): YaRN's cos/sin factor divided out as
    llama.cpp's mistral3 graph does (1); attention.scale where set."""
    out: dict[str, Any] = {}
    if common["rope_scaling"].get("type") == "yarn":
        out["rope_scaling"] = dict(common["rope_scaling"], attn_factor=1.0)
    scale = md.get("mistral3.attention.scale", 0.0)
    if scale:
        out["attn_scale"] = float(np.float32(scale))
    return out


def temperature_hf(rope: dict[str, Any]) -> dict[str, Any]:
    """Llama 4's attention temperature from a config.json (Ministral 3, Mistral 4; twin of
    temperature_config_hf): rope_parameters' llama_4_scaling_beta over original_max_position_embeddings."""
    beta, length = rope.get("llama_4_scaling_beta") or 0.0, rope.get("original_max_position_embeddings") or 0
    return _temperature(beta, length, "llama_4_scaling_beta", "original_max_position_embeddings")


def deepseek2_gguf(md: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """DeepSeek V2 / V3 from GGUF (twin of deepseek2_config_gguf): key_length_mla / value_length_mla
    where llama.cpp's converter splits kv_b, else key_length / value_length; RoPE on interleaved pairs;
    YaRN's cos/sin factor 1, its mscale (1 + yarn_log_multiplier * ln(factor)) on the scores."""
    k = "deepseek2."
    rope = md.get(k + "rope.dimension_count", 64)
    key_mla = md.get(k + "attention.key_length_mla", 0)
    nope = (key_mla if key_mla > 0 else md.get(k + "attention.key_length", 192)) - rope
    v = (
        md.get(k + "attention.value_length_mla", 0)
        if key_mla > 0
        else md.get(k + "attention.value_length", 128)
    )
    scaling = dict(common["rope_scaling"])
    if scaling:
        scaling["attn_factor"] = 1.0
    out = _mla(common, md.get(k + "attention.q_lora_rank", 0), md.get(k + "attention.kv_lora_rank", 0),
               nope, rope, v, md.get(k + "rope.scaling.yarn_log_multiplier", 0.0))  # fmt: skip
    n_layer = _without_mtp_layers("deepseek2", md, common["n_layer"])  # (GLM-4.7-Flash's files)
    return {**out, "rope_style": "interleaved", "rope_scaling": scaling, "n_layer": n_layer}


def deepseek2_hf(c: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """DeepseekV2Config / DeepseekV3Config (twin of deepseek2_config_hf): RoPE on interleaved pairs
    unless rope_interleave is false (V3's flag), YaRN's mscale_all_dim on the scores."""

    def get(key: str, default: Any) -> Any:
        v = c.get(key)
        return default if v is None else v

    coef = 0.0
    for key in ("rope_parameters", "rope_scaling"):
        s = c.get(key)
        if isinstance(s, dict) and coef == 0.0:
            coef = 0.1 * float(s.get("mscale_all_dim") or 0.0)
    out = _mla(common, get("q_lora_rank", 0), get("kv_lora_rank", 512), get("qk_nope_head_dim", 128),
               get("qk_rope_head_dim", 64), get("v_head_dim", 128), coef)  # fmt: skip
    return {**out, "rope_style": "neox" if c.get("rope_interleave") is False else "interleaved"}


def _layer_type_layers(
    c: dict[str, Any], n_layer: int, yes: str, no: str, yes2: str = "", no2: str = ""
) -> list[int] | None:
    """The layers config.json's layer_types marks ``yes`` (or ``yes2``) (each entry one of the four, one
    per layer: twin of arch_config.cpp's layer_type_flags); None when it has none."""
    types = c.get("layer_types")
    if types is None:
        return None
    if len(types) != n_layer or any(t not in (yes, no, yes2 or yes, no2 or no) for t in types):
        raise ValueError(f"config 'layer_types' must list {n_layer} layer types")
    return [i for i, t in enumerate(types) if t in (yes, yes2 or yes)]


def _check_delta(d: dict[str, Any]) -> dict[str, Any]:
    """The delta-net sizes, checked (twin of arch_config.cpp's check_delta)."""
    if d["n_k_heads"] < 1 or d["n_v_heads"] < 1 or d["n_v_heads"] % d["n_k_heads"]:
        raise ValueError(
            f"invalid gated delta-net head counts ({d['n_k_heads']} key, {d['n_v_heads']} value heads)"
        )
    if not (1 <= d["k_dim"] <= 4096 and 1 <= d["v_dim"] <= 4096):
        raise ValueError("invalid gated delta-net head sizes")
    if not 1 <= d["conv_kernel"] <= 64:
        raise ValueError("invalid gated delta-net convolution size")
    return d


def qwen35_gguf(arch: str, md: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """Qwen3.5 from GGUF (twin of qwen35_config_gguf): the delta-net's ssm.* sizes, the attention layers
    every full_attention_interval-th (default 4), NeoX RoPE on rope.dimension_count dimensions, q / k
    norms, the gated attention; the value heads tiled (llama.cpp's converter reorders Qwen3.5's, not
    Qwen3-Next's); the MTP layers left out."""
    k = arch + "."
    n_layer = _without_mtp_layers(arch, md, common["n_layer"])
    n_v = md.get(k + "ssm.time_step_rank", 0)
    inner = md.get(k + "ssm.inner_size", 0)
    interval = md.get(k + "full_attention_interval", 4)
    if interval < 1:
        raise ValueError(f"invalid {k}full_attention_interval")
    delta = _check_delta({
        "n_k_heads": md.get(k + "ssm.group_count", 0), "n_v_heads": n_v,
        "k_dim": md.get(k + "ssm.state_size", 0),
        "v_dim": inner // n_v if n_v > 0 and inner % n_v == 0 else -1,
        "conv_kernel": md.get(k + "ssm.conv_kernel", 0), "v_tiled": arch != "qwen3next",
        "layers": [i for i in range(n_layer) if (i + 1) % interval != 0],
    })  # fmt: skip
    dims = md.get(k + "rope.dimension_count", common["head_dim"])
    return {"n_layer": n_layer, "rope_style": "neox", "rope_dim": rotated(dims, common["head_dim"]),
            "qk_norm": True, "attn_gate": True, "delta": delta}  # fmt: skip


def qwen35_hf(c: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """Qwen3.5 from a config.json (twin of qwen35_config_hf): Qwen3_5TextConfig's linear_* sizes,
    layer_types (else every full_attention_interval-th layer attention), partial_rotary_factor (default
    0.25)."""
    if c.get("attention_bias"):
        raise ValueError("attention_bias=true is not supported")
    params = c.get("rope_parameters") or {}
    top = c.get("partial_rotary_factor")
    partial = params.get("partial_rotary_factor", 0.25 if top is None else top)
    if not 0 < partial <= 1:
        raise ValueError("invalid partial_rotary_factor")
    n_layer = common["n_layer"]
    layers = _layer_type_layers(c, n_layer, "linear_attention", "full_attention")
    if layers is None:
        interval = c.get("full_attention_interval", 4)
        if interval < 1:
            raise ValueError("invalid full_attention_interval")
        layers = [i for i in range(n_layer) if (i + 1) % interval != 0]

    def get(key: str, default: int) -> int:
        v = c.get(key)
        return default if v is None else int(v)

    delta = _check_delta({
        "n_k_heads": get("linear_num_key_heads", 16), "n_v_heads": get("linear_num_value_heads", 32),
        "k_dim": get("linear_key_head_dim", 128), "v_dim": get("linear_value_head_dim", 128),
        "conv_kernel": get("linear_conv_kernel_dim", 4), "v_tiled": False, "layers": layers,
    })  # fmt: skip
    return {"rope_style": "neox", "rope_dim": rotated(int(common["head_dim"] * partial), common["head_dim"]),
            "qk_norm": True, "attn_gate": True, "delta": delta}  # fmt: skip


def lfm2_gguf(
    arch: str, md: dict[str, Any], common: dict[str, Any], kv_per_layer: list[int] | None
) -> dict[str, Any]:
    """LFM2 / LFM2-MoE from GGUF (twin of lfm2_config_gguf): shortconv.l_cache taps, the convolution
    layers those whose attention.head_count_kv is 0."""
    kernel = md.get(arch + ".shortconv.l_cache", 3)
    if not 2 <= kernel <= 64:
        raise ValueError(f"invalid {arch}.shortconv.l_cache")
    n_layer = common["n_layer"]
    layers: list[int] = []
    if kv_per_layer is not None:
        if len(kv_per_layer) != n_layer:
            raise ValueError(f"{arch}.attention.head_count_kv must hold {n_layer} counts")
        if any(kv not in (0, common["n_head_kv"]) for kv in kv_per_layer):
            raise ValueError("differing KV head counts across layers (not supported)")
        layers = [i for i, kv in enumerate(kv_per_layer) if kv == 0]
    return {"rope_style": "neox", "qk_norm": True, "conv": {"kernel": kernel, "layers": layers}}


def lfm2_hf(c: dict[str, Any], n_layer: int, moe: bool = False) -> dict[str, Any]:
    """LFM2 / LFM2-MoE (``moe``) from a config.json (twin of lfm2_config_hf): conv_L_cache, layer_types
    (else full_attn_idxs), norm_eps and Lfm2MLP's feed-forward size (LFM2-MoE's dense layers:
    intermediate_size as it is)."""
    if c.get("conv_bias"):
        raise ValueError("conv_bias=true is not supported")
    kernel = c.get("conv_L_cache", 3)
    if not 2 <= kernel <= 64:
        raise ValueError("invalid conv_L_cache")
    full = c.get("full_attn_idxs")
    layers = _layer_type_layers(c, n_layer, "conv", "full_attention")
    if layers is None and full is not None:  # (Lfm2Config: the others are convolutions)
        if any(not isinstance(i, int) or not 0 <= i < n_layer for i in full):
            raise ValueError("config 'full_attn_idxs' must hold layer indices")
        layers = [i for i in range(n_layer) if i not in full]
    ff = c.get("block_ff_dim", c.get("intermediate_size", 7168 if moe else 12288))  # (block_ff_dim first)
    if not moe and c.get("block_auto_adjust_ff_dim", True):
        ff = int(2 * ff / 3)
        mult = c.get("block_ffn_dim_multiplier", 1.0)
        if mult is not None:
            of = c.get("block_multiple_of", 256)
            ff = of * ((int(mult * ff) + of - 1) // of)
    return {"rope_style": "neox", "qk_norm": True, "rms_eps": c.get("norm_eps", 1e-5), "n_ff": ff,
            "conv": {"kernel": kernel, "layers": layers or []}}  # fmt: skip


def _check_mamba2(m: dict[str, Any]) -> dict[str, Any]:
    """The Mamba-2 sizes, checked (twin of arch_config.cpp's check_mamba2)."""
    h, g, d = m["n_heads"], m["n_groups"], m["d_inner"]
    if h < 1 or g < 1 or h % g:
        raise ValueError(f"invalid Mamba-2 head / group counts ({h} heads, {g} groups)")
    if d < 1 or d % h or d // h > 4096:
        raise ValueError(f"invalid Mamba-2 inner size {d} for {h} heads")
    if d % g:
        raise ValueError("invalid Mamba-2 inner size for the norm's groups")
    if not 1 <= m["d_state"] <= 4096:
        raise ValueError("invalid Mamba-2 state size")
    if not 1 <= m["conv_kernel"] <= 64:
        raise ValueError("invalid Mamba-2 convolution size")
    m.setdefault("gated_norm", True)  # (Falcon-H1's may be off)
    return m


def granitehybrid_gguf(
    md: dict[str, Any], common: dict[str, Any], kv_per_layer: list[int] | None, tensors: Any
) -> dict[str, Any]:
    """Granite 4.0-H from GGUF (twin of granitehybrid_config_gguf): Granite's multipliers, the ssm.*
    sizes, the Mamba-2 layers those whose attention.head_count_kv is 0, no RoPE where
    rope.scaling.finetuned is false; the q / k / v biases and the convolution's bias where the first
    layer of their kind has them; a dense model's feed-forward of expert_shared_feed_forward_length."""
    k, n_layer = "granitehybrid.", common["n_layer"]
    layers: list[int] = []
    if kv_per_layer is not None:
        if len(kv_per_layer) != n_layer:
            raise ValueError(f"{k}attention.head_count_kv must hold {n_layer} counts")
        if any(kv not in (0, common["n_head_kv"]) for kv in kv_per_layer):
            raise ValueError("differing KV head counts across layers (not supported)")
        layers = [i for i, kv in enumerate(kv_per_layer) if kv == 0]
    attn = [i for i in range(n_layer) if i not in layers]
    ssm = _check_mamba2({
        "d_inner": md.get(k + "ssm.inner_size", 0), "d_state": md.get(k + "ssm.state_size", 0),
        "n_heads": md.get(k + "ssm.time_step_rank", 0), "n_groups": md.get(k + "ssm.group_count", 0),
        "conv_kernel": md.get(k + "ssm.conv_kernel", 0),
        "conv_bias": bool(layers) and f"blk.{layers[0]}.ssm_conv1d.bias" in tensors, "layers": layers,
    })  # fmt: skip
    out = {**granite_gguf(md, "granitehybrid"), "ssm": ssm, "rope_style": "interleaved",
           "qkv_bias": bool(attn) and f"blk.{attn[0]}.attn_q.bias" in tensors}  # fmt: skip
    if not md.get(k + "rope.scaling.finetuned", True):  # (Granite's RoPE switch: off in 4.0-H files)
        out["layer_nope"] = [True] * n_layer
    if not md.get(k + "expert_count", 0):
        out["n_ff"] = md.get(k + "expert_shared_feed_forward_length", common["n_ff"])
    return out


def _bamba_hf(c: dict[str, Any], n_layer: int, ssm: dict[str, Any], head_dim: int) -> dict[str, Any]:
    """Bamba (twin of bamba_config_hf): Granite 4.0-H's blocks without its multipliers, RoPE on
    (partial_rotary_factor, top level or in rope_parameters), attn_layer_indices the attention layers."""
    if (c.get("hidden_act") or "silu") != "silu":
        raise ValueError(f"hidden_act '{c['hidden_act']}' is not supported (silu)")
    attn = c.get("attn_layer_indices") or []
    if not isinstance(attn, list) or any(
        not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n_layer for i in attn
    ):
        raise ValueError("config 'attn_layer_indices' must hold layer indices")
    ssm["layers"] = [i for i in range(n_layer) if i not in attn]
    params: dict[str, Any] = c["rope_parameters"] if isinstance(c.get("rope_parameters"), dict) else {}
    top = c.get("partial_rotary_factor")
    partial = params.get("partial_rotary_factor", 1.0 if top is None else top)
    if not 0 < partial <= 1:
        raise ValueError("invalid partial_rotary_factor")
    return {"ssm": ssm, "rope_dim": rotated(int(head_dim * partial), head_dim)}


def granitehybrid_hf(c: dict[str, Any], n_layer: int, n_embd: int, head_dim: int = 0) -> dict[str, Any]:
    """Granite 4.0-H from a config.json (twin of granitehybrid_config_hf): GraniteMoeHybridConfig's
    mamba_* sizes, layer_types ("mamba" / "attention", or "linear_attention" / "full_attention"; none:
    all Mamba-2), RoPE only with position_embedding_type "rope", a dense model's feed-forward of
    shared_intermediate_size."""

    def get(key: str, default: Any) -> Any:
        v = c.get(key)
        return default if v is None else v

    for key in ("attention_bias", "mamba_proj_bias"):
        if get(key, False):
            raise ValueError(f"{key}=true is not supported")
    bamba = get("model_type", "") == "bamba"
    if not bamba and get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act '{c['hidden_act']}' is not supported (silu)")
    ssm = _check_mamba2({
        "d_inner": get("mamba_expand", 2) * n_embd, "d_state": get("mamba_d_state", 256),
        "n_heads": get("mamba_n_heads", 128), "n_groups": get("mamba_n_groups", 1),
        "conv_kernel": get("mamba_d_conv", 4), "conv_bias": bool(get("mamba_conv_bias", True)),
    })  # fmt: skip
    d_head = get("mamba_d_head", "auto")
    if d_head != "auto" and d_head != ssm["d_inner"] // ssm["n_heads"]:
        want = ssm["d_inner"] // ssm["n_heads"]
        raise ValueError(f"config 'mamba_d_head' must be d_inner / mamba_n_heads ({want})")
    if bamba:
        return _bamba_hf(c, n_layer, ssm, head_dim)
    layers = _layer_type_layers(c, n_layer, "linear_attention", "full_attention", "mamba", "attention")
    ssm["layers"] = list(range(n_layer)) if layers is None else layers
    out = {**granite_hf(c), "ssm": ssm}
    if get("position_embedding_type", "nope") != "rope":
        out["layer_nope"] = [True] * n_layer
    if get("num_local_experts", 8) == 0:
        out["n_ff"] = get("shared_intermediate_size", 1024)
    return out


def nemotronh_layer_kinds(c: dict[str, Any], n_layer: int) -> str:
    """One character per layer (M Mamba-2, * attention, - dense feed-forward, E experts) from config.json's
    layers_block_type (or layer_types) or hybrid_override_pattern; checked against n_layer when > 0 (twin
    of nemotronh_layer_kinds)."""
    types = c.get("layers_block_type") or c.get("layer_types")
    pattern = c.get("hybrid_override_pattern")
    names = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-",
             "moe": "E"}  # fmt: skip
    if types is not None:
        if any(t not in names for t in types):
            raise ValueError(
                'config \'layers_block_type\' must hold "mamba", "attention", "mlp" or "moe" (or '
                '"linear_attention" / "full_attention")'
            )
        kinds = "".join(names[t] for t in types)
    elif pattern is not None:
        if not isinstance(pattern, str) or set(pattern) - set("M*-E"):
            raise ValueError("config 'hybrid_override_pattern' must hold only M, *, - and E")
        kinds = pattern
    else:
        raise ValueError("config has neither layers_block_type nor hybrid_override_pattern")
    if n_layer > 0 and len(kinds) != n_layer:
        raise ValueError(f"the layer pattern lists {len(kinds)} layers, num_hidden_layers {n_layer}")
    return kinds


def _nemotronh_blocks(kinds: str) -> dict[str, Any]:
    """Nemotron-H's blocks from one kind per layer (twin of nemotronh_blocks): Mamba-2 and attention
    without a feed-forward, - and E a feed-forward alone; no RoPE; relu2."""
    return {
        "layer_no_ffn": [k in "M*" for k in kinds], "layer_no_mixer": [k in "-E" for k in kinds],
        "layer_nope": [True] * len(kinds), "ffn_relu2": True,
        "ssm_layers": [i for i, k in enumerate(kinds) if k == "M"],
    }  # fmt: skip


def nemotronh_gguf(
    arch: str, md: dict[str, Any], common: dict[str, Any], kv_per_layer: Any, ff_per_layer: Any, tensors: Any
) -> dict[str, Any]:
    """Nemotron-H from GGUF (twin of nemotronh_config_gguf): the ssm.* sizes; per layer, KV heads mark
    attention, a feed-forward size a feed-forward block, neither a Mamba-2 block; biases where the first
    layer of their kind has them."""
    k, n_layer = arch + ".", common["n_layer"]
    if not (isinstance(kv_per_layer, list) and isinstance(ff_per_layer, list)) or not (
        len(kv_per_layer) == len(ff_per_layer) == n_layer
    ):
        raise ValueError(
            f"{k}attention.head_count_kv and {k}feed_forward_length must hold one count per layer ({n_layer})"
        )
    kinds = ""
    for i, (kv, ff) in enumerate(zip(kv_per_layer, ff_per_layer, strict=True)):
        if kv not in (0, common["n_head_kv"]):
            raise ValueError("differing KV head counts across layers (not supported)")
        if kv and ff:
            raise ValueError(f"layer {i} has both attention and a feed-forward (not a Nemotron-H block)")
        if ff not in (0, common["n_ff"]):
            raise ValueError("differing feed-forward sizes across layers (not supported)")
        kinds += "*" if kv else "-" if ff else "M"
    blocks = _nemotronh_blocks(kinds)
    layers = blocks.pop("ssm_layers")
    attn = [i for i, x in enumerate(kinds) if x == "*"]
    ssm = _check_mamba2({
        "d_inner": md.get(k + "ssm.inner_size", 0), "d_state": md.get(k + "ssm.state_size", 0),
        "n_heads": md.get(k + "ssm.time_step_rank", 0), "n_groups": md.get(k + "ssm.group_count", 0),
        "conv_kernel": md.get(k + "ssm.conv_kernel", 0),
        "conv_bias": bool(layers) and f"blk.{layers[0]}.ssm_conv1d.bias" in tensors, "layers": layers,
    })  # fmt: skip
    return {**blocks, "ssm": ssm, "qkv_bias": bool(attn) and f"blk.{attn[0]}.attn_q.bias" in tensors}


def _mamba2_blocks(n_layer: int) -> dict[str, Any]:
    """Mamba-2 alone (twin of mamba2_blocks): every layer a mixer after its norm, no feed-forward."""
    return {"layer_no_ffn": [True] * n_layer, "layer_nope": [True] * n_layer}


def mamba2_gguf(md: dict[str, Any], n_layer: int, tensors: Any) -> dict[str, Any]:
    """Mamba-2 alone from GGUF (twin of mamba2_config_gguf): the ssm.* sizes, every layer a mixer; the
    convolution's bias where the first layer has it."""
    k = "mamba2."
    ssm = _check_mamba2({
        "d_inner": md.get(k + "ssm.inner_size", 0), "d_state": md.get(k + "ssm.state_size", 0),
        "n_heads": md.get(k + "ssm.time_step_rank", 0), "n_groups": md.get(k + "ssm.group_count", 0),
        "conv_kernel": md.get(k + "ssm.conv_kernel", 0), "conv_bias": "blk.0.ssm_conv1d.bias" in tensors,
        "layers": list(range(n_layer)),
    })  # fmt: skip
    return {**_mamba2_blocks(n_layer), "ssm": ssm}


def mamba2_hf(c: dict[str, Any], n_layer: int, n_embd: int) -> dict[str, Any]:
    """Mamba-2 alone from a config.json (twin of mamba2_config_hf): Mamba2Config's sizes (d_inner = expand
    x hidden, num_heads of head_dim), layer_norm_epsilon, every layer a mixer."""

    def get(key: str, default: Any) -> Any:
        v = c.get(key)
        return default if v is None else v

    if get("use_bias", False):
        raise ValueError("use_bias=true is not supported")
    if not get("rms_norm", True):
        raise ValueError("rms_norm=false (no gated norm) is not supported")
    if get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act '{c['hidden_act']}' is not supported (silu)")
    expand = get("expand", 2)
    ssm = _check_mamba2({
        "d_inner": int(expand * n_embd) if 0 < expand <= 64 else -1, "d_state": get("state_size", 128),
        "n_heads": get("num_heads", 128), "n_groups": get("n_groups", 8),
        "conv_kernel": get("conv_kernel", 4),
        "conv_bias": bool(get("use_conv_bias", True)), "layers": list(range(n_layer)),
    })  # fmt: skip
    head_dim = ssm["d_inner"] // ssm["n_heads"]
    if get("head_dim", head_dim) != head_dim:
        raise ValueError(f"config 'head_dim' must be expand x hidden_size / num_heads ({head_dim})")
    return {**_mamba2_blocks(n_layer), "ssm": ssm, "rms_eps": get("layer_norm_epsilon", 1e-5)}


def _check_mamba1(m: dict[str, Any]) -> dict[str, Any]:
    """The Mamba-1 sizes, checked (twin of arch_config.cpp's check_mamba1)."""
    if not 1 <= m["d_inner"] <= 1 << 20:
        raise ValueError("invalid Mamba-1 inner size")
    if not 1 <= m["d_state"] <= 4096:
        raise ValueError("invalid Mamba-1 state size")
    if not 1 <= m["dt_rank"] <= m["d_inner"]:
        raise ValueError("invalid Mamba-1 time step rank")
    if not 1 <= m["conv_kernel"] <= 64:
        raise ValueError("invalid Mamba-1 convolution size")
    return m


def mamba1_gguf(md: dict[str, Any], common: dict[str, Any], tensors: Any) -> dict[str, Any]:
    """Mamba-1 alone from GGUF (twin of mamba1_config_gguf): the ssm.* sizes (time_step_rank: dt's rank),
    ssm.dt_b_c_rms with the model's norm epsilon (llama.cpp's), every layer a mixer."""
    k, n_layer = "mamba.", common["n_layer"]
    m = _check_mamba1({
        "d_inner": md.get(k + "ssm.inner_size", 0), "d_state": md.get(k + "ssm.state_size", 0),
        "dt_rank": md.get(k + "ssm.time_step_rank", 0), "conv_kernel": md.get(k + "ssm.conv_kernel", 0),
        "conv_bias": "blk.0.ssm_conv1d.bias" in tensors,
        "dt_b_c_rms": bool(md.get(k + "ssm.dt_b_c_rms", False)), "dt_b_c_weights": False,
        "bc_eps": float(np.float32(common["rms_eps"])), "layers": list(range(n_layer)),
    })  # fmt: skip
    return {"layer_no_ffn": [True] * n_layer, "layer_nope": [True] * n_layer, "mamba1": m}


def mamba1_hf(c: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """Mamba-1 alone from a config.json (twin of mamba1_config_hf): MambaConfig's sizes (d_inner = expand x
    hidden, time_step_rank "auto" = ceil(hidden / 16)), layer_norm_epsilon; FalconMambaConfig's weightless
    norms of dt, B and C with mixer_rms_eps."""

    def get(key: str, default: Any) -> Any:
        v = c.get(key)
        return default if v is None else v

    if get("use_bias", False):
        raise ValueError("use_bias=true is not supported")
    if get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act '{c['hidden_act']}' is not supported (silu)")
    d, n_layer = common["n_ff"], common["n_layer"]
    if get("intermediate_size", d) != d:
        raise ValueError(f"config 'intermediate_size' must be expand x hidden_size ({d})")
    rank = get("time_step_rank", "auto")
    if rank != "auto" and (not isinstance(rank, int) or isinstance(rank, bool)):
        raise ValueError("config 'time_step_rank' must be an integer or \"auto\"")
    m = _check_mamba1({
        "d_inner": d, "d_state": get("state_size", 16),
        "dt_rank": (common["n_embd"] + 15) // 16 if rank == "auto" else rank,
        "conv_kernel": get("conv_kernel", 4), "conv_bias": bool(get("use_conv_bias", True)),
        "dt_b_c_rms": c.get("model_type") == "falcon_mamba", "dt_b_c_weights": False,
        "bc_eps": float(np.float32(get("mixer_rms_eps", 1e-6))), "layers": list(range(n_layer)),
    })  # fmt: skip
    return {"layer_no_ffn": [True] * n_layer, "layer_nope": [True] * n_layer, "mamba1": m,
            "rms_eps": get("layer_norm_epsilon", 1e-5)}  # fmt: skip


def jamba_gguf(md: dict[str, Any], common: dict[str, Any], kv_per_layer: Any, tensors: Any) -> dict[str, Any]:
    """Jamba from GGUF (twin of jamba_config_gguf): the ssm.* sizes, Mamba-1 layers those without KV heads,
    weighted norms of dt, B and C with the model's epsilon, no RoPE; the convolution's bias where the
    first Mamba-1 layer has it."""
    k, n_layer = "jamba.", common["n_layer"]
    if not isinstance(kv_per_layer, list) or len(kv_per_layer) != n_layer:
        raise ValueError(f"{k}attention.head_count_kv must hold {n_layer} counts")
    if any(kv not in (0, common["n_head_kv"]) for kv in kv_per_layer):
        raise ValueError("differing KV head counts across layers (not supported)")
    layers = [i for i, kv in enumerate(kv_per_layer) if kv == 0]
    m = _check_mamba1({
        "d_inner": md.get(k + "ssm.inner_size", 0), "d_state": md.get(k + "ssm.state_size", 0),
        "dt_rank": md.get(k + "ssm.time_step_rank", 0), "conv_kernel": md.get(k + "ssm.conv_kernel", 0),
        "conv_bias": bool(layers) and f"blk.{layers[0]}.ssm_conv1d.bias" in tensors,
        "dt_b_c_rms": True, "dt_b_c_weights": True, "bc_eps": float(np.float32(common["rms_eps"])),
        "layers": layers,
    })  # fmt: skip
    return {"layer_nope": [True] * n_layer, "mamba1": m}


def jamba_hf(c: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """Jamba from a config.json (twin of jamba_config_hf): JambaConfig's mamba_* sizes (mamba_dt_rank "auto"
    = ceil(hidden / 16)), attention every attn_layer_period-th layer from attn_layer_offset (no RoPE), the
    Mamba-1 norms of dt, B and C with weights and rms_norm_eps."""

    def get(key: str, default: Any) -> Any:
        v = c.get(key)
        return default if v is None else v

    if get("mamba_proj_bias", False):
        raise ValueError("mamba_proj_bias=true is not supported")
    if get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act '{c['hidden_act']}' is not supported (silu)")
    rank = get("mamba_dt_rank", "auto")
    if rank != "auto" and (not isinstance(rank, int) or isinstance(rank, bool)):
        raise ValueError("config 'mamba_dt_rank' must be an integer or \"auto\"")
    period, offset, n_layer = get("attn_layer_period", 8), get("attn_layer_offset", 4), common["n_layer"]
    if period < 1 or offset < 0:
        raise ValueError("config 'attn_layer_period' / 'attn_layer_offset' must be >= 1 / >= 0")
    m = _check_mamba1({
        "d_inner": get("mamba_expand", 2) * common["n_embd"], "d_state": get("mamba_d_state", 16),
        "dt_rank": (common["n_embd"] + 15) // 16 if rank == "auto" else rank,
        "conv_kernel": get("mamba_d_conv", 4), "conv_bias": bool(get("mamba_conv_bias", True)),
        "dt_b_c_rms": True, "dt_b_c_weights": True, "bc_eps": float(np.float32(common["rms_eps"])),
        "layers": [i for i in range(n_layer) if i % period != offset],
    })  # fmt: skip
    return {"layer_nope": [True] * n_layer, "mamba1": m}


def falconh1_gguf(md: dict[str, Any], n_layer: int, tensors: Any) -> dict[str, Any]:
    """Falcon-H1 from GGUF (twin of falconh1_config_gguf): the ssm.* sizes, every layer a Mamba-2 mixer
    beside attention, the mixer's norm where the file has it; the multipliers are in the weights (llama.cpp's
    converter folds them)."""
    k = "falcon-h1."
    ssm = _check_mamba2({
        "d_inner": md.get(k + "ssm.inner_size", 0), "d_state": md.get(k + "ssm.state_size", 0),
        "n_heads": md.get(k + "ssm.time_step_rank", 0), "n_groups": md.get(k + "ssm.group_count", 0),
        "conv_kernel": md.get(k + "ssm.conv_kernel", 0), "conv_bias": "blk.0.ssm_conv1d.bias" in tensors,
        "gated_norm": "blk.0.ssm_norm.weight" in tensors, "layers": list(range(n_layer)),
    })  # fmt: skip
    return {"ssm": ssm, "parallel_ssm": True}


def falconh1_hf(c: dict[str, Any], n_layer: int, n_embd: int) -> dict[str, Any]:
    """Falcon-H1 from a config.json (twin of falconh1_config_hf): the mamba_* sizes (d_ssm, else expand x
    hidden), the optional gated norm (after the gate only), the mu-P multipliers, the embedding and lm_head
    multipliers as embd_scale and logit_scale (logits divided by 1 / multiplier)."""

    def get(key: str, default: Any) -> Any:
        v = c.get(key)
        return default if v is None else v

    for key in ("mamba_proj_bias", "projectors_bias", "attention_bias", "mlp_bias"):
        if get(key, False):
            raise ValueError(f"{key}=true is not supported")
    if get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act '{c['hidden_act']}' is not supported (silu)")
    ssm = _check_mamba2({
        "d_inner": get("mamba_d_ssm", get("mamba_expand", 2) * n_embd), "d_state": get("mamba_d_state", 256),
        "n_heads": get("mamba_n_heads", 128), "n_groups": get("mamba_n_groups", 1),
        "conv_kernel": get("mamba_d_conv", 4), "conv_bias": bool(get("mamba_conv_bias", True)),
        "gated_norm": bool(get("mamba_rms_norm", False)), "layers": list(range(n_layer)),
    })  # fmt: skip
    d_head = get("mamba_d_head", "auto")
    if d_head != "auto" and d_head != ssm["d_inner"] // ssm["n_heads"]:
        want = ssm["d_inner"] // ssm["n_heads"]
        raise ValueError(f"config 'mamba_d_head' must be d_ssm / mamba_n_heads ({want})")
    if ssm["gated_norm"] and get("mamba_norm_before_gate", True):
        raise ValueError("mamba_rms_norm with mamba_norm_before_gate is not supported")

    def f32(key: str) -> float:
        v = float(get(key, 1.0))
        if not math.isfinite(v):
            raise ValueError(f"invalid {key}")
        return float(np.float32(v))

    def floats(key: str, n: int) -> list[float]:
        v = get(key, [1.0] * n)
        if not isinstance(v, list) or len(v) != n or not all(isinstance(x, (int, float)) for x in v):
            raise ValueError(f"config '{key}' must list {n} numbers")
        return [float(np.float32(x)) for x in v]

    mlp = floats("mlp_multipliers", 2)
    mup = {"active": True, "attn_in": f32("attention_in_multiplier"), "key": f32("key_multiplier"),
           "attn_out": f32("attention_out_multiplier"), "ssm_in": f32("ssm_in_multiplier"),
           "ssm_out": f32("ssm_out_multiplier"), "zxbcdt": floats("ssm_multipliers", 5),
           "mlp_gate": mlp[0], "mlp_down": mlp[1]}  # fmt: skip
    out: dict[str, Any] = {"ssm": ssm, "parallel_ssm": True, "mup": mup}
    emb, head = f32("embedding_multiplier"), f32("lm_head_multiplier")
    if emb != 1.0:
        out["embd_scale"] = emb
    if head != 1.0:
        if not head > 0:
            raise ValueError("lm_head_multiplier must be > 0")
        out["logit_scale"] = float(np.float32(1.0) / np.float32(head))
    return out


def nemotronh_hf(c: dict[str, Any], n_layer: int) -> dict[str, Any]:
    """Nemotron-H from a config.json (twin of nemotronh_config_hf): NemotronHConfig's mamba_* / ssm_* sizes
    (d_inner = mamba_num_heads x mamba_head_dim), layer_norm_epsilon, the blocks of its layer pattern."""

    def get(key: str, alias: str, default: Any) -> Any:
        v = c.get(key)
        v = c.get(alias) if v is None else v
        return default if v is None else v

    for key in ("use_bias", "mamba_proj_bias", "mlp_bias", "attention_bias"):
        if c.get(key):
            raise ValueError(f"{key}=true is not supported")
    if get("mlp_hidden_act", "", "relu2") != "relu2":
        raise ValueError(f"mlp_hidden_act '{c['mlp_hidden_act']}' is not supported (relu2)")
    if get("mamba_hidden_act", "", "silu") != "silu":
        raise ValueError(f"mamba_hidden_act '{c['mamba_hidden_act']}' is not supported (silu)")
    if c.get("moe_latent_size") is not None:
        raise ValueError("moe_latent_size (latent expert projections) is not supported")
    heads = get("mamba_num_heads", "", 128)
    ssm = _check_mamba2({
        "d_inner": heads * get("mamba_head_dim", "", 64),
        "d_state": get("ssm_state_size", "mamba_d_state", 128),
        "n_heads": heads, "n_groups": get("n_groups", "mamba_n_groups", 8),
        "conv_kernel": get("conv_kernel", "mamba_d_conv", 4),
        "conv_bias": bool(get("use_conv_bias", "mamba_conv_bias", True)),
    })  # fmt: skip
    blocks = _nemotronh_blocks(nemotronh_layer_kinds(c, n_layer))
    ssm["layers"] = blocks.pop("ssm_layers")
    return {**blocks, "ssm": ssm, "rms_eps": get("layer_norm_epsilon", "", 1e-5)}


def _gemma4_kv_source(layer_sliding: list[bool], shared: int) -> list[int]:
    """Each of the last ``shared`` layers reads the K/V of the last earlier layer of its kind
    (transformers' kv_sharing_modes); empty when none shares."""
    n_layer = len(layer_sliding)
    if shared <= 0:
        return []
    if shared >= n_layer:
        raise ValueError(f"num_kv_shared_layers {shared} leaves no layer with its own K/V")
    first = n_layer - shared
    src = list(range(n_layer))
    for layer in range(first, n_layer):
        same = [j for j in range(first) if layer_sliding[j] == layer_sliding[layer]]
        if not same:
            raise ValueError("a shared-K/V layer has no earlier layer of its kind")
        src[layer] = same[-1]
    return src


def _gemma4_check(kw: dict[str, Any], arch: str = "gemma4") -> dict[str, Any]:
    """The checks both readers share (and Gemma 3n's own), then Gemma 4's fixed settings."""
    n_layer, sliding = kw["n_layer"], kw["layer_sliding"]
    global_hd = 0
    for layer in range(n_layer):
        hd, kv = kw["layer_head_dim"][layer], kw["layer_n_head_kv"][layer]
        if not (0 < hd <= 65536 and hd % 2 == 0 and 0 < kv <= 65536 and kw["n_head"] % kv == 0):
            raise ValueError(f"invalid head size or KV head count of layer {layer}")
        if sliding[layer] and hd != kw["head_dim"]:
            raise ValueError("the sliding layers' head sizes differ (not supported)")
        if not sliding[layer] and global_hd and hd != global_hd:
            raise ValueError("the global layers' head sizes differ (not supported)")
        global_hd = global_hd if sliding[layer] else hd
        if not 0 < kw["layer_n_ff"][layer] <= 1 << 30:
            raise ValueError(f"invalid feed-forward size of layer {layer}")
    if kw["rope_pairs"] < 0 or (global_hd and kw["rope_pairs"] > global_hd // 2):
        raise ValueError("invalid rotated share of the global layers' RoPE")
    if not 0 <= kw["ple_dim"] <= 1 << 20:
        raise ValueError("invalid per-layer embedding size")
    moe = kw.get("moe")
    if moe is not None:  # softmax over the experts, the chosen renormalised (then scaled)
        if not (1 <= moe["n_expert"] <= 65536 and 1 <= moe["n_expert_used"] <= moe["n_expert"]) or (
            moe["n_ff_expert"] < 1
        ):
            raise ValueError("invalid expert count, experts per token or expert size")
        moe["norm_topk_prob"] = True
    if arch == "gemma3n" or "altup" in kw:
        if not 1 <= kw["altup"] <= 64:
            raise ValueError(f"invalid AltUp stream count {kw['altup']}")
        if kw["ple_dim"] <= 0:
            raise ValueError("a Gemma 3n model needs per-layer inputs")
        if any(math.isnan(x) or x == math.inf for x in kw["layer_sparsity"]):
            raise ValueError("invalid activation sparsity")
    return dict(
        kw, qk_norm=True, v_norm=True, attn_scale=1.0, rope_style="neox", qkv_bias=False,
        embd_scale=math.sqrt(np.float32(kw["n_embd"])), rope_scaling=None,
    )  # fmt: skip


def _gguf_per_layer(md: dict[str, Any], key: str, n_layer: int, default: int) -> list[int]:
    v = md.get(key, default)
    values = list(v) if isinstance(v, list) else [v] * n_layer
    if len(values) != n_layer:
        raise ValueError(f"{key} must hold one value per layer")
    if any(not 0 < int(x) <= 1 << 30 for x in values):
        raise ValueError(f"invalid {key}")
    return [int(x) for x in values]


def gemma4_gguf(
    md: dict[str, Any],
    common: dict[str, Any],
    rope_freqs: np.ndarray | None,
    moe_layers: list[int],
    arch: str = "gemma4",
) -> dict[str, Any]:
    """Gemma 4's keys of a GGUF file as llama.cpp's converter writes them (``common`` holds the shared
    ones): key_length (global) / key_length_swa, head_count_kv and feed_forward_length per layer, the
    sliding pattern, shared_kv_layers, embedding_length_per_layer_input; the global layers' RoPE from
    the rope_freqs tensor's factors (1: turns, 1e30: held)."""
    k, g3n = arch + ".", arch == "gemma3n"
    n_layer = common["n_layer"]
    if md.get(k + "attention.key_length", 0) != md.get(k + "attention.value_length", 0) or md.get(
        k + "attention.key_length_swa", 0
    ) != md.get(k + "attention.value_length_swa", 0):
        raise ValueError("attention.value_length differs from key_length (Gemma 4 needs them equal)")
    hd_full = md.get(k + "attention.key_length", 0)
    hd_swa = md.get(k + "attention.key_length_swa", hd_full)
    if not (0 < hd_full <= 65536 and 0 < hd_swa <= 65536):
        raise ValueError("invalid attention.key_length")
    window = _window(md.get(k + "attention.sliding_window", 0))
    sliding = _gguf_layer_pattern(md, k + "attention.sliding_window_pattern", n_layer)
    if g3n and sliding is None:  # (llama.cpp's default: every fifth layer global)
        sliding = _pattern_layers(n_layer, 5)
    if sliding is None or window == 0:
        raise ValueError(
            "a Gemma 4 file needs attention.sliding_window and a per-layer sliding_window_pattern"
        )
    kvs = _gguf_per_layer(md, k + "attention.head_count_kv", n_layer, common["n_head"])
    ffs = _gguf_per_layer(md, k + "feed_forward_length", n_layer, 0)
    if md.get(k + "rope.dimension_count", hd_full) != hd_full or md.get(
        k + "rope.dimension_count_swa", hd_swa
    ) != (hd_swa):
        raise ValueError("partial RoPE (rope.dimension_count below the head size) is not supported")
    pairs = hd_full // 2
    if rope_freqs is not None:
        ones = 0
        while ones < len(rope_freqs) and rope_freqs[ones] == 1.0:
            ones += 1
        if not all(f >= 1e20 for f in rope_freqs[ones:]):
            raise ValueError("rope_freqs is not Gemma 4's proportional RoPE (factors 1, then 1e30)")
        pairs = ones
    kv_sliding = [kv for kv, s in zip(kvs, sliding, strict=True) if s]
    kw = dict(
        common, head_dim=hd_swa, n_head_kv=kv_sliding[-1] if kv_sliding else kvs[0], n_ff=max(ffs),
        sliding_window=window, layer_sliding=sliding,
        layer_head_dim=[hd_swa if s else hd_full for s in sliding], layer_n_head_kv=kvs, layer_n_ff=ffs,
        rope_theta_swa=md.get(k + "rope.freq_base_swa", 10000.0), rope_pairs=pairs,
        kv_source=_gemma4_kv_source(
            sliding, md.get(k + "attention.shared_kv_layers", max(n_layer - 20, 0) if g3n else 0)),
        ple_dim=max(-1, min(md.get(k + "embedding_length_per_layer_input", 0), 1 << 21)),
        final_softcap=md.get(k + "final_logit_softcapping", 0.0),
        rms_eps=md.get(k + "attention.layer_norm_rms_epsilon", 1e-6),
    )  # fmt: skip
    if moe_layers:  # (the layers with a router)
        kw["moe"] = gemma4_moe(md.get(k + "expert_count", 0), md.get(k + "expert_used_count", 0),
                               md.get(k + "expert_feed_forward_length", 0), moe_layers)  # fmt: skip
    if g3n:  # AltUp's streams, the cuts of the sparse gates (LAuReL's rank: the loader's, from a tensor)
        if md.get(k + "altup.active_idx", 0) != 0:
            raise ValueError("altup.active_idx other than 0 is not supported")
        cuts = md.get(k + "activation_sparsity_scale")
        if cuts is not None and len(cuts) != n_layer:
            raise ValueError("activation_sparsity_scale must hold one value per layer")
        kw.update(altup=max(-1, min(md.get(k + "altup.num_inputs", 4), 1 << 10)),
                  layer_sparsity=[float(np.float32(x)) for x in cuts] if cuts is not None
                  else _default_sparsity(n_layer))  # fmt: skip
    return _gemma4_check(kw, arch)


def _erfinv(x: float) -> float:
    """erf^-1(x) for -1 < x < 1, by Newton's method on erf (float64)."""
    y = 0.0
    for _ in range(200):
        step = (math.erf(y) - x) / (2.0 / math.sqrt(math.pi) * math.exp(-y * y))
        y -= step
        if abs(step) < 1e-15 * max(1.0, abs(y)):
            break
    return y


def _sparsity_cut(share: float) -> float:
    """Gemma 3n's cut of a gate (standard deviations above its mean) for the ``share`` of its values
    cut: Phi^-1(share) as transformers computes it in float32 (torch's Normal.icdf: erfinv(2s - 1) times
    sqrt(2), each step rounded to float32); -inf for none."""
    if not share > 0:
        return -math.inf
    x = np.float32(2.0) * np.float32(share) - np.float32(1.0)
    return float(np.float32(_erfinv(float(x))) * np.float32(math.sqrt(2.0)))


def _default_sparsity(n_layer: int) -> list[float]:
    """Gemma3nTextConfig's default: 0.95 in the first 10 layers of a model of more."""
    return [_sparsity_cut(0.95 if n_layer > 10 and i < 10 else 0.0) for i in range(n_layer)]


def _gemma_hf_readers(c: dict[str, Any]) -> tuple[Any, Any]:
    """A Gemma 4 / 3n config.json's readers: get (its class's default for a missing or null key) and dim
    (a positive size up to a limit)."""

    def get(key: str, default: Any) -> Any:
        v = c.get(key)
        return default if v is None else v

    def dim(key: str, default: int, limit: int = 1 << 30) -> int:
        v = get(key, default)
        if not isinstance(v, int) or not 0 < v <= limit:
            raise ValueError(f"invalid {key} {v}")
        return v

    return get, dim


def _gemma_hf_shapes(
    c: dict[str, Any], vocab: int, hidden: int, layers: int, kv_heads: int, context: int
) -> dict[str, Any]:
    """The sizes, norm epsilon and refusals Gemma 4 and Gemma 3n folders share (twin of arch_config.cpp's
    gemma_hf_shapes), with the class's defaults where they differ (8 heads of 256 in both)."""
    get, dim = _gemma_hf_readers(c)
    out = dict(
        n_vocab=dim("vocab_size", vocab), n_embd=dim("hidden_size", hidden),
        n_layer=dim("num_hidden_layers", layers, 4096), n_head=dim("num_attention_heads", 8, 65536),
        n_head_kv=dim("num_key_value_heads", kv_heads, 65536), head_dim=dim("head_dim", 256, 65536),
        n_ctx_train=dim("max_position_embeddings", context), rms_eps=get("rms_norm_eps", 1e-6),
    )  # fmt: skip
    if get("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise ValueError(
            f"hidden_activation '{c['hidden_activation']}' is not supported (gelu_pytorch_tanh is)"
        )
    if get("attention_bias", False):
        raise ValueError("attention_bias=true is not supported")
    return out


def gemma3n_hf(c: dict[str, Any]) -> dict[str, Any]:
    """Gemma 3n from config.json (Gemma3nTextConfig, or a Gemma3nForConditionalGeneration's text_config),
    with the config class's defaults: Gemma 4's attention with one head size and plain RoPE on both
    kinds of layer (rope_parameters, or the older rope_theta / rope_local_base_freq), intermediate_size
    per layer, AltUp's streams, LAuReL's rank, the activation sparsity pattern as the gates' cuts."""

    get, dim = _gemma_hf_readers(c)
    shapes = _gemma_hf_shapes(c, vocab=262400, hidden=2048, layers=35, kv_heads=2, context=32768)
    n_layer, n_kv, hd = shapes["n_layer"], shapes["n_head_kv"], shapes["head_dim"]
    window = _window(get("sliding_window", 512))
    if window == 0:
        raise ValueError("sliding_window 0")
    sliding = _hf_layer_types(c, n_layer) or _pattern_layers(n_layer, 5)
    ff = get("intermediate_size", 16384)
    if isinstance(ff, list):
        if len(ff) != n_layer:
            raise ValueError("intermediate_size must hold one size per layer")
        if any(not isinstance(x, int) or not 0 < x <= 1 << 30 for x in ff):
            raise ValueError("invalid intermediate_size")
        ffs = [int(x) for x in ff]
    else:
        ffs = [dim("intermediate_size", 16384)] * n_layer
    theta = {"full_attention": get("rope_theta", 1e6), "sliding_attention": get("rope_local_base_freq", 1e4)}
    rope = c.get("rope_parameters")
    if rope is not None:
        if not isinstance(rope, dict):
            raise ValueError("config 'rope_parameters' must be an object")
        for kind in theta:
            p = rope.get(kind)
            if p is None:
                continue
            if not isinstance(p, dict):
                raise ValueError("config 'rope_parameters' is invalid")
            if (
                p.get("rope_type", "default") != "default"
                or p.get("factor", 1.0) != 1.0
                or p.get("partial_rotary_factor", 1.0) != 1.0
            ):
                raise ValueError(
                    f"RoPE type '{p.get('rope_type', 'default')}' (or a scaling or partial rotation) "
                    "is not supported"
                )
            theta[kind] = p.get("rope_theta", theta[kind])
    if c.get("rope_scaling") is not None:
        raise ValueError("rope_scaling is not supported")
    if get("altup_active_idx", 0) != 0:
        raise ValueError("altup_active_idx other than 0 is not supported")
    pattern = c.get("activation_sparsity_pattern")
    if pattern is None:
        cuts = _default_sparsity(n_layer)
    else:
        shares = [pattern] * n_layer if isinstance(pattern, int | float) else pattern
        if not isinstance(shares, list) or len(shares) != n_layer:
            raise ValueError("activation_sparsity_pattern must hold one value per layer")
        if any(not isinstance(s, int | float) or not 0 <= s < 1 for s in shares):
            raise ValueError("invalid activation sparsity (0 <= s < 1)")
        cuts = [_sparsity_cut(float(s)) for s in shares]
    cap = c.get("final_logit_softcapping", 30.0) if "final_logit_softcapping" in c else 30.0
    kw = dict(
        shapes, n_ff=max(ffs), rope_theta=theta["full_attention"],
        rope_theta_swa=theta["sliding_attention"], sliding_window=window, layer_sliding=sliding,
        layer_head_dim=[hd] * n_layer, layer_n_head_kv=[n_kv] * n_layer, layer_n_ff=ffs, rope_pairs=hd // 2,
        kv_source=_gemma4_kv_source(sliding, get("num_kv_shared_layers", 15)),
        ple_dim=max(-1, min(get("hidden_size_per_layer_input", 256), 1 << 21)),
        final_softcap=0.0 if cap is None else cap, tied_embeddings=get("tie_word_embeddings", True),
        altup=max(-1, min(get("altup_num_inputs", 4), 1 << 10)),
        altup_correct_scale=bool(get("altup_correct_scale", True)),
        laurel_rank=dim("laurel_rank", 64), layer_sparsity=cuts,
    )  # fmt: skip
    return _gemma4_check(kw, "gemma3n")


def gemma4_hf(c: dict[str, Any]) -> dict[str, Any]:
    """Gemma 4 from config.json (Gemma4TextConfig, or a Gemma4ForConditionalGeneration's text_config):
    every field, with the config class's defaults for those a file leaves out; the per-layer attention
    shapes from per_layer_config (transformers 5.25's) or global_head_dim / num_global_key_value_heads
    (the released configs'; the latter where attention_k_eq_v)."""

    get, dim = _gemma_hf_readers(c)
    shapes = _gemma_hf_shapes(c, vocab=262144, hidden=2304, layers=30, kv_heads=4, context=131072)
    n_layer, n_kv, hd = shapes["n_layer"], shapes["n_head_kv"], shapes["head_dim"]
    ff = dim("intermediate_size", 9216)
    if get("use_bidirectional_attention", "vision") == "all":
        raise ValueError("use_bidirectional_attention='all' (an encoder) is not supported")
    window = _window(get("sliding_window", 512))
    sliding = _hf_layer_types(c, n_layer) or _pattern_layers(n_layer, 6)
    sliding[-1] = False  # (transformers forces the last layer global)
    if window == 0:
        raise ValueError("sliding_window 0")
    head_dims, kv_heads = [hd] * n_layer, [n_kv] * n_layer
    per = c.get("per_layer_config")
    if per is not None:
        if not isinstance(per, dict):
            raise ValueError("config 'per_layer_config' must be an object")
        for key, over in per.items():
            layer = int(key) if isinstance(key, str) and key.isdigit() else -1
            if not 0 <= layer < n_layer or not isinstance(over, dict):
                raise ValueError(f"config 'per_layer_config' names an unknown layer '{key}'")
            for field in over:
                if field not in ("head_dim", "num_key_value_heads"):
                    raise ValueError(f"config 'per_layer_config' overrides '{field}' (not supported)")
            head_dims[layer] = over.get("head_dim", hd)
            kv_heads[layer] = over.get("num_key_value_heads", n_kv)
    else:
        for layer in range(n_layer):
            if not sliding[layer]:
                head_dims[layer] = get("global_head_dim", 512)
                if get("attention_k_eq_v", False) and c.get("num_global_key_value_heads") is not None:
                    kv_heads[layer] = c["num_global_key_value_heads"]
    rope = c.get("rope_parameters")
    theta_full, theta_swa, prf, full_type = 1e6, 1e4, 0.25, "proportional"
    if rope is not None:
        full, local = rope.get("full_attention"), rope.get("sliding_attention")
        if not isinstance(full, dict) or not isinstance(local, dict):
            raise ValueError("config 'rope_parameters' needs full_attention and sliding_attention")
        full_type = full.get("rope_type", "default")
        theta_full, prf = full.get("rope_theta", 1e6), full.get("partial_rotary_factor", 1.0)
        theta_swa = local.get("rope_theta", 1e4)
        if local.get("rope_type", "default") != "default" or local.get("partial_rotary_factor", 1.0) != 1.0:
            raise ValueError("RoPE scaling or partial rotation of the sliding layers is not supported")
        if full_type not in ("proportional", "default") or full.get("factor", 1.0) != 1.0:
            raise ValueError(
                f"RoPE type '{full_type}' (or a scaling factor) of the global layers is not supported"
            )
    if not 0 < prf <= 1:
        raise ValueError("invalid partial_rotary_factor of the global layers")
    global_hd = hd
    for layer in range(n_layer):
        global_hd = global_hd if sliding[layer] else head_dims[layer]
    pairs = global_hd // 2 if full_type == "default" else int(math.floor(prf * global_hd / 2.0))
    shared = get("num_kv_shared_layers", 0)
    ffs = [ff] * n_layer
    if get("use_double_wide_mlp", False):
        for layer in range(n_layer - max(shared, 0), n_layer):
            ffs[layer] = 2 * ff
    ple = c.get("hidden_size_per_layer_input", 256) if "hidden_size_per_layer_input" in c else 256
    kw = dict(
        shapes, n_ff=max(ffs),
        rms_eps=get("rms_norm_eps", 1e-6), rope_theta=theta_full, rope_theta_swa=theta_swa,
        sliding_window=window, layer_sliding=sliding, layer_head_dim=head_dims, layer_n_head_kv=kv_heads,
        layer_n_ff=ffs, rope_pairs=pairs, kv_source=_gemma4_kv_source(sliding, shared),
        ple_dim=0 if ple is None else max(-1, min(ple, 1 << 21)),
        final_softcap=get("final_logit_softcapping", 0.0), tied_embeddings=get("tie_word_embeddings", True),
    )  # fmt: skip
    if get("enable_moe_block", False):  # (26B-A4B: experts beside every layer's MLP)
        n_expert, used, size = get("num_experts", 0), get("top_k_experts", 0), get("moe_intermediate_size", 0)
        kw["moe"] = gemma4_moe(n_expert, used, size,
                               list(range(n_layer)))  # fmt: skip
    return _gemma4_check(kw)


def gemma4_moe(n_expert: int, used: int, n_ff: int, layers: list[int]) -> dict[str, Any]:
    """Gemma 4's ``moe`` config entry (its routing: a softmax over the experts, the chosen renormalised)."""
    from .moe import dense_moe

    return dict(dense_moe(), n_expert=n_expert, n_expert_used=used, n_ff_expert=n_ff, layers=layers)


def alibi_slopes(n_head: int, max_bias: float) -> list[float]:
    """ALiBi's slope per head (twin of arch_config.cpp's alibi_slopes): with n2 the largest power of
    two <= n_head, head h < n2 gets 2^(-max_bias (h + 1) / n2), the others 2^(-max_bias (2 (h - n2) + 1)
    / (2 n2)); in double, rounded once to float32."""
    n2 = 1
    while n2 * 2 <= n_head:
        n2 *= 2
    exps = [-max_bias * ((h + 1) / n2 if h < n2 else (2 * (h - n2) + 1) / (2 * n2)) for h in range(n_head)]
    return [float(np.float32(2.0**e)) for e in exps]


def _alibi(n_layer: int, n_head: int, max_bias: float, where: str) -> dict[str, Any]:
    if not 0.0 < max_bias <= 64.0:
        raise ValueError(f"invalid ALiBi bias bound {max_bias} in {where}")
    return {"alibi": alibi_slopes(n_head, max_bias), "layer_nope": [True] * n_layer}


def gpt_classic_gguf(
    arch: str, md: dict[str, Any], common: dict[str, Any], names: set[Any]
) -> dict[str, Any]:
    """BLOOM, MPT, GPT-2, StarCoder from GGUF (twin of gpt_classic_config_gguf): LayerNorms (bias where
    the file has it), fused q / k / v, a GELU MLP (MPT's exact, the others' tanh), biases where present;
    ALiBi (BLOOM; MPT's bound from its key) or the learned position table; BLOOM's embedding norm."""
    k, n_layer, where = arch + ".", common["n_layer"], "the file"
    out: dict[str, Any] = dict(
        layer_norm=True, ffn_gelu=True, norm_bias="blk.0.attn_norm.bias" in names,
        ffn_bias="blk.0.ffn_up.bias" in names, qkv_bias="blk.0.attn_qkv.bias" in names,
        o_bias="blk.0.attn_output.bias" in names, gelu_erf=arch == "mpt", embd_norm=arch == "bloom",
        pos_embd="position_embd.weight" in names,
        rms_eps=md.get(k + "attention.layer_norm_epsilon", 1e-5),
    )  # fmt: skip
    if arch in ("gpt2", "starcoder") and not out["pos_embd"]:
        raise ValueError("missing tensor 'position_embd.weight'")
    if arch == "mpt" and "blk.0.attn_q_norm.weight" in names:
        raise ValueError("MPT's q / k LayerNorms (qk_ln: attn_q_norm) are not supported")
    if arch in ("bloom", "mpt"):
        out.update(_alibi(n_layer, common["n_head"], md.get(k + "attention.max_alibi_bias", 8.0), where))
    else:
        out["layer_nope"] = [True] * n_layer
    return out


def gpt_classic_hf(arch: str, c: dict[str, Any], common: dict[str, Any], path: str) -> dict[str, Any]:
    """The same from a folder (twin of gpt_classic_config_hf; keys already under Llama's names), as
    transformers runs each: the options it does not run refused by name."""
    n_layer, where = common["n_layer"], f"'{path}'"
    out: dict[str, Any] = dict(layer_norm=True, ffn_gelu=True, norm_bias=True, ffn_bias=True, qkv_bias=True,
                               o_bias=True, rms_eps=c.get("layer_norm_epsilon", 1e-5))  # fmt: skip
    if arch == "bloom":
        if c.get("apply_residual_connection_post_layernorm"):
            raise ValueError(f"apply_residual_connection_post_layernorm=true in {where} is not supported")
        return dict(out, embd_norm=True, **_alibi(n_layer, common["n_head"], 8.0, where))
    if arch == "mpt":
        attn = c.get("attn_config")
        a: dict[str, Any] = attn if isinstance(attn, dict) else {}
        if c.get("expansion_ratio", 4) != 4:
            raise ValueError(f"expansion_ratio other than 4 in {where} is not supported")
        if c.get("no_bias", True) is False:
            raise ValueError(f"no_bias=false (MPT with biases) in {where} is not supported")
        if c.get("logit_scale") is not None:
            raise ValueError(f"logit_scale in {where} is not supported")
        if a.get("qk_ln"):
            raise ValueError(f"attn_config.qk_ln=true in {where} is not supported")
        if a.get("alibi", True) is False:
            raise ValueError(f"attn_config.alibi=false (learned positions) in {where} is not supported")
        if (a.get("attn_type") or "multihead_attention") != "multihead_attention":
            raise ValueError(f"attn_config.attn_type '{a['attn_type']}' in {where} is not supported")
        if a.get("prefix_lm") or a.get("attn_uses_sequence_id"):
            raise ValueError(f"attn_config.prefix_lm / attn_uses_sequence_id in {where} are not supported")
        clip, scale = a.get("clip_qkv") or 0.0, a.get("softmax_scale") or 0.0
        if not (clip >= 0 and scale >= 0):
            raise ValueError(f"invalid attn_config.clip_qkv / softmax_scale in {where}")
        bound = a.get("alibi_bias_max")
        return dict(out, norm_bias=False, ffn_bias=False, qkv_bias=False, o_bias=False, gelu_erf=True,
                    clamp_qkv=float(np.float32(clip)), attn_scale=float(scale),
                    **_alibi(n_layer, common["n_head"], 8.0 if bound is None else bound, where))  # fmt: skip
    out = dict(out, pos_embd=True, layer_nope=[True] * n_layer)
    if c.get("model_type") == "opt":  # OPT: a ReLU MLP, every projection biased where enable_bias says
        if c.get("do_layer_norm_before", True) is False:
            raise ValueError(
                f"do_layer_norm_before=false (OPT-350m's post-LayerNorm layers) in {where} is not supported"
            )
        if c.get("word_embed_proj_dim", common["n_embd"]) != common["n_embd"]:
            raise ValueError(
                "word_embed_proj_dim other than hidden_size (OPT-350m's project_in / project_out) "
                f"in {where} is not supported"
            )
        if c.get("layer_norm_elementwise_affine", True) is False:
            raise ValueError(f"layer_norm_elementwise_affine=false in {where} is not supported")
        if c.get("_remove_final_layer_norm"):
            raise ValueError(f"_remove_final_layer_norm=true in {where} is not supported")
        bias = c.get("enable_bias", True) is not False
        act = c.get("hidden_act") or "relu"
        relu = act == "relu"
        if not relu and act not in ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"):
            raise ValueError(f"hidden_act '{act}' in {where} is not supported (gelu or a tanh GELU is)")
        return dict(out, rms_eps=1e-5, qkv_bias=bias, o_bias=bias, ffn_bias=bias, ffn_relu=relu,
                    gelu_erf=act == "gelu")  # fmt: skip
    if c.get("model_type") == "gpt_neo":  # GPT-Neo: unscaled attention, a window on its "local" layers
        act = c.get("hidden_act") or "gelu_new"
        if act not in ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"):
            raise ValueError(f"hidden_act '{act}' in {where} is not supported (gelu or a tanh GELU is)")
        types = c.get("attention_layers")
        if not isinstance(types, list):  # (attention_types' [[types, repeats], ...] expanded)
            types = []
            for group in c.get("attention_types") or []:
                ok = isinstance(group, list) and len(group) == 2 and isinstance(group[0], list)
                if not ok or not isinstance(group[1], int) or not 0 <= group[1] <= 4096:
                    raise ValueError(f"malformed attention_types in {where}")
                types += list(group[0]) * group[1]
        if len(types) != n_layer:
            raise ValueError(f"attention_layers / attention_types in {where} must give one type per layer")
        for t in types:
            if t not in ("global", "local"):
                raise ValueError(f"attention layer type '{t}' in {where} is not supported (global, local)")
        window = c.get("window_size", 256)
        if not isinstance(window, int) or not 0 <= window <= 1 << 30:
            raise ValueError(f"invalid sliding window {window} (window_size in {where})")
        sliding = [t == "local" for t in types]
        if not any(sliding):
            sliding, window = [], 0
        elif window == 0:
            raise ValueError(f"window_size 0 with local attention layers in {where}")
        return dict(out, qkv_bias=False, attn_scale=1.0, gelu_erf=act == "gelu", sliding_window=window,
                    layer_sliding=sliding)  # fmt: skip
    act = c.get("hidden_act") or ("gelu_new" if arch == "gpt2" else "gelu_pytorch_tanh")
    if act not in ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"):
        raise ValueError(f"hidden_act '{act}' in {where} is not supported (gelu or a tanh GELU is)")
    if c.get("scale_attn_by_inverse_layer_idx"):
        raise ValueError(f"scale_attn_by_inverse_layer_idx=true in {where} is not supported")
    if c.get("add_cross_attention"):
        raise ValueError(f"add_cross_attention=true in {where} is not supported")
    return dict(out, gelu_erf=act == "gelu",
                attn_scale=0.0 if c.get("scale_attn_weights", True) is not False else 1.0)  # fmt: skip


def _afmoe_layers(types: list[bool], window: int) -> dict[str, Any]:
    """AFMoE's layers (twin of arch_config.cpp's afmoe_layers): ``types`` (True: sliding) decide RoPE (the
    sliding layers alone) and, with a window, where it applies; the attention gated by its own projection."""
    w = _window(window)
    sliding = types if w and any(types) else []
    return {"attn_gate": True, "attn_gate_proj": True, "layer_nope": [not t for t in types],
            "sliding_window": w if sliding else 0, "layer_sliding": sliding}  # fmt: skip


def afmoe_gguf(md: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """AFMoE from GGUF: every 4th layer global (llama.cpp's pattern) unless the file's pattern says otherwise,
    the embeddings scaled by sqrt(n_embd) (llama.cpp always)."""
    key, n = "afmoe.attention.sliding_window", common["n_layer"]
    types = _gguf_layer_pattern(md, key + "_pattern", n) or _sliding_but_every(n, 4)
    return {**_afmoe_layers(types, md.get(key, 0)), "embd_scale": math.sqrt(common["n_embd"])}


def afmoe_hf(c: dict[str, Any], common: dict[str, Any], path: str) -> dict[str, Any]:
    """AFMoE from a folder: layer_types, else global_attn_every_n_layers (4); the window (1024 when absent,
    null: none); sqrt(hidden) on the embeddings where mup_enabled."""
    n = common["n_layer"]
    types = _hf_layer_types(c, n)
    if types is None:
        every = c.get("global_attn_every_n_layers")
        every = 4 if every is None else every
        if every < 1:
            raise ValueError(f"config 'global_attn_every_n_layers' in '{path}' must be >= 1")
        types = _sliding_but_every(n, every)
    window = 1024 if "sliding_window" not in c else (c["sliding_window"] or 0)
    out = _afmoe_layers(types, window)
    if c.get("mup_enabled"):
        out["embd_scale"] = math.sqrt(common["n_embd"])
    return out


def minicpm3_gguf(md: dict[str, Any], common: dict[str, Any], tensor: Any, names: set[Any]) -> dict[str, Any]:
    """MiniCPM3 from llama.cpp's files (twin of minicpm3_config_gguf): the latent attention (key_length = nope
    + rope, the value length hidden / heads unless set), rotate_half RoPE, LongRoPE from the rope factor
    tensors, and the release's multipliers, which llama.cpp's graph hard-codes (12, 1.4 / sqrt(layers),
    hidden / 256)."""
    k, n, e = "minicpm3.", common["n_layer"], common["n_embd"]
    rope = md.get(k + "rope.dimension_count", 32)
    v = md.get(k + "attention.value_length", e // common["n_head"] if common["n_head"] > 0 else 0)
    out = _mla(common, md.get(k + "attention.q_lora_rank", 0), md.get(k + "attention.kv_lora_rank", 0),
               md.get(k + "attention.key_length", 96) - rope, rope, v, 0.0)  # fmt: skip
    out.update(rope_style="neox", embd_scale=12.0, residual_scale=float(np.float32(1.4 / math.sqrt(n))),
               logit_scale=float(np.float32(e / 256)))  # fmt: skip
    out.update(_longrope_gguf("minicpm3", md, {**common, **out}, tensor, names))
    return out


def _longrope_gguf(
    arch: str, md: dict[str, Any], common: dict[str, Any], tensor: Any, names: set[Any]
) -> dict[str, Any]:
    """LongRoPE from llama.cpp's rope factor tensors (none: {}), the original context from
    rope.scaling.original_context_length, the cos / sin factor from rope.scaling.attn_factor (Phi-3's
    converter writes it), else transformers' default (twin of arch_config.cpp's longrope_factors_gguf)."""
    if "rope_factors_long.weight" not in names and "rope_factors_short.weight" not in names:
        return {}
    original = max(
        1, min(md.get(arch + ".rope.scaling.original_context_length", common["n_ctx_train"]), 1 << 30)
    )
    attn = md.get(arch + ".rope.scaling.attn_factor", 0.0)
    attn = attn if attn > 0 else _longrope_attn_factor(common["n_ctx_train"] / original, original)
    scaling = {
        "type": "longrope", "original_max_position": original,
        "long_factor": tensor("rope_factors_long.weight").reshape(-1).tolist(),
        "short_factor": tensor("rope_factors_short.weight").reshape(-1).tolist(),
        "attn_factor": attn,
    }  # fmt: skip
    _check_longrope(scaling, common.get("rope_dim", 0), common["head_dim"])
    return {"rope_scaling": scaling}


def minicpm_gguf(md: dict[str, Any], common: dict[str, Any], tensor: Any, names: set[Any]) -> dict[str, Any]:
    """MiniCPM 1 / 2 / 4 from llama.cpp's files (twin of minicpm_config_gguf): Granite's multipliers under
    minicpm.* (no attention.scale: head_dim^-1/2), LongRoPE from the rope factor tensors; experts
    (MiniCPM-MoE) refused."""
    if md.get("minicpm.expert_count", 0) > 0:
        raise ValueError("MiniCPM with experts (minicpm.expert_count) is not supported")
    out = granite_gguf(md, "minicpm")
    out.update(_longrope_gguf("minicpm", md, common, tensor, names))
    return out


def deci_layers(
    common: dict[str, Any], heads: list[int], kv: list[int], ff: list[int], where: str = "the model"
) -> dict[str, Any]:
    """Nemotron-51B / Super / Ultra's per-layer shapes (twin of arch_config.cpp's deci_layers): a query head
    count (0: no attention; else the model's), a KV head count (0 with query heads: linear attention, wo of
    the normed input; else the attention layers' one count) and a feed-forward size (0: none) per layer."""
    n = common["n_layer"]
    if len(heads) != n or len(kv) != n or len(ff) != n:
        raise ValueError(f"per-layer head, KV head and feed-forward counts of {where} must list {n} layers")
    kv_heads = 0
    for i in range(n):
        if heads[i] not in (0, common["n_head"]):
            raise ValueError(f"the layers' query head counts differ in {where} (not supported)")
        if kv[i] < 0 or not 0 <= ff[i] <= 1 << 30:
            raise ValueError(f"invalid KV head count or feed-forward size of layer {i} in {where}")
        if heads[i] > 0 and kv[i] > 0:
            if kv_heads and kv[i] != kv_heads:
                raise ValueError(f"the attention layers' KV head counts differ in {where} (not supported)")
            kv_heads = kv[i]
    out: dict[str, Any] = {
        "layer_no_mixer": [h == 0 for h in heads],
        "layer_linear_attn": [h > 0 and k == 0 for h, k in zip(heads, kv, strict=True)],
        "layer_no_ffn": [f == 0 for f in ff],
        "layer_n_ff": [int(f) if f > 0 else common["n_ff"] for f in ff],
    }
    if kv_heads:
        out["n_head_kv"] = kv_heads
    return out


def _deci_blocks(c: dict[str, Any]) -> tuple[list[int], list[int], list[int]]:
    """(query heads, KV heads, feed-forward sizes) per layer of a nemotron-nas config's block_configs (twin
    of arch_config.cpp's deci_blocks): DeciLM's sizes, 2 ffn_mult hidden / 3 rounded up to 256."""
    blocks, n_head, hidden = (
        c.get("block_configs"),
        c.get("num_attention_heads") or 0,
        c.get("hidden_size") or 0,
    )
    if not isinstance(blocks, list):
        raise ValueError("config 'block_configs' must be a list")
    heads: list[int] = []
    kv: list[int] = []
    ff: list[int] = []
    for b in blocks:
        a, f = (b.get("attention"), b.get("ffn")) if isinstance(b, dict) else (None, None)
        if not isinstance(a, dict) or not isinstance(f, dict):
            raise ValueError("config 'block_configs' must hold attention and ffn objects")
        for key in ("window_length", "num_sink_tokens", "sparsify"):
            if a.get(key) not in (None, False):
                raise ValueError(f"block_configs attention {key} is not supported")
        if f.get("replace_with_linear"):
            raise ValueError("block_configs ffn replace_with_linear is not supported")
        group, noop = a.get("n_heads_in_group"), bool(a.get("no_op"))
        if noop or group is None:
            heads.append(n_head if not noop and a.get("replace_with_linear") else 0)
            kv.append(0)
        else:
            if group <= 0 or n_head % group:
                raise ValueError("invalid n_heads_in_group")
            heads.append(n_head)
            kv.append(n_head // group)
        mult = f.get("ffn_mult")
        if f.get("no_op") or mult is None:
            ff.append(0)
        else:
            if not (0 < mult <= 1e4 and math.isfinite(mult)):
                raise ValueError("invalid ffn_mult")
            size = int(2.0 * mult * hidden / 3.0)
            ff.append(size if size % 256 == 0 else size + 256 - size % 256)
    return heads, kv, ff


def deci_keys(c: dict[str, Any]) -> dict[str, Any]:
    """A nemotron-nas config with the attention layers' KV heads and the widest feed-forward written in as
    num_key_value_heads / intermediate_size (twin of arch_config.cpp's deci_keys)."""
    heads, kv, ff = _deci_blocks(c)
    kv_heads = next((k for h, k in zip(heads, kv, strict=True) if h > 0 and k > 0), 0)
    return {**c, "num_key_value_heads": kv_heads or c.get("num_attention_heads") or 1,
            "intermediate_size": max(ff, default=0) or c.get("hidden_size") or 1}  # fmt: skip


def deci_hf(c: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """A nemotron-nas folder's per-layer shapes from its block_configs (twin of deci_config_hf)."""
    heads, kv, ff = _deci_blocks(c)
    return deci_layers(common, heads, kv, ff)
