"""Decode speed per weight byte across architectures, ossa only: a Gemma 3 1B-shaped random-weight
Q8_0 file (hidden 1152, 26 layers, 4 heads / 1 KV head of 256, ff 6912, vocabulary 262144, window 512;
written to $OSSA_HOME/bench on first use) beside a Llama file (default: scripts/make_bench_models.py's
llama-1b-Q8_0.gguf). A 128-token prompt, then 32 single-token steps, best of 3; prints tok/s and the
weight bytes read per second (every matrix once, the embedding when it is also the output).

    OSSA_CORE_DIR=build/x/csrc PYTHONPATH=src python benchmarks/arch_decode.py [--threads 2] [FILE ...]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np


def gemma_file(
    out: Path,
    arch: str,
    shape: tuple[int, int, int, int, int, int, int],
    context: int,
    theta: float,
    window: int,
    extra: dict[str, float] | None = None,
) -> str:
    """A random-weight Q8_0 GGUF of a Gemma 2/3 architecture at ``out`` (kept when it exists): ``shape``
    is (hidden, layers, heads, KV heads, head_dim, ff, vocabulary); four norms a layer, q/k norms for
    gemma3; ``extra`` float keys (e.g. gemma2.attn_logit_softcapping) written as they are."""
    if out.exists():
        return str(out)
    import gguf
    from gguf import GGMLQuantizationType as QT

    E, L, H, KV, HD, F, V = shape  # noqa: N806
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(out), arch)
    w.add_context_length(context)
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_rope_freq_base(theta)
    w.add_sliding_window(window)
    w.add_file_type(7)
    w.add_tokenizer_model("gpt2")
    for key, value in (extra or {}).items():
        w.add_float32(key, value)

    def mat(name: str, r: int, c: int) -> None:
        a = (rng.standard_normal((r, c), dtype=np.float32) / np.sqrt(c)).astype(np.float32)
        q = gguf.quants.quantize(a, QT.Q8_0)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=QT.Q8_0)

    def vec(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    mat("token_embd.weight", V, E)
    vec("output_norm.weight", E)
    for i in range(L):
        p = f"blk.{i}."
        for n in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            vec(p + n + ".weight", E)
        if arch == "gemma3":
            vec(p + "attn_q_norm.weight", HD)
            vec(p + "attn_k_norm.weight", HD)
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


def gemma3_file(out: Path) -> str:
    """Gemma 3 1B's shapes: hidden 1152, 26 layers, 4 heads / 1 KV head of 256, ff 6912, vocabulary
    262144, window 512."""
    return gemma_file(out, "gemma3", (1152, 26, 4, 1, 256, 6912, 262144), 32768, 1e6, 512)


def decode(path: str, n_prompt: int = 128, steps: int = 32) -> None:
    from ossa._native import core

    m = core.load_model(path)
    c = m.config
    nbytes = sum(
        t[4] for t in m.tensors() if t[2] > 1 and (not t[0].startswith("token_embd") or c["tied_embeddings"])
    )
    block = 16
    n_blocks = (n_prompt + steps) // block + 1
    table = list(range(n_blocks))
    best = float("inf")
    for _ in range(3):
        r = core.ModelRunner(m, n_blocks, block, n_prompt)
        ids = np.random.default_rng(0).integers(0, c["n_vocab"], n_prompt).tolist()
        pos = list(range(n_prompt))
        r.forward(ids, pos, pos, [0, n_prompt], [n_prompt], [0, n_blocks], table, [n_prompt - 1])
        t0 = time.perf_counter()
        for s in range(steps):
            p = n_prompt + s
            r.forward([1], [p], [p], [0, 1], [p + 1], [0, n_blocks], table, [0])
        best = min(best, (time.perf_counter() - t0) / steps)
    print(
        f"{c['arch']:7s} {Path(path).name:28s} weights/token {nbytes / 1e9:.3f} GB  "
        f"decode {1 / best:6.2f} tok/s  {nbytes / best / 1e9:6.2f} GB/s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    from ossa._native import core

    core.set_num_threads(args.threads)
    bench = Path(os.environ.get("OSSA_HOME", Path.home() / ".cache" / "ossa")) / "bench"
    bench.mkdir(parents=True, exist_ok=True)
    files = args.files or [gemma3_file(bench / "gemma3-1b-Q8_0.gguf"), str(bench / "llama-1b-Q8_0.gguf")]
    print(f"threads {args.threads}, load {os.getloadavg()[0]:.2f}")
    for f in files:
        decode(f)


if __name__ == "__main__":
    main()
