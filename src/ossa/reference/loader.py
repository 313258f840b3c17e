"""load_weights: a GGUF file or Hugging Face folder -> (config, float32 weights) (twin of loader.cpp).

Config keys and values equal the C++ ``core.Model.config`` (floats rounded through float32 as the C++
struct stores them). Weights use the canonical names of ``LayerWeights`` in ``csrc/model/weights.h``:
"tok_embd", "output_norm", "output", "layers.{i}.attn_norm", "layers.{i}.wq", ... ; matrices are
float32 [rows, cols], vectors 1-D. "output" is "tok_embd" again when the embeddings are tied.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np

from . import arch_config
from . import moe as moe_twin
from .gguf_split import read_gguf_model
from .quants import BitLinear, QdqLinear, dequantize_fp8
from .safetensors import read_safetensors

ARCHS = (
    "llama", "qwen2", "qwen3", "mistral", "qwen3moe", "qwen2moe", "gemma", "gemma2", "gemma3", "phi3",
    "smollm3", "granite", "granitemoe", "gpt-oss", "olmo2", "exaone4", "ernie4_5", "ernie4_5-moe",
    "deepseek2", "glm4moe", "olmoe", "glm4", "mistral3", "qwen35", "qwen35moe", "lfm2", "lfm2moe",
    "granitehybrid", "nemotron_h", "nemotron_h_moe", "qwen3next", "mamba2", "mamba", "jamba", "falcon-h1",
    "gemma4", "llama4", "qwen3vl", "qwen3vlmoe", "qwen2vl", "command-r", "cohere2", "minimax-m2", "gemma3n",
    "seed_oss", "arcee", "exaone", "hunyuan-dense", "starcoder2", "stablelm", "phi2", "nemotron", "olmo",
    "hunyuan-moe", "gptneox", "falcon", "dots1", "phimoe", "apertus", "exaone-moe", "gptj", "bloom", "mpt",
    "gpt2", "starcoder", "afmoe", "dbrx", "chatglm", "minicpm3", "jais2", "minicpm", "internlm2", "deepseek",
    "bailingmoe2", "deci",
)  # fmt: skip
NEMOTRON_H = ("nemotron_h", "nemotron_h_moe")  # one sublayer a block: Mamba-2, attention or a relu2 FFN
LFM2 = ("lfm2", "lfm2moe")  # short convolutions (reference/delta_net.py) among attention layers
# gated delta-net layers (reference/delta_net.py), gated attention (Qwen3-Next's projections fused)
QWEN35 = ("qwen35", "qwen35moe", "qwen3next")
# q / k RMS-normalised (per head; OLMo 2's over all heads), from GGUF and from folders (OLMo 3's folders too)
QK_NORM = (
    "qwen3",
    "qwen3moe",
    "qwen3vl",
    "qwen3vlmoe",
    "olmo2",
    "exaone4",
    "olmoe",
    "dots1",
    "apertus",
    "exaone-moe",
    "afmoe",
)
GEMMA = ("gemma", "gemma2", "gemma3")  # GeGLU, scaled embeddings, 1 + w norms: reference/gemma3.py
# a norm on each sublayer's output too
POST_NORMS = ("gemma2", "gemma3", "olmo2", "olmo3", "exaone4", "glm4", "afmoe")
NO_PRE_NORMS = ("olmo2", "olmo3", "exaone4")  # only those (OLMo: q / k normalised over all heads at once)
QK_NORM_FULL = ("olmo2", "olmo3", "olmoe", "minimax-m2")
# q / k / v fused in one matrix (attn_qkv / qkv_proj), viewed as three
_FUSED_QKV = (
    "phi3",
    "phimoe",
    "phi2",
    "gptneox",
    "falcon",
    "bloom",
    "mpt",
    "gpt2",
    "starcoder",
    "dbrx",
    "chatglm",
    "gptj",
    "glm4moe",  # (Param2-MoE's query_key_value)
    "bailingmoe2",
    "llama",  # (InternLM2's wqkv, regrouped)
    "internlm2",
    "minicpm",
    "deepseek",
)
CONFIG_KEYS = (
    "arch", "n_vocab", "n_embd", "n_layer", "n_head", "n_head_kv", "head_dim", "n_ff", "n_ctx_train",
    "rms_eps", "rope_theta", "rope_scaling", "rope_style", "qkv_bias", "qk_norm", "tied_embeddings", "moe",
    "sliding_window", "layer_sliding", "rope_theta_swa", "rope_dim", "attn_scale", "final_softcap",
    "attn_softcap", "embd_scale", "layer_nope", "residual_scale", "logit_scale", "o_bias", "attn_sinks",
    "mla", "clamp_qkv", "attn_temp_scale", "attn_temp_length", "delta", "conv", "ssm", "attn_gate",
    "layer_no_ffn", "layer_no_mixer", "ffn_relu2", "n_kv_layers", "state_bytes", "mamba1", "parallel_ssm",
    "mup", "layer_head_dim", "layer_n_head_kv", "layer_n_ff", "kv_source", "rope_pairs", "v_norm", "ple_dim",
    "attn_temp_offset", "attn_temp_nope", "attn_chunked", "qk_l2_norm", "layer_norm", "parallel_block",
    "qk_norm_heads", "altup", "laurel_rank", "layer_sparsity", "altup_correct_scale", "qk_norm_after_rope",
    "norm_bias", "ffn_gelu", "ffn_bias", "gelu_erf", "parallel_norms", "ffn_xielu", "xielu", "alibi",
    "embd_norm", "pos_embd", "attn_gate_proj", "ffn_relu", "sub_norms", "glu_relu2", "no_post_norms",
    "no_pre_norms", "rope_freqs", "layer_linear_attn",
)  # fmt: skip
# Beyond the Llama family: the values that leave those architectures' forward pass as it is.
_EXTRA_DEFAULTS: dict[str, Any] = {
    "sliding_window": 0, "layer_sliding": [], "rope_theta_swa": 0.0, "rope_dim": 0, "attn_scale": 0.0,
    "rope_freqs": [], "layer_linear_attn": [],
    "final_softcap": 0.0, "attn_softcap": 0.0, "embd_scale": 0.0, "layer_nope": [],
    "residual_scale": 0.0, "logit_scale": 0.0, "o_bias": False, "attn_sinks": False,
    "mla": {"q_lora_rank": 0, "kv_lora_rank": 0, "qk_nope": 0, "qk_rope": 0, "v_head_dim": 0},
    "clamp_qkv": 0.0, "attn_temp_scale": 0.0, "attn_temp_length": 0,
    "delta": {"n_k_heads": 0, "n_v_heads": 0, "k_dim": 0, "v_dim": 0, "conv_kernel": 0, "v_tiled": False,
              "layers": []},
    "conv": {"kernel": 0, "layers": []},
    "ssm": {"d_inner": 0, "d_state": 0, "n_heads": 0, "n_groups": 0, "conv_kernel": 0, "conv_bias": False,
            "gated_norm": True, "layers": []},
    "parallel_ssm": False,
    "mup": {"active": False, "attn_in": 1.0, "key": 1.0, "attn_out": 1.0, "ssm_in": 1.0, "ssm_out": 1.0,
            "zxbcdt": [1.0] * 5, "mlp_gate": 1.0, "mlp_down": 1.0},
    "attn_gate": False, "layer_no_ffn": [], "layer_no_mixer": [], "ffn_relu2": False,
    "mamba1": {"d_inner": 0, "d_state": 0, "dt_rank": 0, "conv_kernel": 0, "conv_bias": False,
               "dt_b_c_rms": False, "dt_b_c_weights": False, "bc_eps": float(np.float32(1e-6)), "layers": []},
    "layer_head_dim": [], "layer_n_head_kv": [], "layer_n_ff": [], "kv_source": [], "rope_pairs": 0,
    "v_norm": False, "ple_dim": 0, "attn_temp_offset": 0, "attn_temp_nope": False, "attn_chunked": False,
    "qk_l2_norm": False, "layer_norm": False, "parallel_block": False, "qk_norm_heads": False,
    "altup": 0, "laurel_rank": 0, "layer_sparsity": [], "altup_correct_scale": True,
    "qk_norm_after_rope": False, "norm_bias": False, "ffn_gelu": False, "ffn_bias": False,
    "gelu_erf": False, "parallel_norms": False, "ffn_xielu": False, "xielu": [], "alibi": [],
    "embd_norm": False, "pos_embd": False, "attn_gate_proj": False, "ffn_relu": False, "no_post_norms": False,
    "no_pre_norms": False, "sub_norms": False, "glu_relu2": False,
}  # fmt: skip
_SUPPORTED = f"(ossa supports {', '.join(ARCHS)})"
_SUPPORTED_HF = (
    "(ossa supports llama, qwen2, qwen3, mistral, qwen3_moe, qwen2_moe, mixtral, gemma, gemma2, "
    "gemma3_text, gemma3, phi3, smollm3, granite, granitemoe, granitemoeshared, granite_swa, granitemoe_swa, "
    "gpt_oss, olmo2, olmo3, "
    "exaone4, ernie4_5, ernie4_5_moe, deepseek_v2, deepseek_v3, glm4_moe, glm4_moe_lite, olmoe, glm4, "
    "ministral3, mistral4, "
    "qwen3_5, qwen3_5_moe, qwen3_next, lfm2, lfm2_moe, granitemoehybrid, bamba, nemotron_h, mamba2, mamba, "
    "falcon_mamba, jamba, falcon_h1, gemma4_text, gemma4, llama4_text, llama4, qwen3_vl, qwen3_vl_moe, "
    "qwen2_vl, qwen2_5_vl, cohere, cohere2, minimax_m2, gemma3n_text, gemma3n, seed_oss, arcee, exaone, "
    "internlm3, helium, hunyuan_v1_dense, starcoder2, stablelm, phi, nemotron, olmo, hunyuan_v1_moe, "
    "gpt_neox, falcon, dots1, phimoe, apertus, exaone_moe, gptj, minicpm3, bloom, mpt, gpt2, gpt_bigcode, "
    "afmoe, dbrx, glm, opt, gpt_neo, bitnet, codegen, ministral, iquestcoder, cwm, jais2, vaultgemma, "
    "nanochat, flex_olmo, minicpm, internlm2, deepseek, bailing_moe (Ling 2.0), nemotron-nas)"
)
_HF_ARCHS = {
    "llama": "llama", "LlamaForCausalLM": "llama", "qwen2": "qwen2", "Qwen2ForCausalLM": "qwen2",
    "qwen3": "qwen3", "Qwen3ForCausalLM": "qwen3", "mistral": "mistral", "MistralForCausalLM": "mistral",
    "ministral": "mistral", "MinistralForCausalLM": "mistral", "iquestcoder": "llama", "cwm": "llama",
    "jais2": "jais2", "Jais2ForCausalLM": "jais2",
    "CwmForCausalLM": "llama",
    "qwen3_moe": "qwen3moe", "Qwen3MoeForCausalLM": "qwen3moe", "qwen2_moe": "qwen2moe",
    "Qwen2MoeForCausalLM": "qwen2moe", "mixtral": "mixtral", "MixtralForCausalLM": "mixtral",
    "phi3": "phi3", "Phi3ForCausalLM": "phi3", "smollm3": "smollm3", "SmolLM3ForCausalLM": "smollm3",
    "granite": "granite", "GraniteForCausalLM": "granite", "granitemoe": "granitemoe",
    "GraniteMoeForCausalLM": "granitemoe", "granitemoeshared": "granitemoe",
    "GraniteMoeSharedForCausalLM": "granitemoe", "granite_swa": "granite", "GraniteSWAForCausalLM": "granite",
    "granitemoe_swa": "granitemoe", "GraniteMoeSWAForCausalLM": "granitemoe",
    "gpt_oss": "gpt-oss", "GptOssForCausalLM": "gpt-oss",
    "olmo2": "olmo2", "Olmo2ForCausalLM": "olmo2", "flex_olmo": "olmoe", "FlexOlmoForCausalLM": "olmoe",
    "olmo3": "olmo3", "Olmo3ForCausalLM": "olmo3",
    "exaone4": "exaone4", "Exaone4ForCausalLM": "exaone4", "ernie4_5": "ernie4_5",
    "Ernie4_5ForCausalLM": "ernie4_5", "ernie4_5_moe": "ernie4_5-moe",
    "Ernie4_5_MoeForCausalLM": "ernie4_5-moe", "deepseek_v2": "deepseek2",
    "DeepseekV2ForCausalLM": "deepseek2", "deepseek_v3": "deepseek2", "DeepseekV3ForCausalLM": "deepseek2",
    "youtu": "deepseek2", "YoutuForCausalLM": "deepseek2",
    "glm4_moe": "glm4moe", "Glm4MoeForCausalLM": "glm4moe", "solar_open": "glm4moe",
    "SolarOpenForCausalLM": "glm4moe", "param2moe": "glm4moe", "sarvam_moe": "glm4moe",
    "olmoe": "olmoe", "OlmoeForCausalLM": "olmoe",
    "glm4": "glm4", "Glm4ForCausalLM": "glm4", "glm": "chatglm", "GlmForCausalLM": "chatglm",
    "glm4_moe_lite": "deepseek2", "Glm4MoeLiteForCausalLM": "deepseek2",
    "ministral3": "mistral3", "Ministral3ForCausalLM": "mistral3",
    "mistral4": "deepseek2", "Mistral4ForCausalLM": "deepseek2",
    "qwen3_5_text": "qwen35", "Qwen3_5ForCausalLM": "qwen35",
    "qwen3_5_moe_text": "qwen35moe", "Qwen3_5MoeForCausalLM": "qwen35moe",
    "qwen3_next": "qwen3next", "Qwen3NextForCausalLM": "qwen3next",
    "lfm2": "lfm2", "Lfm2ForCausalLM": "lfm2", "lfm2_moe": "lfm2moe", "Lfm2MoeForCausalLM": "lfm2moe",
    "granitemoehybrid": "granitehybrid", "GraniteMoeHybridForCausalLM": "granitehybrid",
    "bamba": "granitehybrid", "BambaForCausalLM": "granitehybrid",
    "nemotron_h": "nemotron_h", "NemotronHForCausalLM": "nemotron_h",
    "mamba2": "mamba2", "Mamba2ForCausalLM": "mamba2",
    "mamba": "mamba", "MambaForCausalLM": "mamba", "falcon_mamba": "mamba", "FalconMambaForCausalLM": "mamba",
    "jamba": "jamba", "JambaForCausalLM": "jamba",
    "falcon_h1": "falcon-h1", "FalconH1ForCausalLM": "falcon-h1",
    "llama4_text": "llama4", "Llama4ForCausalLM": "llama4",
    "qwen3_vl_text": "qwen3vl", "qwen3_vl_moe_text": "qwen3vlmoe",
    "qwen2_vl_text": "qwen2vl", "qwen2_5_vl_text": "qwen2vl", "qwen2_vl": "qwen2vl", "qwen2_5_vl": "qwen2vl",
    "cohere": "command-r", "CohereForCausalLM": "command-r",
    "cohere2": "cohere2", "Cohere2ForCausalLM": "cohere2",
    "minimax_m2": "minimax-m2", "MiniMaxM2ForCausalLM": "minimax-m2", "seed_oss": "seed_oss",
    "SeedOssForCausalLM": "seed_oss", "arcee": "arcee", "ArceeForCausalLM": "arcee", "nanochat": "llama",
    "NanoChatForCausalLM": "llama",
    "exaone": "exaone", "ExaoneForCausalLM": "exaone", "internlm3": "llama", "InternLM3ForCausalLM": "llama",
    "helium": "llama", "HeliumForCausalLM": "llama",
    "hunyuan_v1_dense": "hunyuan-dense", "HunYuanDenseV1ForCausalLM": "hunyuan-dense",
    "hunyuan_v1_moe": "hunyuan-moe", "HunYuanMoEV1ForCausalLM": "hunyuan-moe", "gpt_neox": "gptneox",
    "GPTNeoXForCausalLM": "gptneox", "falcon": "falcon", "FalconForCausalLM": "falcon",
    "dots1": "dots1", "Dots1ForCausalLM": "dots1", "phimoe": "phimoe", "PhimoeForCausalLM": "phimoe",
    "PhiMoEForCausalLM": "phimoe", "apertus": "apertus", "ApertusForCausalLM": "apertus", "afmoe": "afmoe",
    "AfmoeForCausalLM": "afmoe", "dbrx": "dbrx", "DbrxForCausalLM": "dbrx",
    "gptj": "gptj", "GPTJForCausalLM": "gptj", "minicpm3": "minicpm3", "bloom": "bloom",
    "BloomForCausalLM": "bloom", "mpt": "mpt", "MptForCausalLM": "mpt", "MPTForCausalLM": "mpt",
    "gpt2": "gpt2", "GPT2LMHeadModel": "gpt2", "gpt_bigcode": "starcoder", "opt": "gpt2",
    "OPTForCausalLM": "gpt2", "gpt_neo": "gpt2", "GPTNeoForCausalLM": "gpt2", "bitnet": "bitnet",
    "codegen": "gptj", "CodeGenForCausalLM": "gptj",
    "BitNetForCausalLM": "bitnet",
    "GPTBigCodeForCausalLM": "starcoder",
    "MiniCPM3ForCausalLM": "minicpm3", "exaone_moe": "exaone-moe",
    "ExaoneMoEForCausalLM": "exaone-moe", "ExaoneMoeForCausalLM": "exaone-moe",
    "starcoder2": "starcoder2", "Starcoder2ForCausalLM": "starcoder2", "stablelm": "stablelm",
    "StableLmForCausalLM": "stablelm", "nemotron": "nemotron", "NemotronForCausalLM": "nemotron",
    "olmo": "olmo", "OlmoForCausalLM": "olmo", "phi": "phi2", "PhiForCausalLM": "phi2",
    "minicpm": "minicpm", "MiniCPMForCausalLM": "minicpm",  # (Llama with Granite's multipliers)
    "internlm2": "llama", "InternLM2ForCausalLM": "llama",  # (Llama's layers, wqkv per KV group)
    "deepseek": "deepseek", "DeepseekForCausalLM": "deepseek",  # (Llama's attention, V2's softmax experts)
    "bailing_moe": "glm4moe", "BailingMoeV2ForCausalLM": "glm4moe",  # (Ling 2.0: Param2-MoE's names)
    "nemotron-nas": "deci", "DeciLMForCausalLM": "deci",  # (Nemotron-51B / Super / Ultra: per-layer shapes)
}  # fmt: skip
_GGUF_LAYER = {
    "attn_norm": "attn_norm.weight", "wq": "attn_q.weight", "wk": "attn_k.weight", "wv": "attn_v.weight",
    "wo": "attn_output.weight", "bq": "attn_q.bias", "bk": "attn_k.bias", "bv": "attn_v.bias",
    "q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight", "ffn_norm": "ffn_norm.weight",
    "attn_norm_b": "attn_norm.bias", "ffn_norm_b": "ffn_norm.bias", "b_up": "ffn_up.bias",
    "b_down": "ffn_down.bias",
    "w_gate": "ffn_gate.weight", "w_up": "ffn_up.weight", "w_down": "ffn_down.weight",
    "post_attn_norm": "post_attention_norm.weight", "post_ffn_norm": "post_ffw_norm.weight",
    "wqkv": "attn_qkv.weight", "w_gate_up": "ffn_up.weight", "bo": "attn_output.bias",
    "sinks": "attn_sinks.weight", "wg": "attn_gate.weight", "wq_a": "attn_q_a.weight",
    "q_a_norm": "attn_q_a_norm.weight",
    "wq_b": "attn_q_b.weight", "wkv_a": "attn_kv_a_mqa.weight", "kv_a_norm": "attn_kv_a_norm.weight",
    "wkv_b": "attn_kv_b.weight", "wk_b": "attn_k_b.weight", "wv_b": "attn_v_b.weight",
    "ssm_qkv": "attn_qkv.weight", "ssm_z": "attn_gate.weight", "ssm_beta": "ssm_beta.weight",
    "ssm_qkvz": "ssm_in.weight", "ssm_ba": "ssm_ba.weight", "ssm_x": "ssm_x.weight",
    "ssm_dt_w": "ssm_dt.weight", "ssm_dt_norm": "ssm_dt_norm.weight", "ssm_b_norm": "ssm_b_norm.weight",
    "ssm_c_norm": "ssm_c_norm.weight",
    "ssm_alpha": "ssm_alpha.weight", "ssm_conv": "ssm_conv1d.weight", "ssm_dt": "ssm_dt.bias",
    "ssm_a": "ssm_a", "ssm_norm": "ssm_norm.weight", "ssm_out": "ssm_out.weight",
    "sc_in": "shortconv.in_proj.weight", "sc_conv": "shortconv.conv.weight",
    "sc_out": "shortconv.out_proj.weight", "ssm_in": "ssm_in.weight", "ssm_conv_b": "ssm_conv1d.bias",
    "ssm_d": "ssm_d",
}  # fmt: skip
_HF_LAYER = {
    "attn_norm": "input_layernorm.weight", "wq": "self_attn.q_proj.weight", "wk": "self_attn.k_proj.weight",
    "wv": "self_attn.v_proj.weight", "wo": "self_attn.o_proj.weight", "bq": "self_attn.q_proj.bias",
    "bk": "self_attn.k_proj.bias", "bv": "self_attn.v_proj.bias", "q_norm": "self_attn.q_norm.weight",
    "k_norm": "self_attn.k_norm.weight", "ffn_norm": "post_attention_layernorm.weight",
    "attn_norm_b": "input_layernorm.bias", "ffn_norm_b": "post_attention_layernorm.bias",
    "b_up": "mlp.up_proj.bias", "b_down": "mlp.down_proj.bias",
    "w_gate": "mlp.gate_proj.weight", "w_up": "mlp.up_proj.weight", "w_down": "mlp.down_proj.weight",
    "wqkv": "self_attn.qkv_proj.weight", "w_gate_up": "mlp.gate_up_proj.weight",
    "bo": "self_attn.o_proj.bias", "sinks": "self_attn.sinks", "wg": "self_attn.gate_proj.weight",
    "wq_a": "self_attn.q_a_proj.weight",
    "q_a_norm": "self_attn.q_a_layernorm.weight", "wq_b": "self_attn.q_b_proj.weight",
    "wkv_a": "self_attn.kv_a_proj_with_mqa.weight", "kv_a_norm": "self_attn.kv_a_layernorm.weight",
    "wkv_b": "self_attn.kv_b_proj.weight", "wk_b": "self_attn.k_b_proj.weight",
    "wv_b": "self_attn.v_b_proj.weight", "attn_sub_norm": "self_attn.attn_sub_norm.weight",
    "ffn_sub_norm": "mlp.ffn_sub_norm.weight",
    "ssm_qkv": "linear_attn.in_proj_qkv.weight", "ssm_z": "linear_attn.in_proj_z.weight",
    "ssm_qkvz": "linear_attn.in_proj_qkvz.weight", "ssm_ba": "linear_attn.in_proj_ba.weight",
    "ssm_beta": "linear_attn.in_proj_b.weight", "ssm_alpha": "linear_attn.in_proj_a.weight",
    "ssm_conv": "linear_attn.conv1d.weight", "ssm_dt": "linear_attn.dt_bias", "ssm_a": "linear_attn.A_log",
    "ssm_norm": "linear_attn.norm.weight", "ssm_out": "linear_attn.out_proj.weight",
    "sc_in": "conv.in_proj.weight", "sc_conv": "conv.conv.weight", "sc_out": "conv.out_proj.weight",
}  # fmt: skip


def _f32(x: float) -> float:
    return float(np.float32(x))


def _config(arch: str, **kw: Any) -> dict[str, Any]:
    scaling = kw.pop("rope_scaling", None) or {}
    cfg: dict[str, Any] = {"arch": arch, "moe": moe_twin.dense_moe(), **_EXTRA_DEFAULTS, **kw}
    for key in (
        "rms_eps", "rope_theta", "rope_theta_swa", "attn_scale", "final_softcap", "attn_softcap",
        "embd_scale", "residual_scale", "logit_scale",
    ):  # fmt: skip
        cfg[key] = _f32(cfg[key])
    for key in ("layer_sliding", "layer_no_ffn", "layer_no_mixer", "layer_linear_attn"):
        cfg[key] = [bool(v) for v in cfg[key]]
    cfg["rope_scaling"] = {
        "type": scaling.get("type", "none"),
        "factor": _f32(scaling.get("factor", 1.0)),
        "low_freq_factor": _f32(scaling.get("low_freq_factor", 1.0)),
        "high_freq_factor": _f32(scaling.get("high_freq_factor", 4.0)),
        "original_max_position": int(scaling.get("original_max_position", 8192)),
        "short_factor": [_f32(v) for v in scaling.get("short_factor", [])],
        "long_factor": [_f32(v) for v in scaling.get("long_factor", [])],
        "attn_factor": _f32(scaling.get("attn_factor", 1.0)),
        "beta_fast": _f32(scaling.get("beta_fast", 32.0)),
        "beta_slow": _f32(scaling.get("beta_slow", 1.0)),
        "truncate": bool(scaling.get("truncate", True)),
    }
    if cfg["n_ctx_train"] <= 0:
        cfg["n_ctx_train"] = 4096
    for key in ("n_vocab", "n_embd", "n_layer", "n_head", "n_head_kv", "head_dim", "n_ff"):
        if cfg[key] <= 0:
            raise ValueError(f"invalid {key} {cfg[key]}")
    if cfg["n_head"] % cfg["n_head_kv"] or cfg["head_dim"] % 2:
        raise ValueError("head count not a multiple of the KV head count, or odd head dimension")
    # (Qwen3.5's delta-nets, LFM2's convolutions, Mamba-2: the layers without K/V, and one sequence's
    # state in float32 values)
    d, sc, m = cfg["delta"], cfg["conv"], cfg["ssm"]
    mixers = 0 if cfg["parallel_ssm"] else len(m["layers"])  # (Falcon-H1's keep K/V beside their state)
    cfg["n_kv_layers"] = cfg["n_layer"] - len(d["layers"]) - len(sc["layers"]) - mixers
    cfg["n_kv_layers"] -= sum(cfg["layer_no_mixer"])  # (Nemotron-H's feed-forward blocks)
    cfg["n_kv_layers"] -= sum(cfg["layer_linear_attn"])  # (deci's linear-attention layers)
    m1 = cfg["mamba1"]
    cfg["n_kv_layers"] -= len(m1["layers"])
    cfg["n_kv_layers"] -= sum(src != i for i, src in enumerate(cfg["kv_source"]))  # (Gemma 4's shared)
    conv_dim = 2 * d["n_k_heads"] * d["k_dim"] + d["n_v_heads"] * d["v_dim"]
    per_layer = (d["conv_kernel"] - 1) * conv_dim + d["n_v_heads"] * d["k_dim"] * d["v_dim"]
    state = len(d["layers"]) * per_layer if d["layers"] else 0
    state += len(sc["layers"]) * (sc["kernel"] - 1) * cfg["n_embd"]
    m_conv = m["d_inner"] + 2 * m["n_groups"] * m["d_state"]
    state += len(m["layers"]) * ((m["conv_kernel"] - 1) * m_conv + m["d_inner"] * m["d_state"])
    state += len(m1["layers"]) * ((m1["conv_kernel"] - 1) * m1["d_inner"] + m1["d_inner"] * m1["d_state"])
    cfg["state_bytes"] = 4 * state
    return {k: cfg[k] for k in CONFIG_KEYS}


def _take(
    get: Any, names: set[Any], weights: dict[str, np.ndarray], name: str, canonical: str, rows: int, cols: int
) -> None:
    if name not in names:
        raise ValueError(f"missing tensor '{name}'")
    w = get(name)
    if isinstance(w, (BitLinear, QdqLinear)):  # (BitNet's packed matrices; W8A8's)
        if w.shape != (rows, cols):
            raise ValueError(f"shape mismatch for tensor '{name}': expected {rows} x {cols}, got {w.shape}")
        weights[canonical] = w  # type: ignore[assignment]
        return
    if rows == 1:
        w = w.reshape(-1)
        if w.shape != (cols,):
            raise ValueError(
                f"shape mismatch for tensor '{name}': expected a vector of {cols}, got {w.shape}"
            )
    else:
        w = w.reshape(-1, w.shape[-1])
        if w.shape != (rows, cols):
            raise ValueError(f"shape mismatch for tensor '{name}': expected {rows} x {cols}, got {w.shape}")
    weights[canonical] = w


XIELU_FIELDS = ("alpha_p", "alpha_n", "beta", "eps")  # (Apertus's stored xIELU parameters, in this order)


def xielu_applied(
    alpha_p: list[float], alpha_n: list[float], beta: list[float], eps: list[float]
) -> list[float]:
    """Apertus's xIELU parameters as stored (alpha_p / alpha_n before their softplus) into the applied
    [n_layer * 4] alpha_p, alpha_n, beta, eps (twin of loader.cpp's set_xielu: softplus in double,
    rounded once)."""
    out: list[float] = []
    for p, n, b, e in zip(alpha_p, alpha_n, beta, eps, strict=True):
        sp = [x if x > 20 else float(np.log1p(np.exp(np.float64(x)))) for x in (p, n)]
        b32 = np.float32(b)
        v = [np.float32(sp[0]), b32 + np.float32(sp[1]), b32, np.float32(e)]
        if not all(np.isfinite(x) for x in v):
            raise ValueError("invalid xIELU parameter")
        out.extend(float(x) for x in v)
    return out


def _hf_rotated_dims(c: dict[str, Any], head_dim: int, default: float, top_key: str, path: str) -> int:
    """The rotated dimensions of a folder's partial NeoX RoPE (Phi-2, StableLM, Nemotron, GPT-NeoX): the rope
    parameters' partial_rotary_factor, else the config's ``top_key`` (GPT-NeoX's older rotary_pct), else
    ``default``, times head_dim; 0 when the whole head rotates (twin of loader.cpp's hf_rotated_dims)."""
    params = c.get("rope_parameters") or {}
    prf = params["partial_rotary_factor"] if "partial_rotary_factor" in params else c.get(top_key)
    prf = default if prf is None else prf
    dims = int(prf * head_dim)
    if not (0 < prf <= 1 and dims >= 2 and dims % 2 == 0):
        what = (
            "partial_rotary_factor"
            if top_key == "partial_rotary_factor"
            else f"partial_rotary_factor / {top_key}"
        )
        raise ValueError(f"invalid {what} in '{path}'")
    return 0 if dims == head_dim else dims


def _gelu_is_exact(act: str, key: str, path: str) -> bool:
    """A GELU MLP's activation (GPT-NeoX, Falcon, GPT-J): True for the exact one ("gelu"), False for the tanh
    approximations; any other refused by name (twin of loader.cpp's gelu_is_exact)."""
    if act not in ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"):
        raise ValueError(f"{key} '{act}' in '{path}' is not supported (gelu or a tanh GELU is)")
    return act == "gelu"


def _unit_norms(
    cfg: dict[str, Any], get: Any, names: set[Any], name_of: Any, final: str
) -> tuple[Any, set[Any]]:
    """OLMo's weightless LayerNorms: ones under the names the norms are taken by (the layers' two and
    the final one), where the file has none; ``get`` and ``names`` with them (twin of loader.cpp's
    Builder::add_unit_norms)."""
    ones = {final} | {name_of(i, f) for i in range(cfg["n_layer"]) for f in ("attn_norm", "ffn_norm")}
    ones -= names

    def get_or_ones(n: str, *args: Any, **kwargs: Any) -> np.ndarray:
        return np.ones(cfg["n_embd"], np.float32) if n in ones else get(n, *args, **kwargs)

    return get_or_ones, names | ones


def _nanochat(
    cfg: dict[str, Any], get: Any, names: set[Any], name_of: Any, final: str, embed: str, path: str
) -> tuple[Any, set[Any]]:
    """nanochat's weights (twin of loader.cpp's nanochat_weights): ones for its weightless norms (the layers',
    the final one, the embeddings', q / k's per head), fc1 / fc2 as up / down, and q_proj's and k_proj's
    rows of each head's second half negated (its RoPE turns the other way: the same scores)."""
    hd, e = cfg["head_dim"], cfg["n_embd"]
    ones = {final: e, embed[: embed.rfind(".weight")] + "_norm.weight": e}
    for i in range(cfg["n_layer"]):
        ones.update({name_of(i, "attn_norm"): e, name_of(i, "ffn_norm"): e, name_of(i, "q_norm"): hd,
                     name_of(i, "k_norm"): hd})  # fmt: skip
    ones = {n: k for n, k in ones.items() if n not in names}
    renamed = {name_of(i, f): name_of(i, f).replace(to, frm) for i in range(cfg["n_layer"])
               for f, to, frm in (("w_up", "up_proj", "fc1"), ("w_down", "down_proj", "fc2"))}  # fmt: skip
    flipped = {name_of(i, "wq"): cfg["n_head"] for i in range(cfg["n_layer"])}
    flipped.update({name_of(i, "wk"): cfg["n_head_kv"] for i in range(cfg["n_layer"])})

    def get_nanochat(n: str, *args: Any, **kwargs: Any) -> np.ndarray:
        if n in ones:
            return np.ones(ones[n], np.float32)
        t = get(renamed[n] if n in renamed and n not in names else n, *args, **kwargs)
        if n in flipped:
            heads = flipped[n]
            if t.ndim != 2 or t.shape[0] != heads * hd or hd % 2:
                raise ValueError(
                    f"tensor '{n}' in '{path}' must be a matrix of heads x head_dim rows (nanochat)"
                )
            t = t.reshape(heads, hd, -1).copy()
            t[:, hd // 2 :] = -t[:, hd // 2 :]
            t = t.reshape(heads * hd, -1)
        return t

    extra = set(ones) | {n for n, old in renamed.items() if old in names}
    return get_nanochat, names | extra


def _weights(
    cfg: dict[str, Any],
    get: Any,
    names: set[Any],
    name_of: Any,
    tok: str,
    norm: str,
    out: str,
    ffn_fused: bool = False,
) -> dict[str, np.ndarray]:
    """The model's tensors by role; ``ffn_fused``: a folder whose dense feed-forward is one [gate | up]
    matrix (Granite 4.0-H's shared MLP; Phi-3's and GLM-4's always are)."""
    q, kv = cfg["n_head"] * cfg["head_dim"], cfg["n_head_kv"] * cfg["head_dim"]
    gguf = tok == "token_embd.weight"
    e, ff, hd = cfg["n_embd"], cfg["n_ff"], cfg["head_dim"]
    w: dict[str, np.ndarray] = {}
    _take(get, names, w, tok, "tok_embd", cfg["n_vocab"], e)
    stem = tok[: tok.rfind(".weight")]
    if cfg["embd_norm"]:  # (BLOOM: token_embd_norm; its folders' word_embeddings_layernorm renamed)
        _take(get, names, w, stem + "_norm.weight", "tok_embd_norm", 1, e)
        if cfg["norm_bias"]:  # (nanochat's RMSNorm has none)
            _take(get, names, w, stem + "_norm.bias", "tok_embd_norm_b", 1, e)
    if cfg["pos_embd"]:  # (GPT-2, StarCoder: position_embd; the folders' wpe renamed)
        pos = "position_embd.weight" if gguf else "model.embed_positions.weight"
        _take(get, names, w, pos, "pos_embd", cfg["n_ctx_train"], e)
    _take(get, names, w, norm, "output_norm", 1, e)
    if cfg["norm_bias"]:  # (StarCoder2: the final LayerNorm's bias, named as its weight)
        _take(get, names, w, norm[: norm.rfind(".weight")] + ".bias", "output_norm_b", 1, e)
    if cfg["tied_embeddings"]:
        w["output"] = w["tok_embd"]
    else:
        _take(get, names, w, out, "output", cfg["n_vocab"], e)
    out_b = out[: out.rfind(".weight")] + ".bias"
    if out_b in names:  # (Phi-2's lm_head bias, tied weights or not)
        _take(get, names, w, out_b, "output_b", 1, cfg["n_vocab"])
    d = cfg["delta"]
    for i in range(cfg["n_layer"]):
        ff = cfg["layer_n_ff"][i] if cfg["layer_n_ff"] else cfg["n_ff"]  # (deci: each layer's own)
        shapes = {"attn_norm": (1, e), "wq": (q, e), "wk": (kv, e), "wv": (kv, e), "wo": (e, q)}
        if cfg["attn_gate_proj"]:  # (AFMoE: the gate's own projection)
            shapes["wg"] = (q, e)
        elif cfg["attn_gate"]:  # (Qwen3.5: [query | gate] per head)
            shapes["wq"] = (2 * q, e)
        # (no attention, no q / k norms)
        recurrent = i in d["layers"] or i in cfg["conv"]["layers"] or i in cfg["ssm"]["layers"]
        if i in cfg["conv"]["layers"]:  # LFM2's short convolution (reference/delta_net.py)
            shapes = {"attn_norm": (1, e), "sc_in": (3 * e, e), "sc_conv": (e, cfg["conv"]["kernel"]),
                      "sc_out": (e, e)}  # fmt: skip
        if i in d["layers"]:  # Qwen3.5's gated delta-net (reference/delta_net.py)
            conv, v_all, heads = 2 * d["n_k_heads"] * d["k_dim"] + d["n_v_heads"] * d["v_dim"], (
                d["n_v_heads"] * d["v_dim"]), d["n_v_heads"]  # fmt: skip
            shapes = {"attn_norm": (1, e), "ssm_qkv": (conv, e), "ssm_z": (v_all, e), "ssm_beta": (heads, e),
                      "ssm_alpha": (heads, e), "ssm_conv": (conv, d["conv_kernel"]), "ssm_dt": (1, heads),
                      "ssm_a": (1, heads), "ssm_norm": (1, d["v_dim"]), "ssm_out": (e, v_all)}  # fmt: skip
        if i in d["layers"]:  # Qwen3-Next's fused projections: rows gathered into Qwen3.5's layout
            _split_fused_delta(d, get, names, w, name_of, i, e, shapes)
        if i in cfg["ssm"]["layers"]:  # Mamba-2 (reference/delta_net.py); GGUF: ssm_a / ssm_d n x 1
            # (Falcon-H1: attention beside the mixer, q / k / v; its wo below)
            attn = {f: shapes[f] for f in ("wq", "wk", "wv", "wo")} if cfg["parallel_ssm"] else {}
            shapes = {**_mamba2_shapes(cfg, gguf), **attn}
        if i in cfg["mamba1"]["layers"]:  # Mamba-1 (reference/delta_net.py)
            shapes = _mamba1_shapes(cfg)
        recurrent = recurrent or i in cfg["mamba1"]["layers"]
        if cfg["mla"]["kv_lora_rank"]:  # DeepSeek's latent attention
            shapes = {"attn_norm": (1, e), **_mla_weights(cfg, get, names, name_of, i, w)}
        no_mixer = bool(cfg["layer_no_mixer"]) and cfg["layer_no_mixer"][i]  # (Nemotron-H's blocks)
        no_ffn = bool(cfg["layer_no_ffn"]) and cfg["layer_no_ffn"][i]
        if no_mixer:  # a feed-forward block: its one norm is the feed-forward's
            shapes, recurrent = {}, True
        if cfg["layer_linear_attn"] and cfg["layer_linear_attn"][i]:  # (deci: wo of the normed input alone)
            shapes, recurrent = {"attn_norm": (1, e), "wo": (e, e)}, True
        if cfg["arch"] in NO_PRE_NORMS or cfg["no_pre_norms"]:
            del shapes["attn_norm"]
        if cfg["arch"] in _FUSED_QKV and name_of(i, "wqkv") in names:  # fused q/k/v, in rows
            _take(get, names, w, name_of(i, "wqkv"), "qkv", q + 2 * kv, e)
            qkv = w.pop("qkv")
            w[f"layers.{i}.wq"], w[f"layers.{i}.wk"], w[f"layers.{i}.wv"] = np.split(qkv, [q, q + kv])
            del shapes["wq"], shapes["wk"], shapes["wv"]
            fused_b = name_of(i, "wqkv")[: name_of(i, "wqkv").rfind(".weight")] + ".bias"
            if cfg["qkv_bias"] and fused_b in names:  # (Phi-2's older files: the biases fused too)
                _take(get, names, w, fused_b, "bqkv", 1, q + 2 * kv)
                b = w.pop("bqkv")
                w[f"layers.{i}.bq"], w[f"layers.{i}.bk"], w[f"layers.{i}.bv"] = np.split(b, [q, q + kv])
        if cfg["qkv_bias"] and not recurrent and f"layers.{i}.bq" not in w:
            shapes.update(bq=(1, q), bk=(1, kv), bv=(1, kv))
        if cfg["qk_norm"] and cfg["arch"] in QK_NORM_FULL:  # OLMo: over the whole projection
            shapes.update(q_norm=(1, q), k_norm=(1, kv))
        elif cfg["qk_norm"] and cfg["qk_norm_heads"]:  # Cohere: a weight row per head
            shapes.update(q_norm=(cfg["n_head"], hd), k_norm=(cfg["n_head_kv"], hd))
        elif cfg["qk_norm"] and not recurrent:
            shapes.update(q_norm=(1, hd), k_norm=(1, hd))
        if cfg["o_bias"]:
            shapes.update(bo=(1, e))
        elif name_of(i, "bo") in names:
            raise ValueError(f"tensor '{name_of(i, 'bo')}' (an attention output bias) is not supported")
        if cfg["attn_sinks"]:
            shapes.update(sinks=(1, cfg["n_head"]))
        if no_ffn:
            ff_shapes: dict[str, tuple[int, int]] = {}
        elif (cfg["ffn_relu2"] or cfg["ffn_gelu"] or cfg["ffn_xielu"]) and i not in cfg["moe"][
            "layers"
        ]:  # up, down
            ff_shapes = {"ffn_norm": (1, e), "w_up": (ff, e), "w_down": (e, ff)}
            if cfg["parallel_block"] and not cfg["parallel_norms"]:  # (Phi-2: the attention's norm for both)
                del ff_shapes["ffn_norm"]
        else:
            no_pre = cfg["arch"] in NO_PRE_NORMS or cfg["no_pre_norms"]
            ff_shapes = {} if no_pre or cfg["parallel_block"] else {"ffn_norm": (1, e)}
        shapes.update(ff_shapes)
        fused = cfg["arch"] in ("phi3", "glm4", "chatglm") or (ffn_fused and not gguf)
        # (gate and up fused, gate first; Granite 4.0-H's folders: the shared MLP's input_linear)
        if cfg["norm_bias"] and not no_mixer:  # (StarCoder2, StableLM: LayerNorm with bias)
            shapes.update(attn_norm_b=(1, e))
            if not cfg["parallel_block"] or cfg["parallel_norms"]:  # (StableLM's parallel residual: one norm)
                shapes.update(ffn_norm_b=(1, e))
        if cfg["ffn_bias"] and not no_ffn:
            shapes.update(b_up=(1, ff), b_down=(1, e))
        if no_ffn or cfg["ffn_relu2"] or cfg["ffn_gelu"] or cfg["ffn_xielu"]:
            pass
        elif fused and i not in cfg["moe"]["layers"]:
            _take(get, names, w, name_of(i, "w_gate_up"), "gate_up", 2 * ff, e)
            w[f"layers.{i}.w_gate"], w[f"layers.{i}.w_up"] = np.split(w.pop("gate_up"), [ff])
            shapes.update(w_down=(e, ff))
        elif i not in cfg["moe"]["layers"]:  # a MoE layer's experts: moe.*_layer_weights
            shapes.update(w_gate=(ff, e), w_up=(ff, e), w_down=(e, ff))
        if (cfg["arch"] in POST_NORMS or cfg["no_pre_norms"]) and not cfg["no_post_norms"]:
            shapes.update(post_attn_norm=(1, e), post_ffn_norm=(1, e))
        if cfg["sub_norms"]:  # (BitNet: the norms before wo and w_down)
            shapes.update(attn_sub_norm=(1, q), ffn_sub_norm=(1, ff))
        for field, (r, c) in shapes.items():
            _take(get, names, w, name_of(i, field), f"layers.{i}.{field}", r, c)
        for field in ("ssm_a", "ssm_d", "ssm_norm"):  # (GGUF's Mamba-2 vectors, stored n x 1 / groups)
            if i in cfg["ssm"]["layers"] and f"layers.{i}.{field}" in w:
                w[f"layers.{i}.{field}"] = w[f"layers.{i}.{field}"].reshape(-1)
    return w


def _split_fused_delta(
    d: dict[str, Any],
    get: Any,
    names: set[Any],
    w: dict[str, np.ndarray],
    name_of: Any,
    i: int,
    e: int,
    shapes: dict[str, tuple[int, int]],
) -> None:
    """Qwen3-Next (twin of build_delta_weights' gathering): in_proj_qkvz (GGUF's older ssm_in) holds
    [q_g | k_g | v_g | z_g] per key head g, in_proj_ba (ssm_ba) [b_g | a_g]; taken into ssm_qkv = [q | k |
    v], ssm_z, ssm_beta and ssm_alpha (value heads grouped by key head, as HF's), their shapes dropped."""
    nk, kd, vd, r = d["n_k_heads"], d["k_dim"], d["v_dim"], d["n_v_heads"] // d["n_k_heads"]
    p = f"layers.{i}."
    if name_of(i, "ssm_qkvz") in names:
        _take(get, names, w, name_of(i, "ssm_qkvz"), "qkvz", nk * (2 * kd + 2 * r * vd), e)
        group = 2 * kd + 2 * r * vd
        q, k, v, z = np.split(w.pop("qkvz").reshape(nk, group, e), [kd, 2 * kd, 2 * kd + r * vd], 1)
        w[p + "ssm_qkv"] = np.concatenate([q.reshape(-1, e), k.reshape(-1, e), v.reshape(-1, e)])
        w[p + "ssm_z"] = z.reshape(-1, e)
        del shapes["ssm_qkv"], shapes["ssm_z"]
    if name_of(i, "ssm_ba") in names:
        _take(get, names, w, name_of(i, "ssm_ba"), "ba", 2 * nk * r, e)
        b, a = np.split(w.pop("ba").reshape(nk, 2 * r, e), [r], 1)
        w[p + "ssm_beta"], w[p + "ssm_alpha"] = b.reshape(-1, e), a.reshape(-1, e)
        del shapes["ssm_beta"], shapes["ssm_alpha"]


def _mamba1_shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """A Mamba-1 layer's tensors (twin of build_mamba1_weights)."""
    m, e = cfg["mamba1"], cfg["n_embd"]
    d, n, r = m["d_inner"], m["d_state"], m["dt_rank"]
    shapes = {"attn_norm": (1, e), "ssm_in": (2 * d, e), "ssm_conv": (d, m["conv_kernel"]),
              "ssm_x": (r + 2 * n, d), "ssm_dt_w": (d, r), "ssm_dt": (1, d), "ssm_a": (d, n), "ssm_d": (1, d),
              "ssm_out": (e, d)}  # fmt: skip
    if m["conv_bias"]:
        shapes["ssm_conv_b"] = (1, d)
    if m["dt_b_c_weights"]:  # (Jamba)
        shapes.update(ssm_dt_norm=(1, r), ssm_b_norm=(1, n), ssm_c_norm=(1, n))
    return shapes


def _mamba2_shapes(cfg: dict[str, Any], gguf: bool) -> dict[str, tuple[int, int]]:
    """A Mamba-2 layer's tensors (twin of build_mamba2_weights): GGUF stores ssm_a and ssm_d as n x 1 and
    ssm_norm as n_groups rows."""
    m, e = cfg["ssm"], cfg["n_embd"]
    h, d, g = m["n_heads"], m["d_inner"], m["n_groups"]
    conv = d + 2 * g * m["d_state"]
    shapes = {"attn_norm": (1, e), "ssm_in": (d + conv + h, e), "ssm_conv": (conv, m["conv_kernel"]),
              "ssm_dt": (1, h), "ssm_a": (h, 1) if gguf else (1, h), "ssm_d": (h, 1) if gguf else (1, h),
              "ssm_norm": (g, d // g) if gguf and g > 1 else (1, d), "ssm_out": (e, d)}  # fmt: skip
    if not m["gated_norm"]:  # (Falcon-H1's mixers may have no norm)
        del shapes["ssm_norm"]
    if m["conv_bias"]:
        shapes["ssm_conv_b"] = (1, conv)
    return shapes


def _mla_weights(
    cfg: dict[str, Any], get: Any, names: set[Any], name_of: Any, i: int, w: dict[str, np.ndarray]
) -> dict[str, tuple[int, int]]:
    """Layer i's latent attention (twin of loader.cpp's build_mla_weights): the per-head up-projections
    wk_b.{h} (C x N, applied to q) and wv_b.{h} (V x C), from GGUF's attn_k_b / attn_v_b, or from the
    fused kv_b ([H*(N+V)] x C: HF's kv_b_proj), whose K rows are transposed; returns the shapes of the
    other tensors for ``_weights`` to take."""
    a, e, h_n = cfg["mla"], cfg["n_embd"], cfg["n_head"]
    n_, r_, v_, c_ = a["qk_nope"], a["qk_rope"], a["v_head_dim"], a["kv_lora_rank"]
    p = f"layers.{i}."
    if name_of(i, "wk_b") in names and name_of(i, "wv_b") in names:
        _take(get, names, w, name_of(i, "wk_b"), "kb", h_n * c_, n_)
        _take(get, names, w, name_of(i, "wv_b"), "vb", h_n * v_, c_)
        kb, vb = w.pop("kb").reshape(h_n, c_, n_), w.pop("vb").reshape(h_n, v_, c_)
    else:
        _take(get, names, w, name_of(i, "wkv_b"), "kvb", h_n * (n_ + v_), c_)
        kvb = w.pop("kvb").reshape(h_n, n_ + v_, c_)
        kb, vb = kvb[:, :n_].transpose(0, 2, 1), kvb[:, n_:]
    for h in range(h_n):
        w[f"{p}wk_b.{h}"], w[f"{p}wv_b.{h}"] = np.ascontiguousarray(kb[h]), vb[h]
    shapes = {"wkv_a": (c_ + r_, e), "kv_a_norm": (1, c_), "wo": (e, h_n * v_)}
    if a["q_lora_rank"]:
        ql = a["q_lora_rank"]
        shapes.update(wq_a=(ql, e), q_a_norm=(1, ql), wq_b=(h_n * (n_ + r_), ql))
    else:
        shapes.update(wq=(h_n * (n_ + r_), e))
    return shapes


def load_weights(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Load a GGUF file or HF folder into (config dict, canonical name -> float32 array)."""
    if os.path.isdir(path):
        return _load_hf(path)
    return _load_gguf(path)


def _load_gguf(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    g = read_gguf_model(path)  # every shard of a split model
    md = g.metadata
    arch = md.get("general.architecture", "")
    if arch not in ARCHS:
        raise ValueError(f"unknown architecture '{arch}' in '{path}' {_SUPPORTED}")
    k = arch + "."
    # (no attention: Mamba-2's heads and inner size stand in, unused; Mamba-1 one head of d_inner)
    mamba2, mamba1 = arch == "mamba2", arch == "mamba"
    n_embd = md.get(k + "embedding_length", 0)
    n_head = 1 if mamba1 else md.get(k + ("ssm.time_step_rank" if mamba2 else "attention.head_count"), 0)
    heads_list = n_head if isinstance(n_head, list) and arch == "deci" else None  # (deci: one per layer)
    if heads_list is not None:
        n_head = max(heads_list, default=0)
    inner = md.get(k + "ssm.inner_size", 0)
    mamba2 = mamba2 or mamba1  # (the same stand-ins)
    default_head_dim = (
        (inner // n_head if n_head else 0)
        if mamba2
        else n_embd // n_head
        if n_head and n_embd % n_head == 0
        else 0
    )
    head_dim = md.get(k + "attention.key_length", default_head_dim)
    embd = g.tensors.get("token_embd.weight")
    scaling_type = md.get(k + "rope.scaling.type", "none")
    scaling: dict[str, Any] = {}
    if k + "rope.scale_linear" in md and scaling_type == "none":
        scaling_type, scaling["factor"] = "linear", md[k + "rope.scale_linear"]
    if scaling_type in ("linear", "llama3"):
        scaling = {
            "type": scaling_type,
            "factor": md.get(k + "rope.scaling.factor", scaling.get("factor", 1.0)),
            "low_freq_factor": md.get(k + "rope.scaling.low_freq_factor", 1.0),
            "high_freq_factor": md.get(k + "rope.scaling.high_freq_factor", 4.0),
            "original_max_position": md.get(k + "rope.scaling.original_context_length", 8192),
        }
    elif scaling_type == "yarn":  # llama.cpp: cos/sin times attn_factor and 1 + 0.1 ln(factor)
        factor = md.get(k + "rope.scaling.factor", 1.0)
        mscale = 1 + 0.1 * math.log(factor) if factor > 1 else 1.0
        scaling = {
            "type": "yarn", "factor": factor,
            "original_max_position": md.get(
                k + "rope.scaling.original_context_length", md.get(k + "context_length", 4096)
            ),
            "beta_fast": md.get(k + "rope.scaling.yarn_beta_fast", 32.0),
            "beta_slow": md.get(k + "rope.scaling.yarn_beta_slow", 1.0),
            "attn_factor": md.get(k + "rope.scaling.attn_factor", 1.0) * mscale,
        }  # fmt: skip
        yarn_attn = md.get(k + "rope.scaling.yarn_attn_factor", 0.0)  # (newer converters: the config's own)
        if yarn_attn:
            if not (np.isfinite(yarn_attn) and yarn_attn > 0):
                raise ValueError(f"invalid {k}rope.scaling.yarn_attn_factor in '{path}'")
            scaling["attn_factor"] = yarn_attn
    elif scaling_type != "none" and not (
        scaling_type == "longrope" and arch in ("phi3", "phimoe", "minicpm3", "minicpm")
    ):  # (LongRoPE: from the rope factor tensors, below)
        raise ValueError(f"unsupported rope scaling type '{scaling_type}' in '{path}'")
    common = dict(
        n_vocab=md.get(k + "vocab_size", embd.ne[1] if embd is not None and len(embd.ne) > 1 else 0),
        n_embd=n_embd,
        n_layer=md.get(k + "block_count", 0),
        n_head=n_head,
        # (LFM2: one count per layer, 0 for its convolution layers)
        n_head_kv=max(kv_list)
        if (kv_list := md.get(k + "attention.head_count_kv")) and isinstance(kv_list, list)
        else md.get(k + "attention.head_count_kv", n_head),
        head_dim=head_dim,
        # (Nemotron-H: one size per layer, 0 where a block has no feed-forward; Mamba-2's 0, unused)
        n_ff=inner
        if mamba2
        else (max(ff) or n_embd)  # (a Nemotron-H file without feed-forward blocks: unused)
        if isinstance(ff := md.get(k + "feed_forward_length"), list) and ff
        else md.get(k + "feed_forward_length", md.get(k + "expert_feed_forward_length", 0)),
        n_ctx_train=min(md.get(k + "context_length", 4096), 1 << 30),
        # (Nemotron-H's converter writes its RMSNorm's epsilon under the plain layer-norm key)
        rms_eps=md.get(
            k + "attention.layer_norm_rms_epsilon",
            md.get(k + "attention.layer_norm_epsilon", 1e-5) if arch in NEMOTRON_H else 1e-5,
        ),
        rope_theta=md.get(k + "rope.freq_base", 10000.0),
        rope_scaling=scaling,
        rope_style="interleaved"
        if arch
        in (
            "llama",
            "mistral",
            "mistral3",
            "smollm3",
            "granite",
            "granitemoe",
            "ernie4_5",
            "ernie4_5-moe",
            "granitehybrid",
            "arcee",
            "olmo",
            "gptj",
            "minicpm",
            "internlm2",
            "deepseek",
            "deci",
        )
        else "neox",
        qkv_bias=arch == "qwen2" or "blk.0.attn_q.bias" in g.tensors,
        qk_norm=arch in QK_NORM,
        tied_embeddings="output.weight" not in g.tensors,
        clamp_qkv=float(np.float32(md.get(k + "attention.clamp_kqv", 0.0))),
    )
    names = set(g.tensors)
    if arch in ("gemma4", "gemma3n"):
        freqs = g.tensor("rope_freqs.weight").reshape(-1) if "rope_freqs.weight" in names else None
        common["n_head"] = md.get(k + "attention.head_count", 0)
        routers = [i for i in range(md.get(k + "block_count", 0)) if f"blk.{i}.ffn_gate_inp.weight" in names]
        kw = arch_config.gemma4_gguf(md, common, freqs, routers, arch)
        if arch == "gemma3n":  # (LAuReL's rank from its first matrix)
            if "blk.0.laurel_l.weight" not in names:
                raise ValueError("missing tensor 'blk.0.laurel_l.weight'")
            kw["laurel_rank"] = int(g.tensor("blk.0.laurel_l.weight").reshape(-1, kw["n_embd"]).shape[0])
        cfg = _config(arch, **kw)
        cfg["tied_embeddings"] = "output.weight" not in names
        globals_ = dict(_GEMMA4_GLOBALS_GGUF, output="output.weight")
        layer = dict(_GGUF_LAYER, **_GEMMA4_GGUF)
        w = _gemma4_weights(cfg, g.tensor, names, lambda i, f: f"blk.{i}.{layer[f]}", globals_)
        if freqs is not None:
            w["rope_freqs"] = freqs
        return cfg, w
    if arch in GEMMA:  # norms stored as 1 + w by llama.cpp's converter
        common.update(arch_config.gemma3_gguf(md, common, arch))
    if arch in ("phi3", "phimoe"):
        common.update(arch_config.phi3_gguf(md, common, g.tensor, names, arch))
        if arch == "phimoe":  # (Phi-3's attention with LayerNorms and biases)
            common.update(layer_norm=True, norm_bias=True, o_bias="blk.0.attn_output.bias" in names)
    elif arch not in (*GEMMA, "exaone-moe"):  # (EXAONE MoE's: after its MTP layers are left out)
        common.update(arch_config.window_gguf(arch, md, common["n_layer"]))
    if arch == "olmo2" and common.get("sliding_window"):  # (OLMo 3: sliding layers unscaled, their own base)
        local = md.get(k + "rope.freq_base_swa", common["rope_theta"])
        if (common.get("rope_scaling") or {}).get("type", "none") != "none" or local != common["rope_theta"]:
            common["rope_theta_swa"] = float(np.float32(local))
    if arch == "smollm3":
        common.update(arch_config.smollm3_gguf(common["n_layer"]))
    if arch == "exaone4":
        common.update(arch_config.exaone4_gguf(md, common["n_layer"]))
    if arch == "exaone-moe":  # (window, NoPE global layers, the MTP layers left out)
        common.update(arch_config.exaone_moe_gguf(md, common["n_layer"]))
    if arch in ("granite", "granitemoe"):
        common.update(arch_config.granite_gguf(md, arch))
    if arch == "gpt-oss":
        common.update(arch_config.gpt_oss_gguf(md, common, "blk.0.attn_output.bias" in names))
    if arch in ("seed_oss", "internlm2", "deepseek"):
        common["o_bias"] = "blk.0.attn_output.bias" in names
    if arch == "arcee":  # (AFM: down(relu(up x)^2), no gate)
        common["ffn_relu2"] = True
    if arch in ("phi2", "stablelm", "nemotron", "gptneox", "gptj"):  # (the file's rotated dimensions)
        dims = md.get(k + "rope.dimension_count", common["head_dim"])
        common["rope_dim"] = arch_config.rotated(dims, common["head_dim"])
    if arch == "phi2":  # (Cohere's parallel block, LayerNorm with bias, GELU MLP, biases)
        common.update(layer_norm=True, norm_bias=True, ffn_gelu=True, ffn_bias=True, parallel_block=True,
                      o_bias=True, rms_eps=md.get(k + "attention.layer_norm_epsilon", 1e-5))  # fmt: skip
    if arch == "stablelm":  # (LayerNorm with bias, partial RoPE; parallel where no ffn_norm)
        qk = "blk.0.attn_q_norm.weight" in names
        eps = md.get(k + "attention.layer_norm_epsilon", 1e-5)
        common.update(layer_norm=True, norm_bias=True, rms_eps=eps,
                      qk_norm=qk, qk_norm_heads=qk,
                      parallel_block="blk.0.ffn_norm.weight" not in names)  # fmt: skip
    if arch == "nemotron":  # (LayerNorm with bias stored 1 + w, relu^2 MLP, partial NeoX RoPE)
        common.update(layer_norm=True, norm_bias=True, ffn_relu2=True,
                      o_bias="blk.0.attn_output.bias" in names,
                      rms_eps=md.get(k + "attention.layer_norm_epsilon", 1e-5))  # fmt: skip
    if arch == "jais2":  # (LayerNorms with bias, relu^2 MLP with biases, NeoX RoPE)
        common.update(layer_norm=True, norm_bias=True, ffn_relu2=True,
                      ffn_bias="blk.0.ffn_up.bias" in names, o_bias="blk.0.attn_output.bias" in names,
                      rms_eps=md.get(k + "attention.layer_norm_epsilon", 1e-5))  # fmt: skip
    if arch == "olmo":  # (weightless LayerNorms: ones; clamp_kqv read above)
        common.update(layer_norm=True, rms_eps=md.get(k + "attention.layer_norm_epsilon", 1e-5))
    if arch == "gptj":  # (Phi-2's parallel block; RoPE on interleaved pairs of rotary_dim)
        common.update(layer_norm=True, norm_bias=True, ffn_gelu=True, ffn_bias=True, parallel_block=True,
                      rms_eps=md.get(k + "attention.layer_norm_epsilon", 1e-5))  # fmt: skip
    if arch in ("bloom", "mpt", "gpt2", "starcoder"):  # (ALiBi or learned positions, LayerNorms, GELU MLP)
        common.update(arch_config.gpt_classic_gguf(arch, md, common, names))
    if arch == "afmoe":  # (window, the global layers NoPE, the attention's gate, the embedding scale)
        common.update(arch_config.afmoe_gguf(md, common))
    if arch == "dbrx":  # (LayerNorms without bias, fused q / k / v, clamp_kqv read above)
        common.update(layer_norm=True, rms_eps=md.get(k + "attention.layer_norm_epsilon", 1e-5))
    if arch == "apertus":  # (xIELU MLPs: the parameters per layer under llama.cpp's keys, no arch prefix)
        n = common["n_layer"]

        def per_layer(key: str) -> list[float]:
            if key not in md:
                raise ValueError(f"missing key '{key}' in '{path}'")
            v = md[key]
            values = [float(x) for x in v] if isinstance(v, list) else [float(v)] * n
            if len(values) != n:
                raise ValueError(f"key '{key}' in '{path}' must hold {n} values")
            return values

        common.update(ffn_xielu=True, xielu=xielu_applied(*(per_layer(f"xielu.{f}") for f in XIELU_FIELDS)))
    if arch == "falcon":  # (llama.cpp's files: always the parallel block, 40B's second norm as attn_norm_2)
        common.update(layer_norm=True, norm_bias=True, ffn_gelu=True, gelu_erf=True, parallel_block=True,
                      parallel_norms="blk.0.attn_norm_2.weight" in names,
                      ffn_bias="blk.0.ffn_up.bias" in names,
                      qkv_bias="blk.0.attn_qkv.bias" in names, o_bias="blk.0.attn_output.bias" in names,
                      rms_eps=md.get(k + "attention.layer_norm_epsilon", 1e-5))  # fmt: skip
    if arch == "gptneox":  # (LayerNorms with bias, fused q / k / v, exact-GELU MLP, biases; parallel)
        parallel = bool(md.get(k + "use_parallel_residual", True))
        common.update(layer_norm=True, norm_bias=True, ffn_gelu=True, gelu_erf=True,
                      ffn_bias="blk.0.ffn_up.bias" in names, qkv_bias="blk.0.attn_qkv.bias" in names,
                      o_bias="blk.0.attn_output.bias" in names, parallel_block=parallel,
                      parallel_norms=parallel,
                      rms_eps=md.get(k + "attention.layer_norm_epsilon", 1e-5))  # fmt: skip
    if arch == "starcoder2":  # (LayerNorm with bias, GELU MLP; biases where the file has them)
        common.update(layer_norm=True, norm_bias=True, ffn_gelu=True, ffn_bias="blk.0.ffn_up.bias" in names,
                      o_bias="blk.0.attn_output.bias" in names,
                      rms_eps=md.get(k + "attention.layer_norm_epsilon", 1e-5))  # fmt: skip
    if arch in ("hunyuan-dense", "hunyuan-moe"):  # (q / k norms after RoPE; the NTK-alpha base in the file's)
        common.update(qk_norm=True, qk_norm_after_rope=True)
    if arch == "deepseek2":
        common.update(arch_config.deepseek2_gguf(md, common))
    if arch == "minicpm3":  # (the latent attention, LongRoPE's tensors, llama.cpp's fixed multipliers)
        common.update(arch_config.minicpm3_gguf(md, common, g.tensor, names))
    if arch == "minicpm":  # (Granite's multipliers under minicpm.*, LongRoPE's tensors)
        common.update(arch_config.minicpm_gguf(md, common, g.tensor, names))
    if arch in (
        "glm4moe",
        "bailingmoe2",
    ):  # (Ling 2.0: GLM-4.5's layers, q / k / v fused as llama.cpp keeps them)
        common.update(arch_config.glm4moe_gguf(md, common, names, arch))
    if arch in ("glm4", "chatglm"):
        common.update(arch_config.glm4_gguf(md, common, arch))
    if arch == "chatglm":  # (ChatGLM3 / GLM-4-9B: q / k / v fused or not, biases either way)
        common["qkv_bias"] = "blk.0.attn_q.bias" in names or "blk.0.attn_qkv.bias" in names
    if arch in ("mistral3", "deepseek2"):  # Llama 4's attention temperature, where llama.cpp reads it
        common.update(arch_config.temperature_gguf(arch, md))
    if arch == "mistral3":
        common.update(arch_config.mistral3_gguf(md, common))
    if arch == "llama4":  # NoPE layers, chunks, temperature
        common.update(arch_config.llama4_gguf(md, common["n_layer"], common["rope_theta"]))
    if arch == "minimax-m2":  # q / k norms over all heads, partial RoPE
        common.update(arch_config.minimax_gguf(md, common["head_dim"]))
    if arch in ("command-r", "cohere2"):  # LayerNorm, parallel blocks, logit scale
        common.update(
            arch_config.cohere_gguf(arch, md, common["n_layer"], "blk.0.attn_q_norm.weight" in g.tensors)
        )
    if arch in QWEN35:
        common.update(arch_config.qwen35_gguf(arch, md, common))
    kv_list = md.get(k + "attention.head_count_kv")
    if isinstance(kv_list, list) and arch not in (*LFM2, "granitehybrid", *NEMOTRON_H, "jamba", "deci"):
        raise ValueError(f"per-layer attention.head_count_kv in '{path}' is not supported")
    if arch in LFM2:
        common.update(arch_config.lfm2_gguf(arch, md, common, kv_list if isinstance(kv_list, list) else None))
    if arch == "granitehybrid":
        kvs = kv_list if isinstance(kv_list, list) else None
        common.update(arch_config.granitehybrid_gguf(md, common, kvs, set(g.tensors)))
    if arch in NEMOTRON_H:
        ff_list = md.get(k + "feed_forward_length")
        common.update(arch_config.nemotronh_gguf(arch, md, common, kv_list, ff_list, set(g.tensors)))
    if arch == "mamba2":
        common.update(arch_config.mamba2_gguf(md, common["n_layer"], set(g.tensors)))
    if arch == "mamba":
        common.update(arch_config.mamba1_gguf(md, common, set(g.tensors)))
    if arch == "jamba":
        common.update(arch_config.jamba_gguf(md, common, kv_list, set(g.tensors)))
    if arch == "falcon-h1":
        common.update(arch_config.falconh1_gguf(md, common["n_layer"], set(g.tensors)))
    if arch == "deci":  # (per-layer shapes; a scalar key: that value in every layer)
        n, ff_list = common["n_layer"], md.get(k + "feed_forward_length")
        lists = [list(v) if isinstance(v, list) else [all_] * n
                 for v, all_ in ((heads_list, common["n_head"]), (kv_list, common["n_head_kv"]),
                                 (ff_list, common["n_ff"]))]  # fmt: skip
        common.update(arch_config.deci_layers(common, lists[0], lists[1], lists[2], f"'{path}'"))
    if "rope_freqs.weight" in names:  # (twin of loader.cpp's rope_freqs_gguf: llama.cpp's Llama-3 scaling)
        half = (common.get("rope_dim") or common["head_dim"]) // 2
        freqs = g.tensor("rope_freqs.weight").reshape(-1)
        if freqs.size != half:
            raise ValueError(
                f"tensor 'rope_freqs.weight' in '{path}' has shape mismatch: {freqs.size} != {half}"
            )
        if not all(np.isfinite(freqs) & (freqs > 0)):
            raise ValueError(f"invalid rope_freqs value in '{path}'")
        common["rope_freqs"] = [float(np.float32(f)) for f in freqs]
        if (common.get("rope_scaling") or {}).get("type") == "llama3":
            common["rope_scaling"] = {}
    cfg = _config(arch, **common)
    cfg["moe"] = moe_twin.gguf_config(arch, md, cfg["n_layer"], cfg["n_ff"], names, cfg["n_vocab"])
    post = arch in ("gpt-oss", "seed_oss") or arch in QWEN35  # (their pre-FFN norm: post_attention_norm)
    layer = dict(_GGUF_LAYER, ffn_norm="post_attention_norm.weight") if post else _GGUF_LAYER
    if arch in NEMOTRON_H:  # (every block's one norm is attn_norm)
        layer = dict(_GGUF_LAYER, ffn_norm="attn_norm.weight")
    if arch == "falcon" and cfg["parallel_norms"]:  # (40B, as llama.cpp's converter: ln_attn as attn_norm_2)
        layer = dict(_GGUF_LAYER, attn_norm="attn_norm_2.weight", attn_norm_b="attn_norm_2.bias",
                     ffn_norm="attn_norm.weight", ffn_norm_b="attn_norm.bias")  # fmt: skip
    if arch == "dbrx":  # (llama.cpp's converter: the pre-FFN norm as attn_output_norm)
        layer = dict(_GGUF_LAYER, ffn_norm="attn_output_norm.weight")
    if arch == "falcon-h1" and "blk.0.ffn_norm" in names:  # (llama.cpp's name for it: no .weight)
        layer = dict(_GGUF_LAYER, ffn_norm="ffn_norm")
    final_norm = "token_embd_norm.weight" if arch in LFM2 else "output_norm.weight"  # (LFM2's name for it)
    get, gguf_name = g.tensor, lambda i, f: f"blk.{i}.{layer[f]}"
    if arch == "olmo":
        get, names = _unit_norms(cfg, get, names, gguf_name, final_norm)
    w = _weights(cfg, get, names, gguf_name, "token_embd.weight", final_norm, "output.weight")
    for i in cfg["moe"]["layers"]:
        moe_twin.gguf_layer_weights(cfg, i, g.tensor, names, w)
    return cfg, w


_GEMMA_TYPES = ("gemma", "gemma2", "gemma3", "gemma3_text", "gemma4", "gemma4_text", "GemmaForCausalLM",
                "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma4ForCausalLM",
                "Gemma3ForConditionalGeneration", "Gemma4ForConditionalGeneration", "gemma3n",
                "gemma3n_text", "Gemma3nForCausalLM", "Gemma3nForConditionalGeneration", "vaultgemma",
                "VaultGemmaForCausalLM")  # fmt: skip


def _text_wrapper(c: dict[str, Any]) -> bool:
    """A vision-language folder read for its language model (twin of loader.cpp's text_wrapper): the
    listed ones, and any other whose own type ossa does not run but whose text_config is a language
    model it does (LLaVA, InternVL, Aya Vision, SmolVLM, ...)."""
    own, text = c.get("model_type"), c.get("text_config")
    text_type = text.get("model_type") if isinstance(text, dict) else None
    if (
        isinstance(own, str) and own and own not in _HF_ARCHS and own not in _GEMMA_TYPES
        and isinstance(text_type, str) and (text_type in _HF_ARCHS or text_type in _GEMMA_TYPES)
    ):  # fmt: skip
        return True
    return c.get("model_type") in (
        "mistral3",
        "qwen3_5",
        "qwen3_5_moe",
        "llama4",
        "qwen3_vl",
        "qwen3_vl_moe",
        "qwen2_vl",
        "qwen2_5_vl",
        "lfm2_vl",
    ) or (c.get("architectures") or [""])[0] in (
        "Mistral3ForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Llama4ForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        "Qwen2VLForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration",
        "Lfm2VlForConditionalGeneration",
    )


# GPT-NeoX's names as Llama's (each part replaced where found; twin of loader.cpp's gpt_neox_names).
_GPT_NEOX_PARTS = (
    ("gpt_neox.layers.", "model.layers."), (".attention.query_key_value.", ".self_attn.qkv_proj."),
    (".attention.dense.", ".self_attn.o_proj."), (".mlp.dense_h_to_4h.", ".mlp.up_proj."),
    (".mlp.dense_4h_to_h.", ".mlp.down_proj."), ("gpt_neox.embed_in.", "model.embed_tokens."),
    ("gpt_neox.final_layer_norm.", "model.norm."), ("embed_out.", "lm_head."),
)  # fmt: skip

_HUNYUAN_PARTS = ((".self_attn.query_layernorm.", ".self_attn.q_norm."),
                  (".self_attn.key_layernorm.", ".self_attn.k_norm."))  # fmt: skip
_GPTJ_PARTS = (
    ("transformer.h.", "model.layers."), (".ln_1.", ".input_layernorm."),
    (".attn.out_proj.", ".self_attn.o_proj."), (".attn.", ".self_attn."), (".mlp.fc_in.", ".mlp.up_proj."),
    (".mlp.fc_out.", ".mlp.down_proj."),
    ("transformer.wte.", "model.embed_tokens."), ("transformer.ln_f.", "model.norm."),
)  # fmt: skip
_FALCON_PARTS = (
    ("transformer.h.", "model.layers."), (".self_attention.query_key_value.", ".self_attn.qkv_proj."),
    (".self_attention.dense.", ".self_attn.o_proj."), (".mlp.dense_h_to_4h.", ".mlp.up_proj."),
    (".mlp.dense_4h_to_h.", ".mlp.down_proj."), (".ln_attn.", ".input_layernorm."),
    (".ln_mlp.", ".post_attention_layernorm."), ("transformer.word_embeddings.", "model.embed_tokens."),
    ("transformer.ln_f.", "model.norm."),
)  # fmt: skip


def _falcon_kv_heads(c: dict[str, Any], heads: int) -> int:
    """Falcon's K/V heads: num_kv_heads (default every head) for the new decoder architecture or without
    multi_query, else one (twin of loader.cpp's falcon_kv_heads)."""
    kv = c.get("num_kv_heads") or heads
    new, multi = c.get("new_decoder_architecture") or False, c.get("multi_query", True) is not False
    return int(kv) if new or not multi else 1


_GPT2_PARTS = (
    ("transformer.h.", "model.layers."), (".ln_1.", ".input_layernorm."),
    (".ln_2.", ".post_attention_layernorm."), (".attn.c_attn.", ".self_attn.qkv_proj."),
    (".attn.c_proj.", ".self_attn.o_proj."), (".mlp.c_fc.", ".mlp.up_proj."),
    (".mlp.c_proj.", ".mlp.down_proj."),
    ("transformer.wte.", "model.embed_tokens."), ("transformer.wpe.", "model.embed_positions."),
    ("transformer.ln_f.", "model.norm."),
)  # fmt: skip


def _gpt2_bare(name: str) -> str | None:
    """GPT-2's oldest folders without the transformer. prefix, read as with it; None for the causal-mask
    buffers (attn.bias, attn.masked_bias; twin of loader.cpp's gpt2_transpose)."""
    if name.startswith("h."):
        name = "model.layers." + name[2:]
    bare_names = (
        ("wte.", "model.embed_tokens."), ("wpe.", "model.embed_positions."), ("ln_f.", "model.norm."),
    )  # fmt: skip
    for bare, to in bare_names:
        if name.startswith(bare):
            name = to + name[len(bare) :]
    return None if name.endswith(".attn.bias") or ".attn.masked_bias" in name else name


# Families whose folders hold Llama's tensors under other names: each part replaced where found, in order
# (twin of loader.cpp's family_names).
_FAMILY_PARTS: dict[str, tuple[tuple[str, str], ...]] = {
    "phi": ((".self_attn.dense.", ".self_attn.o_proj."), (".mlp.fc1.", ".mlp.up_proj."),
            (".mlp.fc2.", ".mlp.down_proj."), ("model.final_layernorm.", "model.norm.")),
    "starcoder2": ((".mlp.c_fc.", ".mlp.up_proj."), (".mlp.c_proj.", ".mlp.down_proj.")),
    "hunyuan_v1_dense": _HUNYUAN_PARTS,
    "apertus": ((".attention_layernorm.", ".input_layernorm."),
                (".feedforward_layernorm.", ".post_attention_layernorm.")),
    "param2moe": (("model.word_embeddings.", "model.embed_tokens."),
                  (".attention.query_key_value.", ".self_attn.qkv_proj."),
                  (".attention.dense.", ".self_attn.o_proj."),
                  (".attention.query_layernorm.", ".self_attn.q_norm."),
                  (".attention.key_layernorm.", ".self_attn.k_norm."),
                  (".mlp.gate.expert_bias", ".mlp.gate.e_score_correction_bias")),
    "hunyuan_v1_moe": (*_HUNYUAN_PARTS, (".mlp.gate.wg.", ".mlp.gate."),
                       (".mlp.shared_mlp.", ".mlp.shared_experts.")),
    "gpt_neox": _GPT_NEOX_PARTS, "falcon": _FALCON_PARTS, "gptj": _GPTJ_PARTS, "codegen": _GPTJ_PARTS,
    "bloom": (("transformer.h.", "model.layers."),
              (".self_attention.query_key_value.", ".self_attn.qkv_proj."),
              (".self_attention.dense.", ".self_attn.o_proj."), (".mlp.dense_h_to_4h.", ".mlp.up_proj."),
              (".mlp.dense_4h_to_h.", ".mlp.down_proj."),
              ("transformer.word_embeddings_layernorm.", "model.embed_tokens_norm."),
              ("transformer.word_embeddings.", "model.embed_tokens."), ("transformer.ln_f.", "model.norm.")),
    "mpt": (("transformer.blocks.", "model.layers."), (".norm_1.", ".input_layernorm."),
            (".norm_2.", ".post_attention_layernorm."), (".attn.Wqkv.", ".self_attn.qkv_proj."),
            (".attn.out_proj.", ".self_attn.o_proj."), (".ffn.up_proj.", ".mlp.up_proj."),
            (".ffn.down_proj.", ".mlp.down_proj."), ("transformer.wte.", "model.embed_tokens."),
            ("transformer.norm_f.", "model.norm.")),
    "gpt2": _GPT2_PARTS, "gpt_bigcode": _GPT2_PARTS,
    # (OPT: older uploads without the model. prefix read as with it; GPT-Neo: nn.Linear weights)
    "opt": (("model.decoder.", "decoder."), ("decoder.layers.", "model.layers."),
            ("decoder.final_layer_norm.", "model.norm."), ("decoder.embed_tokens.", "model.embed_tokens."),
            ("decoder.embed_positions.", "model.embed_positions."),
            (".self_attn_layer_norm.", ".input_layernorm."),
            (".final_layer_norm.", ".post_attention_layernorm."),
            (".self_attn.out_proj.", ".self_attn.o_proj."), (".fc1.", ".mlp.up_proj."),
            (".fc2.", ".mlp.down_proj.")),
    "gpt_neo": (("transformer.h.", "model.layers."), (".ln_1.", ".input_layernorm."),
                (".ln_2.", ".post_attention_layernorm."), (".attn.attention.out_proj.", ".self_attn.o_proj."),
                (".attn.attention.", ".self_attn."), (".mlp.c_fc.", ".mlp.up_proj."),
                (".mlp.c_proj.", ".mlp.down_proj."), ("transformer.wte.", "model.embed_tokens."),
                ("transformer.wpe.", "model.embed_positions."), ("transformer.ln_f.", "model.norm.")),
    "dbrx": (("transformer.blocks.", "model.layers."), (".norm_attn_norm.norm_1.", ".input_layernorm."),
             (".norm_attn_norm.norm_2.", ".post_attention_layernorm."),
             (".norm_attn_norm.attn.Wqkv.", ".self_attn.qkv_proj."),
             (".norm_attn_norm.attn.out_proj.", ".self_attn.o_proj."), (".ffn.router.layer.", ".mlp.gate."),
             (".ffn.experts.mlp.", ".mlp.experts."), ("transformer.wte.", "model.embed_tokens."),
             ("transformer.norm_f.", "model.norm.")),
    "afmoe": ((".post_attention_layernorm.", ".post_self_attn_layernorm."),
              (".pre_mlp_layernorm.", ".post_attention_layernorm."), (".mlp.router.gate.", ".mlp.gate."),
              (".mlp.expert_bias", ".mlp.gate.e_score_correction_bias")),
}  # fmt: skip
_FAMILY_PARTS["sarvam_moe"] = _FAMILY_PARTS["param2moe"]  # (Sarvam-MoE: Param2-MoE's names)
_FAMILY_PARTS["bailing_moe"] = _FAMILY_PARTS["param2moe"]  # (Ling 2.0: Param2-MoE's names)
_FAMILY_PARTS["nemotron-nas"] = ((".self_attn.linear_attn.", ".self_attn.o_proj."),)  # (deci's linear layers)
_FAMILY_PARTS["internlm2"] = (  # (InternLM2 / 2.5; its wqkv per KV group, regrouped as Falcon 40B's)
    ("model.tok_embeddings.", "model.embed_tokens."), (".attention.wqkv.", ".self_attn.qkv_proj."),
    (".attention.wo.", ".self_attn.o_proj."), (".feed_forward.w1.", ".mlp.gate_proj."),
    (".feed_forward.w3.", ".mlp.up_proj."), (".feed_forward.w2.", ".mlp.down_proj."),
    (".attention_norm.", ".input_layernorm."), (".ffn_norm.", ".post_attention_layernorm."),
)  # fmt: skip
# The GPT-2-era configs' keys under Llama's where absent (twin of loader.cpp's gpt_classic_keys).
_GPT_CLASSIC_KEYS = (
    ("n_embd", "hidden_size"), ("n_embed", "hidden_size"), ("d_model", "hidden_size"),
    ("n_layer", "num_hidden_layers"), ("n_layers", "num_hidden_layers"), ("n_head", "num_attention_heads"),
    ("n_heads", "num_attention_heads"), ("num_layers", "num_hidden_layers"),
    ("num_heads", "num_attention_heads"), ("ffn_dim", "intermediate_size"),
    ("n_positions", "max_position_embeddings"),
    ("max_seq_len", "max_position_embeddings"), ("seq_length", "max_position_embeddings"),
    ("activation_function", "hidden_act"),
)  # fmt: skip

# EXAONE 3's GPT-2-style names within a layer, as Llama's (the first that matches).
_EXAONE_PARTS = (
    (".ln_1.", ".input_layernorm."), (".ln_2.", ".post_attention_layernorm."),
    (".attn.attention.out_proj.", ".self_attn.o_proj."), (".attn.attention.", ".self_attn."),
    (".mlp.c_fc_0.", ".mlp.gate_proj."), (".mlp.c_fc_1.", ".mlp.up_proj."),
    (".mlp.c_proj.", ".mlp.down_proj."),
)  # fmt: skip


def _bitnet_config(c: dict[str, Any], path: str) -> bool:
    """Whether a folder's matrices are BitNet's packed ternary ones (quantization_config quant_method
    "bitnet"; twin of loader.cpp's bitnet_linear): the options transformers runs otherwise, and other
    quantization methods (gpt-oss's MXFP4 aside), refused by name."""
    q = c.get("quantization_config")
    if not isinstance(q, dict) or q.get("quant_method") in (
        "mxfp4",
        "fp8",
        "compressed-tensors",
        *_GPTQ_METHODS,
    ):
        return False  # (gpt-oss's experts; FP8; compressed-tensors'; GPTQ / AWQ / AutoRound)
    if q.get("quant_method") != "bitnet":  # (bitsandbytes, HQQ, EETQ, ...)
        method = q.get("quant_method", "")
        raise ValueError(f"quantization_config quant_method '{method}' in '{path}' is not supported (a "
                         "folder of float weights is, as are FP8 (fp8), compressed-tensors' W4A16 / W8A16 / "
                         "W8A8, GPTQ, AWQ, AutoRound, gpt-oss's MXFP4 and BitNet's packed ones; other "
                         "quantized models run from their GGUF files)")  # fmt: skip
    if q.get("linear_class", "bitlinear") not in ("bitlinear", "autobitlinear"):
        raise ValueError(f"quantization_config linear_class '{q.get('linear_class')}' in '{path}' is not "
                         "supported (bitlinear and autobitlinear are)")  # fmt: skip
    if q.get("quantization_mode", "offline") != "offline":
        raise ValueError(f"quantization_config quantization_mode '{q.get('quantization_mode')}' in '{path}' "
                         "is not supported (offline is)")  # fmt: skip
    if q.get("use_rms_norm"):
        raise ValueError(f"quantization_config use_rms_norm=true in '{path}' is not supported")
    return True


_GPTQ_METHODS = ("gptq", "awq", "auto-round", "intel/auto-round")


def _with_aliases(c: dict[str, Any], aliases: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """A copy of config ``c`` with each alias's value under its name where ``c`` has the alias and not the
    name (twin of loader.cpp's add_aliases)."""
    out = dict(c)
    for alias, name in aliases:
        if alias in c and name not in out:
            out[name] = c[alias]
    return out


def _bailing_keys(c: dict[str, Any]) -> dict[str, Any]:
    """Ling / Ring 2.0 (bailing_moe, BailingMoeV2ForCausalLM) as GLM-4.5's config (twin of loader.cpp's
    bailing_keys): its keys under GLM's names, the partial rotation 0.5 unless set; Ling 1.0, use_bias,
    norm_head, no selection bias and shared experts of another width refused."""
    if "BailingMoeForCausalLM" in (c.get("architectures") or []):
        raise ValueError(
            "Ling 1.0 (BailingMoeForCausalLM) is not supported (Ling 2.0, BailingMoeV2ForCausalLM, is)"
        )
    for key in ("use_bias", "norm_head"):
        if c.get(key):
            raise ValueError(f"Ling 2.0 with {key}=true is not supported")
    if c.get("moe_router_enable_expert_bias") is False:
        raise ValueError("Ling 2.0 with moe_router_enable_expert_bias=false is not supported")
    aliases = (("num_experts", "n_routed_experts"), ("num_shared_experts", "n_shared_experts"),
               ("use_qkv_bias", "attention_bias"), ("score_function", "scoring_func"))  # fmt: skip
    out = _with_aliases(c, aliases)
    out.setdefault("partial_rotary_factor", 0.5)
    shared = c.get("moe_shared_expert_intermediate_size")
    if shared is not None and shared != (c.get("moe_intermediate_size") or 0) * out.get(
        "n_shared_experts", 1
    ):
        raise ValueError(
            "Ling 2.0 with moe_shared_expert_intermediate_size other than the experts' width times "
            "num_shared_experts is not supported"
        )
    return out


def glm_variant_keys(c: Any) -> Any:
    """Solar Open's, Param2-MoE's and Sarvam-MoE's configs (model_type solar_open / param2moe / sarvam_moe)
    with their defaults where GLM-4.5's differ written in, and Param2's / Sarvam's key aliases read as GLM's
    names (twin of loader.cpp's glm_variant_keys); any other config as it is."""
    if isinstance(c, dict) and c.get("model_type") == "solar_open":
        return {"partial_rotary_factor": 1.0, "first_k_dense_replace": 0, "n_shared_experts": 1, **c}
    if isinstance(c, dict) and c.get("model_type") == "bailing_moe":
        return _bailing_keys(c)
    if not isinstance(c, dict) or c.get("model_type") not in ("param2moe", "sarvam_moe"):
        return c
    param2 = c["model_type"] == "param2moe"
    aliases = (("num_experts", "n_routed_experts"), ("num_shared_experts", "n_shared_experts"),
               ("use_qkv_bias", "attention_bias"),
               ("num_mtp_layers", "num_nextn_predict_layers"))  # fmt: skip
    out = _with_aliases(c, aliases)
    defaults = (("partial_rotary_factor", 1.0), ("n_shared_experts", 2 if param2 else 1),
                ("routed_scaling_factor", 2.5), ("use_qk_norm", True),
                ("tie_word_embeddings", param2))  # fmt: skip
    for name, value in defaults:
        out.setdefault(name, value)
    if "rope_theta" not in out and "rope_theta" not in (out.get("rope_parameters") or {}):
        out["rope_theta"] = 500000.0 if param2 else 8000000.0
    return out


def sidecar_quantization(path: str, c: dict[str, Any]) -> dict[str, Any]:
    """The config ``c`` of the folder ``path`` with the quantization settings older GPTQ / AWQ uploads keep
    beside it as its quantization_config (twin of loader.cpp's sidecar_quantization): AutoGPTQ's
    quantize_config.json (quant_method gptq unless it says), AutoAWQ's quant_config.json (awq; w_bit and
    q_group_size as bits and group_size). ``c`` itself where it has one or there is no such file."""
    if not isinstance(c, dict) or "quantization_config" in c:
        return c
    for name, method in (("quantize_config.json", "gptq"), ("quant_config.json", "awq")):
        p = os.path.join(path, name)
        if not os.path.exists(p):
            continue
        with open(p) as f:
            q = json.load(f)
        if not isinstance(q, dict):
            raise ValueError(f"'{p}' is not a JSON object")
        q = {**q, "quant_method": q.get("quant_method", method)}
        if method == "awq":
            for old, new in (("w_bit", "bits"), ("q_group_size", "group_size")):
                if old in q and new not in q:
                    q[new] = q[old]
        return {**c, "quantization_config": q}
    return c


_AWQ_NIBBLE = np.array([0, 4, 1, 5, 2, 6, 3, 7])  # (AWQ: row 8w + i of a word in nibble _AWQ_NIBBLE[i])


def _gptq_config(c: dict[str, Any], path: str) -> tuple[bool, int] | None:
    """A GPTQ / AWQ / AutoRound folder's layout (twin of loader.cpp's gptq_linear): (AWQ's packing or
    GPTQ's, the offset added to stored zero points: 1 for GPTQ's v1 checkpoints), None for other folders;
    what ossa does not run refused by name."""
    q = c.get("quantization_config")
    if not isinstance(q, dict) or q.get("quant_method") not in _GPTQ_METHODS:
        return None
    method, where = q["quant_method"], f"'{os.path.join(path, 'config.json')}'"

    def refuse(what: str) -> ValueError:
        return ValueError(f"quantization_config ({method}) {what} in {where} is not supported (GPTQ's 2-, "
                          "4- and 8-bit integer weights, AWQ's 4-bit GEMM ones and AutoRound's in either "
                          "packing are)")  # fmt: skip

    if method == "gptq":
        fmt = q.get("checkpoint_format") or q.get("format") or "gptq"
        if fmt not in ("gptq", "gptq_v2"):
            raise refuse(f"checkpoint_format '{fmt}'")
        return False, 1 if fmt == "gptq" else 0
    if method == "awq":
        version = str(q.get("version") or "gemm").lower()
        if version not in ("gemm", "exllama", "ipex"):  # (exllama / ipex: kernels reading GEMM's checkpoints)
            raise refuse(f"version '{version}'")
        return True, 0
    pf = q.get("packing_format") or "auto_round:auto_gptq"
    if pf not in ("auto_round:auto_awq", "auto_round:awq", "auto_round:auto_gptq", "auto_round:gptq", "auto",
                  "auto_round", "auto_round:gptqmodel"):  # fmt: skip
        raise refuse(f"packing_format '{pf}'")
    if (q.get("data_type") or "int") != "int":
        raise refuse(f"data_type '{q.get('data_type')}'")
    if (q.get("act_bits") or 16) < 16:
        raise refuse(f"act_bits {q.get('act_bits')}")
    awq = pf in ("auto_round:auto_awq", "auto_round:awq")
    return awq, 1 if pf in ("auto_round:auto_gptq", "auto_round:gptq", "auto") else 0


def _gptq_matrices(
    where: dict[str, Any], stored: dict[str, str], layout: tuple[bool, int], path: str
) -> dict[str, Any]:
    """Every ``X.qweight`` of a GPTQ / AWQ / AutoRound folder as the float32 matrix ``X.weight``: (q - zero) *
    scale with scale = scales[c / group, r] (twin of gptq_linear; exact where ossa stores GGUF blocks)."""
    awq, zero_offset = layout
    cfg = f"'{os.path.join(path, 'config.json')}'"
    out: dict[str, Any] = {}

    def i32(n: str) -> np.ndarray:
        if n not in where:
            raise ValueError(f"missing tensor '{n}' in {cfg}")
        info = where[n].tensors[stored[n]]
        if info.dtype != "I32" or len(info.shape) != 2:
            raise ValueError(f"tensor '{n}' in {cfg} must be a 2-D I32 tensor")
        return where[n].raw(stored[n]).view("<u4").reshape(info.shape)

    for name in sorted(n for n in where if n.endswith(".qweight")):
        base = name.removesuffix(".qweight")
        qw, qz = i32(name), i32(base + ".qzeros")
        if base + ".scales" not in where:
            raise ValueError(f"missing tensor '{base}.scales' in {cfg} (beside '{name}')")
        s_info = where[base + ".scales"].tensors[stored[base + ".scales"]]
        if s_info.dtype not in ("F32", "F16", "BF16") or len(s_info.shape) != 2:
            raise ValueError(f"tensor '{base}.scales' in {cfg} must be an F16, BF16 or F32 matrix")
        scales = where[base + ".scales"].tensor(stored[base + ".scales"]).astype(np.float32)
        n_groups, rows = scales.shape
        packed_rows = qw.shape[1] if awq else qz.shape[1]
        bits = packed_rows * 32 // rows if rows > 0 and (packed_rows * 32) % rows == 0 else 0
        if bits not in (2, 4, 8) or (awq and bits != 4):
            raise ValueError(f"matrix '{base}.weight' in {cfg} of {rows} rows packs them into {packed_rows} "
                             f"words: not 2, 4 or 8 bits ({'AWQ: 4' if awq else 'GPTQ: 2, 4 or 8'} are "
                             "supported)")  # fmt: skip
        per, mask = 32 // bits, (1 << bits) - 1
        cols = qw.shape[0] if awq else qw.shape[0] * per
        fits = (qw.shape[1] * per == rows) if awq else (qw.shape[1] == rows)
        if (n_groups <= 0 or cols <= 0 or cols % n_groups != 0 or not fits or qz.shape[0] != n_groups
                or qz.shape[1] * per != rows):  # fmt: skip
            raise ValueError(
                f"tensors '{base}.qweight', '.qzeros' and '.scales' in {cfg} do not fit together"
            )
        group = cols // n_groups
        if cols % 32 != 0:
            raise ValueError(f"matrix '{base}.weight' of {cols} columns in {cfg} is not supported (a "
                             "multiple of 32 is)")  # fmt: skip
        col_group = np.arange(cols) // group  # (act-order, desc_act: g_idx, column c in group g_idx[c])
        if not awq and base + ".g_idx" in where:
            info = where[base + ".g_idx"].tensors[stored[base + ".g_idx"]]
            if info.dtype != "I32" or info.shape != [cols]:
                raise ValueError(f"tensor '{base}.g_idx' in {cfg} is malformed")
            col_group = where[base + ".g_idx"].raw(stored[base + ".g_idx"]).view("<i4").astype(np.int64)
            bad = col_group[(col_group < 0) | (col_group >= n_groups)]
            if bad.size:
                raise ValueError(f"tensor '{base}.g_idx' in {cfg} holds group {bad[0]} of {n_groups}")
        if not np.all(np.isfinite(scales)):
            raise ValueError(f"tensor '{base}.scales' in {cfg} holds an invalid scale")
        shifts = (bits * np.arange(per)).astype(np.uint32)
        if awq:  # [cols, rows]: row 8w + i of word w in nibble _AWQ_NIBBLE[i]
            q = ((qw[:, :, None] >> (4 * _AWQ_NIBBLE).astype(np.uint32)) & mask).reshape(cols, rows).T
            z = ((qz[:, :, None] >> (4 * _AWQ_NIBBLE).astype(np.uint32)) & mask).reshape(n_groups, rows)
        else:  # qweight [cols / per, rows]: column c at bits (c % per) * bits of word c / per
            q = ((qw[:, None, :] >> shifts[None, :, None]) & mask).reshape(cols, rows).T
            z = ((qz[:, :, None] >> shifts[None, None, :]) & mask).reshape(n_groups, rows)
        v = q.astype(np.int32) - (z.astype(np.int32) + zero_offset).T[:, col_group]
        out[base + ".weight"] = np.ascontiguousarray(v.astype(np.float32) * scales.T[:, col_group])
    return out


def _fp8_config(c: dict[str, Any], path: str) -> tuple[bool, tuple[int, int] | None, bool]:
    """A folder's FP8 settings (quantization_config quant_method "fp8"; twin of loader.cpp's fp8_linear):
    (FP8 or not, the scale block (rows, columns; None: one per matrix), E8M0 scales), the options ossa
    does not run refused by name."""
    q = c.get("quantization_config")
    if not isinstance(q, dict) or q.get("quant_method") != "fp8":
        return False, None, False
    where = f"'{os.path.join(path, 'config.json')}'"
    if (q.get("fmt") or "e4m3") != "e4m3":
        raise ValueError(f"quantization_config fmt '{q.get('fmt')}' in {where} is not supported (e4m3 is)")
    if (q.get("expert_dtype") or "fp8") != "fp8":
        raise ValueError(f"quantization_config expert_dtype '{q.get('expert_dtype')}' in {where} is not "
                         "supported (fp8 is)")  # fmt: skip
    scale_fmt = q.get("scale_fmt") or "float"
    if scale_fmt not in ("float", "ue8m0"):
        raise ValueError(f"quantization_config scale_fmt '{scale_fmt}' in {where} is not supported (float "
                         "and ue8m0 are)")  # fmt: skip
    block: tuple[int, int] | None = (128, 128)
    if "weight_block_size" in q:
        bs = q["weight_block_size"]
        if bs is None:
            block = None
        elif not isinstance(bs, list) or len(bs) != 2 or not all(type(v) is int and v > 0 for v in bs):
            raise ValueError(f"quantization_config weight_block_size in {where} must be two positive "
                             "integers or null")  # fmt: skip
        else:
            block = (bs[0], bs[1])
    if block is not None and block[1] % 128 != 0:
        raise ValueError(f"quantization_config weight_block_size [{block[0]}, {block[1]}] in {where} is not "
                         "supported (blocks of a multiple of 128 columns are)")  # fmt: skip
    return True, block, scale_fmt == "ue8m0"


def _compressed_config(c: dict[str, Any], path: str) -> dict[str, Any] | None:
    """A compressed-tensors folder's settings (quant_method "compressed-tensors": pack-quantized integer
    weights, int-quantized / naive-quantized 8-bit and float-quantized FP8 weights, with or without 8-bit
    activations per token or per tensor; twin of loader.cpp's compressed_linear), None for other folders;
    what ossa does not run refused by name. Keys: bits (the pack-quantized widths), act (None, "int8",
    "fp8"), static (activation scales from each matrix's input_scale), fp8_block ((rows, columns) or
    None)."""
    q = c.get("quantization_config")
    if not isinstance(q, dict) or q.get("quant_method") != "compressed-tensors":
        return None
    where = f"'{os.path.join(path, 'config.json')}'"

    def refuse(what: str) -> ValueError:
        return ValueError(f"quantization_config (compressed-tensors) {what} in {where} is not supported "
                          "(pack-quantized integer weights of 4 or 8 bits (W4A16 / W8A16), int-quantized "
                          "8-bit and float-quantized FP8 weights with or without 8-bit token or tensor "
                          "activations (W8A8, FP8) are)")  # fmt: skip

    known = ("pack-quantized", "int-quantized", "naive-quantized", "float-quantized")
    fmt = q.get("format") or ""
    if fmt not in known and fmt != "mixed-precision":  # (mixed-precision: each group names its own)
        raise refuse(f"format '{fmt}'")
    if (q.get("quantization_status") or "compressed") != "compressed":
        raise refuse(f"quantization_status '{q.get('quantization_status')}'")
    if q.get("transform_config") is not None:
        raise refuse("transform_config")
    sp = q.get("sparsity_config")
    if isinstance(sp, dict) and isinstance(sp.get("format"), str) and sp["format"] != "dense":
        raise refuse(f"sparsity format '{sp['format']}'")
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise refuse("without config_groups")
    out: dict[str, Any] = {"bits": [], "act": None, "static": False, "fp8_block": None}
    first = True
    for name, g in groups.items():
        if not isinstance(g, dict):
            raise refuse(f"config group '{name}'")
        gfmt = g.get("format") or ("" if fmt == "mixed-precision" else fmt)
        if gfmt not in known:
            raise refuse(f"config group '{name}' format '{gfmt}'")
        if g.get("output_activations") is not None:
            raise refuse(f"output_activations quantization (config group '{name}')")
        act, static = None, False
        a = g.get("input_activations")
        if a is not None:
            if not isinstance(a, dict):
                raise refuse(f"input_activations (config group '{name}')")
            atype, strat = a.get("type") or "int", a.get("strategy") or "tensor"
            if a.get("num_bits") != 8 or atype not in ("int", "float"):
                raise refuse(
                    f"input_activations of {a.get('num_bits') or 0}-bit {atype} (config group '{name}')"
                )
            if a.get("symmetric") is False:
                raise refuse("asymmetric input_activations")
            dyn = bool(a.get("dynamic"))
            if not ((dyn and strat == "token") or (not dyn and strat == "tensor")):
                raise refuse(f"input_activations strategy '{strat}' ({'dynamic' if dyn else 'static'})")
            act, static = ("int8" if atype == "int" else "fp8"), not dyn
            if gfmt == "pack-quantized":  # (W4A8: transformers cannot load it to check against)
                raise refuse(f"pack-quantized weights with input_activations (config group '{name}')")
        if not first and (act != out["act"] or static != out["static"]):
            raise refuse("config groups that quantize activations differently")
        first = False
        out["act"], out["static"] = act, static
        w = g.get("weights")
        if not isinstance(w, dict):
            raise refuse(f"config group '{name}' without weights")
        wtype, n, strategy = w.get("type") or "int", w.get("num_bits") or 0, w.get("strategy") or "tensor"
        if w.get("dynamic"):
            raise refuse("dynamic weights")
        if gfmt == "float-quantized":
            if wtype != "float" or n != 8:
                raise refuse(f"float-quantized weights of {n}-bit {wtype}")
            if w.get("symmetric") is False:
                raise refuse("asymmetric FP8 weights")
            if strategy == "block":
                bs = w.get("block_structure")
                if not (isinstance(bs, list) and len(bs) == 2 and all(type(v) is int and v > 0 for v in bs)
                        and bs[1] % 128 == 0):  # fmt: skip
                    raise refuse(
                        "weights block_structure (blocks of a multiple of 128 columns are supported)"
                    )
                out["fp8_block"] = (bs[0], bs[1])
            elif strategy not in ("channel", "tensor"):
                raise refuse(f"weights strategy '{strategy}'")
            continue
        if wtype != "int":
            raise refuse(f"weights type '{wtype}'")
        if gfmt != "pack-quantized" and n != 8:
            raise refuse(f"{gfmt} weights of {n} bits")
        if n not in (4, 8):
            raise refuse(f"num_bits {n}")
        if strategy not in ("group", "channel", "tensor"):
            raise refuse(f"weights strategy '{strategy}'")
        if n == 8 and w.get("symmetric") is False:
            raise refuse("asymmetric 8-bit weights")
        out["bits"].append(n)
    return out


def _compressed_matrices(
    where: dict[str, Any], stored: dict[str, str], ct: dict[str, Any], path: str
) -> dict[str, Any]:
    """Every ``X.weight_packed`` of a compressed-tensors folder as the float32 matrix ``X.weight``: (q - zero)
    * scale, each weight rounded once (twin of compressed_linear; exact where ossa stores GGUF blocks)."""
    cfg = f"'{os.path.join(path, 'config.json')}'"
    bits_allowed = ct["bits"]
    out: dict[str, Any] = {}

    def with_act(base: str, w: np.ndarray) -> Any:
        """w, or a QdqLinear where the folder quantizes activations (static: base's input_scale)."""
        if ct["act"] is None:
            return w
        scale = 0.0
        if ct["static"]:
            if base + ".input_scale" not in where:
                raise ValueError(f"missing tensor '{base}.input_scale' in {cfg} (static activation "
                                 "quantization needs each matrix's input scale)")  # fmt: skip
            v = where[base + ".input_scale"].tensor(stored[base + ".input_scale"]).reshape(-1)
            if v.size != 1:
                raise ValueError(f"tensor '{base}.input_scale' in {cfg} must hold one number")
            if not (np.isfinite(v[0]) and v[0] > 0):
                raise ValueError(f"tensor '{base}.input_scale' in {cfg} holds an invalid scale")
            scale = float(np.float32(v[0]))
        return QdqLinear(w, ct["act"], scale)

    for name in [n for n in where if n.endswith(".weight_packed")]:
        base = name[: -len(".weight_packed")]
        for need in (base + ".weight_shape", base + ".weight_scale"):
            if need not in where:
                raise ValueError(f"missing tensor '{need}' in {cfg} (beside '{name}')")
        info = where[name].tensors[stored[name]]
        if info.dtype != "I32" or len(info.shape) != 2:
            raise ValueError(f"tensor '{name}' in {cfg} must be a 2-D I32 tensor")
        st = where[base + ".weight_shape"].tensors[stored[base + ".weight_shape"]]
        if st.dtype not in ("I64", "I32") or st.shape != [2]:
            raise ValueError(f"tensor '{base}.weight_shape' in {cfg} must hold two integers")
        raw_shape = where[base + ".weight_shape"].raw(stored[base + ".weight_shape"])
        rows, cols = (int(v) for v in raw_shape.view("<i8" if st.dtype == "I64" else "<i4"))
        words = info.shape[1]
        if rows != info.shape[0] or cols <= 0 or cols % 32 != 0:
            raise ValueError(f"tensor '{name}' in {cfg} does not match its weight_shape [{rows}, {cols}] "
                             "(columns a multiple of 32 are supported)")  # fmt: skip
        bits = words * 32 // cols
        if words * 32 != cols * bits or bits not in (4, 8) or bits not in bits_allowed:
            raise ValueError(f"tensor '{name}' in {cfg} holds {words} words a row for {cols} columns: not a "
                             "width its config groups give")  # fmt: skip
        s_info = where[base + ".weight_scale"].tensors[stored[base + ".weight_scale"]]
        if s_info.dtype not in ("F32", "F16", "BF16") or len(s_info.shape) not in (1, 2):
            raise ValueError(
                f"tensor '{base}.weight_scale' in {cfg} must be an F32, F16 or BF16 vector or matrix"
            )
        scales = where[base + ".weight_scale"].tensor(stored[base + ".weight_scale"]).astype(np.float32)
        scales = scales.reshape(s_info.shape[0], -1)
        s_rows, n_groups = scales.shape
        per_matrix = s_rows == 1 and n_groups == 1 and rows != 1
        if not per_matrix and (s_rows != rows or cols % n_groups != 0):
            raise ValueError(
                f"tensor '{base}.weight_scale' in {cfg} does not fit its matrix [{rows}, {cols}]"
            )
        group = cols // n_groups
        if group % 32 != 0:
            raise ValueError(f"matrix '{base}.weight' in {cfg} has groups of {group} columns (multiples of "
                             "32 are supported)")  # fmt: skip
        if base + ".weight_g_idx" in where:
            gi = where[base + ".weight_g_idx"].raw(stored[base + ".weight_g_idx"]).view("<i4")
            if gi.shape != (cols,):
                raise ValueError(f"tensor '{base}.weight_g_idx' in {cfg} is malformed")
            if not np.array_equal(gi, np.arange(cols) // group):
                raise ValueError(f"matrix '{base}.weight' in {cfg} has activation-ordered groups "
                                 "(weight_g_idx), which are not supported")  # fmt: skip
        if not np.all(np.isfinite(scales)):
            raise ValueError(f"tensor '{base}.weight_scale' in {cfg} holds an invalid scale")
        words_u8 = where[name].raw(stored[name]).reshape(rows, words * 4)
        if bits == 4:
            q = np.stack([words_u8 & 15, words_u8 >> 4], axis=-1).reshape(rows, cols).astype(np.int32) - 8
        else:
            q = words_u8.astype(np.int32) - 128
        zp_name = base + ".weight_zero_point"
        if zp_name in where:
            if bits == 8:
                raise ValueError(
                    f"matrix '{base}.weight' in {cfg} has 8-bit zero points, which are not supported"
                )
            z_info = where[zp_name].tensors[stored[zp_name]]
            if z_info.dtype != "I32" or z_info.shape != [(rows * bits + 31) // 32, n_groups]:
                raise ValueError(f"tensor '{zp_name}' in {cfg} is malformed")
            zw = where[zp_name].raw(stored[zp_name]).view("<u4").reshape(-1, n_groups)
            zp = ((zw[:, None, :] >> (4 * np.arange(8, dtype=np.uint32))[None, :, None]) & 15).reshape(
                -1, n_groups
            )
            q = q - (zp[:rows].astype(np.int32) - 8).repeat(group, axis=1)
        full = np.full((rows, cols), scales[0, 0]) if per_matrix else scales.repeat(group, axis=1)
        out[base + ".weight"] = with_act(
            base, (q.astype(np.float32) * full.astype(np.float32)).astype(np.float32)
        )
    for name in [n for n in where if n.endswith(".weight") and n + "_scale" in where]:
        dtype = where[name].tensors[stored[name]].dtype
        if dtype not in ("I8", "F8_E4M3"):
            continue
        base, fp8 = name[: -len(".weight")], dtype == "F8_E4M3"
        shape = where[name].tensors[stored[name]].shape
        if len(shape) != 2:
            raise ValueError(f"tensor '{name}' in {cfg} must be a matrix")
        rows, cols = shape
        unit = 128 if fp8 else 32
        if rows <= 0 or cols <= 0 or cols % unit != 0:
            raise ValueError(
                f"matrix '{name}' of {cols} columns in {cfg} is not supported (a multiple of {unit} is)"
            )
        s_info = where[name + "_scale"].tensors[stored[name + "_scale"]]
        if s_info.dtype not in ("F32", "F16", "BF16") or len(s_info.shape) not in (1, 2):
            raise ValueError(f"tensor '{name}_scale' in {cfg} must be an F32, F16 or BF16 vector or matrix")
        scales = where[name + "_scale"].tensor(stored[name + "_scale"]).astype(np.float32)
        s_rows, s_cols = s_info.shape[0], (s_info.shape[1] if len(s_info.shape) == 2 else 1)
        scales = scales.reshape(s_rows, s_cols)
        one, per_row = s_rows * s_cols == 1, s_rows == rows and s_cols == 1
        blk = ct["fp8_block"]
        blocks = fp8 and blk is not None and (s_rows, s_cols) == (-(-rows // blk[0]), -(-cols // blk[1]))
        if not (one or per_row or blocks):
            raise ValueError(f"tensor '{name}_scale' in {cfg} does not fit its matrix [{rows}, {cols}]")
        if not (_fp8_scales_ok(scales) if fp8 else np.all(np.isfinite(scales))):
            raise ValueError(f"tensor '{name}_scale' in {cfg} holds an invalid scale")
        raw = where[name].raw(stored[name]).reshape(rows, cols)
        if fp8:
            w = _fp8_dequantized(raw, scales, blk if blocks else (1, cols) if per_row else None, name, cfg)
        else:
            w = (raw.view(np.int8).astype(np.float32) * (scales[0, 0] if one else scales)).astype(np.float32)
        out[name] = with_act(base, w)
    return out


def _fp8_matrix(
    n: str, where: dict[str, Any], stored: dict[str, str], block: tuple[int, int] | None, e8m0: bool, cfg: str
) -> np.ndarray:
    """FP8 matrix ``n`` dequantized with its ``n_scale_inv`` (twin of fp8_linear's checks)."""
    info = where[n].tensors[stored[n]]
    if len(info.shape) != 2:
        raise ValueError(f"FP8 tensor '{n}' in {cfg} has {len(info.shape)} dimensions (matrices are "
                         "supported)")  # fmt: skip
    scale_name = n + "_scale_inv"
    if scale_name not in where:
        raise ValueError(f"missing tensor '{scale_name}' in {cfg} (FP8 weights need their scales)")
    rows, cols = info.shape
    if rows <= 0 or cols <= 0 or cols % 128 != 0:
        raise ValueError(f"FP8 matrix '{n}' of {cols} columns in {cfg} is not supported (a multiple of "
                         "128 is)")  # fmt: skip
    s_info = where[scale_name].tensors[stored[scale_name]]
    n_scales = int(np.prod(s_info.shape)) if s_info.shape else 1
    bn, bk = block if block is not None else (rows, cols)
    grid = (-(-rows // bn), -(-cols // bk))
    if n_scales != 1 and tuple(s_info.shape) != grid:
        raise ValueError(f"tensor '{scale_name}' in {cfg} must hold {grid[0]} x {grid[1]} scales (one per "
                         f"block of {bn} x {bk} of its [{rows}, {cols}] matrix)")  # fmt: skip
    if s_info.dtype == "F8_E8M0" or (s_info.dtype == "U8" and e8m0):
        e = where[scale_name].raw(stored[scale_name]).astype(np.int32)
        if (e == 255).any():
            raise ValueError(f"tensor '{scale_name}' in {cfg} holds an invalid scale")
        scales = np.ldexp(np.float32(1.0), e - 127).astype(np.float32)
    elif s_info.dtype in ("F32", "F16", "BF16"):
        scales = where[scale_name].tensor(stored[scale_name]).astype(np.float32)
    else:
        raise ValueError(f"tensor '{scale_name}' in {cfg} has type '{s_info.dtype}' (FP8 scales are F32, "
                         "BF16, F16 or E8M0)")  # fmt: skip
    scales = scales.reshape(-1 if n_scales == 1 else grid)
    if not _fp8_scales_ok(scales):
        raise ValueError(f"tensor '{scale_name}' in {cfg} holds an invalid scale")
    codes = where[n].raw(stored[n]).reshape(rows, cols)
    return _fp8_dequantized(codes, scales, None if n_scales == 1 else (bn, bk), n, cfg)


def _fp8_scales_ok(scales: np.ndarray) -> bool:
    """FP8 block scales the kernels take exactly (twin of loader.cpp's fp8_scale_ok)."""
    a = np.abs(scales)
    return bool(np.all(np.isfinite(scales) & ((a == 0) | ((a > 2.0**-100) & (a < 2.0**100)))))


def _fp8_dequantized(
    codes: np.ndarray, scales: np.ndarray, block: tuple[int, int] | None, name: str, cfg: str
) -> np.ndarray:
    """An FP8 matrix's E4M3 codes times their scales, a NaN code refused (twin of fp8_repack)."""
    if ((codes & 0x7F) == 0x7F).any():
        raise ValueError(f"FP8 matrix '{name}' in {cfg} holds a NaN")
    return dequantize_fp8(codes, scales, block)


def _load_hf(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with open(os.path.join(path, "config.json")) as f:
        c: Any = glm_variant_keys(sidecar_quantization(path, json.load(f)))
    if isinstance(c, dict) and c.get("model_type") == "nemotron-nas":  # (twin of loader.cpp's deci_keys)
        c = arch_config.deci_keys(c)
    fp8, fp8_block, fp8_e8m0 = _fp8_config(c, path)  # (the top level's, as in a wrapper's folder)
    ct = _compressed_config(c, path)
    gptq = _gptq_config(c, path)
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = list(dict.fromkeys(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    shards = [read_safetensors(os.path.join(path, name)) for name in files]
    where = {name: s for s in shards for name in s.tensors}
    stored = {name: name for name in where}  # name -> its name in the shard
    # (Qwen2-VL / Qwen2.5-VL as released: the language model's keys at the top level, no text_config)
    flat_vl = c.get("model_type") in ("qwen2_vl", "qwen2_5_vl") and "text_config" not in c
    if _text_wrapper(c):  # (twin of loader.cpp's text_wrapper / language_model_names)
        if not flat_vl and not isinstance(c.get("text_config"), dict):
            raise ValueError(f"'{path}' has no text_config object")
        c = c if flat_vl else c["text_config"]
        stored = {}
        for name in where:
            to = name
            for prefix in ("model.language_model.", "language_model.model.", "model.text_model."):
                if name.startswith(prefix):
                    to = "model." + name[len(prefix) :]
            to = "lm_head.weight" if name == "language_model.lm_head.weight" else to
            if to in stored:
                raise ValueError(f"tensor '{to}' appears twice in '{path}'")
            stored[to] = name
        where = {to: where[name] for to, name in stored.items()}
    qkv_groups = (0, 0, 0)  # (GPT-NeoX, Falcon: heads, KV groups, head size of the fused query_key_value)
    if c.get("model_type") in _FAMILY_PARTS:  # (twin of loader.cpp's family_names: each part where found)
        renamed = {}
        for name in where:
            to = name
            for part, with_ in _FAMILY_PARTS[c["model_type"]]:
                to = to.replace(part, with_, 1)
            if c["model_type"] == "gpt2":
                bare = _gpt2_bare(to)
                if bare is None:
                    continue
                to = bare
            if c["model_type"] == "internlm2" and to == "output.weight":  # (its output matrix)
                to = "lm_head.weight"
            if to in renamed:
                raise ValueError(f"tensor '{to}' appears twice in '{path}'")
            renamed[to] = name
        stored = {to: stored[name] for to, name in renamed.items()}
        where = {to: where[name] for to, name in renamed.items()}
    gpt_classic = c.get("model_type") in (
        "gptj",
        "bloom",
        "mpt",
        "gpt2",
        "gpt_bigcode",
        "dbrx",
        "opt",
        "gpt_neo",
        "codegen",
    )
    if gpt_classic:  # (their keys as Llama's: loader.cpp's gpt_classic_keys)
        c = dict(c)
        for frm, to in _GPT_CLASSIC_KEYS:
            if c.get(frm) is not None and c.get(to) is None:
                c[to] = c[frm]
        if c["model_type"] == "gpt_bigcode":  # (K/V heads as transformers sets them: one when multi_query)
            multi = c.get("multi_query", True) is not False
            c["num_key_value_heads"] = 1 if multi else c.get("num_attention_heads")
        if c["model_type"] == "bloom" and c.get("max_position_embeddings") is None:  # (its training length)
            c["max_position_embeddings"] = 2048
        for sub, frm, to in (("attn_config", "kv_n_heads", "num_key_value_heads"),
                             ("attn_config", "rope_theta", "rope_theta"),
                             ("ffn_config", "ffn_hidden_size", "intermediate_size")):  # fmt: skip
            sub_cfg = c.get(sub) if c["model_type"] == "dbrx" else None  # (DBRX's sub-configs)
            if isinstance(sub_cfg, dict) and sub_cfg.get(frm) is not None and c.get(to) is None:
                c[to] = sub_cfg[frm]
        if c.get("intermediate_size") is None:
            inner = c.get("n_inner")
            c["intermediate_size"] = inner if inner is not None else 4 * int(c.get("hidden_size") or 0)
    if c.get("model_type") in ("bloom", "gpt_bigcode"):  # (per head [q_h | k_h | v_h], unless multi-query)
        heads, width = c.get("num_attention_heads") or 0, c.get("hidden_size") or 0
        mq = c["model_type"] == "gpt_bigcode" and c.get("num_key_value_heads", 1) != heads
        if heads > 0 and width % heads == 0 and not mq:
            qkv_groups = (heads, heads, width // heads)
    if c.get("model_type") == "internlm2":  # (twin of loader.cpp's internlm2_qkv: KV groups of [q.., k, v])
        heads, width = c.get("num_attention_heads") or 0, c.get("hidden_size") or 0
        kv = c.get("num_key_value_heads") or heads
        if heads > 0 and width % heads == 0 and kv > 0 and heads % kv == 0:
            qkv_groups = (heads, kv, width // heads)
    v_first = c.get("model_type") == "codegen"  # (CodeGen: 4 groups of [q_g | v_g | k_g]: codegen_qkv)
    if v_first and (c.get("hidden_size") or 0) % 4 == 0 and (c.get("hidden_size") or 0) > 0:
        qkv_groups = (4, 4, c["hidden_size"] // 4)
    if c.get("model_type") in ("gpt_neox", "falcon"):  # (twin of loader.cpp's neox_falcon_qkv)
        heads, width = c.get("num_attention_heads") or 0, c.get("hidden_size") or 0
        kv = _falcon_kv_heads(c, heads) if c["model_type"] == "falcon" else heads
        if heads > 0 and width % heads == 0 and kv > 0 and heads % kv == 0:
            qkv_groups = (heads, kv, width // heads)
    if c.get("model_type") == "exaone":  # (EXAONE 3 / 3.5 as released: twin of loader.cpp's family_names)
        c = dict(c)
        for frm, to in (("num_layers", "num_hidden_layers"), ("layer_norm_epsilon", "rms_norm_eps"),
                        ("activation_function", "hidden_act")):  # fmt: skip
            if c.get(frm) is not None and c.get(to) is None:
                c[to] = c[frm]
        renamed = {}
        for name in where:
            to = {"transformer.wte.weight": "model.embed_tokens.weight",
                  "transformer.ln_f.weight": "model.norm.weight"}.get(name, name)  # fmt: skip
            if name.startswith("transformer.h."):
                to = "model.layers." + name[len("transformer.h.") :]
                for part, with_ in _EXAONE_PARTS:
                    if part in to:
                        to = to.replace(part, with_, 1)
                        break
            if to in renamed:
                raise ValueError(f"tensor '{to}' appears twice in '{path}'")
            renamed[to] = name
        stored = {to: stored[name] for to, name in renamed.items()}
        where = {to: where[name] for to, name in renamed.items()}
    names = set(where)
    # (StableLM's per-head q / k LayerNorms, norms.<h>.weight: stacked into [heads, head_dim], as GGUF
    # holds them; twin of loader.cpp's)
    stacks: dict[str, list[tuple[int, str]]] = {}
    if c.get("model_type") == "stablelm":
        for name in where:
            for part, to in ((".self_attn.q_layernorm.norms.", ".self_attn.q_norm.weight"),
                             (".self_attn.k_layernorm.norms.", ".self_attn.k_norm.weight")):  # fmt: skip
                head, _, suffix = name.partition(part)[2].partition(".")
                if part in name and suffix == "weight" and head.isdigit():
                    stacks.setdefault(name.partition(part)[0] + to, []).append((int(head), name))
        for to, heads in stacks.items():
            heads.sort()
            if [h for h, _ in heads] != list(range(len(heads))):
                raise ValueError(f"malformed per-head q / k norms near '{to}' in '{path}'")
        names |= set(stacks)

    bitnet = _bitnet_config(c, path)
    scale_mul = bitnet and c["quantization_config"].get("linear_class") == "autobitlinear"
    if bitnet:  # (twin of bitnet_linear's refusal of unpacked matrices)
        for n in where:
            if n + "_scale" in where and where[n].tensors[stored[n]].dtype != "U8":
                raise ValueError(f"BitNet matrix '{n}' in '{path}' is stored unpacked (as floats): only "
                                 "packed (uint8) ones are supported")  # fmt: skip

    if fp8:  # (twin of fp8_linear's refusals)
        cfg_where = f"'{os.path.join(path, 'config.json')}'"
        for n in where:
            info = where[n].tensors[stored[n]]
            if info.dtype == "F8_E5M2":
                raise ValueError(f"tensor '{n}' in {cfg_where} is FP8 E5M2, which is not supported (E4M3 is)")
            if info.dtype == "F8_E4M3":
                _fp8_matrix(n, where, stored, fp8_block, fp8_e8m0, cfg_where)

    packed_mats = _compressed_matrices(where, stored, ct, path) if ct is not None else {}
    if gptq is not None:
        packed_mats.update(_gptq_matrices(where, stored, gptq, path))
    names |= set(packed_mats)

    def get_tensor(n: str, u8: bool = False) -> np.ndarray:
        if n in packed_mats:
            return packed_mats[n]
        if fp8 and where[n].tensors[stored[n]].dtype == "F8_E4M3":
            cfg_where = f"'{os.path.join(path, 'config.json')}'"
            return _fp8_matrix(n, where, stored, fp8_block, fp8_e8m0, cfg_where)
        if bitnet and n.endswith(".weight") and where[n].tensors[stored[n]].dtype == "U8":
            scale_name = n + "_scale"
            if scale_name not in where:
                raise ValueError(f"missing tensor '{scale_name}' in '{path}' (BitNet's packed weights need "
                                 "their scale)")  # fmt: skip
            scale = where[scale_name].tensor(stored[scale_name]).reshape(-1)
            if scale.shape != (1,) or not (np.isfinite(scale[0]) and scale[0] > 0):
                raise ValueError(f"tensor '{scale_name}' in '{path}' must hold one valid scale")
            packed = where[n].u8(stored[n])
            if packed.ndim != 2 or packed.shape[1] % 64 != 0:
                raise ValueError(f"BitNet matrix '{n}' of {packed.shape[-1]} columns in '{path}' is not "
                                 "supported (a multiple of 64 is)")  # fmt: skip
            return BitLinear.unpack(packed, float(scale[0]), n, scale_mul)  # type: ignore[return-value]
        if n in stacks:
            return np.stack([where[h].tensor(stored[h]).reshape(-1) for _, h in stacks[n]]).astype(np.float32)
        t = where[n].u8(stored[n]) if u8 else where[n].tensor(stored[n])
        heads, kv, hd = qkv_groups
        if heads and ".self_attn.qkv_proj." in n and t.shape[0] == (heads + 2 * kv) * hd:
            per, rest = heads // kv, t.shape[1:]  # (kv groups of per queries, a key and a value)
            g = t.reshape(kv, per + 2, hd, *rest)
            key, value = (per + 1, per) if v_first else (per, per + 1)
            t = np.concatenate([g[:, :per].reshape(-1, *rest), g[:, key].reshape(-1, *rest),
                                g[:, value].reshape(-1, *rest)]).reshape(t.shape)  # fmt: skip
        conv = n.startswith("model.layers.") and n.endswith(".weight")
        conv = conv and (".self_attn." in n or ".mlp." in n)
        if c.get("model_type") == "gpt2" and conv and t.ndim == 2:  # (GPT-2's Conv1D: [in, out])
            t = np.ascontiguousarray(t.T)
        if c.get("model_type") == "opt" and n == "model.embed_positions.weight" and t.ndim == 2:
            t = t[2:]  # (OPT's positions start at row 2: loader.cpp's opt_positions)
        return t

    arch = c.get("model_type") or (c.get("architectures") or [""])[0]
    bamba = arch in ("bamba", "BambaForCausalLM")  # (Granite 4.0-H's layers, its own names)
    if arch in ("gemma4", "Gemma4ForConditionalGeneration"):  # (its language model)
        if not isinstance(c.get("text_config"), dict):
            raise ValueError(f"'{path}' has no text_config object")
        return _gemma4_hf(c["text_config"], get_tensor, names, "model.language_model.")
    if arch in ("gemma4_text", "Gemma4ForCausalLM"):
        return _gemma4_hf(c, get_tensor, names, "model.")
    if arch in ("gemma3n", "Gemma3nForConditionalGeneration"):  # (its language model)
        if not isinstance(c.get("text_config"), dict):
            raise ValueError(f"'{path}' has no text_config object")
        return _gemma4_hf(c["text_config"], get_tensor, names, "model.language_model.", "gemma3n")
    if arch in ("gemma3n_text", "Gemma3nForCausalLM"):
        return _gemma4_hf(c, get_tensor, names, "model.", "gemma3n")
    if arch in ("gemma3", "Gemma3ForConditionalGeneration"):
        return _gemma3_hf(c["text_config"], get_tensor, names, multimodal=True)
    if arch in ("gemma3_text", "Gemma3ForCausalLM"):
        return _gemma3_hf(c, get_tensor, names, multimodal=False)
    if arch in ("gemma2", "Gemma2ForCausalLM"):
        return _gemma3_hf(c, get_tensor, names, multimodal=False, arch="gemma2")
    if arch in ("vaultgemma", "VaultGemmaForCausalLM"):  # (Gemma 2 without the sublayers' output norms)
        return _gemma3_hf(c, get_tensor, names, multimodal=False, arch="gemma2", no_post_norms=True)
    if arch in ("gemma", "GemmaForCausalLM"):
        return _gemma3_hf(c, get_tensor, names, multimodal=False, arch="gemma")
    if arch not in _HF_ARCHS:
        raise ValueError(f"unknown architecture '{arch}' in '{path}' {_SUPPORTED_HF}")
    arch = _HF_ARCHS[arch]

    def get(key: str, default: Any) -> Any:
        v = c.get(key)
        return default if v is None else v

    ernie = arch in ("ernie4_5", "ernie4_5-moe")  # (RoPE on interleaved pairs, natively)
    if ernie and get("use_bias", False):
        raise ValueError(f"use_bias=true in '{path}' is not supported")
    if get("mlp_bias", False) and arch != "jais2":  # (as loader.cpp: biases where an architecture has none)
        raise ValueError(f"mlp_bias=true in '{path}' is not supported")
    act = c.get("hidden_act")  # (SwiGLU in the Llama family; Arcee's relu^2; Nemotron-H's its own)
    own_act = ("nemotron_h", "gptneox", "falcon", "apertus", "gptj", "gpt2", "starcoder")  # (read below)
    if isinstance(act, str) and arch not in own_act:
        own = {"arcee": "relu2", "nemotron": "relu2", "bitnet": "relu2", "jais2": "relu2",
               **({"llama": "relu2"} if c.get("model_type") == "nanochat" else {}),
               "starcoder2": "gelu_pytorch_tanh",
               "phi2": "gelu_new"}  # fmt: skip
        want = own.get(arch, "silu")
        if (
            act != want
            and not (want == "silu" and act == "swish")
            and not (want == "gelu_new" and act == "gelu_pytorch_tanh")
        ):
            raise ValueError(
                f"hidden_act '{act}' in '{path}' is not supported ({want} is, for this architecture)"
            )
    if arch not in (
        "qwen2",
        "qwen2moe",
        "glm4moe",
        "glm4",
        "chatglm",
        "gpt-oss",
        "seed_oss",
        "nemotron",
        "gptneox",
        "phimoe",
        "jais2",
    ) and get("attention_bias", False):
        raise ValueError(f"attention_bias=true in '{path}' is not supported")
    params = c.get("rope_parameters") or {}
    olmo3: dict[str, Any] = {}
    if arch == "olmo3":  # window, RoPE per layer type: the full layers' parameters are the model's
        olmo3, full = arch_config.olmo3_hf(c, get("num_hidden_layers", 0))
        params = full if full is not None else (c.get("rope_scaling") or {})
    default_theta = {
        "gpt-oss": 150000.0,
        "qwen3vl": 500000.0,
        "qwen3vlmoe": 500000.0,
        "qwen2vl": 1e6,
        "minimax-m2": 5e6,
        "exaone": 500000.0,
    }.get(arch, 1e4)
    theta = params.get("rope_theta", get("rope_theta", default_theta))
    s = params if arch == "olmo3" else c.get("rope_scaling") or params
    if arch == "gpt-oss" and "rope_type" not in s and "type" not in s:  # GptOssConfig's default
        s = dict(rope_type="yarn", factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                 original_max_position_embeddings=4096)  # fmt: skip
    stype = s.get("rope_type", s.get("type", "default"))
    scaling: dict[str, Any] = {}
    if stype in ("linear", "llama3"):
        scaling = {
            "type": stype,
            "factor": s.get("factor", 1.0),
            "low_freq_factor": s.get("low_freq_factor", 1.0),
            "high_freq_factor": s.get("high_freq_factor", 4.0),
            "original_max_position": s.get("original_max_position_embeddings", 8192),
        }
    elif stype == "yarn" and arch not in ("phi3", "phimoe"):
        scaling = arch_config.yarn_hf(c, s)
    elif stype == "dynamic":  # Hunyuan's NTK-alpha: a fixed base; without alpha nothing within the context
        alpha = s.get("alpha") or 0.0
        hd = get("head_dim", 0) or get("hidden_size", 0) // max(get("num_attention_heads", 1), 1)
        if alpha > 0 and hd > 2:
            theta = float(np.float32(float(np.float32(theta)) * alpha ** (hd / (hd - 2))))
    elif stype != "default" and not (
        arch in ("phi3", "phimoe", "minicpm3", "minicpm") and stype in ("longrope", "su")
    ):
        raise ValueError(f"unsupported rope scaling type '{stype}' in '{path}'")
    partial_ok = ("phi3", "phimoe", "glm4moe", "glm4", "chatglm", "granitehybrid", "minimax-m2", "stablelm",
                  "phi2", "nemotron", "gptneox", *QWEN35)  # fmt: skip
    if arch not in partial_ok and get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError(f"partial RoPE (partial_rotary_factor) in '{path}' is not supported")
    # (no attention: Mamba-2's heads and inner size stand in, unused; Mamba-1 one head of d_inner)
    mamba2, mamba1 = arch == "mamba2", arch == "mamba"
    n_embd, n_head = get("hidden_size", 0), get("num_heads" if mamba2 else "num_attention_heads", 0)
    if mamba1:
        n_head = 1
    expand = get("expand", 2)
    common = dict(
        n_vocab=get("vocab_size", 0),
        n_embd=n_embd,
        # (transformers 5 writes Nemotron-H's layer count as its pattern's length alone)
        n_layer=get("num_hidden_layers", 0)
        or (len(arch_config.nemotronh_layer_kinds(c, 0)) if arch == "nemotron_h" else 0),
        n_head=n_head,
        n_head_kv=get("num_key_value_heads", n_head),
        head_dim=(
            128  # Ernie4_5Config's, NemotronHConfig's and Qwen3VLTextConfig's default (null: hidden / heads)
            if (
                ernie
                or arch in ("nemotron_h", "qwen3vl", "seed_oss", "afmoe")
                or c.get("model_type") in ("internlm3", "iquestcoder", "cwm")
            )
            and "head_dim" not in c
            else get(
                "head_dim",
                int(min(max(expand, 0.0), 64.0) * n_embd)  # (Mamba-1: one head of d_inner)
                if mamba1
                else n_embd // n_head
                if n_head and n_embd % n_head == 0
                else 0,
            )
        ),
        # (Qwen3.5 MoE: the experts')
        n_ff=int(min(max(expand, 0.0), 64.0) * n_embd)
        if mamba2 or mamba1
        else get("intermediate_size", get("moe_intermediate_size", 0)),
        n_ctx_train=min(max(get("max_position_embeddings", 4096), 1), 1 << 30),
        rms_eps=get("rms_norm_eps", 1e-6),
        rope_theta=theta,
        rope_scaling=scaling,
        # (GPT-J's rotate_every_two; Helium's rotate_half pairs interleaved dimensions too)
        rope_style="interleaved" if ernie or arch == "gptj" or c.get("model_type") == "helium" else "neox",
        qkv_bias=arch in ("qwen2", "qwen2vl") or (arch == "qwen2moe" and bool(get("qkv_bias", True))),
        qk_norm=arch in (*QK_NORM, "olmo3"),
        # (transformers' NemotronH never ties its lm_head, whatever tie_word_embeddings says)
        tied_embeddings=(bool(get("tie_word_embeddings", False)) and arch != "nemotron_h")
        or ("lm_head.weight" not in where and "lm_head.weight" not in packed_mats),
        clamp_qkv=float(np.float32(get("clip_qkv", 0.0))) if arch == "olmoe" else 0.0,  # (OLMoE's)
    )
    if arch == "gpt-oss":
        common.update(arch_config.gpt_oss_hf(c, common["n_layer"]))
        common["qkv_bias"] = common["o_bias"]
    elif arch == "olmo3":
        common.update(olmo3)
    elif arch in ("exaone4", "exaone-moe"):
        common.update(arch_config.exaone4_hf(c, common["n_layer"]))
    elif arch in ("phi3", "phimoe"):
        common.update(arch_config.phi3_hf(c, common))
        if arch == "phimoe":
            common.update(arch_config.phimoe_hf(c, common.get("rope_scaling")))
    elif arch == "smollm3":
        common.update(arch_config.smollm3_hf(c, common["n_layer"]))
    elif c.get("model_type") in ("granite_swa", "granitemoe_swa"):  # window, sinks, RoPE bases
        scaled = (common.get("rope_scaling") or {}).get("type", "none") != "none"
        common.update(arch_config.granite_swa_hf(c, common["n_layer"], scaled))
    else:
        common.update(arch_config.window_hf(arch, c, common["n_layer"]))
    if arch == "arcee":  # (AFM: down(relu(up x)^2), no gate)
        common["ffn_relu2"] = True
    if c.get("model_type") == "flex_olmo":  # (OLMoE's layers with OLMo 2's post-norms alone)
        common["no_pre_norms"] = True
    if c.get("model_type") == "nanochat":  # (weightless norms, relu^2, q / k normed after RoPE; below)
        cap = c.get("final_logit_softcapping", 15.0)  # (15 unless set; null: none)
        common.update(ffn_relu2=True, embd_norm=True, qk_norm=True, qk_norm_after_rope=True,
                      final_softcap=float(np.float32(cap or 0.0)))  # fmt: skip
    if arch == "bitnet":  # (Llama's layers with sub-norms and a relu^2 gate)
        common.update(sub_norms=True, glu_relu2=True)
    if arch == "phi2":  # Phi-1 / 1.5 / 2: Cohere's parallel block, LayerNorm + bias, GELU MLP, biases
        rope_dim = _hf_rotated_dims(c, common["head_dim"], 0.5, "partial_rotary_factor", path)
        if get("qk_layernorm", False):
            raise ValueError(f"qk_layernorm=true in '{path}' is not supported")
        common.update(layer_norm=True, norm_bias=True, ffn_gelu=True, ffn_bias=True, parallel_block=True,
                      qkv_bias=True, o_bias=True, rms_eps=get("layer_norm_eps", 1e-5),
                      rope_dim=rope_dim)  # fmt: skip
    if arch == "stablelm":  # LayerNorm with bias, partial NeoX RoPE (0.25), its options
        qk = bool(get("qk_layernorm", False))
        common.update(layer_norm=True, norm_bias=True, rms_eps=get("layer_norm_eps", 1e-5),
                      rope_dim=_hf_rotated_dims(c, common["head_dim"], 0.25, "partial_rotary_factor", path),
                      parallel_block=bool(get("use_parallel_residual", False)), qk_norm=qk, qk_norm_heads=qk,
                      qkv_bias=bool(get("use_qkv_bias", False)))  # fmt: skip
    if arch == "jais2":  # Llama's layers with LayerNorms (bias), relu^2 MLPs and biases
        bias = bool(get("attention_bias", True))
        common.update(layer_norm=True, norm_bias=True, ffn_relu2=True, qkv_bias=bias, o_bias=bias,
                      ffn_bias=bool(get("mlp_bias", True)), rms_eps=get("layer_norm_eps", 1e-5))  # fmt: skip
    if arch == "nemotron":  # LayerNorm1P with bias, relu^2 MLP, partial NeoX RoPE (0.5)
        bias = bool(get("attention_bias", False))
        common.update(layer_norm=True, norm_bias=True, ffn_relu2=True, qkv_bias=bias, o_bias=bias,
                      rms_eps=get("norm_eps", 1e-5),
                      rope_dim=_hf_rotated_dims(c, common["head_dim"], 0.5, "partial_rotary_factor",
                                                path))  # fmt: skip
    if arch == "gptneox":  # Pythia, GPT-NeoX-20B: LayerNorms with bias, exact GELU (gelu), parallel residual
        exact = _gelu_is_exact(get("hidden_act", "gelu"), "hidden_act", path)
        rp = c.get("rope_parameters") or {}
        parallel, bias = bool(get("use_parallel_residual", True)), bool(get("attention_bias", True))
        common.update(
            layer_norm=True,
            norm_bias=True,
            ffn_gelu=True,
            ffn_bias=True,
            gelu_erf=exact,
            parallel_block=parallel,
            parallel_norms=parallel,
            qkv_bias=bias,
            o_bias=bias,
            rms_eps=get("layer_norm_eps", 1e-5),
            rope_dim=_hf_rotated_dims(c, common["head_dim"], 0.25, "rotary_pct", path),
        )
        if "rope_theta" not in rp and c.get("rotary_emb_base") is not None:
            common["rope_theta"] = float(c["rotary_emb_base"])
    if arch == "falcon":  # Falcon 7B / 40B / 180B: LayerNorms with bias, exact GELU, parallel block
        if get("alibi", False):
            raise ValueError(f"alibi=true (ALiBi positions, Falcon-RW) in '{path}' is not supported")
        exact = _gelu_is_exact(get("activation", "gelu"), "activation", path)
        new_arch, bias = bool(get("new_decoder_architecture", False)), bool(get("bias", False))
        common.update(layer_norm=True, norm_bias=True, ffn_gelu=True, gelu_erf=exact,
                      parallel_block=new_arch or bool(get("parallel_attn", True)),
                      parallel_norms=new_arch and get("num_ln_in_parallel_attn", 2) == 2,
                      n_head_kv=_falcon_kv_heads(c, n_head), n_ff=get("ffn_hidden_size", 4 * n_embd),
                      qkv_bias=bias, o_bias=bias, ffn_bias=bias,
                      rms_eps=get("layer_norm_epsilon", 1e-5))  # fmt: skip
    if arch == "gptj":  # GPT-J: Phi-2's parallel block, RoPE on interleaved pairs of rotary_dim
        exact = _gelu_is_exact(get("hidden_act", "gelu_new"), "hidden_act", path)
        if c.get("rotary_dim") is None and c.get("model_type") == "codegen":
            raise ValueError(f"rotary_dim null in '{path}' is not supported (CodeGen's tables then span the "
                             "whole width)")  # fmt: skip
        dims = common["head_dim"] if c.get("rotary_dim") is None else c["rotary_dim"]
        common.update(layer_norm=True, norm_bias=True, ffn_gelu=True, ffn_bias=True, parallel_block=True,
                      gelu_erf=exact, rms_eps=get("layer_norm_epsilon", 1e-5),
                      rope_dim=arch_config.rotated(dims, common["head_dim"]))  # fmt: skip
    if arch in ("bloom", "mpt", "gpt2", "starcoder"):  # (keys renamed above; ALiBi or learned positions)
        common.update(arch_config.gpt_classic_hf(arch, c, common, path))
    if arch == "afmoe":  # window, the global layers NoPE, the attention's gate, muP's embedding scale
        common.update(arch_config.afmoe_hf(c, common, path))
    if arch == "dbrx":  # LayerNorms without bias (torch's eps), attn_config's clip_qkv, SiLU experts
        attn = c.get("attn_config") if isinstance(c.get("attn_config"), dict) else {}
        clip = attn.get("clip_qkv") or 0.0
        if not clip >= 0:
            raise ValueError(f"invalid attn_config.clip_qkv in '{path}'")
        act = ((c.get("ffn_config") or {}).get("ffn_act_fn") or {}).get("name", "silu")
        if act != "silu":
            raise ValueError(f"ffn_config.ffn_act_fn in '{path}' is not supported (silu is)")
        common.update(layer_norm=True, rms_eps=1e-5, clamp_qkv=float(np.float32(clip)))
        if attn.get("rope_theta") is not None:  # (DBRX's own base over rope_parameters, as llama.cpp)
            common["rope_theta"] = float(attn["rope_theta"])
    if arch == "apertus":  # xIELU MLPs: each layer's parameters from mlp.act_fn.*
        if get("hidden_act", "xielu") != "xielu":
            raise ValueError(f"hidden_act '{c['hidden_act']}' in '{path}' is not supported (xielu is)")
        raw: list[list[float]] = []
        for field in XIELU_FIELDS:
            values = []
            for i in range(common["n_layer"]):
                name = f"model.layers.{i}.mlp.act_fn.{field}"
                if name not in where:
                    raise ValueError(f"missing tensor '{name}' in '{path}'")
                t = get_tensor(name).reshape(-1)
                if t.size != 1:
                    raise ValueError(f"tensor '{name}' in '{path}' must hold one number")
                values.append(float(t[0]))
            raw.append(values)
        common.update(ffn_xielu=True, xielu=xielu_applied(*raw))
    if arch == "olmo":  # weightless LayerNorms (eps 1e-5), clip_qkv: null or a bound
        common.update(layer_norm=True, rms_eps=1e-5, clamp_qkv=float(np.float32(get("clip_qkv", 0.0))))
    if arch == "starcoder2":  # LayerNorm with bias, GELU MLP, use_bias on every projection
        bias = bool(get("use_bias", True))
        common.update(layer_norm=True, norm_bias=True, ffn_gelu=True, ffn_bias=bias, qkv_bias=bias,
                      o_bias=bias, rms_eps=get("norm_epsilon", 1e-5))  # fmt: skip
    if arch in ("hunyuan-dense", "hunyuan-moe"):  # (q / k norms after RoPE)
        common.update(qk_norm=True, qk_norm_after_rope=True)
    if arch == "hunyuan-moe" and get("use_cla", False):
        raise ValueError(f"use_cla=true (cross-layer attention) in '{path}' is not supported")
    if c.get("model_type") == "internlm3" and (get("qkv_bias", False) or get("bias", False)):
        raise ValueError(f"qkv_bias / bias=true in '{path}' is not supported")
    if c.get("model_type") == "internlm2":  # (InternLM2Config's bias: wqkv and wo's)
        common["qkv_bias"] = common["o_bias"] = bool(get("bias", True))
    if arch == "seed_oss":  # (SeedOssConfig's defaults: q / k / v biases, none on the output)
        common.update(
            qkv_bias=bool(get("attention_bias", True)), o_bias=bool(get("attention_out_bias", False))
        )
    if arch == "llama4":  # NoPE layers, chunks, temperature, the dense MLP's size
        common.update(arch_config.llama4_hf(c, common["n_layer"]))
    if arch in ("command-r", "cohere2"):
        common.update(arch_config.cohere_hf(arch, c, common["n_layer"]))
    if arch == "minimax-m2":  # q / k norms over all heads, partial RoPE
        common.update(arch_config.minimax_hf(c, common["head_dim"]))
    if arch in ("granite", "granitemoe"):
        common.update(arch_config.granite_hf(c))
    if arch == "deepseek2":
        common.update(arch_config.deepseek2_hf(c, common))
    if arch == "minicpm3":  # latent attention with rotate_half RoPE, LongRoPE, the multipliers
        common.update(arch_config.minicpm3_hf(c, common))
    if arch == "minicpm":  # Granite's multipliers under MiniCPM's names, LongRoPE
        common.update(arch_config.minicpm_hf(c, common))
    if arch == "deci":  # per-layer shapes (block_configs)
        common.update(arch_config.deci_hf(c, common))
    if arch == "glm4moe":
        common.update(arch_config.glm4moe_hf(c, common))
    if arch in ("glm4", "chatglm"):
        common.update(arch_config.glm4_hf(c, common))
    if arch == "mistral3" or c.get("model_type") == "mistral4":  # Llama 4's attention temperature
        common.update(arch_config.temperature_hf(s))
    if arch in QWEN35:
        common.update(arch_config.qwen35_hf(c, common))
    if arch in LFM2:
        common.update(arch_config.lfm2_hf(c, common["n_layer"], moe=arch == "lfm2moe"))
    if arch == "granitehybrid":
        common.update(arch_config.granitehybrid_hf(c, common["n_layer"], n_embd, common["head_dim"]))
    if arch == "nemotron_h":
        common.update(arch_config.nemotronh_hf(c, common["n_layer"]))
    if mamba2:
        common.update(arch_config.mamba2_hf(c, common["n_layer"], n_embd))
    if mamba1:
        common.update(arch_config.mamba1_hf(c, common))
    if arch == "jamba":
        common.update(arch_config.jamba_hf(c, common))
    if arch == "falcon-h1":
        common.update(arch_config.falconh1_hf(c, common["n_layer"], n_embd))
    if not (np.isfinite(common["clamp_qkv"]) and common["clamp_qkv"] >= 0):
        raise ValueError(f"invalid clip_qkv {common['clamp_qkv']} in '{path}'")
    cfg = _config(arch, **common)
    cfg["moe"] = moe_twin.hf_config(arch, c, cfg["n_layer"], cfg["n_ff"])
    layer_names = (
        _OLMO2_HF
        if arch in NO_PRE_NORMS or cfg["no_pre_norms"]
        else _GLM4_HF
        if arch == "glm4"
        else _LFM2_HF
        if arch in LFM2
        else _BAMBA_HF
        if bamba or arch == "falcon-h1"
        else _GRANITEHYBRID_HF
        if arch == "granitehybrid"
        else _NEMOTRONH_HF
        if arch in ("nemotron_h", "mamba2")
        else _MAMBA1_HF
        if mamba1
        else _JAMBA_HF
        if arch == "jamba"
        else _LLAMA4_HF
        if arch == "llama4"
        else _GLM4_HF
        if arch == "afmoe"  # (its norms renamed as GLM-4's)
        else _HF_LAYER
    )
    final_norm = "model.embedding_norm.weight" if arch in LFM2 else "model.norm.weight"
    if bamba or arch in ("jamba", "falcon-h1"):
        final_norm = "model.final_layernorm.weight"
    stem, embed = "model.layers", "model.embed_tokens.weight"
    if arch in ("nemotron_h", "mamba2", "mamba"):  # (backbone.*, norm_f)
        stem, embed, final_norm = "backbone.layers", "backbone.embeddings.weight", "backbone.norm_f.weight"
    hf_name = lambda i, f: f"{stem}.{i}.{layer_names.get(f, f)}"  # noqa: E731
    get_w: Any = get_tensor
    if arch == "olmo":
        get_w, names = _unit_norms(cfg, get_tensor, names, hf_name, final_norm)
    if c.get("model_type") == "nanochat":
        get_w, names = _nanochat(cfg, get_tensor, names, hf_name, final_norm, embed, path)
    w = _weights(
        cfg, get_w, names, hf_name, embed, final_norm, "lm_head.weight",
        ffn_fused=arch == "granitehybrid" and not bamba,
    )  # fmt: skip
    for i in cfg["moe"]["layers"]:
        moe_twin.hf_layer_weights(cfg, i, get_tensor, set(where) | set(packed_mats), w)
    if arch in (*QWEN35, "nemotron"):  # RMSNorm (Nemotron: LayerNorm1P) by 1 + w; Qwen3.5's A_log below
        norms = ("attn_norm", "ffn_norm", "q_norm", "k_norm")
        for key in ["output_norm"] + [f"layers.{i}.{n}" for i in range(cfg["n_layer"]) for n in norms]:
            if key in w:
                w[key] = w[key] + np.float32(1)
        for i in cfg["delta"]["layers"]:
            w[f"layers.{i}.ssm_a"] = -np.exp(w[f"layers.{i}.ssm_a"])
    for i in [*cfg["ssm"]["layers"], *cfg["mamba1"]["layers"]]:  # (Mamba-2's and Mamba-1's A_log too)
        w[f"layers.{i}.ssm_a"] = -np.exp(w[f"layers.{i}.ssm_a"])
    return cfg, w


# OLMo 2: post_attention_layernorm normalises the attention's output (Llama's pre-FFN norm's name).
_OLMO2_HF = {**_HF_LAYER, "post_attn_norm": "post_attention_layernorm.weight",
             "post_ffn_norm": "post_feedforward_layernorm.weight"}  # fmt: skip
# LFM2: operator_norm, out_proj, q / k layernorm, and feed_forward.w1 / w3 / w2 (gate / up / down).
_LFM2_HF = {**_HF_LAYER, "attn_norm": "operator_norm.weight", "ffn_norm": "ffn_norm.weight",
            "wo": "self_attn.out_proj.weight", "q_norm": "self_attn.q_layernorm.weight",
            "k_norm": "self_attn.k_layernorm.weight", "w_gate": "feed_forward.w1.weight",
            "w_up": "feed_forward.w3.weight", "w_down": "feed_forward.w2.weight"}  # fmt: skip
# Granite 4.0-H: the Mamba-2 mixer under mamba., the dense feed-forward as the shared MLP (input_linear:
# [gate | up]).
_GRANITEHYBRID_HF = {**_HF_LAYER, "ssm_in": "mamba.in_proj.weight", "ssm_conv": "mamba.conv1d.weight",
                     "ssm_conv_b": "mamba.conv1d.bias", "ssm_dt": "mamba.dt_bias", "ssm_a": "mamba.A_log",
                     "ssm_d": "mamba.D", "ssm_norm": "mamba.norm.weight", "ssm_out": "mamba.out_proj.weight",
                     "w_gate_up": "shared_mlp.input_linear.weight",
                     "w_down": "shared_mlp.output_linear.weight"}  # fmt: skip
# Mamba-1 (MambaForCausalLM, FalconMambaForCausalLM): backbone.layers.{i}.norm, mixer.* (dt_proj, x_proj).
_MAMBA1_HF = {"attn_norm": "norm.weight", "ssm_in": "mixer.in_proj.weight", "ssm_conv": "mixer.conv1d.weight",
              "ssm_conv_b": "mixer.conv1d.bias", "ssm_x": "mixer.x_proj.weight",
              "ssm_dt_w": "mixer.dt_proj.weight", "ssm_dt": "mixer.dt_proj.bias", "ssm_a": "mixer.A_log",
              "ssm_d": "mixer.D", "ssm_out": "mixer.out_proj.weight"}  # fmt: skip
# Jamba: the Mamba-1 mixer under mamba. (its norms of dt, B and C too), the dense MLP under feed_forward.
_JAMBA_HF = {**_HF_LAYER, "ffn_norm": "pre_ff_layernorm.weight", "w_gate": "feed_forward.gate_proj.weight",
             "w_up": "feed_forward.up_proj.weight", "w_down": "feed_forward.down_proj.weight",
             **{k: v.replace("mixer.", "mamba.") for k, v in _MAMBA1_HF.items() if k != "attn_norm"},
             "ssm_dt_norm": "mamba.dt_layernorm.weight", "ssm_b_norm": "mamba.b_layernorm.weight",
             "ssm_c_norm": "mamba.c_layernorm.weight"}  # fmt: skip
# Bamba: Granite 4.0-H's mixer names, a plain gated MLP under feed_forward. after pre_ff_layernorm.
_BAMBA_HF = {**{k: v for k, v in _GRANITEHYBRID_HF.items() if k != "w_gate_up"},
             "ffn_norm": "pre_ff_layernorm.weight", "w_gate": "feed_forward.gate_proj.weight",
             "w_up": "feed_forward.up_proj.weight", "w_down": "feed_forward.down_proj.weight"}  # fmt: skip
# Nemotron-H: backbone.layers.{i}.norm before the block's one sublayer, mixer.* for it.
_NEMOTRONH_HF = {"attn_norm": "norm.weight", "ffn_norm": "norm.weight", "wq": "mixer.q_proj.weight",
                 "wk": "mixer.k_proj.weight", "wv": "mixer.v_proj.weight", "wo": "mixer.o_proj.weight",
                 "bo": "mixer.o_proj.bias",
                 **{k: v.replace("mamba.", "mixer.")
                    for k, v in _GRANITEHYBRID_HF.items() if k.startswith("ssm_")},
                 "w_up": "mixer.up_proj.weight", "w_down": "mixer.down_proj.weight"}  # fmt: skip
# Llama 4: the dense layers' MLP under feed_forward.
_LLAMA4_HF = {**_HF_LAYER, "w_gate": "feed_forward.gate_proj.weight", "w_up": "feed_forward.up_proj.weight",
              "w_down": "feed_forward.down_proj.weight"}  # fmt: skip
# GLM-4: the norms of the attention's and the MLP's outputs (post_attention_layernorm: the MLP's input).
_GLM4_HF = {**_HF_LAYER, "post_attn_norm": "post_self_attn_layernorm.weight",
            "post_ffn_norm": "post_mlp_layernorm.weight"}  # fmt: skip
_GEMMA3_HF = {
    "ffn_norm": "pre_feedforward_layernorm.weight", "post_attn_norm": "post_attention_layernorm.weight",
    "post_ffn_norm": "post_feedforward_layernorm.weight",
}  # fmt: skip
_GEMMA3_NORMS = ("attn_norm", "q_norm", "k_norm", "post_attn_norm", "ffn_norm", "post_ffn_norm")


def _gemma3_hf(
    c: dict[str, Any],
    get: Any,
    names: set[str],
    multimodal: bool,
    arch: str = "gemma3",
    no_post_norms: bool = False,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Gemma 3 (or 2: ``arch``) from a folder. HF stores RMSNorm weights w and multiplies by 1 + w
    (float32): each norm becomes 1 + w here, the factor the forward pass applies (as llama.cpp's
    converter stores it)."""
    kw = arch_config.gemma3_hf(c, arch)
    prefix = "model."
    if multimodal:
        prefix = "language_model.model." if "language_model.model.embed_tokens.weight" in names else (
            "model.language_model.")  # fmt: skip
    head = "lm_head.weight"
    if multimodal and head not in names:  # before transformers 4.52
        head = "language_model.lm_head.weight"
    kw["tied_embeddings"] = kw["tied_embeddings"] or head not in names
    cfg = _config(arch, **kw, no_post_norms=no_post_norms)

    # (Gemma 1's post_attention_layernorm is its pre-FFN norm, as Llama's; VaultGemma keeps Gemma 2's
    # pre_feedforward_layernorm alone)
    four = arch in POST_NORMS

    def name_of(i: int, f: str) -> str:
        return f"{prefix}layers.{i}.{(_GEMMA3_HF if four else {}).get(f, _HF_LAYER.get(f, ''))}"

    w = _weights(cfg, get, names, name_of, prefix + "embed_tokens.weight", prefix + "norm.weight", head)
    norms = [n for n in _GEMMA3_NORMS if cfg["qk_norm"] or n not in ("q_norm", "k_norm")]
    norms = [n for n in norms if (four and not no_post_norms) or n not in ("post_attn_norm", "post_ffn_norm")]
    for key in ["output_norm"] + [f"layers.{i}.{n}" for i in range(cfg["n_layer"]) for n in norms]:
        w[key] = (np.float32(1) + w[key].astype(np.float32)).astype(np.float32)
    return cfg, w


_GEMMA4_GGUF = {
    "out_scale": "layer_output_scale.weight", "ple_gate": "inp_gate.weight", "ple_proj": "proj.weight",
    "ple_norm": "post_norm.weight", "ffn_norm_2": "pre_ffw_norm_2.weight",
    "post_ffn_norm_1": "post_ffw_norm_1.weight", "post_ffn_norm_2": "post_ffw_norm_2.weight",
    "router": "ffn_gate_inp.weight", "router_scale": "ffn_gate_inp.scale",
    "expert_scale": "ffn_down_exps.scale",
    "gate_up_exps": "ffn_gate_up_exps.weight", "gate_exps": "ffn_gate_exps.weight",
    "up_exps": "ffn_up_exps.weight", "down_exps": "ffn_down_exps.weight",
    "altup_router": "altup_router.weight", "altup_router_norm": "altup_router_norm.weight",
    "altup_predict": "altup_predict_coef.weight", "altup_correct": "altup_correct_coef.weight",
    "altup_correct_scale": "altup_correct_scale.weight", "laurel_l": "laurel_l.weight",
    "laurel_r": "laurel_r.weight", "laurel_norm": "laurel_post_norm.weight",
}  # fmt: skip
_GEMMA4_GLOBALS_GGUF = {
    "tok_embd": "token_embd.weight", "output_norm": "output_norm.weight",
    "ple_tok_embd": "per_layer_token_embd.weight", "ple_model_proj": "per_layer_model_proj.weight",
    "ple_proj_norm": "per_layer_proj_norm.weight", "altup_proj": "altup_proj.weight",
    "altup_unembd": "altup_unembd_proj.weight",
}  # fmt: skip
_GEMMA4_HF = {
    "ffn_norm": "pre_feedforward_layernorm.weight", "post_attn_norm": "post_attention_layernorm.weight",
    "post_ffn_norm": "post_feedforward_layernorm.weight", "out_scale": "layer_scalar",
    "ple_gate": "per_layer_input_gate.weight", "ple_proj": "per_layer_projection.weight",
    "ple_norm": "post_per_layer_input_norm.weight", "ffn_norm_2": "pre_feedforward_layernorm_2.weight",
    "post_ffn_norm_1": "post_feedforward_layernorm_1.weight",
    "post_ffn_norm_2": "post_feedforward_layernorm_2.weight", "router": "router.proj.weight",
    "router_scale": "router.scale", "expert_scale": "router.per_expert_scale",
    "gate_up_exps": "experts.gate_up_proj", "down_exps": "experts.down_proj",
    "altup_router": "altup.modality_router.weight", "altup_router_norm": "altup.router_norm.weight",
    "altup_predict": "altup.prediction_coefs.weight", "altup_correct": "altup.correction_coefs.weight",
    "altup_correct_scale": "altup.correct_output_scale", "laurel_l": "laurel.linear_left.weight",
    "laurel_r": "laurel.linear_right.weight", "laurel_norm": "laurel.post_laurel_norm.weight",
}  # fmt: skip


def _gemma4_weights(
    cfg: dict[str, Any], get: Any, names: set[Any], name_of: Any, glob: dict[str, str]
) -> dict[str, np.ndarray]:
    """Gemma 4's tensors by role (twin of loader.cpp's build_gemma4_weights): a layer reading another's
    K/V has no wk / wv / k_norm; wv may be absent (k = v); out_scale is optional."""
    from .gemma4 import head_dim, kv_source, n_head_kv

    e, p, n_layer = cfg["n_embd"], cfg["ple_dim"], cfg["n_layer"]
    w: dict[str, np.ndarray] = {}
    _take(get, names, w, glob["tok_embd"], "tok_embd", cfg["n_vocab"], e)
    _take(get, names, w, glob["output_norm"], "output_norm", 1, e)
    if cfg["tied_embeddings"] or glob["output"] not in names:
        w["output"] = w["tok_embd"]
    else:
        _take(get, names, w, glob["output"], "output", cfg["n_vocab"], e)
    a = cfg["altup"]
    if p > 0:  # (the table may have more rows than the vocabulary, never fewer; Gemma 3n's fewer)
        table = glob["ple_tok_embd"]
        have = get(table).reshape(-1, n_layer * p).shape[0] if table in names else 0
        rows = max(have, 1) if a > 0 else max(have, cfg["n_vocab"])
        _take(get, names, w, table, "ple_tok_embd", rows, n_layer * p)
        _take(get, names, w, glob["ple_model_proj"], "ple_model_proj", n_layer * p, e)
        _take(get, names, w, glob["ple_proj_norm"], "ple_proj_norm", 1, p)
    for field in ("altup_proj", "altup_unembd") if a > 1 else ():  # (GGUF's 3-D stack, or one per stream)
        if glob[field] in names:
            _take(get, names, w, glob[field], field, (a - 1) * e, e)
            stack = w.pop(field).reshape(a - 1, e, e)
            for s in range(a - 1):
                w[f"{field}.{s}"] = stack[s]
        else:
            for s in range(a - 1):
                _take(get, names, w, f"{glob[field]}.{s}.weight", f"{field}.{s}", e, e)
    for i in range(n_layer):
        hd = head_dim(cfg, i)
        q, kv, ff = cfg["n_head"] * hd, n_head_kv(cfg, i) * hd, cfg["layer_n_ff"][i]
        shapes = {"attn_norm": (1, e), "wq": (q, e), "q_norm": (1, hd), "wo": (e, q),
                  "post_attn_norm": (1, e), "ffn_norm": (1, e), "w_gate": (ff, e), "w_up": (ff, e),
                  "w_down": (e, ff), "post_ffn_norm": (1, e)}  # fmt: skip
        if kv_source(cfg, i) == i:
            shapes.update(wk=(kv, e), k_norm=(1, hd))
            if name_of(i, "wv") in names:
                shapes.update(wv=(kv, e))
        if name_of(i, "out_scale") in names:
            shapes.update(out_scale=(1, 1))
        if p > 0:
            shapes.update(ple_gate=(p, e), ple_proj=(e, p), ple_norm=(1, e))
        if a > 0:
            r = cfg["laurel_rank"]
            shapes.update(altup_router=(a, e), altup_router_norm=(1, e), altup_predict=(a * a, a),
                          altup_correct=(a, a), altup_correct_scale=(1, e), laurel_l=(r, e), laurel_r=(e, r),
                          laurel_norm=(1, e))  # fmt: skip
        if i in cfg["moe"]["layers"]:  # the experts beside the MLP, sliced from their stacks
            n, fe = cfg["moe"]["n_expert"], cfg["moe"]["n_ff_expert"]
            shapes.update(ffn_norm_2=(1, e), post_ffn_norm_1=(1, e), post_ffn_norm_2=(1, e), router=(n, e),
                          router_scale=(1, e), expert_scale=(1, n), down_exps=(n * e, fe))  # fmt: skip
            if name_of(i, "gate_up_exps") in names:
                shapes.update(gate_up_exps=(n * 2 * fe, e))
            else:
                shapes.update(gate_exps=(n * fe, e), up_exps=(n * fe, e))
        for field, (r, c) in shapes.items():
            _take(get, names, w, name_of(i, field), f"layers.{i}.{field}", r, c)
        if i in cfg["moe"]["layers"]:
            lp = f"layers.{i}."
            down = w.pop(lp + "down_exps").reshape(n, e, fe)
            if lp + "gate_up_exps" in w:
                gu = w.pop(lp + "gate_up_exps").reshape(n, 2 * fe, e)
                gate, up = gu[:, :fe], gu[:, fe:]
            else:
                gate, up = w.pop(lp + "gate_exps").reshape(n, fe, e), w.pop(lp + "up_exps").reshape(n, fe, e)
            for x in range(n):
                w[f"{lp}experts.{x}.w_gate"], w[f"{lp}experts.{x}.w_up"] = gate[x], up[x]
                w[f"{lp}experts.{x}.w_down"] = down[x]
    return w


def _gemma4_hf(
    c: dict[str, Any], get: Any, names: set[Any], prefix: str, arch: str = "gemma4"
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Gemma 4 (or Gemma 3n) from a folder (its tensors under ``prefix``): norms stored as the factor
    applied."""
    read = arch_config.gemma3n_hf if arch == "gemma3n" else arch_config.gemma4_hf
    cfg = _config(arch, **read(c))

    def name_of(i: int, f: str) -> str:
        return f"{prefix}layers.{i}.{_GEMMA4_HF.get(f, _HF_LAYER.get(f, ''))}"

    glob = {
        "tok_embd": prefix + "embed_tokens.weight", "output_norm": prefix + "norm.weight",
        "output": "lm_head.weight", "ple_tok_embd": prefix + "embed_tokens_per_layer.weight",
        "ple_model_proj": prefix + "per_layer_model_projection.weight",
        "ple_proj_norm": prefix + "per_layer_projection_norm.weight",
        "altup_proj": prefix + "altup_projections", "altup_unembd": prefix + "altup_unembed_projections",
    }  # fmt: skip
    return cfg, _gemma4_weights(cfg, get, names, name_of, glob)
