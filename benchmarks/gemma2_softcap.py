"""What Gemma 2's attention soft-capping costs: two random-weight Q8_0 GGUF files with Gemma 2 2B's
layer shapes (hidden 2304, 8 heads / 4 KV heads of 256, ff 9216, window 4096; 4 layers and a 4096-token
vocabulary, so that attention's share of a step is a real layer's), one with
``gemma2.attn_logit_softcapping = 50`` and one without, written to $OSSA_HOME/bench on first use.
Prints prefill tok/s (512 and 2048 tokens, in 512-token chunks, best of 2) and decode ms a step at a
2048-token context, alternating the files twice.

    PYTHONPATH=src python benchmarks/gemma2_softcap.py [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np


def gemma2_file(out: Path, softcap: bool, n_layer: int = 4) -> str:
    if out.exists():
        return str(out)
    import gguf
    from gguf import GGMLQuantizationType as QT

    E, H, KV, HD, F, V = 2304, 8, 4, 256, 9216, 4096  # noqa: N806 (Gemma 2 2B's layer shapes)
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(out), "gemma2")
    w.add_context_length(8192)
    w.add_embedding_length(E)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_rope_freq_base(1e4)
    w.add_sliding_window(4096)
    w.add_file_type(7)
    w.add_tokenizer_model("gpt2")
    if softcap:
        w.add_attn_logit_softcapping(50.0)
    w.add_final_logit_softcapping(30.0)

    def mat(name: str, r: int, c: int) -> None:
        a = (rng.standard_normal((r, c), dtype=np.float32) / np.sqrt(c)).astype(np.float32)
        q = gguf.quants.quantize(a, QT.Q8_0)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=QT.Q8_0)

    def vec(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    mat("token_embd.weight", V, E)
    vec("output_norm.weight", E)
    for i in range(n_layer):
        p = f"blk.{i}."
        for n in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            vec(p + n + ".weight", E)
        mat(p + "attn_q.weight", H * HD, E)
        mat(p + "attn_k.weight", KV * HD, E)
        mat(p + "attn_v.weight", KV * HD, E)
        mat(p + "attn_output.weight", E, H * HD)
        mat(p + "ffn_gate.weight", F, E)
        mat(p + "ffn_up.weight", F, E)
        mat(p + "ffn_down.weight", E, F)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(out)


def measure(path: str) -> str:
    from ossa._native import core

    m = core.load_model(path)
    vocab = m.config["n_vocab"]
    out = []
    block, chunk = 16, 512
    for n in (512, 2048):
        n_blocks = (n + 64) // block + 2
        table = list(range(n_blocks))
        ids = np.random.default_rng(0).integers(0, vocab, n).tolist()
        best = float("inf")
        for _ in range(2):
            r = core.ModelRunner(m, n_blocks, block, chunk)
            t0 = time.perf_counter()
            for s in range(0, n, chunk):
                k = min(chunk, n - s)
                pos = list(range(s, s + k))
                r.forward(ids[s : s + k], pos, pos, [0, k], [s + k], [0, n_blocks], table, [k - 1])
            best = min(best, time.perf_counter() - t0)
        out.append(f"prefill {n}: {n / best:6.1f} tok/s")
        if n == 2048:
            t0 = time.perf_counter()
            for s in range(32):
                p = n + s
                r.forward([1], [p], [p], [0, 1], [p + 1], [0, n_blocks], table, [0])
            out.append(f"decode at {n}: {(time.perf_counter() - t0) / 32 * 1e3:5.2f} ms/step")
    return "  ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from ossa._native import core

    core.set_num_threads(args.threads)
    bench = Path(os.environ.get("OSSA_HOME", Path.home() / ".cache" / "ossa")) / "bench"
    bench.mkdir(parents=True, exist_ok=True)
    files = {
        "capped  ": gemma2_file(bench / "gemma2-2b-4layers-softcap-Q8_0.gguf", True),
        "uncapped": gemma2_file(bench / "gemma2-2b-4layers-Q8_0.gguf", False),
    }
    print(f"threads {args.threads}, load {os.getloadavg()[0]:.2f}")
    for _ in range(2):
        for name, path in files.items():
            print(name, measure(path))


if __name__ == "__main__":
    main()
