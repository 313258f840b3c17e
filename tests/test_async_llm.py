"""vLLM's asyncio API (``ossa.AsyncLLM``): output kinds, concurrency, abort, engine args. The tokens
compared are the offline ``LLM``'s on the same model and parameters (batch invariance: a request's
tokens do not depend on what else runs)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from ossa import LLM, AsyncEngineArgs, AsyncLLM, RequestOutputKind, SamplingParams

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]


def params(kind: RequestOutputKind = RequestOutputKind.CUMULATIVE, n: int = 12) -> SamplingParams:
    return SamplingParams(temperature=0.8, seed=3, max_tokens=n, output_kind=kind)


@pytest.fixture(scope="module")
def engine(default_model_path: str) -> Iterator[AsyncLLM]:
    e = AsyncLLM.from_engine_args(AsyncEngineArgs(model=default_model_path, kv_cache_memory_bytes=32 << 20))
    yield e
    e.shutdown()


@pytest.fixture(scope="module")
def offline(default_model_path: str) -> dict[str, list[int]]:
    llm = LLM(default_model_path, kv_cache_memory_bytes=16 << 20)
    return {p: llm.generate(p, params(), use_tqdm=False)[0].outputs[0].token_ids for p in PROMPTS}


def collect(engine: AsyncLLM, prompt: str, sp: SamplingParams, rid: str) -> list:
    async def run() -> list:
        return [out async for out in engine.generate(prompt, sp, rid)]

    return asyncio.run(run())


def test_output_kinds(engine: AsyncLLM, offline: dict[str, list[int]]) -> None:
    p = PROMPTS[0]
    cumulative = collect(engine, p, params(), "c")
    assert len(cumulative) > 1 and cumulative[-1].finished and not cumulative[0].finished
    lengths = [len(o.outputs[0].token_ids) for o in cumulative]
    assert lengths == sorted(lengths) and cumulative[-1].outputs[0].token_ids == offline[p]
    texts = [o.outputs[0].text for o in cumulative]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))  # snapshots, not one object
    deltas = collect(engine, p, params(RequestOutputKind.DELTA), "d")
    assert sum((o.outputs[0].token_ids for o in deltas), []) == offline[p]
    assert "".join(o.outputs[0].text for o in deltas) == cumulative[-1].outputs[0].text
    final = collect(engine, p, params(RequestOutputKind.FINAL_ONLY), "f")
    assert len(final) == 1 and final[0].finished and final[0].outputs[0].token_ids == offline[p]


def test_concurrent_requests_get_their_own_tokens(engine: AsyncLLM, offline: dict[str, list[int]]) -> None:
    async def one(i: int, p: str) -> list[int]:
        last = None
        async for out in engine.generate(p, params(), f"r{i}"):
            last = out
        assert last is not None and last.request_id == f"r{i}"
        return last.outputs[0].token_ids

    async def run() -> list[list[int]]:
        return await asyncio.gather(*(one(i, p) for i, p in enumerate(PROMPTS * 2)))

    assert asyncio.run(run()) == [offline[p] for p in PROMPTS * 2]


def test_abort_and_bad_requests(engine: AsyncLLM) -> None:
    async def run() -> int:
        seen = 0
        async for _ in engine.generate(PROMPTS[2], params(n=200), "long"):
            seen += 1
            if seen == 2:
                await engine.abort("long")
        return seen

    assert asyncio.run(run()) <= 3  # the generator ends soon after abort
    with pytest.raises(ValueError, match="outside the vocabulary"):
        asyncio.run(anext_of(engine, {"prompt_token_ids": [10**8]}))
    with pytest.raises(ValueError, match="output_kind"):
        SamplingParams(output_kind=7)  # type: ignore[arg-type]


async def anext_of(engine: AsyncLLM, prompt: object) -> object:
    return await anext(aiter(engine.generate(prompt, params(), "bad")))
