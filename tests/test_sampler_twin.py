"""The C++ sampler and its NumPy twin (ossa.reference.sampler) agree bitwise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ossa.reference import rng as ref_rng
from ossa.reference import sampler as ref
from ossa.sampling_params import SamplingParams

core = pytest.importorskip("ossa._native").core


def run_core(logits: np.ndarray, rows: list[ref.RowInput], eos: list[int]) -> tuple:
    """Run the C++ sampler on the same rows (params rebuilt from the twin's fields)."""
    params = []
    for r in rows:
        p = core.SamplingParams()
        for name, value in vars(r.params).items():
            setattr(p, name, value)
        params.append(p)
    return core.Sampler().sample(
        logits,
        params,
        [list(r.prompt_token_ids) for r in rows],
        [list(r.output_token_ids) for r in rows],
        [r.seed for r in rows],
        [r.stream for r in rows],
        [r.step for r in rows],
    )


def random_params(g: np.random.Generator, vocab: int, eos: list[int]) -> SamplingParams:
    kw: dict = {}
    if g.random() < 0.15:
        kw["temperature"] = 0.0
    elif g.random() < 0.8:
        kw["temperature"] = float(g.choice([1e-5, 0.01, 0.3, 0.7, 1.0, 1.5, 3.0]))
    if g.random() < 0.5:
        kw["top_k"] = int(g.choice([1, 2, 5, 40, 300, vocab - 1, vocab, vocab + 7]))
    if g.random() < 0.5:
        kw["top_p"] = float(g.choice([1e-9, 0.1, 0.5, 0.9, 0.95, 0.999, 1.0]))
    if g.random() < 0.4:
        kw["min_p"] = float(g.choice([0.0, 1e-4, 0.05, 0.2, 0.9, 1.0]))
    if g.random() < 0.4:
        kw["repetition_penalty"] = float(g.uniform(0.5, 2.0))
    if g.random() < 0.4:
        kw["frequency_penalty"] = float(g.uniform(-2, 2))
    if g.random() < 0.4:
        kw["presence_penalty"] = float(g.uniform(-2, 2))
    if g.random() < 0.3:
        ids = g.choice(vocab, size=int(g.integers(1, 6)), replace=False)
        kw["logit_bias"] = {int(i): float(g.uniform(-100, 100)) for i in ids}
    if g.random() < 0.2:
        kw["allowed_token_ids"] = [int(i) for i in g.choice(vocab, size=int(g.integers(1, 20)))]
    if g.random() < 0.3:
        kw["min_tokens"] = int(g.integers(0, 8))
        kw["stop_token_ids"] = [int(i) for i in g.choice(vocab, size=2)]
        kw["ignore_eos"] = bool(g.random() < 0.3)
    if g.random() < 0.5:
        kw["logprobs"] = int(g.integers(0, 21))
    return SamplingParams(**kw)


def random_logits(g: np.random.Generator, n: int, vocab: int) -> np.ndarray:
    x = (g.standard_normal((n, vocab)) * g.choice([0.5, 3.0, 20.0], size=(n, 1))).astype(np.float32)
    # ties, exact duplicates of the max and masked entries are the interesting cases
    x[g.random((n, vocab)) < 0.05] = np.float32(1.25)
    x[g.random((n, vocab)) < 0.05] = -np.inf
    return x


def assert_same(logits: np.ndarray, rows: list[ref.RowInput], eos: list[int]) -> None:
    tokens, logprobs, top_ids, top_lps, n_top = run_core(logits, rows, eos)
    want = ref.sample(logits, rows)
    for r, w in enumerate(want):
        assert tokens[r] == w.token, (r, rows[r])
        if math.isnan(w.logprob):
            assert math.isnan(logprobs[r])
        else:
            assert np.float32(logprobs[r]).tobytes() == np.float32(w.logprob).tobytes(), r
        assert n_top[r] == len(w.top_ids)
        assert list(top_ids[r, : n_top[r]]) == w.top_ids
        assert np.array_equal(top_lps[r, : n_top[r]], np.asarray(w.top_logprobs, dtype=np.float32))


@pytest.mark.parametrize("vocab", [1, 7, 1000, 3000])
def test_twin_random_mixes(vocab: int) -> None:
    g = np.random.default_rng(vocab)
    eos = [0] if vocab > 1 else []
    n = 600 if vocab <= 1000 else 200
    logits = random_logits(g, n, vocab)
    if vocab > 1:
        logits[:, 0] = np.where(np.isneginf(logits[:, 0]), 0.5, logits[:, 0])
    rows = []
    for _ in range(n):
        sp = random_params(g, vocab, eos) if vocab > 1 else SamplingParams(logprobs=int(g.integers(0, 3)))
        prompt = [int(t) for t in g.integers(0, vocab, size=int(g.integers(0, 30)))]
        output = [int(t) for t in g.integers(0, vocab, size=int(g.integers(0, 30)))]
        bad_words: list[list[int]] = []  # token sequences; half end the output (so they mask)
        for _ in range(int(g.integers(1, 4)) if vocab > 1 and g.random() < 0.3 else 0):
            k = int(g.integers(0, 3))
            head = output[len(output) - k :] if k and g.random() < 0.5 and len(output) >= k else []
            head = head or [int(t) for t in g.integers(0, vocab, size=k)]
            bad_words.append(head + [int(g.integers(0, vocab))])
        rows.append(
            ref.RowInput(
                sp.to_reference(eos, bad_words),
                prompt,
                output,
                seed=int(g.integers(0, 2**63)),
                stream=int(g.integers(0, 4)),
                step=len(output),
            )
        )
    # a row may end up fully masked: both sides must then refuse it the same way
    good = []
    for i, r in enumerate(rows):
        try:
            ref.sample_row(i, logits[i], r)
            good.append(i)
        except ValueError:
            with pytest.raises(ValueError, match="masked|-inf"):
                run_core(logits[i : i + 1], [r], eos)
    assert len(good) > n * 0.9
    assert_same(logits[good], [rows[i] for i in good], eos)


def test_twin_large_vocab_no_truncation() -> None:
    """The chunked whole-vocabulary draw (no top-k) over a real vocabulary size."""
    g = np.random.default_rng(7)
    vocab = 49152
    logits = (g.standard_normal((24, vocab)) * 4).astype(np.float32)
    rows = []
    for i in range(24):
        sp = SamplingParams(temperature=[0.5, 1.0, 2.0][i % 3], top_p=[1.0, 0.9][i % 2], logprobs=5)
        rows.append(ref.RowInput(sp.to_reference(), seed=1234 + i, step=i))
    assert_same(logits, rows, [])


def test_exp_ref_bitwise() -> None:
    z = np.concatenate(
        [-np.logspace(-12, 3.2, 20000), np.linspace(-750, 0, 20001), [-np.inf, -708.0, -708.0001, -0.0]]
    )
    assert np.array_equal(core.exp_ref(z).view(np.int64), ref.exp_ref(z).view(np.int64))
    ok = z > -700
    assert np.allclose(ref.exp_ref(z[ok]), np.exp(z[ok]), rtol=5e-10, atol=0)


def test_rng_stream_matches() -> None:
    g = np.random.default_rng(3)
    for _ in range(500):
        seed, stream, step = (int(v) for v in g.integers(0, 2**64, size=3, dtype=np.uint64))
        assert core.philox_uniform(seed, stream, step) == ref_rng.philox_uniform(seed, stream, step)
        ctr = [int(v) for v in g.integers(0, 2**32, size=4)]
        key = [int(v) for v in g.integers(0, 2**32, size=2)]
        assert tuple(core.philox4x32_10(ctr, key)) == ref_rng.philox4x32_10(ctr, key)


def test_prompt_logprobs_match() -> None:
    g = np.random.default_rng(11)
    logits = random_logits(g, 50, 500)
    logits[:, 3] = 2.0  # keep every row with a finite entry
    tokens = [int(t) for t in g.integers(0, 500, size=50)]
    got = core.Sampler().logprobs(logits, tokens, 7)
    want = ref.logprobs(logits, tokens, 7)
    for r, w in enumerate(want):
        assert np.float32(got[1][r]).tobytes() == np.float32(w.logprob).tobytes()
        assert list(got[2][r, :7]) == w.top_ids
        assert np.array_equal(got[3][r, :7], np.asarray(w.top_logprobs, dtype=np.float32))


@pytest.mark.parametrize("scale", [0.05, 0.5, 3.0, 20.0])
def test_twin_whole_vocab_top_p_paths(scale: float) -> None:
    """Top-p without top-k over a real vocabulary: candidate sets from a handful to the whole
    vocabulary (the coarse bounds, the fine histogram, the radix sort of more than 64 keys), with
    duplicated values and signed zeros at the top so ties must fall back on the lowest id."""
    g = np.random.default_rng(int(scale * 100))
    vocab, n = 49152, 16
    logits = (g.standard_normal((n, vocab)) * scale).astype(np.float32)
    logits[:, 100:4000:7] = logits[:, 50:51]  # many exact ties of one mid-ranked value
    logits[::2] -= logits[::2].max(axis=1, keepdims=True)  # the top entries are zeros
    logits[::2, 9] = 0.0
    logits[::2, 3] = -0.0
    logits[::4, 20000:] = -np.inf
    rows = []
    for i in range(n):
        sp = SamplingParams(
            temperature=float(g.choice([0.3, 1.0, 2.5])),
            top_p=float(g.choice([0.05, 0.5, 0.9, 0.999, 0.999999])),
            min_p=float(g.choice([0.0, 0.01])),
            logprobs=int(g.integers(0, 3)),
        )
        rows.append(ref.RowInput(sp.to_reference(), seed=99 + i, step=i))
    assert_same(logits, rows, [])


def test_twin_greedy_ties_and_signed_zeros() -> None:
    """Greedy is an argmax with the lowest id on ties; -0.0 and +0.0 tie."""
    vocab = 5000
    logits = np.full((4, vocab), -3.0, dtype=np.float32)
    logits[0, [4000, 17, 2500]] = 1.5
    logits[1, 4001] = 0.0
    logits[1, 4000] = -0.0
    logits[1, :3000] = -np.inf
    logits[2, vocab - 1] = 9.0  # the max in the scalar tail after the vector blocks
    logits[3, 0] = 9.0
    rows = [ref.RowInput(SamplingParams(temperature=0.0).to_reference(), seed=i) for i in range(4)]
    tokens = run_core(logits, rows, [])[0]
    assert list(tokens) == [17, 4000, vocab - 1, 0]
    assert_same(logits, rows, [])


@pytest.mark.parametrize("penalty", [1.1754943508222875e-38, 1e-30, 1e-3, 1e3, 1e30, 3.4028234663852886e38])
def test_twin_extreme_repetition_penalty(penalty: float) -> None:
    """A penalty at either end of float32's range pushes logits to the finite limits, never to inf
    (whose weights would be NaN): both sides sample the same finite distribution."""
    g = np.random.default_rng(11)
    vocab = 500
    logits = random_logits(g, 40, vocab)
    rows = []
    for i in range(40):
        sp = SamplingParams(temperature=[0.0, 0.7, 1.5][i % 3], top_p=[1.0, 0.9][i % 2],
                            top_k=[-1, 50][(i // 2) % 2], repetition_penalty=penalty, logprobs=3)  # fmt: skip
        history = [int(t) for t in g.integers(0, vocab, size=40)]
        rows.append(ref.RowInput(sp.to_reference(), history[:20], history[20:], seed=i, step=20))
    got = ref.sample(logits, rows)
    assert all(0 <= w.token < vocab for w in got)
    assert_same(logits, rows, [])


@pytest.mark.parametrize("penalty", [5e-324, 1e-39, 0.0, 3.5e38, math.inf, math.nan])
def test_repetition_penalty_outside_float32_refused(penalty: float) -> None:
    with pytest.raises(ValueError, match="repetition_penalty"):
        SamplingParams(repetition_penalty=penalty)
    p = core.SamplingParams()
    p.repetition_penalty = penalty
    with pytest.raises(ValueError, match="repetition_penalty"):
        core.Sampler().sample(np.zeros((1, 8), np.float32), [p], [[]], [[1]], [0], [0], [0])
