"""``AsyncEngine``: a consumer that falls behind gets the steps it missed as one merged output.

The oracle is the engine's own cumulative output of the same request (the streamed deltas must add
up to it exactly: text, token ids, logprobs, finish), which the server tests check against the
non-streamed responses and test_engine against transformers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from ossa import SamplingParams

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def engine(default_model_path: str) -> Iterator[Any]:
    from ossa.async_engine import AsyncEngine

    yield AsyncEngine.from_model(default_model_path, kv_cache_memory_bytes=16 << 20, num_threads=1)


def _request(engine: Any, request_id: str, params: SamplingParams) -> Any:
    proc = engine.input_processor
    return proc.process(request_id, proc.prompt("The tallest mountain in Europe is"), params)


async def _until_finished(engine: Any, request_id: str) -> None:
    """Waits (a condition, not a time) until the engine has reported the request's last step."""
    for _ in range(6000):
        if request_id not in engine.output_processor.states:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the request did not finish")


def _joined(deltas: list[Any]) -> list[tuple[str, list[int], list[Any], str | None]]:
    by_index: dict[int, tuple[str, list[int], list[Any], str | None]] = {}
    for d in deltas:
        for c in d.outputs:
            text, ids, lps, _ = by_index.get(c.index, ("", [], [], None))
            by_index[c.index] = (text + c.text, ids + c.token_ids, lps + (c.logprobs or []), c.finish_reason)
    return [by_index[i] for i in sorted(by_index)]


def test_lagging_consumer_gets_missed_steps_merged(engine: Any) -> None:
    params = SamplingParams(n=2, max_tokens=12, temperature=0.8, seed=3, logprobs=2, ignore_eos=True)

    async def run() -> tuple[list[Any], list[Any], Any]:
        engine.start()
        try:
            # Reference: the cumulative output, consumed as it comes.
            final = None
            async for out in engine.generate(_request(engine, "ref", params), delta=False):
                final = out
            # The same request, its consumer away from the first output until the engine is done.
            deltas = []
            stream = engine.generate(_request(engine, "lag", params))
            deltas.append(await stream.__anext__())
            await _until_finished(engine, "lag")
            deltas += [d async for d in stream]
            # And one that keeps up, for comparison.
            prompt_first = [d async for d in engine.generate(_request(engine, "keep", params))]
            return deltas, prompt_first, final
        finally:
            engine.shutdown()

    lagged, kept_up, final = asyncio.run(run())
    expected = [(c.text, c.token_ids, c.logprobs, c.finish_reason) for c in final.outputs]
    assert _joined(lagged) == expected
    assert _joined(kept_up) == expected
    assert [c.cumulative_logprob for c in lagged[-1].outputs] == [c.cumulative_logprob for c in final.outputs]
    # Everything after the first output came merged into one, which ends the request.
    assert len(lagged) == 2 and lagged[-1].finished
    assert all(not d.finished for d in lagged[:-1])
    assert len(kept_up) >= len(lagged)
