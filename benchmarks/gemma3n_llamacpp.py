"""Gemma 3n's GGUF layout checked against llama.cpp: a tiny random Gemma 3n built by transformers, in the
shape llama.cpp assumes (22 layers of which its fixed 20 keep their own K/V, per-layer inputs of 256,
LAuReL of rank 64, 4 streams, the default sparsity: the first 10 layers' gates), written by the tests'
converter (tests/tiny_models.hf_to_gguf, with the default model's tokenizer) and run by ossa and by
llama-cpp-python (F32 KV cache). Prints each one's largest logit difference from transformers, over the
largest logit, and llama.cpp's from transformers run with llama.cpp's variance of the sparse gates
(divided by n - 1 in its gaussian_topk, by n in transformers).

    PYTHONPATH=src python benchmarks/gemma3n_llamacpp.py
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def main() -> None:
    import llama_cpp
    import torch
    from tiny_models import hf_logits, hf_to_gguf, make_hf_model
    from transformers.models.gemma3n import modeling_gemma3n

    from ossa import models
    from ossa._native import core

    tmp = tempfile.mkdtemp()
    hf = make_hf_model(
        os.path.join(tmp, "hf"), "gemma3n", hidden_size=64, num_layers=22, num_heads=4, num_kv_heads=2,
        head_dim=16, intermediate_size=96, vocab_size=49152, vocab_size_per_layer_input=49152,
        hidden_size_per_layer_input=256, sliding_window=5, num_kv_shared_layers=2, laurel_rank=64,
        altup_num_inputs=4, tie=True, rope_theta=1e6, seed=11,
    )  # fmt: skip
    path = hf_to_gguf(
        hf, os.path.join(tmp, "tiny.gguf"), "F32", tokenizer_gguf=models.resolve("smollm2-135m")
    )
    ids = [int(x) for x in np.random.default_rng(2).integers(0, 49152, 24)]
    want = hf_logits(hf, ids)
    scale = float(np.max(np.abs(want)))
    ossa = core.model_logits(core.load_model(path), ids)
    llm = llama_cpp.Llama(path, n_ctx=64, logits_all=True, verbose=False, n_threads=2, type_k=0, type_v=0)
    llm.eval(ids)
    peer = np.asarray(llm.scores[: len(ids)], dtype=np.float32)
    print(f"ossa (GGUF)  vs transformers: {np.max(np.abs(ossa - want)) / scale:.2e}")
    print(f"llama.cpp    vs transformers: {np.max(np.abs(peer - want)) / scale:.2e}")

    def topk_n_minus_1(self: object, inputs: torch.Tensor) -> torch.Tensor:
        p = torch.tensor(self.activation_sparsity, dtype=torch.float32)  # type: ignore[attr-defined]
        cut = torch.distributions.normal.Normal(0, 1).icdf(p).type(inputs.dtype)
        mean = torch.mean(inputs, dim=-1, keepdim=True)
        std = torch.std(inputs, dim=-1, keepdim=True, unbiased=True)
        return torch.nn.functional.relu(inputs - (mean + std * cut))

    modeling_gemma3n.Gemma3nTextMLP._gaussian_topk = topk_n_minus_1  # type: ignore[method-assign]
    patched = hf_logits(hf, ids)
    print(
        "llama.cpp    vs transformers with llama.cpp's n - 1 variance: "
        f"{np.max(np.abs(peer - patched)) / float(np.max(np.abs(patched))):.2e}"
    )


if __name__ == "__main__":
    main()
