"""Gemma 3 (text) against Hugging Face transformers (torch CPU, float32) and the NumPy twin, on tiny
random models built by transformers: from safetensors folders (Gemma3ForCausalLM and a
Gemma3ForConditionalGeneration folder's language model) and from GGUF files laid out as llama.cpp's
converter writes them (norms stored as 1 + w, every 6th layer global unless the file says otherwise).

Every optional feature is on in at least one case: sliding-window layers with their own RoPE base,
linear RoPE scaling of the global layers, GQA, query_pre_attn_scalar != head_dim, final-logit
soft-capping, untied output, layer_types that are not the default pattern. Prompts run 5x and 7x
the window, also prefilled in chunks, and greedy decoding runs past the window.

Stated tolerances as in test_forward_hf.py (max |error| / max |HF logit|); measured here: 4e-7 for
safetensors and GGUF F32, against the twin 4e-7 for every format.
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
    check_golden,
    greedy,
    hf_greedy,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model

CASES: dict[str, dict[str, Any]] = {
    # 6 layers in llama.cpp's default pattern (5 sliding, the 6th global), window 8, GQA 3, head_dim
    # 24 != 72/3, linear scaling of the global layers' RoPE, tied output.
    "gemma3": dict(
        arch="gemma3", hidden_size=72, num_layers=6, num_heads=3, num_kv_heads=1, head_dim=24,
        intermediate_size=112, vocab_size=160, tie=True, rope_theta=1e6,
        rope_scaling={"rope_type": "linear", "factor": 2.0},
        sliding_window=8, query_pre_attn_scalar=24,
    ),
    # Explicit layer types (global first), window 6, local RoPE base 500, scores scaled by 40^-1/2,
    # final logits soft-capped at 3, untied output, head_dim 32.
    "gemma3-capped": dict(
        arch="gemma3", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=32,
        intermediate_size=96, vocab_size=128, tie=False,
        sliding_window=6, layer_types=["full_attention", "sliding_attention", "sliding_attention"],
        query_pre_attn_scalar=40, final_logit_softcapping=3.0, rope_local_base_freq=500.0,
    ),
}  # fmt: skip
WINDOW = {"gemma3": 8, "gemma3-capped": 6}


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("gemma3"), CASES, seed=10, n_tokens=N_TOKENS)


@pytest.mark.parametrize("fmt", ["safetensors", "F32", "F16", "Q8_0"])
@pytest.mark.parametrize("name", list(CASES))
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    model = check_golden(path, ids, hf_logits, fmt)
    assert model.config["arch"] == "gemma3"
    assert model.config["sliding_window"] == WINDOW[name]


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_past_the_window(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner (blocks of 4, so a window of 8 spans
    parts of three blocks): bitwise equal to one another, equal to HF, and to the twin's runner."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)


@pytest.mark.parametrize("name", list(CASES))
def test_greedy_matches_transformers(hf_models: dict[str, Any], name: str) -> None:
    """A 10-token prompt and 30 greedy tokens (past 3x the window), one decode step at a time."""
    path, _, ids = hf_models[name]
    prompt, n_new = ids[:10], 30
    assert greedy(core.load_model(path), prompt, n_new, block=4) == hf_greedy(path, prompt, n_new)


@pytest.mark.parametrize("fmt", ["F32", "Q8_0"])
@pytest.mark.parametrize("kv", ["float32", "float16"])
def test_batch_invariant(
    hf_models: dict[str, Any], fmt: str, kv: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits, over 72
    tokens (9x the window)."""
    path = case_file(hf_models, "gemma3", fmt, tmp_path_factory)
    check_invariance(core.load_model(path), CASES["gemma3"]["vocab_size"], seed=5, kv=kv)


def test_multimodal_folder_runs_its_language_model(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """A Gemma3ForConditionalGeneration folder (config with text_config, tensors under
    model.language_model., a vision tower ossa skips) gives the text model's logits bitwise."""
    from safetensors.numpy import load_file, save_file

    src = Path(hf_models["gemma3-capped"][0])
    text_cfg = json.loads((src / "config.json").read_text())
    tensors = load_file(str(src / "model.safetensors"))
    renamed = {k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k: v
               for k, v in tensors.items()}  # fmt: skip
    renamed["model.vision_tower.patch_embed.weight"] = np.zeros((4, 4), dtype=np.float32)
    dst = tmp_path / "mm"
    dst.mkdir()
    save_file(renamed, str(dst / "model.safetensors"))
    arch = ["Gemma3ForConditionalGeneration"]
    cfg = {"model_type": "gemma3", "architectures": arch, "text_config": text_cfg}
    (dst / "config.json").write_text(json.dumps(cfg))
    ids = hf_models["gemma3-capped"][2]
    want = core.model_logits(core.load_model(str(src)), ids)
    got = core.model_logits(core.load_model(str(dst)), ids)
    np.testing.assert_array_equal(got, want)
    config, weights = ref_loader.load_weights(str(dst))
    twin = ref_model.forward(config, weights, ids)
    assert float(np.max(np.abs(twin - got))) / float(np.max(np.abs(got))) < TWIN_TOL


def test_inspect_describes_window_and_capping(hf_models: dict[str, Any]) -> None:
    info = models.inspect(hf_models["gemma3-capped"][0])
    assert info["arch"] == "gemma3" and info["sliding_window"] == 6 and info["n_sliding_layers"] == 2
    text = models.format_inspect(info)
    assert "sliding window of 6 tokens in 2 of 3 layers, local RoPE theta=500" in text
    assert "soft-capped at 3" in text
    text = models.format_inspect(models.inspect(hf_models["gemma3"][0]))
    assert "scaling=linear factor=2" in text and "in 5 of 6 layers" in text


def test_bad_gemma3_configs_fail_clearly(hf_models: dict[str, Any], tmp_path: Path) -> None:
    src = Path(hf_models["gemma3-capped"][0])
    for key, value, match in [
        ("hidden_activation", "relu", "hidden_activation"),
        ("layer_types", ["full_attention"], "layer_types"),
        ("sliding_window", -3, "sliding window"),
        ("use_bidirectional_attention", True, "bidirectional"),
    ]:
        dst = tmp_path / key
        shutil.copytree(src, dst)
        cfg = json.loads((dst / "config.json").read_text())
        cfg[key] = value
        (dst / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(core.ModelError, match=match):
            core.load_model(str(dst))


# Gemma 3's chat-template idioms: a system message folded into the first user turn, roles checked
# with raise_exception, "assistant" renamed "model", trimmed contents, <start_of_turn> markers.
GEMMA_TEMPLATE = (
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}"
    "{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}{%- else -%}"
    "{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)


def test_chat_template_idioms() -> None:
    import jinja2

    from ossa import chat_template

    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi "},
            {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Again"}]  # fmt: skip
    want = (
        jinja2.Environment()
        .from_string(GEMMA_TEMPLATE)
        .render(messages=msgs, bos_token="<bos>", add_generation_prompt=True)
    )
    cache = chat_template.TemplateCache()
    got = chat_template.render(cache, GEMMA_TEMPLATE, msgs, True, {"bos_token": "<bos>"})
    assert got == want
    assert got.endswith("<start_of_turn>user\nAgain<end_of_turn>\n<start_of_turn>model\n")
    with pytest.raises(Exception, match="roles must alternate"):
        chat_template.render(chat_template.TemplateCache(), GEMMA_TEMPLATE, msgs[1:2] * 2, True, {})
