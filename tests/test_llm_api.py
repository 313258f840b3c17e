"""ossa.LLM on the default model: vLLM's prompt and output shapes, every stop condition, n > 1,
logprobs checked against log_softmax of a fresh forward pass, chat, errors raised before any work."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ossa import LLM, SamplingParams
from ossa.models import load_model

PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):"]
GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


@pytest.fixture(scope="module")
def llm(default_model_path: str) -> LLM:
    return LLM(default_model_path, kv_cache_memory_bytes=64 << 20, max_num_batched_tokens=256)


@pytest.fixture(scope="module")
def model(default_model_path: str) -> Any:
    return load_model(default_model_path)


@pytest.fixture(scope="module")
def greedy_outputs(llm: LLM) -> list[Any]:
    return llm.generate(PROMPTS, GREEDY, use_tqdm=False)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def test_outputs_have_every_field_in_input_order(llm: LLM, greedy_outputs: list[Any]) -> None:
    tok = llm.get_tokenizer()
    assert [o.prompt for o in greedy_outputs] == PROMPTS
    ids = [o.request_id for o in greedy_outputs]
    assert len(set(ids)) == len(ids)
    for p, o in zip(PROMPTS, greedy_outputs, strict=True):
        assert o.prompt_token_ids == tok.encode(p)
        assert o.prompt_logprobs is None
        assert o.finished
        assert len(o.outputs) == 1
        c = o.outputs[0]
        assert c.index == 0
        assert len(c.token_ids) == 12 and c.finish_reason == "length" and c.stop_reason is None
        assert c.text == tok.decode(c.token_ids, skip_special_tokens=True)
        assert c.logprobs is None and c.cumulative_logprob is None
        m = o.metrics
        assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.finished_time
    assert greedy_outputs[0].outputs[0].text.strip().startswith("Paris")


def test_prompt_forms_give_the_same_tokens(llm: LLM, greedy_outputs: list[Any]) -> None:
    tok = llm.get_tokenizer()
    ids = [tok.encode(p) for p in PROMPTS]
    mixed: list[Any] = [ids[0], {"prompt": PROMPTS[1]}, {"prompt_token_ids": ids[2]}]
    for form in (ids, mixed):
        outs = llm.generate(form, GREEDY, use_tqdm=False)
        assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in greedy_outputs]
        assert [o.prompt_token_ids for o in outs] == ids
    assert outs[0].prompt is None and outs[1].prompt == PROMPTS[1]
    one = llm.generate(ids[0], GREEDY, use_tqdm=False)  # a single token-id list is one prompt
    assert len(one) == 1 and one[0].outputs[0].token_ids == greedy_outputs[0].outputs[0].token_ids


def test_one_sampling_params_per_prompt(llm: LLM, greedy_outputs: list[Any]) -> None:
    params = [SamplingParams(temperature=0.0, max_tokens=n) for n in (3, 5, 7)]
    outs = llm.generate(PROMPTS, params, use_tqdm=False)
    for o, ref, n in zip(outs, greedy_outputs, (3, 5, 7), strict=True):
        assert o.outputs[0].token_ids == ref.outputs[0].token_ids[:n]
    with pytest.raises(ValueError, match="SamplingParams"):
        llm.generate(PROMPTS, params[:2], use_tqdm=False)


def chat_prompt(llm: LLM) -> dict[str, Any]:
    text = llm.get_tokenizer().apply_chat_template([{"role": "user", "content": "Say hi."}])
    return {"prompt": text, "prompt_token_ids": llm.get_tokenizer().encode(text, add_special_tokens=False)}


def test_eos_ignore_eos_and_min_tokens(llm: LLM) -> None:
    eos = set(llm.get_tokenizer().eos_token_ids)
    p = chat_prompt(llm)
    c = llm.generate(p, SamplingParams(temperature=0.0, max_tokens=64), use_tqdm=False)[0].outputs[0]
    assert c.finish_reason == "stop" and c.token_ids[-1] in eos
    # vLLM's stop_reason: None for the tokenizer's EOS, the id for the model's other end ids.
    primary = llm.get_tokenizer().eos_token_id
    assert c.stop_reason == (None if c.token_ids[-1] == primary else c.token_ids[-1])
    n = len(c.token_ids)
    assert not eos & set(c.token_ids[:-1])
    # The EOS id is in token_ids but not in the text.
    assert c.text == llm.get_tokenizer().decode(c.token_ids[:-1])
    ign = llm.generate(p, SamplingParams(temperature=0.0, max_tokens=n + 4, ignore_eos=True), use_tqdm=False)
    ci = ign[0].outputs[0]
    assert ci.finish_reason == "length" and len(ci.token_ids) == n + 4
    assert ci.token_ids[: n - 1] == c.token_ids[:-1]
    mt = llm.generate(p, SamplingParams(temperature=0.0, max_tokens=n + 6, min_tokens=n + 2), use_tqdm=False)
    cm = mt[0].outputs[0]
    assert len(cm.token_ids) >= n + 2 and not eos & set(cm.token_ids[: n + 1])


def test_stop_token_ids(llm: LLM, greedy_outputs: list[Any]) -> None:
    ref = greedy_outputs[1].outputs[0].token_ids
    k = next(i for i in range(2, len(ref)) if ref[i] not in ref[:i])
    sp = SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=[ref[k]])
    c = llm.generate(PROMPTS[1], sp, use_tqdm=False)[0].outputs[0]
    assert c.token_ids == ref[: k + 1]
    assert c.finish_reason == "stop" and c.stop_reason == ref[k]


def boundary_stop(llm: LLM, token_ids: list[int]) -> tuple[str, str, int]:
    """A stop string spanning a token boundary of this completion, the full text, and the number of
    tokens by which the stop string is complete."""
    tok = llm.get_tokenizer()
    full = tok.decode(token_ids, skip_special_tokens=True)
    for k in range(3, len(token_ids) - 2):
        cut = len(tok.decode(token_ids[:k], skip_special_tokens=True))
        stop = full[cut - 2 : cut + 2]
        if len(stop) == 4 and full.find(stop) == cut - 2 and full[:cut] == tok.decode(token_ids[:k]):
            return stop, full, k + 1
    raise AssertionError("no usable token boundary")


def test_stop_strings_across_token_boundaries(llm: LLM) -> None:
    ref = llm.generate(PROMPTS[1], SamplingParams(temperature=0.0, max_tokens=24), use_tqdm=False)[0]
    stop, full, n_stop = boundary_stop(llm, ref.outputs[0].token_ids)
    at = full.find(stop)
    sp = SamplingParams(temperature=0.0, max_tokens=24, stop=[stop, "never appears"])
    c = llm.generate(PROMPTS[1], sp, use_tqdm=False)[0].outputs[0]
    assert c.text == full[:at] and stop not in c.text
    assert c.finish_reason == "stop" and c.stop_reason == stop
    sp = SamplingParams(temperature=0.0, max_tokens=24, stop=stop, include_stop_str_in_output=True)
    c2 = llm.generate(PROMPTS[1], sp, use_tqdm=False)[0].outputs[0]
    assert c2.text == full[: at + len(stop)] and c2.token_ids == c.token_ids
    # Streaming holds back text that might start a stop string: no delta ever shows part of it.
    deltas = list(llm.stream(PROMPTS[1], SamplingParams(temperature=0.0, max_tokens=24, stop=[stop])))
    assert "".join(deltas) == full[:at]
    # As vLLM, stop strings only count once min_tokens are out.
    sp = SamplingParams(temperature=0.0, max_tokens=24, stop=[stop], min_tokens=n_stop)
    c3 = llm.generate(PROMPTS[1], sp, use_tqdm=False)[0].outputs[0]
    assert len(c3.token_ids) > n_stop and c3.text.startswith(full[: at + len(stop)])
    sp = SamplingParams(temperature=0.0, max_tokens=24, stop=[stop], min_tokens=n_stop - 1)
    assert llm.generate(PROMPTS[1], sp, use_tqdm=False)[0].outputs[0].text == full[:at]


def test_n_children_differ_and_share_the_prompt_blocks(llm: LLM) -> None:
    sp = SamplingParams(n=4, temperature=1.0, seed=11, max_tokens=8)
    o = llm.generate(PROMPTS[0], sp, use_tqdm=False)[0]
    assert [c.index for c in o.outputs] == [0, 1, 2, 3]
    assert len({tuple(c.token_ids) for c in o.outputs}) >= 2
    assert all(len(c.token_ids) == 8 or c.finish_reason == "stop" for c in o.outputs)
    again = llm.generate(PROMPTS[0], sp, use_tqdm=False)[0]
    assert [c.token_ids for c in again.outputs] == [c.token_ids for c in o.outputs]


@pytest.mark.parametrize("kv", ["float32", "float16"])
def test_logprobs_match_log_softmax_of_the_model(default_model_path: str, model: Any, kv: str) -> None:
    """Against a fresh forward (model.logits keeps float32 K/V): exact up to summation order with a
    float32 cache; a float16 cache (11-bit K and V) moves logprobs by ~1e-3 at most here."""
    tol = 1e-4 if kv == "float32" else 5e-3
    llm = LLM(
        default_model_path, kv_cache_memory_bytes=64 << 20, max_num_batched_tokens=256, kv_cache_dtype=kv
    )
    sp = SamplingParams(temperature=0.0, max_tokens=6, logprobs=3, prompt_logprobs=2)
    o = llm.generate(PROMPTS[0], sp, use_tqdm=False)[0]
    c = o.outputs[0]
    ids = o.prompt_token_ids + c.token_ids
    ref = log_softmax(model.logits(ids))
    assert c.logprobs is not None and len(c.logprobs) == len(c.token_ids)
    total = 0.0
    for i, (t, entry) in enumerate(zip(c.token_ids, c.logprobs, strict=True)):
        row = ref[len(o.prompt_token_ids) + i - 1]
        assert entry[t].rank == 1  # greedy takes the top token
        assert abs(entry[t].logprob - row[t]) < tol
        top = np.argsort(-row, kind="stable")[:3]
        assert set(entry) == set(int(x) for x in top) | {t}
        for tid, lp in entry.items():
            assert abs(lp.logprob - row[tid]) < tol
        total += entry[t].logprob
    assert c.cumulative_logprob == pytest.approx(total, abs=1e-9)
    pl = o.prompt_logprobs
    assert pl is not None and len(pl) == len(o.prompt_token_ids) and pl[0] is None
    for i in range(1, len(pl)):
        t = o.prompt_token_ids[i]
        entry = pl[i]
        assert entry is not None and abs(entry[t].logprob - ref[i - 1][t]) < tol
        assert entry[t].rank >= 1
        assert len(entry) in (2, 3)


def test_chat_and_get_tokenizer(llm: LLM) -> None:
    conv = [{"role": "user", "content": "What is the capital of France?"}]
    outs = llm.chat([conv, conv], SamplingParams(temperature=0.0, max_tokens=16), use_tqdm=False)
    assert len(outs) == 2 and outs[0].outputs[0].token_ids == outs[1].outputs[0].token_ids
    assert "Paris" in outs[0].outputs[0].text
    single = llm.chat(conv, SamplingParams(temperature=0.0, max_tokens=16), use_tqdm=False)
    assert single[0].outputs[0].text == outs[0].outputs[0].text
    tok = llm.get_tokenizer()
    assert tok.decode(tok.encode("Hello world")) == "Hello world"


def test_abandoned_stream_is_aborted(llm: LLM, greedy_outputs: list[Any]) -> None:
    gen = llm.stream(PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=50))
    first = next(gen)
    assert greedy_outputs[0].outputs[0].text.startswith(first)
    gen.close()
    assert not llm.engine.has_unfinished()
    assert llm.stats()["kv_usage_percent"] == 0


def test_errors_before_any_work_and_serving_continues(llm: LLM, greedy_outputs: list[Any]) -> None:
    steps = llm.stats()["steps"]
    vocab = llm.model.config.n_vocab
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate([PROMPTS[0], [1] * llm.max_model_len], GREEDY, use_tqdm=False)
    with pytest.raises(ValueError, match="vocabulary"):
        llm.generate([PROMPTS[0], [5, vocab]], GREEDY, use_tqdm=False)
    with pytest.raises(ValueError, match="non-empty"):
        llm.generate([PROMPTS[0], []], GREEDY, use_tqdm=False)
    with pytest.raises(ValueError):
        llm.generate([PROMPTS[0], ""], GREEDY, use_tqdm=False)
    with pytest.raises(ValueError, match="vocabulary"):
        llm.generate(PROMPTS[0], SamplingParams(stop_token_ids=[vocab]), use_tqdm=False)
    with pytest.raises(ValueError, match=r"priority must be an integer in \[-2\*\*31"):
        llm.generate(PROMPTS[0], GREEDY, use_tqdm=False, priority=[2**70])
    for bad in ({"temperature": -1.0}, {"top_p": 0.0}, {"max_tokens": 0}, {"n": 0}, {"logprobs": 99}):
        with pytest.raises(ValueError):
            SamplingParams(**bad)
    assert llm.stats()["steps"] == steps  # nothing ran
    assert not llm.engine.has_unfinished()
    again = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in again] == [o.outputs[0].token_ids for o in greedy_outputs]


def test_kv_budget_too_small_for_max_model_len(default_model_path: str) -> None:
    with pytest.raises(ValueError, match="max_model_len"):
        LLM(default_model_path, kv_cache_memory_bytes=1 << 20, max_model_len=4096)
    with pytest.raises(ValueError, match="block"):
        LLM(default_model_path, kv_cache_memory_bytes=1 << 10)
