"""One ``LLM`` called from many threads at once: generate, chat and stream mixed, with aborted
streams, exceptions inside callers and invalid requests. Requests of all threads share the engine's
batch, and (batch invariance) each caller gets exactly what it gets alone; nothing leaks.

``OSSA_THREAD_ROUNDS`` sets the rounds per thread (default 3); test_sanitizers.py runs this file on
an ASan/UBSan core.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import pytest

from ossa import LLM, SamplingParams

pytestmark = pytest.mark.timeout(900)

THREADS = 8
ROUNDS = int(os.environ.get("OSSA_THREAD_ROUNDS", "3"))
PROMPTS = [f"Item {i}: a short note about" for i in range(6)]
CHATS = [[{"role": "user", "content": f"Say a word about the number {i}."}] for i in range(3)]


def params(seed: int) -> SamplingParams:
    return SamplingParams(max_tokens=6, temperature=0.8, seed=seed, ignore_eos=True)


def tokens(outs: list[Any]) -> list[list[int]]:
    return [list(o.outputs[0].token_ids) for o in outs]


@pytest.fixture(scope="module")
def llm(default_model_path: str) -> LLM:
    # A small cache, so that 8 threads' requests contend for blocks (preemption included).
    return LLM(default_model_path, kv_cache_memory_bytes=6 << 20, max_model_len=128, max_num_seqs=16)


@pytest.fixture(scope="module")
def solo(llm: LLM) -> dict[str, list[list[int]]]:
    """Each request alone, on one thread: what every concurrent caller must get."""
    out = {f"p{i}": tokens(llm.generate(p, params(i), use_tqdm=False)) for i, p in enumerate(PROMPTS)}
    for i, c in enumerate(CHATS):
        out[f"c{i}"] = tokens(llm.chat(c, params(100 + i), use_tqdm=False))
    return out


class Boom(Exception):
    pass


def test_threads_share_one_llm(llm: LLM, solo: dict[str, list[list[int]]]) -> None:
    failures: list[str] = []
    lock = threading.Lock()

    def check(what: str, got: Any, want: Any) -> None:
        if got != want:
            with lock:
                failures.append(f"{what}: {got} != {want}")

    def generate_some(t: int, r: int) -> None:
        idx = [(t + r + k) % len(PROMPTS) for k in range(1 + (t + r) % 3)]
        outs = llm.generate([PROMPTS[i] for i in idx], [params(i) for i in idx], use_tqdm=False)
        check(f"generate {idx}", tokens(outs), [solo[f"p{i}"][0] for i in idx])

    def chat_one(t: int, r: int) -> None:
        i = (t + r) % len(CHATS)
        check(f"chat {i}", tokens(llm.chat(CHATS[i], params(100 + i), use_tqdm=False)), solo[f"c{i}"])

    def stream_and_leave(t: int, r: int) -> None:
        i = (t * 7 + r) % len(PROMPTS)
        long = SamplingParams(max_tokens=60, temperature=0.8, seed=i, ignore_eos=True)
        gen = llm.stream(PROMPTS[i], long)
        for k, _ in enumerate(gen):
            if k == 1:
                break
        gen.close()  # abandoned: aborted and drained

    def stream_whole(t: int, r: int) -> None:
        i = (t + 2 * r) % len(PROMPTS)
        text = "".join(llm.stream(PROMPTS[i], params(i)))
        check(f"stream {i}", text, llm.tokenizer.decode(solo[f"p{i}"][0], skip_special_tokens=True))

    def raise_in_stream(t: int, r: int) -> None:
        with pytest.raises(Boom):
            for _ in llm.stream(PROMPTS[t % len(PROMPTS)], params(t)):
                raise Boom  # the caller's own exception, mid-generation

    def invalid(t: int, r: int) -> None:
        with pytest.raises(ValueError):
            llm.generate([PROMPTS[0], [llm.model.config.n_vocab]], use_tqdm=False)

    actions: list[Callable[[int, int], None]] = [
        generate_some, chat_one, stream_and_leave, stream_whole, raise_in_stream, invalid,
    ]  # fmt: skip

    def worker(t: int) -> None:
        try:
            for r in range(ROUNDS):
                for k in range(len(actions)):
                    actions[(t + r + k) % len(actions)](t, r)
        except BaseException as e:  # noqa: BLE001 (reported below, with the thread)
            with lock:
                failures.append(f"thread {t}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures, "\n".join(failures[:10])
    assert not llm.engine.has_unfinished()
    stats = llm.stats()
    assert stats["num_running"] == 0 and stats["num_waiting"] == 0 and stats["kv_usage_percent"] == 0.0
    # and the engine still answers a single caller as before
    assert tokens(llm.generate(PROMPTS[0], params(0), use_tqdm=False)) == solo["p0"]


def test_stepping_one_engine_from_two_threads_is_refused(llm: LLM) -> None:
    """Whoever drives a core.Engine by hand from two threads gets an error, not a corrupted heap."""
    if llm.backend != "cpp":
        pytest.skip("the C++ engine's guard")
    g = llm.input_processor.engine_params(SamplingParams(max_tokens=400, ignore_eos=True), 3)
    llm.engine.add_request("by-hand", [1, 2, 3], g)
    errors: list[str] = []

    def run() -> None:
        try:
            llm.engine.run_to_completion()
        except ValueError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # 400 tokens take seconds: the second thread arrives while the first steps, and is refused.
    assert len(errors) == 1 and "another thread is stepping this engine" in errors[0], errors
    assert not llm.engine.has_unfinished()


def test_threads_share_the_twin(default_model_path: str) -> None:
    """The same with backend="python" (the twin's engine is plain Python: every call is serialized)."""
    twin = LLM(default_model_path, kv_cache_memory_bytes=4 << 20, max_model_len=64, backend="python")
    short = SamplingParams(max_tokens=2, temperature=0.8, seed=3, ignore_eos=True)
    want = [tokens(twin.generate(p, short, use_tqdm=False)) for p in PROMPTS[:3]]
    got: dict[int, Any] = {}

    def run(i: int) -> None:
        got[i] = tokens(twin.generate(PROMPTS[i], short, use_tqdm=False))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert [got[i] for i in range(3)] == want
    assert not twin.engine.has_unfinished()
