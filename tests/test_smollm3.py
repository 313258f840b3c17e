"""SmolLM3 against Hugging Face transformers (torch CPU, float32) and the NumPy twin, on tiny random
models built by transformers: from safetensors folders (SmolLM3ForCausalLM) and from GGUF files laid
out as llama.cpp's converter writes them (Llama's tensors with q/k rows permuted for its interleaved
RoPE; NoPE on every 4th layer, which llama.cpp hard-codes: no key holds it).

SmolLM3 is the Llama layout with NoPE layers (``no_rope_layers``: 0 = the layer attends without
positions, else every ``no_rope_layer_interval``-th) and an optional sliding window
(``use_sliding_window``: the layers ``layer_types`` marks, by default the NoPE ones).

Tolerances as in test_forward_hf.py (max |error| / max |HF logit|).
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
    build_hf_cases,
    case_file,
    check_chunked_prefill,
    check_golden,
    greedy,
    hf_greedy,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader

CASES: dict[str, dict[str, Any]] = {
    # 4 layers, NoPE on layer 3 (the default interval 4), GQA 2, a small RoPE base so that
    # positions matter over 40 tokens, tied output.
    "smollm3": dict(
        arch="smollm3", hidden_size=48, num_layers=4, num_heads=4, num_kv_heads=2,
        intermediate_size=96, vocab_size=140, tie=True, rope_theta=500.0,
    ),
    # An explicit NoPE list and a sliding window on the NoPE layers (SmolLM3Config's default layer
    # types with use_sliding_window), window 6, untied output. A GGUF file cannot hold this pattern.
    "smollm3-window": dict(
        arch="smollm3", hidden_size=40, num_layers=5, num_heads=2, num_kv_heads=1,
        intermediate_size=72, vocab_size=120, tie=False, rope_theta=300.0,
        no_rope_layers=[1, 0, 1, 1, 0], use_sliding_window=True, sliding_window=6,
    ),
}  # fmt: skip
FORMATS = {"smollm3": ["safetensors", "F32", "F16", "Q8_0"], "smollm3-window": ["safetensors"]}
NOPE = {"smollm3": [False, False, False, True], "smollm3-window": [False, True, False, False, True]}


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("smollm3"), CASES, seed=50, n_tokens=N_TOKENS)


@pytest.mark.parametrize(
    ("name", "fmt"), [(name, fmt) for name, formats in FORMATS.items() for fmt in formats]
)
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    model = check_golden(path, ids, hf_logits, fmt)
    assert model.config["arch"] == "smollm3"
    assert model.config["layer_nope"] == NOPE[name]
    assert model.config["rope_style"] == ("neox" if fmt == "safetensors" else "interleaved")
    if name == "smollm3-window":
        assert model.config["sliding_window"] == 6 and model.config["layer_sliding"] == NOPE[name]


def test_nope_layers_matter(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """The same weights with RoPE in every layer give other logits."""
    src = Path(hf_models["smollm3"][0])
    dst = tmp_path / "all-rope"
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["no_rope_layers"] = [1] * cfg["num_hidden_layers"]
    (dst / "config.json").write_text(json.dumps(cfg))
    ids = hf_models["smollm3"][2]
    got = core.model_logits(core.load_model(str(src)), ids)
    roped = core.model_logits(core.load_model(str(dst)), ids)
    assert core.load_model(str(dst)).config["layer_nope"] == []
    assert float(np.max(np.abs(got - roped))) / float(np.max(np.abs(got))) > 1e-2


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner (blocks of 4): bitwise equal to one
    another, equal to HF, and to the twin's runner."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)


@pytest.mark.parametrize("name", list(CASES))
def test_greedy_matches_transformers(hf_models: dict[str, Any], name: str) -> None:
    """A 10-token prompt and 30 greedy tokens, one decode step at a time."""
    path, _, ids = hf_models[name]
    prompt, n_new = ids[:10], 30
    assert greedy(core.load_model(path), prompt, n_new, block=4) == hf_greedy(path, prompt, n_new)


@pytest.mark.parametrize("fmt", ["F32", "Q8_0"])
def test_batch_invariant(
    hf_models: dict[str, Any], fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits."""
    path = case_file(hf_models, "smollm3", fmt, tmp_path_factory)
    check_invariance(core.load_model(path), CASES["smollm3"]["vocab_size"], seed=9, kv="float16")


def test_inspect_and_bad_configs(hf_models: dict[str, Any], tmp_path: Path) -> None:
    text = models.format_inspect(models.inspect(hf_models["smollm3"][0]))
    assert "architecture  smollm3" in text and "none in 1 of 4 layers" in text
    src = Path(hf_models["smollm3-window"][0])
    for key, value, match in [
        ("no_rope_layers", [1, 0], "one entry per layer"),
        ("no_rope_layers", [1, 2, 1, 1, 1], "0 or 1"),
        ("no_rope_layer_interval", -1, "no_rope_layer_interval"),
    ]:
        dst = tmp_path / f"{key}-{len(str(value))}"
        shutil.copytree(src, dst)
        cfg = json.loads((dst / "config.json").read_text())
        cfg[key] = value
        if key == "no_rope_layer_interval":
            del cfg["no_rope_layers"]
        (dst / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(core.ModelError, match=match):
            core.load_model(str(dst))
        with pytest.raises(ValueError):
            ref_loader.load_weights(str(dst))
