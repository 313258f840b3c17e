"""Families whose Hugging Face folders need remote code (no transformers class) and whose GGUF files
llama.cpp writes under their own architecture names: MiniCPM 1 / 2 / 4 (``minicpm``), InternLM2 / 2.5
(``internlm2``), DeepSeek-MoE 16B (``deepseek``) and Ling / Ring 2.0 (``bailingmoe2``).

Each is a model transformers does run under another name, which is the oracle here:

- MiniCPM is Granite with the scores scaled by head_dim^-1/2: embeddings times scale_emb, each
  sublayer's output times scale_depth / sqrt(layers), logits divided by hidden / dim_model_base. A tiny
  GraniteForCausalLM (attention_multiplier head_dim^-1/2) is rewritten as a MiniCPM folder (its
  config's keys, the same tensors) and converted as llama.cpp's converter converts MiniCPM (its
  minicpm.* multipliers, q / k permuted, LongRoPE's factor tensors);
- InternLM2 is Llama with q / k / v fused per KV group (wqkv: the group's queries, its key, its value)
  and its own tensor names; a tiny LlamaForCausalLM is rewritten as an InternLM2 folder, with the
  biases (``bias``) once;
- DeepSeek-MoE is Llama's attention with DeepSeek V2's MLP after the leading dense layers: softmax
  router scores, the top k not renormalised, shared experts. The oracle is a tiny LlamaForCausalLM
  whose sparse layers' MLPs are transformers' own DeepseekV2Moe modules (greedy top-k, one group),
  saved under the Hub's DeepSeek-MoE names (experts one tensor each);
- Ling 2.0 is GLM-4.5's model under the tensor names transformers' Param2-MoE keeps (which are Ling's):
  a tiny Param2MoeForCausalLM (half of each head rotated, q / k norms, groups) rewritten with Ling 2.0's
  config keys, converted as llama.cpp converts Ling 2.0 (q / k / v kept fused).

Each runs from its folder and from its GGUF file (F32, Q8_0), against that oracle and the NumPy twin;
chunked prefill and greedy decoding match, and the MoE model is batch invariant.
``benchmarks/tiny_llamacpp.py minicpm internlm2 deepseek bailing`` compares the GGUF files with llama.cpp.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from test_more_archs import both_refuse, copy_with, moved_as_twin_predicts
from tiny_models import (
    N_TOKENS,
    check_chunked_prefill,
    check_golden,
    check_twin,
    greedy,
    hf_greedy,
    hf_logits,
    make_hf_model,
    model_file,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader

V = 150
IDS = dict(pad_token_id=0, eos_token_id=1, bos_token_id=2)
SHORT = [1.0, 1.2, 1.5, 2.0, 2.4, 3.0, 3.5, 4.0]
LONG = [2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
# name -> (family, builder keywords, formats)
CASES: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    # MiniCPM-2B's layout: multi-head attention, tied embeddings, the release's multipliers (12, 1.4) with
    # dim_model_base 16 (logits / 4).
    "minicpm": ("minicpm", dict(
        hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96, tie=True,
        scale_emb=12.0, scale_depth=1.4, dim_model_base=16,
    ), ["safetensors", "F32", "Q8_0"]),
    # MiniCPM4's: GQA 2, untied, LongRoPE over 8 pairs (original context 48 of 64: within it, the short
    # factors with the attention factor of 64 / 48).
    "minicpm4": ("minicpm", dict(
        hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=80,
        scale_emb=8.0, scale_depth=1.2, dim_model_base=32, max_position_embeddings=64,
        rope_scaling={"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG,
                      "original_max_position_embeddings": 48},
    ), ["safetensors", "F32", "Q8_0"]),
    # InternLM2-chat-1.8B's: GQA 4 : 2 (wqkv in two groups of 2 queries, a key, a value), untied.
    "internlm2": ("internlm2", dict(
        hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=96,
    ), ["safetensors", "F32", "Q8_0"]),
    # bias=True (InternLM2Config's default): wqkv's and wo's biases (folders alone: llama.cpp's converter
    # cannot split a fused bias, and the releases have none).
    "internlm2-bias": ("internlm2", dict(
        hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=80, bias=True,
    ), ["safetensors"]),
    # DeepSeek-MoE 16B's layout: MHA, the first layer dense, then 6 experts of 24 rows (top 2, not
    # renormalised) beside 2 shared ones.
    "deepseek": ("deepseek", dict(
        hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96,
        moe_intermediate_size=24, n_routed_experts=6, num_experts_per_tok=2, n_shared_experts=2,
        first_k_dense_replace=1,
    ), ["safetensors", "F32", "Q8_0"]),
    # GQA, routed scale 1.5, three experts a token of 8, one shared.
    "deepseek-scaled": ("deepseek", dict(
        hidden_size=48, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=64,
        moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=3, n_shared_experts=1,
        first_k_dense_replace=1, routed_scaling_factor=1.5,
    ), ["safetensors", "F32"]),
    # Ling-mini-2.0's layout (bailing_moe, BailingMoeV2ForCausalLM): GQA 2, q / k / v fused, q / k norms, half
    # of each head rotated, the first layer dense, then 8 experts (top 2 by sigmoid score plus a selection
    # bias, groups of 4 of which the best 1, renormalised, scaled by 2.5) beside a shared one.
    "bailing": ("bailing", dict(
        hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=96,
        moe_intermediate_size=24, num_experts=8, num_experts_per_tok=2, num_shared_experts=1,
        first_k_dense_replace=1, n_group=2, topk_group=1, routed_scaling_factor=2.5,
    ), ["safetensors", "F32", "Q8_0"]),
    # Nemotron-51B / Super's block_configs (nemotron-nas, DeciLMForCausalLM): attention (GQA 2) with a 256
    # feed-forward, "linear attention" (wo(norm x)) with 512, a no-op attention with 256, attention without
    # a feed-forward, a dummy layer (both no-op), attention with 512; Llama 3's RoPE scaling (GGUF: the
    # rope_freqs tensor).
    "deci": ("deci", dict(
        hidden_size=64, num_heads=4, blocks=[("attn", 6.0), ("linear", 12.0), ("noop", 6.0), ("attn", None),
                                             ("noop", None), ("attn", 12.0)],
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 16},
    ), ["safetensors", "F32", "Q8_0"]),
}  # fmt: skip


def _write_config(folder: Path, cfg: dict[str, Any]) -> None:
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))


def make_minicpm(
    root: Path, name: str, seed: int, kw: dict[str, Any], vocab: int = V
) -> tuple[str, Any, Any]:
    """A MiniCPM folder and the torch oracle's logits function: a Granite model of its multipliers."""
    kw = dict(kw)
    emb, depth, base = kw.pop("scale_emb"), kw.pop("scale_depth"), kw.pop("dim_model_base")
    rope = kw.pop("rope_scaling", None)
    n, hidden = kw["num_layers"], kw["hidden_size"]
    granite_rope = None
    if rope is not None:  # (Granite's rope parameters: the factor MiniCPM derives from the two contexts)
        factor = kw["max_position_embeddings"] / rope["original_max_position_embeddings"]
        granite_rope = dict(rope, factor=factor)
    granite = make_hf_model(
        root / f"{name}-granite", "granite", vocab_size=vocab, seed=seed, rope_scaling=granite_rope,
        embedding_multiplier=emb, residual_multiplier=depth / math.sqrt(n),
        attention_multiplier=1.0 / math.sqrt(hidden // kw["num_heads"]), logits_scaling=hidden / base,
        **kw, **IDS,
    )  # fmt: skip
    folder = root / name
    folder.mkdir()
    shutil.copy(Path(granite) / "model.safetensors", folder)
    g = json.loads((Path(granite) / "config.json").read_text())
    cfg = {
        "model_type": "minicpm", "architectures": ["MiniCPMForCausalLM"], "hidden_size": hidden,
        "num_hidden_layers": n, "num_attention_heads": kw["num_heads"],
        "num_key_value_heads": kw["num_kv_heads"], "intermediate_size": kw["intermediate_size"],
        "vocab_size": vocab, "max_position_embeddings": g["max_position_embeddings"],
        "rms_norm_eps": g["rms_norm_eps"], "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": bool(kw.get("tie")),
        "scale_emb": emb, "scale_depth": depth, "dim_model_base": base, **IDS,
    }  # fmt: skip
    if rope is not None:  # (MiniCPM4's form: rope_type, the factors, the original context)
        cfg["rope_scaling"] = rope
    _write_config(folder, cfg)
    return str(folder), lambda ids: hf_logits(granite, ids), lambda p, k: hf_greedy(granite, p, k)


def make_internlm2(
    root: Path, name: str, seed: int, kw: dict[str, Any], vocab: int = V
) -> tuple[str, Any, Any]:
    """An InternLM2 folder (its names, wqkv fused per KV group) of a random Llama model, the oracle."""
    from safetensors.numpy import load_file, save_file

    kw = dict(kw)
    bias = bool(kw.pop("bias", False))
    llama = make_hf_model(root / f"{name}-llama", "llama", vocab_size=vocab, seed=seed, attention_bias=bias,
                          **kw, **IDS)  # fmt: skip
    heads, kv, hidden = kw["num_heads"], kw["num_kv_heads"], kw["hidden_size"]
    hd, per = hidden // heads, heads // kv
    src = load_file(str(Path(llama) / "model.safetensors"))
    out: dict[str, np.ndarray] = {
        "model.tok_embeddings.weight": src["model.embed_tokens.weight"],
        "model.norm.weight": src["model.norm.weight"],
        "output.weight": src["lm_head.weight"],
    }
    for i in range(kw["num_layers"]):
        p, o = f"model.layers.{i}.", f"model.layers.{i}."
        for suffix in ("weight", "bias") if bias else ("weight",):
            q = src[p + f"self_attn.q_proj.{suffix}"]
            k = src[p + f"self_attn.k_proj.{suffix}"]
            v = src[p + f"self_attn.v_proj.{suffix}"]
            rest = q.shape[1:]
            groups = [np.concatenate([q.reshape(kv, per * hd, *rest)[g], k.reshape(kv, hd, *rest)[g],
                                      v.reshape(kv, hd, *rest)[g]]) for g in range(kv)]  # fmt: skip
            out[o + f"attention.wqkv.{suffix}"] = np.ascontiguousarray(np.concatenate(groups))
            out[o + f"attention.wo.{suffix}"] = src[p + f"self_attn.o_proj.{suffix}"]
        for stem, w in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
            out[o + f"feed_forward.{stem}.weight"] = src[p + f"mlp.{w}.weight"]
        out[o + "attention_norm.weight"] = src[p + "input_layernorm.weight"]
        out[o + "ffn_norm.weight"] = src[p + "post_attention_layernorm.weight"]
    folder = root / name
    folder.mkdir()
    save_file(out, str(folder / "model.safetensors"), metadata={"format": "pt"})
    g = json.loads((Path(llama) / "config.json").read_text())
    _write_config(folder, {
        "model_type": "internlm2", "architectures": ["InternLM2ForCausalLM"], "hidden_size": hidden,
        "num_hidden_layers": kw["num_layers"], "num_attention_heads": heads, "num_key_value_heads": kv,
        "intermediate_size": kw["intermediate_size"], "vocab_size": vocab, "rms_norm_eps": g["rms_norm_eps"],
        "max_position_embeddings": g["max_position_embeddings"], "rope_theta": 10000.0,
        "rope_scaling": None, "hidden_act": "silu", "bias": bias, "tie_word_embeddings": False,
        "auto_map": {"AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM"}, **IDS,
    })  # fmt: skip
    return str(folder), lambda ids: hf_logits(llama, ids), lambda p, k: hf_greedy(llama, p, k)


def _torch_oracle(model: Any) -> tuple[Any, Any]:
    """(logits of a sequence, greedy continuation) of a torch causal LM assembled in a test, run whole
    each step (no cache: its modules need none)."""
    import torch

    def logits(ids: list[int]) -> np.ndarray:
        with torch.no_grad():
            out = model(torch.tensor([ids]), use_cache=False).logits[0]
            return out.float().numpy()  # type: ignore[no-any-return]

    def greedy_oracle(prompt: list[int], n_new: int) -> list[int]:
        seq = list(prompt)
        for _ in range(n_new):
            seq.append(int(np.argmax(logits(seq)[-1])))
        return seq[len(prompt) :]

    return logits, greedy_oracle


def make_deepseek(
    root: Path, name: str, seed: int, kw: dict[str, Any], vocab: int = V
) -> tuple[str, Any, Any]:
    """A DeepSeek-MoE folder (the Hub's names) and its oracle: a random Llama model whose sparse layers'
    MLPs are transformers' DeepseekV2Moe (softmax, greedy top-k, not renormalised, shared experts)."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2Moe

    kw = dict(kw)
    moe = {k: kw.pop(k) for k in ("moe_intermediate_size", "n_routed_experts", "num_experts_per_tok",
                                  "n_shared_experts", "first_k_dense_replace")}  # fmt: skip
    scale = float(kw.pop("routed_scaling_factor", 1.0))
    llama = make_hf_model(root / f"{name}-llama", "llama", vocab_size=vocab, seed=seed, **kw, **IDS)
    model = transformers.LlamaForCausalLM.from_pretrained(llama, dtype=torch.float32)
    dcfg = transformers.DeepseekV2Config(
        hidden_size=kw["hidden_size"], moe_intermediate_size=moe["moe_intermediate_size"],
        n_routed_experts=moe["n_routed_experts"], num_experts_per_tok=moe["num_experts_per_tok"],
        n_shared_experts=moe["n_shared_experts"], routed_scaling_factor=scale, topk_method="greedy",
        norm_topk_prob=False, n_group=1, topk_group=1, hidden_act="silu", num_attention_heads=kw["num_heads"],
        num_key_value_heads=kw["num_kv_heads"],
    )  # fmt: skip
    dcfg._experts_implementation = "eager"
    gen = torch.Generator().manual_seed(seed + 1000)
    for i in range(moe["first_k_dense_replace"], kw["num_layers"]):
        block = DeepseekV2Moe(dcfg)
        with torch.no_grad():
            for p in block.parameters():  # (inputs on the last axis: scaled by their count)
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
        model.model.layers[i].mlp = block
    model.eval()
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    f = moe["moe_intermediate_size"]
    for i in range(moe["first_k_dense_replace"], kw["num_layers"]):  # (one tensor an expert, as the Hub's)
        p = f"model.layers.{i}.mlp."
        gate_up, down = state.pop(p + "experts.gate_up_proj"), state.pop(p + "experts.down_proj")
        for e in range(moe["n_routed_experts"]):
            state[p + f"experts.{e}.gate_proj.weight"] = gate_up[e, :f].clone()
            state[p + f"experts.{e}.up_proj.weight"] = gate_up[e, f:].clone()
            state[p + f"experts.{e}.down_proj.weight"] = down[e].clone()
    folder = root / name
    folder.mkdir()
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    g = json.loads((Path(llama) / "config.json").read_text())
    _write_config(folder, {
        "model_type": "deepseek", "architectures": ["DeepseekForCausalLM"], "hidden_size": kw["hidden_size"],
        "num_hidden_layers": kw["num_layers"], "num_attention_heads": kw["num_heads"],
        "num_key_value_heads": kw["num_kv_heads"], "intermediate_size": kw["intermediate_size"],
        "vocab_size": vocab, "rms_norm_eps": g["rms_norm_eps"],
        "max_position_embeddings": g["max_position_embeddings"], "rope_theta": 10000.0, "hidden_act": "silu",
        "attention_bias": False, "moe_layer_freq": 1, "scoring_func": "softmax", "norm_topk_prob": False,
        "aux_loss_alpha": 0.001, "tie_word_embeddings": False,
        **({"routed_scaling_factor": scale} if scale != 1.0 else {}), **moe, **IDS,
    })  # fmt: skip
    return (str(folder), *_torch_oracle(model))


def make_bailing(
    root: Path, name: str, seed: int, kw: dict[str, Any], vocab: int = V
) -> tuple[str, Any, Any]:
    """A Ling 2.0 folder (bailing_moe) of a random Param2-MoE model (transformers runs Param2-MoE, GLM-4.5's
    model under the names Ling 2.0 releases use: query_key_value, word_embeddings, gate.expert_bias), its
    config rewritten with Ling 2.0's keys; the oracle runs the Param2-MoE folder."""
    kw = dict(kw)
    n_experts, n_shared = kw.pop("num_experts"), kw.pop("num_shared_experts")
    param2 = make_hf_model(
        root / f"{name}-param2", "param2moe", vocab_size=vocab, seed=seed, n_routed_experts=n_experts,
        n_shared_experts=n_shared, use_qk_norm=True, norm_topk_prob=True, partial_rotary_factor=0.5,
        tie=False, **kw, **IDS,
    )  # fmt: skip
    folder = root / name
    folder.mkdir()
    shutil.copy(Path(param2) / "model.safetensors", folder)
    g = json.loads((Path(param2) / "config.json").read_text())
    rope = g.get("rope_parameters") or {}
    assert rope.get("partial_rotary_factor", 0.5) == 0.5 and rope.get("rope_type", "default") == "default"
    _write_config(folder, {
        "model_type": "bailing_moe", "architectures": ["BailingMoeV2ForCausalLM"],
        "hidden_size": kw["hidden_size"], "num_hidden_layers": kw["num_layers"],
        "num_attention_heads": kw["num_heads"], "num_key_value_heads": kw["num_kv_heads"],
        "head_dim": kw["head_dim"], "intermediate_size": kw["intermediate_size"],
        "moe_intermediate_size": kw["moe_intermediate_size"], "num_experts": n_experts,
        "num_shared_experts": n_shared, "num_experts_per_tok": kw["num_experts_per_tok"],
        "first_k_dense_replace": kw["first_k_dense_replace"], "n_group": kw["n_group"],
        "topk_group": kw["topk_group"], "routed_scaling_factor": kw["routed_scaling_factor"],
        "score_function": "sigmoid", "norm_topk_prob": True, "use_qk_norm": True,
        "partial_rotary_factor": 0.5, "rotary_dim": kw["head_dim"] // 2,
        "rope_theta": rope.get("rope_theta", g.get("rope_theta")), "rope_scaling": None,
        "rms_norm_eps": g["rms_norm_eps"], "max_position_embeddings": g["max_position_embeddings"],
        "vocab_size": vocab, "hidden_act": "silu", "use_qkv_bias": False, "use_bias": False,
        "norm_head": False,
        "moe_router_enable_expert_bias": True, "num_nextn_predict_layers": 0, "tie_word_embeddings": False,
        "auto_map": {"AutoModelForCausalLM": "modeling_bailing_moe_v2.BailingMoeV2ForCausalLM"}, **IDS,
    })  # fmt: skip
    return str(folder), lambda ids: hf_logits(param2, ids), lambda p, k: hf_greedy(param2, p, k)


def make_deci(root: Path, name: str, seed: int, kw: dict[str, Any], vocab: int = V) -> tuple[str, Any, Any]:
    """A Nemotron-NAS folder (DeciLM's names and block_configs) and its oracle: a random Llama model whose
    layers are rebuilt per block as DeciLM builds them: transformers' attention (2 query heads a KV head),
    one linear map in its place (DeciLM's linear_attn), or none (the residual passes); transformers' MLP of
    the block's size (2 ffn_mult hidden / 3, rounded up to 256) or none."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from torch import nn
    from transformers.models.llama.modeling_llama import LlamaMLP

    hidden, heads, blocks = kw["hidden_size"], kw["num_heads"], kw["blocks"]
    sizes = [0 if m is None else -(-int(2 * m * hidden / 3) // 256) * 256 for _, m in blocks]
    llama = make_hf_model(
        root / f"{name}-llama", "llama", vocab_size=vocab, seed=seed, hidden_size=hidden,
        num_layers=len(blocks), num_heads=heads, num_kv_heads=heads // 2, intermediate_size=max(sizes),
        rope_scaling=kw["rope_scaling"],
        **IDS,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM.from_pretrained(llama, dtype=torch.float32)

    class Linear(nn.Module):  # (DeciLM's linear attention: one matrix of the normed input)
        def __init__(self) -> None:
            super().__init__()
            self.linear_attn = nn.Linear(hidden, hidden, bias=False)

        def forward(self, hidden_states: Any, **_: Any) -> tuple[Any, None]:
            return self.linear_attn(hidden_states), None

    class Nothing(nn.Module):  # (a no-op sublayer: adds nothing to the residual)
        def forward(self, hidden_states: Any, **kwargs: Any) -> Any:
            out = torch.zeros_like(hidden_states)
            return (out, None) if kwargs else out

    gen = torch.Generator().manual_seed(seed + 7)
    drop: list[str] = []
    for i, ((kind, _), size) in enumerate(zip(blocks, sizes, strict=True)):
        layer = model.model.layers[i]
        if kind == "linear":
            layer.self_attn = Linear()
        elif kind == "noop":
            layer.self_attn = Nothing()
            drop += [f"model.layers.{i}.input_layernorm.", f"model.layers.{i}.self_attn."]
        if size == 0:
            layer.mlp = Nothing()
            drop += [f"model.layers.{i}.post_attention_layernorm.", f"model.layers.{i}.mlp."]
        else:
            layer.mlp = LlamaMLP(transformers.LlamaConfig(hidden_size=hidden, intermediate_size=size))
        with torch.no_grad():
            for mod in (layer.self_attn, layer.mlp):
                if not isinstance(mod, Nothing) and not hasattr(mod, "q_proj"):
                    for p in mod.parameters():
                        p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
    model.eval()
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()
             if not k.startswith(tuple(drop))}  # fmt: skip
    folder = root / name
    folder.mkdir()
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    g = json.loads((Path(llama) / "config.json").read_text())
    block_configs = [{
        "attention": {"n_heads_in_group": 2 if kind == "attn" else None, "no_op": kind == "noop",
                      "replace_with_linear": kind == "linear", "sparsify": None, "num_sink_tokens": None,
                      "use_prefill_window_in_sink_attention": False, "unshifted_sink": False},
        "ffn": {"ffn_mult": mult, "no_op": mult is None, "replace_with_linear": False, "sparsify": None},
    } for kind, mult in blocks]  # fmt: skip
    _write_config(folder, {
        "model_type": "nemotron-nas", "architectures": ["DeciLMForCausalLM"], "hidden_size": hidden,
        "num_hidden_layers": len(blocks), "num_attention_heads": heads, "vocab_size": vocab,
        "rms_norm_eps": g["rms_norm_eps"], "max_position_embeddings": g["max_position_embeddings"],
        "rope_theta": 10000.0, "rope_scaling": kw["rope_scaling"], "hidden_act": "silu",
        "tie_word_embeddings": False, "block_configs": block_configs, "attention_bias": False,
        "mlp_bias": False, "auto_map": {"AutoModelForCausalLM": "modeling_decilm.DeciLMForCausalLM"}, **IDS,
    })  # fmt: skip
    return (str(folder), *_torch_oracle(model))


BUILDERS = {
    "minicpm": make_minicpm,
    "internlm2": make_internlm2,
    "deepseek": make_deepseek,
    "bailing": make_bailing,
    "deci": make_deci,
}


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int], Any]]:
    """name -> (folder, the oracle's float32 logits, token ids, the oracle's greedy continuation)."""
    root = tmp_path_factory.mktemp("remote-code")
    out = {}
    for i, (name, (family, kw, _)) in enumerate(CASES.items()):
        folder, logits, greedy_fn = BUILDERS[family](root, name, 40 + i, kw)
        ids = np.random.default_rng(i).integers(0, V, N_TOKENS).tolist()
        out[name] = (folder, logits(ids), ids, greedy_fn)
    return out


def _file(cases: dict[str, Any], name: str, fmt: str, tmp: pytest.TempPathFactory) -> str:
    return model_file(cases[name][0], fmt, tmp.mktemp("gguf"), name)


@pytest.mark.parametrize("name, fmt", [(n, f) for n, (_, _, fmts) in CASES.items() for f in fmts])
def test_logits_match_oracle_and_twin(
    cases: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    family, kw, _ = CASES[name]
    path = _file(cases, name, fmt, tmp_path_factory)
    _, oracle, ids, _ = cases[name]
    if family in ("deepseek", "bailing") and fmt == "Q8_0":
        model = check_twin(path, ids, oracle)  # (rounded weights switch an expert now and then)
    else:
        model = check_golden(path, ids, oracle, fmt)
    c = model.config
    if family == "minicpm":
        assert c["arch"] == "minicpm"
        assert c["embd_scale"] == pytest.approx(kw["scale_emb"])
        assert c["residual_scale"] == pytest.approx(kw["scale_depth"] / math.sqrt(kw["num_layers"]))
        assert c["logit_scale"] == pytest.approx(kw["hidden_size"] / kw["dim_model_base"])
        assert c["attn_scale"] == 0.0  # (head_dim^-1/2)
        assert c["tied_embeddings"] == bool(kw.get("tie"))
        if "rope_scaling" in kw:
            s = c["rope_scaling"]
            assert s["type"] == "longrope" and s["original_max_position"] == 48
            assert s["attn_factor"] == pytest.approx(math.sqrt(1 + math.log(64 / 48) / math.log(48)))
            assert s["short_factor"] == pytest.approx(SHORT) and s["long_factor"] == pytest.approx(LONG)
    elif family == "internlm2":
        assert c["arch"] == ("llama" if fmt == "safetensors" else "internlm2")
        assert c["n_head_kv"] == kw["num_kv_heads"]
        assert c["qkv_bias"] == c["o_bias"] == bool(kw.get("bias"))
    elif family == "deci":
        assert c["arch"] == "deci" and c["n_head_kv"] == 2
        assert c["layer_no_mixer"] == [False, False, True, False, True, False]
        assert c["layer_linear_attn"] == [False, True, False, False, False, False]
        assert c["layer_no_ffn"] == [False, False, False, True, True, False]
        assert [c["layer_n_ff"][i] for i in (0, 1, 2, 5)] == [256, 512, 256, 512]
        if fmt == "safetensors":
            assert c["rope_scaling"]["type"] == "llama3"
        else:  # (llama.cpp's rope_freqs tensor)
            assert c["rope_scaling"]["type"] == "none" and len(c["rope_freqs"]) == 8
    elif family == "bailing":
        assert c["arch"] == ("glm4moe" if fmt == "safetensors" else "bailingmoe2")
        assert c["rope_dim"] == 8 and c["rope_style"] == "neox" and c["qk_norm"] and not c["qkv_bias"]
        moe = c["moe"]
        assert (
            (moe["n_group"], moe["topk_group"]) == (2, 1) and moe["sigmoid_gating"] and moe["selection_bias"]
        )
        assert moe["norm_topk_prob"] and moe["routed_scale"] == 2.5 and moe["n_ff_shared"] == 24
        assert moe["layers"] == [1, 2]
    else:
        assert c["arch"] == "deepseek"
        moe = c["moe"]
        assert moe["n_expert"] == kw["n_routed_experts"] and moe["n_expert_used"] == kw["num_experts_per_tok"]
        assert moe["layers"] == list(range(kw["first_k_dense_replace"], kw["num_layers"]))
        assert moe["n_ff_shared"] == kw["n_shared_experts"] * kw["moe_intermediate_size"]
        assert not moe["norm_topk_prob"] and not moe["sigmoid_gating"]
        assert moe["routed_scale"] == pytest.approx(kw.get("routed_scaling_factor", 1.0))


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(cases: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal, equal to the oracle and the
    twin's runner; 20 greedy tokens equal to the oracle's."""
    path, oracle, ids, greedy_fn = cases[name]
    check_chunked_prefill(path, ids, oracle)
    assert greedy(core.load_model(path), ids[:10], 20, block=4) == greedy_fn(ids[:10], 20)


@pytest.mark.parametrize("name, fmt", [("deepseek", "safetensors"), ("deepseek", "Q8_0"),
                                       ("minicpm4", "F32"), ("internlm2", "Q8_0"),
                                       ("bailing", "Q8_0"), ("deci", "Q8_0")])  # fmt: skip
def test_batch_invariant_and_inspect(
    cases: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Alone, among 7 others, chunked, 1 and 2 threads: bitwise the same logits; inspect describes it."""
    path = _file(cases, name, fmt, tmp_path_factory)
    model = core.load_model(path)
    check_invariance(model, V, seed=len(name))
    text = models.format_inspect(models.inspect(path))
    assert f"architecture  {model.config['arch']}" in text
    if name == "deepseek":
        assert "experts       6 of 24 rows, 2 used per token, in 2 of 3 layers" in text
    if name == "minicpm4":
        assert "multipliers   embeddings 8, residuals 0.848528, scores head_dim^-1/2, logits / 2" in text
    if name == "deci":
        want = (
            "3 attention, 1 linear (wo alone), 2 without attention; feed-forward 256..512 (2 sizes), none in"
        )
        want += " 2"
        assert "layers        " + want in text


def test_refusals_and_multipliers_matter(cases: dict[str, Any], tmp_path: Path) -> None:
    """MiniCPM-MoE folders are refused by name, as is a multiplier of 0; the multipliers and DeepSeek's
    routed scale move the logits as the twin predicts; InternLM2's wqkv of the wrong size is refused."""
    src, _, ids, _ = cases["minicpm"]
    both_refuse(copy_with(src, tmp_path / "moe", num_experts=8, num_experts_per_tok=2), "experts", "experts")
    both_refuse(copy_with(src, tmp_path / "zero", scale_emb=0), "scale_emb", "scale_emb")
    want = core.model_logits(core.load_model(src), ids)
    for key, value in (("scale_depth", 1.0), ("dim_model_base", 8), ("scale_emb", 2.0)):
        moved_as_twin_predicts(copy_with(src, tmp_path / key, **{key: value}), ids, want)
    src, _, ids, _ = cases["deepseek"]
    moved = copy_with(src, tmp_path / "routed", routed_scaling_factor=2.0)
    assert ref_loader.load_weights(moved)[0]["moe"]["routed_scale"] == 2.0
    moved_as_twin_predicts(moved, ids, core.model_logits(core.load_model(src), ids))
    src = cases["bailing"][0]
    both_refuse(
        copy_with(src, tmp_path / "ling1", architectures=["BailingMoeForCausalLM"]), "Ling 1.0", "Ling 1.0"
    )
    both_refuse(copy_with(src, tmp_path / "use_bias", use_bias=True), "use_bias", "use_bias")
    both_refuse(copy_with(src, tmp_path / "norm_head", norm_head=True), "norm_head", "norm_head")
    both_refuse(
        copy_with(src, tmp_path / "shared", moe_shared_expert_intermediate_size=40), "shared", "shared"
    )
    src = cases["deci"][0]
    blocks = json.loads((Path(src) / "config.json").read_text())["block_configs"]

    def with_block(i: int, part: str, **change: Any) -> list[Any]:
        out = json.loads(json.dumps(blocks))
        out[i][part].update(change)
        return out

    for name, part, change, match in (
        ("ffn-linear", "ffn", {"replace_with_linear": True}, "replace_with_linear"),
        ("window", "attention", {"window_length": 8}, "window_length"),
        ("kv-mix", "attention", {"n_heads_in_group": 1}, "KV head counts differ"),
    ):
        bad = copy_with(src, tmp_path / name, block_configs=with_block(0, part, **change))
        both_refuse(bad, match, match)  # fmt: skip
    src = cases["internlm2"][0]
    bad = copy_with(src, tmp_path / "kv", num_key_value_heads=4)  # (wqkv holds 2 groups' K / V)
    with pytest.raises(core.ModelError):
        core.load_model(bad)
    with pytest.raises(ValueError):
        ref_loader.load_weights(bad)
