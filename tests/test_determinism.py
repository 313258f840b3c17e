"""Determinism, the headline: with the same seed and prompt, a request's tokens and logprobs are
bitwise identical alone or among 63 other concurrent requests, with prefix caching on or off, with
chunked prefill forced small (16 tokens a step) or large, and with 1 or 2 kernel threads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ossa import LLM, SamplingParams
from ossa._native import core

BASE = "The capital of France is Paris. The capital of Germany is Berlin. The capital of"
TARGETS = [
    (BASE + " Italy is", SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, logprobs=2)),
    (
        BASE + " Spain is",
        SamplingParams(temperature=0.9, top_p=0.95, seed=1234, max_tokens=12, ignore_eos=True, logprobs=2),
    ),
]
COUNTRIES = ["Poland", "Norway", "Greece", "Egypt", "Japan", "Chile", "Peru", "Kenya", "Nepal", "Cuba"]


def crowd() -> list[tuple[str, SamplingParams]]:
    """62 other requests (sharing the targets' prefix, so prefix caching has something to hit) with
    the two targets placed at different points of the batch."""
    others = []
    for i in range(62):
        prompt = f"{BASE} {COUNTRIES[i % len(COUNTRIES)]} is" if i % 2 else f"Story {i}: once upon a time"
        sp = SamplingParams(temperature=0.8, seed=i, max_tokens=4 + i % 9, ignore_eos=True)
        others.append((prompt, sp))
    return others[:20] + [TARGETS[0]] + others[20:41] + [TARGETS[1]] + others[41:]


def kv_bytes_per_token() -> int:
    n_layer, n_head_kv, head_dim = 30, 3, 64  # SmolLM2-135M
    return 2 * n_layer * n_head_kv * head_dim * 2  # float16 K and V (kv_cache_dtype="auto")


def signature(out: Any) -> tuple:
    c = out.outputs[0]
    lps = [[(t, lp.logprob, lp.rank) for t, lp in sorted(d.items())] for d in c.logprobs]
    return (out.prompt, tuple(c.token_ids), str(lps), c.cumulative_logprob)


def run(llm: LLM, requests: list[tuple[str, SamplingParams]]) -> list[tuple]:
    outs = llm.generate([p for p, _ in requests], [sp for _, sp in requests], use_tqdm=False)
    targets = {p for p, _ in TARGETS}
    return [signature(o) for o in outs if o.prompt in targets]


@pytest.fixture(scope="module")
def threads() -> Iterator[None]:
    before = core.get_num_threads()
    yield
    core.set_num_threads(before)


@pytest.fixture(scope="module")
def reference(default_model_path: str, threads: None) -> list[tuple]:
    llm = LLM(default_model_path, kv_cache_memory_bytes=32 << 20, num_threads=2)
    return run(llm, TARGETS)


@pytest.mark.parametrize(
    ("crowded", "prefix_caching", "max_batched", "n_threads", "kv_blocks"),
    [
        (True, True, 2048, 2, 0),
        (True, False, 16, 2, 0),
        (True, True, 16, 1, 0),
        (False, False, 16, 1, 0),
        (False, True, 2048, 1, 0),
        (True, True, 2048, 2, 8),  # a small cache (8 blocks): sequences are preempted and recomputed
    ],
)
def test_bitwise_identical(
    default_model_path: str,
    reference: list[tuple],
    crowded: bool,
    prefix_caching: bool,
    max_batched: int,
    n_threads: int,
    kv_blocks: int,
) -> None:
    block_bytes = 16 * kv_bytes_per_token()
    llm = LLM(
        default_model_path,
        kv_cache_memory_bytes=kv_blocks * block_bytes if kv_blocks else 32 << 20,
        enable_prefix_caching=prefix_caching,
        max_num_batched_tokens=max_batched,
        num_threads=n_threads,
    )
    got = run(llm, crowd() if crowded else TARGETS)
    assert got == reference
    stats = llm.stats()
    if crowded and prefix_caching:
        assert stats["prefix_hits"] > 0  # the targets' prefix really was shared
    if kv_blocks:
        assert stats["num_preemptions"] > 0
    if max_batched == 16:
        assert stats["steps"] >= stats["prompt_tokens"] // 16  # prompts really were chunked


def test_reference_is_sampled_and_greedy(reference: list[tuple]) -> None:
    greedy, sampled = reference
    assert len(greedy[1]) == 12 and len(sampled[1]) == 12
    assert greedy[1] != sampled[1]
