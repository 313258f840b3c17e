"""Gemma 1 (gemma-2b/7b, CodeGemma, their fine-tunes) against Hugging Face transformers (torch CPU,
float32) and the NumPy twin, on tiny random models built by transformers: from safetensors folders
(GemmaForCausalLM) and from GGUF files laid out as llama.cpp's converter writes them (norms stored
as 1 + w; Llama's tensor names, q/k rows not permuted).

Gemma 1 is Gemma 3's forward pass (csrc/model/gemma3.cpp) without the post-norms, the q/k norms, the
sliding window and the soft-caps: embeddings times sqrt(hidden), GeGLU with tanh-approximate GELU,
scores scaled by head_dim^-1/2, two norms per layer (post_attention_layernorm is the pre-FFN norm).

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
from tiny_models import build_hf_cases, case_file, check_chunked_prefill, check_golden, greedy, hf_greedy

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader

CASES: dict[str, dict[str, Any]] = {
    # MQA (one KV head, as gemma-2b), head_dim 24 != 48/4, tied output.
    "gemma": dict(
        arch="gemma", hidden_size=48, num_layers=3, num_heads=4, num_kv_heads=1, head_dim=24,
        intermediate_size=80, vocab_size=140, tie=True, rope_theta=500.0,
        hidden_act="gelu_pytorch_tanh",
    ),
    # MHA (as gemma-7b), untied output.
    "gemma-mha": dict(
        arch="gemma", hidden_size=40, num_layers=2, num_heads=2, num_kv_heads=2, head_dim=32,
        intermediate_size=72, vocab_size=120, tie=False, hidden_act="gelu_pytorch_tanh",
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("gemma"), CASES, seed=90, n_tokens=40)


@pytest.mark.parametrize("fmt", ["safetensors", "F32", "F16", "Q8_0"])
@pytest.mark.parametrize("name", list(CASES))
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    model = check_golden(path, ids, hf_logits, fmt)
    c = model.config
    assert c["arch"] == "gemma" and not c["qk_norm"] and c["sliding_window"] == 0
    assert c["attn_softcap"] == 0.0 and c["final_softcap"] == 0.0
    assert c["attn_scale"] == pytest.approx(CASES[name]["head_dim"] ** -0.5)


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


@pytest.mark.parametrize("fmt", ["F32", "Q8_0"])
def test_batch_invariant(
    hf_models: dict[str, Any], fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, "gemma", fmt, tmp_path_factory)
    check_invariance(core.load_model(path), CASES["gemma"]["vocab_size"], seed=13, kv="float16")


def test_hidden_act_gelu_is_the_tanh_approximation(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """Gemma 1 configs on the Hub say hidden_act "gelu"; the released models were trained with the
    tanh approximation, which llama.cpp and vLLM use for it: so does ossa (same logits as
    gelu_pytorch_tanh). Other activations are refused."""
    src = Path(hf_models["gemma"][0])
    ids = hf_models["gemma"][2]
    want = core.model_logits(core.load_model(str(src)), ids)
    for act, ok in [("gelu", True), ("relu", False)]:
        dst = tmp_path / act
        shutil.copytree(src, dst)
        cfg = json.loads((dst / "config.json").read_text())
        cfg["hidden_act"] = act
        (dst / "config.json").write_text(json.dumps(cfg))
        if ok:
            np.testing.assert_array_equal(core.model_logits(core.load_model(str(dst)), ids), want)
            assert ref_loader.load_weights(str(dst))[0] == core.load_model(str(dst)).config
        else:
            with pytest.raises(core.ModelError, match="relu"):
                core.load_model(str(dst))
            with pytest.raises(ValueError, match="relu"):
                ref_loader.load_weights(str(dst))
    assert "architecture  gemma" in models.format_inspect(models.inspect(str(src)))
