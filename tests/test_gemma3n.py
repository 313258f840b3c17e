"""Gemma 3n (text: ``gemma3n`` GGUF files, Gemma3nForCausalLM folders and a Gemma3nForConditionalGeneration
folder's language model) against Hugging Face transformers and the NumPy twin, on tiny random models built by
transformers, from safetensors and from GGUF files laid out as llama.cpp's converter writes them.

What Gemma 3n adds to Gemma 4's attention, MLPs and per-layer inputs, each on in at least one case: AltUp's
streams (3 and 4; the embeddings projected and rescaled into the others, each layer predicting every stream
from a router over the first and correcting them from a router over its output, the per-layer branch added to
the others, the streams projected back and averaged at the end), LAuReL's low-rank branch beside the
attention, the first layers' MLP gates made sparse (the default pattern: 0.95 in the first 10 of a model of
more; an explicit one with two shares), the corrected stream's scale on and off, per-layer MLP widths, the
last layers reading an earlier layer's K/V, a per-layer table shorter than the vocabulary (tokens past it read
row 0 in transformers; llama.cpp's converter pads it with zero rows, which a GGUF file then holds), the
final soft-cap of two sizes, tied and untied. Prompts run 8x the window; greedy decoding runs past it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from tiny_models import (
    HF_TOL,
    N_TOKENS,
    TWIN_TOL,
    build_hf_cases,
    case_file,
    check_case,
    check_chunked_prefill,
    check_config_refusals,
    check_engine,
    greedy,
    hf_greedy,
    hf_logits,
    hf_to_gguf,
    make_hf_model,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model

_TYPES = ["sliding_attention", "full_attention"]
CASES: dict[str, dict[str, Any]] = {
    # E2B / E4B's layout, small: 4 streams, 12 layers (the default pattern: every fifth global), the first
    # two layers' gates cut (0.95, 0.9: in all of the first 10, as the released models' default, the cut
    # leaves so few values of a random model's gates that rounding is amplified past the tolerance; the
    # default is read in test_default_sparsity), the last 2 reading layer 8's K/V, LAuReL of rank 8,
    # soft-capped logits, tied; rows of 64 so Q8_0 quantizes the matrices.
    "gemma3n-e": dict(
        arch="gemma3n", hidden_size=64, num_layers=12, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=96, vocab_size=130, vocab_size_per_layer_input=130, hidden_size_per_layer_input=8,
        sliding_window=5, num_kv_shared_layers=2, laurel_rank=8, altup_num_inputs=4, tie=True,
        rope_theta=1e6, activation_sparsity_pattern=[0.95, 0.9] + [0.0] * 10,
    ),
    # Odd: 3 streams, alternating layer types, two sparse layers of their own shares, MLP widths per layer,
    # no scale on the corrected stream, untied, a soft-cap of 15, a local RoPE base of 500, LAuReL of rank 3.
    "gemma3n-odd": dict(
        arch="gemma3n", hidden_size=40, num_layers=6, num_heads=2, num_kv_heads=1, head_dim=10,
        intermediate_size=[40, 56, 40, 56, 40, 56], vocab_size=110, vocab_size_per_layer_input=110,
        hidden_size_per_layer_input=6, sliding_window=7, layer_types=_TYPES * 3, num_kv_shared_layers=2,
        laurel_rank=3, altup_num_inputs=3, activation_sparsity_pattern=[0.95, 0.6, 0.0, 0.0, 0.0, 0.0],
        altup_correct_scale=False, tie=False, final_logit_softcapping=15.0, rope_local_base_freq=500.0,
    ),
}  # fmt: skip
ALL = ["safetensors", "F32", "F16", "Q8_0"]
# F16 and Q8_0 files against transformers: the random models amplify their weights' rounding (Q8_0: measured
# 5.8e-2 on the 12-layer model, its activations rounded to 8 bits too); the twin on the same
# rounded weights agrees with ossa to its usual tolerance.
ROUNDED_TOL = {"F16": 1e-2, "Q8_0": 0.1}


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("gemma3n"), CASES, seed=430, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in ALL])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    model = check_case(hf_models, name, fmt, tmp_path_factory, ROUNDED_TOL)
    c = model.config
    assert c["arch"] == "gemma3n" and c["v_norm"] and c["attn_scale"] == 1.0
    if name == "gemma3n-e":
        assert c["altup"] == 4 and c["laurel_rank"] == 8 and c["altup_correct_scale"]
        assert c["kv_source"] == list(range(10)) + [8, 8] and c["n_kv_layers"] == 10
        assert c["layer_sliding"] == [(i + 1) % 5 != 0 for i in range(12)]
        cuts = c["layer_sparsity"]  # (torch's float32 Phi^-1(0.95), Phi^-1(0.9))
        assert cuts[:2] == [1.6448535919189453, 1.281551480293274] and cuts[2:] == [-np.inf] * 10
        assert c["rope_pairs"] == 8 and c["ple_dim"] == 8
    else:
        # (GGUF has no key for it: the converter writes ones for the scales instead)
        assert (
            c["altup"] == 3 and c["laurel_rank"] == 3 and c["altup_correct_scale"] == (fmt != "safetensors")
        )
        assert c["layer_n_ff"] == [40, 56] * 3 and c["kv_source"] == [0, 1, 2, 3, 2, 3]
        assert c["layer_sparsity"][:2] == [1.6448535919189453, 0.25334715843200684]
        assert c["layer_sparsity"][2:] == [-np.inf] * 4 and c["final_softcap"] == 15.0


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens (8x the window) through the paged runner: bitwise equal, equal to
    HF and to the twin's runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_out, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_out)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


@pytest.mark.parametrize("name, kv", [("gemma3n-e", "float32"), ("gemma3n-odd", "float16")])
def test_batch_invariant(
    hf_models: dict[str, Any], name: str, kv: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Alone, among 7 others, chunked, 1 and 2 threads: bitwise the same logits (the streams, the sparse
    gates' statistics and the routers are per token, whatever the batch)."""
    path = case_file(hf_models, name, "Q8_0", tmp_path_factory)
    check_invariance(core.load_model(path), CASES[name]["vocab_size"], seed=43, kv=kv)


def _write_folder(
    src: Path, dst: Path, cfg: dict[str, Any], prefix: str = "model.", table_rows: int = 0
) -> str:
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(src / "model.safetensors"))
    if table_rows:
        key = "model.embed_tokens_per_layer.weight"
        tensors[key] = np.ascontiguousarray(tensors[key][:table_rows])
    renamed = {k.replace("model.", prefix, 1) if k.startswith("model.") else k: v for k, v in tensors.items()}
    dst.mkdir()
    save_file(renamed, str(dst / "model.safetensors"))
    (dst / "config.json").write_text(json.dumps(cfg))
    return str(dst)


def test_short_table_and_multimodal_folder(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """A per-layer table shorter than the vocabulary (the released models': 262,144 rows of 262,400) gives
    transformers' logits with tokens past it (they read row 0), in both loaders; a
    Gemma3nForConditionalGeneration folder (text_config, tensors under model.language_model., towers
    skipped) gives the text model's logits bitwise."""
    src, _, ids = hf_models["gemma3n-odd"]
    cfg = json.loads((Path(src) / "config.json").read_text())
    short = _write_folder(
        Path(src), tmp_path / "short", dict(cfg, vocab_size_per_layer_input=80), table_rows=80
    )
    probe = ids[:20] + [85, 100, 109, 3, 81]
    want = hf_logits(short, probe)
    got = core.model_logits(core.load_model(short), probe)
    scale = float(np.max(np.abs(want)))
    assert float(np.max(np.abs(got - want))) / scale < HF_TOL["safetensors"]
    twin = ref_model.forward(*ref_loader.load_weights(short), probe)
    assert float(np.max(np.abs(twin - got))) / scale < TWIN_TOL
    wrapper = {
        "model_type": "gemma3n",
        "architectures": ["Gemma3nForConditionalGeneration"],
        "text_config": cfg,
    }
    mm = _write_folder(Path(src), tmp_path / "mm", wrapper, "model.language_model.")
    np.testing.assert_array_equal(
        core.model_logits(core.load_model(mm), ids), core.model_logits(core.load_model(src), ids)
    )
    twin_want = ref_model.forward(*ref_loader.load_weights(src), ids)
    twin_mm = ref_model.forward(*ref_loader.load_weights(mm), ids)
    np.testing.assert_array_equal(twin_mm, twin_want)


def test_inspect_and_refusals(hf_models: dict[str, Any], tmp_path: Path) -> None:
    text = models.format_inspect(models.inspect(hf_models["gemma3n-e"][0]))
    assert "architecture  gemma3n" in text, text
    assert "gemma 3n      global layers: 2 of 12" in text, text
    assert "K/V shared: the last 2 layers read layers 8" in text, text
    assert "AltUp: 4 streams; LAuReL of rank 8" in text, text
    assert "sparse MLP gates in 2 layers (0-1): cut at mean + 1.2816, 1.6449 std" in text, text
    check_config_refusals(
        hf_models["gemma3n-odd"][0],
        tmp_path,
        (
            ({"altup_active_idx": 1}, "altup_active_idx"),
            ({"activation_sparsity_pattern": [0.5, 1.0, 0, 0, 0, 0]}, "activation sparsity"),
            ({"activation_sparsity_pattern": [0.5]}, "one value per layer"),
            ({"intermediate_size": [40, 56]}, "intermediate_size"),
            ({"hidden_activation": "relu"}, "hidden_activation"),
            ({"num_kv_shared_layers": 6}, "num_kv_shared_layers"),
            ({"rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 2.0},
                                  "sliding_attention": {"rope_type": "default"}}}, "RoPE type"),
            ({"altup_num_inputs": 0}, "AltUp"),
        ),
    )  # fmt: skip


def test_default_sparsity(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """A config without activation_sparsity_pattern gets Gemma3nTextConfig's default in both loaders: the
    gates of the first 10 layers (of a model of more) cut at 0.95, as transformers computes the cut; a GGUF
    file without activation_sparsity_scale the same (llama.cpp's fixed 10 layers)."""
    src = Path(hf_models["gemma3n-e"][0])
    cfg = json.loads((src / "config.json").read_text())
    del cfg["activation_sparsity_pattern"]
    folder = _write_folder(src, tmp_path / "default", cfg)
    want = [1.6448535919189453] * 10 + [-np.inf] * 2
    assert core.load_model(folder).config["layer_sparsity"] == want
    assert ref_loader.load_weights(folder)[0]["layer_sparsity"] == want
    nokey = hf_to_gguf(folder, tmp_path / "default.gguf", "F32")  # (without the key: see hf_to_gguf)
    assert core.load_model(nokey).config["layer_sparsity"] == want
    assert ref_loader.load_weights(nokey)[0]["layer_sparsity"] == want


def test_engine(default_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Through LLM (the default model's vocabulary and tokenizer): batched = alone = the paged runner's
    greedy decode, prefix-cache hits the same, the Python twin engine the same tokens (and the same seeded
    forks), and preempted sequences (a cache of 10 blocks) recomputed to the same tokens."""
    root = tmp_path_factory.mktemp("gemma3n-engine")
    kw = dict(CASES["gemma3n-odd"], vocab_size=49152, vocab_size_per_layer_input=49152)
    folder = make_hf_model(root / "hf", seed=7, **kw)
    path = hf_to_gguf(folder, root / "tiny-gemma3n.gguf", "F32", tokenizer_gguf=default_model_path)
    check_engine(path)


def test_corrupt_sizes_are_refused_or_run(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """Each scalar size key of a tiny gemma3n file (the streams, the per-layer inputs' width, the shared
    layers, block and head counts, head sizes, ...) set to values that disagree with the tensors or
    overflow gives a ModelError at load, or a model that runs (ossa never reads past a tensor on a size the
    file claims); so does a sparsity array of the wrong length. In-process: a crash kills pytest."""
    from tiny_models import corrupt_sizes, gguf_without, model_file

    src = model_file(hf_models["gemma3n-odd"][0], "F32", tmp_path, "odd")
    keys, outcomes = corrupt_sizes(src, tmp_path, (0, 1, 2, 5, 1 << 20, 2**31 - 1, 2**32 - 1))
    assert "gemma3n.altup.num_inputs" in keys and "gemma3n.embedding_length_per_layer_input" in keys, keys
    assert outcomes["error"] > 0, (keys, outcomes)
    short = gguf_without(src, tmp_path / "short.gguf", add={"gemma3n.activation_sparsity_scale": [1.0, 2.0]})
    with pytest.raises(core.ModelError, match="activation_sparsity_scale"):
        core.load_model(short)
