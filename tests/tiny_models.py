"""Tiny randomly initialised models for tests: Hugging Face folders and their GGUF conversions.

``make_hf_model`` builds a transformers model from a config, re-initialises its weights with
values large enough to give non-trivial logits, and writes it with ``save_pretrained``.
``hf_to_gguf`` converts such a folder to GGUF following llama.cpp's ``convert_hf_to_gguf.py``
conventions (architecture keys, ``blk.N.*`` tensor names, the Q/K row permutation of the llama
architecture, norms and biases kept F32).
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from ossa.reference.loader import (  # (the names as the twin reads them)
    _FALCON_PARTS,
    _GPT_NEOX_PARTS,
    _GPTJ_PARTS,
    _falcon_kv_heads,
)

ARCHS = (
    "llama",
    "vaultgemma",
    "nanochat",
    "flex_olmo",
    "qwen2",
    "qwen3",
    "mistral",
    "qwen3_moe",
    "qwen2_moe",
    "mixtral",
    "gemma2",
    "gemma3",
    "phi3",
    "smollm3",
    "granite",
    "gemma",
    "gpt_oss",
    "granitemoe",
    "olmo2",
    "olmo3",
    "exaone4",
    "ernie4_5",
    "ernie4_5_moe",
    "deepseek_v2",
    "deepseek_v3",
    "glm4_moe",
    "solar_open",
    "param2moe",
    "sarvam_moe",
    "youtu",
    "olmoe",
    "glm4",
    "glm4_moe_lite",
    "ministral3",
    "mistral4",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_next",
    "lfm2",
    "lfm2_moe",
    "granitemoehybrid",
    "bamba",
    "nemotron_h",
    "mamba2",
    "mamba",
    "falcon_mamba",
    "jamba",
    "falcon_h1",
    "gemma4",
    "llama4",
    "qwen3_vl",
    "qwen3_vl_moe",
    "qwen2_5_vl",
    "cohere",
    "cohere2",
    "minimax_m2",
    "gemma3n",
    "seed_oss",
    "arcee",
    "exaone",
    "internlm3",
    "hunyuan_v1_dense",
    "hunyuan_v1_moe",
    "starcoder2",
    "stablelm",
    "phi",
    "nemotron",
    "olmo",
    "gpt_neox",
    "falcon",
    "dots1",
    "phimoe",
    "apertus",
    "exaone_moe",
    "granitemoeshared",
    "granite_swa",
    "granitemoe_swa",
    "gptj",
    "minicpm3",
    "bloom",
    "mpt",
    "gpt2",
    "gpt_bigcode",
    "afmoe",
    "dbrx",
    "glm",
    "helium",
    "opt",
    "gpt_neo",
    "bitnet",
    "codegen",
    "ministral",
    "iquestcoder",
    "cwm",
    "jais2",
)


def make_hf_model(
    out_dir: str | os.PathLike[str],
    arch: str = "llama",
    *,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int | None = None,
    intermediate_size: int | None,
    vocab_size: int,
    tie: bool = False,
    rope_scaling: dict[str, Any] | None = None,
    seed: int = 0,
    dtype: str = "float32",
    rope_theta: float = 10000.0,
    max_position_embeddings: int = 512,
    rms_norm_eps: float = 1e-6,
    **extra: Any,
) -> str:
    """Write a random ``arch`` model to ``out_dir`` (config.json + model.safetensors); return the path.

    ``rope_scaling`` is e.g. ``{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 64}``. ``extra`` goes to the config
    as is (e.g. ``num_experts=5, num_experts_per_tok=2, moe_intermediate_size=40`` for the MoE archs;
    Gemma 3's sliding_window, layer_types, query_pre_attn_scalar, final_logit_softcapping). For gemma3
    ``rope_theta`` / ``rope_scaling`` are the global layers'; ``rope_local_base_freq`` the local ones'.
    """
    import torch
    import transformers

    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}")
    local_theta = extra.pop(
        "rope_local_base_freq", 10000.0 if arch in ("gemma3", "gemma4", "gemma3n") else rope_theta
    )
    kwargs: dict[str, Any] = dict(
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        vocab_size=vocab_size,
        tie_word_embeddings=tie,
        max_position_embeddings=max_position_embeddings,
        rms_norm_eps=rms_norm_eps,
        **extra,
    )
    if head_dim is not None:
        kwargs["head_dim"] = head_dim
    if intermediate_size is None:  # (Qwen3.5 MoE: its config has no dense size)
        kwargs.pop("intermediate_size")
    rope: dict[str, Any] = {"rope_theta": rope_theta, "rope_type": "default"}
    if rope_scaling:
        rope.update(rope_scaling)
        if "type" in rope and "rope_type" not in rope_scaling:
            rope["rope_type"] = rope.pop("type")
    kwargs["rope_parameters"] = rope
    if arch in ("qwen3_5", "qwen3_5_moe", "qwen3_next"):  # (the RoPE's partial factor with its keys)
        rope["partial_rotary_factor"] = extra.pop("partial_rotary_factor", 0.25)
    if arch == "mamba2":  # (Mamba2Config's own head count: its mixer's)
        kwargs["num_heads"] = num_heads
    if arch in ("stablelm", "phi", "nemotron", "gpt_neox"):  # (the partial rotation with the RoPE's keys)
        rope["partial_rotary_factor"] = extra.pop(
            "partial_rotary_factor", 0.25 if arch in ("stablelm", "gpt_neox") else 0.5
        )
    if arch == "falcon":  # (FalconConfig's own keys)
        kwargs.update(num_kv_heads=kwargs.pop("num_key_value_heads"),
                      ffn_hidden_size=kwargs.pop("intermediate_size"),
                      layer_norm_epsilon=kwargs.pop("rms_norm_eps"))  # fmt: skip
    if arch in ("gptj", "codegen"):  # (GPTJConfig's / CodeGenConfig's own keys; one K/V head per head)
        kwargs.update(
            n_inner=kwargs.pop("intermediate_size", None), layer_norm_epsilon=kwargs.pop("rms_norm_eps")
        )
        kwargs.pop("num_key_value_heads")
        kwargs.pop("rope_parameters")
    if arch in ("bloom", "mpt", "gpt2", "gpt_bigcode", "opt", "gpt_neo"):  # (their own keys; no RoPE)
        kwargs = _gpt_classic_kwargs(arch, kwargs)
    if arch == "dbrx":  # (DbrxConfig's own keys; its attention and experts in sub-configs)
        kwargs = _dbrx_kwargs(kwargs)
    if arch == "nemotron":  # (NemotronConfig's own epsilon key)
        kwargs["norm_eps"] = kwargs.pop("rms_norm_eps")
    if arch == "jais2":  # (Jais2Config's: LayerNorms; the special ids of its own vocabulary)
        kwargs.update(layer_norm_eps=kwargs.pop("rms_norm_eps"), bos_token_id=None, eos_token_id=None)
    if arch == "bamba" and "partial_rotary_factor" in extra:  # (Bamba's too)
        rope["partial_rotary_factor"] = extra.pop("partial_rotary_factor")
    if arch == "gemma4":  # the global layers' proportional RoPE, the sliding layers' own base
        full = {"rope_theta": rope_theta, "rope_type": "proportional"}
        full["partial_rotary_factor"] = kwargs.pop("partial_rotary_factor", 0.25)
        local = {"rope_theta": local_theta, "rope_type": "default"}
        kwargs["rope_parameters"] = {"full_attention": full, "sliding_attention": local}
    if arch == "gemma3n":  # plain RoPE on both kinds of layer, each with its base
        kwargs["rope_parameters"] = {
            "full_attention": {"rope_theta": rope_theta, "rope_type": "default"},
            "sliding_attention": {"rope_theta": local_theta, "rope_type": "default"},
        }
    if arch in ("gemma3", "olmo3"):  # OLMo 3 too: scaling (if any) on the full layers only
        local = {"rope_theta": local_theta, "rope_type": "default"}
        kwargs["rope_parameters"] = {"full_attention": rope, "sliding_attention": local}
    config_cls = {
        "llama": transformers.LlamaConfig,
        "qwen2": transformers.Qwen2Config,
        "qwen3": transformers.Qwen3Config,
        "mistral": transformers.MistralConfig,
        "qwen3_moe": transformers.Qwen3MoeConfig,
        "qwen2_moe": transformers.Qwen2MoeConfig,
        "mixtral": transformers.MixtralConfig,
        "gemma2": transformers.Gemma2Config,
        "vaultgemma": transformers.VaultGemmaConfig,
        "nanochat": transformers.NanoChatConfig,
        "flex_olmo": transformers.FlexOlmoConfig,
        "gemma3": transformers.Gemma3TextConfig,
        "phi3": transformers.Phi3Config,
        "smollm3": transformers.SmolLM3Config,
        "granite": transformers.GraniteConfig,
        "gemma": transformers.GemmaConfig,
        "gpt_oss": transformers.GptOssConfig,
        "granitemoe": transformers.GraniteMoeConfig,
        "olmo2": transformers.Olmo2Config,
        "olmo3": transformers.Olmo3Config,
        "exaone4": transformers.Exaone4Config,
        "ernie4_5": transformers.Ernie4_5Config,
        "ernie4_5_moe": transformers.Ernie4_5_MoeConfig,
        "deepseek_v2": transformers.DeepseekV2Config,
        "deepseek_v3": transformers.DeepseekV3Config,
        "glm4_moe": transformers.Glm4MoeConfig,
        "solar_open": transformers.SolarOpenConfig,
        "param2moe": transformers.Param2MoeConfig,
        "sarvam_moe": transformers.SarvamMoEConfig,
        "youtu": transformers.YoutuConfig,
        "olmoe": transformers.OlmoeConfig,
        "glm4": transformers.Glm4Config,
        "glm": transformers.GlmConfig,
        "glm4_moe_lite": transformers.Glm4MoeLiteConfig,
        "ministral3": transformers.Ministral3Config,
        "mistral4": transformers.Mistral4Config,
        "qwen3_5": transformers.Qwen3_5TextConfig,
        "qwen3_5_moe": transformers.Qwen3_5MoeTextConfig,
        "qwen3_next": transformers.Qwen3NextConfig,
        "lfm2": transformers.Lfm2Config,
        "lfm2_moe": transformers.Lfm2MoeConfig,
        "granitemoehybrid": transformers.GraniteMoeHybridConfig,
        "bamba": transformers.BambaConfig,
        "mamba2": transformers.Mamba2Config,
        "mamba": transformers.MambaConfig,
        "falcon_mamba": transformers.FalconMambaConfig,
        "jamba": transformers.JambaConfig,
        "falcon_h1": transformers.FalconH1Config,
        "nemotron_h": transformers.NemotronHConfig,
        "gemma4": transformers.Gemma4TextConfig,
        "llama4": transformers.Llama4TextConfig,
        "qwen3_vl": transformers.Qwen3VLTextConfig,
        "qwen3_vl_moe": transformers.Qwen3VLMoeTextConfig,
        "qwen2_5_vl": transformers.Qwen2_5_VLTextConfig,
        "cohere": transformers.CohereConfig,
        "cohere2": transformers.Cohere2Config,
        "minimax_m2": transformers.MiniMaxM2Config,
        "gemma3n": transformers.Gemma3nTextConfig,
        "seed_oss": transformers.SeedOssConfig,
        "arcee": transformers.ArceeConfig,
        "exaone": transformers.ExaoneConfig,
        "internlm3": transformers.InternLM3Config,
        "helium": transformers.HeliumConfig,
        "hunyuan_v1_dense": transformers.HunYuanDenseV1Config,
        "hunyuan_v1_moe": transformers.HunYuanMoEV1Config,
        "starcoder2": transformers.Starcoder2Config,
        "stablelm": transformers.StableLmConfig,
        "nemotron": transformers.NemotronConfig,
        "olmo": transformers.OlmoConfig,
        "gpt_neox": transformers.GPTNeoXConfig,
        "falcon": transformers.FalconConfig,
        "dots1": transformers.Dots1Config,
        "phimoe": transformers.PhimoeConfig,
        "apertus": transformers.ApertusConfig,
        "exaone_moe": transformers.ExaoneMoeConfig,
        "granitemoeshared": transformers.GraniteMoeSharedConfig,
        "granite_swa": transformers.GraniteSWAConfig,
        "granitemoe_swa": transformers.GraniteMoeSWAConfig,
        "gptj": transformers.GPTJConfig,
        "bloom": transformers.BloomConfig,
        "mpt": transformers.MptConfig,
        "gpt2": transformers.GPT2Config,
        "gpt_bigcode": transformers.GPTBigCodeConfig,
        "opt": transformers.OPTConfig,
        "gpt_neo": transformers.GPTNeoConfig,
        "bitnet": transformers.BitNetConfig,
        "codegen": transformers.CodeGenConfig,
        "ministral": transformers.MinistralConfig,
        "iquestcoder": transformers.IQuestCoderConfig,
        "cwm": transformers.CwmConfig,
        "jais2": transformers.Jais2Config,
        "afmoe": transformers.AfmoeConfig,
        "dbrx": transformers.DbrxConfig,
        "minicpm3": transformers.MiniCPM3Config,
        "phi": transformers.PhiConfig,
    }[arch]
    if arch in ("mistral", "mixtral"):
        kwargs.setdefault("sliding_window", None)  # MistralConfig's default is 4096
    if arch in (
        "smollm3",
        "olmoe",
        "glm4",
        "glm",
    ):  # the special ids of their configs are for their full vocabularies
        kwargs.update(pad_token_id=None, bos_token_id=None, eos_token_id=None)
    config = config_cls(**kwargs)
    if arch in ("qwen3_vl", "qwen3_vl_moe"):  # the whole vision-language model, a tiny vision tower
        rope = dict(kwargs["rope_parameters"], mrope_section=[1, 1, 0], mrope_interleaved=True)
        text = config_cls(**dict(kwargs, rope_parameters=rope)).to_dict()
        vision = dict(depth=1, hidden_size=16, intermediate_size=24, num_heads=2, out_hidden_size=hidden_size,
                      deepstack_visual_indexes=[0], num_position_embeddings=16)  # fmt: skip
        wrapper = transformers.Qwen3VLConfig if arch == "qwen3_vl" else transformers.Qwen3VLMoeConfig
        config = wrapper(text_config=text, vision_config=vision, tie_word_embeddings=tie)
    if arch == "qwen2_5_vl":  # (its M-RoPE's sections over head_dim / 2, a tiny vision tower)
        half = hidden_size // num_heads // 2
        rope = dict(kwargs["rope_parameters"], mrope_section=[half - 2 * (half // 3), half // 3, half // 3])
        text = config_cls(**dict(kwargs, rope_parameters=rope)).to_dict()
        vision = dict(depth=1, hidden_size=16, intermediate_size=24, num_heads=2, out_hidden_size=hidden_size,
                      fullatt_block_indexes=[0], window_size=28)  # fmt: skip
        config = transformers.Qwen2_5_VLConfig(
            text_config=text, vision_config=vision, tie_word_embeddings=tie
        )
    torch.manual_seed(seed)
    cls = _causal_lm(arch)
    model = cls.from_config(config) if hasattr(cls, "from_config") else cls(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if (
                p.ndim == 1
                and "norm" in name
                and arch in ("gemma", "gemma2", "gemma3", "nemotron", "vaultgemma")
            ):
                p.copy_(torch.rand(p.shape, generator=gen) - 0.5)  # Gemma multiplies by 1 + w (Nemotron too)
            elif p.ndim == 1 and "norm" in name and arch.startswith("qwen3_") and "linear_attn" not in name:
                p.copy_(torch.rand(p.shape, generator=gen) - 0.5)  # Qwen3.5 too (not the delta-net's)
            elif name.endswith(("A_log", "dt_bias")):  # the delta-net's decay: rates around 1
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            elif (p.ndim == 1 and ("norm" in name or ".ln_" in name)) or name.endswith(
                ("q_norm.weight", "k_norm.weight")
            ):  # (GPT-2's ln_1 / ln_2 / ln_f too)
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))  # norm weights around 1 (Cohere's per head)
            elif name.endswith("sinks"):  # gpt-oss: logits of the size of the scores
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith("_bias") and arch == "gpt_oss":  # expert biases [n_expert, rows]
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "experts" in name and arch in ("gpt_oss", "llama4"):  # [n_expert, in, out]: in is axis 1
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            elif p.ndim == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))  # biases
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
        for name, b in model.named_buffers():  # DeepSeek V3's selection bias (zeros otherwise)
            if name.endswith(("e_score_correction_bias", "expert_bias")):  # (LFM2-MoE's too)
                b.copy_(0.1 * torch.randn(b.shape, generator=gen))
            if name.endswith("layer_scalar"):  # Gemma 4's output multipliers: around 1
                b.copy_(0.5 + torch.rand(b.shape, generator=gen))
        for name, p in model.named_parameters():  # Gemma 4's router scales, Gemma 3n's: around 1
            if name.endswith(("router.scale", "router.per_expert_scale", "altup.correct_output_scale")):
                p.data.copy_(0.5 + torch.rand(p.shape, generator=gen))
    if tie:
        model.tie_weights()
    torch_dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    model = model.to(torch_dtype)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    return str(out)


def _rewrite_projections(
    src: str | os.PathLike[str], out: str | os.PathLike[str], quantize: Any, is_proj: Any = None
) -> Path:
    """A copy of the float folder ``src`` at ``out`` whose projections (``*_proj.weight`` matrices, or
    those ``is_proj(name, t)`` says) are replaced by the tensors ``quantize(name, t)`` returns (a dict);
    every other tensor kept. Returns ``out``."""
    from safetensors.torch import load_file, save_file

    src, out = Path(src), Path(out)
    shutil.copytree(src, out)
    stored = load_file(str(out / "model.safetensors"))
    packed: dict[str, Any] = {}
    for name, t in stored.items():
        proj = is_proj(name, t) if is_proj is not None else name.endswith("_proj.weight") and t.ndim == 2
        packed.update(quantize(name, t) if proj else {name: t.contiguous()})
    save_file(packed, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def _block_scales(w: Any, bn: int, bk: int, qmax: float, floor: float) -> tuple[Any, Any]:
    """Per (bn x bk) block of the matrix w (the last ones partial): max |w| / qmax (at least ``floor``),
    [ceil(rows / bn), ceil(cols / bk)], and a function expanding such a grid to w's shape."""
    import torch

    rows, cols = w.shape
    gr, gc = -(-rows // bn), -(-cols // bk)
    pad = torch.zeros(gr * bn, gc * bk)
    pad[:rows, :cols] = w.abs()
    scale = (pad.reshape(gr, bn, gc, bk).amax(dim=(1, 3)) / qmax).clamp(min=floor)

    def full(grid: Any) -> Any:
        return grid.float().repeat_interleave(bn, 0)[:rows].repeat_interleave(bk, 1)[:, :cols]

    return scale, full


def pack_bitnet(
    src: str | os.PathLike[str], out: str | os.PathLike[str], linear_class: str = "bitlinear"
) -> str:
    """A BitNet b1.58 checkpoint from the float folder ``src`` (any architecture: BitNet's own, or
    Falcon3-1.58bit's Llama), as transformers' BitLinear reads one: each projection (``*_proj.weight``,
    not the embeddings or lm_head) quantized to ternary values as transformers' WeightQuant does
    (scale = 1 / mean |w|, round(w * scale) clamped to [-1, 1]), packed four to a byte along the rows by
    transformers' own pack_weights, beside its ``weight_scale`` (that scale; for ``linear_class``
    "autobitlinear", whose products are multiplied by it, its reciprocal mean |w|); quantization_config
    quant_method "bitnet" (that class, offline) in config.json."""
    import torch
    from transformers.integrations.bitnet import pack_weights

    def quantize(name: str, t: Any) -> dict[str, Any]:
        scale = 1.0 / t.float().abs().mean().clamp(min=1e-5)
        ternary = (t.float() * scale).round().clamp(-1, 1).to(torch.int8)
        stored_scale = 1.0 / scale if linear_class == "autobitlinear" else scale
        scale_name = name.removesuffix(".weight") + ".weight_scale"
        return {name: pack_weights(ternary.clone()), scale_name: stored_scale.reshape(1).to(torch.float32)}

    out = _rewrite_projections(src, out, quantize, lambda name, t: name.endswith("_proj.weight"))
    cfg = json.loads((out / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "bitnet", "linear_class": linear_class,
                                  "quantization_mode": "offline"}  # fmt: skip
    (out / "config.json").write_text(json.dumps(cfg))
    return str(out)


def pack_fp8(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    block: tuple[int, int] | None = (128, 128),
    scale_dtype: str = "float32",
    skip: tuple[str, ...] = (),
    e8m0: bool = False,
) -> str:
    """An FP8 checkpoint from the float folder ``src`` as the releases quantized with transformers'
    FineGrainedFP8 lay one out (Qwen3-*-FP8, DeepSeek V3): each projection (``*_proj.weight``, ``w1`` /
    ``w2`` / ``w3``, not the embeddings, norms, routers or lm_head, nor names containing one of ``skip``)
    stored as float8_e4m3fn, divided by a scale per ``block`` (rows, columns; None: one per matrix) of
    max |w| / 448 (torch's rounding to E4M3), beside its ``weight_scale_inv`` (``scale_dtype``; ``e8m0``:
    the power of two at or above it, stored as E8M0, scale_fmt "ue8m0" as DeepSeek V3.1's releases);
    quantization_config quant_method "fp8" with that weight_block_size in config.json."""
    import torch

    def is_proj(name: str, t: Any) -> bool:
        proj = name.endswith(("_proj.weight", ".w1.weight", ".w2.weight", ".w3.weight"))
        return proj and t.ndim == 2 and not any(s in name for s in skip)

    def quantize(name: str, t: Any) -> dict[str, Any]:
        w = t.float()
        bn, bk = block if block is not None else w.shape
        scale, full = _block_scales(w, bn, bk, 448.0, 1e-12)
        if e8m0:
            scale = torch.exp2(torch.ceil(torch.log2(scale)))
        stored = scale.to(torch.float8_e8m0fnu if e8m0 else getattr(torch, scale_dtype))
        return {name: (w / full(scale)).clamp(-448, 448).to(torch.float8_e4m3fn), name + "_scale_inv": stored}

    out = _rewrite_projections(src, out, quantize, is_proj)
    cfg = json.loads((out / "config.json").read_text())
    cfg["quantization_config"] = {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "weight_block_size": list(block) if block is not None else None,
    }
    if e8m0:
        cfg["quantization_config"]["scale_fmt"] = "ue8m0"
    (out / "config.json").write_text(json.dumps(cfg))
    return str(out)


def _write_ct_config(out: Path, fmt: str, weights: dict[str, Any], acts: dict[str, Any] | None) -> None:
    """config.json's quantization_config for a compressed-tensors folder of one config group (every Linear
    but lm_head): format ``fmt``, ``weights`` and ``acts`` (input activations, or None) as its arguments."""
    cfg = json.loads((out / "config.json").read_text())
    group = {"targets": ["Linear"], "weights": weights, "input_activations": acts, "output_activations": None}
    cfg["quantization_config"] = {"quant_method": "compressed-tensors", "format": fmt,
                                  "quantization_status": "compressed", "ignore": ["lm_head"],
                                  "config_groups": {"group_0": group}}  # fmt: skip
    (out / "config.json").write_text(json.dumps(cfg))


def pack_compressed(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    bits: int = 4,
    group: int | None = 128,
    symmetric: bool = True,
    scale_dtype: str = "bfloat16",
    g_idx: bool = False,
) -> str:
    """A compressed-tensors W4A16 / W8A16 checkpoint (format "pack-quantized", as llm-compressor writes
    RedHatAI's *-quantized.w4a16 / w8a16) from the float folder ``src``: each projection (``*_proj.weight``,
    not the embeddings, norms, routers or lm_head) quantized to ``bits``-bit integers per ``group`` columns
    (None: per row), symmetric (scale = max |w| / (2^(bits-1) - 0.5)) or with a zero point (min / max over
    2^bits - 1 steps), packed by compressed-tensors' own ``pack_to_int32`` beside ``weight_scale``
    (``scale_dtype``), ``weight_shape`` and ``weight_zero_point``; with ``g_idx`` a trivial
    ``weight_g_idx`` too. quantization_config quant_method "compressed-tensors" in config.json."""
    import torch
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def quantize(name: str, t: Any) -> dict[str, Any]:
        w = t.float()
        rows, cols = w.shape
        g = group or cols
        wg = w.reshape(rows, cols // g, g)
        if symmetric:
            scale = (wg.abs().amax(-1) / (hi + 0.5)).clamp(min=1e-8).to(getattr(torch, scale_dtype))
            zp = torch.zeros_like(scale, dtype=torch.int32)
        else:
            mn, mx = wg.amin(-1).clamp(max=0), wg.amax(-1).clamp(min=0)
            scale = ((mx - mn) / (hi - lo)).clamp(min=1e-8).to(getattr(torch, scale_dtype))
            zp = torch.clamp(torch.round(lo - mn / scale.float()), lo, hi).to(torch.int32)
        q = torch.round(wg / scale.float()[..., None]) + zp[..., None]
        q = torch.clamp(q, lo, hi).to(torch.int8).reshape(rows, cols)
        base = name.removesuffix("weight")
        packed = {base + "weight_packed": pack_to_int32(q, bits), base + "weight_scale": scale.contiguous(),
                  base + "weight_shape": torch.tensor([rows, cols], dtype=torch.int64)}  # fmt: skip
        if not symmetric:
            packed[base + "weight_zero_point"] = pack_to_int32(zp.to(torch.int8), bits, packed_dim=0)
        if g_idx:
            packed[base + "weight_g_idx"] = (torch.arange(cols) // g).to(torch.int32)
        return packed

    out = _rewrite_projections(src, out, quantize)
    weights = {"num_bits": bits, "type": "int", "symmetric": symmetric,
               "strategy": "group" if group else "channel", "group_size": group, "dynamic": False,
               "actorder": None, "observer": "minmax"}  # fmt: skip
    _write_ct_config(out, "pack-quantized", weights, None)
    return str(out)


def pack_w8a8(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    kind: str = "int",
    static: bool = False,
    block: tuple[int, int] | None = None,
    scale_dtype: str = "bfloat16",
) -> str:
    """A compressed-tensors W8A8 checkpoint as llm-compressor writes RedHatAI's *-quantized.w8a8 (``kind``
    "int": int-quantized, int8 weights per row, scale max |w| / 127.5) or *-FP8-dynamic / *-FP8 ("float":
    float-quantized, E4M3 weights per row, or per ``block``, scale max |w| / 448) from the float folder
    ``src``: each projection (``*_proj.weight``) stored with its ``weight_scale``; input activations quantized
    per token (dynamic), or with ``static`` per tensor by an ``input_scale`` each (here one for all,
    0.05 / 127.5 or 0.05 / 448 times 40: a calibration's kind of value)."""
    import torch

    qmax = 127.5 if kind == "int" else 448.0

    def quantize(name: str, t: Any) -> dict[str, Any]:
        w = t.float()
        bn, bk = block or (1, w.shape[1])
        scale, full = _block_scales(w, bn, bk, qmax, 1e-8)
        s = scale.to(getattr(torch, scale_dtype))
        if kind == "int":
            q = torch.clamp(torch.round(w / full(s)), -128, 127).to(torch.int8)
        else:
            q = torch.clamp(w / full(s), -448, 448).to(torch.float8_e4m3fn)
        base = name.removesuffix("weight")
        packed = {name: q, base + "weight_scale": s.contiguous()}
        if static:
            packed[base + "input_scale"] = torch.tensor([2.0 / qmax], dtype=torch.float32)
        return packed

    out = _rewrite_projections(src, out, quantize)
    weights = {"num_bits": 8, "type": kind, "symmetric": True, "strategy": "block" if block else "channel",
               "dynamic": False, "observer": "minmax"}  # fmt: skip
    if block:
        weights["block_structure"] = list(block)
    acts = {"num_bits": 8, "type": kind, "symmetric": True, "strategy": "tensor" if static else "token",
            "dynamic": not static, "observer": "minmax" if static else None}  # fmt: skip
    _write_ct_config(out, f"{kind}-quantized", weights, acts)
    return str(out)


def pack_gptq(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    kind: str = "gptq",
    bits: int = 4,
    group: int | None = 128,
    symmetric: bool = True,
    scale_dtype: str = "float16",
    lm_head: bool = False,
) -> str:
    """A GPTQ / AWQ / AutoRound checkpoint of the float folder ``src`` packed by AutoRound's own modules
    (auto-round's torch QuantLinear for GPTQ's layout, its WQLinear_GEMM for AWQ's): each projection
    quantized to ``bits``-bit integers per ``group`` columns (None: per row), symmetric (zero 2^(bits-1),
    scale max |w| / (2^(bits-1) - 0.5)) or with zero points (min / max over 2^bits - 1 steps). ``kind``:
    "gptq" (AutoGPTQ's v1 checkpoints: zeros stored minus one), "gptq_v2" (GPTQModel's), "awq" (version
    gemm), "auto_round" / "auto_round:auto_gptq" / "auto_round:auto_awq" (AutoRound's own quant_method
    with that packing_format). Scales written as ``scale_dtype``; with ``lm_head`` the output matrix
    quantized too (GPTQ's lm_head option)."""
    import torch
    from auto_round.export.export_to_awq.utils import WQLinear_GEMM
    from auto_round_extension.torch.qlinear_torch import QuantLinear as QuantLinearV2
    from auto_round_extension.torch.qlinear_torch_zp import QuantLinear as QuantLinearV1

    awq = kind in ("awq", "auto_round:auto_awq")
    v1 = kind in ("gptq", "auto_round:auto_gptq")
    top = (1 << bits) - 1

    def quantize(name: str, t: Any) -> dict[str, Any]:
        w = t.float()
        rows, cols = w.shape
        g = group or cols
        wg = w.reshape(rows, cols // g, g)
        if symmetric:
            scale = (wg.abs().amax(-1) / ((1 << (bits - 1)) - 0.5)).clamp(min=1e-6)
            zero = torch.full_like(scale, 1 << (bits - 1))
        else:
            mn, mx = wg.amin(-1).clamp(max=0), wg.amax(-1).clamp(min=0)
            scale = ((mx - mn) / top).clamp(min=1e-6)
            zero = torch.clamp(torch.round(-mn / scale), 1 if v1 else 0, top)
        if scale_dtype != "float32":  # (scales that are f16 numbers, as the packers store them)
            scale = scale.half().float()
        linear = torch.nn.Linear(cols, rows, bias=False)
        linear.weight.data = w
        base = name.removesuffix(".weight")
        if awq:
            m = WQLinear_GEMM.from_linear(linear, bits, g, scales=scale.t(), zeros=zero.t())
            packed = {base + ".qweight": m.qweight, base + ".qzeros": m.qzeros, base + ".scales": m.scales}
        else:
            m = (QuantLinearV1 if v1 else QuantLinearV2)(bits, g, cols, rows, bias=False, g_idx=True)
            m.device = torch.device("cpu")  # (the v2 module's packer reads it)
            m.pack(linear, scale, zero)
            packed = {base + ".qweight": m.qweight, base + ".qzeros": m.qzeros, base + ".scales": m.scales,
                      base + ".g_idx": m.g_idx}  # fmt: skip
        packed[base + ".scales"] = scale.t().to(getattr(torch, scale_dtype))
        return {k: v.contiguous() for k, v in packed.items()}

    def is_proj(name: str, t: Any) -> bool:
        return t.ndim == 2 and (name.endswith("_proj.weight") or (lm_head and name == "lm_head.weight"))

    out = _rewrite_projections(src, out, quantize, is_proj)
    cfg = json.loads((out / "config.json").read_text())
    gs = group or -1
    if kind in ("gptq", "gptq_v2"):
        q: dict[str, Any] = {"quant_method": "gptq", "bits": bits, "group_size": gs, "desc_act": False,
                             "sym": symmetric, "checkpoint_format": kind, "lm_head": lm_head}  # fmt: skip
    elif kind == "awq":
        q = {
            "quant_method": "awq",
            "bits": bits,
            "group_size": gs,
            "zero_point": not symmetric,
            "version": "gemm",
        }
    else:
        q = {"quant_method": "auto-round", "bits": bits, "group_size": gs, "sym": symmetric,
             "data_type": "int", "packing_format": kind}  # fmt: skip
    cfg["quantization_config"] = q
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return str(out)


def gptq_act_order(path: str | os.PathLike[str], out: str | os.PathLike[str], shared: bool = True,
                   seed: int = 0) -> str:  # fmt: skip
    """An act-order (desc_act) copy of the GPTQ folder ``path``: each matrix's columns (its packed
    ``qweight`` words along the input) in a random order, ``g_idx`` giving each column its group as GPTQ's
    desc_act writes it (group k holds the k-th ``group`` columns of that order; the scales and zero points
    unchanged): a valid checkpoint of other weights, which AutoRound's g_idx path reads. ``shared``: the
    matrices that share an input (q / k / v, gate / up of a layer) share their order, as GPTQ's Hessian
    order gives them; else every matrix has its own."""
    import torch
    from safetensors.torch import load_file, save_file

    src, out = Path(path), Path(out)
    shutil.copytree(src, out)
    stored = load_file(str(src / "model.safetensors"))
    cfg = json.loads((src / "config.json").read_text())
    rng = np.random.default_rng(seed)
    orders: dict[str, np.ndarray] = {}
    tensors = dict(stored)
    for name in sorted(n for n in stored if n.endswith(".qweight")):
        base = name.removesuffix(".qweight")
        qw, qz, sc = stored[name], stored[base + ".qzeros"], stored[base + ".scales"]
        rows = sc.shape[1]
        bits = qz.shape[1] * 32 // rows
        per, cols = 32 // bits, qw.shape[0] * 32 // bits
        group = cols // sc.shape[0]
        key = base
        if shared:
            key = base.replace("k_proj", "q_proj").replace("v_proj", "q_proj").replace("up_proj", "gate_proj")
        order = orders.setdefault(key, rng.permutation(cols))
        words = qw.numpy().view(np.uint32)
        q = (words[:, None, :] >> (bits * np.arange(per, dtype=np.uint32))[None, :, None]) & ((1 << bits) - 1)
        q = q.reshape(cols, rows)[order]  # (stored column c: the original column order[c])
        packed = q.reshape(cols // per, per, rows) << (bits * np.arange(per, dtype=np.uint32))[None, :, None]
        tensors[name] = torch.from_numpy(packed.sum(axis=1, dtype=np.uint32).view(np.int32))
        tensors[base + ".g_idx"] = torch.from_numpy((order // group).astype(np.int32))
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg["quantization_config"]["desc_act"] = True
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return str(out)


def gptq_dequantized(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """AutoRound's own reading of every quantized matrix of a GPTQ / AWQ / AutoRound folder (its scales in
    float32, so that (q - zero) * scale is rounded once, as the float32 model computes it): AWQ's by its
    dequantize_gemm, GPTQ's by its torch QuantLinear's forward on the identity (v1's zeros plus one, the
    v2 module's not): name ``X.weight`` -> float32 [rows, cols]."""
    import torch
    from auto_round.export.export_to_awq.utils import dequantize_gemm
    from auto_round_extension.torch.qlinear_torch import QuantLinear as QuantLinearV2
    from auto_round_extension.torch.qlinear_torch_zp import QuantLinear as QuantLinearV1
    from safetensors.torch import load_file

    q = json.loads((Path(path) / "config.json").read_text())["quantization_config"]
    pf = q.get("packing_format", "auto_round:auto_gptq")
    awq = q["quant_method"] == "awq" or (q["quant_method"] == "auto-round" and pf.endswith("awq"))
    if q["quant_method"] == "gptq":
        v1 = q.get("checkpoint_format", "gptq") == "gptq"
    else:
        v1 = pf in ("auto_round:auto_gptq", "auto_round:gptq", "auto")
    stored = load_file(str(Path(path) / "model.safetensors"))
    out = {}
    for name in stored:
        if not name.endswith(".qweight"):
            continue
        base = name.removesuffix(".qweight")
        qw, qz, sc = stored[name], stored[base + ".qzeros"], stored[base + ".scales"].float()
        n_groups, rows = sc.shape
        bits = (qw.shape[1] if awq else qz.shape[1]) * 32 // rows
        with torch.no_grad():
            if awq:
                w = dequantize_gemm(qw, qz, sc, bits, qw.shape[0] // n_groups)
            else:
                cols = qw.shape[0] * 32 // bits
                # (its g_idx path, act-order's, slices the outputs by the input width: a module per
                # slice of at most `cols` rows)
                parts, per = [], 32 // bits
                for r0 in range(0, rows, cols):
                    r1 = min(rows, r0 + cols)
                    m = (QuantLinearV1 if v1 else QuantLinearV2)(bits, cols // n_groups, cols, r1 - r0,
                                                                 bias=False, g_idx=True)  # fmt: skip
                    m.qweight, m.qzeros = qw[:, r0:r1].contiguous(), qz[:, r0 // per : r1 // per].contiguous()
                    m.scales = sc[:, r0:r1].contiguous()
                    if base + ".g_idx" in stored:
                        m.g_idx = stored[base + ".g_idx"]
                    parts.append(m(torch.eye(cols)))
                w = torch.cat(parts, dim=1)
        out[base + ".weight"] = w.float().numpy().T.copy()
    return out


def gptq_float_folder(path: str | os.PathLike[str], out: str | os.PathLike[str]) -> str:
    """A float32 copy of a GPTQ / AWQ / AutoRound folder: its quantized matrices as AutoRound reads them
    (gptq_dequantized), every other tensor as stored, without the quantization_config: transformers' float32
    model of the quantized weights."""
    import torch
    from safetensors.torch import load_file, save_file

    src, out = Path(path), Path(out)
    shutil.copytree(src, out)
    stored = load_file(str(src / "model.safetensors"))
    tensors = {k: torch.from_numpy(v) for k, v in gptq_dequantized(src).items()}
    for name, t in stored.items():
        if not name.endswith((".qweight", ".qzeros", ".scales", ".g_idx")):
            tensors[name] = t.float() if t.is_floating_point() else t
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})  # fmt: skip
    cfg = json.loads((out / "config.json").read_text())
    del cfg["quantization_config"]
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return str(out)


def build_quantized_cases(
    root: Path, cases: dict[str, tuple[Any, ...]], pack: Any, seed: int
) -> dict[str, tuple[str, str, Any, list[int]]]:
    """name -> (quantized folder, its float folder, transformers' float32 logits or None, N_TOKENS ids) for
    cases name -> (make_hf_model keywords, ``pack`` keywords[, whether transformers is the oracle]): case i
    built with seed ``seed + i`` and packed by ``pack(float_dir, out, **keywords)``."""
    out = {}
    for i, (name, case) in enumerate(cases.items()):
        kw, pack_kw = case[0], case[1]
        oracle = case[2] if len(case) > 2 else True
        float_dir = make_hf_model(root / f"{name}-float", seed=seed + i, **kw)
        path = pack(float_dir, root / name, **pack_kw)
        ids = np.random.default_rng(i).integers(0, kw["vocab_size"], N_TOKENS).tolist()
        out[name] = (path, float_dir, hf_logits(path, ids) if oracle else None, ids)
    return out


def _dbrx_kwargs(kw: dict[str, Any]) -> dict[str, Any]:
    """DbrxConfig from make_hf_model's Llama-style keywords: d_model, n_heads, n_layers, attn_config
    (kv_n_heads, clip_qkv, rope_theta), ffn_config (ffn_hidden_size = intermediate_size, moe_num_experts,
    moe_top_k, moe_normalize_expert_weights from ``kw``)."""
    rope = kw.pop("rope_parameters")  # (transformers runs rope_parameters' base, ossa attn_config's: both)
    attn = {"kv_n_heads": kw.pop("num_key_value_heads"), "rope_theta": rope["rope_theta"]}
    if "clip_qkv" in kw:
        attn["clip_qkv"] = kw.pop("clip_qkv")
    ffn = {"ffn_hidden_size": kw.pop("intermediate_size"), "moe_num_experts": kw.pop("num_local_experts"),
           "moe_top_k": kw.pop("num_experts_per_tok")}  # fmt: skip
    if "moe_normalize_expert_weights" in kw:
        ffn["moe_normalize_expert_weights"] = kw.pop("moe_normalize_expert_weights")
    kw.pop("rms_norm_eps")
    return dict(vocab_size=kw.pop("vocab_size"), tie_word_embeddings=kw.pop("tie_word_embeddings"),
                d_model=kw.pop("hidden_size"), n_heads=kw.pop("num_attention_heads"),
                n_layers=kw.pop("num_hidden_layers"), max_seq_len=kw.pop("max_position_embeddings"),
                attn_config=attn, ffn_config=ffn, rope_parameters=rope, **kw)  # fmt: skip


def _gpt_classic_kwargs(arch: str, kw: dict[str, Any]) -> dict[str, Any]:
    """BLOOM's, MPT's, GPT-2's, GPT-BigCode's, OPT's and GPT-Neo's configs from make_hf_model's Llama-style
    keywords (their own keys; the MLP 4 x hidden in BLOOM and MPT; MPT's attention options in attn_config:
    alibi_bias_max, clip_qkv, softmax_scale from ``kw``; GPT-Neo's attention_types and window_size, OPT's
    enable_bias / activation_function as given)."""
    base = dict(vocab_size=kw.pop("vocab_size"), tie_word_embeddings=kw.pop("tie_word_embeddings"),
                layer_norm_epsilon=kw.pop("rms_norm_eps"))  # fmt: skip
    hidden, layers, heads = kw.pop("hidden_size"), kw.pop("num_hidden_layers"), kw.pop("num_attention_heads")
    kv, inner = kw.pop("num_key_value_heads"), kw.pop("intermediate_size", None)
    positions = kw.pop("max_position_embeddings")
    kw.pop("rope_parameters", None)
    if arch == "opt":  # (OPTConfig: no epsilon key; the special ids of a 50k vocabulary's)
        assert kv == heads, "OPT: MHA"
        return dict(vocab_size=base["vocab_size"], tie_word_embeddings=base["tie_word_embeddings"],
                    hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, ffn_dim=inner,
                    max_position_embeddings=positions, word_embed_proj_dim=hidden, pad_token_id=1,
                    bos_token_id=2, eos_token_id=2, **kw)  # fmt: skip
    if arch == "gpt_neo":
        assert kv == heads, "GPT-Neo: MHA"
        return dict(base, hidden_size=hidden, num_layers=layers, num_heads=heads, intermediate_size=inner,
                    max_position_embeddings=positions, bos_token_id=0, eos_token_id=0, **kw)  # fmt: skip
    if arch == "bloom":
        assert inner in (None, 4 * hidden) and kv == heads, "BLOOM: MHA, an MLP of 4 x hidden"
        return dict(base, hidden_size=hidden, n_layer=layers, n_head=heads, **kw)
    if arch == "mpt":
        assert inner in (None, 4 * hidden) and kv == heads, "MPT: MHA, an MLP of 4 x hidden"
        attn = {key: kw.pop(key) for key in ("alibi_bias_max", "clip_qkv", "softmax_scale") if key in kw}
        return dict(base, d_model=hidden, n_layers=layers, n_heads=heads, max_seq_len=positions,
                    attn_config=attn, **kw)  # fmt: skip
    out = dict(base, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=positions, n_inner=inner, **kw)
    if arch == "gpt_bigcode":  # (multi-query: one K/V head; otherwise one per head)
        assert kv in (1, heads)
        out["multi_query"] = kv == 1
    return out


# ---------------------------------------------------------------------------------------------
# HF -> GGUF


def _llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's Q/K row permutation: within each head, rows (2i, 2i+1) come from (i, i + d/2)."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
# Gemma 3's four norms per layer (llama.cpp's tensor names).
_GEMMA3_NAMES = {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}
# gpt-oss (llama.cpp's names): the output bias, the sinks, and the pre-FFN norm as post_attention_norm.
_GPT_OSS_NAMES = {"self_attn.o_proj.bias": "attn_output.bias", "self_attn.sinks": "attn_sinks.weight",
                  "post_attention_layernorm.weight": "post_attention_norm.weight"}  # fmt: skip
# OLMo 2 (llama.cpp's names): the norms of the attention's and the feed-forward's outputs.
_OLMO2_NAMES = {"post_attention_layernorm.weight": "post_attention_norm.weight",
                "post_feedforward_layernorm.weight": "post_ffw_norm.weight"}  # fmt: skip
# GLM-4 (llama.cpp's names): the norms of the attention's and the MLP's outputs; gate_up fused in ffn_up.
_GLM4_NAMES = {"post_self_attn_layernorm.weight": "post_attention_norm.weight",
               "self_attn.gate_proj.weight": "attn_gate.weight",  # (AFMoE's gate, under GLM-4's norms)
               "post_mlp_layernorm.weight": "post_ffw_norm.weight",
               "mlp.gate_up_proj.weight": "ffn_up.weight"}  # fmt: skip
# LFM2 (llama.cpp's names): the operator norm, the attention's out_proj and q / k layernorms, the
# feed-forward's w1 / w3 / w2, the short convolution's three tensors.
_LFM2_NAMES = {"operator_norm.weight": "attn_norm.weight", "ffn_norm.weight": "ffn_norm.weight",
               "self_attn.out_proj.weight": "attn_output.weight",
               "self_attn.q_layernorm.weight": "attn_q_norm.weight",
               "self_attn.k_layernorm.weight": "attn_k_norm.weight",
               "feed_forward.w1.weight": "ffn_gate.weight", "feed_forward.w3.weight": "ffn_up.weight",
               "feed_forward.w2.weight": "ffn_down.weight",
               "conv.in_proj.weight": "shortconv.in_proj.weight", "conv.conv.weight": "shortconv.conv.weight",
               "conv.out_proj.weight": "shortconv.out_proj.weight"}  # fmt: skip
# StarCoder2's LayerNorm biases, MLP (c_fc / c_proj) and output bias as llama.cpp names them.
_STARCODER2_NAMES = {
    "input_layernorm.bias": "attn_norm.bias", "post_attention_layernorm.bias": "ffn_norm.bias",
    "mlp.c_fc.weight": "ffn_up.weight", "mlp.c_fc.bias": "ffn_up.bias",
    "mlp.c_proj.weight": "ffn_down.weight", "mlp.c_proj.bias": "ffn_down.bias",
    "self_attn.o_proj.bias": "attn_output.bias",
}  # fmt: skip
# Phi-2's (llama.cpp's names): dense, fc1 / fc2.
_PHI2_NAMES = {
    "self_attn.dense.weight": "attn_output.weight", "self_attn.dense.bias": "attn_output.bias",
    "mlp.fc1.weight": "ffn_up.weight", "mlp.fc1.bias": "ffn_up.bias", "mlp.fc2.weight": "ffn_down.weight",
    "mlp.fc2.bias": "ffn_down.bias",
}  # fmt: skip
# Hunyuan's q / k norms (after RoPE) as llama.cpp names them.
_HUNYUAN_NAMES = {"self_attn.query_layernorm.weight": "attn_q_norm.weight",
                  "self_attn.key_layernorm.weight": "attn_k_norm.weight"}  # fmt: skip
# Phi-3's fused matrices, kept fused as llama.cpp's converter does (ffn_up holds gate then up).
# GPT-NeoX's (its folder's names first read as Llama's: _GPT_NEOX_PARTS).
_GPT_NEOX_NAMES = {
    "self_attn.qkv_proj.weight": "attn_qkv.weight", "self_attn.qkv_proj.bias": "attn_qkv.bias",
    "mlp.up_proj.bias": "ffn_up.bias", "mlp.down_proj.bias": "ffn_down.bias",
}  # fmt: skip


def llama3_rope_freqs(scaling: dict[str, Any], base: float, dim: int) -> np.ndarray:
    """The rope_freqs tensor llama.cpp's converters write for Llama-3 RoPE scaling (a divisor per rotated
    pair, from float32 frequencies), as LlamaModel.generate_extra_tensors computes it."""
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    factor = scaling.get("factor", 8.0)
    low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    old = scaling.get("original_max_position_embeddings", 8192)
    out = []
    for freq in freqs.astype(np.float32):
        wavelen = 2 * math.pi / float(freq)
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def _regroup_qkv(t: np.ndarray, heads: int, kv: int) -> np.ndarray:
    """A fused query_key_value held as kv groups of (heads / kv queries, a key, a value) heads (GPT-NeoX: a
    group per head; Falcon: per KV group) as [q | k | v], as llama.cpp's converters write attn_qkv."""
    per, rest = heads // kv, t.shape[1:]
    g = t.reshape(kv, per + 2, -1, *rest)
    parts = [g[:, :per].reshape(-1, *rest), g[:, per].reshape(-1, *rest), g[:, per + 1].reshape(-1, *rest)]
    return np.concatenate(parts).reshape(t.shape)


_CLASSIC = ("bloom", "mpt", "gpt2", "starcoder")  # (GPT-2-era GGUF architectures)
_PHI3_NAMES = {"self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_up.weight"}


def _gguf_name(hf_name: str, arch: str = "llama", falcon_two_norms: bool = False) -> str:
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name in ("model.norm.bias", "model.final_layernorm.bias"):  # (StarCoder2's, Phi-2's LayerNorm)
        return "output_norm.bias"
    if hf_name == "model.final_layernorm.weight":  # (Phi-2's)
        return "output_norm.weight"
    if hf_name == "lm_head.bias":  # (Phi-2's)
        return "output.bias"
    if hf_name == "model.embedding_norm.weight":  # (LFM2's final norm, as llama.cpp names it)
        return "token_embd_norm.weight"
    if hf_name.startswith("model.embed_tokens_norm."):  # (BLOOM's word_embeddings_layernorm)
        return "token_embd_norm." + hf_name.split(".")[-1]
    if hf_name == "model.embed_positions.weight":  # (GPT-2's, StarCoder's wpe)
        return "position_embd.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    parts = hf_name.split(".")
    if parts[:2] == ["model", "layers"]:
        rest = ".".join(parts[3:])
        if arch in ("gemma2", "gemma3") and rest in _GEMMA3_NAMES:
            return f"blk.{parts[2]}.{_GEMMA3_NAMES[rest]}"
        if arch in ("gpt-oss", "qwen35", "qwen35moe", "qwen3next", "seed_oss") and rest in _GPT_OSS_NAMES:
            return f"blk.{parts[2]}.{_GPT_OSS_NAMES[rest]}"
        if arch in ("olmo2", "exaone4") and rest in _OLMO2_NAMES:
            return f"blk.{parts[2]}.{_OLMO2_NAMES[rest]}"
        if arch in ("glm4", "afmoe", "chatglm") and rest in _GLM4_NAMES:
            return f"blk.{parts[2]}.{_GLM4_NAMES[rest]}"
        if arch in ("lfm2", "lfm2moe") and rest in _LFM2_NAMES:
            return f"blk.{parts[2]}.{_LFM2_NAMES[rest]}"
        if arch == "falcon" and rest.startswith("post_attention_layernorm."):  # (40B's ln_mlp: attn_norm)
            return f"blk.{parts[2]}.attn_norm.{rest.split('.')[-1]}"
        if arch == "falcon" and rest.startswith("input_layernorm.") and falcon_two_norms:  # (ln_attn)
            return f"blk.{parts[2]}.attn_norm_2.{rest.split('.')[-1]}"
        if (
            arch in ("gptneox", "falcon", "gptj", "bloom", "mpt", "gpt2", "starcoder", "dbrx")
            and rest in _GPT_NEOX_NAMES
        ):
            return f"blk.{parts[2]}.{_GPT_NEOX_NAMES[rest]}"
        if (
            arch
            in (
                "starcoder2",
                "stablelm",
                "phi2",
                "nemotron",
                "jais2",
                "gptneox",
                "falcon",
                "phimoe",
                "gptj",
                *_CLASSIC,
            )
            and rest in _STARCODER2_NAMES
        ):
            return f"blk.{parts[2]}.{_STARCODER2_NAMES[rest]}"
        if arch == "phi2" and rest in _PHI2_NAMES:
            return f"blk.{parts[2]}.{_PHI2_NAMES[rest]}"
        if arch == "jais2" and rest in ("mlp.up_proj.bias", "mlp.down_proj.bias"):  # (its MLP's biases)
            return f"blk.{parts[2]}.ffn_{rest.split('.')[1].split('_')[0]}.bias"
        if arch in ("hunyuan-dense", "hunyuan-moe") and rest in _HUNYUAN_NAMES:
            return f"blk.{parts[2]}.{_HUNYUAN_NAMES[rest]}"
        if arch == "phi3" and rest in _PHI3_NAMES:
            return f"blk.{parts[2]}.{_PHI3_NAMES[rest]}"
        if rest in _LAYER_NAMES:
            return f"blk.{parts[2]}.{_LAYER_NAMES[rest]}"
    raise ValueError(f"no GGUF name for tensor {hf_name!r}")


def _qtype(ftype: str) -> Any:
    """The GGML type of a tiny file's ``ftype`` (the types the tiny models are written in)."""
    from gguf import GGMLQuantizationType as QT

    types = {"F32": QT.F32, "F16": QT.F16, "BF16": QT.BF16, "Q8_0": QT.Q8_0, "Q4_0": QT.Q4_0, "Q4_1": QT.Q4_1}
    return types[ftype]


def _add_typed(writer: Any, name: str, w: np.ndarray, t: Any) -> None:
    """Tensor ``name`` written as type ``t``; F16 where its rows are not whole blocks of ``t`` (as
    llama.cpp's quantizer falls back)."""
    import gguf
    from gguf import GGMLQuantizationType as QT

    if t not in (QT.F32, QT.F16, QT.BF16) and w.shape[-1] % gguf.GGML_QUANT_SIZES[t][0] != 0:
        t = QT.F16
    if t == QT.F32:
        writer.add_tensor(name, w)
    elif t == QT.F16:
        writer.add_tensor(name, w.astype(np.float16))
    else:
        q = gguf.quants.quantize(w, t)
        writer.add_tensor(name, q, raw_shape=q.shape, raw_dtype=t)


def _exaone_llama_name(name: str) -> str:
    """An EXAONE 3 tensor's name in the Llama layout (transformer.h.N.attn.attention.q_proj ->
    model.layers.N.self_attn.q_proj, ...)."""
    fixed = {
        "transformer.wte.weight": "model.embed_tokens.weight",
        "transformer.ln_f.weight": "model.norm.weight",
    }
    if name in fixed:
        return fixed[name]
    if not name.startswith("transformer.h."):
        return name
    layer, rest = name[len("transformer.h.") :].split(".", 1)
    for old, new in (("ln_1.", "input_layernorm."), ("ln_2.", "post_attention_layernorm."),
                     ("attn.attention.out_proj.", "self_attn.o_proj."), ("attn.attention.", "self_attn."),
                     ("mlp.c_fc_0.", "mlp.gate_proj."), ("mlp.c_fc_1.", "mlp.up_proj."),
                     ("mlp.c_proj.", "mlp.down_proj.")):  # fmt: skip
        if rest.startswith(old):
            rest = new + rest[len(old) :]
            break
    return f"model.layers.{layer}.{rest}"


def _stablelm_stacked(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """StableLM's per-head q / k LayerNorm weights (self_attn.q_layernorm.norms.H.weight) as one
    [heads, head_dim] tensor per layer (self_attn.q_norm.weight), as llama.cpp's converter stacks them."""
    out, stacks = {}, {}
    for name, w in tensors.items():
        for part, to in ((".self_attn.q_layernorm.norms.", ".self_attn.q_norm.weight"),
                         (".self_attn.k_layernorm.norms.", ".self_attn.k_norm.weight")):  # fmt: skip
            if part in name:
                stem, _, rest = name.partition(part)
                stacks.setdefault(stem + to, {})[int(rest.split(".")[0])] = w
                break
        else:
            out[name] = w
    for name, heads in stacks.items():
        out[name] = np.stack([heads[h] for h in sorted(heads)])
    return out


def _read_hf_tensors(hf_dir: Path) -> dict[str, np.ndarray]:
    import torch
    from safetensors.torch import load_file

    files = sorted(hf_dir.glob("*.safetensors"))
    out: dict[str, np.ndarray] = {}
    for f in files:
        for k, v in load_file(str(f)).items():
            out[k] = v.to(torch.float32).numpy()
    return out


def hf_to_gguf(
    hf_dir: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    ftype: str = "F32",
    split_experts: bool = False,
    split_max_tensors: int = 0,
    fused_kv_b: bool = False,
    nextn: bool = False,
    tokenizer_gguf: str | os.PathLike[str] | None = None,
    legacy_ssm_in: bool = False,
) -> str:
    """Convert a folder written by :func:`make_hf_model` to a GGUF file; return its path.

    ``ftype`` ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1") applies to every 2-D weight, token_embd
    included; 1-D tensors (norms, biases) stay F32. A matrix whose row length is not a multiple of the
    quantization block falls back to F16, as llama.cpp does. MoE models: experts stacked into
    llama.cpp's 3-D ``ffn_*_exps`` tensors (``split_experts``: one 2-D tensor per expert, as older
    Mixtral conversions), routers kept F32. ``split_max_tensors`` > 0 writes a split model as llama.cpp
    does (``out-00001-of-0000N.gguf`` …, at most that many tensors a shard); the first shard's path is
    returned. ``fused_kv_b`` (DeepSeek V2 / V3): the layout of llama.cpp's converter before it split
    kv_b (one attn_kv_b tensor, key_length / value_length the heads' sizes over n_head KV heads), as
    the DeepSeek GGUF files published before mid-2025 hold. ``nextn`` (GLM-4.5): a copy of the last
    layer appended as llama.cpp's converter appends the multi-token-prediction layer (block_count
    one more, ``nextn_predict_layers`` 1, its ``nextn.*`` tensors), which a reader must skip.
    ``tokenizer_gguf``: that file's tokenizer keys instead of a bare "gpt2" model (a folder built with
    its vocabulary size then runs through ``LLM``). ``legacy_ssm_in`` (Qwen3-Next): the fused ssm_in of
    llama.cpp's first Qwen3-Next conversions instead of attn_qkv + attn_gate.
    """
    import gguf
    from gguf import GGMLQuantizationType as QT

    hf_dir = Path(hf_dir)
    cfg = json.loads((hf_dir / "config.json").read_text())
    model_type = cfg["model_type"]
    if model_type == "gptj":  # (GPTJConfig's own keys, as the converter reads them)
        for old, new in (("n_embd", "hidden_size"), ("n_layer", "num_hidden_layers"),
                         ("n_head", "num_attention_heads"), ("n_positions", "max_position_embeddings"),
                         ("n_inner", "intermediate_size"),
                         ("layer_norm_epsilon", "layer_norm_eps")):  # fmt: skip
            cfg.setdefault(new, cfg[old])
        cfg["intermediate_size"] = cfg.get("n_inner") or 4 * cfg["n_embd"]  # (null: 4 x hidden)
    if model_type in ("bloom", "mpt", "gpt2", "gpt_bigcode", "dbrx"):  # (their keys, as the twin reads them)
        from ossa.reference.loader import _GPT_CLASSIC_KEYS

        for old, new in _GPT_CLASSIC_KEYS:
            if cfg.get(old) is not None and cfg.get(new) is None:
                cfg[new] = cfg[old]
        cfg["intermediate_size"] = cfg.get("n_inner") or 4 * cfg["hidden_size"]
        cfg["layer_norm_eps"] = cfg.get("layer_norm_epsilon", 1e-5)
        if model_type == "gpt_bigcode":
            cfg["num_key_value_heads"] = 1 if cfg.get("multi_query", True) else cfg["num_attention_heads"]
        if model_type == "bloom":  # (BLOOM's training length; llama.cpp's converter: seq_length)
            cfg.setdefault("max_position_embeddings", 2048)
        if model_type == "dbrx":  # (the experts' width, their counts; torch's LayerNorm epsilon)
            ffn = cfg["ffn_config"]
            cfg.update(intermediate_size=ffn["ffn_hidden_size"], num_local_experts=ffn["moe_num_experts"],
                       num_experts_per_tok=ffn["moe_top_k"], layer_norm_eps=1e-5)  # fmt: skip
    if model_type == "exaone":  # (ExaoneConfig's own keys, as the converter reads them)
        for old, new in (("num_layers", "num_hidden_layers"), ("layer_norm_epsilon", "rms_norm_eps"),
                         ("activation_function", "hidden_act")):  # fmt: skip
            if old in cfg:
                cfg.setdefault(new, cfg[old])
        cfg.setdefault("rope_parameters", {}).setdefault("rope_theta", 500000.0)
    vl = model_type in (
        "qwen3_vl",
        "qwen3_vl_moe",
        "qwen2_5_vl",
    )  # (the language model, as llama.cpp converts it)
    if vl:
        tie = cfg.get("tie_word_embeddings") or cfg["text_config"].get("tie_word_embeddings")
        deepstack = len(cfg["vision_config"].get("deepstack_visual_indexes") or [])
        cfg = dict(cfg["text_config"], tie_word_embeddings=tie)
        model_type = cfg["model_type"]
    if model_type in ("gemma4_text", "gemma3n_text"):
        return _gemma4_to_gguf(hf_dir, cfg, out_path, ftype, tokenizer_gguf)
    if model_type == "nemotron_h":  # (transformers 5 writes its layer count as the pattern's length)
        cfg["num_hidden_layers"] = len(cfg["layers_block_type"])
    arch = {
        "llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
        "qwen3_moe": "qwen3moe", "qwen2_moe": "qwen2moe", "mixtral": "llama", "gemma3_text": "gemma3",
        "phi3": "phi3", "gemma2": "gemma2", "smollm3": "smollm3",
        "granite": "granite", "gemma": "gemma", "gpt_oss": "gpt-oss", "granitemoe": "granitemoe",
        "olmo2": "olmo2", "olmo3": "olmo2",  # (llama.cpp writes OLMo 3 as olmo2 with a window)
        "exaone4": "exaone4", "ernie4_5": "ernie4_5", "ernie4_5_moe": "ernie4_5-moe",
        "deepseek_v2": "deepseek2", "deepseek_v3": "deepseek2", "glm4_moe": "glm4moe",
        "olmoe": "olmoe", "glm4": "glm4", "glm": "chatglm",
        "glm4_moe_lite": "deepseek2",  # (as llama.cpp converts GLM-4.7-Flash)
        "ministral3": "mistral3", "qwen3_5_text": "qwen35", "qwen3_5_moe_text": "qwen35moe", "lfm2": "lfm2",
        "qwen3_next": "qwen3next", "mamba2": "mamba2", "mamba": "mamba", "falcon_mamba": "mamba",
        "jamba": "jamba", "falcon_h1": "falcon-h1", "llama4_text": "llama4",
        "qwen3_vl_text": "qwen3vl", "qwen3_vl_moe_text": "qwen3vlmoe", "qwen2_5_vl_text": "qwen2vl",
        "cohere": "command-r", "cohere2": "cohere2", "minimax_m2": "minimax-m2", "seed_oss": "seed_oss",
        "arcee": "arcee", "exaone": "exaone", "internlm3": "llama", "hunyuan_v1_dense": "hunyuan-dense",
        "hunyuan_v1_moe": "hunyuan-moe",
        "starcoder2": "starcoder2", "stablelm": "stablelm", "phi": "phi2", "nemotron": "nemotron",
        "olmo": "olmo", "gpt_neox": "gptneox", "falcon": "falcon", "dots1": "dots1",
        "phimoe": "phimoe", "apertus": "apertus", "exaone_moe": "exaone-moe",
        "granitemoeshared": "granitemoe", "gptj": "gptj", "minicpm3": "minicpm3", "bloom": "bloom",
        "mpt": "mpt", "gpt2": "gpt2", "jais2": "jais2",
        "gpt_bigcode": "starcoder", "afmoe": "afmoe", "dbrx": "dbrx",
        "lfm2_moe": "lfm2moe",
        "granitemoehybrid": "granitehybrid",
        "minicpm": "minicpm", "internlm2": "internlm2", "deepseek": "deepseek",  # (remote-code folders)
        "bailing_moe": "bailingmoe2", "nemotron-nas": "deci",
        "nemotron_h": "nemotron_h_moe" if "moe" in cfg.get("layers_block_type", []) else "nemotron_h",
    }[model_type]  # fmt: skip
    n_head = cfg.get("num_attention_heads") or cfg.get("num_heads")
    n_head_kv = cfg.get("num_key_value_heads") or n_head
    if model_type == "nemotron-nas":  # (the attention layers' KV heads, from block_configs)
        from ossa.reference import arch_config

        n_head_kv = arch_config.deci_keys(cfg)["num_key_value_heads"]
    if model_type == "falcon":  # (FalconConfig's keys, as llama.cpp's converter reads them)
        n_head_kv = _falcon_kv_heads(cfg, n_head)
        cfg.update(intermediate_size=cfg["ffn_hidden_size"], num_key_value_heads=n_head_kv)
    n_embd = cfg["hidden_size"]
    head_dim = cfg.get("head_dim") or (
        128
        if model_type.startswith("ernie4_5") or model_type in ("seed_oss", "internlm3")
        else n_embd // n_head
    )  # (its default)
    rope = cfg.get("rope_parameters") or {}
    if arch == "gemma3" or model_type == "olmo3":
        rope = rope.get("full_attention") or {}
    rope_theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
    if arch in ("hunyuan-dense", "hunyuan-moe") and rope.get("rope_type") == "dynamic":  # (NTK-alpha base)
        rope_theta = rope_theta * rope.get("alpha", 50 if arch == "hunyuan-dense" else 1000) ** (
            head_dim / (head_dim - 2)
        )
        rope = {"rope_theta": rope_theta, "rope_type": "default"}
    scaling = cfg.get("rope_scaling") or rope
    scaling_type = scaling.get("rope_type", scaling.get("type", "default"))

    writer = gguf.GGUFWriter(str(out_path), arch, split_max_tensors=split_max_tensors)
    writer.add_name(f"tiny-{model_type}")
    writer.add_context_length(cfg.get("max_position_embeddings", 512))
    writer.add_embedding_length(n_embd)
    writer.add_block_count(cfg["num_hidden_layers"] + int(nextn))
    if arch in ("lfm2", "lfm2moe"):  # the feed-forward's size as Lfm2MLP derives it
        from ossa.reference import arch_config

        lfm2 = arch_config.lfm2_hf(cfg, cfg["num_hidden_layers"], moe=arch == "lfm2moe")
        writer.add_feed_forward_length(lfm2["n_ff"])
    elif arch in ("nemotron_h", "nemotron_h_moe"):
        _nemotronh_keys(writer, arch, cfg, n_head_kv)
    elif arch == "mamba2":  # (as llama.cpp's converter: no feed-forward, no attention heads)
        _mamba2_keys(writer, cfg)
    elif arch == "mamba":
        _mamba1_keys(writer, cfg, model_type == "falcon_mamba")
    elif arch == "llama4":  # (the converter's swap: the dense layers' size, the experts' beside)
        _llama4_keys(writer, cfg)
    elif arch == "deci":  # (llama.cpp's converter: the per-layer sizes from block_configs)
        from ossa.reference import arch_config

        deci_heads, deci_kv, deci_ff = arch_config._deci_blocks(cfg)
        writer.add_feed_forward_length(deci_ff)
    elif cfg.get("intermediate_size"):  # (as llama.cpp's converter: absent from Qwen3.5 MoE configs)
        writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(0 if arch in ("mamba2", "mamba") else deci_heads if arch == "deci" else n_head)
    if arch == "deci":
        writer.add_head_count_kv(deci_kv)
    elif arch in (
        "lfm2",
        "lfm2moe",
    ):  # (one count per layer, 0 for the convolutions, as llama.cpp's converter)
        writer.add_head_count_kv([n_head_kv if t != "conv" else 0 for t in cfg["layer_types"]])
        writer.add_uint32(f"{arch}.shortconv.l_cache", cfg["conv_L_cache"])
    elif arch == "granitehybrid":  # (0 for the Mamba-2 layers, as llama.cpp's converter)
        _granitehybrid_keys(writer, cfg, n_head_kv)
    elif arch == "jamba":  # (0 for the Mamba-1 layers, as llama.cpp's converter)
        _jamba_keys(writer, cfg, n_head_kv)
    elif arch in ("nemotron_h", "nemotron_h_moe", "mamba2", "mamba"):
        pass  # (_nemotronh_keys wrote the per-layer counts; Mamba-2 alone has none)
    else:
        writer.add_head_count_kv(1 if arch == "deepseek2" and not fused_kv_b else n_head_kv)
    if arch == "falcon-h1":
        _falconh1_keys(writer, cfg)
    own_eps = model_type in ("nemotron_h", "mamba2", "mamba", "falcon_mamba")  # (layer_norm_epsilon)
    eps = cfg.get("layer_norm_epsilon") if own_eps else None
    writer.add_layer_norm_rms_eps(eps or cfg.get("norm_eps", cfg.get("rms_norm_eps", 1e-6)))
    writer.add_rope_freq_base(float(rope_theta))
    if arch in ("phi3", "phimoe"):  # the converter's formula: int(partial * n_embd) // n_head
        writer.add_rope_dimension_count(int(rope.get("partial_rotary_factor", 1.0) * n_embd) // n_head)
    elif arch in ("glm4moe", "glm4", "chatglm"):
        writer.add_rope_dimension_count(int(head_dim * rope.get("partial_rotary_factor", 0.5)))
        if arch == "glm4moe":
            _glm4moe_keys(writer, cfg, nextn)
    elif arch in ("qwen35", "qwen35moe", "qwen3next"):
        _qwen35_keys(writer, arch, cfg, head_dim, rope)
    elif arch == "minimax-m2":  # the rotated dimensions, the experts (llama.cpp's keys)
        writer.add_rope_dimension_count(int(cfg.get("rotary_dim") or head_dim))
        writer.add_expert_count(cfg["num_local_experts"])
        writer.add_expert_used_count(cfg["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(cfg["intermediate_size"])
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    elif arch == "minicpm3":  # (its converter: the latent's sizes, key_length the heads', no value length)
        writer.add_rope_dimension_count(cfg["qk_rope_head_dim"])
        if cfg.get("q_lora_rank"):
            writer.add_q_lora_rank(cfg["q_lora_rank"])
        writer.add_kv_lora_rank(cfg["kv_lora_rank"])
        writer.add_key_length(cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"])
        if scaling_type == "longrope":  # (llama.cpp's rope factor tensors)
            writer.add_tensor(
                "rope_factors_long.weight", np.asarray(scaling["long_factor"], dtype=np.float32)
            )
            writer.add_tensor(
                "rope_factors_short.weight", np.asarray(scaling["short_factor"], dtype=np.float32)
            )
    elif arch == "deepseek2":
        _deepseek2_keys(writer, cfg, scaling, fused_kv_b)
        if nextn:  # (GLM-4.7-Flash's files: the MTP layer appended, as for glm4moe)
            writer.add_uint32("deepseek2.nextn_predict_layers", 1)
    elif arch == "bailingmoe2":  # (its converter's partial rotation: 0.5 unless set)
        writer.add_rope_dimension_count(int(head_dim * cfg.get("partial_rotary_factor", 0.5)))
    elif arch == "stablelm":  # (its partial rotation)
        writer.add_rope_dimension_count(int(rope.get("partial_rotary_factor", 0.25) * head_dim))
    elif arch == "phi2":
        writer.add_rope_dimension_count(int(rope.get("partial_rotary_factor", 0.5) * head_dim))
    elif arch == "gptj":  # (rotary_dim)
        writer.add_rope_dimension_count(int(cfg.get("rotary_dim") or head_dim))
    elif arch == "gptneox":  # (the converter's formula: rotary_pct of a head)
        writer.add_rope_dimension_count(int(rope.get("partial_rotary_factor", 0.25) * head_dim))
        writer.add_parallel_residual(bool(cfg.get("use_parallel_residual", True)))
    elif arch == "nemotron":  # (the converter's formula, as Phi-3's)
        writer.add_rope_dimension_count(int(rope.get("partial_rotary_factor", 0.5) * n_embd) // n_head)
    else:
        writer.add_rope_dimension_count(head_dim)
    if arch not in ("deepseek2", "minicpm3"):
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_vocab_size(cfg["vocab_size"])
    writer.add_file_type(
        {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "BF16": 32, "MXFP4": 38}[ftype]
    )
    if scaling_type == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(scaling["factor"]))
    elif scaling_type == "llama3":  # llama.cpp's converters: a rope_freqs tensor, no key
        writer.add_tensor("rope_freqs.weight", llama3_rope_freqs(scaling, float(rope_theta), head_dim))
    elif scaling_type == "yarn":
        # What llama.cpp's converters write (type, factor, original context, and the config's
        # attention_factor itself as yarn_attn_factor), and its newer keys for the betas.
        factor = float(scaling["factor"])
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(factor)
        writer.add_rope_scaling_orig_ctx_len(int(scaling["original_max_position_embeddings"]))
        if scaling.get("attention_factor"):
            writer.add_rope_scaling_yarn_attn_factor(scaling["attention_factor"])  # (newer converters' key)
        if scaling.get("beta_fast"):
            writer.add_float32(f"{arch}.rope.scaling.yarn_beta_fast", float(scaling["beta_fast"]))
        if scaling.get("beta_slow"):
            writer.add_float32(f"{arch}.rope.scaling.yarn_beta_slow", float(scaling["beta_slow"]))
    if arch in (
        "stablelm",
        "phi2",
        "nemotron",
        "jais2",
        "olmo",
        "gptneox",
        "falcon",
        "gptj",
        "bloom",
        "mpt",
        "gpt2",
        "starcoder",
        "dbrx",
    ):  # LayerNorm's epsilon (llama.cpp's)
        eps = {
            "nemotron": cfg.get("norm_eps", 1e-5),
            "olmo": 1e-5,
            "falcon": cfg.get("layer_norm_epsilon", 1e-5),
        }.get(arch, cfg.get("layer_norm_eps", 1e-5))
        writer.add_layer_norm_eps(float(eps))
    if arch == "dbrx":  # (llama.cpp's converter: the experts' counts, clip_qkv)
        writer.add_expert_count(cfg["num_local_experts"])
        writer.add_expert_used_count(cfg["num_experts_per_tok"])
        if (cfg.get("attn_config") or {}).get("clip_qkv"):
            writer.add_clamp_kqv(float(cfg["attn_config"]["clip_qkv"]))
    if arch == "mpt":  # (llama.cpp's converter: the ALiBi bound, clip_qkv where set)
        attn = cfg.get("attn_config") or {}
        writer.add_max_alibi_bias(float(attn.get("alibi_bias_max") or 8.0))
        if attn.get("clip_qkv"):
            writer.add_clamp_kqv(float(attn["clip_qkv"]))
    if arch == "olmo" and cfg.get("clip_qkv"):
        writer.add_float32("olmo.attention.clamp_kqv", float(cfg["clip_qkv"]))
    if arch == "starcoder2":  # LayerNorm's epsilon (llama.cpp's key), the window where there is one
        writer.add_layer_norm_eps(float(cfg.get("norm_epsilon", 1e-5)))
        if cfg.get("sliding_window"):
            writer.add_sliding_window(int(cfg["sliding_window"]))
    if arch in ("command-r", "cohere2"):  # llama.cpp's converter: LayerNorm's epsilon, the logit scale
        writer.add_layer_norm_eps(float(cfg.get("layer_norm_eps", 1e-5)))
        writer.add_logit_scale(float(cfg.get("logit_scale", 0.0625)))
    if arch == "cohere2":  # its window; a GGUF file holds llama.cpp's pattern alone (3 sliding, 1 full)
        if cfg["layer_types"] != ["full_attention" if (i + 1) % 4 == 0 else "sliding_attention"
                                  for i in range(cfg["num_hidden_layers"])]:  # fmt: skip
            raise ValueError("a cohere2 GGUF file can only hold every 4th layer full")
        writer.add_sliding_window(int(cfg["sliding_window"]))
    if arch == "mistral3" and scaling.get("llama_4_scaling_beta"):  # llama.cpp's key for it (no length with
        # YaRN, as its converter: llama.cpp takes the original context's, which the yarn keys hold)
        writer.add_float32("mistral3.attention.temperature_scale", float(scaling["llama_4_scaling_beta"]))
        if scaling_type != "yarn":  # (the converter refuses these; ossa's key for the length)
            writer.add_uint32(
                "mistral3.attention.temperature_length", int(scaling["original_max_position_embeddings"])
            )
    if arch == "gemma3":
        _gemma3_keys(writer, cfg, head_dim)
    if arch == "gemma2":
        _gemma2_keys(writer, cfg, head_dim)
    if arch == "smollm3" and [f == 0 for f in cfg["no_rope_layers"]] != [
        (i + 1) % 4 == 0 for i in range(cfg["num_hidden_layers"])
    ]:  # llama.cpp hard-codes every 4th layer; a GGUF file has no key for another pattern
        raise ValueError("a SmolLM3 GGUF file can only hold NoPE on every 4th layer")
    if arch == "minicpm":  # llama.cpp's converter: Granite's keys from MiniCPM's config, LongRoPE's tensors
        writer.add_embedding_scale(float(cfg.get("scale_emb", 1.0)))
        writer.add_residual_scale(float(cfg.get("scale_depth", 1.0)) / cfg["num_hidden_layers"] ** 0.5)
        writer.add_logit_scale(n_embd / float(cfg.get("dim_model_base", 1.0)))
        if scaling_type == "longrope":
            writer.add_rope_scaling_type(gguf.RopeScalingType.LONGROPE)
            writer.add_rope_scaling_orig_ctx_len(int(scaling["original_max_position_embeddings"]))
            for which in ("long", "short"):
                factors = np.asarray(scaling[f"{which}_factor"], dtype=np.float32)
                writer.add_tensor(f"rope_factors_{which}.weight", factors)
    if model_type == "bailing_moe":  # llama.cpp's converter (BailingMoeV2Model; the groups: TextModel's keys)
        writer.add_leading_dense_block_count(cfg["first_k_dense_replace"])
        writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        writer.add_expert_shared_feed_forward_length(cfg["moe_intermediate_size"] * cfg["num_shared_experts"])
        writer.add_expert_weights_scale(float(cfg["routed_scaling_factor"]))
        writer.add_expert_count(cfg["num_experts"])
        writer.add_expert_used_count(cfg["num_experts_per_tok"])
        writer.add_expert_shared_count(cfg["num_shared_experts"])
        writer.add_expert_weights_norm(bool(cfg["norm_topk_prob"]))
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        writer.add_expert_group_count(cfg["n_group"])
        writer.add_expert_group_used_count(cfg["topk_group"])
        writer.add_nextn_predict_layers(0)
    if model_type == "deepseek":  # llama.cpp's converter (DeepSeek-MoE): the experts, shared ones, dense lead
        writer.add_expert_count(cfg["n_routed_experts"])
        writer.add_expert_used_count(cfg["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        writer.add_expert_shared_count(cfg.get("n_shared_experts") or 0)
        writer.add_leading_dense_block_count(cfg.get("first_k_dense_replace") or 0)
        writer.add_expert_weights_scale(float(cfg.get("routed_scaling_factor") or 1.0))
    if arch in ("granite", "granitemoe", "granitehybrid"):  # llama.cpp's converter: the four multipliers
        writer.add_embedding_scale(float(cfg.get("embedding_multiplier", 1.0)))
        writer.add_residual_scale(float(cfg.get("residual_multiplier", 1.0)))
        writer.add_attention_scale(float(cfg.get("attention_multiplier", 1.0)))
        writer.add_logit_scale(float(cfg.get("logits_scaling", 1.0)))
    if arch in ("phi3", "phimoe"):
        _phi3_keys(writer, cfg, rope)
    if arch == "phimoe":  # (its converter's expert keys: the experts of feed_forward_length rows)
        writer.add_expert_count(cfg["num_local_experts"])
        writer.add_expert_used_count(cfg["num_experts_per_tok"])
    elif arch == "gpt-oss":  # llama.cpp: the window on the even-numbered layers, hard-coded
        if cfg["layer_types"] != ["sliding_attention" if i % 2 == 0 else "full_attention"
                                  for i in range(cfg["num_hidden_layers"])]:  # fmt: skip
            raise ValueError("a gpt-oss GGUF file can only hold the window on the even-numbered layers")
        writer.add_sliding_window(int(cfg["sliding_window"]))
        writer.add_expert_count(cfg["num_local_experts"])
        writer.add_expert_used_count(cfg["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(cfg["intermediate_size"])
    elif arch == "granitemoe":  # llama.cpp's converter: the expert counts (experts of n_ff rows)
        writer.add_expert_count(cfg["num_local_experts"])
        writer.add_expert_used_count(cfg["num_experts_per_tok"])
        if cfg.get("shared_intermediate_size"):  # (GraniteMoeShared's shared MLP)
            writer.add_expert_shared_feed_forward_length(cfg["shared_intermediate_size"])
    elif model_type == "olmo3":  # llama.cpp: the window on all but every 4th layer, one RoPE table
        from ossa.reference import arch_config

        olmo3, _ = arch_config.olmo3_hf(cfg, cfg["num_hidden_layers"])
        if "rope_theta_swa" in olmo3:  # (llama.cpp's converter: the sliding layers' own base)
            writer.add_rope_freq_base_swa(olmo3["rope_theta_swa"])
        writer.add_sliding_window(olmo3["sliding_window"])
        if olmo3["layer_sliding"] != [(i + 1) % 4 != 0 for i in range(cfg["num_hidden_layers"])]:
            writer.add_sliding_window_pattern(olmo3["layer_sliding"])  # (ossa's key; llama.cpp has none)
    elif arch in ("exaone4", "exaone-moe"):  # the window (llama.cpp: the 32B model's alone), the pattern
        from ossa.reference import arch_config

        ex = arch_config.exaone4_hf(cfg, cfg["num_hidden_layers"])
        if ex["sliding_window"]:
            writer.add_sliding_window(ex["sliding_window"])
            writer.add_sliding_window_pattern(ex["layer_sliding"])
    elif arch not in (
        "gemma",
        "gemma2",
        "gemma3",
        "smollm3",
        "granite",
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "lfm2",
        "lfm2moe",
        "granitehybrid",
        "nemotron_h",
        "nemotron_h_moe",
        "mamba2",
        "mamba",
        "jamba",
        "falcon-h1",
        "llama4",
        "cohere2",
        "afmoe",
    ):
        _window_keys(writer, model_type, cfg)
    if tokenizer_gguf is not None:  # (a model of that tokenizer's vocabulary, for the engine's tests)
        _write_keys(writer, _tokenizer_keys(tokenizer_gguf))
    else:
        writer.add_tokenizer_model("gpt2")
    if model_type in ("qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "qwen3_5_moe_text", "qwen3_next"):
        _add_moe_keys(writer, arch, cfg)
    if vl:  # llama.cpp's converter's M-RoPE sections and deepstack count (unused for text)
        sections = list(
            (cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}).get("mrope_section", [])
        )
        writer.add_array(f"{arch}.rope.dimension_sections", (sections + [0, 0, 0, 0])[:4])
        if arch != "qwen2vl":
            writer.add_uint32(f"{arch}.n_deepstack_layers", deepstack)
        if arch == "qwen3vlmoe":  # (renormalised: llama.cpp's default, no key)
            writer.add_expert_count(cfg.get("num_experts") or cfg["num_local_experts"])
            writer.add_expert_used_count(cfg["num_experts_per_tok"])
            writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if model_type == "lfm2_moe":  # llama.cpp's converter: V3-style routing (sigmoid), dense lead layers
        writer.add_expert_count(cfg["num_experts"])
        writer.add_expert_used_count(cfg["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        writer.add_leading_dense_block_count(cfg["num_dense_layers"])
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if model_type == "dots1":  # llama.cpp's converter: V3's routing keys (sigmoid), the dense lead layers
        _glm4moe_keys(writer, cfg, False, "dots1")
    if model_type == "exaone_moe":  # its converter's keys (sigmoid gating), the MTP layers
        k = "exaone-moe."
        writer.add_expert_count(cfg["num_experts"])
        writer.add_expert_used_count(cfg["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        writer.add_uint32(k + "expert_shared_count", cfg["num_shared_experts"])
        writer.add_expert_shared_feed_forward_length(cfg["moe_intermediate_size"] * cfg["num_shared_experts"])
        writer.add_float32(k + "expert_weights_scale", float(cfg["routed_scaling_factor"]))
        writer.add_bool(k + "expert_weights_norm", bool(cfg["norm_topk_prob"]))
        writer.add_uint32(k + "leading_dense_block_count", cfg["first_k_dense_replace"])
        writer.add_uint32(k + "nextn_predict_layers", int(nextn))
        writer.add_uint32(k + "expert_gating_func", 2)  # (sigmoid; llama.cpp requires the key)
    if model_type == "afmoe":  # (llama.cpp's keys: V3's routing by sigmoid, the window, the dense layers)
        _afmoe_keys(writer, cfg)
    if model_type == "olmoe" and cfg.get("clip_qkv"):
        writer.add_float32("olmoe.attention.clamp_kqv", float(cfg["clip_qkv"]))
    if model_type == "hunyuan_v1_moe":  # llama.cpp's converter's keys: the experts, one shared MLP
        writer.add_expert_count(cfg["num_experts"])
        writer.add_expert_used_count(cfg["moe_topk"])
        writer.add_expert_feed_forward_length(cfg.get("moe_intermediate_size") or cfg["intermediate_size"])
        writer.add_expert_shared_feed_forward_length(cfg["intermediate_size"])
        writer.add_expert_shared_count(1)
    if model_type == "ernie4_5_moe":  # (the sparse layers: those with a router tensor)
        writer.add_expert_count(cfg["moe_num_experts"])
        writer.add_expert_used_count(cfg["moe_k"])
        writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        writer.add_uint32("ernie4_5-moe.expert_shared_count", cfg.get("moe_num_shared_experts") or 0)

    experts_qtype = None
    if ftype == "MXFP4":  # gpt-oss as released: experts MXFP4, the rest kept (here F32)
        ftype, experts_qtype = "F32", QT.MXFP4
    qtype = _qtype(ftype)
    tensors = _read_hf_tensors(hf_dir)
    if model_type == "exaone":  # EXAONE 3's GPT-2-style names (as llama.cpp's converter maps them)
        tensors = {_exaone_llama_name(k): v for k, v in tensors.items()}
    if model_type == "hunyuan_v1_moe":  # its router and shared MLP under Qwen2-MoE's names, then llama.cpp's
        parts = ((".mlp.gate.wg.", ".mlp.gate."), (".mlp.shared_mlp.", ".mlp.shared_expert."))
        tensors = {functools.reduce(lambda n, p: n.replace(*p), parts, k): v for k, v in tensors.items()}
    if model_type == "dbrx":  # Llama's names (the twin's); the experts' stacks as llama.cpp lays them out
        from ossa.reference.loader import _FAMILY_PARTS

        parts, f = _FAMILY_PARTS["dbrx"], cfg["intermediate_size"]
        tensors = {functools.reduce(lambda n, p: n.replace(*p, 1), parts, k): v for k, v in tensors.items()}
        for i in range(cfg["num_hidden_layers"]):
            m, b = f"model.layers.{i}.mlp.", f"blk.{i}."
            stack = {k: tensors.pop(m + "experts." + k).reshape(-1, f, n_embd) for k in ("w1", "v1", "w2")}
            tensors[f"dbrx.{b}ffn_gate_exps.weight"] = stack["w1"]
            tensors[f"dbrx.{b}ffn_up_exps.weight"] = stack["v1"]
            tensors[f"dbrx.{b}ffn_down_exps.weight"] = np.ascontiguousarray(stack["w2"].transpose(0, 2, 1))
            tensors[f"dbrx.{b}ffn_gate_inp.weight"] = tensors.pop(m + "gate.weight")
            tensors[f"dbrx.{b}attn_output_norm.weight"] = tensors.pop(
                f"model.layers.{i}.post_attention_layernorm.weight"
            )
    if model_type == "afmoe":  # its norms as GLM-4's, the router and its bias as DeepSeek V3's (the twin's)
        from ossa.reference.loader import _FAMILY_PARTS

        tensors = {
            functools.reduce(lambda n, p: n.replace(*p, 1), _FAMILY_PARTS["afmoe"], k): v
            for k, v in tensors.items()
        }
    if model_type == "gptj":  # its names as Llama's
        tensors = {
            functools.reduce(lambda n, p: n.replace(*p, 1), _GPTJ_PARTS, k): v for k, v in tensors.items()
        }
    if model_type in (
        "bloom",
        "mpt",
        "gpt2",
        "gpt_bigcode",
    ):  # Llama's names (the twin's); llama.cpp's layout
        from ossa.reference.loader import _FAMILY_PARTS, _gpt2_bare

        renamed = {}
        for k, v in tensors.items():
            name = functools.reduce(lambda n, p: n.replace(*p, 1), _FAMILY_PARTS[model_type], k)
            name = (_gpt2_bare(name) or "") if model_type == "gpt2" else name
            conv = (
                model_type == "gpt2"
                and name.endswith(".weight")
                and (".self_attn." in name or ".mlp." in name)
            )
            if name:
                renamed[name] = np.ascontiguousarray(v.T) if conv else v  # (GPT-2's Conv1D: [in, out])
        tensors = renamed
        if model_type == "bloom" or (model_type == "gpt_bigcode" and n_head_kv == n_head):  # (per head)
            for name in [n for n in tensors if ".self_attn.qkv_proj." in n]:
                tensors[name] = _regroup_qkv(tensors[name], n_head, n_head)
    if model_type in ("gpt_neox", "falcon"):  # Llama's names, q / k / v regrouped per part (llama.cpp's)
        neox_parts = _GPT_NEOX_PARTS if model_type == "gpt_neox" else _FALCON_PARTS
        tensors = {functools.reduce(lambda n, p: n.replace(*p), neox_parts, k): v for k, v in tensors.items()}
        for name in [n for n in tensors if ".self_attn.qkv_proj." in n]:
            tensors[name] = _regroup_qkv(tensors[name], n_head, n_head_kv)
    if model_type == "apertus":  # its norms as Llama's; xIELU's parameters as keys (llama.cpp's converter)
        for field in ("alpha_p", "alpha_n", "beta", "eps"):
            values = [float(tensors.pop(f"model.layers.{i}.mlp.act_fn.{field}").reshape(-1)[0])
                      for i in range(cfg["num_hidden_layers"])]  # fmt: skip
            writer.add_array(f"xielu.{field}", values)
        parts = (
            (".attention_layernorm.", ".input_layernorm."),
            (".feedforward_layernorm.", ".post_attention_layernorm."),
        )
        tensors = {functools.reduce(lambda n, p: n.replace(*p), parts, k): v for k, v in tensors.items()}
    if model_type == "nemotron-nas":  # (deci's linear layers: their one matrix as the output projection)
        tensors = {k.replace(".self_attn.linear_attn.", ".self_attn.o_proj."): v for k, v in tensors.items()}
    if (
        model_type == "bailing_moe"
    ):  # Llama's names (the twin's); q / k / v kept fused as llama.cpp keeps them
        from ossa.reference.loader import _FAMILY_PARTS

        tensors = {
            functools.reduce(lambda n, p: n.replace(*p, 1), _FAMILY_PARTS["bailing_moe"], k): v
            for k, v in tensors.items()
        }
        for name in [n for n in tensors if ".self_attn.qkv_proj." in n]:
            tensors[f"blk.{name.split('.')[2]}.attn_qkv.{name.split('.')[-1]}"] = tensors.pop(name)
    if model_type == "internlm2":  # llama.cpp's converter: Llama's names, wqkv split per KV group
        from ossa.reference.loader import _FAMILY_PARTS

        renamed = {}
        for k, v in tensors.items():
            name = functools.reduce(lambda n, p: n.replace(*p, 1), _FAMILY_PARTS["internlm2"], k)
            renamed["lm_head.weight" if name == "output.weight" else name] = v
        tensors = renamed
        q_rows, kv_rows = n_head * head_dim, n_head_kv * head_dim
        for name in [n for n in tensors if ".self_attn.qkv_proj." in n]:
            w = _regroup_qkv(tensors.pop(name), n_head, n_head_kv)
            for part, rows in (("q_proj", w[:q_rows]), ("k_proj", w[q_rows : q_rows + kv_rows]),
                               ("v_proj", w[q_rows + kv_rows :])):  # fmt: skip
                tensors[name.replace("qkv_proj", part)] = rows
    if model_type == "stablelm":  # per-head q / k norms stacked [heads, head_dim] (llama.cpp's layout)
        tensors = _stablelm_stacked(tensors)
    if vl:  # model.language_model.* -> model.*, the vision tower left out
        lm = "model.language_model."
        tensors = {"model." + k[len(lm) :] if k.startswith(lm) else k: v
                   for k, v in tensors.items() if not k.startswith(("model.visual.", "visual."))}  # fmt: skip
    vl_experts = _fused_expert_tensors(tensors, cfg) if vl and arch == "qwen3vlmoe" else {}
    if cfg.get("tie_word_embeddings"):
        tensors.pop("lm_head.weight", None)
    if arch == "minimax-m2":  # its selection bias beside the router, under llama.cpp's name
        for i in range(cfg["num_hidden_layers"]):
            bias = tensors.pop(f"model.layers.{i}.block_sparse_moe.e_score_correction_bias")
            tensors[f"blk.{i}.exp_probs_b.bias"] = bias
    moe = _moe_tensors(tensors, cfg["num_hidden_layers"], split_experts)
    moe.update({k[len("dbrx.") :]: tensors.pop(k) for k in [k for k in tensors if k.startswith("dbrx.blk.")]})
    moe.update({k: tensors.pop(k) for k in [k for k in tensors if k.startswith("blk.")]})
    moe.update(vl_experts)
    if arch == "gpt-oss":
        moe = _gpt_oss_experts(tensors, cfg["num_hidden_layers"])
    if arch == "ernie4_5-moe":  # the shared experts (plural) and the selection bias
        for i in range(cfg["num_hidden_layers"]):
            p, b = f"model.layers.{i}.mlp.", f"blk.{i}."
            for hf, stem in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
                if p + f"shared_experts.{hf}.weight" in tensors:
                    moe[f"{b}ffn_{stem}_shexp.weight"] = tensors.pop(p + f"shared_experts.{hf}.weight")
            if p + "moe_statics.e_score_correction_bias" in tensors:
                moe[b + "exp_probs_b.bias"] = tensors.pop(p + "moe_statics.e_score_correction_bias").reshape(
                    -1
                )
    if arch == "minicpm3":  # its latent attention under DeepSeek's names, kv_b fused (llama.cpp's converter)
        moe.update(_deepseek2_tensors(tensors, cfg, fused_kv_b=True))
    if arch == "deepseek2":  # shared experts, selection bias, and kv_b split as llama.cpp does
        moe.update(_deepseek2_tensors(tensors, cfg, fused_kv_b))
    if arch in (
        "glm4moe",
        "dots1",
        "exaone-moe",
        "afmoe",
        "deepseek",
        "bailingmoe2",
    ):  # shared, selection bias
        moe.update(_shared_experts_and_bias(tensors, cfg["num_hidden_layers"]))
    if arch in ("qwen35", "qwen35moe"):  # the delta-net layers, value heads reordered
        moe.update(_qwen35_tensors(tensors, cfg))
    if arch == "qwen3next":  # the delta-net layers, value heads kept grouped
        moe.update(_qwen3next_tensors(tensors, cfg, legacy_ssm_in))
    if arch == "granitehybrid":  # the Mamba-2 mixers, the shared MLP, the experts
        moe.update(_granitehybrid_tensors(tensors, cfg))
    if arch == "falcon-h1":  # the multipliers folded into the weights, as llama.cpp's converter does
        moe.update(_falconh1_tensors(tensors, cfg))
    if arch == "jamba":  # Mamba-1 mixers, the feed-forwards and experts under llama.cpp's names
        moe.update(_jamba_tensors(tensors, cfg))
    if arch == "llama4":  # the transposed expert stacks, router, shared expert, dense MLPs
        moe.update(_llama4_tensors(tensors, cfg))
    if arch == "mamba":  # every layer a Mamba-1 mixer under llama.cpp's names
        moe.update(_mamba1_tensors(tensors, cfg))
    if arch == "mamba2":  # Nemotron-H's Mamba-2 blocks, every layer one
        mamba = ["linear_attention"] * cfg["num_hidden_layers"]
        moe.update(_nemotronh_tensors(tensors, {**cfg, "layers_block_type": mamba}))
    if arch in ("nemotron_h", "nemotron_h_moe"):  # every block's tensors under llama.cpp's names
        writer.add_layer_norm_eps(cfg["layer_norm_epsilon"])  # (the converter's key for it as well)
        moe.update(_nemotronh_tensors(tensors, cfg))
    if arch == "granitemoe":  # the router, and input_linear's gate / up halves as two stacks
        for i in range(cfg["num_hidden_layers"]):
            p, f = f"model.layers.{i}.block_sparse_moe.", cfg["intermediate_size"]
            moe[f"blk.{i}.ffn_gate_inp.weight"] = tensors.pop(p + "router.layer.weight")
            gate_up = tensors.pop(p + "input_linear.weight")
            moe[f"blk.{i}.ffn_gate_exps.weight"], moe[f"blk.{i}.ffn_up_exps.weight"] = (
                gate_up[:, :f],
                gate_up[:, f:],
            )
            moe[f"blk.{i}.ffn_down_exps.weight"] = tensors.pop(p + "output_linear.weight")
            sp, s = f"model.layers.{i}.shared_mlp.", cfg.get("shared_intermediate_size") or 0
            if (
                s
            ):  # (GraniteMoeShared: input_linear's gate / up halves, output_linear, as llama.cpp's converter)
                shared = tensors.pop(sp + "input_linear.weight")
                moe[f"blk.{i}.ffn_gate_shexp.weight"], moe[f"blk.{i}.ffn_up_shexp.weight"] = (
                    shared[:s],
                    shared[s:],
                )
                moe[f"blk.{i}.ffn_down_shexp.weight"] = tensors.pop(sp + "output_linear.weight")
    two = bool(cfg.get("new_decoder_architecture")) and cfg.get("num_ln_in_parallel_attn") in (None, 2)
    named = {**{_gguf_name(n, arch, two): tensors[n] for n in sorted(tensors)}, **moe}
    if nextn:  # llama.cpp's MTP block: the last layer's tensors again, and its own nextn.* ones
        last, mtp = f"blk.{cfg['num_hidden_layers'] - 1}.", f"blk.{cfg['num_hidden_layers']}."
        named.update({mtp + n[len(last) :]: w for n, w in list(named.items()) if n.startswith(last)})
        named[mtp + "nextn.eh_proj.weight"] = np.ones((n_embd, 2 * n_embd), np.float32)
        for norm in ("enorm", "hnorm", "shared_head_norm"):
            named[f"{mtp}nextn.{norm}.weight"] = np.ones(n_embd, np.float32)
    for name, w in named.items():
        if arch in ("gemma", "gemma2", "gemma3", "nemotron") and name.endswith("norm.weight"):
            w = w + np.float32(1)  # llama.cpp's converter stores Gemma's norms as 1 + w (Nemotron's 1P too)
        shifted = arch in ("qwen35", "qwen35moe", "qwen3next")
        if shifted and name.endswith("norm.weight") and "ssm_norm" not in name:
            w = w + np.float32(1)  # (and Qwen3.5's, all but the delta-net's gated norm)
        permuted = (
            "llama",
            "smollm3",
            "granite",
            "granitemoe",
            "mistral3",
            "granitehybrid",
            "nemotron_h",
            "nemotron_h_moe",
            "arcee",
            "olmo",
            "minicpm",
            "internlm2",
            "deepseek",
            "deci",
        )  # (llama.cpp's converter permutes Nemotron-H's too: NoPE, harmless)
        if arch in permuted and name.endswith("attn_q.weight"):
            w = _llama_permute(w, n_head)
        elif arch in permuted and name.endswith("attn_k.weight"):
            w = _llama_permute(w, n_head_kv)
        w = np.ascontiguousarray(w, dtype=np.float32)
        t = qtype if w.ndim >= 2 and "gate_inp" not in name else QT.F32  # routers stay F32
        if name.endswith("ssm_conv1d.weight") or name.endswith("shortconv.conv.weight"):
            t = QT.F32  # (the convolutions' taps kept F32)
            w = w.reshape(w.shape[0], -1)  # (LFM2's [channels, 1, taps] squeezed, as llama.cpp's converter)
        if name.endswith((".ssm_a", ".ssm_d", "norm.weight")):
            t = QT.F32  # (Mamba-2's n x 1 vectors and its grouped norm, as llama.cpp's converter keeps them)
        if name.endswith(".bias") or name.endswith("attn_sinks.weight"):
            t = QT.F32  # biases (gpt-oss's expert bias stacks are 2-D) and sinks
        elif experts_qtype is not None and "_exps." in name:
            t = experts_qtype
        _add_typed(writer, name, w, t)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(writer.format_shard_names(Path(out_path))[0])


def _afmoe_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """AFMoE's keys as llama.cpp reads them: the experts, the shared ones, the dense lead layers, sigmoid
    gating, the scale and renormalisation, the window; and ossa's sliding_window_pattern where the layers
    are not llama.cpp's hard-coded 3 sliding : 1 global (a GGUF file has no other key for them)."""
    import gguf

    from ossa.reference import arch_config

    writer.add_expert_count(cfg["num_experts"])
    writer.add_expert_used_count(cfg["num_experts_per_tok"])
    writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    writer.add_expert_shared_count(cfg["num_shared_experts"])
    writer.add_leading_dense_block_count(cfg["num_dense_layers"])
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    writer.add_expert_weights_scale(float(cfg.get("route_scale") or 1.0))
    writer.add_expert_weights_norm(True)
    n = cfg["num_hidden_layers"]
    layers = arch_config.afmoe_hf(cfg, {"n_layer": n, "n_embd": cfg["hidden_size"]}, "")
    if cfg.get("sliding_window"):
        writer.add_sliding_window(int(cfg["sliding_window"]))
    types = [not v for v in layers["layer_nope"]]
    if types != [(i + 1) % 4 != 0 for i in range(n)]:
        writer.add_sliding_window_pattern(types)


def _deepseek2_keys(writer: Any, cfg: dict[str, Any], scaling: dict[str, Any], fused_kv_b: bool) -> None:
    """DeepSeek V2 / V3's keys as llama.cpp's converter writes them since it splits kv_b: the cache
    row (key_length = kv_lora_rank + qk_rope_head_dim over one KV head, value_length = kv_lora_rank),
    the heads' sizes in key_length_mla / value_length_mla, and the experts' routing; with
    ``fused_kv_b`` as it wrote them before (key_length / value_length the heads' sizes)."""
    k, rope, kv_lora = "deepseek2.", cfg["qk_rope_head_dim"], cfg["kv_lora_rank"]
    writer.add_rope_dimension_count(rope)
    if cfg.get("q_lora_rank"):
        writer.add_uint32(k + "attention.q_lora_rank", cfg["q_lora_rank"])
    writer.add_uint32(k + "attention.kv_lora_rank", kv_lora)
    if fused_kv_b:
        writer.add_key_length(cfg["qk_nope_head_dim"] + rope)
        writer.add_value_length(cfg["v_head_dim"])
    else:
        writer.add_key_length(kv_lora + rope)
        writer.add_value_length(kv_lora)
        writer.add_uint32(k + "attention.key_length_mla", cfg["qk_nope_head_dim"] + rope)
        writer.add_uint32(k + "attention.value_length_mla", cfg["v_head_dim"])
    if scaling.get("mscale_all_dim"):
        writer.add_float32(k + "rope.scaling.yarn_log_multiplier", 0.1 * scaling["mscale_all_dim"])
    v3 = cfg["model_type"] in ("deepseek_v3", "glm4_moe_lite")
    types = cfg.get("mlp_layer_types")  # (GLM-4.7-Flash: its dense layers lead)
    first = types.index("sparse") if types else cfg.get("first_k_dense_replace") or 0
    writer.add_uint32(k + "leading_dense_block_count", first)
    writer.add_expert_count(cfg["n_routed_experts"])
    writer.add_expert_used_count(cfg["num_experts_per_tok"])
    writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    writer.add_uint32(k + "expert_shared_count", cfg.get("n_shared_experts") or 0)
    writer.add_float32(k + "expert_weights_scale", float(cfg.get("routed_scaling_factor") or 1.0))
    writer.add_bool(k + "expert_weights_norm", bool(cfg.get("norm_topk_prob")))
    writer.add_uint32(k + "expert_gating_func", 2 if v3 else 1)
    if v3 or cfg.get("topk_method") == "group_limited_greedy":
        writer.add_uint32(k + "expert_group_count", cfg.get("n_group") or 1)
        writer.add_uint32(k + "expert_group_used_count", cfg.get("topk_group") or 1)


def _deepseek2_tensors(
    tensors: dict[str, np.ndarray], cfg: dict[str, Any], fused_kv_b: bool = False
) -> dict[str, np.ndarray]:
    """Pops DeepSeek's attention and shared-expert tensors; returns them under llama.cpp's names, kv_b
    split per head into attn_k_b (its K rows transposed: [H, kv_lora, nope]) and attn_v_b, or kept
    whole as attn_kv_b with ``fused_kv_b``."""
    names = {"q_a_proj": "attn_q_a", "q_a_layernorm": "attn_q_a_norm", "q_b_proj": "attn_q_b",
             "kv_a_proj_with_mqa": "attn_kv_a_mqa", "kv_a_layernorm": "attn_kv_a_norm",
             "q_proj": "attn_q"}  # fmt: skip
    heads, nope, v = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    rope, lat = cfg["qk_rope_head_dim"], cfg["kv_lora_rank"]
    # rope_interleave false (RoPE on halves): the rotated rows reordered into llama.cpp's pairs
    pairs = np.array([j // 2 + (j % 2) * (rope // 2) for j in range(rope)])
    out: dict[str, np.ndarray] = {}
    for i in range(cfg["num_hidden_layers"]):
        a, b = f"model.layers.{i}.self_attn.", f"blk.{i}."
        for hf, gg in names.items():
            if a + hf + ".weight" in tensors:
                out[f"{b}{gg}.weight"] = tensors.pop(a + hf + ".weight")
        if cfg.get("rope_interleave") is False:
            q_name = b + ("attn_q_b.weight" if b + "attn_q_b.weight" in out else "attn_q.weight")
            q = out[q_name].reshape(heads, nope + rope, -1)
            q = np.concatenate([q[:, :nope], q[:, nope:][:, pairs]], axis=1)
            out[q_name] = q.reshape(heads * (nope + rope), -1)
            kv_a = out[b + "attn_kv_a_mqa.weight"]
            out[b + "attn_kv_a_mqa.weight"] = np.concatenate([kv_a[:lat], kv_a[lat:][pairs]])
        kv_b = tensors.pop(a + "kv_b_proj.weight")
        if fused_kv_b:
            out[b + "attn_kv_b.weight"] = kv_b
        else:
            kv_b = kv_b.reshape(heads, nope + v, -1)
            out[b + "attn_k_b.weight"] = np.ascontiguousarray(kv_b[:, :nope].transpose(0, 2, 1))
            out[b + "attn_v_b.weight"] = np.ascontiguousarray(kv_b[:, nope:])
        m = f"model.layers.{i}.mlp."
        for hf, stem in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
            if m + f"shared_experts.{hf}.weight" in tensors:
                out[f"{b}ffn_{stem}_shexp.weight"] = tensors.pop(m + f"shared_experts.{hf}.weight")
        if m + "gate.e_score_correction_bias" in tensors:
            out[b + "exp_probs_b.bias"] = tensors.pop(m + "gate.e_score_correction_bias").reshape(-1)
    return out


def _glm4moe_keys(writer: Any, cfg: dict[str, Any], nextn: bool, arch: str = "glm4moe") -> None:
    """GLM-4.5's expert keys as llama.cpp's converter writes them (DeepSeek V3's routing: sigmoid
    scores, a selection bias, renormalised, scaled), and nextn_predict_layers (dots.llm1's alike,
    without it)."""
    k = arch + "."
    writer.add_uint32(k + "leading_dense_block_count", cfg.get("first_k_dense_replace") or 0)
    writer.add_expert_count(cfg["n_routed_experts"])
    writer.add_expert_used_count(cfg["num_experts_per_tok"])
    writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    writer.add_uint32(k + "expert_shared_count", cfg.get("n_shared_experts") or 0)
    writer.add_float32(k + "expert_weights_scale", float(cfg.get("routed_scaling_factor") or 1.0))
    writer.add_bool(k + "expert_weights_norm", bool(cfg.get("norm_topk_prob")))
    writer.add_uint32(k + "expert_gating_func", 2)
    if (cfg.get("n_group") or 1) > 1:
        writer.add_uint32(k + "expert_group_count", cfg["n_group"])
        writer.add_uint32(k + "expert_group_used_count", cfg["topk_group"])
    if arch == "glm4moe":
        writer.add_uint32(k + "nextn_predict_layers", int(nextn))


def _qwen35_keys(writer: Any, arch: str, cfg: dict[str, Any], head_dim: int, rope: dict[str, Any]) -> None:
    """Qwen3.5's keys as llama.cpp's converter writes them: the delta-net's sizes (ssm.*), the interval
    of the attention layers, the rotated dimensions and the multi-section RoPE's sections (text uses
    one position for all; llama.cpp requires the key)."""
    n_layer = cfg["num_hidden_layers"]
    types = cfg.get("layer_types")
    interval = cfg.get("full_attention_interval", 4)
    if types is not None:
        full = [i for i, t in enumerate(types) if t == "full_attention"]
        interval = full[0] + 1 if full else n_layer + 1
        if types != [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layer)
        ]:
            raise ValueError("a Qwen3.5 GGUF file holds attention layers at a fixed interval only")
    writer.add_uint32(f"{arch}.full_attention_interval", interval)
    writer.add_uint32(f"{arch}.ssm.conv_kernel", cfg["linear_conv_kernel_dim"])
    writer.add_uint32(f"{arch}.ssm.state_size", cfg["linear_key_head_dim"])
    writer.add_uint32(f"{arch}.ssm.group_count", cfg["linear_num_key_heads"])
    writer.add_uint32(f"{arch}.ssm.time_step_rank", cfg["linear_num_value_heads"])
    writer.add_uint32(f"{arch}.ssm.inner_size", cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"])
    n_rot = int(head_dim * rope.get("partial_rotary_factor", 0.25))
    writer.add_rope_dimension_count(n_rot)
    half = n_rot // 2
    writer.add_array(f"{arch}.rope.dimension_sections", [half - 2 * (half // 3), half // 3, half // 3, 0])


def _qwen35_tensors(tensors: dict[str, np.ndarray], cfg: dict[str, Any]) -> dict[str, np.ndarray]:
    """Pops the delta-net tensors; returns them as llama.cpp's converter writes them: A_log as
    ssm_a = -exp(A_log), dt_bias as ssm_dt.bias, the convolution [channels, taps], and every value-head
    quantity reordered from grouped by key head (HF: v head h reads k head h // r) to tiled (h reads
    h % n_k), so that llama.cpp's broadcast repeats the keys."""
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    kd, vd = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    r = nv // nk

    def tiled(w: np.ndarray, head: int, axis: int = 0) -> np.ndarray:  # [nk, r, head] -> [r, nk, head]
        w = np.moveaxis(w, axis, 0)
        w = w.reshape(nk, r, head, *w.shape[1:]).swapaxes(0, 1).reshape(w.shape)
        return np.moveaxis(w, 0, axis)

    out: dict[str, np.ndarray] = {}
    for i in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{i}.linear_attn.", f"blk.{i}."
        if p + "in_proj_qkv.weight" not in tensors:
            continue
        qkv = tensors.pop(p + "in_proj_qkv.weight")
        conv = tensors.pop(p + "conv1d.weight")[:, 0, :]
        qk = 2 * nk * kd
        out[b + "attn_qkv.weight"] = np.concatenate([qkv[:qk], tiled(qkv[qk:], vd)])
        out[b + "ssm_conv1d.weight"] = np.concatenate([conv[:qk], tiled(conv[qk:], vd)])
        out[b + "attn_gate.weight"] = tiled(tensors.pop(p + "in_proj_z.weight"), vd)
        out[b + "ssm_beta.weight"] = tiled(tensors.pop(p + "in_proj_b.weight"), 1)
        out[b + "ssm_alpha.weight"] = tiled(tensors.pop(p + "in_proj_a.weight"), 1)
        out[b + "ssm_a"] = tiled(-np.exp(tensors.pop(p + "A_log")), 1)
        out[b + "ssm_dt.bias"] = tiled(tensors.pop(p + "dt_bias"), 1)
        out[b + "ssm_norm.weight"] = tensors.pop(p + "norm.weight")
        out[b + "ssm_out.weight"] = tiled(tensors.pop(p + "out_proj.weight"), vd, axis=1)
    return out


def _qwen3next_tensors(
    tensors: dict[str, np.ndarray], cfg: dict[str, Any], legacy: bool
) -> dict[str, np.ndarray]:
    """Pops Qwen3-Next's delta-net tensors; returns them as llama.cpp's converter writes them: in_proj_qkvz
    ([q_g | k_g | v_g | z_g] per key head g) split into attn_qkv = [q | k | v] and attn_gate (``legacy``:
    kept whole as ssm_in), in_proj_ba kept whole as ssm_ba ([b_g | a_g] per key head), A_log as
    ssm_a = -exp(A_log), dt_bias as ssm_dt.bias, the convolution [channels, taps]; the value heads stay
    grouped by key head (llama.cpp's Qwen3-Next graph repeats the keys per group)."""
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    kd, vd, r = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], nv // nk
    out: dict[str, np.ndarray] = {}
    for i in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{i}.linear_attn.", f"blk.{i}."
        if p + "in_proj_qkvz.weight" not in tensors:
            continue
        qkvz = tensors.pop(p + "in_proj_qkvz.weight")
        if legacy:
            out[b + "ssm_in.weight"] = qkvz
        else:
            e = qkvz.shape[1]
            q, k, v, z = np.split(qkvz.reshape(nk, 2 * kd + 2 * r * vd, e), [kd, 2 * kd, 2 * kd + r * vd], 1)
            out[b + "attn_qkv.weight"] = np.concatenate([x.reshape(-1, e) for x in (q, k, v)])
            out[b + "attn_gate.weight"] = z.reshape(-1, e)
        out[b + "ssm_ba.weight"] = tensors.pop(p + "in_proj_ba.weight")
        out[b + "ssm_conv1d.weight"] = tensors.pop(p + "conv1d.weight")[:, 0, :]
        out[b + "ssm_a"] = -np.exp(tensors.pop(p + "A_log"))
        out[b + "ssm_dt.bias"] = tensors.pop(p + "dt_bias")
        out[b + "ssm_norm.weight"] = tensors.pop(p + "norm.weight")
        out[b + "ssm_out.weight"] = tensors.pop(p + "out_proj.weight")
    return out


def _mamba1_keys(writer: Any, cfg: dict[str, Any], falcon: bool) -> None:
    """Mamba-1's keys as llama.cpp's converter writes them: feed_forward_length and head_count 0, the ssm.*
    sizes (time_step_rank: dt's rank), ssm.dt_b_c_rms for Falcon-Mamba."""
    inner, rank = cfg["intermediate_size"], cfg["time_step_rank"]
    writer.add_feed_forward_length(0)
    writer.add_uint32("mamba.ssm.conv_kernel", cfg["conv_kernel"])
    writer.add_uint32("mamba.ssm.inner_size", inner)
    writer.add_uint32("mamba.ssm.state_size", cfg["state_size"])
    writer.add_uint32("mamba.ssm.time_step_rank", -(-cfg["hidden_size"] // 16) if rank == "auto" else rank)
    writer.add_bool("mamba.ssm.dt_b_c_rms", falcon)


def _mamba1_tensors(tensors: dict[str, np.ndarray], cfg: dict[str, Any]) -> dict[str, np.ndarray]:
    """Pops every Mamba-1 tensor; returns them as llama.cpp's converter writes them: each layer's norm as
    attn_norm, in_proj as ssm_in, the convolution [channels, taps] and its bias, x_proj as ssm_x, dt_proj
    as ssm_dt (weight and bias), A_log as ssm_a = -exp(A_log) [d_inner, d_state], D as ssm_d."""
    out: dict[str, np.ndarray] = {
        "token_embd.weight": tensors.pop("backbone.embeddings.weight"),
        "output_norm.weight": tensors.pop("backbone.norm_f.weight"),
    }
    for i in range(cfg["num_hidden_layers"]):
        p, b = f"backbone.layers.{i}.", f"blk.{i}."
        m = p + "mixer."
        out[b + "attn_norm.weight"] = tensors.pop(p + "norm.weight")
        out[b + "ssm_in.weight"] = tensors.pop(m + "in_proj.weight")
        out[b + "ssm_conv1d.weight"] = tensors.pop(m + "conv1d.weight")[:, 0, :]
        if m + "conv1d.bias" in tensors:
            out[b + "ssm_conv1d.bias"] = tensors.pop(m + "conv1d.bias")
        out[b + "ssm_x.weight"] = tensors.pop(m + "x_proj.weight")
        out[b + "ssm_dt.weight"] = tensors.pop(m + "dt_proj.weight")
        out[b + "ssm_dt.bias"] = tensors.pop(m + "dt_proj.bias")
        out[b + "ssm_a"] = -np.exp(tensors.pop(m + "A_log"))
        out[b + "ssm_d"] = tensors.pop(m + "D")
        out[b + "ssm_out.weight"] = tensors.pop(m + "out_proj.weight")
    return out


def _falconh1_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """Falcon-H1's ssm.* keys as llama.cpp's converter writes them (time_step_rank: the heads)."""
    d = cfg.get("mamba_d_ssm") or cfg["mamba_expand"] * cfg["hidden_size"]
    writer.add_uint32("falcon-h1.ssm.conv_kernel", cfg["mamba_d_conv"])
    writer.add_uint32("falcon-h1.ssm.inner_size", d)
    writer.add_uint32("falcon-h1.ssm.state_size", cfg["mamba_d_state"])
    writer.add_uint32("falcon-h1.ssm.time_step_rank", cfg["mamba_n_heads"])
    writer.add_uint32("falcon-h1.ssm.group_count", cfg["mamba_n_groups"])


def _falconh1_tensors(tensors: dict[str, np.ndarray], cfg: dict[str, Any]) -> dict[str, np.ndarray]:
    """Pops Falcon-H1's tensors but the attention's norm; returns them as llama.cpp's converter writes
    them, each multiplier folded into its weight (the embeddings', lm_head's, q / k / v / o's, in_proj's five
    segments, out_proj's, the MLP's gate and down), the mixer as Mamba-2's (ssm_a / ssm_d n x 1, the norm in
    n_groups rows), pre_ff_layernorm as ffn_norm, the final norm as output_norm."""
    g = lambda key: float(cfg.get(key) or 1.0)  # noqa: E731
    d = cfg.get("mamba_d_ssm") or cfg["mamba_expand"] * cfg["hidden_size"]
    gn, groups = cfg["mamba_n_groups"] * cfg["mamba_d_state"], cfg["mamba_n_groups"]
    mlp, seg = cfg.get("mlp_multipliers") or [1.0, 1.0], cfg.get("ssm_multipliers") or [1.0] * 5
    out = {"token_embd.weight": tensors.pop("model.embed_tokens.weight") * g("embedding_multiplier"),
           "output_norm.weight": tensors.pop("model.final_layernorm.weight")}  # fmt: skip
    if "lm_head.weight" in tensors:
        out["output.weight"] = tensors.pop("lm_head.weight") * g("lm_head_multiplier")
    for i in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        a, m = p + "self_attn.", p + "mamba."
        out[b + "ffn_norm"] = tensors.pop(p + "pre_ff_layernorm.weight")  # (llama.cpp's name: no .weight)
        out[b + "attn_q.weight"] = tensors.pop(a + "q_proj.weight") * g("attention_in_multiplier")
        out[b + "attn_k.weight"] = tensors.pop(a + "k_proj.weight") * (
            g("attention_in_multiplier") * g("key_multiplier")
        )
        out[b + "attn_v.weight"] = tensors.pop(a + "v_proj.weight") * g("attention_in_multiplier")
        out[b + "attn_output.weight"] = tensors.pop(a + "o_proj.weight") * g("attention_out_multiplier")
        w_in = tensors.pop(m + "in_proj.weight") * g("ssm_in_multiplier")
        ends = [d, 2 * d, 2 * d + gn, 2 * d + 2 * gn, w_in.shape[0]]
        for s, (lo, hi) in enumerate(zip([0, *ends[:-1]], ends, strict=True)):
            w_in[lo:hi] *= seg[s]
        out[b + "ssm_in.weight"] = w_in
        out[b + "ssm_conv1d.weight"] = tensors.pop(m + "conv1d.weight")[:, 0, :]
        if m + "conv1d.bias" in tensors:
            out[b + "ssm_conv1d.bias"] = tensors.pop(m + "conv1d.bias")
        out[b + "ssm_dt.bias"] = tensors.pop(m + "dt_bias")
        out[b + "ssm_a"] = -np.exp(tensors.pop(m + "A_log")).reshape(-1, 1)
        out[b + "ssm_d"] = tensors.pop(m + "D").reshape(-1, 1)
        if m + "norm.weight" in tensors:
            out[b + "ssm_norm.weight"] = tensors.pop(m + "norm.weight").reshape(groups, -1)
        out[b + "ssm_out.weight"] = tensors.pop(m + "out_proj.weight") * g("ssm_out_multiplier")
        f = p + "feed_forward."
        out[b + "ffn_gate.weight"] = tensors.pop(f + "gate_proj.weight") * mlp[0]
        out[b + "ffn_up.weight"] = tensors.pop(f + "up_proj.weight")
        out[b + "ffn_down.weight"] = tensors.pop(f + "down_proj.weight") * mlp[1]
    return {k: v.astype(np.float32) for k, v in out.items()}


def _jamba_keys(writer: Any, cfg: dict[str, Any], n_head_kv: int) -> None:
    """Jamba's keys as llama.cpp's converter writes them: the per-layer KV head counts (0: a Mamba-1
    layer), the ssm.* sizes, the expert counts."""
    n, period, offset = cfg["num_hidden_layers"], cfg["attn_layer_period"], cfg["attn_layer_offset"]
    writer.add_head_count_kv([n_head_kv if i % period == offset else 0 for i in range(n)])
    rank = cfg["mamba_dt_rank"]
    writer.add_uint32("jamba.ssm.conv_kernel", cfg["mamba_d_conv"])
    writer.add_uint32("jamba.ssm.inner_size", cfg["mamba_expand"] * cfg["hidden_size"])
    writer.add_uint32("jamba.ssm.state_size", cfg["mamba_d_state"])
    writer.add_uint32("jamba.ssm.time_step_rank", -(-cfg["hidden_size"] // 16) if rank == "auto" else rank)
    writer.add_expert_count(cfg["num_experts"])
    writer.add_expert_used_count(cfg["num_experts_per_tok"])


def _jamba_tensors(tensors: dict[str, np.ndarray], cfg: dict[str, Any]) -> dict[str, np.ndarray]:
    """Pops Jamba's Mamba-1 mixers (with their norms of dt, B and C), feed-forward norms, dense MLPs,
    routers and experts (stacked) and its final norm; returns them under llama.cpp's names."""
    out: dict[str, np.ndarray] = {"output_norm.weight": tensors.pop("model.final_layernorm.weight")}
    mixer = {"in_proj.weight": "ssm_in.weight", "x_proj.weight": "ssm_x.weight",
             "dt_proj.weight": "ssm_dt.weight", "dt_proj.bias": "ssm_dt.bias", "D": "ssm_d",
             "out_proj.weight": "ssm_out.weight", "conv1d.bias": "ssm_conv1d.bias",
             "dt_layernorm.weight": "ssm_dt_norm.weight", "b_layernorm.weight": "ssm_b_norm.weight",
             "c_layernorm.weight": "ssm_c_norm.weight"}  # fmt: skip
    for i in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        out[b + "ffn_norm.weight"] = tensors.pop(p + "pre_ff_layernorm.weight")
        if p + "mamba.A_log" in tensors:
            out[b + "ssm_a"] = -np.exp(tensors.pop(p + "mamba.A_log"))
            out[b + "ssm_conv1d.weight"] = tensors.pop(p + "mamba.conv1d.weight")[:, 0, :]
            for hf, gg in mixer.items():
                if p + "mamba." + hf in tensors:
                    out[b + gg] = tensors.pop(p + "mamba." + hf)
        f = p + "feed_forward."
        if f + "router.weight" in tensors:
            out[b + "ffn_gate_inp.weight"] = tensors.pop(f + "router.weight")
            for stem in ("gate", "up", "down"):
                out[f"{b}ffn_{stem}_exps.weight"] = np.stack(
                    [tensors.pop(f"{f}experts.{e}.{stem}_proj.weight") for e in range(cfg["num_experts"])]
                )
        else:
            for stem in ("gate", "up", "down"):
                out[f"{b}ffn_{stem}.weight"] = tensors.pop(f"{f}{stem}_proj.weight")
    return out


def _mamba2_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """Mamba-2's keys as llama.cpp's converter writes them: feed_forward_length and head_count 0, the ssm.*
    sizes (time_step_rank: the head count)."""
    inner = int(cfg.get("expand", 2) * cfg["hidden_size"])
    writer.add_feed_forward_length(0)
    writer.add_uint32("mamba2.ssm.conv_kernel", cfg["conv_kernel"])
    writer.add_uint32("mamba2.ssm.inner_size", inner)
    writer.add_uint32("mamba2.ssm.state_size", cfg["state_size"])
    writer.add_uint32("mamba2.ssm.time_step_rank", inner // cfg["head_dim"])
    writer.add_uint32("mamba2.ssm.group_count", cfg["n_groups"])


def _granitehybrid_keys(writer: Any, cfg: dict[str, Any], n_head_kv: int) -> None:
    """Granite 4.0-H's keys as llama.cpp's converter writes them: the per-layer KV head counts (0: a
    Mamba-2 layer), the ssm.* sizes (time_step_rank: the head count), rope.scaling.finetuned as the RoPE
    switch, the expert counts and the shared MLP's size."""
    arch, n_embd = "granitehybrid", cfg["hidden_size"]
    mamba = [t in ("mamba", "linear_attention") for t in cfg["layer_types"]]
    writer.add_head_count_kv([0 if m else n_head_kv for m in mamba])
    writer.add_uint32(f"{arch}.ssm.conv_kernel", cfg["mamba_d_conv"])
    writer.add_uint32(f"{arch}.ssm.state_size", cfg["mamba_d_state"])
    writer.add_uint32(f"{arch}.ssm.group_count", cfg["mamba_n_groups"])
    writer.add_uint32(f"{arch}.ssm.inner_size", cfg["mamba_expand"] * n_embd)
    writer.add_uint32(f"{arch}.ssm.time_step_rank", cfg["mamba_n_heads"])
    writer.add_bool(f"{arch}.rope.scaling.finetuned", cfg.get("position_embedding_type") == "rope")
    if cfg.get("num_local_experts"):
        writer.add_expert_count(cfg["num_local_experts"])
        writer.add_expert_used_count(cfg["num_experts_per_tok"])
    writer.add_expert_shared_feed_forward_length(cfg["shared_intermediate_size"])


def _granitehybrid_tensors(tensors: dict[str, np.ndarray], cfg: dict[str, Any]) -> dict[str, np.ndarray]:
    """Pops Granite 4.0-H's Mamba-2, shared-MLP and expert tensors; returns them as llama.cpp's converter
    writes them: in_proj as ssm_in, the convolution [channels, taps] and its bias, dt_bias as ssm_dt.bias,
    A_log as ssm_a = -exp(A_log) and D as ssm_d (both n x 1), the norm as n_groups rows; the shared MLP's
    input_linear split into gate and up (ffn_* without experts, ffn_*_shexp beside them), the experts'
    input_linear into the gate and up stacks."""
    out: dict[str, np.ndarray] = {}
    experts, groups = bool(cfg.get("num_local_experts")), cfg["mamba_n_groups"]
    for i in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        if p + "mamba.in_proj.weight" in tensors:
            m = p + "mamba."
            out[b + "ssm_in.weight"] = tensors.pop(m + "in_proj.weight")
            out[b + "ssm_conv1d.weight"] = tensors.pop(m + "conv1d.weight")[:, 0, :]
            if m + "conv1d.bias" in tensors:
                out[b + "ssm_conv1d.bias"] = tensors.pop(m + "conv1d.bias")
            out[b + "ssm_dt.bias"] = tensors.pop(m + "dt_bias")
            out[b + "ssm_a"] = -np.exp(tensors.pop(m + "A_log")).reshape(-1, 1)
            out[b + "ssm_d"] = tensors.pop(m + "D").reshape(-1, 1)
            out[b + "ssm_norm.weight"] = tensors.pop(m + "norm.weight").reshape(groups, -1)
            out[b + "ssm_out.weight"] = tensors.pop(m + "out_proj.weight")
        gate_up = tensors.pop(p + "shared_mlp.input_linear.weight")
        half, suffix = len(gate_up) // 2, "_shexp" if experts else ""
        out[f"{b}ffn_gate{suffix}.weight"], out[f"{b}ffn_up{suffix}.weight"] = gate_up[:half], gate_up[half:]
        out[f"{b}ffn_down{suffix}.weight"] = tensors.pop(p + "shared_mlp.output_linear.weight")
        if experts:
            e, f = p + "block_sparse_moe.", cfg["intermediate_size"]
            out[b + "ffn_gate_inp.weight"] = tensors.pop(e + "router.layer.weight")
            stack = tensors.pop(e + "input_linear.weight")
            out[b + "ffn_gate_exps.weight"], out[b + "ffn_up_exps.weight"] = stack[:, :f], stack[:, f:]
            out[b + "ffn_down_exps.weight"] = tensors.pop(e + "output_linear.weight")
    return out


def _nemotronh_keys(writer: Any, arch: str, cfg: dict[str, Any], n_head_kv: int) -> None:
    """Nemotron-H's keys as llama.cpp's converter writes them: per layer, the KV head count (attention
    blocks) and the feed-forward size (feed-forward blocks: intermediate_size, or moe_intermediate_size in
    the MoE variant), 0 elsewhere; the ssm.* sizes (inner = heads x head size); the experts' counts."""
    kinds = cfg["layers_block_type"]
    moe = arch == "nemotron_h_moe"
    ff = cfg["moe_intermediate_size"] if moe else cfg["intermediate_size"]
    writer.add_head_count_kv([n_head_kv if t == "full_attention" else 0 for t in kinds])
    writer.add_feed_forward_length([ff if t in ("mlp", "moe") else 0 for t in kinds])
    writer.add_uint32(f"{arch}.ssm.conv_kernel", cfg["conv_kernel"])
    writer.add_uint32(f"{arch}.ssm.state_size", cfg["ssm_state_size"])
    writer.add_uint32(f"{arch}.ssm.group_count", cfg["n_groups"])
    writer.add_uint32(f"{arch}.ssm.inner_size", cfg["mamba_num_heads"] * cfg["mamba_head_dim"])
    writer.add_uint32(f"{arch}.ssm.time_step_rank", cfg["mamba_num_heads"])
    if moe:
        writer.add_expert_count(cfg["n_routed_experts"])
        writer.add_expert_used_count(cfg["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        writer.add_expert_shared_feed_forward_length(cfg["moe_shared_expert_intermediate_size"])
        writer.add_expert_shared_count(cfg["n_shared_experts"])
        writer.add_expert_weights_norm(cfg["norm_topk_prob"])
        writer.add_expert_weights_scale(cfg["routed_scaling_factor"])
        writer.add_expert_group_count(cfg["n_group"])


def _nemotronh_tensors(tensors: dict[str, np.ndarray], cfg: dict[str, Any]) -> dict[str, np.ndarray]:
    """Pops every Nemotron-H tensor; returns them as llama.cpp's converter writes them: each block's norm
    as attn_norm, attention as attn_q / k / v / output, the Mamba-2 mixer as Granite 4.0-H's (A_log as
    ssm_a = -exp(A_log) and D as n x 1, the norm as n_groups rows), the feed-forward as ffn_up / ffn_down,
    the experts stacked (ffn_up_exps / ffn_down_exps), their router, selection bias and shared MLP."""
    out: dict[str, np.ndarray] = {
        "token_embd.weight": tensors.pop("backbone.embeddings.weight"),
        "output_norm.weight": tensors.pop("backbone.norm_f.weight"),
    }
    groups = cfg["n_groups"]
    names = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
             "in_proj": "ssm_in", "out_proj": "ssm_out", "up_proj": "ffn_up",
             "down_proj": "ffn_down"}  # fmt: skip
    for i, kind in enumerate(cfg["layers_block_type"]):
        p, b = f"backbone.layers.{i}.", f"blk.{i}."
        out[b + "attn_norm.weight"] = tensors.pop(p + "norm.weight")
        m = p + "mixer."
        if kind == "linear_attention":
            out[b + "ssm_conv1d.weight"] = tensors.pop(m + "conv1d.weight")[:, 0, :]
            if m + "conv1d.bias" in tensors:
                out[b + "ssm_conv1d.bias"] = tensors.pop(m + "conv1d.bias")
            out[b + "ssm_dt.bias"] = tensors.pop(m + "dt_bias")
            out[b + "ssm_a"] = -np.exp(tensors.pop(m + "A_log")).reshape(-1, 1)
            out[b + "ssm_d"] = tensors.pop(m + "D").reshape(-1, 1)
            out[b + "ssm_norm.weight"] = tensors.pop(m + "norm.weight").reshape(groups, -1)
        if kind == "moe":
            n = cfg["n_routed_experts"]
            out[b + "ffn_gate_inp.weight"] = tensors.pop(m + "gate.weight")
            out[b + "exp_probs_b.bias"] = tensors.pop(m + "gate.e_score_correction_bias")
            for stem in ("up", "down"):
                out[f"{b}ffn_{stem}_exps.weight"] = np.stack(
                    [tensors.pop(f"{m}experts.{e}.{stem}_proj.weight") for e in range(n)]
                )
                out[f"{b}ffn_{stem}_shexp.weight"] = tensors.pop(f"{m}shared_experts.{stem}_proj.weight")
        for hf, gg in names.items():
            if m + hf + ".weight" in tensors:
                out[f"{b}{gg}.weight"] = tensors.pop(m + hf + ".weight")
    return out


def _fused_expert_tensors(tensors: dict[str, np.ndarray], cfg: dict[str, Any]) -> dict[str, np.ndarray]:
    """Pops Qwen3-VL-MoE's fused expert stacks (gate_up_proj [n, 2F, E] as transformers 5 keeps them, or
    [n, E, 2F] as the Hub's files) and router; returns them under llama.cpp's names."""
    out: dict[str, np.ndarray] = {}
    e_dim, f = cfg["hidden_size"], cfg["moe_intermediate_size"]
    for i in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{i}.mlp.", f"blk.{i}."
        if p + "experts.gate_up_proj" not in tensors:
            continue
        gate_up, down = tensors.pop(p + "experts.gate_up_proj"), tensors.pop(p + "experts.down_proj")
        if gate_up.shape[1:] == (e_dim, 2 * f) and e_dim != 2 * f:
            gate_up, down = gate_up.transpose(0, 2, 1), down.transpose(0, 2, 1)
        out[b + "ffn_gate_exps.weight"], out[b + "ffn_up_exps.weight"] = gate_up[:, :f], gate_up[:, f:]
        out[b + "ffn_down_exps.weight"] = down
        out[b + "ffn_gate_inp.weight"] = tensors.pop(p + "gate.weight")
    return out


def _llama4_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """Llama 4's keys as llama.cpp's converter writes them; a GGUF file holds none of the chunk size, the
    NoPE interval or the temperature (llama.cpp hard-codes 8192, 4, and 0.1 over 8192), so a config with
    other values has no GGUF form."""
    from ossa.reference import arch_config

    n_layer = cfg["num_hidden_layers"]
    got = arch_config.llama4_hf(cfg, n_layer)
    if got["layer_nope"] != [(i + 1) % 4 == 0 for i in range(n_layer)] and got["sliding_window"]:
        raise ValueError("a Llama 4 GGUF file can only hold NoPE on every 4th layer")
    if got["sliding_window"] and (got["sliding_window"] != 8192 or got["layer_sliding"] != [
            (i + 1) % 4 != 0 for i in range(n_layer)]):  # fmt: skip
        raise ValueError("a Llama 4 GGUF file can only hold chunks of 8192 on the RoPE layers")
    if got.get("attn_temp_scale") and (got["attn_temp_length"] != 8192 or cfg.get("attn_scale") != 0.1):
        raise ValueError("a Llama 4 GGUF file can only hold llama.cpp's temperature (0.1 over 8192)")
    if cfg.get("use_qk_norm", True) != (cfg["num_local_experts"] != 128):
        raise ValueError("a Llama 4 GGUF file has q / k norms exactly when it has other than 128 experts")
    writer.add_feed_forward_length(cfg["intermediate_size_mlp"])
    writer.add_expert_feed_forward_length(cfg["intermediate_size"])
    writer.add_expert_count(cfg["num_local_experts"])
    writer.add_expert_used_count(cfg["num_experts_per_tok"])
    writer.add_interleave_moe_layer_step(cfg.get("interleave_moe_layer_step", 1))
    if not got["sliding_window"]:
        writer.add_sliding_window(0)  # (the converter's mark of all-full-attention models)


def _llama4_tensors(tensors: dict[str, np.ndarray], cfg: dict[str, Any]) -> dict[str, np.ndarray]:
    """Pops Llama 4's feed-forward tensors; returns them under llama.cpp's names: the experts' transposed
    stacks (gate_up_proj [n, n_embd, 2 n_ff]: gate columns, then up) as [n, rows, cols] 3-D tensors."""
    out: dict[str, np.ndarray] = {}
    for i in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{i}.feed_forward.", f"blk.{i}."
        if p + "router.weight" in tensors:
            out[b + "ffn_gate_inp.weight"] = tensors.pop(p + "router.weight")
            gate_up, f = tensors.pop(p + "experts.gate_up_proj"), cfg["intermediate_size"]
            out[b + "ffn_gate_exps.weight"] = gate_up[:, :, :f].transpose(0, 2, 1)
            out[b + "ffn_up_exps.weight"] = gate_up[:, :, f:].transpose(0, 2, 1)
            out[b + "ffn_down_exps.weight"] = tensors.pop(p + "experts.down_proj").transpose(0, 2, 1)
            for hf, stem in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
                out[f"{b}ffn_{stem}_shexp.weight"] = tensors.pop(f"{p}shared_expert.{hf}.weight")
        else:
            for hf, stem in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
                out[f"{b}ffn_{stem}.weight"] = tensors.pop(f"{p}{hf}.weight")
    return out


def _shared_experts_and_bias(tensors: dict[str, np.ndarray], n_layer: int) -> dict[str, np.ndarray]:
    """Pops the shared_experts.* and gate.e_score_correction_bias tensors (DeepSeek V3's names, which
    GLM-4.5 keeps); returns them under llama.cpp's names."""
    out: dict[str, np.ndarray] = {}
    for i in range(n_layer):
        m, b = f"model.layers.{i}.mlp.", f"blk.{i}."
        for hf, stem in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
            if m + f"shared_experts.{hf}.weight" in tensors:
                out[f"{b}ffn_{stem}_shexp.weight"] = tensors.pop(m + f"shared_experts.{hf}.weight")
        for bias in ("gate.e_score_correction_bias", "e_score_correction_bias"):  # (EXAONE MoE: the latter)
            if m + bias in tensors:
                out[b + "exp_probs_b.bias"] = tensors.pop(m + bias).reshape(-1)
    return out


def _add_moe_keys(writer: Any, arch: str, cfg: dict[str, Any]) -> None:
    """llama.cpp's MoE keys; expert_weights_norm only where norm_topk_prob differs from what llama.cpp
    assumes for the architecture (renormalised for Qwen3-MoE and Mixtral, not for Qwen2-MoE)."""
    writer.add_expert_count(cfg.get("num_experts") or cfg["num_local_experts"])
    writer.add_expert_used_count(cfg["num_experts_per_tok"])
    if arch == "llama":  # Mixtral
        return
    if arch == "olmoe":  # (experts of intermediate_size; renormalised only where set)
        if cfg.get("norm_topk_prob"):
            writer.add_bool("olmoe.expert_weights_norm", True)
        return
    writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if arch == "qwen2moe":
        writer.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    norm = bool(cfg.get("norm_topk_prob"))
    if arch in ("qwen35moe", "qwen3next"):  # (renormalised: llama.cpp's default, and their routers)
        writer.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
        if arch == "qwen3next" and not norm:  # (a test model's choice, in the key other archs use)
            writer.add_bool(f"{arch}.expert_weights_norm", False)
        return
    if norm != (arch != "qwen2moe"):
        writer.add_bool(f"{arch}.expert_weights_norm", norm)


def _moe_tensors(tensors: dict[str, np.ndarray], n_layer: int, split: bool) -> dict[str, np.ndarray]:
    """Pops the MoE tensors of an HF state dict; returns them under their GGUF names, experts stacked
    into [n_expert, rows, cols] (``split``: one tensor per expert)."""
    out: dict[str, np.ndarray] = {}
    stems = {
        "gate_proj": "gate",
        "up_proj": "up",
        "down_proj": "down",
        "w1": "gate",
        "w3": "up",
        "w2": "down",
    }
    for i in range(n_layer):
        for block in ("mlp", "block_sparse_moe", "feed_forward"):
            p = f"model.layers.{i}.{block}."
            if p + "gate.weight" not in tensors:
                continue
            out[f"blk.{i}.ffn_gate_inp.weight"] = tensors.pop(p + "gate.weight")
            for hf, stem in stems.items():
                experts = []
                while f"{p}experts.{len(experts)}.{hf}.weight" in tensors:
                    experts.append(tensors.pop(f"{p}experts.{len(experts)}.{hf}.weight"))
                if experts and split:
                    out.update({f"blk.{i}.ffn_{stem}.{e}.weight": w for e, w in enumerate(experts)})
                elif experts:
                    out[f"blk.{i}.ffn_{stem}_exps.weight"] = np.stack(experts)
                if p + f"shared_expert.{hf}.weight" in tensors:
                    out[f"blk.{i}.ffn_{stem}_shexp.weight"] = tensors.pop(p + f"shared_expert.{hf}.weight")
            if p + "shared_expert_gate.weight" in tensors:
                out[f"blk.{i}.ffn_gate_inp_shexp.weight"] = tensors.pop(p + "shared_expert_gate.weight")
            if p + "expert_bias" in tensors:  # (LFM2-MoE's selection bias)
                out[f"blk.{i}.exp_probs_b.bias"] = tensors.pop(p + "expert_bias").reshape(-1)
    return out


def _gpt_oss_experts(tensors: dict[str, np.ndarray], n_layer: int) -> dict[str, np.ndarray]:
    """Pops gpt-oss's router and experts; returns them as llama.cpp's converter writes them: gate and
    up de-interleaved (transformers keeps column 2f for gate row f, 2f + 1 for up row f) and each
    expert's matrices transposed to [rows, cols], stacked; biases as [n_expert, rows] stacks."""
    out: dict[str, np.ndarray] = {}
    for i in range(n_layer):
        p, b = f"model.layers.{i}.mlp.", f"blk.{i}."
        out[b + "ffn_gate_inp.weight"] = tensors.pop(p + "router.weight")
        out[b + "ffn_gate_inp.bias"] = tensors.pop(p + "router.bias")
        gate_up, bias = tensors.pop(p + "experts.gate_up_proj"), tensors.pop(p + "experts.gate_up_proj_bias")
        out[b + "ffn_gate_exps.weight"] = gate_up[:, :, 0::2].transpose(0, 2, 1)
        out[b + "ffn_up_exps.weight"] = gate_up[:, :, 1::2].transpose(0, 2, 1)
        out[b + "ffn_gate_exps.bias"], out[b + "ffn_up_exps.bias"] = bias[:, 0::2], bias[:, 1::2]
        out[b + "ffn_down_exps.weight"] = tensors.pop(p + "experts.down_proj").transpose(0, 2, 1)
        out[b + "ffn_down_exps.bias"] = tensors.pop(p + "experts.down_proj_bias")
    return out


def _gemma3_keys(writer: Any, cfg: dict[str, Any], head_dim: int) -> None:
    """Gemma 3's keys as llama.cpp's converter writes them (the sliding window; the final soft-cap when
    set). llama.cpp assumes every 6th layer global and scores scaled by head_dim^-1/2; a model that
    differs gets keys ossa reads (a bool per layer in attention.sliding_window_pattern,
    attention.scale), which llama.cpp itself would ignore."""
    n_layer = cfg["num_hidden_layers"]
    if cfg.get("sliding_window"):
        writer.add_sliding_window(cfg["sliding_window"])
        sliding = [t == "sliding_attention" for t in cfg["layer_types"]]
        if sliding != [(i + 1) % 6 != 0 for i in range(n_layer)]:
            writer.add_sliding_window_pattern(sliding)
        local = cfg["rope_parameters"]["sliding_attention"]["rope_theta"]
        if local != 10000.0:
            writer.add_rope_freq_base_swa(float(local))
    if cfg.get("query_pre_attn_scalar", 256) != head_dim:
        writer.add_float32("gemma3.attention.scale", cfg["query_pre_attn_scalar"] ** -0.5)
    if cfg.get("final_logit_softcapping"):
        writer.add_final_logit_softcapping(float(cfg["final_logit_softcapping"]))


_GEMMA4_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight", "layer_scalar": "layer_output_scale.weight",
    "per_layer_input_gate.weight": "inp_gate.weight", "per_layer_projection.weight": "proj.weight",
    "post_per_layer_input_norm.weight": "post_norm.weight",
    "pre_feedforward_layernorm_2.weight": "pre_ffw_norm_2.weight",
    "post_feedforward_layernorm_1.weight": "post_ffw_norm_1.weight",
    "post_feedforward_layernorm_2.weight": "post_ffw_norm_2.weight",
    "router.proj.weight": "ffn_gate_inp.weight",
    "router.scale": "ffn_gate_inp.scale", "router.per_expert_scale": "ffn_down_exps.scale",
    "experts.gate_up_proj": "ffn_gate_up_exps.weight", "experts.down_proj": "ffn_down_exps.weight",
}  # fmt: skip
_GEMMA4_GLOBALS = {
    "model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight", "model.embed_tokens_per_layer.weight": "per_layer_token_embd.weight",
    "model.per_layer_model_projection.weight": "per_layer_model_proj.weight",
    "model.per_layer_projection_norm.weight": "per_layer_proj_norm.weight",
}  # fmt: skip
# Gemma 3n's own (llama.cpp's names; the streams' projections stacked into one 3-D tensor each).
_GEMMA3N_NAMES = {
    "altup.modality_router.weight": "altup_router.weight",
    "altup.router_norm.weight": "altup_router_norm.weight",
    "altup.prediction_coefs.weight": "altup_predict_coef.weight",
    "altup.correction_coefs.weight": "altup_correct_coef.weight",
    "altup.correct_output_scale": "altup_correct_scale.weight",
    "laurel.linear_left.weight": "laurel_l.weight",
    "laurel.linear_right.weight": "laurel_r.weight",
    "laurel.post_laurel_norm.weight": "laurel_post_norm.weight",
}


def _gemma4_to_gguf(
    hf_dir: Path, cfg: dict[str, Any], out_path: str | os.PathLike[str], ftype: str, tokenizer_gguf: Any
) -> str:
    """A Gemma 4 folder as llama.cpp's converter (conversion/gemma.py Gemma4Model) writes it: norms as
    stored (no 1 + w), key_length / key_length_swa, head_count_kv and feed_forward_length per layer, a
    bool per layer for the sliding pattern, shared_kv_layers, embedding_length_per_layer_input,
    rope.dimension_count(_swa) the whole heads, and the global layers' proportional RoPE as a
    rope_freqs tensor (1 for the turning frequencies, 1e30 for the rest); layer_scalar as
    layer_output_scale, the shared layers' K/V tensors dropped."""
    import gguf
    from gguf import GGMLQuantizationType as QT

    from ossa.reference import arch_config

    g3n = cfg["model_type"] == "gemma3n_text"
    kw = arch_config.gemma3n_hf(cfg) if g3n else arch_config.gemma4_hf(cfg)
    n_layer, hd_swa = kw["n_layer"], kw["head_dim"]
    hd_full = next((kw["layer_head_dim"][i] for i in range(n_layer) if not kw["layer_sliding"][i]), hd_swa)
    writer = gguf.GGUFWriter(str(out_path), "gemma3n" if g3n else "gemma4")
    writer.add_name("tiny-gemma3n" if g3n else "tiny-gemma4")
    writer.add_context_length(cfg.get("max_position_embeddings", 512))
    writer.add_embedding_length(kw["n_embd"])
    writer.add_block_count(n_layer)
    if len(set(kw["layer_n_ff"])) > 1:
        writer.add_feed_forward_length(kw["layer_n_ff"])
    else:
        writer.add_feed_forward_length(kw["layer_n_ff"][0])
    writer.add_head_count(kw["n_head"])
    writer.add_head_count_kv(kw["layer_n_head_kv"])
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_key_length(hd_full)
    writer.add_value_length(hd_full)
    if not g3n:  # (Gemma 3n's converter writes one head size, one rotated width: Gemma 3's keys)
        writer.add_key_length_swa(hd_swa)
        writer.add_value_length_swa(hd_swa)
    writer.add_rope_freq_base(float(kw["rope_theta"]))
    writer.add_rope_freq_base_swa(float(kw["rope_theta_swa"]))
    if not g3n:
        writer.add_rope_dimension_count(hd_full)
        writer.add_rope_dimension_count_swa(hd_swa)
    writer.add_sliding_window(kw["sliding_window"])
    writer.add_sliding_window_pattern(kw["layer_sliding"])
    writer.add_shared_kv_layers(cfg.get("num_kv_shared_layers") or 0)
    writer.add_embedding_length_per_layer_input(kw["ple_dim"])
    if kw["final_softcap"]:
        writer.add_final_logit_softcapping(float(kw["final_softcap"]))
    if g3n:  # AltUp's keys, the sparse gates' cuts as the converter computes them (torch, float32)
        import torch

        writer.add_altup_active_idx(cfg.get("altup_active_idx", 0))
        writer.add_altup_num_inputs(kw["altup"])
        normal = torch.distributions.normal.Normal(0, 1)
        shares = cfg.get("activation_sparsity_pattern")  # (a config without it: a file without the key)
        if shares is not None:
            writer.add_activation_sparsity_scale(
                [normal.icdf(torch.tensor(s, dtype=torch.float32)).item() for s in shares]
            )
    if cfg.get("enable_moe_block"):
        writer.add_expert_count(cfg["num_experts"])
        writer.add_expert_used_count(cfg["top_k_experts"])
        writer.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if tokenizer_gguf is not None:
        _write_keys(writer, _tokenizer_keys(tokenizer_gguf))
    else:
        writer.add_tokenizer_model("gpt2")
    qtype = _qtype(ftype)
    tensors = _read_hf_tensors(hf_dir)
    if cfg.get("tie_word_embeddings", True):
        tensors.pop("lm_head.weight", None)
    named: dict[str, np.ndarray] = {}
    for name, w in tensors.items():
        if name in _GEMMA4_GLOBALS:
            named[_GEMMA4_GLOBALS[name]] = w
            continue
        if name.startswith(("model.altup_projections.", "model.altup_unembed_projections.")):
            continue  # (stacked below)
        parts = name.split(".")
        layer, rest = int(parts[2]), ".".join(parts[3:])
        if (
            kw["kv_source"]
            and kw["kv_source"][layer] != layer
            and rest.startswith(("self_attn.k_", "self_attn.v_"))
        ):
            continue  # (the shared layers' unused K/V tensors)
        names = dict(_GEMMA4_NAMES, **_GEMMA3N_NAMES) if g3n else _GEMMA4_NAMES
        named[f"blk.{layer}.{names[rest]}"] = w.reshape(-1) if rest == "layer_scalar" else w
    if g3n:
        for hf, gg in (
            ("altup_projections", "altup_proj"),
            ("altup_unembed_projections", "altup_unembd_proj"),
        ):
            named[f"{gg}.weight"] = np.stack(
                [tensors[f"model.{hf}.{s}.weight"] for s in range(kw["altup"] - 1)]
            )
        # the per-layer table padded to the vocabulary with zero rows, as llama.cpp's converter pads it
        table = named["per_layer_token_embd.weight"]
        pad = np.zeros((kw["n_vocab"] - len(table), table.shape[1]), dtype=table.dtype)
        named["per_layer_token_embd.weight"] = np.concatenate([table, pad])
        # GGUF has no key for altup_correct_scale (llama.cpp always scales): off, the scales are ones
        if not kw["altup_correct_scale"]:
            for layer in range(n_layer):
                named[f"blk.{layer}.altup_correct_scale.weight"] = np.ones(kw["n_embd"], dtype=np.float32)
        # the shared layers' K/V tensors, which the released checkpoints hold (unused; llama.cpp needs them)
        e, kv = kw["n_embd"], kw["n_head_kv"] * hd_full
        for layer in range(n_layer):
            if kw["kv_source"] and kw["kv_source"][layer] != layer:
                named[f"blk.{layer}.attn_k.weight"] = np.zeros((kv, e), dtype=np.float32)
                named[f"blk.{layer}.attn_v.weight"] = np.zeros((kv, e), dtype=np.float32)
                named[f"blk.{layer}.attn_k_norm.weight"] = np.ones(hd_full, dtype=np.float32)
    else:
        pairs = kw["rope_pairs"]
        named["rope_freqs.weight"] = np.array(
            [1.0] * pairs + [1e30] * (hd_full // 2 - pairs), dtype=np.float32
        )
    for name, w in named.items():
        w = np.ascontiguousarray(w, dtype=np.float32)
        t = qtype if w.ndim >= 2 and "gate_inp" not in name else QT.F32  # (the router stays F32)
        _add_typed(writer, name, w, t)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(out_path)


def _gemma2_keys(writer: Any, cfg: dict[str, Any], head_dim: int) -> None:
    """Gemma 2's keys as llama.cpp's converter writes them: the window and both soft-caps. llama.cpp
    assumes every other layer sliding, from the first, and scores scaled by head_dim^-1/2 (except for
    the 27B); a model that differs gets the keys ossa reads (attention.sliding_window_pattern as a
    bool per layer, attention.scale)."""
    n_layer = cfg["num_hidden_layers"]
    if cfg.get("sliding_window"):
        writer.add_sliding_window(cfg["sliding_window"])
        sliding = [t == "sliding_attention" for t in cfg["layer_types"]]
        if sliding != [i % 2 == 0 for i in range(n_layer)]:
            writer.add_sliding_window_pattern(sliding)
    if cfg.get("query_pre_attn_scalar", 256) != head_dim:
        writer.add_float32("gemma2.attention.scale", cfg["query_pre_attn_scalar"] ** -0.5)
    if cfg.get("attn_logit_softcapping"):
        writer.add_attn_logit_softcapping(float(cfg["attn_logit_softcapping"]))
    if cfg.get("final_logit_softcapping"):
        writer.add_final_logit_softcapping(float(cfg["final_logit_softcapping"]))


def _window_keys(writer: Any, model_type: str, cfg: dict[str, Any]) -> None:
    """The sliding window transformers applies to this config (the twin's reading of it), as the keys
    ossa reads for these architectures: attention.sliding_window, and attention.sliding_window_pattern
    (a bool per layer) when not every layer is windowed. llama.cpp's converter writes neither."""
    from ossa.reference import arch_config, loader

    w = arch_config.window_hf(loader._HF_ARCHS[model_type], cfg, cfg["num_hidden_layers"])
    if w["sliding_window"]:
        writer.add_sliding_window(w["sliding_window"])
        if not all(w["layer_sliding"]):
            writer.add_sliding_window_pattern(w["layer_sliding"])


def split_gguf(src: str | os.PathLike[str], dst: str | os.PathLike[str], max_tensors: int) -> list[str]:
    """GGUF file `src` rewritten as a split model as llama.cpp's gguf-split writes one: shards
    ``dst-00001-of-0000N.gguf`` … of at most `max_tensors` tensors, the metadata in the first, the
    split keys in every one (gguf-py's writer). Returns the shards' paths."""
    import gguf

    reader = gguf.GGUFReader(str(src))
    arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    writer = gguf.GGUFWriter(str(dst), arch, split_max_tensors=max_tensors)
    _copy_metadata(reader, writer)
    for t in reader.tensors:
        data = np.asarray(t.data)  # quantized types: the bytes, [rows, row bytes]
        writer.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return [str(p) for p in writer.format_shard_names(Path(dst))]


def gguf_without(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    keys: Any = (),
    tensors: Any = (),
    add: dict[str, Any] | None = None,
) -> str:
    """A copy of GGUF file ``src`` at ``dst`` without the metadata ``keys`` and the ``tensors`` named
    (the loaders' errors for a file that lacks them), with the keys of ``add`` (name -> float, int as
    uint32, or a list as an array) written anew."""
    import gguf

    reader = gguf.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch)
    add = add or {}
    _copy_metadata(reader, w, skip=tuple(keys) + tuple(add))
    for name, value in add.items():
        if isinstance(value, list):
            w.add_array(name, value)
        else:
            (w.add_float32 if isinstance(value, float) else w.add_uint32)(name, value)
    for t in reader.tensors:
        if t.name not in tensors:
            w.add_tensor(t.name, np.asarray(t.data), raw_shape=list(reversed([int(v) for v in t.shape])))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(dst)


def corrupt_sizes(
    src: str | os.PathLike[str], tmp: Path, values: Sequence[int]
) -> tuple[list[str], dict[str, int]]:
    """Each scalar integer key of the architecture in GGUF file ``src`` (the sizes: block and head
    counts, widths, ...; the per-layer arrays stay) set to each of ``values`` in a copy under ``tmp``,
    loaded and run in-process: each must be refused with a ModelError (a ValueError) or load and run
    (a crash kills pytest, the failure signal). Returns the keys and the count of each outcome."""
    import gguf

    from ossa._native import core

    fields = gguf.GGUFReader(str(src)).fields
    arch = fields["general.architecture"].contents()
    ints = (gguf.GGUFValueType.UINT32, gguf.GGUFValueType.INT32, gguf.GGUFValueType.UINT64)
    keys = [
        k for k, f in fields.items() if k.startswith(arch + ".") and len(f.types) == 1 and f.types[0] in ints
    ]
    outcomes = {"error": 0, "ran": 0}
    for key in keys:
        for value in values:
            path = gguf_without(src, tmp / "bad.gguf", add={key: value})
            try:
                model = core.load_model(path)
                core.model_logits(model, [1, 2, 3])
                outcomes["ran"] += 1
            except ValueError:
                outcomes["error"] += 1
    return keys, outcomes


def _copy_metadata(reader: Any, writer: Any, skip: tuple[str, ...] = ()) -> None:
    """Every metadata key of a GGUFReader but the header's and general.architecture (the writer's)."""
    import gguf

    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in skip:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)


def with_random_kquants(src: str | os.PathLike[str], dst: str | os.PathLike[str], seed: int = 0) -> str:
    """A copy of GGUF `src` whose matrices are random Q4_K / Q6_K blocks, laid out as llama.cpp's
    Q4_K_M mix lays them (Q6_K: attn_v, ffn_down and the token embedding; Q4_K: the rest); 1-D
    tensors and metadata copied. Every bit of the quants is random; the f16 scales are drawn small
    enough that the forward stays finite. gguf-py cannot quantize K-quants, hence random blocks."""
    import gguf
    from gguf import GGMLQuantizationType as QT

    rng = np.random.default_rng(seed)
    reader = gguf.GGUFReader(str(src))
    arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    writer = gguf.GGUFWriter(str(dst), arch)
    _copy_metadata(reader, writer, skip=("general.file_type",))
    for t in reader.tensors:
        shape = [int(x) for x in t.shape[::-1]]
        if len(shape) == 1 or shape[0] == 1:
            writer.add_tensor(t.name, np.asarray(t.data, dtype=np.float32).reshape(-1))
            continue
        rows, cols = shape
        q6 = t.name.endswith(("attn_v.weight", "ffn_down.weight", "token_embd.weight"))
        qt = QT.Q6_K if q6 else QT.Q4_K
        nb, block_bytes = cols // 256, gguf.GGML_QUANT_SIZES[qt][1]
        raw = rng.integers(0, 256, size=(rows, nb, block_bytes), dtype=np.uint8)
        if q6:  # d (last 2 bytes) times int8 scales up to 127 times quants up to 32
            raw[:, :, 208:210] = rng.uniform(1e-5, 1e-4, (rows, nb, 1)).astype(np.float16).view(np.uint8)
        else:  # d and dmin (bytes 0..3) times 6-bit scales up to 63 times quants up to 15
            raw[:, :, 0:4] = rng.uniform(1e-4, 1e-3, (rows, nb, 2)).astype(np.float16).view(np.uint8)
        raw = raw.reshape(rows, nb * block_bytes)
        writer.add_tensor(t.name, raw, raw_shape=raw.shape, raw_dtype=qt)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(dst)


def _phi3_keys(writer: Any, cfg: dict[str, Any], rope: dict[str, Any]) -> None:
    """Phi-3's keys and LongRoPE tensors as llama.cpp's converter writes them: the original context,
    the sliding window (0 when none), and for LongRoPE the attention factor computed from
    context / original context, with rope_factors_long / rope_factors_short as F32 tensors."""
    original = cfg.get("original_max_position_embeddings") or rope.get("original_max_position_embeddings")
    if original:
        writer.add_rope_scaling_orig_ctx_len(int(original))
    writer.add_sliding_window(int(cfg.get("sliding_window") or 0))
    if rope.get("rope_type") not in ("longrope", "su"):
        return
    scale = cfg["max_position_embeddings"] / original
    attn = 1.0 if scale <= 1.0 else math.sqrt(1 + math.log(scale) / math.log(original))
    writer.add_rope_scaling_attn_factors(attn)
    writer.add_tensor("rope_factors_long.weight", np.asarray(rope["long_factor"], dtype=np.float32))
    writer.add_tensor("rope_factors_short.weight", np.asarray(rope["short_factor"], dtype=np.float32))


# ---------------------------------------------------------------------------------------------
# Golden comparisons shared by the architecture tests


# The recurrent hybrids whose golden logits transformers computes in float64 (hf_logits).
_FLOAT64_ORACLE = (
    "granitemoehybrid",
    "bamba",
    "nemotron_h",
    "mamba2",
    "mamba",
    "falcon_mamba",
    "jamba",
    "falcon_h1",
)


def hf_logits(path: str | os.PathLike[str], ids: list[int]) -> np.ndarray:
    """transformers' float32 logits of one sequence, [len(ids), vocab]. Qwen3.5's are computed in
    float64 (returned as float32): transformers' float32 delta rule (its chunked form) is itself ~3e-5
    off its float64 result on the tiny models, more than the bound the tests hold ossa to (ossa's
    recurrent form in float32 stays within 1e-5 of the float64 one)."""
    import torch

    kw: dict[str, Any] = {}
    if _model_type(path).startswith(("qwen3_5", "qwen3_next")) or _model_type(path) in _FLOAT64_ORACLE:
        # (grouped_mm has no float64: the experts' loop)
        kw = {"dtype": torch.float64, "experts_implementation": "eager"}
    model = _causal_lm(_model_type(path)).from_pretrained(
        str(path), **{"dtype": torch.float32, **kw, **_attn_impl(path)}
    )
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()  # type: ignore[no-any-return]


def _causal_lm(model_type: str) -> Any:
    """transformers' causal-LM class for a model type (Mistral 4's is not in the Auto mapping)."""
    import transformers

    if model_type == "mistral4":
        from transformers.models.mistral4.modeling_mistral4 import Mistral4ForCausalLM

        return Mistral4ForCausalLM
    if model_type in ("qwen3_vl", "qwen3_vl_moe", "qwen2_5_vl"):  # (vision-language: their own Auto class)
        return transformers.AutoModelForImageTextToText
    return transformers.AutoModelForCausalLM


def _model_type(path: str | os.PathLike[str]) -> str:
    return str(json.loads((Path(path) / "config.json").read_text()).get("model_type", ""))


def _attn_impl(path: str | os.PathLike[str]) -> dict[str, str]:
    """Gemma 2's soft-capped attention scores exist in transformers' eager attention only (SDPA has no
    soft-capping): the oracle runs that, as transformers recommends for Gemma 2."""
    cfg = json.loads((Path(path) / "config.json").read_text())
    return {"attn_implementation": "eager"} if cfg.get("model_type") in ("gemma2", "vaultgemma") else {}


def build_hf_cases(
    root: str | os.PathLike[str], cases: dict[str, dict[str, Any]], seed: int = 0, n_tokens: int = 40
) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids): case i built with seed ``seed + i`` and
    ``n_tokens`` ids drawn with seed i."""
    out = {}
    for i, (name, kw) in enumerate(cases.items()):
        path = make_hf_model(Path(root) / name, seed=seed + i, **kw)
        ids = np.random.default_rng(i).integers(0, kw["vocab_size"], n_tokens).tolist()
        out[name] = (path, hf_logits(path, ids), ids)
    return out


# The tiny-model tests' bounds on max |error| / max |HF logit| (test_forward_hf.py states why): against
# transformers per format (F16 and Q8_0 files round the weights HF keeps), against the twin on the
# same stored weights; and the length of their prompts.
HF_TOL = {"safetensors": 1e-5, "F32": 1e-5, "F16": 1e-3, "Q8_0": 3e-2}
TWIN_TOL = 1e-5
# ossa against the twin where a model runs the AMX bf16-tile kernels (Q4_0 / Q4_1 / Q8_0 / BF16 and
# the other bf16-tile types on a CPU with AMX: Model.uses_amx): the activations' bf16 hi + lo products
# are summed inside the tiles, which the twin does not mirror, ~3e-6 of sum |x w| per matmul (the f32
# kernels: ~3e-7). Measured over the tiny models on a Sapphire Rapids machine: up to 1.07e-5 (a
# DeepSeek V3 Q8_0 file, five matmuls per attention), where the f32 kernels (amx=False) stay within
# 1e-6 of the twin. Without AMX: INT8_TWIN_TOL below where the int8 kernels run, else TWIN_TOL.
AMX_TWIN_TOL = 4e-5


# ossa against the twin where a model's matrices run the int8-pieces kernels without AMX (VNNI / AVX2
# builds: Q4_K, Q6_K, Q8_0, ... repacked, listed by Model.int8_matrices): the kernels sum exact int32
# products of the split activations block by block, then in f32, where the twin multiplies in float64
# (the split mirrored where a test passes int8_matrices, the unsplit activations where it does not);
# the Mamba-2 / hybrid recurrences carry the differences on. Measured on a Zen 4 VM (AVX-512 VNNI, no
# AMX) over the tiny models' Q8_0 files: 1.0-1.3e-5 for attention models, up to 6.1e-5 for the
# hybrid and SSM ones (Falcon-H1, Mamba-2), 1.0e-4 for Jamba (held to twice the bound).
INT8_TWIN_TOL = 1e-4


def twin_tol(model: Any) -> float:
    """The bound on max |ossa - twin| / max |HF| for a loaded ``core.Model``."""
    if model.uses_amx:
        return AMX_TWIN_TOL
    return INT8_TWIN_TOL if model.int8_matrices else TWIN_TOL


N_TOKENS = 40


def case_file(cases: dict[str, Any], name: str, fmt: str, tmp: Any, **kw: Any) -> str:
    """Case ``name`` of a build_hf_cases dict as ``fmt`` (model_file into a fresh folder of the pytest
    TempPathFactory ``tmp``)."""
    return model_file(cases[name][0], fmt, tmp.mktemp("gguf"), name, **kw)


def model_file(hf_dir: str, fmt: str, out_dir: str | os.PathLike[str], name: str, **kw: Any) -> str:
    """The folder itself for "safetensors", else its GGUF conversion in ``fmt`` under ``out_dir``."""
    if fmt == "safetensors":
        return str(hf_dir)
    return hf_to_gguf(hf_dir, Path(out_dir) / f"{name}-{fmt}.gguf", fmt, **kw)


class Golden(NamedTuple):
    """ossa's model of a file, the twin's config of it, and the max |error| / max |HF logit| of ossa
    vs HF, ossa vs the NumPy twin (same dequantized weights) and the twin vs HF."""

    model: Any
    config: dict[str, Any]
    err_hf: float
    err_twin: float
    twin_hf: float


def golden(path: str, ids: list[int], hf: np.ndarray) -> Golden:
    """Runs ossa (``core.model_logits``) and the twin (``reference.model.forward``) on `ids` and compares
    both with transformers' logits `hf`."""
    from ossa._native import core
    from ossa.reference import loader as ref_loader
    from ossa.reference import model as ref_model

    model = core.load_model(path)
    logits = core.model_logits(model, ids)
    assert logits.shape == hf.shape
    config, weights = ref_loader.load_weights(path)
    twin = ref_model.forward(config, weights, ids)
    scale = float(np.max(np.abs(hf)))

    def err(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.max(np.abs(a - b))) / scale

    return Golden(model, config, err(logits, hf), err(logits, twin), err(twin, hf))


def runner_logits(runner: Any, tokens: list[int], chunk: int, block: int = 4) -> np.ndarray:
    """Logits of every token of one sequence prefilled `chunk` tokens a step (blocks in reverse)."""
    n_blocks = (len(tokens) + block - 1) // block
    table = list(range(n_blocks))[::-1]
    out = []
    for start in range(0, len(tokens), chunk):
        toks = tokens[start : start + chunk]
        pos = list(range(start, start + len(toks)))
        slots = [table[p // block] * block + p % block for p in pos]
        out.append(
            runner.forward(
                toks, pos, slots, [0, len(toks)], [pos[-1] + 1], [0, n_blocks], table, list(range(len(toks)))
            )  # fmt: skip
        )
    return np.concatenate(out)


def greedy(model: Any, prompt: list[int], n_new: int, block: int = 16) -> list[int]:
    """Prefill then one-token decode steps through a paged ModelRunner (blocks in reverse order)."""
    from ossa._native import core

    n_blocks = (len(prompt) + n_new + block - 1) // block
    table = list(range(n_blocks))[::-1]
    runner = core.ModelRunner(model, n_blocks, block, len(prompt))

    def step(tokens: list[int], start: int) -> int:
        pos = list(range(start, start + len(tokens)))
        slots = [table[p // block] * block + p % block for p in pos]
        n = len(tokens)
        logits = runner.forward(tokens, pos, slots, [0, n], [start + n], [0, n_blocks], table, [n - 1])
        return int(np.argmax(logits[0]))

    out = [step(prompt, 0)]
    while len(out) < n_new:
        out.append(step([out[-1]], len(prompt) + len(out) - 1))
    return out


def hf_greedy(path: str, prompt: list[int], n_new: int) -> list[int]:
    """transformers' generate(): exactly `n_new` greedy tokens after `prompt`, the argmax at every step
    (no end-of-sequence id: min_new_tokens would instead mask those ids, which ``greedy`` does not)."""
    import torch

    model = _causal_lm(_model_type(path)).from_pretrained(path, dtype=torch.float32, **_attn_impl(path))
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        t = torch.tensor([prompt])
        out = model.generate(t, attention_mask=torch.ones_like(t), max_new_tokens=n_new, do_sample=False)
    return out[0, len(prompt) :].tolist()  # type: ignore[no-any-return]


def _tokenizer_keys(tokenizer_gguf: str | os.PathLike[str]) -> dict[str, Any]:
    """The tokenizer.* metadata of a GGUF file (ossa's own reader: gguf-py's parses a 49k-token
    vocabulary for seconds)."""
    from ossa._native import core

    return {k: v for k, v in core.gguf_metadata(str(tokenizer_gguf)).items() if k.startswith("tokenizer.")}


def _write_keys(writer: Any, meta: dict[str, Any]) -> None:
    for name, value in meta.items():
        if isinstance(value, bool):
            writer.add_bool(name, value)
        elif isinstance(value, int):
            writer.add_uint32(name, value)
        elif isinstance(value, str):
            writer.add_string(name, value)
        else:
            writer.add_array(name, list(value))  # strings, or token types (int32)


def tiny_draft_gguf(
    out_path: str | os.PathLike[str],
    tokenizer_gguf: str | os.PathLike[str],
    *,
    vocab_size: int | None = None,
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    swap_tokens: tuple[int, int] | None = None,
) -> str:
    """A tiny random Llama GGUF (F32, tied embeddings) carrying ``tokenizer_gguf``'s tokenizer keys: a
    draft model for speculative decoding with another model's vocabulary. ``vocab_size``: its rows
    (default: the tokenizer's); ``swap_tokens``: two token strings exchanged, a token table that
    differs from the tokenizer's own."""
    import gguf

    meta = _tokenizer_keys(tokenizer_gguf)
    n_vocab = vocab_size or len(meta["tokenizer.ggml.tokens"])
    n_head, n_head_kv, n_ff = 4, 2, 2 * hidden_size
    head_dim = hidden_size // n_head
    writer = gguf.GGUFWriter(str(out_path), "llama")
    writer.add_name("tiny-draft")
    writer.add_context_length(2048)
    writer.add_embedding_length(hidden_size)
    writer.add_block_count(num_layers)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(0)
    if swap_tokens is not None:
        a, b = swap_tokens
        tokens = meta["tokenizer.ggml.tokens"] = list(meta["tokenizer.ggml.tokens"])
        tokens[a], tokens[b] = tokens[b], tokens[a]
    _write_keys(writer, meta)
    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / math.sqrt(cols)).astype(np.float32)

    writer.add_tensor("token_embd.weight", rng.standard_normal((n_vocab, hidden_size)).astype(np.float32))
    for i in range(num_layers):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", np.ones(hidden_size, dtype=np.float32))
        writer.add_tensor(p + "attn_q.weight", mat(hidden_size, hidden_size))
        writer.add_tensor(p + "attn_k.weight", mat(n_head_kv * head_dim, hidden_size))
        writer.add_tensor(p + "attn_v.weight", mat(n_head_kv * head_dim, hidden_size))
        writer.add_tensor(p + "attn_output.weight", mat(hidden_size, hidden_size))
        writer.add_tensor(p + "ffn_norm.weight", np.ones(hidden_size, dtype=np.float32))
        writer.add_tensor(p + "ffn_gate.weight", mat(n_ff, hidden_size))
        writer.add_tensor(p + "ffn_up.weight", mat(n_ff, hidden_size))
        writer.add_tensor(p + "ffn_down.weight", mat(hidden_size, n_ff))
    writer.add_tensor("output_norm.weight", np.ones(hidden_size, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(out_path)


def check_golden(path: str, ids: list[int], hf_logits: np.ndarray, fmt: str) -> Any:
    """The architecture tests' golden check of one model file (``fmt`` as in HF_TOL): ossa and the
    twin against transformers' logits, the twin against ossa, and the twin reading the same
    hyper-parameters as the C++ loader. Returns the loaded ``core.Model``."""
    model, config, err_hf, err_twin, twin_hf = golden(path, ids, hf_logits)
    assert err_hf < HF_TOL[fmt], f"{path}: max |ossa - HF| / max |HF| = {err_hf}"
    assert config == model.config  # the twin reads the same hyper-parameters
    assert err_twin < twin_tol(model), f"{path}: max |ossa - twin| / max |HF| = {err_twin}"
    if fmt in ("safetensors", "F32"):
        assert twin_hf < HF_TOL[fmt]
    return model


def check_twin(path: str, ids: list[int], hf_logits: np.ndarray) -> Any:
    """ossa against the twin on the same stored weights (the twin rounding the inputs of the matrices the
    C++ kernels split into int8 pieces alike), to the twin bound over transformers' largest logit: for the
    rounded files of MoE models, whose rounded weights switch an expert now and then (so transformers' logits
    are not the oracle there). Returns the loaded ``core.Model``."""
    from ossa._native import core
    from ossa.reference import loader as ref_loader
    from ossa.reference import model as ref_model

    model = core.load_model(path)
    config, weights = ref_loader.load_weights(path)
    assert config == model.config
    twin = ref_model.forward(config, weights, ids, int8_matrices=model.int8_matrices)
    got = core.model_logits(model, ids)
    assert float(np.max(np.abs(got - twin))) / float(np.max(np.abs(hf_logits))) < twin_tol(model), path
    return model


def check_corrupt_sizes(src: str, tmp: Path, min_keys: int) -> None:
    """corrupt_sizes over GGUF file ``src`` with 0, 1, 3, 7, 2^20, 2^31-1, 2^32-1: at least ``min_keys``
    scalar size keys, each value refused with a ModelError or loaded and run, never a crash (in-process: a
    crash kills pytest), and some refused."""
    keys, outcomes = corrupt_sizes(src, tmp, (0, 1, 3, 7, 1 << 20, 2**31 - 1, 2**32 - 1))
    assert len(keys) >= min_keys and outcomes["error"] > 0, (keys, outcomes)


def check_config_refusals(src: str, tmp: Path, changes: Sequence[tuple[dict[str, Any], str]]) -> None:
    """Each (change, match): a copy of the folder ``src`` (under ``tmp``) with ``change`` merged into its
    config.json is refused by both loaders with an error matching ``match``."""
    from ossa._native import core
    from ossa.reference import loader as ref_loader

    cfg = json.loads((Path(src) / "config.json").read_text())
    for change, match in changes:
        bad = Path(tmp) / f"bad{len(list(Path(tmp).iterdir()))}"
        shutil.copytree(src, bad)
        (bad / "config.json").write_text(json.dumps({**cfg, **change}))
        with pytest.raises(core.ModelError, match=match):
            core.load_model(str(bad))
        with pytest.raises(ValueError, match=match):
            ref_loader.load_weights(str(bad))


def check_case(
    cases: dict[str, Any],
    name: str,
    fmt: str,
    tmp: Any,
    rounded_tol: dict[str, float],
    hf_exempt: tuple[tuple[str, str], ...] = (),
) -> Any:
    """The golden check of build_hf_cases case ``name`` as ``fmt``: check_golden for the exact formats;
    for the rounded ones (``rounded_tol``: an architecture's bound against transformers, where its
    random models amplify the rounding of their weights past HF_TOL) the twin on the same rounded
    weights to its usual tolerance, and transformers to that bound unless (name, fmt) is in
    ``hf_exempt``. Returns the loaded ``core.Model``."""
    path = case_file(cases, name, fmt, tmp)
    _, hf, ids = cases[name]
    if fmt not in rounded_tol:
        return check_golden(path, ids, hf, fmt)
    model, config, err_hf, err_twin, _ = golden(path, ids, hf)
    assert config == model.config  # the twin reads the same hyper-parameters
    assert err_twin < twin_tol(model), f"{path}: max |ossa - twin| / max |HF| = {err_twin}"
    if (name, fmt) not in hf_exempt:
        assert err_hf < rounded_tol[fmt], f"{path}: max |ossa - HF| / max |HF| = {err_hf}"
    return model


def check_chunked_prefill(path: str, ids: list[int], hf_logits: np.ndarray) -> None:
    """Chunks of 1, 5 and all tokens through the paged runner (blocks of 4, in reverse order): bitwise
    equal to one another, equal to HF, and to the twin's runner (chunks of 5)."""
    from ossa._native import core
    from ossa.reference import loader as ref_loader
    from ossa.reference.runner import ModelRunner as RefRunner

    model = core.load_model(path)
    n = len(ids)
    n_blocks = (n + 3) // 4
    whole = runner_logits(core.ModelRunner(model, n_blocks, 4, n), ids, n)
    for chunk in (1, 5):
        got = runner_logits(core.ModelRunner(model, n_blocks, 4, n), ids, chunk)
        np.testing.assert_array_equal(got, whole, err_msg=f"chunk {chunk}")
    scale = float(np.max(np.abs(hf_logits)))
    assert float(np.max(np.abs(whole - hf_logits))) / scale < 1e-5
    config, weights = ref_loader.load_weights(path)
    twin = runner_logits(RefRunner(config, weights, n_blocks, 4), ids, 5)
    assert float(np.max(np.abs(twin - whole))) / scale < twin_tol(model)


def check_file_refusals(
    src: str, tmp: Path, cases: Sequence[tuple[dict[str, Any], str]], save: Any = None
) -> None:
    """Each (tensors, match): a copy of the folder ``src`` (under ``tmp``) whose model.safetensors holds
    ``tensors`` (written by ``save``: safetensors.torch's save_file unless given) is refused by both
    loaders with an error matching ``match`` (a ModelError from ossa, never a crash)."""
    from ossa._native import core
    from ossa.reference import loader as ref_loader

    if save is None:
        from safetensors.torch import save_file as save
    for i, (tensors, match) in enumerate(cases):
        bad = Path(tmp) / f"bad-file{i}"
        shutil.copytree(src, bad)
        save(tensors, str(bad / "model.safetensors"), metadata={"format": "pt"})
        with pytest.raises(core.ModelError, match=match):
            core.load_model(str(bad))
        with pytest.raises(ValueError, match=match):
            ref_loader.load_weights(str(bad))


def check_chunked(model: Any, ids: list[int]) -> np.ndarray:
    """The paged runner's logits of ``ids`` prefilled whole, checked bitwise equal to chunks of 1 and 5
    tokens; returns them."""
    from ossa._native import core

    n = len(ids)
    whole = runner_logits(core.ModelRunner(model, (n + 3) // 4, 4, n), ids, n)
    for chunk in (1, 5):
        np.testing.assert_array_equal(
            runner_logits(core.ModelRunner(model, (n + 3) // 4, 4, n), ids, chunk), whole
        )
    return whole


def check_engine_gpt2(folder: str, default_model_path: str) -> None:
    """check_engine on ``folder`` given GPT-2's tokenizer.json (from the default model's vocabulary)."""
    from test_tokenizer import load_vocab

    shutil.copy(Path(load_vocab("gpt2", default_model_path).path) / "tokenizer.json", folder)
    check_engine(folder)


def check_engine(path: str) -> None:
    """A tiny GGUF file of the default model's vocabulary (and tokenizer) through LLM: batched = alone =
    the paged runner's greedy decode, prefix-cache hits the same, the Python twin engine the same tokens
    (and the same seeded forks), and preempted sequences (a cache of 10 blocks) recomputed to the same
    tokens."""
    from ossa import LLM, SamplingParams, models
    from ossa._native import core

    prompts = ["The capital of France is", "Once upon a time, in a land far away,", "1, 2, 3, 4,", "Hi"]
    greedy_sp = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    llm = LLM(path, kv_cache_memory_bytes=32 << 20, kv_cache_dtype="float32")
    assert llm.config.cache.enable_prefix_caching
    batched = [o.outputs[0].token_ids for o in llm.generate(prompts, greedy_sp)]
    assert batched == [llm.generate([p], greedy_sp)[0].outputs[0].token_ids for p in prompts]
    assert batched == [o.outputs[0].token_ids for o in llm.generate(prompts, greedy_sp)]  # (cached prefixes)
    ids = llm.generate([prompts[1]], greedy_sp)[0].prompt_token_ids
    assert list(batched[1]) == greedy(core.load_model(path), list(ids), 40)
    py = LLM(path, kv_cache_memory_bytes=32 << 20, kv_cache_dtype="float32", backend="python")
    assert [o.outputs[0].token_ids for o in py.generate(prompts, greedy_sp)] == batched
    # Seeded forks at temperature 1 on a random model's near-uniform distributions: a sampled token
    # depends on the logits' last bits, so the C++ engine runs the f32 kernels here (amx=False: the
    # twin's arithmetic; the repacked ones, AMX's bf16 or the int8 pieces, round otherwise).
    sampled = SamplingParams(max_tokens=12, temperature=1.0, n=3, seed=7)
    exact = LLM(path, kv_cache_memory_bytes=32 << 20, kv_cache_dtype="float32", amx=False)
    forks = [[c.token_ids for c in o.outputs] for o in exact.generate(prompts[:2], sampled)]
    assert forks == [[c.token_ids for c in o.outputs] for o in py.generate(prompts[:2], sampled)]
    del exact
    layers, heads, width = models.load_model(path).config.kv_geometry()
    block = 2 * layers * heads * width * 4 * 16  # (float32 K and V, 16 tokens)
    tight = LLM(path, kv_cache_dtype="float32", block_size=16, max_model_len=64, max_num_seqs=4,
                kv_cache_memory_bytes=10 * block)  # fmt: skip
    assert tight.config.cache.num_blocks == 10
    assert [o.outputs[0].token_ids for o in tight.generate(prompts, greedy_sp)] == batched
    assert tight.stats()["num_preemptions"] > 0
