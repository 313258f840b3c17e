"""The sampler in NumPy: the twin of ``csrc/sampling/sampler.cpp``.

Same chain, same float32/float64 operations in the same order, same RNG stream, so it picks
bitwise the same tokens and logprobs as the C++ sampler on identical logits. The chain per row:

0. the row's ``token_mask`` (structured output): tokens whose bit is clear -> -inf
1. ``allowed_token_ids`` (all others -> -inf), then ``logit_bias`` (float32 add), then ``bad_words``
   (the last token of each word whose earlier tokens end the output -> -inf)
2. ``min_tokens``: while the output is shorter, stop ids and (unless ``ignore_eos``) eos ids -> -inf
3. repetition penalty on distinct prompt and output tokens (``x > 0 ? x / p : x * p``), then
   ``x -= frequency * count`` and ``x -= presence`` on output tokens (float32)
4. ``temperature < 1e-5``: greedy, the largest logit, lowest id on ties
5. weights ``w = exp_ref((x - max) * (1 / temperature))`` in float64; top-k by (logit desc, id asc);
   top-p keeps each token whose preceding mass in that order is ``< top_p * total``; min-p keeps
   ``w >= min_p``
6. ``u = philox_uniform(seed, stream, step)``; the first token whose cumulative weight exceeds
   ``u * total``.

Sums over the whole vocabulary go in chunks of 1024 ids of 8 lanes (lane = id % 8), lanes combined
0..7, chunks in order; sums over a candidate list go sequentially. ``np.cumsum`` gives exactly these
sequential orders. Logprobs are raw (vLLM's default): log_softmax of the unprocessed logits,
``float32((x - max) - log(Z))`` with ``log`` the C library's (``math.log``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ossa.reference.rng import philox_uniform

MAX_LOGPROBS = 20
GREEDY_TEMPERATURE = 1e-5
CHUNK = 1024
LANES = 8
F32_MAX = np.float32(np.finfo(np.float32).max)  # the largest finite logit
F32_MIN_NORMAL = float(np.finfo(np.float32).tiny)

_LOG2E = 1.4426950408889634
_SHIFTER = 6755399441055744.0  # 1.5 * 2**52
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_EXP_COEFFS = [1.0 / math.factorial(j) for j in range(9)]  # Taylor, degree 8


@dataclass
class SamplerParams:
    """Mirror of the C++ ``ossa::SamplingParams`` (what ``ossa.SamplingParams.sampler_fields`` gives)."""

    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None
    logit_bias: list[tuple[int, float]] = field(default_factory=list)
    allowed_token_ids: list[int] = field(default_factory=list)
    bad_words: list[list[int]] = field(default_factory=list)
    min_tokens: int = 0
    stop_token_ids: list[int] = field(default_factory=list)
    eos_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int = -1


@dataclass
class RowInput:
    """One row of a batch: parameters, the history the penalties need, and the RNG coordinates."""

    params: SamplerParams
    prompt_token_ids: Sequence[int] = ()
    output_token_ids: Sequence[int] = ()
    seed: int = 0
    stream: int = 0
    step: int = 0
    # Structured output: int32 words, token t allowed iff bit t % 32 of word t // 32 is set.
    token_mask: np.ndarray | None = None


@dataclass
class SampleResult:
    token: int
    logprob: float = math.nan  # raw logprob of token; NaN unless asked for
    top_ids: list[int] = field(default_factory=list)
    top_logprobs: list[float] = field(default_factory=list)


def exp_ref(z: np.ndarray) -> np.ndarray:
    """exp for z <= 0 exactly as the C++ sampler computes it; 0 below -708."""
    z = np.asarray(z, dtype=np.float64)
    zc = np.maximum(z, -708.0)
    t = zc * _LOG2E
    k = (t + _SHIFTER) - _SHIFTER
    r = (zc - k * _LN2_HI) - k * _LN2_LO
    p = np.full_like(r, _EXP_COEFFS[8])
    for c in reversed(_EXP_COEFFS[:8]):
        p = p * r + c
    scale = ((k.astype(np.int64) + 1023) << 52).view(np.float64)
    return np.where(z < -708.0, 0.0, p * scale)


def chunked_sum(w: np.ndarray) -> tuple[float, np.ndarray]:
    """Total and per-chunk sums of float64 weights in the sampler's chunk/lane order."""
    n_chunks = -(-w.size // CHUNK)
    padded = np.zeros(n_chunks * CHUNK)
    padded[: w.size] = w
    lanes = np.cumsum(padded.reshape(n_chunks, CHUNK // LANES, LANES), axis=1)[:, -1, :]
    chunk_sums = np.cumsum(lanes, axis=1)[:, -1]
    return float(np.cumsum(chunk_sums)[-1]), chunk_sums


def _draw_chunked(w: np.ndarray, chunk_sums: np.ndarray, total: float, u: float) -> int:
    target = u * total
    prefix = np.cumsum(chunk_sums)
    hits = np.flatnonzero(prefix > target)
    c = int(hits[0]) if hits.size else int(np.flatnonzero(chunk_sums > 0.0)[-1])
    before = float(prefix[c - 1]) if c > 0 else 0.0
    begin, end = c * CHUNK, min((c + 1) * CHUNK, w.size)
    acc = np.cumsum(np.concatenate([[before], w[begin:end]]))[1:]
    hits = np.flatnonzero(acc > target)
    if hits.size:
        return begin + int(hits[0])
    return begin + int(np.flatnonzero(w[begin:end] > 0.0)[-1])


def _draw_list(ids: np.ndarray, w: np.ndarray, u: float) -> int:
    acc = np.cumsum(w)
    target = u * float(acc[-1])
    hits = np.flatnonzero(acc > target)
    if hits.size:
        return int(ids[hits[0]])
    return int(ids[np.flatnonzero(w > 0.0)[-1]])


def _order(x: np.ndarray) -> np.ndarray:
    """Ids by (value desc, id asc)."""
    return np.argsort(-x, kind="stable")


def validate(p: SamplerParams, vocab: int) -> None:
    """Raise ValueError naming the first field out of range (same checks as the C++ sampler)."""

    def fail(name: str, rng: str, value: object) -> None:
        raise ValueError(f"SamplingParams.{name} must be {rng}, got {value}")

    if not (p.temperature >= 0.0) or math.isinf(p.temperature):
        fail("temperature", "finite and >= 0", p.temperature)
    if p.top_k < -1 or p.top_k == 0:
        fail("top_k", "-1 (off) or >= 1", p.top_k)
    if not (0.0 < p.top_p <= 1.0):
        fail("top_p", "in (0, 1]", p.top_p)
    if not (0.0 <= p.min_p <= 1.0):
        fail("min_p", "in [0, 1]", p.min_p)
    if not (F32_MIN_NORMAL <= p.repetition_penalty <= F32_MAX):  # applied in float32
        fail("repetition_penalty", "in [1.18e-38, 3.4e38] (a normal float32 > 0)", p.repetition_penalty)
    if not (-2.0 <= p.frequency_penalty <= 2.0):
        fail("frequency_penalty", "in [-2, 2]", p.frequency_penalty)
    if not (-2.0 <= p.presence_penalty <= 2.0):
        fail("presence_penalty", "in [-2, 2]", p.presence_penalty)
    if p.min_tokens < 0:
        fail("min_tokens", ">= 0", p.min_tokens)
    if p.logprobs < -1 or p.logprobs > MAX_LOGPROBS:
        fail("logprobs", f"None or in [0, {MAX_LOGPROBS}]", p.logprobs)
    lists = [("logit_bias", [i for i, _ in p.logit_bias]), ("allowed_token_ids", p.allowed_token_ids)]
    lists += [("stop_token_ids", p.stop_token_ids), ("eos_token_ids", p.eos_token_ids)]
    for name, ids in lists:
        for i in ids:
            if not 0 <= i < vocab:
                raise ValueError(f"SamplingParams.{name} holds token id {i}, outside [0, {vocab})")
    for _, b in p.logit_bias:
        if not math.isfinite(np.float32(b)):
            fail("logit_bias values", "finite", b)
    for word in p.bad_words:
        if not word:
            raise ValueError("SamplingParams.bad_words holds an empty token sequence")
        for i in word:
            if not 0 <= i < vocab:
                raise ValueError(f"SamplingParams.bad_words holds token id {i}, outside [0, {vocab})")


def _checked_max(row: int, raw: np.ndarray) -> float:
    bad = np.isnan(raw) | (raw == np.inf)
    if bad.any():
        b = int(np.flatnonzero(bad)[0])
        what = "NaN" if np.isnan(raw[b]) else "+inf"
        raise ValueError(f"sampler: row {row}: logit of token {b} is {what}; logits must be finite or -inf")
    m = float(raw.max())
    if m == -math.inf:
        raise ValueError(f"sampler: row {row}: every logit is -inf")
    return m


def _fill_logprobs(raw: np.ndarray, raw_max: float, token: int, top_n: int, out: SampleResult) -> None:
    shifted = raw.astype(np.float64) - raw_max
    total, _ = chunked_sum(exp_ref(shifted))
    log_z = math.log(total)
    lp = (shifted - log_z).astype(np.float32)
    out.logprob = float(lp[token])
    top = _order(raw)[: min(top_n, raw.size)]
    out.top_ids = [int(i) for i in top]
    out.top_logprobs = [float(lp[i]) for i in top]


def token_mask_bits(mask: np.ndarray, vocab: int) -> np.ndarray:
    """The allowed-token booleans of an int32 bitmask (bit t % 32 of word t // 32)."""
    words = np.ascontiguousarray(mask, dtype=np.int32)
    return np.unpackbits(words.view(np.uint8), bitorder="little")[:vocab].astype(bool)


def _check_ids(row: int, name: str, ids: Sequence[int], vocab: int) -> None:
    for i in ids:
        if not 0 <= i < vocab:
            raise ValueError(f"sampler: row {row}: {name} holds token id {i}, outside [0, {vocab})")


def sample_row(row: int, raw: np.ndarray, r: RowInput) -> SampleResult:
    """Sample one token from one float32 logits row."""
    p = r.params
    vocab = raw.size
    validate(p, vocab)
    raw_max = _checked_max(row, raw)
    f32 = np.float32

    if p.allowed_token_ids:
        x = np.full(vocab, -np.inf, dtype=np.float32)
        allowed = np.asarray(p.allowed_token_ids, dtype=np.int64)
        x[allowed] = raw[allowed]
    else:
        x = raw.copy()
    if r.token_mask is not None:
        x[~token_mask_bits(r.token_mask, vocab)] = -np.inf
    for i, b in p.logit_bias:
        x[i] = x[i] + f32(b)
    produced = list(r.output_token_ids)
    for word in p.bad_words:
        k = len(word) - 1  # the tokens before the masked one
        if k <= len(produced) and produced[len(produced) - k :] == list(word[:-1]):
            x[word[-1]] = -np.inf
    if len(r.output_token_ids) < p.min_tokens:
        x[list(p.stop_token_ids)] = -np.inf
        if not p.ignore_eos:
            x[list(p.eos_token_ids)] = -np.inf
    if p.repetition_penalty != 1.0:
        penalty = f32(p.repetition_penalty)
        history = list(r.prompt_token_ids) + list(r.output_token_ids)
        _check_ids(row, "the token history", history, vocab)
        with np.errstate(over="ignore"):  # an overflow is clamped
            for i in dict.fromkeys(history):
                # clamped to the finite range (no inf whose weight is NaN); -inf (masked) stays -inf
                if x[i] > 0:
                    x[i] = min(x[i] / penalty, F32_MAX)
                elif x[i] != -np.inf:
                    x[i] = max(x[i] * penalty, -F32_MAX)
    if p.frequency_penalty != 0.0 or p.presence_penalty != 0.0:
        _check_ids(row, "output_token_ids", r.output_token_ids, vocab)
        counts: dict[int, int] = {}
        for i in r.output_token_ids:
            counts[i] = counts.get(i, 0) + 1
        freq, pres = f32(p.frequency_penalty), f32(p.presence_penalty)
        for i, c in counts.items():
            x[i] = x[i] - freq * f32(c)
            x[i] = x[i] - pres

    x_max = float(x.max())
    if x_max == -math.inf:
        if r.token_mask is not None:
            raise ValueError(
                f"sampler: row {row}: every token is masked: the structured-output grammar allows only "
                "tokens that allowed_token_ids, logit_bias or min_tokens (end of sequence) forbid"
            )
        raise ValueError(
            f"sampler: row {row}: every token is masked (allowed_token_ids, logit_bias, min_tokens)"
        )
    if p.temperature < GREEDY_TEMPERATURE:
        token = int(np.argmax(x))
    else:
        u = philox_uniform(r.seed, r.stream, r.step)
        inv_t = 1.0 / p.temperature  # one division; each weight multiplies by it
        ids: np.ndarray | None = None  # None: the whole vocabulary is the candidate set
        cw = w = np.zeros(0)
        if 0 < p.top_k < vocab:
            ids = _order(x)[: p.top_k]
            cw = exp_ref((x[ids].astype(np.float64) - x_max) * inv_t)
        else:
            w = exp_ref((x.astype(np.float64) - x_max) * inv_t)
        if p.top_p < 1.0:
            if ids is not None:
                threshold = p.top_p * float(np.cumsum(cw)[-1])
            else:
                threshold = p.top_p * chunked_sum(w)[0]
                ids = _order(x)
                cw = w[ids]
            before = np.concatenate([[0.0], np.cumsum(cw)[:-1]])
            kept = int(np.count_nonzero(before < threshold))
            ids, cw = ids[:kept], cw[:kept]
        if p.min_p > 0.0:
            if ids is not None:
                keep = cw >= p.min_p
                ids, cw = ids[keep], cw[keep]
            else:
                w = np.where(w >= p.min_p, w, 0.0)
        if ids is not None:
            token = _draw_list(ids, cw, u)
        else:
            total, chunk_sums = chunked_sum(w)
            token = _draw_chunked(w, chunk_sums, total, u)

    out = SampleResult(token=token)
    if p.logprobs >= 0:
        _fill_logprobs(raw, raw_max, token, p.logprobs, out)
    return out


def sample(logits: np.ndarray, rows: Sequence[RowInput]) -> list[SampleResult]:
    """One token per row of a float32 [n_rows, vocab] batch."""
    logits = _as_batch(logits, len(rows))
    return [sample_row(i, logits[i], r) for i, r in enumerate(rows)]


def logprobs(logits: np.ndarray, token_ids: Sequence[int], top_n: int) -> list[SampleResult]:
    """Raw logprob of ``token_ids[r]`` in row r and the ``top_n`` alternatives (prompt_logprobs)."""
    logits = _as_batch(logits, len(token_ids))
    if not 0 <= top_n <= MAX_LOGPROBS:
        raise ValueError(f"prompt_logprobs must be in [0, {MAX_LOGPROBS}], got {top_n}")
    out = []
    for i, t in enumerate(token_ids):
        _check_ids(i, "token_ids", [t], logits.shape[1])
        res = SampleResult(token=int(t))
        _fill_logprobs(logits[i], _checked_max(i, logits[i]), int(t), top_n, res)
        out.append(res)
    return out


def _as_batch(logits: np.ndarray, n_rows: int) -> np.ndarray:
    logits = np.asarray(logits)
    if logits.dtype != np.float32 or logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError("sampler: logits must be a float32 [n_rows, vocab] array with vocab >= 1")
    if logits.shape[0] != n_rows:
        raise ValueError(f"sampler: {logits.shape[0]} logits rows but {n_rows} inputs")
    return logits
