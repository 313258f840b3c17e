"""The recurrent hybrids' GGUF sizes, corrupted: each scalar size key of a tiny file (the ssm.* sizes, block
and head counts, the feed-forward size) set to values that disagree with the tensors or overflow must give a
ModelError at load, or a model that runs (ossa never reads past a tensor on a size the file claims). Loads
run in-process: a crash kills pytest, which is the failure signal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tiny_models import corrupt_sizes, hf_to_gguf, make_hf_model

_SMALL: dict[str, dict[str, Any]] = {
    "mamba": dict(
        arch="mamba", hidden_size=32, num_layers=2, num_heads=1, num_kv_heads=1, intermediate_size=None,
        vocab_size=64, state_size=8, conv_kernel=4, expand=2, time_step_rank=4,
    ),
    "falcon_mamba": dict(
        arch="falcon_mamba", hidden_size=32, num_layers=2, num_heads=1, num_kv_heads=1,
        intermediate_size=None, vocab_size=64, state_size=8, conv_kernel=3, expand=2,
    ),
    "mamba2": dict(
        arch="mamba2", hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=1, head_dim=16,
        intermediate_size=None, vocab_size=64, n_groups=2, state_size=8, conv_kernel=4, expand=2,
    ),
    "jamba": dict(
        arch="jamba", hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=32,
        vocab_size=64, num_experts=2, num_experts_per_tok=1, attn_layer_period=2, attn_layer_offset=1,
        expert_layer_period=2, expert_layer_offset=0, mamba_d_state=8, mamba_dt_rank=2,
    ),
    "falcon_h1": dict(
        arch="falcon_h1", hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16,
        intermediate_size=32, vocab_size=64, mamba_d_ssm=32, mamba_n_heads=2, mamba_d_head=16,
        mamba_n_groups=1, mamba_d_state=8, mamba_d_conv=3, mamba_rms_norm=False,
    ),
    "qwen3_next": dict(
        arch="qwen3_next", hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16,
        intermediate_size=32, vocab_size=64, linear_num_key_heads=2, linear_num_value_heads=2,
        linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=3, num_experts=2,
        num_experts_per_tok=1, moe_intermediate_size=16, shared_expert_intermediate_size=16,
        full_attention_interval=2,
    ),
}  # fmt: skip
BAD = [0, 1, 3, 7, 1 << 20, 2**31 - 1, 2**32 - 1]


@pytest.mark.parametrize("name", list(_SMALL))
def test_corrupt_sizes_are_refused_or_run(name: str, tmp_path: Path) -> None:
    folder = make_hf_model(tmp_path / "hf", seed=1, **_SMALL[name])
    src = hf_to_gguf(folder, tmp_path / "src.gguf", "F32")
    keys, outcomes = corrupt_sizes(src, tmp_path, BAD)
    assert any(".ssm." in k for k in keys), keys
    # (measured: 13-20 keys a file; 68-124 of the 91-140 cases refused, the rest run)
    assert len(keys) >= 10 and outcomes["error"] > 0, (keys, outcomes)
