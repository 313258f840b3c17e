"""Nemotron-H (``nemotron_h`` / ``nemotron_h_moe`` GGUF files, NemotronHForCausalLM folders: NVIDIA's
Nemotron-H, Nemotron Nano 2 (9B, 12B) and Nemotron 3 Nano (30B-A3B, experts)) against Hugging Face
transformers and the NumPy twin, on tiny random models built by transformers, from safetensors folders and
from GGUF files laid out as llama.cpp's converter writes them.

Each block holds one sublayer after one RMSNorm: a Mamba-2 mixer (as Granite 4.0-H's,
``ossa.reference.delta_net.mamba2``), attention without RoPE, or a feed-forward of relu(up x)^2 without a
gate (``mlp``), or experts of that feed-forward routed as DeepSeek V3's (sigmoid scores plus a selection
bias, renormalised, scaled) beside a shared one (``moe``). Feed-forward blocks hold no K/V and no state
(ModelConfig::has_kv). The engine gives each running sequence a state slot, as for Qwen3.5
(test_qwen35.check_recurrent_engine). The GGUF layout was also checked against llama.cpp's own reading of
such files (docs/models.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from test_qwen35 import check_recurrent_engine, check_state_slots
from tiny_models import (
    N_TOKENS,
    build_hf_cases,
    case_file,
    check_case,
    check_chunked_prefill,
    check_config_refusals,
    check_golden,
    greedy,
    hf_greedy,
    hf_logits,
    hf_to_gguf,
    make_hf_model,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader

ALL = ["safetensors", "F32", "F16", "Q8_0"]
M, A, F, E = "linear_attention", "full_attention", "mlp", "moe"
CASES: dict[str, dict[str, Any]] = {
    # Nemotron Nano 2's layout, small: Mamba-2 blocks (2 groups, an odd state size 20, the convolution's
    # bias) between attention and relu2 feed-forward blocks, GQA, head_dim 16, untied.
    "nemotron-h": dict(
        arch="nemotron_h", hidden_size=48, num_layers=6, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=40, vocab_size=150, layers_block_type=[M, F, M, A, F, M], mamba_num_heads=6,
        mamba_head_dim=8, ssm_state_size=20, n_groups=2, conv_kernel=4,
    ),
    # Nemotron 3 Nano's (experts): 5 experts of 24 rows, 2 used, sigmoid scores plus the selection bias,
    # renormalised and scaled by 1.5, a shared relu2 MLP of 32 rows; one group of Mamba-2 heads, 3 taps
    # without the convolution's bias; the first block attention. (tie_word_embeddings is not used:
    # transformers' NemotronH keeps its lm_head whatever the config says, and so does ossa.)
    "nemotron-h-moe": dict(
        arch="nemotron_h", hidden_size=64, num_layers=6, num_heads=4, num_kv_heads=1, head_dim=16,
        intermediate_size=40, vocab_size=130, layers_block_type=[A, E, M, M, E, M], mamba_num_heads=4,
        mamba_head_dim=16, ssm_state_size=16, n_groups=1, conv_kernel=3, use_conv_bias=False,
        n_routed_experts=5, num_experts_per_tok=2, moe_intermediate_size=24,
        moe_shared_expert_intermediate_size=32, routed_scaling_factor=1.5,
    ),
}  # fmt: skip
# F16 / Q8_0 files against transformers. These random hybrids are ill-conditioned: rounding the weights
# to F16 moves their logits by 0.3-5% of the range (measured over seeds and layouts; 1.3e-2 / 1.1e-2
# here), where a Llama-family model moves by 1e-3, and in the experts' model Q8_0's rounding flips
# near-tied routing choices (0.3 of the range over the seeds tried). So the rounded files are held to
# transformers within 3e-2, except the experts' Q8_0 file, which is held to the twin alone: the twin,
# on the same rounded weights, agrees with ossa to its usual tolerance (measured: 4.5e-6 / 2.8e-5).
ROUNDED_TOL = {"F16": 3e-2, "Q8_0": 3e-2}


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("nemotron-h"), CASES, seed=460, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in ALL])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    exempt = (("nemotron-h-moe", "Q8_0"),)  # (its routing flips: held to the twin alone)
    model = check_case(hf_models, name, fmt, tmp_path_factory, ROUNDED_TOL, hf_exempt=exempt)
    kw, c = CASES[name], model.config
    kinds = kw["layers_block_type"]
    m = c["ssm"]
    assert m["layers"] == [i for i, t in enumerate(kinds) if t == M]
    assert (
        m["d_inner"] == kw["mamba_num_heads"] * kw["mamba_head_dim"] and m["d_state"] == kw["ssm_state_size"]
    )
    assert m["conv_bias"] == kw.get("use_conv_bias", True) and m["n_groups"] == kw["n_groups"]
    assert c["layer_no_ffn"] == [t in (M, A) for t in kinds]
    assert c["layer_no_mixer"] == [t in (F, E) for t in kinds]
    assert c["n_kv_layers"] == kinds.count(A) and c["ffn_relu2"] and all(c["layer_nope"])
    assert c["moe"]["layers"] == [i for i, t in enumerate(kinds) if t == E]
    if E in kinds:  # DeepSeek V3's routing, the shared MLP of its own size
        assert c["moe"]["sigmoid_gating"] and c["moe"]["selection_bias"] and c["moe"]["norm_topk_prob"]
        assert c["moe"]["n_ff_shared"] == kw["moe_shared_expert_intermediate_size"]
        assert c["moe"]["routed_scale"] == np.float32(kw["routed_scaling_factor"])


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal, equal to HF and to the
    twin's runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


def test_batch_invariance_inspect_and_errors(
    hf_models: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Batch invariance (alone, among 7 others each in its own state slot, chunked, 1 and 2 threads) on
    the experts' model; state slots and fork copies (a model ending on a Mamba-2 block); inspect shows
    the blocks; unsupported options and bad patterns are refused by both loaders; the Hub's
    hybrid_override_pattern reads as layers_block_type; a GGUF file without its per-layer feed-forward
    sizes fails naming them."""
    path = case_file(hf_models, "nemotron-h-moe", "Q8_0", tmp_path_factory)
    check_invariance(core.load_model(path), CASES["nemotron-h-moe"]["vocab_size"], seed=19)
    dense = case_file(hf_models, "nemotron-h", "F32", tmp_path_factory)
    check_state_slots(core.load_model(dense), CASES["nemotron-h"]["vocab_size"])
    text = models.format_inspect(models.inspect(path))
    want = "one sublayer each: 3 Mamba-2, 1 attention, 0 feed-forward, 2 experts (relu2); pattern *EMMEM"
    assert want in text, text
    src = hf_models["nemotron-h"][0]
    check_config_refusals(
        src,
        tmp_path,
        (
            ({"mlp_hidden_act": "silu"}, "mlp_hidden_act"),
            ({"moe_latent_size": 16}, "moe_latent_size"),
            ({"use_bias": True}, "use_bias"),
            ({"layers_block_type": [M, F, "conv", A, F, M]}, "layers_block_type"),
            ({"n_groups": 4}, "Mamba-2 head / group counts"),
        ),
    )
    # The Hub's configs: hybrid_override_pattern and num_hidden_layers instead of layers_block_type.
    cfg = json.loads((Path(src) / "config.json").read_text())
    hub = tmp_path / "hub"
    shutil.copytree(src, hub)
    pattern = {M: "M", A: "*", F: "-", E: "E"}
    old = {k: v for k, v in cfg.items() if k != "layers_block_type"}
    old.update(
        hybrid_override_pattern="".join(pattern[t] for t in cfg["layers_block_type"]), num_hidden_layers=6
    )
    (hub / "config.json").write_text(json.dumps(old))
    assert core.load_model(str(hub)).config == core.load_model(src).config
    assert ref_loader.load_weights(str(hub))[0] == ref_loader.load_weights(src)[0]
    from tiny_models import gguf_without

    f32 = case_file(hf_models, "nemotron-h", "F32", tmp_path_factory)
    odd = gguf_without(f32, tmp_path / "odd.gguf", keys=["nemotron_h.feed_forward_length"])
    with pytest.raises(core.ModelError, match="feed_forward_length"):
        core.load_model(odd)
    with pytest.raises(ValueError, match="n_ff|feed_forward_length"):
        ref_loader.load_weights(odd)
    # (the per-layer KV head counts without per-layer feed-forward sizes)
    odd2 = gguf_without(
        f32,
        tmp_path / "odd2.gguf",
        keys=["nemotron_h.feed_forward_length"],
        add={"nemotron_h.feed_forward_length": CASES["nemotron-h"]["intermediate_size"]},
    )
    with pytest.raises(core.ModelError, match="one count per layer"):
        core.load_model(odd2)
    with pytest.raises(ValueError, match="one count per layer"):
        ref_loader.load_weights(odd2)


def test_no_feed_forward_blocks(tmp_path: Path) -> None:
    """A Nemotron-H model of mixer blocks only (Mamba-2 and attention, no feed-forward block): its GGUF
    file (every feed_forward_length 0) loads in both loaders and gives transformers' logits."""
    kw = dict(CASES["nemotron-h"], num_layers=3, layers_block_type=[M, A, M])
    folder = make_hf_model(tmp_path / "hf", seed=12, **kw)
    ids = np.random.default_rng(3).integers(0, kw["vocab_size"], 24).tolist()
    check_golden(hf_to_gguf(folder, tmp_path / "no-ffn.gguf", "F32"), ids, hf_logits(folder, ids), "F32")


@pytest.fixture(scope="module")
def engine_model(default_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny Nemotron-H GGUF (experts) with the default model's vocabulary and tokenizer, for the engine
    (its Mamba-2 states small beside the one attention block's K/V, so that the preemption check's tight
    budget holds four of them)."""
    root = tmp_path_factory.mktemp("nemotron-h-engine")
    small = dict(vocab_size=49152, ssm_state_size=8, mamba_num_heads=2, mamba_head_dim=16)
    folder = make_hf_model(root / "hf", seed=6, **dict(CASES["nemotron-h-moe"], **small))
    return hf_to_gguf(folder, root / "tiny-nemotron-h.gguf", "F32", tokenizer_gguf=default_model_path)


def test_engine_state_slots(engine_model: str) -> None:
    check_recurrent_engine(engine_model)
