"""Mixture-of-experts feed-forward (Qwen3-MoE, Qwen2-MoE, Mixtral, gpt-oss) in NumPy: config, weights,
forward.

The twin of ``csrc/model/moe.h`` / ``moe.cpp`` / ``moe_loader.cpp``. In a MoE layer each token's
feed-forward is a weighted sum of a few experts (small SwiGLU networks) chosen by a router::

    p       = softmax(h @ router.T)                       over all n_expert experts
    chosen  = the n_expert_used largest logits (equal logits: the lower expert index first)
    w       = p[chosen], divided by its sum when norm_topk_prob
    out     = sum over chosen experts, in ascending index, of w_e * expert_e(h)
              + sigmoid(h . shared_gate_inp) * shared(h)     (Qwen2-MoE's shared expert)

gpt-oss: the router and every expert matrix have biases, w is a softmax over the chosen logits alone,
and an expert's activation is (u + 1) * g * sigmoid(alpha * g) with g = min(gate, limit) and
u = clamp(up, -limit, limit) (``swiglu_alpha`` > 0).

Weights use the canonical names of ``MoeWeights``: "layers.{i}.router", "layers.{i}.experts.{e}.w_gate"
(and w_up, w_down), "layers.{i}.shared.w_gate" (...), "layers.{i}.shared_gate_inp".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .quants import MXFP4_LEVELS, mxfp4_scale

MOE_ARCHS = (
    "qwen3moe",
    "qwen2moe",
    "mixtral",
    "gpt-oss",
    "granitemoe",
    "ernie4_5-moe",
    "deepseek2",
    "glm4moe",
    "olmoe",
    "qwen35moe",
    "qwen3next",
    "lfm2moe",
    "granitehybrid",
    "nemotron_h",
    "jamba",
    "llama4",
    "qwen3vlmoe",
    "minimax-m2",
    "hunyuan-moe",
    "dots1",
    "phimoe",
    "exaone-moe",
    "afmoe",
    "dbrx",
    "deepseek",
    "bailingmoe2",
)
EXPERT_MATRICES = ("w_gate", "w_up", "w_down")


def dense_moe() -> dict[str, Any]:
    """The ``moe`` config entry of a dense model."""
    return {
        "n_expert": 0, "n_expert_used": 0, "n_ff_expert": 0, "n_ff_shared": 0,
        "norm_topk_prob": False, "layers": [], **_PLAIN,
    }  # fmt: skip


# The MoE keys only gpt-oss sets (a plain SwiGLU, no biases, softmax over all experts otherwise).
_PLAIN: dict[str, Any] = {"bias": False, "softmax_topk": False, "swiglu_alpha": 0.0, "swiglu_limit": 0.0,
                          "selection_bias": False, "norm_min": 0.0, "deepseek": False,
                          "sigmoid_gating": False, "group_top2": False, "n_group": 1, "topk_group": 1,
                          "routed_scale": 1.0, "norm_eps": float(np.float32(1e-20)),
                          "input_weighted": False, "sparsemixer": False, "sparsemixer_eps": 0.0}  # fmt: skip
_GPT_OSS: dict[str, Any] = {**_PLAIN, "bias": True, "softmax_topk": True,
                            "swiglu_alpha": float(np.float32(1.702)), "swiglu_limit": 7.0}  # fmt: skip
# ERNIE 4.5 MoE: chosen by softmax probability + e_score_correction_bias, weighted by the probability
# over max(the chosen ones' sum, norm_min).
_ERNIE: dict[str, Any] = {**_PLAIN, "selection_bias": True, "norm_min": float(np.float32(1e-12))}


def _validate(moe: dict[str, Any]) -> dict[str, Any]:
    if moe["n_expert"] == 0 or not moe["layers"]:  # no sparse layer (mlp_only_layers may name all): dense
        return dense_moe()
    if not 0 < moe["n_expert"] <= 4096:
        raise ValueError(f"invalid expert count {moe['n_expert']}")
    if not 1 <= moe["n_expert_used"] <= moe["n_expert"]:
        raise ValueError(f"experts used per token {moe['n_expert_used']} is not within 1..{moe['n_expert']}")
    if moe["n_ff_expert"] <= 0 or moe["n_ff_shared"] < 0:
        raise ValueError("invalid expert feed-forward size")
    n, g, tg = moe["n_expert"], moe["n_group"], moe["topk_group"]
    if not 1 <= g <= n or n % g:
        raise ValueError(f"expert group count {g} does not divide the {n} experts")
    if not 1 <= tg <= g or tg * (n // g) < moe["n_expert_used"]:
        raise ValueError(f"expert groups used {tg} of {g} leave fewer than {moe['n_expert_used']} experts")
    if moe["group_top2"] and g > 1 and n // g < 2:
        raise ValueError("expert groups of one expert (a group is scored by its two best)")
    if not (moe["routed_scale"] > 0 and np.isfinite(moe["routed_scale"])):
        raise ValueError(f"invalid routed expert scale {moe['routed_scale']}")
    if moe["sparsemixer"] and moe["n_expert_used"] != 2:
        raise ValueError(
            f"sparsemixer routing picks 2 experts (experts used per token: {moe['n_expert_used']})"
        )
    if moe["sparsemixer"] and not (moe["sparsemixer_eps"] >= 0 and np.isfinite(moe["sparsemixer_eps"])):
        raise ValueError("invalid router_jitter_noise")
    return moe


def gguf_config(
    arch: str, md: dict[str, Any], n_layer: int, n_ff: int, tensors: Any, n_vocab: int = 0
) -> dict[str, Any]:
    """The ``moe`` entry from GGUF metadata (llama.cpp's keys); MoE layers are those with a router."""
    k = arch + "."
    n_expert = md.get(k + "expert_count", 0)
    if (
        arch
        in (
            "qwen3moe",
            "qwen3vlmoe",
            "minimax-m2",
            "qwen2moe",
            "gpt-oss",
            "granitemoe",
            "ernie4_5-moe",
            "glm4moe",
            "olmoe",
            "qwen35moe",
            "qwen3next",
            "lfm2moe",
            "nemotron_h_moe",
            "hunyuan-moe",
            "dots1",
            "phimoe",
            "exaone-moe",
            "afmoe",
            "dbrx",
            "deepseek",
            "bailingmoe2",
        )
        and not n_expert
    ):
        raise ValueError(f"architecture {arch} without {k}expert_count")
    if n_expert == 0:
        return dense_moe()
    glm = arch in (
        "glm4moe",
        "bailingmoe2",
    )  # (GLM-4.5 routes as DeepSeek V3: sigmoid unless the file says so)
    # (llama.cpp: a deepseek2 file without the key routes by softmax, GLM-4.7-Flash's by sigmoid)
    glm_lite = arch == "deepseek2" and n_layer in (47, 48) and n_vocab == 154880
    lfm2 = arch == "lfm2moe"  # (LFM2-MoE routes as DeepSeek V3, in one group)
    nemotron = arch == "nemotron_h_moe"  # (Nemotron-H too; llama.cpp routes it by sigmoid, whatever the key)
    minimax = arch == "minimax-m2"  # (MiniMax-M2: V3's routing in one group, sigmoid hard-coded)
    dots1 = arch in ("dots1", "exaone-moe", "afmoe")  # (dots.llm1, K-EXAONE, AFMoE: V3's routing)
    # (a deepseek2 file with V3's selection bias and no gating key: sigmoid, as every such release)
    layers = [i for i in range(n_layer) if f"blk.{i}.ffn_gate_inp.weight" in tensors]
    v3_bias = arch == "deepseek2" and bool(layers) and f"blk.{layers[0]}.exp_probs_b.bias" in tensors
    gating = (
        2
        if nemotron or minimax
        else md.get(k + "expert_gating_func", 2 if glm or glm_lite or dots1 or v3_bias else 1)
    )
    deepseek = arch in ("deepseek2", "deepseek") or glm or lfm2 or nemotron or minimax or dots1
    if arch not in ("gpt-oss", "llama4") and gating not in (0, 1) and not (deepseek and gating == 2):
        raise ValueError("only softmax expert gating is supported (and sigmoid for deepseek2 and glm4moe)")
    if deepseek:  # (V2 files have no gating key: softmax)
        n_ff_expert = md.get(k + "expert_feed_forward_length", n_ff)
        groups = md.get(k + "expert_group_count", 1) or 1
        return _validate({
            **_PLAIN, "deepseek": True, "sigmoid_gating": gating == 2, "group_top2": gating == 2,
            "n_expert": n_expert,
            "n_expert_used": md.get(k + "expert_used_count", 0), "n_ff_expert": n_ff_expert,
            "n_ff_shared": (md.get(k + "expert_shared_feed_forward_length", 0)
                            if md.get(k + "expert_shared_count", 1) > 0 else 0)
            if nemotron
            # (Ling 2.0: llama.cpp's shared width, else the experts', per shared expert)
            else md.get(k + "expert_shared_feed_forward_length", n_ff_expert)
            * md.get(k + "expert_shared_count", 0)
            if arch == "bailingmoe2"
            else md.get(k + "expert_shared_count", 0) * n_ff_expert,
            "norm_topk_prob": bool(md.get(k + "expert_weights_norm", glm or lfm2 or minimax)),
            "norm_eps": float(np.float32(1e-6 if lfm2 else 1e-20)),
            "routed_scale": float(np.float32(md.get(k + "expert_weights_scale", 1.0))),
            "n_group": groups,
            "topk_group": md.get(k + "expert_group_used_count", groups) if groups > 1 else 1,
            "selection_bias": bool(layers) and f"blk.{layers[0]}.exp_probs_b.bias" in tensors,
            "layers": layers,
        })  # fmt: skip
    if arch == "llama4":  # (llama.cpp hard-codes the routing; the shared expert: the experts' size)
        n_ff_expert = md.get(k + "expert_feed_forward_length", n_ff)
        return _validate({
            **_PLAIN, "input_weighted": True, "n_expert": n_expert,
            "n_expert_used": md.get(k + "expert_used_count", 0), "n_ff_expert": n_ff_expert,
            "n_ff_shared": n_ff_expert, "norm_topk_prob": False, "layers": layers,
        })  # fmt: skip
    if arch == "phimoe":  # (transformers' sparsemixer, router_jitter_noise 0.01: no key holds it)
        return _validate({
            **_PLAIN, "sparsemixer": True, "sparsemixer_eps": float(np.float32(0.01)), "n_expert": n_expert,
            "n_expert_used": md.get(k + "expert_used_count", 0), "n_ff_expert": n_ff, "n_ff_shared": 0,
            "norm_topk_prob": False, "layers": layers,
        })  # fmt: skip
    return _validate({
        **(_GPT_OSS if arch == "gpt-oss" else _ERNIE if arch == "ernie4_5-moe" else _PLAIN),
        # Granite MoE: transformers' softmax over the chosen logits (llama.cpp's over all, renormalised)
        **({"softmax_topk": True} if arch in ("granitemoe", "granitehybrid") else {}),
        "n_expert": n_expert,
        "n_expert_used": md.get(k + "expert_used_count", 0),
        "n_ff_expert": md.get(k + "expert_feed_forward_length", n_ff),
        "n_ff_shared": (
            md.get(k + "expert_shared_feed_forward_length", n_ff)
            if arch in ("qwen2moe", "qwen35moe", "qwen3next", "hunyuan-moe")
            else md.get(k + "expert_shared_count", 0) * md.get(k + "expert_feed_forward_length", n_ff)
            if arch == "ernie4_5-moe"
            else md.get(k + "expert_shared_feed_forward_length", 0)
            if arch in ("granitehybrid", "granitemoe")
            else 0
        ),
        # llama.cpp renormalises the chosen weights for Qwen3-MoE and Mixtral, not for Qwen2-MoE.
        # (and not for OLMoE)
        "norm_topk_prob": arch != "gpt-oss"
        and bool(md.get(k + "expert_weights_norm", arch not in ("qwen2moe", "olmoe", "jamba"))),
        "layers": [i for i in range(n_layer) if f"blk.{i}.ffn_gate_inp.weight" in tensors],
    })  # fmt: skip


def _deepseek_layers(c: dict[str, Any], n_layer: int, n_expert: int, first: int, freq: int) -> list[int]:
    """The sparse layers: those mlp_layer_types calls "sparse" (GLM-4.7-Flash), else from
    first_k_dense_replace on, every moe_layer_freq-th."""
    types = c.get("mlp_layer_types")
    if types is not None:
        if len(types) != n_layer or any(t not in ("dense", "sparse") for t in types):
            raise ValueError(
                f'config \'mlp_layer_types\' must list {n_layer} layer types, "dense" or "sparse"'
            )
        return [i for i, t in enumerate(types) if t == "sparse" and n_expert > 0]
    return [i for i in range(n_layer) if n_expert > 0 and i >= first and i % freq == 0]


def hf_config(arch: str, c: dict[str, Any], n_layer: int, n_ff: int) -> dict[str, Any]:
    """The ``moe`` entry from a config.json (transformers' defaults where a key is absent)."""
    if arch not in MOE_ARCHS:
        return dense_moe()

    def get(key: str, default: Any) -> Any:
        v = c.get(key)
        return default if v is None else v

    if arch == "gpt-oss":
        return _validate({
            **_GPT_OSS, "n_expert": get("num_local_experts", 128),
            "n_expert_used": get("num_experts_per_tok", 4),
            "n_ff_expert": n_ff, "n_ff_shared": 0, "norm_topk_prob": False, "layers": list(range(n_layer)),
            "swiglu_alpha": float(np.float32(get("swiglu_alpha", 1.702))),
            "swiglu_limit": float(np.float32(get("swiglu_limit", 7.0))),
        })  # fmt: skip
    if arch == "jamba":  # JambaConfig's: softmax over all, top-k, not renormalised
        n_expert = get("num_experts", 16)
        period, offset = get("expert_layer_period", 2), get("expert_layer_offset", 1)
        if period < 1 or offset < 0:
            raise ValueError("config 'expert_layer_period' / 'expert_layer_offset' must be >= 1 / >= 0")
        return _validate({
            **_PLAIN, "n_expert": n_expert, "n_expert_used": get("num_experts_per_tok", 2),
            "n_ff_expert": n_ff, "n_ff_shared": 0, "norm_topk_prob": False,
            "layers": [i for i in range(n_layer) if n_expert > 1 and i % period == offset],
        })  # fmt: skip
    if arch == "ernie4_5-moe":  # Ernie4_5_MoeConfig's keys (the Hub's moe_* names)
        n_ff_expert = get("moe_intermediate_size", 1536)
        start, end, step = (
            get("moe_layer_start_index", 1),
            get("moe_layer_end_index", n_layer - 1),
            get("moe_layer_interval", 1),
        )
        if step < 1:
            raise ValueError("config 'moe_layer_interval' must be >= 1")
        last = n_layer - 1 if end < 0 else end
        return _validate({
            **_ERNIE, "n_expert": get("moe_num_experts", get("num_experts", 64)),
            "n_expert_used": get("moe_k", get("num_experts_per_tok", 8)), "n_ff_expert": n_ff_expert,
            "n_ff_shared": get("moe_num_shared_experts", 0) * n_ff_expert, "norm_topk_prob": False,
            "norm_min": float(np.float32(get("moe_norm_min", 1e-12))),
            "layers": [i for i in range(n_layer) if (i + 1) % step == 0 and start <= i <= last],
        })  # fmt: skip
    if arch in (
        "deepseek2",
        "glm4moe",
        "dots1",
        "exaone-moe",
        "deepseek",  # (DeepSeek-MoE: V2's keys, softmax, greedy, not renormalised)
    ):  # DeepseekV2Config / DeepseekV3Config / Glm4MoeConfig / Dots1 / ExaoneMoeConfig
        # (transformers' DeepseekV3 writes no topk_method: it always routes as noaux_tc; GLM likewise)
        glm = arch == "glm4moe"  # (GLM-4.7-Flash, glm4_moe_lite: V3's layers, mlp_layer_types)
        # (dots.llm1: V3's routing whatever topk_method / scoring_func say, as transformers' Dots1; its Hub
        # configs write scoring_func "noaux_tc"; norm_topk_prob off unless set)
        # (EXAONE MoE: V3's router whatever the keys say, num_experts / num_shared_experts, one dense layer,
        # scaled by 2.5 unless set)
        exaone = arch == "exaone-moe"
        dots1 = arch == "dots1" or exaone
        v3_type = glm or dots1 or c.get("model_type") in ("deepseek_v3", "glm4_moe_lite")
        mistral4 = c.get("model_type") == "mistral4"  # (softmax scores, no bias; groups by their two best)
        default = (
            "noaux_tc"
            if v3_type
            else "group_limited_greedy"
            if mistral4 and get("n_group", 1) > 1
            else "greedy"
        )
        method = "noaux_tc" if dots1 else get("topk_method", default)
        v3 = method == "noaux_tc"
        scoring = "sigmoid" if dots1 else get("scoring_func", "sigmoid" if v3 else "softmax")
        if method not in ("greedy", "group_limited_greedy", "noaux_tc"):
            raise ValueError(f"topk_method '{method}' is not supported")
        if scoring not in ("softmax", "sigmoid"):
            raise ValueError(f"scoring_func '{scoring}' is not supported")
        n_ff_expert = get("moe_intermediate_size", 0)
        groups = get("n_group", 1) if method != "greedy" else 1
        first, freq = get("first_k_dense_replace", 1 if glm or exaone else 0), get("moe_layer_freq", 1)
        if freq < 1:
            raise ValueError("config 'moe_layer_freq' must be >= 1")
        n_expert = get("num_experts", 64) if exaone else get("n_routed_experts", get("num_local_experts", 0))
        n_shared = get("num_shared_experts", 1) if exaone else get("n_shared_experts", 0)
        return _validate({
            **_PLAIN, "deepseek": True, "sigmoid_gating": scoring == "sigmoid",
            "group_top2": scoring == "sigmoid" or mistral4, "n_expert": n_expert,
            "n_expert_used": get("num_experts_per_tok", 0), "n_ff_expert": n_ff_expert,
            "n_ff_shared": n_shared * n_ff_expert,
            "norm_topk_prob": bool(get("norm_topk_prob", (v3 or mistral4) and (not dots1 or exaone))),
            "routed_scale": float(np.float32(get("routed_scaling_factor", 2.5 if exaone else 1.0))),
            "n_group": groups, "topk_group": get("topk_group", groups) if method != "greedy" else 1,
            "selection_bias": v3,
            "layers": _deepseek_layers(c, n_layer, n_expert, first, freq),
        })  # fmt: skip
    if arch == "dbrx":  # DbrxFFNConfig's (ffn_config): softmax, top-k, the chosen divided by their 1-norm
        ffn = c.get("ffn_config")
        f: dict[str, Any] = ffn if isinstance(ffn, dict) else {}
        p_norm = f.get("moe_normalize_expert_weights", 1.0)
        if p_norm is not None and p_norm != 1.0:
            raise ValueError("ffn_config.moe_normalize_expert_weights other than 1 or null is not supported")
        return _validate({
            **_PLAIN, "n_expert": f.get("moe_num_experts") or 4, "n_expert_used": f.get("moe_top_k") or 1,
            "n_ff_expert": n_ff, "n_ff_shared": 0, "norm_topk_prob": p_norm is not None,
            "layers": list(range(n_layer)),
        })  # fmt: skip
    if arch == "afmoe":  # AfmoeConfig's defaults: V3's routing in one group, renormalised, times route_scale
        n_ff_expert, first = get("moe_intermediate_size", 1408), get("num_dense_layers", 1)
        n_expert = get("num_experts", 64)
        return _validate({
            **_PLAIN, "deepseek": True, "sigmoid_gating": True, "selection_bias": True,
            "norm_topk_prob": True, "n_expert": n_expert, "n_expert_used": get("num_experts_per_tok", 6),
            "n_ff_expert": n_ff_expert,
            "n_ff_shared": get("num_shared_experts", 2) * n_ff_expert,
            "routed_scale": float(np.float32(get("route_scale", 1.0))),
            "layers": [i for i in range(n_layer) if i >= first] if n_expert > 0 else [],
        })  # fmt: skip
    if arch == "minimax-m2":  # MiniMaxM2Config's defaults: V3's routing in one group, renormalised
        return _validate({
            **_PLAIN, "deepseek": True, "sigmoid_gating": True, "selection_bias": True,
            "n_expert": get("num_local_experts", get("num_experts", 256)),
            "n_expert_used": get("num_experts_per_tok", 8), "n_ff_expert": n_ff, "n_ff_shared": 0,
            "norm_topk_prob": True, "layers": list(range(n_layer)),
        })  # fmt: skip
    if arch == "llama4":  # Llama4TextConfig's defaults: moe_layers, else every interleave_moe_layer_step-th
        step = get("interleave_moe_layer_step", 1)
        if c.get("moe_layers") is not None:
            listed = c["moe_layers"]
            if not isinstance(listed, list) or any(not isinstance(j, int) or not 0 <= j < n_layer
                                                   for j in listed):  # fmt: skip
                raise ValueError("config 'moe_layers' must hold layer indices")
            layers = sorted(set(listed))
        elif step < 1:
            raise ValueError("config 'interleave_moe_layer_step' must be >= 1")
        else:
            layers = list(range(step - 1, n_layer, step))
        size = get("intermediate_size", 8192)
        return _validate({
            **_PLAIN, "input_weighted": True, "n_expert": get("num_local_experts", 16),
            "n_expert_used": get("num_experts_per_tok", 1), "n_ff_expert": size, "n_ff_shared": size,
            "norm_topk_prob": False, "layers": layers,
        })  # fmt: skip
    if (
        arch == "granitemoe"
    ):  # GraniteMoeConfig's defaults; a softmax over the chosen logits (GraniteMoeShared's
        return _validate({  # shared MLP: shared_intermediate_size, 0 for none)
            **_PLAIN, "softmax_topk": True, "n_expert": get("num_local_experts", 8),
            "n_expert_used": get("num_experts_per_tok", 2), "n_ff_expert": n_ff,
            "n_ff_shared": get("shared_intermediate_size", 0),
            "norm_topk_prob": False, "layers": list(range(n_layer)),
        })  # fmt: skip
    if arch == "nemotron_h":  # NemotronHConfig: DeepSeek V3's routing over relu2 experts (its "E" layers)
        from .arch_config import nemotronh_layer_kinds

        kinds = nemotronh_layer_kinds(c, n_layer)
        return _validate({
            **_PLAIN, "deepseek": True, "sigmoid_gating": True, "group_top2": True, "selection_bias": True,
            "n_expert": get("n_routed_experts", 8), "n_expert_used": get("num_experts_per_tok", 2),
            "n_ff_expert": get("moe_intermediate_size", 7688),
            "n_ff_shared": (get("moe_shared_expert_intermediate_size", 7688)
                            if get("n_shared_experts", 1) else 0),
            "norm_topk_prob": bool(get("norm_topk_prob", True)),
            "routed_scale": float(np.float32(get("routed_scaling_factor", 1.0))),
            "n_group": get("n_group", 1), "topk_group": get("topk_group", 1),
            "layers": [i for i, kind in enumerate(kinds) if kind == "E"],
        })  # fmt: skip
    if arch == "granitehybrid":  # GraniteMoeHybridConfig's defaults (0 experts: dense); the shared MLP
        n_expert = 0 if get("model_type", "") == "bamba" else get("num_local_experts", 8)
        return _validate({
            **_PLAIN, "softmax_topk": True, "n_expert": n_expert,
            "n_expert_used": get("num_experts_per_tok", 2), "n_ff_expert": n_ff,
            "n_ff_shared": get("shared_intermediate_size", 1024), "norm_topk_prob": False,
            "layers": list(range(n_layer)) if n_expert else [],
        })  # fmt: skip
    if arch == "lfm2moe":  # Lfm2MoeConfig's defaults: V3's routing in one group
        dense = get("num_dense_layers", 2)
        n_expert = get("num_experts", 32)
        return _validate({
            **_PLAIN, "deepseek": True, "sigmoid_gating": True, "n_expert": n_expert,
            "n_expert_used": get("num_experts_per_tok", 4), "n_ff_expert": get("moe_intermediate_size", 1792),
            "n_ff_shared": 0, "norm_topk_prob": bool(get("norm_topk_prob", True)),
            "selection_bias": bool(get("use_expert_bias", True)), "norm_eps": float(np.float32(1e-6)),
            "routed_scale": float(np.float32(get("routed_scaling_factor", 1.0))),
            "layers": [i for i in range(n_layer) if i >= dense and n_expert > 0],
        })  # fmt: skip
    if arch == "hunyuan-moe":  # HunYuanMoEV1Config: softmax top-k renormalised, one ungated shared MLP

        def uniform(key: str, default: int) -> int:  # (the Hub's per-layer lists: all alike)
            v = c.get(key)
            if not isinstance(v, list):
                return int(get(key, default))
            if v and any(e != v[0] for e in v):
                raise ValueError(f"config '{key}' must hold one integer for every layer (values differ)")
            return int(v[0]) if v else default

        if uniform("num_shared_expert", 1) != 1:
            raise ValueError(f"num_shared_expert {uniform('num_shared_expert', 1)} is not supported")
        return _validate({
            **_PLAIN, "n_expert": uniform("num_experts", 1), "n_expert_used": uniform("moe_topk", 1),
            "n_ff_expert": uniform("moe_intermediate_size", n_ff), "n_ff_shared": n_ff,
            "norm_topk_prob": True, "layers": list(range(n_layer)),
        })  # fmt: skip
    if arch == "olmoe":  # OlmoeConfig's defaults; experts of intermediate_size
        return _validate({
            **_PLAIN, "n_expert": get("num_experts", 64), "n_expert_used": get("num_experts_per_tok", 8),
            "n_ff_expert": n_ff, "n_ff_shared": 0, "norm_topk_prob": bool(get("norm_topk_prob", False)),
            "layers": list(range(n_layer)),
        })  # fmt: skip
    if arch == "phimoe":  # PhimoeConfig's defaults: sparsemixer over 16 experts
        eps = c.get("router_jitter_noise")
        return _validate({
            **_PLAIN, "sparsemixer": True, "sparsemixer_eps": float(np.float32(0.01 if eps is None else eps)),
            "n_expert": get("num_local_experts", 16), "n_expert_used": get("num_experts_per_tok", 2),
            "n_ff_expert": n_ff, "n_ff_shared": 0, "norm_topk_prob": False, "layers": list(range(n_layer)),
        })  # fmt: skip
    if arch == "mixtral":
        return _validate({
            "n_expert": get("num_local_experts", 8), "n_expert_used": get("num_experts_per_tok", 2),
            "n_ff_expert": n_ff, "n_ff_shared": 0, "norm_topk_prob": True, "layers": list(range(n_layer)),
            **_PLAIN,
        })  # fmt: skip
    q3, q35 = arch == "qwen3moe", arch == "qwen35moe"  # (Qwen3_5MoeTextConfig's defaults)
    vl = arch == "qwen3vlmoe"  # (Qwen3VLMoeTextConfig's: 60 experts, 4 used, 1408 rows, renormalised)
    qn = arch == "qwen3next"  # (Qwen3NextConfig's: 512 experts, 10 used, renormalised)
    n_expert = get("num_experts", get("num_local_experts", 512 if qn else 256 if q35 else 128 if q3 else 60))
    step = get("decoder_sparse_step", 1)
    dense = get("mlp_only_layers", [])
    return _validate({
        **_PLAIN,
        "n_expert": n_expert,
        "n_expert_used": get("num_experts_per_tok", 10 if qn else 8 if q3 or q35 else 4),
        "n_ff_expert": get("moe_intermediate_size", 512 if q35 or qn else 768 if q3 else 1408),
        "n_ff_shared": 0 if q3 or vl else get("shared_expert_intermediate_size", 512 if q35 or qn else 5632),
        # (Qwen3.5's and Qwen3-VL-MoE's routers always renormalise the chosen weights)
        "norm_topk_prob": q35 or vl or bool(get("norm_topk_prob", qn)),
        # transformers: a layer is sparse when not in mlp_only_layers and (i + 1) % step == 0.
        "layers": [i for i in range(n_layer) if n_expert > 0 and i not in dense and (i + 1) % step == 0],
    })  # fmt: skip


def gguf_layer_weights(
    cfg: dict[str, Any], i: int, get: Callable[[str], np.ndarray], names: set[Any], w: dict[str, np.ndarray]
) -> None:
    """Layer i's MoE weights from a GGUF file: 3-D expert stacks (or per-expert 2-D tensors) sliced."""
    moe, e_dim = cfg["moe"], cfg["n_embd"]
    n, f, p, c = moe["n_expert"], moe["n_ff_expert"], f"blk.{i}.", f"layers.{i}."
    w[c + "router"] = _shaped(get(p + "ffn_gate_inp.weight"), n, e_dim)
    if p + "ffn_gate_up_exps.weight" in names:
        gate_up = _shaped(get(p + "ffn_gate_up_exps.weight"), n * 2 * f, e_dim).reshape(n, 2 * f, e_dim)
        stacks = {"w_gate": gate_up[:, :f], "w_up": gate_up[:, f:]}
    else:
        stacks = {}
        for field, name in (("w_gate", "ffn_gate_exps"), ("w_up", "ffn_up_exps")):
            if p + name + ".weight" in names:
                stacks[field] = _shaped(get(p + name + ".weight"), n * f, e_dim).reshape(n, f, e_dim)
    if p + "ffn_down_exps.weight" in names:
        stacks["w_down"] = _shaped(get(p + "ffn_down_exps.weight"), n * e_dim, f).reshape(n, e_dim, f)
    per_expert = {
        "w_gate": ("ffn_gate", f, e_dim),
        "w_up": ("ffn_up", f, e_dim),
        "w_down": ("ffn_down", e_dim, f),
    }
    if cfg["ffn_relu2"]:  # (Nemotron-H: up and down alone)
        del per_expert["w_gate"]
    for field, (stem, rows, cols) in per_expert.items():
        for e in range(n):
            if field in stacks:
                w[f"{c}experts.{e}.{field}"] = stacks[field][e]
            else:  # older Mixtral files: one tensor per expert
                w[f"{c}experts.{e}.{field}"] = _shaped(_need(get, names, f"{p}{stem}.{e}.weight"), rows, cols)
    if moe["bias"]:  # gpt-oss: the router's bias and one bias row per expert
        w[c + "router_bias"] = _need(get, names, p + "ffn_gate_inp.bias").reshape(n)
        for field, stem, cols in (("b_gate", "ffn_gate_exps", f), ("b_up", "ffn_up_exps", f),
                                  ("b_down", "ffn_down_exps", e_dim)):  # fmt: skip
            rows = _shaped(_need(get, names, f"{p}{stem}.bias"), n, cols)
            for e in range(n):
                w[f"{c}experts.{e}.{field}"] = rows[e]
    if moe["n_ff_shared"]:
        s = moe["n_ff_shared"]
        for field, stem, rows, cols in (
            ("w_gate", "gate", s, e_dim),
            ("w_up", "up", s, e_dim),
            ("w_down", "down", e_dim, s),
        ):
            if field == "w_gate" and cfg["ffn_relu2"]:
                continue
            w[f"{c}shared.{field}"] = _shaped(_need(get, names, f"{p}ffn_{stem}_shexp.weight"), rows, cols)
        if not _shared_ungated(moe, cfg["arch"]):
            w[c + "shared_gate_inp"] = _need(get, names, p + "ffn_gate_inp_shexp.weight").reshape(e_dim)
    if moe["selection_bias"]:
        w[c + "selection_bias"] = _shaped(_need(get, names, p + "exp_probs_b.bias"), 1, n).reshape(n)


def _shared_ungated(moe: dict[str, Any], arch: str) -> bool:
    """Shared experts added as they are, with no gate of their own: ERNIE's (routed with a selection
    bias), DeepSeek's, GLM's and Granite 4.0-H's shared MLP (twin of shared_experts_ungated)."""
    plain = arch in ("granitehybrid", "granitemoe", "hunyuan-moe")  # (Granite's and Hunyuan's shared MLPs)
    return bool(moe["selection_bias"] or moe["deepseek"] or moe["input_weighted"] or plain)


def _view_stacks(
    cfg: dict[str, Any], i: int, gate_up: np.ndarray, down: np.ndarray, w: dict[str, np.ndarray]
) -> None:
    """Layer i's experts from two stacks: gate_up [n, 2 n_ff, n_embd] (gate rows, then up rows) and
    down [n, n_embd, n_ff] (twin of view_expert_stacks)."""
    n, f, e_dim = cfg["moe"]["n_expert"], cfg["moe"]["n_ff_expert"], cfg["n_embd"]
    gate_up = _shaped(gate_up, n * 2 * f, e_dim).reshape(n, 2 * f, e_dim)
    down = _shaped(down, n * e_dim, f).reshape(n, e_dim, f)
    for e in range(n):
        q = f"layers.{i}.experts.{e}."
        w[q + "w_gate"], w[q + "w_up"], w[q + "w_down"] = gate_up[e, :f], gate_up[e, f:], down[e]


def hf_layer_weights(
    cfg: dict[str, Any], i: int, get: Callable[[str], np.ndarray], names: set[Any], w: dict[str, np.ndarray]
) -> None:
    """Layer i's MoE weights from a HF folder (Qwen's mlp.experts.E.*_proj, Mixtral's and LFM2-MoE's
    w1/w3/w2)."""
    moe, e_dim, mixtral = cfg["moe"], cfg["n_embd"], cfg["arch"] in ("mixtral", "phimoe")
    lfm2 = cfg["arch"] == "lfm2moe"
    n, f, c = moe["n_expert"], moe["n_ff_expert"], f"layers.{i}."
    if cfg["arch"] == "gpt-oss":
        _gpt_oss_hf_layer(cfg, i, get, names, w)
        return
    if cfg["arch"] == "llama4":  # transposed stacks: gate_up_proj [n, n_embd, 2 n_ff] (gate, then up)
        p = f"model.layers.{i}.feed_forward."
        w[c + "router"] = _shaped(_need(get, names, p + "router.weight"), n, e_dim)
        gate_up = _shaped(_need(get, names, p + "experts.gate_up_proj"), n * e_dim, 2 * f)
        gate_up = gate_up.reshape(n, e_dim, 2 * f)
        down = _shaped(_need(get, names, p + "experts.down_proj"), n * f, e_dim).reshape(n, f, e_dim)
        for e in range(n):
            q = f"{c}experts.{e}."
            w[q + "w_gate"], w[q + "w_up"] = gate_up[e, :, :f].T, gate_up[e, :, f:].T
            w[q + "w_down"] = down[e].T
        s = moe["n_ff_shared"]
        for field, stem in (("w_gate", "gate_proj"), ("w_up", "up_proj"), ("w_down", "down_proj")):
            rows, cols = (e_dim, s) if field == "w_down" else (s, e_dim)
            name = f"{p}shared_expert.{stem}.weight"
            w[f"{c}shared.{field}"] = _shaped(_need(get, names, name), rows, cols)
        return
    if cfg["arch"] == "dbrx":  # w1 / v1 / w2 stacks [n F, E]; an expert's down: its w2 block transposed
        p = f"model.layers.{i}.mlp."
        w[c + "router"] = _shaped(_need(get, names, p + "gate.weight"), n, e_dim)
        stacks = {k: _shaped(_need(get, names, p + "experts." + k), n * f, e_dim).reshape(n, f, e_dim)
                  for k in ("w1", "v1", "w2")}  # fmt: skip
        for e in range(n):
            q = f"{c}experts.{e}."
            w[q + "w_gate"], w[q + "w_up"] = stacks["w1"][e], stacks["v1"][e]
            w[q + "w_down"] = np.ascontiguousarray(stacks["w2"][e].T)
        return
    if cfg["arch"] == "nemotron_h":  # relu2 experts and shared MLP: up_proj / down_proj each
        p = f"backbone.layers.{i}.mixer."
        w[c + "router"] = _shaped(_need(get, names, p + "gate.weight"), n, e_dim)
        for e in range(n):
            w[f"{c}experts.{e}.w_up"] = _shaped(_need(get, names, f"{p}experts.{e}.up_proj.weight"), f, e_dim)
            w[f"{c}experts.{e}.w_down"] = _shaped(
                _need(get, names, f"{p}experts.{e}.down_proj.weight"), e_dim, f
            )
        if moe["n_ff_shared"]:
            s = moe["n_ff_shared"]
            w[c + "shared.w_up"] = _shaped(_need(get, names, p + "shared_experts.up_proj.weight"), s, e_dim)
            w[c + "shared.w_down"] = _shaped(
                _need(get, names, p + "shared_experts.down_proj.weight"), e_dim, s
            )
        bias = _need(get, names, p + "gate.e_score_correction_bias")
        w[c + "selection_bias"] = _shaped(bias, 1, n).reshape(n)
        return
    if cfg["arch"] in ("granitemoe", "granitehybrid"):  # 3-D stacks: input_linear = gate then up rows
        p = f"model.layers.{i}.block_sparse_moe."
        # (GraniteMoeSWA's folders: transformers' module names, the same layouts)
        mod = p + "router.layer.weight" not in names and p + "router.weight" in names
        router_name, gate_up_name, down_name = (
            ("router.weight", "experts.gate_up_proj", "experts.down_proj")
            if mod
            else ("router.layer.weight", "input_linear.weight", "output_linear.weight")
        )
        w[c + "router"] = _shaped(_need(get, names, p + router_name), n, e_dim)
        _view_stacks(cfg, i, _need(get, names, p + gate_up_name), _need(get, names, p + down_name), w)
        if moe["n_ff_shared"]:  # (Granite 4.0-H's shared MLP: input_linear [gate | up], output_linear)
            s, sp = moe["n_ff_shared"], f"model.layers.{i}.shared_mlp."
            gate_up = _shaped(_need(get, names, sp + "input_linear.weight"), 2 * s, e_dim)
            w[c + "shared.w_gate"], w[c + "shared.w_up"] = gate_up[:s], gate_up[s:]
            w[c + "shared.w_down"] = _shaped(_need(get, names, sp + "output_linear.weight"), e_dim, s)
        return
    jamba = cfg["arch"] == "jamba"  # (its router: feed_forward.router)
    # (MiniMax-M2's folders: Mixtral's names, its selection bias beside the router)
    minimax = cfg["arch"] == "minimax-m2" and f"model.layers.{i}.block_sparse_moe.gate.weight" in names
    mixtral = mixtral or minimax
    p = f"model.layers.{i}." + (
        "block_sparse_moe." if mixtral else "feed_forward." if lfm2 or jamba else "mlp."
    )
    w[c + "router"] = _shaped(_need(get, names, p + ("router.weight" if jamba else "gate.weight")), n, e_dim)
    stems = {"w_gate": "w1", "w_up": "w3", "w_down": "w2"} if mixtral or lfm2 else {
        "w_gate": "gate_proj", "w_up": "up_proj", "w_down": "down_proj"}  # fmt: skip
    gu_shape = get(p + "experts.gate_up_proj").shape if p + "experts.gate_up_proj" in names else ()
    if len(gu_shape) == 3 and gu_shape[1:] == (e_dim, 2 * f) and e_dim != 2 * f:
        # the Hub's Qwen3-VL-MoE files: transposed stacks (gate_up_proj [n, E, 2F]: gate then up
        # columns; down_proj [n, F, E]), as transformers' conversion reads them when the shapes say so
        gate_up = get(p + "experts.gate_up_proj").transpose(0, 2, 1)
        down = _shaped(_need(get, names, p + "experts.down_proj"), n * f, e_dim).reshape(n, f, e_dim)
        _view_stacks(cfg, i, gate_up, down.transpose(0, 2, 1), w)
    elif gu_shape:  # transformers 5's fused stacks (Mistral 4's, Qwen3-VL-MoE's as transformers writes them)
        _view_stacks(cfg, i, get(p + "experts.gate_up_proj"), _need(get, names, p + "experts.down_proj"), w)
    else:
        for e in range(n):
            for field, stem in stems.items():
                rows, cols = (e_dim, f) if field == "w_down" else (f, e_dim)
                w[f"{c}experts.{e}.{field}"] = _shaped(
                    _need(get, names, f"{p}experts.{e}.{stem}.weight"), rows, cols
                )
    ungated = _shared_ungated(moe, cfg["arch"])  # (shared_experts; Qwen2-MoE's gated shared_expert otherwise)
    if moe["n_ff_shared"]:
        s = moe["n_ff_shared"]
        for field, stem in (("w_gate", "gate_proj"), ("w_up", "up_proj"), ("w_down", "down_proj")):
            rows, cols = (e_dim, s) if field == "w_down" else (s, e_dim)
            shared = "shared_experts" if ungated else "shared_expert"
            w[f"{c}shared.{field}"] = _shaped(_need(get, names, f"{p}{shared}.{stem}.weight"), rows, cols)
        if not ungated:
            w[c + "shared_gate_inp"] = _shaped(
                _need(get, names, p + "shared_expert_gate.weight"), 1, e_dim
            ).reshape(e_dim)
    if moe["selection_bias"]:
        stat = (
            "moe_statics."
            if cfg["arch"] == "ernie4_5-moe"
            else ""
            if cfg["arch"] == "minimax-m2"
            or (
                cfg["arch"] == "exaone-moe" and p + "e_score_correction_bias" in names
            )  # (EXAONE MoE's, if there)
            else "gate."
        )
        name = p + "expert_bias" if lfm2 else p + stat + "e_score_correction_bias"
        bias = _need(get, names, name)
        w[c + "selection_bias"] = _shaped(bias, 1, n).reshape(n)


def _gpt_oss_hf_layer(
    cfg: dict[str, Any], i: int, get: Callable[..., np.ndarray], names: set[Any], w: dict[str, np.ndarray]
) -> None:
    """gpt-oss's experts as transformers keeps them: gate_up_proj [n, n_embd, 2 n_ff] with gate and up
    interleaved along the last axis (2f gate, 2f + 1 up), down_proj [n, n_ff, n_embd], their biases
    [n, 2 n_ff] and [n, n_embd]; and the router's weight and bias. The Hub's folders hold the experts
    in MXFP4 instead (``*_blocks`` / ``*_scales``, rows not transposed: ``mxfp4_hf``). ``get(name,
    u8=True)`` reads a U8 tensor's bytes."""
    n, f, e_dim, c = cfg["moe"]["n_expert"], cfg["moe"]["n_ff_expert"], cfg["n_embd"], f"layers.{i}."
    p = f"model.layers.{i}.mlp."
    w[c + "router"] = _shaped(_need(get, names, p + "router.weight"), n, e_dim)
    w[c + "router_bias"] = _need(get, names, p + "router.bias").reshape(n)
    if p + "experts.gate_up_proj_blocks" in names:
        if e_dim % 32 or f % 32:
            raise ValueError(f"gpt-oss MXFP4 experts need sizes that are multiples of 32, got {e_dim}, {f}")

        def packed(stem: str, rows: int, cols: int) -> np.ndarray:
            blocks, scales = p + f"experts.{stem}_blocks", p + f"experts.{stem}_scales"
            for name, shape in ((blocks, (n, rows, cols // 32, 16)), (scales, (n, rows, cols // 32))):
                if name not in names:
                    raise ValueError(f"missing tensor '{name}'")
                if get(name, u8=True).shape != shape:
                    raise ValueError(f"shape mismatch for tensor '{name}': expected {shape}")
            return mxfp4_hf(get(blocks, u8=True), get(scales, u8=True)).transpose(0, 2, 1)

        gate_up, down = packed("gate_up_proj", 2 * f, e_dim), packed("down_proj", e_dim, f)
    else:
        gate_up = _shaped(_need(get, names, p + "experts.gate_up_proj"), n * e_dim, 2 * f)
        gate_up = gate_up.reshape(n, e_dim, 2 * f)
        down = _shaped(_need(get, names, p + "experts.down_proj"), n * f, e_dim).reshape(n, f, e_dim)
    gate_up_bias = _shaped(_need(get, names, p + "experts.gate_up_proj_bias"), n, 2 * f)
    down_bias = _shaped(_need(get, names, p + "experts.down_proj_bias"), n, e_dim)
    for e in range(n):
        q = f"{c}experts.{e}."
        w[q + "w_gate"], w[q + "w_up"] = gate_up[e, :, 0::2].T, gate_up[e, :, 1::2].T
        w[q + "w_down"] = down[e].T
        w[q + "b_gate"], w[q + "b_up"] = gate_up_bias[e, 0::2], gate_up_bias[e, 1::2]
        w[q + "b_down"] = down_bias[e]


def mxfp4_hf(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """HF's MXFP4 stacks as float32: ``blocks`` [..., rows, cols / 32, 16] (byte i: element 2i in its low
    nibble, 2i + 1 in its high one), ``scales`` [..., rows, cols / 32] (E8M0) -> [..., rows, cols], each
    element the E2M1 value of its code times 2^(scale - 127) (as twice the value times 2^(scale - 128),
    exact)."""
    codes = np.stack([blocks & 15, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    values = MXFP4_LEVELS[codes].astype(np.float32) * mxfp4_scale(scales)[..., None]
    return values.reshape(*blocks.shape[:-2], -1)


def _need(get: Callable[[str], np.ndarray], names: set[Any], name: str) -> np.ndarray:
    if name not in names:
        raise ValueError(f"missing tensor '{name}'")
    return get(name)


def _shaped(x: np.ndarray, rows: int, cols: int) -> np.ndarray:
    x = x.reshape(-1, x.shape[-1])
    if x.shape != (rows, cols):
        raise ValueError(f"shape mismatch: expected {rows} x {cols}, got {x.shape}")
    return x


def matrix_names(cfg: dict[str, Any]) -> list[str]:
    """The MoE matrices the C++ kernels multiply (and dtype bfloat16 rounds): experts and shared
    expert, not the router, whose products stay exact."""
    moe, out = cfg["moe"], []
    for i in moe["layers"]:
        for m in EXPERT_MATRICES:
            out += [f"layers.{i}.experts.{e}.{m}" for e in range(moe["n_expert"])]
            if moe["n_ff_shared"]:
                out.append(f"layers.{i}.shared.{m}")
    return out


def route(
    logits: np.ndarray, k: int, norm: bool, softmax_topk: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """One token's chosen experts (ascending) and their weights from its router logits [n_expert]:
    a softmax over all logits (renormalised over the chosen with ``norm``), or over the chosen ones
    alone (``softmax_topk``, gpt-oss)."""
    order = np.argsort(-logits, kind="stable")  # stable: equal logits keep the lower index first
    chosen = np.sort(order[:k])
    if softmax_topk:
        p = np.exp(logits[chosen].astype(np.float64) - logits[order[0]])
        return chosen, (p / p.sum()).astype(np.float32)
    p = np.exp(logits.astype(np.float64) - logits.max())
    weight = (p[chosen] / p.sum()).astype(np.float32)
    if norm:
        weight = (weight / weight.astype(np.float64).sum()).astype(np.float32)
    return chosen, weight


def route_sparsemixer(logits: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Phi-3.5-MoE's sparsemixer at inference (twin of moe.cpp's route_sparsemixer): the best logit's
    expert (equal ones: the lower index), weighted by the softmax over the logits s with
    (top - s) / max(|s|, top) <= 2 eps (float32, as transformers) evaluated at it; then the best of the
    others likewise, over the others. Ascending."""
    s, cut = logits.astype(np.float32), np.float32(2.0) * np.float32(eps)
    picks, weights, left = [], [], np.ones(len(s), dtype=bool)
    for _ in range(2):
        best = int(np.argmax(np.where(left, s, -np.inf)))  # (the first of equal maxima)
        top = s[best]
        with np.errstate(invalid="ignore", divide="ignore"):
            kept = left & ~(((top - s) / np.maximum(np.abs(s), top)) > cut)
        total = np.exp(s[kept].astype(np.float64) - np.float64(top)).sum()
        picks.append(best)
        weights.append(np.float32(1.0 / total))
        left[best] = False
    order = np.argsort(picks)
    return np.asarray(picks)[order], np.asarray(weights, dtype=np.float32)[order]


def route_by_selection_bias(
    logits: np.ndarray, bias: np.ndarray, k: int, norm_min: float
) -> tuple[np.ndarray, np.ndarray]:
    """ERNIE 4.5 MoE's routing: p = softmax(logits) (float32 values), the k largest p + bias chosen
    (equal ones: the lower index first), weighted by p over max(the chosen p's sum, norm_min)."""
    e = np.exp(logits.astype(np.float64) - logits.max())
    p = (e / e.sum()).astype(np.float32)
    score = (p + bias.astype(np.float32)).astype(np.float32)
    chosen = np.sort(np.argsort(-score, kind="stable")[:k])
    total = np.float32(0)
    for j in chosen:  # (summed in order, in float32, as the C++ route)
        total = np.float32(total + p[j])
    return chosen, (p[chosen] / max(total, np.float32(norm_min))).astype(np.float32)


def route_deepseek(
    moe: dict[str, Any], logits: np.ndarray, bias: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """DeepSeek V2 / V3's routing (twin of moe.cpp's route_deepseek): scores p = softmax (V2) or
    sigmoid (V3) of the logits (float32 values); choice = p + bias where the layer has one; with
    groups, only the experts of the topk_group best groups are eligible (a group's score: its best
    choice for V2, the sum of its two best for V3; equal scores: the lower group); the k best eligible
    choices (equal ones: the lower expert), weighted by p (over their float32 sum + norm_eps with
    norm_topk_prob) times routed_scale."""
    if moe["sigmoid_gating"]:
        p = (1 / (1 + np.exp(-logits.astype(np.float64)))).astype(np.float32)
    else:
        e = np.exp(logits.astype(np.float64) - logits.max())
        p = (e / e.sum()).astype(np.float32)
    choice = (p + bias.astype(np.float32)).astype(np.float32) if bias is not None else p.copy()
    groups = moe["n_group"]
    if groups > 1:
        by_group = choice.reshape(groups, -1)
        top2 = -np.sort(-by_group, axis=1)[:, :2]
        score = top2.sum(axis=1, dtype=np.float32) if moe["group_top2"] else top2[:, 0]
        kept = np.argsort(-score, kind="stable")[: moe["topk_group"]]
        mask = np.zeros(groups, dtype=bool)
        mask[kept] = True
        choice = np.where(np.repeat(mask, by_group.shape[1]), choice, -np.inf).astype(np.float32)
    chosen = np.sort(np.argsort(-choice, kind="stable")[: moe["n_expert_used"]])
    weight = p[chosen].astype(np.float32)
    total = np.float32(0)
    for v in weight:  # (summed in expert order, in float32, as the C++ route)
        total = np.float32(total + v)
    if moe["norm_topk_prob"]:
        weight = (weight / np.float32(total + np.float32(moe["norm_eps"]))).astype(np.float32)
    return chosen, (weight * np.float32(moe["routed_scale"])).astype(np.float32)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


def relu2(x: np.ndarray) -> np.ndarray:
    """relu(x)^2 (Nemotron-H's feed-forward activation; twin of ops relu2_row)."""
    return (np.maximum(x, 0) * np.maximum(x, 0)).astype(np.float32)


def clamped_swiglu(moe: dict[str, Any], gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """gpt-oss's expert activation: (u + 1) * g * sigmoid(alpha * g), g = min(gate, limit),
    u = clamp(up, -limit, limit)."""
    limit, alpha = np.float32(moe["swiglu_limit"]), np.float32(moe["swiglu_alpha"])
    g, u = np.minimum(gate, limit), np.clip(up, -limit, limit)
    return ((u + 1) * (g / (1 + np.exp(-alpha * g)))).astype(np.float32)


def moe_ffn(
    cfg: dict[str, Any],
    w: dict[str, np.ndarray],
    i: int,
    h: np.ndarray,
    rounding: Callable[[np.ndarray, str], np.ndarray],
) -> np.ndarray:
    """The MoE feed-forward of layer i for normalised rows h [n, n_embd]; ``rounding(x, name)`` is
    applied to the input of every expert matrix, as the C++ kernels round it for that matrix
    (``model.ActivationRounding``; the router's input stays exact)."""
    moe, c = cfg["moe"], f"layers.{i}."
    logits = h @ w[c + "router"].T
    if moe["bias"]:
        logits = logits + w[c + "router_bias"]
    out = np.zeros_like(h)
    for t in range(len(h)):
        if moe["sparsemixer"]:  # Phi-3.5-MoE
            chosen, weight = route_sparsemixer(logits[t], moe["sparsemixer_eps"])
        elif moe["deepseek"]:
            chosen, weight = route_deepseek(moe, logits[t], w.get(c + "selection_bias"))
        elif moe["input_weighted"]:  # Llama 4: the k largest logits, sigmoid of each, on the input
            chosen, _ = route(logits[t], moe["n_expert_used"], False, True)
            weight = (1.0 / (1.0 + np.exp(-logits[t][chosen].astype(np.float64)))).astype(np.float32)
        elif moe["selection_bias"]:  # ERNIE 4.5 MoE
            chosen, weight = route_by_selection_bias(
                logits[t], w[c + "selection_bias"], moe["n_expert_used"], moe["norm_min"]
            )
        else:
            chosen, weight = route(
                logits[t], moe["n_expert_used"], moe["norm_topk_prob"], moe["softmax_topk"]
            )
        for e, we in zip(chosen, weight, strict=True):
            p = f"{c}experts.{e}."
            if cfg["ffn_relu2"]:  # Nemotron-H: relu(up x)^2, no gate
                mid = relu2(rounding(h[t], p + "w_up") @ w[p + "w_up"].T)
                out[t] += we * (rounding(mid, p + "w_down") @ w[p + "w_down"].T)
                continue
            x = (h[t] * we).astype(np.float32) if moe["input_weighted"] else h[t]  # (Llama 4: on the input)
            we = np.float32(1.0) if moe["input_weighted"] else we
            gate, up = (rounding(x, p + m) @ w[p + m].T for m in ("w_gate", "w_up"))
            if moe["swiglu_alpha"] > 0:  # gpt-oss
                mid = clamped_swiglu(moe, gate + w[p + "b_gate"], up + w[p + "b_up"])
                down = rounding(mid, p + "w_down") @ w[p + "w_down"].T + w[p + "b_down"]
            else:
                mid = silu(gate) * up
                down = rounding(mid, p + "w_down") @ w[p + "w_down"].T
            out[t] += we * down
    if moe["n_ff_shared"]:
        p = c + "shared."
        if cfg["ffn_relu2"]:
            mid = relu2(rounding(h, p + "w_up") @ w[p + "w_up"].T)
        else:
            gate, up = (rounding(h, p + m) @ w[p + m].T for m in ("w_gate", "w_up"))
            mid = silu(gate) * up
        down = rounding(mid, p + "w_down") @ w[p + "w_down"].T
        if c + "shared_gate_inp" not in w:  # ERNIE 4.5 MoE: the shared experts as they are
            out += down
        else:
            shared_gate = 1 / (
                1 + np.exp(-(h.astype(np.float64) @ w[c + "shared_gate_inp"].astype(np.float64)))
            )
            out += shared_gate.astype(np.float32)[:, None] * down
    return out.astype(np.float32)
