"""Sessions 54-56 and 60: their families checked against llama.cpp on tiny GGUF files: each a tiny random
model built by transformers (session 60's remote-code families: tests/test_remote_code_families.py's
folders and oracles), written by the tests' converter (tests/tiny_models.hf_to_gguf, F32, with the
default model's tokenizer) and run by ossa and by llama-cpp-python (F32 KV cache, its own process
settings). Prints each one's largest logit difference from transformers' float32 logits, over the largest
logit; a file llama.cpp does not load prints its error.

    PYTHONPATH=src python benchmarks/tiny_llamacpp.py [name ...]
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

V = 49152  # (the default model's vocabulary: its tokenizer keys go into every file)
CASES: dict[str, dict[str, Any]] = {
    "jais2": dict(arch="jais2", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4,
                  intermediate_size=96),
    "nemotron": dict(arch="nemotron", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2,
                     intermediate_size=160),
    "olmo": dict(arch="olmo", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96,
                 tie=True),
    "olmo-clip": dict(arch="olmo", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2,
                      intermediate_size=80, clip_qkv=0.6),
    "hunyuan_moe": dict(arch="hunyuan_v1_moe", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2,
                        head_dim=16, intermediate_size=24, num_experts=5, moe_topk=2,
                        rope_scaling={"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0}),
    "gpt_neox": dict(arch="gpt_neox", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4,
                     intermediate_size=96),
    "gpt_neox-seq": dict(arch="gpt_neox", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4,
                         intermediate_size=80, use_parallel_residual=False, partial_rotary_factor=0.5,
                         hidden_act="gelu_fast"),
    "falcon": dict(arch="falcon", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4,
                   intermediate_size=96, tie=True),
    "falcon-40b": dict(arch="falcon", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                       intermediate_size=80, new_decoder_architecture=True),
    "dots1": dict(arch="dots1", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, head_dim=16,
                  intermediate_size=96, n_routed_experts=6, num_experts_per_tok=2, moe_intermediate_size=24,
                  n_shared_experts=1, first_k_dense_replace=1, norm_topk_prob=True,
                  routed_scaling_factor=2.5),
    "phimoe": dict(arch="phimoe", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2,
                   intermediate_size=48, num_local_experts=6, attention_bias=True, lm_head_bias=True),
    "apertus": dict(arch="apertus", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2,
                    intermediate_size=160),
    "exaone_moe": dict(arch="exaone_moe", hidden_size=64, num_layers=5, num_heads=4, num_kv_heads=2,
                       head_dim=16, intermediate_size=96, num_experts=6, num_experts_per_tok=2,
                       moe_intermediate_size=24, num_shared_experts=1, sliding_window=6,
                       sliding_window_pattern=4),
    "granitemoeshared": dict(arch="granitemoeshared", hidden_size=64, num_layers=2, num_heads=4,
                             num_kv_heads=2, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2,
                             shared_intermediate_size=48, embedding_multiplier=6.0, residual_multiplier=0.4,
                             attention_multiplier=0.2, logits_scaling=4.0),
    "gptj": dict(arch="gptj", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96,
                 rotary_dim=4),
    # session 55's GPT-2-era families (ALiBi, learned positions)
    "bloom": dict(arch="bloom", hidden_size=48, num_layers=3, num_heads=6, num_kv_heads=6,
                  intermediate_size=None, tie=True),
    "mpt": dict(arch="mpt", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4,
                intermediate_size=None, tie=True, clip_qkv=0.6),
    "gpt2": dict(arch="gpt2", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4,
                 intermediate_size=None, tie=True, max_position_embeddings=64),
    "starcoder": dict(arch="gpt_bigcode", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=1,
                      intermediate_size=112),
    "afmoe": dict(arch="afmoe", hidden_size=64, num_layers=5, num_heads=4, num_kv_heads=2, head_dim=16,
                  intermediate_size=96, moe_intermediate_size=24, num_experts=6, num_experts_per_tok=2,
                  num_shared_experts=1, num_dense_layers=1, sliding_window=6, mup_enabled=True,
                  route_scale=2.5),
    "minicpm3": dict(arch="minicpm3", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4,
                     intermediate_size=96, q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16,
                     qk_rope_head_dim=8, v_head_dim=16, max_position_embeddings=512,
                     rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.2, 1.5, 2.0],
                                   "long_factor": [1.5, 2.0, 3.0, 4.0],
                                   "original_max_position_embeddings": 512}),
    "chatglm": dict(arch="glm", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
                    intermediate_size=96),
    "dbrx": dict(arch="dbrx", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=24,
                 num_local_experts=5, num_experts_per_tok=2, clip_qkv=0.7),
}  # fmt: skip


def _oracles(tmp: str) -> Any:
    """(name, folder, the oracle's logits function) of each case: CASES built by transformers, then the
    remote-code families of tests/test_remote_code_families.py (session 60) with their own oracles."""
    from pathlib import Path

    from test_remote_code_families import BUILDERS
    from test_remote_code_families import CASES as REMOTE
    from tiny_models import hf_logits, make_hf_model

    for i, (name, kw) in enumerate(CASES.items()):
        if not sys.argv[1:] or name in sys.argv[1:]:
            folder = make_hf_model(os.path.join(tmp, name), seed=i, vocab_size=V, **kw)
            yield name, folder, lambda ids, folder=folder: hf_logits(folder, ids)
    for i, (name, (family, kw, fmts)) in enumerate(REMOTE.items()):
        if "F32" in fmts and (not sys.argv[1:] or name in sys.argv[1:]):
            folder, logits, _ = BUILDERS[family](Path(tmp), name, 40 + i, kw, vocab=V)
            yield name, folder, logits


def main() -> None:
    import llama_cpp
    from tiny_models import hf_to_gguf

    from ossa import models
    from ossa._native import core

    tokenizer = models.resolve("smollm2-135m")
    tmp = tempfile.mkdtemp()
    for i, (name, folder, oracle) in enumerate(_oracles(tmp)):
        path = hf_to_gguf(folder, os.path.join(tmp, name + ".gguf"), "F32", tokenizer_gguf=tokenizer)
        ids = [int(t) for t in np.random.default_rng(i).integers(100, 40000, 40)]
        hf = oracle(ids)
        scale = float(np.abs(hf).max())
        ours = float(np.abs(core.model_logits(core.load_model(path), ids) - hf).max()) / scale
        try:
            llm = llama_cpp.Llama(path, n_ctx=128, logits_all=True, verbose=False, type_k=0, type_v=0)
            llm.eval(ids)
            peer = float(np.abs(np.asarray(llm.scores[: len(ids)], dtype=np.float32) - hf).max()) / scale
            print(f"{name:18s} llama.cpp {peer:.2e}   ossa {ours:.2e}", flush=True)
        except Exception as e:  # (a file llama.cpp does not load)
            print(f"{name:18s} llama.cpp failed ({e})   ossa {ours:.2e}", flush=True)


if __name__ == "__main__":
    main()
