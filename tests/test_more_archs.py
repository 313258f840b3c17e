"""Granite MoE, OLMo 2 / 3, EXAONE 4.0, ERNIE 4.5, Seed-OSS and Arcee (AFM) against Hugging Face
transformers (torch CPU, float32) and the NumPy twin, on tiny random models built by transformers: from
safetensors folders (the Hub's names) and from GGUF files laid out as llama.cpp's converter writes them.
Each runs in the Llama forward pass with a few switches (docs/models.md has a section per architecture):

- granitemoe: Granite's four multipliers around experts routed by a softmax over the top-k logits,
  read in place from input_linear (gate rows, then up rows) / output_linear; the experts' sum scaled
  by residual_multiplier.
- olmo2 / olmo3: no norm before the sublayers, an RMSNorm on each sublayer's output, q / k
  RMS-normalised over all heads at once; OLMo 3 adds a window on all but every 4th layer and RoPE
  per layer type (YaRN on the full layers, the sliding layers' own unscaled table). llama.cpp writes
  OLMo 3 as olmo2 with a window (one RoPE table).
- exaone4: the same norms with per-head q / k norms; the 32B's window on 3 of 4 layers, its global
  layers without RoPE.
- ernie4_5: RoPE on interleaved pairs as the rows are stored; head_dim 128 unless set.
- exaone: EXAONE 3 / 3.5 as released: GPT-2-style tensor names and its own config keys, read as Llama's.
- internlm3: read as Llama (head_dim 128 unless set). hunyuan_v1_dense: q / k RMSNorm after RoPE,
  NTK-alpha RoPE (a fixed base: theta * alpha^(d / (d - 2))).
- phi (Phi-1 / 1.5 / 2): attention and a GELU MLP in parallel from one LayerNorm with bias, biases on
  every projection and the output, partial RoPE.
- stablelm: LayerNorm with bias, partial RoPE, optional q / k / v biases, per-head q / k LayerNorms and
  the parallel residual.
- starcoder2: LayerNorm with bias, a GELU (tanh) MLP of two matrices (c_fc / c_proj), biases on
  every projection where use_bias, a window on every layer where configured.
- arcee: relu^2 MLPs without a gate (Nemotron-H's feed-forward), otherwise Llama.
- hunyuan_v1_moe (Hunyuan-A13B): Hunyuan's attention, experts routed by a softmax over all, top-k
  renormalised, one ungated shared MLP beside them (router gate.wg, shared_mlp).
- nemotron (Nemotron-4 / Minitron / Nemotron-Mini): LayerNorm1P (weights w applied as 1 + w; llama.cpp's
  converter stores 1 + w) with bias, relu^2 MLPs without a gate, partial NeoX RoPE (half by default),
  optional attention biases.
- gpt_neox (Pythia, GPT-NeoX-20B): LayerNorms with bias, a fused query_key_value (per head [q | k | v]),
  partial NeoX RoPE, an exact-GELU MLP with biases, the parallel residual with two norms
  (x + attn(ln1 x) + mlp(ln2 x)) or the sequential one.
- falcon (Falcon 7B / 40B / 180B): GPT-NeoX's block with Falcon's layouts of the fused query_key_value
  (7B: multi-query, [q | k | v]; 40B / 180B: per KV group, two LayerNorms), no biases by default, full RoPE.
- dots1 (dots.llm1): Qwen3's attention (per-head q / k norms) and DeepSeek V3's experts (sigmoid scores
  plus a selection bias, groups, renormalised where norm_topk_prob, scaled, shared experts, leading dense
  layers); a window from max_window_layers on where configured.
- phimoe (Phi-3.5-MoE): Phi-3's attention with LayerNorms and biases (lm_head's too) and 16 experts
  routed by sparsemixer (each of its two picks weighted by the softmax over the logits within 2 x
  router_jitter_noise of it), LongRoPE with short_mscale as the factor on cos / sin.
- apertus (Apertus 8B / 70B): Llama's attention with per-head q / k RMSNorms and an xIELU MLP (up, down, no
  gate) whose four parameters are each layer's own (mlp.act_fn.*; GGUF: xielu.* keys).
- exaone_moe (K-EXAONE): EXAONE 4's attention (per-head q / k norms, the window on 3 of 4 layers, its global
  layers without RoPE) in pre-norm layers, DeepSeek V3's experts (num_experts, num_shared_experts, one dense
  layer, scaled by 2.5 by default).
- gptj (GPT-J 6B): Phi-2's parallel block (one LayerNorm with bias, a GELU MLP with biases, the lm_head bias)
  with no attention biases and RoPE on interleaved pairs (rotate_every_two) of the first rotary_dim
  dimensions; GPTJConfig's own keys (n_embd, n_layer, n_head, n_inner, activation_function).
- codegen (CodeGen 350M-16B, folders only): GPT-J's block with qkv_proj in four groups of [q | v | k]
  (regrouped at load into [q | k | v]).
- minicpm3 (MiniCPM3-4B): DeepSeek V2's latent attention with rotate_half RoPE (LongRoPE in the release)
  and Granite's three multipliers from scale_emb, scale_depth and dim_model_base (llama.cpp's files: the
  release's, which its graph hard-codes; kv_b fused).
- olmo (OLMo 1 / 1.7): LayerNorms without weights or biases, q / k / v clipped (clip_qkv) where set.
- seed_oss: biases on q / k / v (attention_bias, on by default) and on the output (attention_out_bias);
  head_dim 128 unless set; llama.cpp's files name the pre-FFN norm post_attention_norm.

Every case: logits against transformers (1e-5 from the folder and GGUF F32, HF_TOL for rounded files)
and against the twin, chunked prefill bitwise equal to one pass and to the twin's runner, 30 greedy
tokens equal to transformers' generate; batch invariance on some. Then each architecture's own checks.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from tiny_models import (
    N_TOKENS,
    TWIN_TOL,
    build_hf_cases,
    case_file,
    check_chunked_prefill,
    check_corrupt_sizes,
    check_golden,
    check_twin,
    gguf_without,
    greedy,
    hf_greedy,
)

from ossa import models
from ossa._native import core
from ossa.reference import arch_config
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model

ALL = ["safetensors", "F32", "F16", "Q8_0"]
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "attention_factor": 1.2}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}  # fmt: skip
# name -> (transformers config of the tiny model, the formats it is checked from)
CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    # granite-3.1-1b-a400m's multipliers (12, 0.22, 1/64, 6), tied, GQA 2, 5 experts of 40 rows, top 2.
    "granitemoe": (dict(
        arch="granitemoe", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=40,
        vocab_size=150, tie=True, rope_theta=1000.0, num_local_experts=5, num_experts_per_tok=2,
        embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=1 / 64, logits_scaling=6.0,
    ), ALL),
    # GraniteMoeShared: Granite MoE with a shared MLP (input_linear [gate | up], output_linear) beside the
    # experts, the residual multiplier over both.
    "granitemoeshared": (dict(
        arch="granitemoeshared", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=32, vocab_size=150, num_local_experts=4, num_experts_per_tok=2,
        shared_intermediate_size=48,
        embedding_multiplier=6.0, residual_multiplier=0.4, attention_multiplier=0.2, logits_scaling=4.0,
    ), ALL),
    # Odd values, MHA, untied, 4 experts of 24 rows, top 3.
    "granitemoe-untied": (dict(
        arch="granitemoe", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=24,
        vocab_size=130, num_local_experts=4, num_experts_per_tok=3, embedding_multiplier=3.0,
        residual_multiplier=0.5, attention_multiplier=0.3, logits_scaling=2.5,
    ), ALL),
    # OLMo-2-1B-like: GQA 2, untied, a large RoPE base.
    "olmo2": (dict(
        arch="olmo2", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=96,
        vocab_size=150, rope_theta=500000.0,
    ), ALL),
    # MHA, head_dim 24 (the q / k norms are heads x head_dim wide, not hidden), tied.
    "olmo2-mha": (dict(
        arch="olmo2", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, head_dim=24,
        intermediate_size=80, vocab_size=130, tie=True,
    ), ALL),
    # OLMo 3: window 6 on layers 0-2 and 4, YaRN on the full layer 3 only, the sliding layers at another
    # base: from its folder only (a GGUF file holds one RoPE table).
    "olmo3": (dict(
        arch="olmo3", hidden_size=64, num_layers=5, num_heads=4, num_kv_heads=2, intermediate_size=96,
        vocab_size=150, sliding_window=6, rope_theta=500000.0, rope_local_base_freq=20000.0,
        rope_scaling=YARN, max_position_embeddings=128,
    ), ["safetensors", "F32", "Q8_0"]),
    # One RoPE table, the window on layers 0 and 2 (layer_types): GGUF too.
    "olmo3-plain": (dict(
        arch="olmo3", hidden_size=48, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=80,
        vocab_size=130, sliding_window=5, tie=True,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    ), ["safetensors", "F32", "Q8_0"]),
    # EXAONE-4.0-1.2B's layout: global attention everywhere, tied, GQA 2.
    "exaone4": (dict(
        arch="exaone4", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=96,
        vocab_size=150, tie=True, rope_theta=1000000.0, sliding_window=None,
        layer_types=["full_attention"] * 3,
    ), ALL),
    # The 32B hybrid: window 6 on 3 of every 4 layers, the global layer 3 without RoPE, llama3 scaling,
    # head_dim 24. (Its F16 file is 1.6e-3 off transformers, over HF_TOL's 1e-3: rounding, measured.)
    "exaone4-hybrid": (dict(
        arch="exaone4", hidden_size=48, num_layers=5, num_heads=4, num_kv_heads=2, head_dim=24,
        intermediate_size=80, vocab_size=130, sliding_window=6, sliding_window_pattern=4, rope_scaling=LLAMA3,
    ), ["safetensors", "F32", "Q8_0"]),
    # ERNIE-4.5-0.3B's layout: tied, GQA 2, head_dim 16 set in the config.
    "ernie4_5": (dict(
        arch="ernie4_5", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=96, vocab_size=150, tie=True, rope_theta=500000.0,
    ), ALL),
    # Untied, MHA, head_dim left to Ernie4_5Config's default (128, not hidden / heads = 12).
    "ernie4_5-wide-heads": (dict(
        arch="ernie4_5", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=80,
        vocab_size=130,
    ), ALL),
    # ERNIE-4.5-21B-A3B's layout: layer 0 dense, then MoE layers of 6 experts of 24 rows, top 2, chosen by
    # softmax probability + a per-expert bias, 2 shared experts (48 rows) added ungated; tied.
    "ernie4_5_moe": (dict(
        arch="ernie4_5_moe", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=96, vocab_size=150, tie=True, moe_num_experts=6, moe_k=2, moe_intermediate_size=24,
        moe_num_shared_experts=2, moe_layer_start_index=1,
    ), ALL),
    # Every other layer sparse (interval 2), no shared experts, untied.
    "ernie4_5_moe-interleaved": (dict(
        arch="ernie4_5_moe", hidden_size=48, num_layers=4, num_heads=4, num_kv_heads=4, head_dim=12,
        intermediate_size=80, vocab_size=130, moe_num_experts=4, moe_k=3, moe_intermediate_size=16,
        moe_num_shared_experts=0, moe_layer_start_index=0, moe_layer_interval=2,
    ), ALL),
    # Seed-OSS-36B's layout: q / k / v biases (its default), none on the output, head_dim 16 set, untied,
    # a RoPE base of 1e7. (Its F16 file is 1.06e-3 off transformers, over HF_TOL's 1e-3: rounding, measured.)
    "seed_oss": (dict(
        arch="seed_oss", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=96, vocab_size=150, rope_theta=1e7,
    ), ["safetensors", "F32", "Q8_0"]),
    # An output bias and no q / k / v ones, head_dim left to SeedOssConfig's default (128, not hidden /
    # heads = 12), tied.
    "seed_oss-obias": (dict(
        arch="seed_oss", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=80,
        vocab_size=130, attention_bias=False, attention_out_bias=True, tie=True,
    ), ALL),
    # AFM-4.5B's layout (Arcee): relu^2 MLPs without a gate, GQA 2, untied, YaRN.
    "arcee": (dict(
        arch="arcee", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=160,
        vocab_size=150, rope_scaling=YARN, max_position_embeddings=128,
    ), ALL),
    # MHA, tied, odd sizes.
    "arcee-tied": (dict(
        arch="arcee", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=72,
        vocab_size=130, tie=True,
    ), ALL),
    # EXAONE-3.5-2.4B's layout: GPT-2-style tensor names (transformer.h.N.attn.attention.q_proj, ...), its
    # config's own keys (num_layers, layer_norm_epsilon, activation_function), llama3 RoPE scaling, tied.
    "exaone": (dict(
        arch="exaone", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=96,
        vocab_size=150, tie=True, rope_theta=1e6, rope_scaling=LLAMA3,
    ), ALL),
    # InternLM3-8B's layout (read as Llama; head_dim 128 unless set: its config's default), GQA 2, untied.
    "internlm3": (dict(
        arch="internlm3", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=80,
        vocab_size=130, rope_theta=50000000.0,
    ), ALL),
    # Hunyuan-7B's layout: q / k RMSNorm after RoPE, NTK-alpha RoPE (the base times alpha^(d / (d - 2))),
    # GQA 2, tied.
    "hunyuan": (dict(
        arch="hunyuan_v1_dense", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=96, vocab_size=150, tie=True,
        rope_scaling={"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0},
    ), ALL),
    # Hunyuan-A13B's layout: 5 experts of 24 rows, top 2, renormalised, a shared MLP of intermediate_size,
    # q / k norms after RoPE, NTK-alpha RoPE, GQA 2, untied; per-layer lists as the Hub's configs hold.
    "hunyuan_moe": (dict(
        arch="hunyuan_v1_moe", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=24, vocab_size=150, num_experts=5, moe_topk=2,
        rope_scaling={"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0},
    ), ALL),
    # Untied, MHA, plain RoPE.
    "hunyuan-plain": (dict(
        arch="hunyuan_v1_dense", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, head_dim=12,
        intermediate_size=80, vocab_size=130,
    ), ALL),
    # StarCoder2-3B's layout: LayerNorm with bias, a GELU MLP of two matrices, biases on every projection
    # (use_bias), a window, GQA 2, tied.
    "starcoder2": (dict(
        arch="starcoder2", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=96,
        vocab_size=150, tie=True, sliding_window=6, rope_theta=100000.0,
    ), ALL),
    # No biases (use_bias false), MHA, untied, no window.
    "starcoder2-nobias": (dict(
        arch="starcoder2", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=80,
        vocab_size=130, use_bias=False,
    ), ALL),
    # StableLM-2-1.6B's layout: LayerNorm with bias, a quarter of each head rotated, q / k / v biases, GQA 2.
    "stablelm": (dict(
        arch="stablelm", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=96,
        vocab_size=150, use_qkv_bias=True,
    ), ALL),
    # StableLM-2-12B's: per-head q / k LayerNorms, the parallel residual (one norm for both sublayers), half
    # of each head rotated, no biases, tied.
    "stablelm-parallel": (dict(
        arch="stablelm", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=80,
        vocab_size=130, qk_layernorm=True, use_parallel_residual=True, partial_rotary_factor=0.5, tie=True,
    ), ALL),
    # Phi-2's layout: attention and a GELU MLP in parallel from one LayerNorm with bias, biases everywhere
    # (lm_head too), half of each head rotated, MHA.
    "phi": (dict(
        arch="phi", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96,
        vocab_size=150,
    ), ALL),
    # GQA 2, 40% rotated (Phi-1.5: 0.5, Phi-2: 0.4 of 80), tied.
    "phi-gqa": (dict(
        arch="phi", hidden_size=80, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=72,
        vocab_size=130, partial_rotary_factor=0.4, tie=True,
    ), ALL),
    # Minitron-4B's layout: LayerNorm1P with bias, relu^2 MLP, half of each head rotated, GQA 2, untied.
    "nemotron": (dict(
        arch="nemotron", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=160,
        vocab_size=150, rope_theta=10000.0,
    ), ALL),
    # Attention biases (q / k / v / o), MHA, a quarter rotated, tied.
    "nemotron-bias": (dict(
        arch="nemotron", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=72,
        vocab_size=130, attention_bias=True, partial_rotary_factor=0.25, tie=True,
    ), ALL),
    # Pythia's layout: the parallel residual with two LayerNorms, a quarter of each head rotated, exact GELU,
    # biases everywhere, untied.
    "gpt_neox": (dict(
        arch="gpt_neox", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96,
        vocab_size=150,
    ), ALL),
    # The sequential residual, no attention biases, half rotated, tied.
    "gpt_neox-seq": (dict(
        arch="gpt_neox", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=80,
        vocab_size=130, use_parallel_residual=False, attention_bias=False, partial_rotary_factor=0.5,
        tie=True,
    ), ALL),
    # GPT-NeoX-20B's tanh GELU (gelu_fast): from its folder (a GGUF file does not say which GELU; ossa reads
    # the exact one there, Pythia's).
    "gpt_neox-tanh": (dict(
        arch="gpt_neox", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=80,
        vocab_size=130, hidden_act="gelu_fast", partial_rotary_factor=0.5,
    ), ["safetensors"]),
    # Falcon-7B's layout: multi-query attention (one K/V head), one LayerNorm before the parallel block, no
    # biases, tied.
    "falcon": (dict(
        arch="falcon", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96,
        vocab_size=150, tie=True,
    ), ALL),
    # Falcon-40B / 180B's: the new decoder architecture, 2 KV groups of 2 queries, ln_attn and ln_mlp, untied.
    "falcon-40b": (dict(
        arch="falcon", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=80,
        vocab_size=130, new_decoder_architecture=True, tie=False,
    ), ALL),
    # The sequential block with biases, MHA per-head q / k / v (no multi_query), tanh GELU: from its folder
    # (llama.cpp's falcon files are always parallel).
    "falcon-seq": (dict(
        arch="falcon", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=80,
        vocab_size=130, multi_query=False, parallel_attn=False, bias=True, activation="gelu_new",
    ), ["safetensors"]),
    # dots.llm1's layout: the first layer dense, then 6 experts of 24 rows, top 2, renormalised and scaled
    # by 2.5, one shared expert, GQA 2, untied.
    "dots1": (dict(
        arch="dots1", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=96, vocab_size=150, n_routed_experts=6, num_experts_per_tok=2,
        moe_intermediate_size=24, n_shared_experts=1, first_k_dense_replace=1, norm_topk_prob=True,
        routed_scaling_factor=2.5,
    ), ALL),
    # Two groups of 4 experts, the best group only, not renormalised (Dots1Config's default), no dense
    # layer, a window of 6 from layer 1 on (max_window_layers), tied: from its folder (GGUF has no
    # per-layer window for dots1).
    "dots1-groups": (dict(
        arch="dots1", hidden_size=48, num_layers=3, num_heads=4, num_kv_heads=4, head_dim=12,
        intermediate_size=80, vocab_size=130, n_routed_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=16, n_shared_experts=2, n_group=2, topk_group=1, sliding_window=6,
        max_window_layers=1, tie=True,
    ), ["safetensors"]),
    # Phi-3.5-MoE's layout: LayerNorms with bias, q / k / v / o and lm_head biases, 6 experts, sparsemixer
    # at the release's 0.01 (the value GGUF files imply), GQA 2.
    "phimoe": (dict(
        arch="phimoe", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=48,
        vocab_size=150, num_local_experts=6, attention_bias=True, lm_head_bias=True,
    ), ALL),
    # A cut of 0.3 (router_jitter_noise 0.15: wide enough for the tiny logits to leave several experts in
    # each softmax), tied: from its folder (GGUF has no key for it).
    "phimoe-wide": (dict(
        arch="phimoe", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=40,
        vocab_size=130, num_local_experts=8, router_jitter_noise=0.15, tie=True,
    ), ["safetensors"]),
    # The release's LongRoPE (short / long factors, short_mscale = long_mscale), the default 0.01 cut, no
    # biases: from its folder (llama.cpp's converter writes LongRoPE's default factor, not the mscale).
    "phimoe-longrope": (dict(
        arch="phimoe", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=40,
        vocab_size=130, num_local_experts=4, max_position_embeddings=256,
        rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
                      "long_factor": [1.5, 2.0, 3.0, 4.0, 6.0, 8.0], "short_mscale": 1.243,
                      "long_mscale": 1.243, "original_max_position_embeddings": 64},
    ), ["safetensors"]),
    # Apertus-8B's layout: q / k norms, an xIELU MLP with per-layer parameters, llama3 RoPE, GQA 2.
    "apertus": (dict(
        arch="apertus", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=160,
        vocab_size=150, rope_theta=12000000.0, rope_scaling=LLAMA3,
    ), ALL),
    # MHA, tied, plain RoPE.
    "apertus-tied": (dict(
        arch="apertus", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=72,
        vocab_size=130, tie=True,
    ), ALL),
    # K-EXAONE's layout: a window of 6 on 3 of every 4 layers (the global ones without RoPE), one dense layer,
    # then 6 experts of 24 rows, top 2, renormalised, scaled by 2.5 (its defaults), one shared expert, GQA 2.
    "exaone_moe": (dict(
        arch="exaone_moe", hidden_size=64, num_layers=5, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=96, vocab_size=150, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=24,
        num_shared_experts=1, sliding_window=6, sliding_window_pattern=4,
    ), ALL),
    # The window on the layers of layer_types (layer 1 global, without RoPE), two groups, two shared experts,
    # not renormalised, tied: from its folder (llama.cpp's converter writes no group count for exaone-moe).
    "exaone_moe-groups": (dict(
        arch="exaone_moe", hidden_size=48, num_layers=3, num_heads=4, num_kv_heads=4, head_dim=12,
        intermediate_size=80, vocab_size=130, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
        num_shared_experts=2, n_group=2, topk_group=1, norm_topk_prob=False, routed_scaling_factor=1.5,
        sliding_window=5, layer_types=["sliding_attention", "full_attention", "sliding_attention"], tie=True,
    ), ["safetensors"]),
    # GPT-J-6B's layout: a quarter of each head rotated on interleaved pairs, the parallel block, untied.
    "gptj": (dict(
        arch="gptj", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96,
        vocab_size=150, rotary_dim=4,
    ), ALL),
    # Every dimension rotated (rotary_dim = head_dim), exact GELU, n_inner null (4 x hidden): from its folder
    # (a GGUF file does not say which GELU; ossa reads GPT-J's tanh one there, as llama.cpp).
    "gptj-full": (dict(
        arch="gptj", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=None,
        vocab_size=130, rotary_dim=12, activation_function="gelu",
    ), ["safetensors"]),
    # Ministral 8B (MinistralForCausalLM): Mistral with the window on the layers layer_types calls sliding
    # (here the middle one of three; 5 positions over the 40 tokens): folders only.
    "ministral": (dict(
        arch="ministral", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=96,
        vocab_size=150, sliding_window=5,
        layer_types=["full_attention", "sliding_attention", "full_attention"],
    ), ["safetensors"]),
    # IQuest-Coder (IQuestCoderConfig, run by transformers as Llama): head_dim 128 unless set (here unset:
    # heads of 128 over a hidden size of 64); folders.
    "iquestcoder": (dict(
        arch="iquestcoder", hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=96,
        vocab_size=150,
    ), ["safetensors"]),
    # Code World Model (CwmForCausalLM): Llama's layers with the window (5 here) on 3 of every 4 layers by
    # default (layer 0 full), llama3 RoPE: folders.
    "cwm": (dict(
        arch="cwm", hidden_size=64, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=96, vocab_size=150, sliding_window=5,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64},
    ), ["safetensors"]),
    # VaultGemma (google/vaultgemma-1b): Gemma 2's layers (soft-capped scores and logits, a window on every
    # other layer, query_pre_attn_scalar) without the sublayers' output norms: run as gemma2 with
    # no_post_norms; folders only (llama.cpp has no vaultgemma files). And with its defaults' window off.
    "vaultgemma": (dict(
        arch="vaultgemma", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=96, vocab_size=150, sliding_window=5, query_pre_attn_scalar=24,
    ), ["safetensors"]),
    "vaultgemma-tied": (dict(
        arch="vaultgemma", hidden_size=48, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=24,
        intermediate_size=80, vocab_size=130, tie=True, final_logit_softcapping=None,
        attn_logit_softcapping=None,
    ), ["safetensors"]),
    # FlexOlmo (allenai FlexOlmo-7x7B): OLMoE's layers (experts, q / k normalised over the whole projection)
    # with OLMo 2's norms after each sublayer alone: run as olmoe with no_pre_norms; folders only.
    "flex_olmo": (dict(
        arch="flex_olmo", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=48,
        vocab_size=150, num_experts=4, num_experts_per_tok=2, pad_token_id=1, bos_token_id=None,
        eos_token_id=2,
    ), ["safetensors"]),
    # nanochat (karpathy/nanochat-d32's NanoChatForCausalLM): Llama's layers with weightless RMSNorms (the
    # embeddings normalised too), q / k normalised after RoPE, a RoPE turning the other way, relu^2 MLPs
    # (fc1 / fc2), logits soft-capped at 15: run as llama; folders only. And without the soft-capping, GQA.
    "nanochat": (dict(
        arch="nanochat", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96,
        vocab_size=150,
    ), ["safetensors"]),
    "nanochat-gqa": (dict(
        arch="nanochat", hidden_size=96, num_layers=2, num_heads=6, num_kv_heads=2, intermediate_size=128,
        vocab_size=130, final_logit_softcapping=None,
    ), ["safetensors"]),
    # Jais 2 (inceptionai Jais-2-8B): Llama's attention with q / k / v / o biases, LayerNorms with bias,
    # relu^2 MLPs (up, down) with biases: from folders and llama.cpp's jais2 files (MHA, as llama.cpp's
    # jais2 requires). And without biases, from its folder.
    "jais2": (dict(
        arch="jais2", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96,
        vocab_size=150,
    ), ALL),
    "jais2-nobias": (dict(
        arch="jais2", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=80,
        vocab_size=130, attention_bias=False, mlp_bias=False, tie=True,
    ), ["safetensors"]),
    # CodeGen (Salesforce codegen-350M ... 16B): GPT-J's block with qkv_proj in four groups of [q | v | k]
    # (regrouped at load), rotary_dim of each head, lm_head with a bias: folders only (llama.cpp has no
    # codegen files). 8 heads over the 4 groups; and 6 heads (a group's quarter not whole heads), n_inner set.
    "codegen": (dict(
        arch="codegen", hidden_size=64, num_layers=3, num_heads=8, num_kv_heads=8, intermediate_size=None,
        vocab_size=150, rotary_dim=4,
    ), ["safetensors"]),
    "codegen-6heads": (dict(
        arch="codegen", hidden_size=48, num_layers=2, num_heads=6, num_kv_heads=6, intermediate_size=100,
        vocab_size=130, rotary_dim=6,
    ), ["safetensors"]),
    # MiniCPM3-4B's layout: q / kv low-rank projections, a latent of 32, 8 rotated and 16 plain dimensions per
    # head, values of 24, the multipliers (12, 1.4 / sqrt(layers), hidden / 16), tied: from its folder (a GGUF
    # file cannot hold other multipliers or value sizes).
    "minicpm3": (dict(
        arch="minicpm3", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96,
        vocab_size=150, tie=True, q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
        v_head_dim=24, dim_model_base=16,
    ), ["safetensors"]),
    # The release's LongRoPE (short and long factors over the 4 rotated pairs, original context 64 of 256),
    # no q low-rank projection, untied.
    "minicpm3-longrope": (dict(
        arch="minicpm3", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=80,
        vocab_size=130, q_lora_rank=None, kv_lora_rank=24, qk_nope_head_dim=12, qk_rope_head_dim=8,
        v_head_dim=12, max_position_embeddings=256, scale_emb=4, scale_depth=2.0,
        rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.2, 1.5, 2.0],
                      "long_factor": [1.5, 2.0, 3.0, 4.0], "original_max_position_embeddings": 64},
    ), ["safetensors"]),
    # The release's multipliers (12, 1.4, 256: llama.cpp's graph hard-codes them) and value heads of hidden /
    # heads (its converter writes no value length), LongRoPE over a context equal to the original one (as
    # released): from folders and from llama.cpp's minicpm3 files (kv_b fused, the rope factor tensors).
    "minicpm3-release": (dict(
        arch="minicpm3", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96,
        vocab_size=150, q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
        v_head_dim=16, max_position_embeddings=512,
        rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.2, 1.5, 2.0],
                      "long_factor": [1.5, 2.0, 3.0, 4.0], "original_max_position_embeddings": 512},
    ), ALL),
    # OLMo-1B's layout: weightless LayerNorms, MHA, tied (weight tying).
    "olmo": (dict(
        arch="olmo", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96,
        vocab_size=150, tie=True,
    ), ALL),
    # OLMo-7B-0424's: q / k / v clipped at 0.6 (a bound the random activations cross), GQA 2, untied.
    "olmo-clip": (dict(
        arch="olmo", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=80,
        vocab_size=130, clip_qkv=0.6,
    ), ALL),
    # Untied, MHA, ExaoneConfig's default RoPE base (500000: the config leaves it out).
    "exaone-untied": (dict(
        arch="exaone", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=80,
        vocab_size=130, rope_theta=500000.0,
    ), ALL),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    out = build_hf_cases(
        tmp_path_factory.mktemp("archs"), {n: kw for n, (kw, _) in CASES.items()}, seed=110, n_tokens=N_TOKENS
    )
    for name in ("ernie4_5-wide-heads", "seed_oss-obias", "internlm3"):  # as released: no head_dim
        cfg = Path(out[name][0]) / "config.json"
        c = json.loads(cfg.read_text())
        assert c.pop("head_dim") == 128
        cfg.write_text(json.dumps(c))
    for name in ("exaone", "exaone-untied"):  # as released: ExaoneConfig's own keys, no rope_theta
        cfg = Path(out[name][0]) / "config.json"
        c = json.loads(cfg.read_text())
        c.update(num_layers=c.pop("num_hidden_layers"), layer_norm_epsilon=c.pop("rms_norm_eps"),
                 activation_function=c.pop("hidden_act"), architectures=["ExaoneForCausalLM"])  # fmt: skip
        if name == "exaone-untied":
            assert c["rope_parameters"].pop("rope_theta") == 500000.0
        cfg.write_text(json.dumps(c))
    return out


def check_config(name: str, fmt: str, c: dict[str, Any]) -> None:
    """The hyper-parameters each architecture adds, as the loader read them."""
    case = CASES[name][0]
    arch = case["arch"]
    assert c["arch"] == {
        "olmo3": "olmo2" if fmt != "safetensors" else "olmo3",
        "ernie4_5_moe": "ernie4_5-moe",
        "internlm3": "llama",
        "granitemoeshared": "granitemoe",
        "hunyuan_v1_dense": "hunyuan-dense",
        "hunyuan_v1_moe": "hunyuan-moe",
        "phi": "phi2",
        "codegen": "gptj",
        "ministral": "mistral",
        "iquestcoder": "llama",
        "cwm": "llama",
        "vaultgemma": "gemma2",
        "nanochat": "llama",
        "flex_olmo": "olmoe",
        "gpt_neox": "gptneox",
        "falcon": "falcon",
        "dots1": "dots1",
        "phimoe": "phimoe",
        "apertus": "apertus",
        "exaone_moe": "exaone-moe",
    }.get(arch, arch)
    assert c["tied_embeddings"] == case.get("tie", False)
    if arch == "ministral":
        assert c["sliding_window"] == 5 and c["layer_sliding"] == [False, True, False]
        return
    if arch == "jais2":
        bias = case.get("attention_bias", True)
        assert (
            c["layer_norm"]
            and c["norm_bias"]
            and c["ffn_relu2"]
            and c["ffn_bias"] == case.get("mlp_bias", True)
        )
        assert c["qkv_bias"] == c["o_bias"] == bias
        return
    if arch == "iquestcoder":
        assert c["head_dim"] == 128 and c["sliding_window"] == 0
        return
    if arch == "flex_olmo":
        assert c["no_pre_norms"] and c["qk_norm"] and c["moe"]["n_expert"] == 4
        return
    if arch == "nanochat":
        assert c["ffn_relu2"] and c["embd_norm"] and c["qk_norm"] and c["qk_norm_after_rope"]
        assert c["final_softcap"] == (0.0 if "final_logit_softcapping" in case else 15.0)
        return
    if arch == "vaultgemma":
        assert c["no_post_norms"] and c["attn_scale"] == pytest.approx(
            case.get("query_pre_attn_scalar", 256) ** -0.5
        )
        capped = case.get("final_logit_softcapping", 30.0) is not None
        assert (c["final_softcap"], c["attn_softcap"]) == ((30.0, 50.0) if capped else (0.0, 0.0))
        return
    if arch == "cwm":
        assert c["sliding_window"] == 5 and c["layer_sliding"] == [False, True, True, True]
        assert c["rope_scaling"]["type"] == "llama3"
        return
    if arch == "granitemoeshared":
        assert c["moe"]["n_ff_shared"] == case["shared_intermediate_size"] and c["moe"]["softmax_topk"]
        return
    if arch == "granitemoe":
        assert (c["embd_scale"], c["residual_scale"], c["attn_scale"], c["logit_scale"]) == pytest.approx(
            (case["embedding_multiplier"], case["residual_multiplier"], case["attention_multiplier"],
             case["logits_scaling"])
        )  # fmt: skip
        moe = c["moe"]
        assert (moe["n_expert"], moe["n_expert_used"], moe["n_ff_expert"], moe["softmax_topk"]) == (
            case["num_local_experts"],
            case["num_experts_per_tok"],
            case["intermediate_size"],
            True,
        )
        assert moe["layers"] == list(range(case["num_layers"]))
        return
    if arch == "ernie4_5_moe":
        moe = c["moe"]
        assert (moe["n_expert"], moe["n_expert_used"], moe["n_ff_expert"], moe["selection_bias"]) == (
            case["moe_num_experts"],
            case["moe_k"],
            case["moe_intermediate_size"],
            True,
        )
        assert moe["n_ff_shared"] == case["moe_num_shared_experts"] * case["moe_intermediate_size"]
        step, start = case.get("moe_layer_interval", 1), case["moe_layer_start_index"]
        assert moe["layers"] == [i for i in range(case["num_layers"]) if (i + 1) % step == 0 and i >= start]
        assert c["rope_style"] == "interleaved"
        return
    if arch == "phi":
        assert c["arch"] == "phi2" and c["layer_norm"] and c["norm_bias"] and c["parallel_block"]
        assert c["ffn_gelu"] and c["ffn_bias"] and c["qkv_bias"] and c["o_bias"]
        assert c["rope_dim"] == int(case.get("partial_rotary_factor", 0.5) * c["head_dim"])
        return
    if arch == "stablelm":
        parallel = case.get("use_parallel_residual", False)
        assert c["layer_norm"] and c["norm_bias"] and c["parallel_block"] == parallel
        assert c["qk_norm_heads"] == case.get("qk_layernorm", False)
        assert c["qkv_bias"] == case.get("use_qkv_bias", False)
        assert c["rope_dim"] == int(case.get("partial_rotary_factor", 0.25) * c["head_dim"])
        return
    if arch == "starcoder2":
        assert c["layer_norm"] and c["norm_bias"] and c["ffn_gelu"]
        bias = case.get("use_bias", True)
        assert (c["qkv_bias"], c["o_bias"], c["ffn_bias"]) == (bias, bias, bias)
        assert c["sliding_window"] == case.get("sliding_window", 0)
        return
    if arch == "nemotron":
        assert c["layer_norm"] and c["norm_bias"] and c["ffn_relu2"] and c["rope_style"] == "neox"
        bias = case.get("attention_bias", False)
        assert (c["qkv_bias"], c["o_bias"]) == (bias, bias)
        assert c["rope_dim"] == int(case.get("partial_rotary_factor", 0.5) * c["head_dim"])
        return
    if arch == "gpt_neox":
        parallel, bias = case.get("use_parallel_residual", True), case.get("attention_bias", True)
        assert c["layer_norm"] and c["norm_bias"] and c["ffn_gelu"] and c["ffn_bias"]
        assert c["parallel_block"] == parallel and c["parallel_norms"] == parallel
        assert (c["qkv_bias"], c["o_bias"]) == (bias, bias) and c["rope_style"] == "neox"
        assert c["gelu_erf"] == (case.get("hidden_act", "gelu") == "gelu" or fmt != "safetensors")
        assert c["rope_dim"] == int(case.get("partial_rotary_factor", 0.25) * c["head_dim"])
        return
    if arch == "minicpm3":
        n = case["num_layers"]
        assert c["rope_style"] == "neox" and c["mla"]["kv_lora_rank"] == case["kv_lora_rank"]
        assert c["embd_scale"] == pytest.approx(case.get("scale_emb", 12))
        assert c["residual_scale"] == pytest.approx(case.get("scale_depth", 1.4) / n**0.5)
        assert c["logit_scale"] == pytest.approx(case["hidden_size"] / case.get("dim_model_base", 256))
        assert (c["rope_scaling"]["type"] == "longrope") == ("rope_scaling" in case)
        return
    if arch in ("gptj", "codegen"):
        assert c["layer_norm"] and c["norm_bias"] and c["ffn_gelu"] and c["ffn_bias"] and c["parallel_block"]
        assert not c["qkv_bias"] and not c["o_bias"] and c["rope_style"] == "interleaved"
        assert c["rope_dim"] == (0 if case["rotary_dim"] == c["head_dim"] else case["rotary_dim"])
        assert c["gelu_erf"] == (case.get("activation_function") == "gelu" and fmt == "safetensors")
        assert c["n_ff"] == (case["intermediate_size"] or 4 * case["hidden_size"])
        return
    if arch == "exaone_moe":
        moe = c["moe"]
        assert c["qk_norm"] and moe["deepseek"] and moe["sigmoid_gating"] and moe["selection_bias"]
        assert (moe["n_expert"], moe["n_expert_used"], moe["n_ff_expert"]) == (
            case["num_experts"],
            case["num_experts_per_tok"],
            case["moe_intermediate_size"],
        )
        assert moe["n_ff_shared"] == case["num_shared_experts"] * case["moe_intermediate_size"]
        assert moe["norm_topk_prob"] == case.get("norm_topk_prob", True)
        assert moe["routed_scale"] == pytest.approx(case.get("routed_scaling_factor", 2.5))
        assert moe["layers"] == list(range(1, case["num_layers"])) and c["n_layer"] == case["num_layers"]
        types = case.get("layer_types") or [
            "full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(case["num_layers"])
        ]
        assert c["sliding_window"] == case["sliding_window"]
        assert c["layer_sliding"] == [t == "sliding_attention" for t in types]
        assert c["layer_nope"] == [not s for s in c["layer_sliding"]]
        return
    if arch == "apertus":
        assert (
            c["ffn_xielu"]
            and c["qk_norm"]
            and c["rope_style"] == "neox"
            and len(c["xielu"]) == 4 * c["n_layer"]
        )
        assert c["xielu"][2::4] == [0.5] * c["n_layer"] and c["xielu"][3::4] == pytest.approx(
            [-1e-6] * c["n_layer"]
        )
        return
    if arch == "phimoe":
        moe, bias = c["moe"], case.get("attention_bias", False)
        assert c["layer_norm"] and c["norm_bias"] and (c["qkv_bias"], c["o_bias"]) == (bias, bias)
        assert (
            moe["sparsemixer"] and moe["n_expert_used"] == 2 and moe["n_expert"] == case["num_local_experts"]
        )
        want = 0.01 if fmt != "safetensors" else case.get("router_jitter_noise", 0.01)
        assert moe["sparsemixer_eps"] == pytest.approx(want)
        if "rope_scaling" in case:
            assert c["rope_scaling"]["type"] == "longrope"
            assert c["rope_scaling"]["attn_factor"] == pytest.approx(1.243)
        return
    if arch == "dots1":
        moe = c["moe"]
        assert c["qk_norm"] and moe["deepseek"] and moe["sigmoid_gating"] and moe["selection_bias"]
        assert (moe["n_expert"], moe["n_expert_used"], moe["n_ff_expert"]) == (
            case["n_routed_experts"],
            case["num_experts_per_tok"],
            case["moe_intermediate_size"],
        )
        assert moe["n_ff_shared"] == case["n_shared_experts"] * case["moe_intermediate_size"]
        assert moe["norm_topk_prob"] == case.get("norm_topk_prob", False)
        assert moe["routed_scale"] == pytest.approx(case.get("routed_scaling_factor", 1.0))
        assert moe["layers"] == list(range(case.get("first_k_dense_replace", 0), case["num_layers"]))
        assert moe["n_group"] == case.get("n_group", 1)
        window = case.get("sliding_window", 0) if case.get("max_window_layers") is not None else 0
        assert c["sliding_window"] == window
        return
    if arch == "falcon":
        new, multi = case.get("new_decoder_architecture", False), case.get("multi_query", True)
        bias = case.get("bias", False)
        assert c["layer_norm"] and c["norm_bias"] and c["ffn_gelu"] and c["rope_style"] == "neox"
        assert c["parallel_block"] == case.get("parallel_attn", True) or new
        assert c["parallel_norms"] == new and c["rope_dim"] == 0
        assert c["n_head_kv"] == (case["num_kv_heads"] if new or not multi else 1)
        assert (c["qkv_bias"], c["o_bias"], c["ffn_bias"]) == (bias, bias, bias)
        assert c["gelu_erf"] == (case.get("activation", "gelu") == "gelu")
        return
    if arch == "olmo":  # (GGUF: q / k rows permuted by llama.cpp's converter, hence interleaved pairs)
        assert c["layer_norm"] and not c["norm_bias"] and not c["qk_norm"]
        assert c["clamp_qkv"] == pytest.approx(case.get("clip_qkv", 0.0))
        assert c["rope_style"] == ("neox" if fmt == "safetensors" else "interleaved")
        return
    if arch == "internlm3":  # (read as Llama)
        assert c["arch"] == "llama" and c["head_dim"] == 128 and not c["qkv_bias"]
        return
    if arch == "hunyuan_v1_moe":
        moe = c["moe"]
        assert (
            c["qk_norm"]
            and c["qk_norm_after_rope"]
            and c["rope_theta"] == pytest.approx(1e4 * 1e3 ** (16 / 14))
        )
        assert (moe["n_expert"], moe["n_expert_used"], moe["n_ff_expert"], moe["n_ff_shared"]) == (
            5,
            2,
            24,
            24,
        )
        assert moe["norm_topk_prob"] and moe["layers"] == [0, 1, 2] and not moe["deepseek"]
        return
    if arch == "hunyuan_v1_dense":
        assert c["qk_norm"] and c["qk_norm_after_rope"] and c["rope_style"] == "neox"
        want = 10000.0 * 1000.0 ** (16 / 14) if name == "hunyuan" else 10000.0
        assert c["rope_theta"] == pytest.approx(want, rel=1e-6)
        return
    if arch == "exaone":
        assert c["rope_theta"] == (1e6 if name == "exaone" else 500000.0) and not c["qk_norm"]
        assert c["n_layer"] == case["num_layers"] and c["rope_style"] == "neox"
        return
    if arch == "arcee":  # (GGUF: q / k rows permuted by llama.cpp's converter, hence interleaved pairs)
        assert c["ffn_relu2"] and not c["qk_norm"]
        assert c["rope_style"] == ("neox" if fmt == "safetensors" else "interleaved")
        return
    if arch == "seed_oss":
        assert (c["qkv_bias"], c["o_bias"]) == (
            case.get("attention_bias", True),
            case.get("attention_out_bias", False),
        )
        assert c["head_dim"] == case.get("head_dim", 128) and not c["qk_norm"] and c["rope_style"] == "neox"
        return
    assert c["qk_norm"] == (arch != "ernie4_5")
    assert c["rope_style"] == ("interleaved" if arch == "ernie4_5" else "neox")
    if arch == "ernie4_5":
        assert c["head_dim"] == case.get("head_dim", 128)
    window = case.get("sliding_window") or 0
    assert c["sliding_window"] == window
    if window:
        n = case["num_layers"]
        types = case.get("layer_types") or [
            "full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(n)
        ]
        assert c["layer_sliding"] == [t == "sliding_attention" for t in types]
    # EXAONE 4's global layers attend without RoPE when windowed; OLMo 3's sliding layers' own base.
    assert c["layer_nope"] == ([not s for s in c["layer_sliding"]] if arch == "exaone4" and window else [])
    assert c["rope_theta_swa"] == (20000.0 if name == "olmo3" else 0.0)


@pytest.mark.parametrize("name, fmt", [(n, f) for n, (_, fmts) in CASES.items() for f in fmts])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    if CASES[name][0]["arch"] in (
        "granitemoe",
        "granitemoeshared",
        "ernie4_5_moe",
        "hunyuan_v1_moe",
        "dots1",
        "phimoe",
        "exaone_moe",
    ) and fmt in (
        "F16",
        "Q8_0",
    ):
        model = check_twin(path, ids, hf_logits)  # (rounded weights switch an expert now and then)
    else:
        model = check_golden(path, ids, hf_logits, fmt)
    check_config(name, fmt, model.config)


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner (over 6x the windows): bitwise equal,
    equal to HF and to the twin's runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


@pytest.mark.parametrize(
    "name, fmt",
    [("granitemoe", "safetensors"), ("granitemoe", "Q8_0"), ("olmo2", "F32"), ("olmo2", "Q8_0"),
     ("exaone4-hybrid", "Q8_0"), ("ernie4_5", "Q8_0"), ("ernie4_5_moe", "Q8_0"), ("hunyuan_moe", "Q8_0"),
     ("dots1", "Q8_0"), ("phimoe", "Q8_0"), ("exaone_moe", "Q8_0"), ("minicpm3", "safetensors"),
     ("codegen", "safetensors")],
)  # fmt: skip
def test_batch_invariant(hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: Any) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits; and
    inspect names the architecture."""
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    model = core.load_model(path)
    check_invariance(model, CASES[name][0]["vocab_size"], seed=len(name))
    text = models.format_inspect(models.inspect(path))
    assert f"architecture  {model.config['arch']}" in text
    if name == "ernie4_5_moe":
        assert "in 2 of 3 layers, a shared expert of 48, chosen by probability plus a per-expert bias" in text


def copy_with(src: str, dst: Path, tensors: dict[str, Any] | None = None, **config: Any) -> str:
    """A copy of HF folder ``src`` with some tensors (name -> array, a function of the old one, or None:
    removed) and config.json keys replaced."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(src, dst)
    if tensors:
        stored = load_file(str(dst / "model.safetensors"))
        for name, new in tensors.items():
            if new is None:
                del stored[name]
            else:
                stored[name] = new(stored[name]) if callable(new) else new
        save_file(stored, str(dst / "model.safetensors"), metadata={"format": "pt"})
    if config:
        cfg = json.loads((dst / "config.json").read_text())
        cfg.update(config)
        (dst / "config.json").write_text(json.dumps(cfg))
    return str(dst)


def both_refuse(path: str, cpp_match: str, twin_match: str) -> None:
    """The C++ loader and the twin both refuse the file, each naming what is wrong."""
    with pytest.raises(core.ModelError, match=cpp_match):
        core.load_model(path)
    with pytest.raises(ValueError, match=twin_match):
        ref_loader.load_weights(path)


def moved_as_twin_predicts(path: str, ids: list[int], want: np.ndarray) -> None:
    got = core.model_logits(core.load_model(path), ids)
    scale = float(np.max(np.abs(want)))
    assert float(np.max(np.abs(got - want))) > 1e-3 * scale, path
    config, weights = ref_loader.load_weights(path)
    assert float(np.max(np.abs(got - ref_model.forward(config, weights, ids)))) < TWIN_TOL * scale, path


def test_granitemoe_residual_scale_and_bad_files(
    hf_models: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The residual multiplier scales the experts' sum too; a stack of the wrong shape, or a GGUF file
    without its expert count, is refused by name; inspect describes experts and multipliers."""
    src, _, ids = hf_models["granitemoe"]
    want = core.model_logits(core.load_model(src), ids)
    moved_as_twin_predicts(copy_with(src, tmp_path / "residual", residual_multiplier=0.9), ids, want)
    name = "model.layers.1.block_sparse_moe.input_linear.weight"
    bad = copy_with(src, tmp_path / "bad", {name: lambda w: w[:, :-1]})
    both_refuse(bad, name, "shape mismatch")
    path = case_file(hf_models, "granitemoe", "F32", tmp_path_factory)
    out = gguf_without(path, Path(path).with_name("no-experts.gguf"), keys=["granitemoe.expert_count"])
    both_refuse(out, "expert_count", "expert_count")
    text = models.format_inspect(models.inspect(path))
    assert "multipliers   embeddings 12, residuals 0.22" in text
    assert "experts       5 of 40 rows, 2 used per token, in 3 of 3 layers" in text


def test_olmo2_norms_matter_and_bad_shapes_fail(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """Each of OLMo 2's four norms is read and applied (changing one moves the logits as the twin
    predicts); a per-head q norm (Qwen3's width) is refused by name; bfloat16 runs."""
    src, hf_logits, ids = hf_models["olmo2"]
    want = core.model_logits(core.load_model(src), ids)
    for stem in (
        "self_attn.q_norm",
        "self_attn.k_norm",
        "post_attention_layernorm",
        "post_feedforward_layernorm",
    ):
        name = f"model.layers.1.{stem}.weight"
        moved_as_twin_predicts(copy_with(src, tmp_path / stem, {name: lambda w: w * 0 + 1.7}), ids, want)
    name = "model.layers.1.self_attn.q_norm.weight"
    bad = copy_with(src, tmp_path / "per-head", {name: np.ones(16, np.float32)})
    both_refuse(bad, name, "shape mismatch")
    bf16 = core.model_logits(core.load_model(src, dtype="bfloat16"), ids)
    assert float(np.max(np.abs(bf16 - hf_logits))) < 0.05 * float(np.max(np.abs(hf_logits)))


def test_window_readings() -> None:
    """OLMo 3: the full layers' rope parameters and the sliding layers' own base. EXAONE 4: layer_types,
    else sliding_window_pattern as an int or L / G letters (transformers' default 4096-token window
    when the key is absent, none when null); from GGUF, llama.cpp's window for the 64-layer model
    only."""
    cfg = {"num_hidden_layers": 4, "sliding_window": 8, "rope_parameters": {
        "full_attention": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e4},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}  # fmt: skip
    out, full = arch_config.olmo3_hf(cfg, 4)
    assert out == {"sliding_window": 8, "layer_sliding": [True, True, True, False], "rope_theta_swa": 1e4}
    assert full == cfg["rope_parameters"]["full_attention"]  # type: ignore[index]
    assert arch_config.exaone4_hf({"sliding_window": None}, 4)["sliding_window"] == 0
    assert arch_config.exaone4_hf({}, 4) == {
        "sliding_window": 4096, "layer_sliding": [True, True, True, False],
        "layer_nope": [False, False, False, True],
    }  # fmt: skip
    lg = arch_config.exaone4_hf({"sliding_window": 8, "sliding_window_pattern": "LG"}, 3)
    assert lg["layer_sliding"] == [True, False, True] and lg["layer_nope"] == [False, True, False]
    with pytest.raises(ValueError, match="sliding_window_pattern"):
        arch_config.exaone4_hf({"sliding_window": 8, "sliding_window_pattern": "LXG"}, 3)
    assert arch_config.exaone4_gguf({}, 30)["sliding_window"] == 0
    big = arch_config.exaone4_gguf({}, 64)
    assert big["sliding_window"] == 4096 and big["layer_sliding"][:4] == [True, True, True, False]


def test_ernie4_5_moe_selection_bias_and_shared_experts_matter(
    hf_models: dict[str, Any], tmp_path: Path
) -> None:
    """The selection bias changes which experts are chosen (not their weights' formula) and the shared
    experts are added: changing either moves the logits as the twin predicts; a missing bias is
    refused by name."""
    src, _, ids = hf_models["ernie4_5_moe"]
    want = core.model_logits(core.load_model(src), ids)
    bias = "model.layers.1.mlp.moe_statics.e_score_correction_bias"
    moved_as_twin_predicts(copy_with(src, tmp_path / "bias", {bias: lambda b: b[:, ::-1].copy()}), ids, want)
    shared = "model.layers.2.mlp.shared_experts.down_proj.weight"
    moved_as_twin_predicts(copy_with(src, tmp_path / "shared", {shared: lambda w: w * 2}), ids, want)
    missing = copy_with(src, tmp_path / "missing", {bias: None})
    both_refuse(missing, "e_score_correction_bias", "e_score_correction_bias")


def test_ernie4_5_biases_refused(hf_models: dict[str, Any], tmp_path: Path) -> None:
    biased = copy_with(hf_models["ernie4_5"][0], tmp_path / "biased", use_bias=True)
    both_refuse(biased, "use_bias", "use_bias")


@pytest.mark.parametrize(
    "name",
    [
        "starcoder2",
        "stablelm-parallel",
        "phi-gqa",
        "hunyuan",
        "hunyuan_moe",
        "seed_oss",
        "arcee",
        "nemotron",
        "olmo-clip",
        "gpt_neox",
        "falcon-40b",
        "dots1",
        "phimoe",
        "apertus",
        "exaone_moe",
        "gptj",
        "minicpm3-release",
        "jais2",
    ],
)
def test_corrupt_sizes_are_refused_or_run(
    hf_models: dict[str, Any], name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """This session's families' GGUF files with each scalar size key (block / head counts, widths, the
    window, the rotated dimensions, ...) set to 0, 1, 3, 7, 2^20, 2^31-1, 2^32-1: each is refused with a
    ModelError or loads and runs, never a crash (in-process: a crash kills pytest)."""
    check_corrupt_sizes(
        case_file(hf_models, name, "F32", tmp_path_factory), tmp_path_factory.mktemp("bad"), 6
    )


def test_olmo_clip_and_nemotron_refusals(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """OLMo's clip_qkv bites on the tiny model (removing it moves the logits as the twin predicts);
    Nemotron's MLP biases and another activation are refused by name."""
    src, _, ids = hf_models["olmo-clip"]
    want = core.model_logits(core.load_model(src), ids)
    moved_as_twin_predicts(copy_with(src, tmp_path / "noclip", clip_qkv=None), ids, want)
    nemotron = hf_models["nemotron"][0]
    both_refuse(copy_with(nemotron, tmp_path / "mlp-bias", mlp_bias=True), "mlp_bias", "mlp_bias")
    both_refuse(copy_with(nemotron, tmp_path / "silu", hidden_act="silu"), "hidden_act", "hidden_act")


def test_codegen_layout_and_refusals(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """CodeGen's [q | v | k] groups matter (read as GPT-J's [q | k | v] the logits move), its lm_head bias is
    read, and a null rotary_dim (CodeGen's tables would span the whole width) is refused by name."""
    src, _, ids = hf_models["codegen"]
    config, weights = ref_loader.load_weights(src)
    assert "output_b" in weights
    want = core.model_logits(core.load_model(src), ids)
    swapped = dict(weights)
    for i in range(CASES["codegen"][0]["num_layers"]):
        swapped[f"layers.{i}.wk"], swapped[f"layers.{i}.wv"] = (
            weights[f"layers.{i}.wv"],
            weights[f"layers.{i}.wk"],
        )
    moved = ref_model.forward(config, swapped, ids)
    assert float(np.max(np.abs(moved - want))) > 1e-2 * float(np.max(np.abs(want)))
    both_refuse(copy_with(src, tmp_path / "rot", rotary_dim=None), "rotary_dim", "rotary_dim")


def test_hunyuan_moe_shared_mlp_and_refusals(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """Hunyuan MoE's shared MLP is added (changing it moves the logits as the twin predicts); the Hub's
    per-layer lists are read when alike and refused when not; more shared MLPs and cross-layer attention
    are refused by name."""
    src, _, ids = hf_models["hunyuan_moe"]
    want = core.model_logits(core.load_model(src), ids)
    shared = "model.layers.1.mlp.shared_mlp.down_proj.weight"
    moved_as_twin_predicts(copy_with(src, tmp_path / "shared", {shared: lambda w: w * 2}), ids, want)
    listed = copy_with(src, tmp_path / "listed", moe_topk=[2, 2, 2], moe_intermediate_size=[24, 24, 24],
                       num_shared_expert=[1, 1, 1])  # fmt: skip
    assert np.array_equal(core.model_logits(core.load_model(listed), ids), want)
    both_refuse(copy_with(src, tmp_path / "mixed", moe_topk=[2, 3, 2]), "moe_topk", "moe_topk")
    both_refuse(
        copy_with(src, tmp_path / "two", num_shared_expert=2), "num_shared_expert", "num_shared_expert"
    )
    both_refuse(copy_with(src, tmp_path / "cla", use_cla=True), "use_cla", "use_cla")


def test_phimoe_sparsemixer_matters_and_refusals(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """On the wide-cut model, sparsemixer's weights differ from a plain softmax top-2 (renormalised, as
    llama.cpp routes phimoe) by more than rounding, and ossa follows transformers; more than two
    experts per token and differing mscales are refused by name."""
    src, hf_logits, ids = hf_models["phimoe-wide"]
    config, weights = ref_loader.load_weights(src)
    plain = dict(config, moe=dict(config["moe"], sparsemixer=False, norm_topk_prob=True))
    scale = float(np.max(np.abs(hf_logits)))
    assert float(np.max(np.abs(ref_model.forward(plain, weights, ids) - hf_logits))) > 1e-3 * scale
    got = core.model_logits(core.load_model(src), ids)
    assert float(np.max(np.abs(got - hf_logits))) < 1e-5 * scale
    both_refuse(copy_with(src, tmp_path / "three", num_experts_per_tok=3), "2 experts", "2 experts")
    rope = {"rope_type": "longrope", "short_factor": [1.0] * 6, "long_factor": [2.0] * 6, "short_mscale": 1.2,
            "long_mscale": 1.3, "original_max_position_embeddings": 64}  # fmt: skip
    both_refuse(copy_with(src, tmp_path / "mscale", rope_parameters=rope, max_position_embeddings=256),
                "mscale", "mscale")  # fmt: skip


def test_exaone_moe_mtp_layer_skipped(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """A K-EXAONE GGUF file with the MTP layer llama.cpp's converter appends (block_count one more,
    nextn_predict_layers 1) runs the same logits as the file without it, in C++ and in the twin."""
    from tiny_models import hf_to_gguf

    src, hf_logits, ids = hf_models["exaone_moe"]
    plain = core.model_logits(core.load_model(hf_to_gguf(src, tmp_path / "plain.gguf")), ids)
    path = hf_to_gguf(src, tmp_path / "mtp.gguf", nextn=True)
    model = core.load_model(path)
    assert model.config["n_layer"] == CASES["exaone_moe"][0]["num_layers"]
    assert np.array_equal(core.model_logits(model, ids), plain)
    config, weights = ref_loader.load_weights(path)
    assert config == model.config
    scale = float(np.max(np.abs(hf_logits)))
    assert float(np.max(np.abs(ref_model.forward(config, weights, ids) - plain))) < TWIN_TOL * scale


@pytest.mark.parametrize(
    "name, want",
    [("gpt_neox", "mlp           down(gelu(up x)), exact (erf); with biases; LayerNorm with bias"),
     ("gptj", "mlp           down(gelu(up x)), tanh-approximated; with biases; LayerNorm with bias"),
     ("nemotron", "mlp           down(relu(up x)^2); LayerNorm with bias"),
     ("apertus", "mlp           down(xielu(up x)), per-layer parameters")],
)  # fmt: skip
def test_inspect_describes_the_mlp(
    hf_models: dict[str, Any], name: str, want: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """ossa inspect names the feed-forward and the norms where they are not the Llama family's."""
    text = models.format_inspect(models.inspect(case_file(hf_models, name, "F32", tmp_path_factory)))
    assert want in text, text
