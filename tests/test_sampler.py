"""The sampler chain, stage by stage: exact supports, seeded chi-square, logprobs, edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ossa.reference import sampler as ref
from ossa.sampling_params import SamplingParams

core = pytest.importorskip("ossa._native").core

NEG_INF = -math.inf
BASE = [2.0, 1.0, 0.5, 0.5, -1.0, NEG_INF]  # ids 2 and 3 tie; id 5 is masked
EOS = [0]


def draw(logits: list[float] | np.ndarray, sp: SamplingParams, n: int, **row) -> np.ndarray:
    """n draws of the C++ sampler on one logits row, seeds 0..n-1."""
    x = np.tile(np.asarray(logits, dtype=np.float32), (n, 1))
    p = sp.to_core(EOS)
    prompt, output = row.get("prompt", []), row.get("output", [])
    tokens, *_ = core.Sampler().sample(
        x, [p] * n, [prompt] * n, [output] * n, list(range(n)), [0] * n, [len(output)] * n
    )
    return tokens


def draw_ref(logits: list[float], sp: SamplingParams, n: int, **row) -> list[int]:
    x = np.tile(np.asarray(logits, dtype=np.float32), (n, 1))
    prompt, output = row.get("prompt", []), row.get("output", [])
    rows = [ref.RowInput(sp.to_reference(EOS), prompt, output, seed=i, step=len(output)) for i in range(n)]
    return [r.token for r in ref.sample(x, rows)]


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X ~ chi-square(df), closed form for integer df."""
    h = x / 2.0
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for i in range(1, df // 2):
            term *= h / i
            total += term
        return math.exp(-h) * total
    total = math.erfc(math.sqrt(h))
    term = math.sqrt(h) * math.exp(-h) * 2.0 / math.sqrt(math.pi)
    for i in range(1, (df + 1) // 2):
        total += term
        term *= h / (i + 0.5)
    return total


def expected(logits: list[float], support: list[int], temperature: float = 1.0) -> np.ndarray:
    """The tempered softmax restricted to `support`, in float64 (the oracle)."""
    p = np.zeros(len(logits))
    for i in support:
        p[i] = math.exp(logits[i] / temperature)
    return p / p.sum()


# (name, params, row state, processed logits after the penalty stages, expected support)
# processed logits are written as the arithmetic each stage defines.
CASES = [
    ("plain", {}, {}, BASE, [0, 1, 2, 3, 4]),
    ("temperature", {"temperature": 0.5}, {}, BASE, [0, 1, 2, 3, 4]),
    ("top_k", {"top_k": 2}, {}, BASE, [0, 1]),
    ("top_k_tie_lowest_id", {"top_k": 3}, {}, BASE, [0, 1, 2]),
    ("top_p", {"top_p": 0.6}, {}, BASE, [0, 1]),
    ("min_p", {"min_p": 0.2}, {}, BASE, [0, 1, 2, 3]),
    ("top_k_top_p", {"top_k": 4, "top_p": 0.8}, {}, BASE, [0, 1, 2]),
    ("logit_bias", {"logit_bias": {4: 3.5}}, {}, [2.0, 1.0, 0.5, 0.5, 2.5, NEG_INF], [0, 1, 2, 3, 4]),
    ("allowed", {"allowed_token_ids": [2, 3, 5]}, {}, BASE, [2, 3]),
    (
        "min_tokens",
        {"min_tokens": 3, "stop_token_ids": [1]},
        {"output": [4]},
        BASE,
        [2, 3, 4],
    ),
    ("min_tokens_reached", {"min_tokens": 1, "stop_token_ids": [1]}, {"output": [4]}, BASE, [0, 1, 2, 3, 4]),
    (
        "repetition",
        {"repetition_penalty": 2.0},
        {"prompt": [0, 4, 0], "output": [4]},
        [2.0 / 2, 1.0, 0.5, 0.5, -1.0 * 2, NEG_INF],
        [0, 1, 2, 3, 4],
    ),
    (
        "frequency_presence",
        {"frequency_penalty": 0.5, "presence_penalty": 0.25},
        {"prompt": [3], "output": [1, 1, 2]},
        [2.0, 1.0 - 0.5 * 2 - 0.25, 0.5 - 0.5 - 0.25, 0.5, -1.0, NEG_INF],
        [0, 1, 2, 3, 4],
    ),
]


@pytest.mark.parametrize("name,kw,row,processed,support", CASES, ids=[c[0] for c in CASES])
def test_stage_distribution(name: str, kw: dict, row: dict, processed: list, support: list) -> None:
    sp = SamplingParams(**kw)
    n = 6000
    tokens = draw(BASE, sp, n, **row)
    counts = np.bincount(tokens, minlength=len(BASE))
    # exact: nothing outside the support, everything in it reachable
    assert set(np.flatnonzero(counts)) == set(support), counts
    p = expected(processed, support, sp.temperature)
    exp_counts = p[support] * n
    stat = float(((counts[support] - exp_counts) ** 2 / exp_counts).sum())
    if len(support) > 1:
        assert chi2_sf(stat, len(support) - 1) > 1e-3, (counts, exp_counts)
    # the twin draws the same tokens
    assert draw_ref(BASE, sp, 200, **row) == list(tokens[:200])
    # greedy over the same processed logits: the largest, lowest id on ties
    greedy = SamplingParams(**{**kw, "temperature": 0.0})
    if not any(k in kw for k in ("top_k", "top_p", "min_p")):
        masked = [v if i in support else NEG_INF for i, v in enumerate(processed)]
        assert set(draw(BASE, greedy, 4, **row)) == {int(np.argmax(masked))}


def test_chi2_sf_against_known_quantiles() -> None:
    # the closed form agrees with the survival function torch computes via the incomplete gamma
    for df in range(1, 8):
        for x in (0.5, 3.0, 11.0):
            a, h = torch.tensor(df / 2.0, dtype=torch.float64), torch.tensor(x / 2.0, dtype=torch.float64)
            want = float(torch.special.gammaincc(a, h))
            assert chi2_sf(x, df) == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_greedy_tie_lowest_id() -> None:
    assert set(draw([1.0, 3.0, 3.0, 2.0], SamplingParams(temperature=0.0), 3)) == {1}
    assert set(draw([1.0, 3.0, 3.0, 2.0], SamplingParams(top_k=1), 50)) == {1}


def test_all_inf_but_one() -> None:
    x = [NEG_INF] * 7
    x[4] = -3.0
    for kw in ({}, {"temperature": 0.0}, {"top_p": 0.3, "top_k": 3}, {"min_p": 0.5, "temperature": 2.0}):
        sp = SamplingParams(logprobs=2, **kw)
        logits = np.tile(np.asarray(x, dtype=np.float32), (5, 1))
        tokens, lps, top_ids, top_lps, n_top = core.Sampler().sample(
            logits, [sp.to_core()] * 5, [[]] * 5, [[]] * 5, list(range(5)), [0] * 5, [0] * 5
        )
        assert set(tokens) == {4} and set(lps) == {0.0}
        assert list(top_ids[0, :2]) == [4, 0] and top_lps[0, 1] == NEG_INF


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nan_or_inf_logits_raise(bad: float) -> None:
    x = np.zeros((2, 10), dtype=np.float32)
    x[1, 6] = bad
    sp = SamplingParams().to_core()
    what = "NaN" if math.isnan(bad) else r"\+inf"
    with pytest.raises(ValueError, match=f"row 1: logit of token 6 is {what}"):
        core.Sampler().sample(x, [sp, sp], [[], []], [[], []], [0, 0], [0, 0], [0, 0])
    rows = [ref.RowInput(SamplingParams().to_reference())] * 2
    with pytest.raises(ValueError, match=f"row 1: logit of token 6 is {what}"):
        ref.sample(x, rows)
    with pytest.raises(ValueError, match=what):
        core.Sampler().logprobs(x, [0, 0], 2)


def test_fully_masked_row_raises() -> None:
    sp = SamplingParams(allowed_token_ids=[0], min_tokens=2).to_core(EOS)
    x = np.zeros((1, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="every token is masked"):
        core.Sampler().sample(x, [sp], [[]], [[]], [0], [0], [0])


def test_top_k_larger_than_vocab_is_off() -> None:
    g = np.random.default_rng(0)
    x = g.standard_normal(50).astype(np.float32)
    off = draw(x, SamplingParams(), 300)
    for k in (50, 51, 10**6):
        assert np.array_equal(draw(x, SamplingParams(top_k=k), 300), off)


def test_tiny_top_p_and_tiny_temperature_act_greedy() -> None:
    g = np.random.default_rng(1)
    for _ in range(20):
        x = (g.standard_normal(300) * 3).astype(np.float32)
        best = int(np.argmax(x))
        for kw in ({"top_p": 1e-9}, {"temperature": 1e-5}, {"temperature": 1e-4}, {"temperature": 1e-9}):
            assert set(draw(x, SamplingParams(**kw), 20)) == {best}, kw


def test_seed_stream_and_batch_independence() -> None:
    g = np.random.default_rng(2)
    vocab = 5000
    x = (g.standard_normal((64, vocab)) * 2).astype(np.float32)
    mixes = [SamplingParams(top_p=0.9), SamplingParams(top_k=50, temperature=0.7), SamplingParams(min_p=0.01)]
    params = [mixes[i % 3].to_core() for i in range(64)]
    args = ([[1, 2, 3]] * 64, [[4, 5]] * 64, [7] * 64, list(range(64)), [2] * 64)
    sampler = core.Sampler()
    core.set_num_threads(2)
    full = sampler.sample(x, params, *args)
    core.set_num_threads(1)
    try:
        single = sampler.sample(x, params, *args)
    finally:
        core.set_num_threads(2)
    for a, b in zip(full, single, strict=True):
        assert np.array_equal(a, b, equal_nan=True)
    # row 9 alone, or in a different batch order, draws the same token
    for r in (9, 40):
        alone = sampler.sample(x[r : r + 1], [params[r]], [[1, 2, 3]], [[4, 5]], [7], [r], [2])
        assert alone[0][0] == full[0][r]
    # distinct streams under one seed give distinct draws
    assert len(set(full[0])) > 32


def test_logprobs_are_raw_log_softmax() -> None:
    g = np.random.default_rng(4)
    x = (g.standard_normal((8, 3000)) * 5).astype(np.float32)
    want = torch.log_softmax(torch.from_numpy(x).double(), dim=-1).numpy()
    sp = SamplingParams(temperature=0.3, top_k=5, repetition_penalty=1.7, logit_bias={3: 50.0}, logprobs=20)
    tokens, lps, top_ids, top_lps, n_top = core.Sampler().sample(
        x, [sp.to_core()] * 8, [[3, 4]] * 8, [[9]] * 8, list(range(8)), [0] * 8, [1] * 8
    )
    rows = np.arange(8)
    assert set(n_top) == {20}
    np.testing.assert_allclose(lps, want[rows, tokens], rtol=0, atol=2e-6)
    order = np.argsort(-x, axis=1, kind="stable")[:, :20]
    assert np.array_equal(top_ids, order)
    np.testing.assert_allclose(top_lps, np.take_along_axis(want, order, axis=1), rtol=0, atol=2e-6)
    # no logprobs asked: NaN and no alternatives
    none = core.Sampler().sample(x[:1], [SamplingParams().to_core()], [[]], [[]], [0], [0], [0])
    assert math.isnan(none[1][0]) and none[4][0] == 0
    # prompt logprobs go through the same routine
    got = core.Sampler().logprobs(x, [int(t) for t in tokens], 3)
    assert np.array_equal(got[1], lps) and np.array_equal(got[2][:, :3], top_ids[:, :3])


def test_core_rejects_bad_params_and_shapes() -> None:
    x = np.zeros((1, 10), dtype=np.float32)
    p = core.SamplingParams()
    p.top_p = 0.0
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        core.Sampler().sample(x, [p], [[]], [[]], [0], [0], [0])
    p = core.SamplingParams()
    p.logit_bias = [(10, 1.0)]
    with pytest.raises(ValueError, match="logit_bias holds token id 10"):
        core.Sampler().sample(x, [p], [[]], [[]], [0], [0], [0])
    p = core.SamplingParams()
    p.repetition_penalty = 1.5
    with pytest.raises(ValueError, match="token id 12"):
        core.Sampler().sample(x, [p], [[12]], [[]], [0], [0], [0])
    with pytest.raises(ValueError, match="one per logits row"):
        core.Sampler().sample(x, [core.SamplingParams()], [[]], [], [0], [0], [0])
    with pytest.raises(ValueError, match="prompt_logprobs"):
        core.Sampler().logprobs(x, [0], 21)
