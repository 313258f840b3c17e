"""Tokenizer encode throughput: ossa vs Hugging Face tokenizers vs tiktoken, same text, same vocabulary.

Text: Python sources of the installed transformers package (code, docstrings, English prose), in sorted
file order, cut to --mb megabytes. GPT-2's vocabulary comes from openai-whisper's gpt2.tiktoken
(scripts/make_gpt2_tokenizer.py); tiktoken runs the same ranks with GPT-2's pattern. The ids of all
three are checked equal before timing. "cold" is the first encode on a fresh tokenizer (empty word
caches), "warm" the best of --repeat further runs.

    python benchmarks/tokenizer.py [--mb 4] [--threads N]
"""

from __future__ import annotations

import argparse
import glob
import os
import pathlib
import sys
import time
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

import make_gpt2_tokenizer  # noqa: E402

from ossa.tokenizer import Tokenizer  # noqa: E402

GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def corpus(mb: float) -> str:
    import transformers

    files = sorted(
        glob.glob(os.path.join(os.path.dirname(transformers.__file__), "**", "*.py"), recursive=True)
    )
    parts, size = [], 0
    for f in files:
        text = pathlib.Path(f).read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        size += len(text.encode())
        if size >= mb * 1e6:
            break
    # No special-token text: tiktoken's encode_ordinary would spell it out, HF and ossa match it.
    return "".join(parts).replace("<|endoftext|>", "<endoftext>")[: int(mb * 1e6)]


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    fn()
    cold = time.perf_counter() - t0
    warm = min(_once(fn) for _ in range(repeat))
    return cold, warm


def _once(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--smollm2", default=None, help="GGUF path (default: ossa.models.resolve('smollm2-135m'))"
    )
    args = ap.parse_args()

    import tiktoken
    import tokenizers

    assets = make_gpt2_tokenizer  # GPT-2's vocabulary, offline
    folders = assets.write_tokenizers(os.path.join(assets.cache_dir(), "hf"))
    text = corpus(args.mb)
    nbytes = len(text.encode())
    docs = [text[i : i + 4096] for i in range(0, len(text), 4096)]
    ranks = assets.load_tiktoken(assets.gpt2_tiktoken_path())
    tk = tiktoken.Encoding(
        "gpt2", pat_str=GPT2_PAT, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256}
    )
    hf = tokenizers.Tokenizer.from_file(os.path.join(folders["gpt2"], "tokenizer.json"))
    ossa = Tokenizer.from_file(folders["gpt2"])
    ids = ossa.encode(text, add_special_tokens=False)
    assert ids == hf.encode(text, add_special_tokens=False).ids == tk.encode_ordinary(text), "ids differ"

    rows: list[tuple[str, str, float, float]] = []

    def bench(vocab: str, name: str, fn: Callable[[], object]) -> None:
        cold, warm = timed(fn, args.repeat)
        rows.append((vocab, name, nbytes / cold / 1e6, nbytes / warm / 1e6))

    fresh = Tokenizer.from_file(folders["gpt2"])
    bench("gpt2", "ossa 1 thread", lambda: fresh.encode(text, add_special_tokens=False))
    bench("gpt2", "HF tokenizers 1 thread", lambda: hf.encode(text, add_special_tokens=False))
    bench("gpt2", "tiktoken 1 thread", lambda: tk.encode_ordinary(text))
    fresh_b = Tokenizer.from_file(folders["gpt2"])
    bench(
        "gpt2",
        f"ossa batch ({args.threads} thr)",
        lambda: fresh_b.encode_batch(docs, add_special_tokens=False),
    )
    bench("gpt2", "HF batch (rayon)", lambda: hf.encode_batch(docs, add_special_tokens=False))
    bench(
        "gpt2",
        f"tiktoken batch ({args.threads} thr)",
        lambda: tk.encode_ordinary_batch(docs, num_threads=args.threads),
    )

    if args.smollm2 is None:
        from ossa import models

        args.smollm2 = models.resolve("smollm2-135m")
    from transformers import AutoTokenizer

    folder, file = os.path.split(args.smollm2)
    hf_smol = AutoTokenizer.from_pretrained(folder, gguf_file=file).backend_tokenizer
    smol = Tokenizer.from_file(args.smollm2)
    assert smol.encode(text) == hf_smol.encode(text).ids, "SmolLM2 ids differ"
    smol = Tokenizer.from_file(args.smollm2)
    bench("smollm2", "ossa 1 thread", lambda: smol.encode(text))
    bench("smollm2", "HF tokenizers 1 thread", lambda: hf_smol.encode(text))

    print(f"encode throughput, {nbytes / 1e6:.1f} MB of Python source (ids verified identical), MB/s")
    print(f"{'vocab':8} {'tokenizer':26} {'cold':>8} {'warm':>8} {'warm vs HF':>11} {'warm vs tiktoken':>17}")
    ref = {(v, n.split()[0] + (" batch" if "batch" in n else "")): w for v, n, _, w in rows}
    for v, n, c, w in rows:
        kind = " batch" if "batch" in n else ""
        hf_w = ref.get((v, "HF" + kind))
        tk_w = ref.get((v, "tiktoken" + kind))
        vs_hf = f"{w / hf_w:.2f}x" if hf_w else ""
        vs_tk = f"{w / tk_w:.2f}x" if tk_w else ""
        print(f"{v:8} {n:26} {c:8.2f} {w:8.2f} {vs_hf:>11} {vs_tk:>17}")

    # Linearity: one long SentencePiece-style piece needs no quadratic rescans.
    print("\nscaling (ossa, GPT-2 vocabulary, 1 thread, cold):")
    for mb in (1, 4):
        t = (text * (1 + int(mb * 1e6) // len(text)))[: int(mb * 1e6)]
        tok = Tokenizer.from_file(folders["gpt2"])
        print(f"  {mb} MB: {_once(lambda t=t, tok=tok: tok.encode(t)):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
