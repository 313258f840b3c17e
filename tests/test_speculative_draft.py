"""Draft-model speculation changes no token: with a draft model proposing (the default model as its own
draft: long accepted runs; a tiny random draft of the same vocabulary: rejections), every request's
tokens, text, logprobs and finish reasons are bitwise those of plain decoding, alone and in batches,
with chunked prefill, forced preemption (the draft's cache overflows too), prefix caching, n > 1 and
stops inside accepted runs; the twin follows the C++ engine step by step; a draft of another vocabulary
is a ValueError naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_speculative import COPY, FREE, KV, accepted, crowd, engine_trace, runs, same
from tiny_models import tiny_draft_gguf

from ossa import LLM, SamplingParams
from ossa.config import EngineArgs


@pytest.fixture(scope="module")
def tiny_draft(default_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_draft_gguf(tmp_path_factory.mktemp("draft") / "draft.gguf", default_model_path)


def self_draft(path: str, k: int = 4) -> dict[str, Any]:
    # draft_cost 0: the default model drafting for itself costs a whole step a position, so by cost
    # alone it would never draft; the tests want its long accepted runs.
    return {"model": path, "num_speculative_tokens": k, "disable_by_batch_size": None, "draft_cost": 0}


@pytest.fixture(scope="module")
def plain(default_model_path: str) -> LLM:
    return LLM(default_model_path, kv_cache_memory_bytes=KV)


@pytest.fixture(scope="module")
def selfspec(default_model_path: str) -> LLM:
    return LLM(
        default_model_path, kv_cache_memory_bytes=KV, speculative_config=self_draft(default_model_path)
    )


def test_draft_config_is_validated(default_model_path: str, tmp_path: Path, plain: LLM) -> None:
    bad = [
        ({"method": "draft_model", "num_speculative_tokens": 2}, "model"),
        ({"model": 3, "num_speculative_tokens": 2}, "model"),
        ({"model": default_model_path, "method": "ngram", "num_speculative_tokens": 2}, "method"),
        ({"model": default_model_path}, "num_speculative_tokens"),
        ({"model": default_model_path, "num_speculative_tokens": 2, "prompt_lookup_min": 2},
         "prompt_lookup_min"),
        ({"model": default_model_path, "num_speculative_tokens": 2, "draft_cost": 1.5}, "draft_cost"),
        ({"method": "ngram", "num_speculative_tokens": 2, "draft_cost": 0.1}, "draft_cost"),
    ]  # fmt: skip
    for value, field in bad:
        with pytest.raises(ValueError, match=field):
            EngineArgs.from_kwargs(None, {"speculative_config": value})
    # A draft of another vocabulary: its size, or its token table.
    small = tiny_draft_gguf(tmp_path / "small.gguf", default_model_path, vocab_size=1000)
    swapped = tiny_draft_gguf(tmp_path / "swapped.gguf", default_model_path, swap_tokens=(300, 301))
    for path, field in ((small, "vocab_size 1000"), (swapped, "token table differs .* at token id 300")):
        with pytest.raises(ValueError, match=field):
            LLM(
                default_model_path,
                kv_cache_memory_bytes=KV,
                speculative_config={"model": path, "num_speculative_tokens": 2},
            )
    # The engines themselves refuse method draft_model without a draft.
    from ossa._native import core

    ec = core.EngineConfig()
    for name, value in plain.config.engine_fields().items():
        setattr(ec, name, value)
    ec.spec_method, ec.num_speculative_tokens = "draft_model", 2
    with pytest.raises(ValueError, match="draft model"):
        core.Engine(plain.model._handle, plain.tokenizer.core, ec)


def test_draft_kv_cache_counts_in_the_memory_check(
    default_model_path: str, tiny_draft: str, plain: LLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from ossa import config as config_module
    from ossa import models
    from ossa._native import core

    draft = models.load_model(tiny_draft)
    spec = {"model": tiny_draft, "num_speculative_tokens": 2}
    cfg = EngineArgs(kv_cache_memory_bytes=KV, speculative_config=spec).create_config(
        plain.model, plain.model_path, draft
    )
    d, cache = draft.config, cfg.cache
    per_block = core.kv_block_bytes(
        d.n_layer, d.n_head_kv, d.head_dim, cache.block_size, 2 if cache.kv_cache_dtype == "float16" else 4
    )
    # As many blocks as the target's, on top of the target's budget; none without a draft.
    assert cache.draft_kv_cache_memory_bytes == cache.num_blocks * per_block > 0
    assert cache.kv_cache_memory_bytes == KV and plain.config.cache.draft_kv_cache_memory_bytes == 0
    weights, draft_weights = os.path.getsize(plain.model_path), os.path.getsize(tiny_draft)
    # Room for both models and the target's KV cache, not for the draft's: refused, naming the draft.
    room = weights + KV + draft_weights + cache.draft_kv_cache_memory_bytes - 1
    monkeypatch.setattr(config_module, "available_memory", lambda: room)
    EngineArgs(kv_cache_memory_bytes=KV).create_config(plain.model, plain.model_path)  # fits without it
    with pytest.raises(ValueError, match=r"the draft's KV cache \(\d+ blocks, as many as the target's"):
        LLM(default_model_path, kv_cache_memory_bytes=KV, speculative_config=spec)
    # gpu_memory_utilization: its share holds both models and both KV caches.
    monkeypatch.setattr(config_module, "available_memory", lambda: 1 << 30)
    shared = EngineArgs(gpu_memory_utilization=0.5, speculative_config=spec).create_config(
        plain.model, plain.model_path, draft
    )
    c = shared.cache
    used = weights + draft_weights + c.kv_cache_memory_bytes + c.draft_kv_cache_memory_bytes
    assert c.draft_kv_cache_memory_bytes == c.num_blocks * per_block and 0 < used <= 1 << 29
    small = (weights + draft_weights // 2) / (1 << 30)
    with pytest.raises(ValueError, match="leaves nothing for the KV cache .* and the draft model"):
        EngineArgs(gpu_memory_utilization=small, speculative_config=spec).create_config(
            plain.model, plain.model_path, draft
        )


def test_self_draft_greedy_seeded_and_crowd(plain: LLM, selfspec: LLM) -> None:
    sps = [
        SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True, logprobs=2),
        SamplingParams(temperature=0.8, top_p=0.95, seed=7, max_tokens=32, ignore_eos=True, logprobs=1),
    ]
    before = accepted(selfspec)
    for prompt, sp in zip((COPY[0], FREE[0]), sps, strict=True):
        same(plain, selfspec, [prompt], [sp])
    # Greedy: the draft is the target, so every draft is accepted (k drafts, k accepted a run).
    assert accepted(selfspec) - before > 30
    assert selfspec.stats()["spec_accepted_per_pos"][3] > 4
    prompts, params = crowd()
    before = accepted(selfspec)
    same(plain, selfspec, prompts[:8], params[:8])  # penalties, stops, min_tokens, n = 2
    assert accepted(selfspec) - before > 20


def test_self_draft_stops_inside_runs(plain: LLM, selfspec: LLM) -> None:
    prompt = COPY[3]
    steps = runs(selfspec, prompt, SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True))
    tokens = [t for s in steps for t in s]
    inside = [sum(len(s) for s in steps[:i]) + j for i, s in enumerate(steps) for j in range(1, len(s))]
    assert len(inside) > 10
    p = next(q for q in inside[len(inside) // 2 :] if tokens.index(tokens[q]) == q)
    tok = selfspec.get_tokenizer()
    piece = tok.decode(tokens[: p + 1])[len(tok.decode(tokens[:p])) :].strip()
    assert piece
    for sp in (
        SamplingParams(temperature=0.0, max_tokens=40, stop_token_ids=[tokens[p]]),
        SamplingParams(temperature=0.0, max_tokens=40, stop=[piece]),
        SamplingParams(temperature=0.0, max_tokens=p, ignore_eos=True, logprobs=1),
    ):
        out = same(plain, selfspec, [prompt], [sp])[0]
        assert len(out.outputs[0].token_ids) <= p + 1


def test_self_draft_chunked_preempted_prefix_cached(plain: LLM, default_model_path: str) -> None:
    prompts, params = crowd()
    # k = 2 keeps these cheap (each draft position is a forward of the default model).
    small = LLM(
        default_model_path,
        kv_cache_memory_bytes=KV,
        max_num_batched_tokens=16,
        speculative_config=self_draft(default_model_path, k=2),
    )
    same(plain, small, prompts[:4], params[:4])  # chunked prefill, the draft's catch-up chunked too
    assert accepted(small) > 10
    # 40 blocks of 16 tokens for the target and as many for the draft: both preempt / evict.
    tiny = LLM(
        default_model_path,
        kv_cache_memory_bytes=40 * 16 * 23040,
        max_model_len=256,
        speculative_config=self_draft(default_model_path, k=2),
    )
    same(plain, tiny, prompts[:12], params[:12])
    st = tiny.stats()
    assert st["num_preemptions"] > 0 and st["spec_num_accepted_tokens"] > 20
    # Prefix caching over blocks written by verification steps.
    sp = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    first = same(plain, tiny, [COPY[0]], [sp])[0]
    hits = tiny.stats()["prefix_hits"]
    second = same(plain, tiny, [COPY[0] + first.outputs[0].text + "\n# again\n"], [sp])[0]
    assert tiny.stats()["prefix_hits"] - hits >= 16 and second.num_cached_tokens >= 16


def test_tiny_random_draft_rejections_and_metrics(
    plain: LLM, default_model_path: str, tiny_draft: str
) -> None:
    spec = LLM(
        default_model_path,
        kv_cache_memory_bytes=KV,
        speculative_config={"model": tiny_draft, "num_speculative_tokens": 3, "disable_by_batch_size": None},
    )
    assert 0 < spec.config.speculative.draft_cost < 0.3  # the ratio of the weight bytes
    prompts, params = crowd()
    same(plain, spec, prompts[:8], params[:8])
    st = spec.stats()
    assert st["spec_num_draft_tokens"] > 10 and st["spec_num_accepted_tokens"] < st["spec_num_draft_tokens"]
    out = spec.generate([COPY[1]], SamplingParams(temperature=0.0, max_tokens=30, n=2), use_tqdm=False)[0]
    st2 = spec.stats()
    m = out.metrics
    assert m is not None and m.spec_num_drafts == st2["spec_num_drafts"] - st["spec_num_drafts"] > 0
    assert m.spec_num_draft_tokens == st2["spec_num_draft_tokens"] - st["spec_num_draft_tokens"]
    ref = plain.generate([COPY[1]], SamplingParams(temperature=0.0, max_tokens=30, n=2), use_tqdm=False)[0]
    assert [c.token_ids for c in out.outputs] == [c.token_ids for c in ref.outputs]


def test_twin_matches_cpp_with_draft_model(default_model_path: str, tiny_draft: str) -> None:
    spec_cfg = {
        "model": tiny_draft,
        "num_speculative_tokens": 3,
        "disable_by_batch_size": None,
        "draft_cost": 0,
    }
    kw: dict[str, Any] = dict(kv_cache_memory_bytes=KV, max_num_batched_tokens=256, kv_cache_dtype="float32")
    llms = [LLM(default_model_path, speculative_config=spec_cfg, **kw)]
    llms.append(LLM(default_model_path, backend="python", speculative_config=spec_cfg, **kw))
    sps = [
        SamplingParams(temperature=0.0, max_tokens=8, logprobs=1),
        SamplingParams(temperature=0.8, seed=4, max_tokens=6, n=2),
    ]
    traces = [engine_trace(llm, [COPY[1], COPY[2]], sps) for llm in llms]
    assert traces[0] == traces[1]
    keys = ("spec_num_drafts", "spec_num_draft_tokens", "spec_num_accepted_tokens", "spec_accepted_per_pos")
    assert [llms[0].stats()[k] for k in keys] == [llms[1].stats()[k] for k in keys]
    assert llms[0].stats()["spec_num_draft_tokens"] > 6
