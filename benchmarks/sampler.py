"""Time one sampler step (one token per row) for a batch of logits rows with mixed parameters.

C++ sampler vs its bitwise twin (ossa.reference.sampler) vs a vectorised NumPy sampler (the usual
batched recipe: penalties by scatter, argpartition for top-k, a sort for top-p, searchsorted draw).

    OSSA_CORE_DIR=build/sampler/csrc PYTHONPATH=src python benchmarks/sampler.py [--quick]
        [--logits-core build/dev/csrc] [--model PATH]

Two kinds of logits: "normal" (random normal * 3, a flat worst case for top-p) and "peaked" (real
rows of the default model: ``ossa.load_model(path).logits(ids)`` over a paragraph of text, vocab
49,152 only). The peaked rows need a core with the model and tokenizer components; when the core
under test has only util;sampling, --logits-core names a full build that computes them in a
subprocess. Times are the best of the repetitions (the machine may be shared). "C++ cpu" is the
process CPU time of the C++ call (all threads, OpenMP spin-waits included): on a busy machine a
parallel region's wall time is mostly waiting for the other thread to be scheduled.

The C++ sampler should cost under 5% of a decode step of the default model at batch 64: the last
column prints the decode-step time that would make it exactly 5% (20x the C++ time).
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

from ossa._native import core
from ossa.reference import sampler as ref
from ossa.sampling_params import SamplingParams

MIXES = [
    SamplingParams(temperature=0.0),
    SamplingParams(temperature=0.7, top_p=0.9),
    SamplingParams(temperature=0.8, top_k=50, logprobs=5),
    SamplingParams(temperature=1.0, min_p=0.05),
    SamplingParams(temperature=0.9, top_p=0.95, repetition_penalty=1.1, frequency_penalty=0.2),
    SamplingParams(temperature=1.0),
]


TEXT = (
    "The history of the city begins in the early Middle Ages, when a small settlement of fishermen and"
    " traders grew around the harbour. Over the following centuries the town became a busy port, and its"
    " merchants built warehouses, churches and a market hall that still stands in the old square today."
    " Visitors can walk along the walls, eat fresh fish by the water and take a boat to the islands."
)

_LOGITS_SCRIPT = """
import sys, numpy as np
from ossa.models import load_model, resolve
from ossa.tokenizer import Tokenizer
path = resolve(sys.argv[1] or None)
ids = Tokenizer.from_file(path).encode(sys.argv[2])
np.save(sys.argv[3], load_model(path).logits(ids))
"""


def peaked_logits(model: str | None, logits_core: str | None) -> np.ndarray:
    """Real logits rows of the default model over TEXT (one row per prompt position)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.npy")
        env = dict(os.environ)
        if logits_core:
            env["OSSA_CORE_DIR"] = logits_core
        subprocess.run([sys.executable, "-c", _LOGITS_SCRIPT, model or "", TEXT, out], env=env, check=True)
        return np.load(out)


def make_batch(
    batch: int, vocab: int, seed: int = 0, rows: np.ndarray | None = None
) -> tuple[np.ndarray, list, list[list[int]]]:
    g = np.random.default_rng(seed)
    if rows is None:
        logits = (g.standard_normal((batch, vocab)) * 3).astype(np.float32)
    else:
        logits = np.ascontiguousarray(rows[np.arange(batch) % rows.shape[0]], dtype=np.float32)
    params = [MIXES[i % len(MIXES)] for i in range(batch)]
    history = [[int(t) for t in g.integers(0, vocab, size=200)] for _ in range(batch)]
    return logits, params, history


def numpy_vectorised(
    logits: np.ndarray, params: list[SamplingParams], history: list[list[int]]
) -> np.ndarray:
    """A batched NumPy sampler, as one would write it without per-row control flow (not bitwise)."""
    b, v = logits.shape
    x = logits.astype(np.float32, copy=True)
    rows = np.repeat(np.arange(b), [len(h) for h in history])
    cols = np.concatenate([np.asarray(h) for h in history])
    rep = np.array([p.repetition_penalty for p in params], dtype=np.float32)[:, None]
    seen = np.zeros((b, v), dtype=bool)
    seen[rows, cols] = True
    x = np.where(seen, np.where(x > 0, x / rep, x * rep), x)
    counts = np.zeros((b, v), dtype=np.float32)
    np.add.at(counts, (rows, cols), 1.0)
    freq = np.array([p.frequency_penalty for p in params], dtype=np.float32)[:, None]
    x -= freq * counts
    temp = np.array([p.temperature for p in params], dtype=np.float32)[:, None]
    greedy = temp[:, 0] < 1e-5
    x = x / np.where(temp < 1e-5, 1.0, temp)
    top_k = np.array([p.top_k if p.top_k > 0 else v for p in params])
    if (top_k < v).any():
        kth = np.partition(x, v - top_k, axis=1)[np.arange(b), v - top_k][:, None]
        x = np.where(x < kth, -np.inf, x)
    x -= x.max(axis=1, keepdims=True)
    probs = np.exp(x)
    probs /= probs.sum(axis=1, keepdims=True)
    top_p = np.array([p.top_p for p in params])[:, None]
    if (top_p < 1).any():
        order = np.argsort(-probs, axis=1)
        sorted_p = np.take_along_axis(probs, order, axis=1)
        before = np.cumsum(sorted_p, axis=1) - sorted_p
        drop = before >= top_p
        np.put_along_axis(sorted_p, order, np.where(drop, 0.0, sorted_p), axis=1)
        probs = np.zeros_like(probs)
        np.put_along_axis(probs, order, np.where(drop, 0.0, np.take_along_axis(sorted_p, order, axis=1)), 1)
    min_p = np.array([p.min_p for p in params])[:, None]
    probs = np.where(probs >= min_p * probs.max(axis=1, keepdims=True), probs, 0.0)
    cdf = np.cumsum(probs, axis=1)
    u = np.random.default_rng(0).random(b) * cdf[:, -1]
    tokens = np.array([np.searchsorted(cdf[i], u[i], side="right") for i in range(b)])
    tokens = np.minimum(tokens, v - 1)
    tokens[greedy] = np.argmax(logits[greedy], axis=1)
    if any(p.logprobs is not None for p in params):
        shifted = logits - logits.max(axis=1, keepdims=True)
        _ = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return tokens


def best_time(fn: Callable[[], object], reps: int, clock: Callable[[], float] = time.perf_counter) -> float:
    fn()  # warm-up (allocates scratch)
    times = []
    for _ in range(reps):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, skip the twin at batch 64")
    ap.add_argument("--logits-core", help="a full core build (OSSA_CORE_DIR) to compute the peaked logits")
    ap.add_argument("--model", help="model for the peaked logits (default: the default model)")
    ap.add_argument("--no-peaked", action="store_true", help="random normal logits only")
    args = ap.parse_args()
    peaked = None if args.no_peaked else peaked_logits(args.model, args.logits_core)
    sampler = core.Sampler()
    print(f"threads: {core.get_num_threads()} (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')})")
    print(f"mixed parameters cycling over {len(MIXES)} settings; history of 200 tokens per row")
    header = f"{'logits':>6} {'vocab':>7} {'batch':>5} | {'C++ us':>9} {'C++ cpu':>9}"
    header += f" {'twin us':>11} {'numpy us':>10} |"
    header += f" {'twin/C++':>8} {'numpy/C++':>9} | {'step for 5%':>11}"
    print(header)
    print("-" * len(header))
    cases = [("normal", v, b, None) for v in (49152, 151936) for b in (1, 16, 64)]
    if peaked is not None:
        cases += [("peaked", peaked.shape[1], b, peaked) for b in (1, 16, 64)]
    for kind, vocab, batch, rows in cases:
        logits, params, history = make_batch(batch, vocab, rows=rows)
        core_params = [p.to_core(eos_token_ids=[0]) for p in params]
        ref_rows = [
            ref.RowInput(p.to_reference([0]), h[:100], h[100:], seed=i, stream=0, step=100)
            for i, (p, h) in enumerate(zip(params, history, strict=True))
        ]
        prompts, outputs = [h[:100] for h in history], [h[100:] for h in history]
        seeds, streams, steps = list(range(batch)), [0] * batch, [100] * batch

        run_core = functools.partial(
            sampler.sample, logits, core_params, prompts, outputs, seeds, streams, steps
        )
        got = run_core()[0]
        want = [r.token for r in ref.sample(logits[: min(batch, 4)], ref_rows[: min(batch, 4)])]
        assert list(got[: len(want)]) == want, "C++ and twin disagree"
        reps = 5 if args.quick else 20
        t_core = best_time(run_core, reps)
        cpu_core = best_time(run_core, reps, time.process_time)
        if args.quick and batch == 64:
            t_twin = float("nan")
        else:
            t_twin = best_time(functools.partial(ref.sample, logits, ref_rows), 1 if batch > 1 else 3)
        t_np = best_time(functools.partial(numpy_vectorised, logits, params, history), 3)
        print(
            f"{kind:>6} {vocab:>7} {batch:>5} |"
            f" {t_core * 1e6:>9.0f} {cpu_core * 1e6:>9.0f} {t_twin * 1e6:>11.0f} {t_np * 1e6:>10.0f} |"
            f" {t_twin / t_core:>8.1f} {t_np / t_core:>9.1f} | {20 * t_core * 1e3:>8.1f} ms"
        )
    print("'step for 5%': a decode step at least this long keeps the C++ sampler under 5% of it.")


if __name__ == "__main__":
    main()
