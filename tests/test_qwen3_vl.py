"""Qwen3-VL's and Qwen2.5-VL's language models (``qwen3vl`` / ``qwen3vlmoe`` / ``qwen2vl`` GGUF files as
llama.cpp converts them; Qwen3VLForConditionalGeneration / Qwen3VLMoeForConditionalGeneration /
Qwen2_5_VLForConditionalGeneration folders, the vision tower skipped) against Hugging Face transformers
(the whole vision-language model, fed text alone) and the NumPy twin, on tiny random models built by
transformers. Qwen2.5-VL's layers are Qwen2's (q / k / v biases) under the same M-RoPE (sections, not
interleaved); its released folders are flat (the language model's keys at the top of config.json,
tensors under model. and the vision tower under visual.).

For text, Qwen3-VL's interleaved M-RoPE is plain RoPE (the three position rows of a text token are the
same), so its layers are Qwen3's (q / k norms) and Qwen3-MoE's (softmax top-k, always renormalised); what
differs is where things are: the text config inside the wrapper's ``text_config``, the tensors under
``model.language_model.``, the head size's default (128 for the dense model), the RoPE base's (500000),
and the MoE experts' fused stacks, [n, 2F, E] as transformers 5 writes them or transposed [n, E, 2F] as
the Hub's files hold them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tiny_models import (
    N_TOKENS,
    TWIN_TOL,
    build_hf_cases,
    check_case,
    check_chunked_prefill,
    greedy,
    hf_greedy,
    make_hf_model,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model

CASES: dict[str, dict[str, Any]] = {
    # Qwen3-VL-2B / 4B's layout: dense, tied, q / k norms, odd head size.
    "qwen3-vl": dict(
        arch="qwen3_vl", hidden_size=48, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=12,
        intermediate_size=40, vocab_size=120, tie=True, rope_theta=5e6,
    ),
    # Qwen3-VL-30B-A3B's: experts (6, two a token) in every layer but one dense one, untied.
    "qwen3-vl-moe": dict(
        arch="qwen3_vl_moe", hidden_size=32, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=8,
        intermediate_size=40, moe_intermediate_size=24, num_experts=6, num_experts_per_tok=2,
        mlp_only_layers=[1], vocab_size=100, rope_theta=5e6,
    ),
    # Qwen2.5-VL-3B / 7B's layout: Qwen2's biases, untied.
    "qwen2.5-vl": dict(
        arch="qwen2_5_vl", hidden_size=48, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=40,
        vocab_size=120, rope_theta=1e6,
    ),
}  # fmt: skip
FORMATS = ["safetensors", "F32", "F16", "Q8_0"]
ROUNDED_TOL = {"F16": 1e-2, "Q8_0": 1e-1}


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("qwen3vl"), CASES, seed=600, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in FORMATS])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    model = check_case(hf_models, name, fmt, tmp_path_factory, ROUNDED_TOL)
    c = model.config
    assert c["rope_style"] == "neox"
    if name == "qwen2.5-vl":
        assert c["arch"] == "qwen2vl" and c["qkv_bias"] and not c["qk_norm"] and c["rope_theta"] == 1e6
        return
    assert c["qk_norm"] and c["rope_theta"] == 5e6
    if name == "qwen3-vl":
        assert c["arch"] == "qwen3vl" and c["tied_embeddings"] and c["head_dim"] == 12
    else:
        moe = c["moe"]
        assert c["arch"] == "qwen3vlmoe" and moe["layers"] == [0, 2] and moe["norm_topk_prob"]
        assert moe["n_expert"] == 6 and moe["n_ff_expert"] == 24 and moe["n_ff_shared"] == 0


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 20, block=4) == hf_greedy(path, ids[:10], 20)


def test_hub_layout_and_defaults(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """The Hub's Qwen3-VL-MoE files hold the experts' stacks transposed ([n, E, 2F], [n, F, E]): the same
    logits bitwise (ossa) and to the twin's tolerance. A config without head_dim and the RoPE base reads
    them as transformers does (128-wide heads, 500000)."""
    import json

    from safetensors.numpy import load_file, save_file

    src, _, ids = hf_models["qwen3-vl-moe"]
    tensors = load_file(str(Path(src) / "model.safetensors"))
    hub = {k: (v.transpose(0, 2, 1).copy() if ".experts." in k else v) for k, v in tensors.items()}
    dst = tmp_path / "hub"
    dst.mkdir()
    save_file(hub, str(dst / "model.safetensors"))
    (dst / "config.json").write_text((Path(src) / "config.json").read_text())
    want = core.model_logits(core.load_model(src), ids)
    np.testing.assert_array_equal(core.model_logits(core.load_model(str(dst)), ids), want)
    twin = ref_model.forward(*ref_loader.load_weights(str(dst)), ids)
    assert float(np.max(np.abs(twin - want))) / float(np.max(np.abs(want))) < TWIN_TOL
    kw = dict(CASES["qwen3-vl"], head_dim=None, rope_theta=500000.0)
    folder = Path(make_hf_model(tmp_path / "defaults", seed=3, **kw))
    cfg = json.loads((folder / "config.json").read_text())
    want = core.model_logits(core.load_model(str(folder)), ids)
    text = {k: v for k, v in cfg["text_config"].items() if k != "head_dim"}
    text["rope_parameters"] = {k: v for k, v in text["rope_parameters"].items() if k != "rope_theta"}
    (folder / "config.json").write_text(json.dumps(dict(cfg, text_config=text)))
    model = core.load_model(str(folder))
    assert model.config["head_dim"] == 128 and model.config["rope_theta"] == 500000.0
    np.testing.assert_array_equal(core.model_logits(model, ids), want)
    assert ref_loader.load_weights(str(folder))[0] == model.config


def test_flat_qwen25_vl_folder(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """Qwen2.5-VL as released: config.json flat (the text keys at the top level beside vision_config, no
    text_config), tensors under model. / lm_head. and the vision tower under visual.: the same logits
    bitwise, in both loaders."""
    import json

    from safetensors.numpy import load_file, save_file

    src, _, ids = hf_models["qwen2.5-vl"]
    cfg = json.loads((Path(src) / "config.json").read_text())
    flat = {k: v for k, v in cfg.items() if k != "text_config"}
    flat.update({k: v for k, v in cfg["text_config"].items() if k not in ("model_type", "architectures")})
    tensors = load_file(str(Path(src) / "model.safetensors"))
    renamed = {k.replace("model.language_model.", "model.").replace("model.visual.", "visual."): v
               for k, v in tensors.items()}  # fmt: skip
    dst = tmp_path / "flat"
    dst.mkdir()
    save_file(renamed, str(dst / "model.safetensors"))
    (dst / "config.json").write_text(json.dumps(flat))
    want = core.model_logits(core.load_model(src), ids)
    np.testing.assert_array_equal(core.model_logits(core.load_model(str(dst)), ids), want)
    twin = ref_model.forward(*ref_loader.load_weights(str(dst)), ids)
    assert float(np.max(np.abs(twin - want))) / float(np.max(np.abs(want))) < TWIN_TOL


def test_inspect(hf_models: dict[str, Any]) -> None:
    text = models.format_inspect(models.inspect(hf_models["qwen3-vl-moe"][0]))
    assert "architecture  qwen3vlmoe" in text, text
    assert "experts" in text, text


@pytest.mark.parametrize(
    "wrapper, prefix, head",
    [
        ("llava", "model.language_model.", "lm_head.weight"),  # (transformers 5's LLaVA)
        ("llava_next", "language_model.model.", "language_model.lm_head.weight"),  # (the Hub's older files)
        ("idefics3", "model.text_model.", "lm_head.weight"),  # (SmolVLM)
        ("internvl", "model.language_model.", "lm_head.weight"),
    ],
)
def test_other_vision_language_folders(tmp_path: Path, wrapper: str, prefix: str, head: str) -> None:
    """A vision-language folder of a type ossa does not run whose text_config is a language model it does
    (LLaVA, InternVL, SmolVLM, ...): that model, its tensors under the wrapper's prefix, the vision tower
    skipped, bitwise the text folder's logits in both loaders; a wrapper of an unknown language model is
    refused by name."""
    import json

    from safetensors.numpy import load_file, save_file

    src = Path(make_hf_model(tmp_path / "text", "llama", hidden_size=32, num_layers=2, num_heads=4,
                             num_kv_heads=2, intermediate_size=40, vocab_size=90, seed=11))  # fmt: skip
    ids = list(range(3, 40))
    cfg = json.loads((src / "config.json").read_text())
    tensors = load_file(str(src / "model.safetensors"))
    renamed = {
        (prefix + k[len("model.") :]) if k.startswith("model.") else head: v for k, v in tensors.items()
    }
    renamed["model.vision_tower.patch_embed.weight"] = np.zeros((4, 4), np.float32)
    dst = tmp_path / wrapper
    dst.mkdir()
    save_file(renamed, str(dst / "model.safetensors"))
    (dst / "config.json").write_text(json.dumps({"model_type": wrapper, "text_config": cfg}))
    want = core.model_logits(core.load_model(str(src)), ids)
    np.testing.assert_array_equal(core.model_logits(core.load_model(str(dst)), ids), want)
    twin = ref_model.forward(*ref_loader.load_weights(str(dst)), ids)
    np.testing.assert_array_equal(twin, ref_model.forward(*ref_loader.load_weights(str(src)), ids))
    (dst / "config.json").write_text(
        json.dumps({"model_type": wrapper, "text_config": {"model_type": "zzz"}})
    )
    with pytest.raises(core.ModelError, match=f"unknown architecture '{wrapper}'"):
        core.load_model(str(dst))
    with pytest.raises(ValueError, match=f"unknown architecture '{wrapper}'"):
        ref_loader.load_weights(str(dst))
