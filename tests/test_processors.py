"""The input processor (the one place that validates: prompt forms, chat messages, truncation, limits)
and the output processor (engine outputs -> RequestOutputs, delta and cumulative), on the default model.
Expected values come from the engine itself run on the equivalent plain inputs."""

from __future__ import annotations

from typing import Any

import pytest

from ossa import LLM, SamplingParams
from ossa.input_processor import InputError, ProcessedPrompt
from ossa.output_processor import OutputProcessor, logprob_dicts, top_logprobs, trim_logprobs

PROMPT = "Once upon a time, in a land far away, there lived a"


@pytest.fixture(scope="module")
def llm(default_model_path: str) -> LLM:
    return LLM(default_model_path, kv_cache_memory_bytes=32 << 20, max_num_seqs=8, max_model_len=64)


def greedy(max_tokens: int = 8, **kw: Any) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)


def test_truncate_prompt_tokens_keeps_the_last_tokens(llm: LLM) -> None:
    ids = llm.get_tokenizer().encode(PROMPT)
    k = 5
    assert len(ids) > k
    cut = llm.generate(PROMPT, greedy(truncate_prompt_tokens=k), use_tqdm=False)[0]
    plain = llm.generate([ids[-k:]], greedy(), use_tqdm=False)[0]
    assert cut.prompt_token_ids == ids[-k:]
    assert cut.outputs[0].token_ids == plain.outputs[0].token_ids
    # -1: as many as leave room for one output token.
    long_ids = (ids * 20)[: llm.max_model_len + 10]
    out = llm.generate([long_ids], greedy(max_tokens=4, truncate_prompt_tokens=-1), use_tqdm=False)[0]
    assert out.prompt_token_ids == long_ids[-(llm.max_model_len - 1) :]
    assert len(out.outputs[0].token_ids) == 1  # the room left
    with pytest.raises(ValueError, match="maximum context length"):
        llm.generate([long_ids], greedy(), use_tqdm=False)
    for bad in (0, -2, 1.5):
        with pytest.raises(ValueError, match="truncate_prompt_tokens"):
            SamplingParams(truncate_prompt_tokens=bad)  # type: ignore[arg-type]


def test_input_errors_name_the_field(llm: LLM) -> None:
    proc = llm.input_processor
    vocab = llm.model.config.n_vocab
    cases = [
        (lambda: proc.prompt([1, vocab], "prompt"), "prompt", "vocabulary"),
        (lambda: proc.prompt([], "prompt"), "prompt", "non-empty"),
        (
            lambda: proc.chat([{"role": "user", "content": [{"type": "image_url"}]}]),
            "messages[0].content",
            "text",
        ),
        (lambda: proc.chat([{"content": "no role"}]), "messages", "role"),
        (lambda: proc.check_n(5, 2), "n", "at most 8"),
        (lambda: proc.process("r", ProcessedPrompt(None, [1] * 64), greedy()), "prompt", "max_model_len"),
        (
            lambda: proc.process("r", ProcessedPrompt(None, [1] * 60), greedy(16, min_tokens=10)),
            "min_tokens",
            "at most 4 output tokens",
        ),
    ]
    for call, param, words in cases:
        with pytest.raises(InputError, match=words) as e:
            call()
        assert e.value.param == param


def test_chat_content_parts_render_as_joined_text(llm: LLM) -> None:
    proc = llm.input_processor
    parts = proc.chat(
        [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    )
    joined = proc.chat([{"role": "user", "content": "a\nb"}])
    assert parts == joined
    assert joined.token_ids == llm.get_tokenizer().encode(joined.text, add_special_tokens=False)


def test_delta_outputs_add_up_to_the_cumulative_output(llm: LLM) -> None:
    sp = SamplingParams(temperature=0.8, seed=7, max_tokens=12, n=2, logprobs=3, stop=[" the"])
    (request,) = llm._requests([llm.input_processor.prompt(PROMPT)], sp, None)
    outputs = OutputProcessor(llm._decode_token)
    state = outputs.add_request(request)
    llm.engine.add_request(request.request_id, request.prompt.token_ids, request.engine_params)
    texts = ["", ""]
    tokens: list[list[int]] = [[], []]
    reasons: list[Any] = [None, None]
    finished = False
    while not finished:
        for _, new in outputs.process(llm.engine.step()):
            for c in new.outputs:
                texts[c.index] += c.text
                tokens[c.index] += c.token_ids
                assert c.logprobs is not None and len(c.logprobs) == len(c.token_ids)
                if c.finish_reason:
                    reasons[c.index] = (c.finish_reason, c.stop_reason)
            finished = new.finished
    final = state.output
    assert [c.text for c in final.outputs] == texts
    assert [c.token_ids for c in final.outputs] == tokens
    assert [(c.finish_reason, c.stop_reason) for c in final.outputs] == reasons
    assert request.request_id not in outputs.states
    again = llm.generate(PROMPT, sp, use_tqdm=False)[0]
    assert [c.token_ids for c in again.outputs] == tokens


def test_top_logprobs_recover_the_engines_top_list(llm: LLM) -> None:
    """The server renders top lists from RequestOutput dicts; they must be the engine's lists."""
    sp = greedy(max_tokens=6, logprobs=5, prompt_logprobs=4)
    (request,) = llm._requests([llm.input_processor.prompt(PROMPT)], sp, None)
    llm.engine.add_request(request.request_id, request.prompt.token_ids, request.engine_params)
    raw = list(llm.engine.run_to_completion())
    entries = [e for o in raw for c in o.completions for e in c.logprobs]
    prompt_entries = [e for o in raw if o.has_prompt_logprobs for e in o.prompt_logprobs]
    assert len(entries) == 6 and len(prompt_entries) == len(request.prompt.token_ids) - 1
    decode = llm._decode_token
    in_top = 0
    for e, d in zip(entries, logprob_dicts(entries, decode), strict=True):
        assert [(t, lp.logprob) for t, lp in top_logprobs(d, 5)] == [(t, lp) for t, lp in e.top]
        in_top += e.token in dict(e.top)
    assert in_top == 6  # greedy: the actual token is always in the top list, at some place
    for e, d in zip(prompt_entries, logprob_dicts(prompt_entries, decode), strict=True):
        top2 = [(t, lp) for t, lp in list(e.top)[:2]]
        assert [(t, lp.logprob) for t, lp in top_logprobs(d, 4, 2)] == top2
        trimmed = trim_logprobs(d, 4, 2)
        assert next(iter(trimmed)) == e.token
        assert set(trimmed) == {e.token} | {t for t, _ in top2}
