"""The GPT-2-era families against Hugging Face transformers (torch CPU, float32) and the NumPy twin, on tiny
random models built by transformers, from safetensors folders (the Hub's names) and from GGUF files laid out
as llama.cpp's converter writes them. Each runs in the Llama forward pass with switches (docs/models.md):

- bloom (BLOOM, BLOOMZ): ALiBi in place of RoPE, a LayerNorm of the embeddings, LayerNorms with bias, the
  fused query_key_value per head (regrouped into [q | k | v] at load, as llama.cpp's converter writes it),
  a tanh-GELU MLP, biases everywhere.
- mpt (MPT-7B / 30B): ALiBi with its bias bound (alibi_bias_max), LayerNorms without bias, no biases, an
  exact-GELU MLP, clip_qkv and softmax_scale where set.
- gpt2 (GPT-2, DistilGPT2, Cerebras-GPT): learned absolute positions, Conv1D weights stored [in, out]
  (transposed at load), LayerNorms and biases, the GELU of activation_function.
- gpt_bigcode (StarCoder, SantaCoder, WizardCoder; GGUF "starcoder"): GPT-2's layout with multi-query
  attention (one K/V head) or a fused c_attn per head.
- opt (OPT-125m ... 66b, folders only: llama.cpp has no OPT files): GPT-2's layout with separate q / k / v,
  a ReLU MLP, the position table read from row 2 (OPT's offset), biases where enable_bias says.
- gpt_neo (GPT-Neo 125M / 1.3B / 2.7B, folders only): GPT-2's layout with unscaled attention scores and a
  window (window_size) on its "local" layers, q / k / v without biases.

ALiBi adds slope * (key position - query position) to each score after the scale, in every attention kernel
alike (attend_heads for single tokens, attend_tokens for prefill runs, attend_wide for wide heads), so the
chunked-prefill and batch-invariance checks hold bitwise as for RoPE models.
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
from tiny_models import (
    N_TOKENS,
    build_hf_cases,
    case_file,
    check_chunked_prefill,
    check_config_refusals,
    check_golden,
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
# name -> (transformers config of the tiny model, the formats it is checked from)
CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    # BLOOM-560m's layout in small: 6 heads (not a power of two: the interleaved slopes), tied.
    "bloom": (dict(
        arch="bloom", hidden_size=48, num_layers=3, num_heads=6, num_kv_heads=6, intermediate_size=None,
        vocab_size=150, tie=True,
    ), ALL),
    # Heads of 144 (attention's wide kernel), untied.
    "bloom-wide": (dict(
        arch="bloom", hidden_size=288, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=None,
        vocab_size=120,
    ), ["safetensors", "F32"]),
    # MPT-7B's layout: no biases, exact GELU; clip_qkv (a GGUF key too). (transformers' MPT ignores
    # attn_config.alibi_bias_max, always 8: another bound is checked against the twin alone, below.)
    "mpt": (dict(
        arch="mpt", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=None,
        vocab_size=150, tie=True, clip_qkv=0.6,
    ), ALL),
    # 5 heads, softmax_scale set, untied (a GGUF file has no key for the scale: folders only).
    "mpt-scale": (dict(
        arch="mpt", hidden_size=40, num_layers=2, num_heads=5, num_kv_heads=5, intermediate_size=None,
        vocab_size=130, softmax_scale=0.2,
    ), ["safetensors"]),
    # GPT-2's layout: 4 x hidden MLP (n_inner null), gelu_new, tied, 64 learned positions.
    "gpt2": (dict(
        arch="gpt2", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=None,
        vocab_size=150, tie=True, max_position_embeddings=64,
    ), ALL),
    # Exact GELU, unscaled scores (scale_attn_weights false), n_inner set, untied: folders only (a GGUF
    # file cannot say either).
    "gpt2-exact": (dict(
        arch="gpt2", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=80,
        vocab_size=130, activation_function="gelu", scale_attn_weights=False,
    ), ["safetensors"]),
    # StarCoder's multi-query attention, untied.
    "gpt_bigcode": (dict(
        arch="gpt_bigcode", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=1, intermediate_size=112,
        vocab_size=150,
    ), ALL),
    # multi_query false: c_attn per head [q_h | k_h | v_h], regrouped at load.
    "gpt_bigcode-mha": (dict(
        arch="gpt_bigcode", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=None,
        vocab_size=130, tie=True,
    ), ["safetensors", "F32"]),
    # OPT-125m's layout in small: ReLU, biases, tied, 128 positions (130 rows stored).
    "opt": (dict(
        arch="opt", hidden_size=48, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=80,
        vocab_size=150, tie=True, max_position_embeddings=128,
    ), ["safetensors"]),
    # enable_bias false, an exact GELU, 5 heads, untied.
    "opt-gelu": (dict(
        arch="opt", hidden_size=40, num_layers=2, num_heads=5, num_kv_heads=5, intermediate_size=56,
        vocab_size=130, enable_bias=False, activation_function="gelu",
    ), ["safetensors"]),
    # GPT-Neo's global / local layers (a window of 8 over the 40 tokens), 4 x hidden MLP, tied.
    "gpt_neo": (dict(
        arch="gpt_neo", hidden_size=48, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=None,
        vocab_size=150, tie=True, max_position_embeddings=128, window_size=8,
        attention_types=[[["global", "local"], 1], [["local"], 1]],
    ), ["safetensors"]),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(
        tmp_path_factory.mktemp("classic"),
        {n: kw for n, (kw, _) in CASES.items()},
        seed=210,
        n_tokens=N_TOKENS,
    )


def check_config(name: str, fmt: str, c: dict[str, Any]) -> None:
    """The switches each family sets, as the loader read them."""
    case = CASES[name][0]
    arch = case["arch"]
    assert c["arch"] == {"gpt_bigcode": "starcoder", "opt": "gpt2", "gpt_neo": "gpt2"}.get(arch, arch)
    assert c["layer_norm"] and c["ffn_gelu"] and c["layer_nope"] == [True] * case["num_layers"]
    biased = arch != "mpt" and case.get("enable_bias", True)
    assert c["ffn_bias"] == c["o_bias"] == biased and c["norm_bias"] == (arch != "mpt")
    assert c["qkv_bias"] == (biased and arch != "gpt_neo")
    assert c["ffn_relu"] == (arch == "opt" and "activation_function" not in case)
    assert c["embd_norm"] == (arch == "bloom")
    assert c["pos_embd"] == (arch in ("gpt2", "gpt_bigcode", "opt", "gpt_neo"))
    if arch == "gpt_neo":
        assert c["sliding_window"] == 8 and c["layer_sliding"] == [False, True, True]
    else:
        assert c["sliding_window"] == 0 and not any(c["layer_sliding"])
    assert c["n_head_kv"] == case["num_kv_heads"]
    assert c["n_ff"] == (case["intermediate_size"] or 4 * case["hidden_size"])
    if arch in ("bloom", "mpt"):  # the slopes of transformers' own formulas
        bound = case.get("alibi_bias_max", 8)
        assert c["alibi"] == pytest.approx(hf_slopes(arch, case["num_heads"], bound), rel=1e-6)
        assert c["n_ctx_train"] == (2048 if arch == "bloom" else case.get("max_position_embeddings", 512))
    else:
        assert c["alibi"] == [] and c["n_ctx_train"] == case.get("max_position_embeddings", 512)
    exact = arch == "mpt" or (case.get("activation_function") == "gelu" and fmt == "safetensors")
    assert c["gelu_erf"] == exact
    assert c["clamp_qkv"] == pytest.approx(case.get("clip_qkv", 0.0))
    unscaled = case.get("scale_attn_weights") is False or arch == "gpt_neo"
    assert c["attn_scale"] == pytest.approx(case.get("softmax_scale", 1.0 if unscaled else 0.0))


def hf_slopes(arch: str, n_head: int, bound: float = 8) -> list[float]:
    """ALiBi's slopes as transformers computes them: BLOOM's _get_alibi_slopes, MPT's build_mpt_alibi_tensor
    (the oracle for arch_config.alibi_slopes)."""
    import torch

    if arch == "bloom":
        from transformers.models.bloom.modeling_bloom import build_alibi_tensor

        alibi = build_alibi_tensor(torch.ones(1, 2), n_head, torch.float32)  # [heads, 1, 2]: slope * (0, 1)
        return alibi[:, 0, 1].tolist()  # type: ignore[no-any-return]
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    return (-build_mpt_alibi_tensor(n_head, 2, bound)[:, 0, 0]).tolist()  # type: ignore[no-any-return]


@pytest.mark.parametrize("n_head", [1, 2, 3, 5, 6, 8, 12, 16, 20, 32, 40, 48, 71, 112])
def test_alibi_slopes_match_transformers(n_head: int) -> None:
    """The twin's slopes (and so the C++ loader's: the configs are compared in every golden test) against
    BLOOM's and MPT's own formulas in transformers, bound 8 and MPT's others (transformers raises a float32
    base to each power, a few ulp off; ours is 2^e rounded once)."""
    assert arch_config.alibi_slopes(n_head, 8.0) == pytest.approx(hf_slopes("bloom", n_head), rel=1e-6)
    for bound in (8, 4, 16):
        want = hf_slopes("mpt", n_head, bound)
        assert arch_config.alibi_slopes(n_head, bound) == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("name, fmt", [(n, f) for n, (_, fmts) in CASES.items() for f in fmts])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    check_config(name, fmt, check_golden(path, ids, hf_logits, fmt).config)


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal (ALiBi's bias the same in the
    single-token and the prefill-run kernels), equal to HF and to the twin's runner; 20 greedy tokens equal
    to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 20, block=4) == hf_greedy(path, ids[:10], 20)


@pytest.mark.parametrize(
    "name, fmt",
    [("bloom", "Q8_0"), ("bloom-wide", "safetensors"), ("mpt", "F16"), ("gpt2-exact", "safetensors"),
     ("gpt_bigcode", "Q8_0"), ("opt", "safetensors"), ("gpt_neo", "safetensors")],
)  # fmt: skip
def test_batch_invariant(hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: Any) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits."""
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    model = core.load_model(path)
    check_invariance(model, CASES[name][0]["vocab_size"], seed=len(name))


def test_learned_positions_end_where_the_table_does(
    hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """GPT-2's 64 positions: the engine's context is at most 64 tokens (max_model_len beyond it refused),
    a forward step at position 64 is refused by the core and the twin alike, never read past the table."""
    from ossa.config import EngineArgs

    path = case_file(hf_models, "gpt2", "F32", tmp_path_factory)
    model = core.load_model(path)
    runner = core.ModelRunner(model, 20, 4, 8)
    with pytest.raises(ValueError, match="beyond the model's 64 learned positions"):
        runner.forward([1], [64], [0], [0, 1], [65], [0, 17], list(range(17)), [0])
    config, weights = ref_loader.load_weights(path)
    with pytest.raises(ValueError, match="beyond the model's 64 learned positions"):
        ref_model.embed(config, weights, np.asarray([1]), np.asarray([64]))
    loaded = models.load_model(path)
    with pytest.raises(ValueError, match="max_model_len=65 is beyond the model's 64 learned positions"):
        EngineArgs(max_model_len=65).create_config(loaded, path)
    assert EngineArgs().create_config(loaded, path).max_model_len == 64


def test_alibi_matters_and_gpt2_old_layout(
    hf_models: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Without its slopes a BLOOM model's logits move (the bias is used). MPT's own bias bound
    (attn_config.alibi_bias_max, which transformers' MptModel ignores: it always takes 8; MosaicML's code and
    llama.cpp read it) gives the slopes of that bound, from a folder and from GGUF's max_alibi_bias, ossa as
    the twin. GPT-2's oldest folders (no transformer. prefix, the causal-mask buffers attn.bias /
    attn.masked_bias beside the weights) read as the new ones, bitwise."""
    from safetensors.numpy import load_file, save_file
    from tiny_models import hf_to_gguf

    path, _, ids = hf_models["bloom"]
    config, weights = ref_loader.load_weights(path)
    got = core.model_logits(core.load_model(path), ids)
    flat = ref_model.forward(dict(config, alibi=[]), weights, ids)
    assert float(np.max(np.abs(got - flat))) > 1e-2 * float(np.max(np.abs(got)))

    src, _, ids = hf_models["mpt"]
    cfg = json.loads((Path(src) / "config.json").read_text())
    four = tmp_path / "mpt-4"
    shutil.copytree(src, four)
    (four / "config.json").write_text(
        json.dumps({**cfg, "attn_config": {**cfg["attn_config"], "alibi_bias_max": 4}})
    )
    eight = core.model_logits(core.load_model(src), ids)
    for path in (str(four), hf_to_gguf(four, tmp_path / "mpt-4.gguf", "F32")):
        model = core.load_model(path)
        assert model.config["alibi"] == [2.0**-e for e in (1, 2, 3, 4)]
        got = core.model_logits(model, ids)
        config, weights = ref_loader.load_weights(path)
        scale = float(np.max(np.abs(got)))
        assert float(np.max(np.abs(got - ref_model.forward(config, weights, ids)))) < 1e-5 * scale
        assert float(np.max(np.abs(got - eight))) > 1e-3 * scale

    src, _, ids = hf_models["gpt2"]
    old = tmp_path / "gpt2-old"
    shutil.copytree(src, old)
    stored = load_file(str(old / "model.safetensors"))
    renamed = {k.removeprefix("transformer."): v for k, v in stored.items()}
    for i in range(CASES["gpt2"][0]["num_layers"]):
        renamed[f"h.{i}.attn.bias"] = np.tril(np.ones((1, 1, 64, 64), dtype=np.float32))
        renamed[f"h.{i}.attn.masked_bias"] = np.asarray(-1e4, dtype=np.float32)
    save_file(renamed, str(old / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((old / "config.json").read_text())
    (old / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "tie_word_embeddings"}))
    want = core.model_logits(core.load_model(src), ids)
    assert np.array_equal(core.model_logits(core.load_model(str(old)), ids), want)
    config, weights = ref_loader.load_weights(str(old))
    assert float(np.max(np.abs(ref_model.forward(config, weights, ids) - want))) < 1e-5 * float(
        np.max(np.abs(want))
    )


def test_options_transformers_does_not_run_are_refused(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """What transformers' classes do not run (or run otherwise) is refused by name by both loaders; so are a
    GPT-2 GGUF file without its position table and an MPT file with q / k LayerNorms."""
    mpt = hf_models["mpt"][0]
    attn = json.loads((Path(mpt) / "config.json").read_text())["attn_config"]
    for d in ("bloom", "mpt", "gpt2"):
        (tmp_path / d).mkdir()
    check_config_refusals(hf_models["bloom"][0], tmp_path / "bloom", [
        ({"apply_residual_connection_post_layernorm": True}, "apply_residual_connection_post_layernorm"),
    ])  # fmt: skip
    check_config_refusals(mpt, tmp_path / "mpt", [
        ({"attn_config": {**attn, "qk_ln": True}}, "qk_ln"),
        ({"attn_config": {**attn, "alibi": False}}, "alibi=false"),
        ({"attn_config": {**attn, "attn_type": "multiquery_attention"}}, "attn_type"),
        ({"attn_config": {**attn, "prefix_lm": True}}, "prefix_lm"),
        ({"expansion_ratio": 2}, "expansion_ratio"),
        ({"no_bias": False}, "no_bias=false"),
        ({"logit_scale": 0.5}, "logit_scale"),
    ])  # fmt: skip
    check_config_refusals(hf_models["gpt2"][0], tmp_path / "gpt2", [
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
        ({"add_cross_attention": True}, "add_cross_attention"),
        ({"activation_function": "relu"}, "relu"),
    ])  # fmt: skip
    tmp = _Tmp(tmp_path)
    gguf = case_file(hf_models, "gpt2", "F32", tmp)
    bad = gguf_without(gguf, tmp_path / "no-pos.gguf", tensors=("position_embd.weight",))
    with pytest.raises(core.ModelError, match="position_embd"):
        core.load_model(bad)
    with pytest.raises(ValueError, match="position_embd"):
        ref_loader.load_weights(bad)
    gguf = case_file(hf_models, "mpt", "F32", tmp)
    n = CASES["mpt"][0]["hidden_size"]
    ln = {f"blk.{i}.attn_q_norm.weight": np.ones(n, np.float32) for i in range(CASES["mpt"][0]["num_layers"])}
    bad = _gguf_with(gguf, tmp_path / "qk-ln.gguf", ln)
    with pytest.raises(core.ModelError, match="qk_ln"):
        core.load_model(bad)
    with pytest.raises(ValueError, match="qk_ln"):
        ref_loader.load_weights(bad)


def test_opt_and_gpt_neo_options(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """OPT-350m's post-LayerNorm layers and projections, weightless LayerNorms, a removed final norm, and
    GPT-Neo's malformed layer types are refused by name by both loaders. OPT's older uploads (no model.
    prefix) read as the new ones, bitwise; GPT-Neo's window is used (the logits move without it) and its
    old files' attention-mask buffers are ignored."""
    from safetensors.numpy import load_file, save_file

    for d in ("opt", "gpt_neo"):
        (tmp_path / d).mkdir()
    check_config_refusals(hf_models["opt"][0], tmp_path / "opt", [
        ({"do_layer_norm_before": False}, "do_layer_norm_before=false"),
        ({"word_embed_proj_dim": 16}, "word_embed_proj_dim"),
        ({"layer_norm_elementwise_affine": False}, "layer_norm_elementwise_affine"),
        ({"_remove_final_layer_norm": True}, "_remove_final_layer_norm"),
        ({"activation_function": "silu"}, "silu"),
    ])  # fmt: skip
    check_config_refusals(hf_models["gpt_neo"][0], tmp_path / "gpt_neo", [
        ({"attention_layers": ["global", "sparse", "local"]}, "sparse"),
        ({"attention_layers": ["global", "local"]}, "one type per layer"),
        ({"attention_layers": None, "attention_types": [[["global"], "x"]]}, "attention_types"),
        ({"window_size": 0}, "window_size 0"),
        ({"activation_function": "relu"}, "relu"),
    ])  # fmt: skip

    src, _, ids = hf_models["opt"]
    old = tmp_path / "opt-old"
    shutil.copytree(src, old)
    stored = load_file(str(old / "model.safetensors"))
    save_file({k.removeprefix("model."): v for k, v in stored.items()}, str(old / "model.safetensors"),
              metadata={"format": "pt"})  # fmt: skip
    want = core.model_logits(core.load_model(src), ids)
    assert np.array_equal(core.model_logits(core.load_model(str(old)), ids), want)
    config, weights = ref_loader.load_weights(str(old))
    scale = float(np.max(np.abs(want)))
    assert float(np.max(np.abs(ref_model.forward(config, weights, ids) - want))) < 1e-5 * scale

    src, _, ids = hf_models["gpt_neo"]
    old = tmp_path / "neo-old"
    shutil.copytree(src, old)
    stored = load_file(str(old / "model.safetensors"))
    for i in range(CASES["gpt_neo"][0]["num_layers"]):
        stored[f"transformer.h.{i}.attn.attention.bias"] = np.tril(np.ones((1, 1, 128, 128), dtype=bool))
        stored[f"transformer.h.{i}.attn.attention.masked_bias"] = np.asarray(-1e9, dtype=np.float32)
    save_file(stored, str(old / "model.safetensors"), metadata={"format": "pt"})
    want = core.model_logits(core.load_model(src), ids)
    assert np.array_equal(core.model_logits(core.load_model(str(old)), ids), want)
    config, weights = ref_loader.load_weights(str(old))
    scale = float(np.max(np.abs(want)))
    assert float(np.max(np.abs(ref_model.forward(config, weights, ids) - want))) < 1e-5 * scale
    unwindowed = ref_model.forward(dict(config, layer_sliding=[], sliding_window=0), weights, ids)
    assert float(np.max(np.abs(unwindowed - want))) > 1e-3 * scale
    text = models.format_inspect(models.inspect(src))
    assert "architecture  gpt2 (the folder's model_type gpt_neo)" in text, text
    assert "attention     sliding window of 8 tokens in 2 of 3 layers" in text, text
    text = models.format_inspect(models.inspect(hf_models["opt"][0]))
    assert "mlp           down(relu(up x)); with biases; LayerNorm with bias" in text, text


def test_opt_engine_with_its_tokenizer(default_model_path: str, tmp_path: Path) -> None:
    """A tiny OPT model with OPT's tokenizer files (vocab.json + merges.txt, </s> as BOS: test_tokenizer's
    opt_files) through LLM: the prompt ids are transformers' (BOS first), the greedy continuation is
    transformers' generate, and check_engine's batching / prefix-cache / twin / preemption checks hold."""
    import torch
    import transformers
    from test_tokenizer import OPT_FOLDER, load_vocab
    from tiny_models import check_engine, make_hf_model

    from ossa import LLM, SamplingParams

    tokenizer = load_vocab(OPT_FOLDER, default_model_path).path
    folder = make_hf_model(tmp_path / "opt", seed=5, **dict(CASES["opt"][0], vocab_size=50261))
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(Path(tokenizer) / name, Path(folder) / name)
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    prompt = "The quick brown fox jumps over"
    ids = hf_tok(prompt)["input_ids"]
    assert ids[0] == hf_tok.bos_token_id
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False,
                             min_new_tokens=12, pad_token_id=1)  # fmt: skip
    got = LLM(folder, kv_cache_memory_bytes=16 << 20).generate(
        [prompt], SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    )[0]
    assert list(got.prompt_token_ids) == ids
    assert list(got.outputs[0].token_ids) == out[0, len(ids) :].tolist()
    check_engine(folder)


def _gguf_with(src: str, dst: Path, extra: dict[str, np.ndarray]) -> str:
    """A copy of GGUF file ``src`` with the ``extra`` tensors (F32) added."""
    import gguf
    from tiny_models import _copy_metadata

    reader = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(str(dst), reader.fields["general.architecture"].contents())
    _copy_metadata(reader, w)
    for t in reader.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_shape=list(reversed([int(v) for v in t.shape])))
    for name, value in extra.items():
        w.add_tensor(name, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(dst)


class _Tmp:
    """A TempPathFactory stand-in over one folder (case_file's mktemp)."""

    def __init__(self, root: Path) -> None:
        self.root, self.n = root, 0

    def mktemp(self, name: str) -> Path:
        self.n += 1
        out = self.root / f"{name}{self.n}"
        out.mkdir()
        return out


@pytest.mark.parametrize("name", ["bloom", "mpt", "gpt2", "gpt_bigcode"])
def test_corrupt_sizes_are_refused_or_run(
    hf_models: dict[str, Any], name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Each scalar size key of the GGUF files (block / head counts, widths, the context, ...) set to 0, 1,
    3, 7, 2^20, 2^31-1, 2^32-1: refused with a ModelError or loads and runs, never a crash."""
    from tiny_models import check_corrupt_sizes

    check_corrupt_sizes(
        case_file(hf_models, name, "F32", tmp_path_factory), tmp_path_factory.mktemp("bad"), 5
    )


@pytest.mark.parametrize(
    "name, want",
    [("bloom", "positions     ALiBi, slopes 0.5 .. 0.003906 over 6 heads; embeddings LayerNorm-ed"),
     ("mpt", "positions     ALiBi, slopes 0.25 .. 0.003906 over 4 heads"),
     ("gpt2", "positions     learned, 64 of them (the longest context)"),
     ("gpt_bigcode", "mlp           down(gelu(up x)), tanh-approximated; with biases; LayerNorm with bias")],
)  # fmt: skip
def test_inspect_describes_positions(
    hf_models: dict[str, Any], name: str, want: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    text = models.format_inspect(models.inspect(case_file(hf_models, name, "F32", tmp_path_factory)))
    assert want in text, text
    assert ("rope " in text) is False


def test_slope_of_six_heads() -> None:
    """BLOOM with 6 heads: 4 heads of 2^-2, 2^-4, 2^-6, 2^-8 and the series between, 2^-1, 2^-3."""
    assert arch_config.alibi_slopes(6, 8.0) == [2.0**-e for e in (2, 4, 6, 8, 1, 3)]
    assert math.isclose(arch_config.alibi_slopes(3, 8.0)[0], 2**-4)


@pytest.mark.parametrize("name", ["bloom", "gpt2"])
def test_engine(default_model_path: str, name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Through LLM (the default model's vocabulary and tokenizer): batched = alone = the paged runner's
    greedy decode, prefix-cache hits the same, the Python twin engine the same tokens (and the same seeded
    forks), and preempted sequences recomputed to the same tokens; ALiBi (BLOOM) and the learned table
    (GPT-2, 64 positions: every sequence here fits) through the scheduler's batches."""
    from tiny_models import check_engine, hf_to_gguf, make_hf_model

    root = tmp_path_factory.mktemp(f"{name}-engine")
    folder = make_hf_model(root / "hf", seed=9, **dict(CASES[name][0], vocab_size=49152))
    check_engine(hf_to_gguf(folder, root / f"tiny-{name}.gguf", "F32", tokenizer_gguf=default_model_path))
