"""Speculative decoding (n-gram prompt lookup) changes no token: with and without it, every request's
tokens, text, logprobs, finish reason and stop reason are bitwise identical, greedy and seeded, alone and
among 32 others, with chunked prefill, forced preemption and prefix caching, and with EOS, stop ids,
stop strings, max_tokens and min_tokens falling inside an accepted run. Each test also checks that
drafts were accepted: one that never accepts a draft would prove nothing. The twin (backend="python")
follows the C++ engine step by step with speculation on."""

from __future__ import annotations

from typing import Any

import pytest

from ossa import LLM, SamplingParams
from ossa.config import EngineArgs

# disable_by_batch_size None: the batches of these tests speculate whatever their size (the threshold has
# its own test below).
NGRAM = {
    "method": "ngram",
    "num_speculative_tokens": 4,
    "prompt_lookup_max": 4,
    "prompt_lookup_min": 2,
    "disable_by_batch_size": None,
}
KV = 64 << 20

# Prompts whose answers reuse spans of the prompt (code edits, copies, lists), and one free prompt.
COPY = [
    "Rewrite the following code with better names.\n\n"
    "def f(a, b):\n    c = a + b\n    d = c * 2\n    return d\n\n"
    "def g(x):\n    y = f(x, x)\n    return y\n\nRewritten code:\n\ndef f(a, b):\n",
    "Copy the list exactly.\nList: apples, bananas, cherries, dates, elderberries, figs, grapes, honeydew.\n"
    "Copy: apples, bananas,",
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick",
    "Question: what did the report say?\nReport: Sales rose by ten percent in the first quarter, driven by "
    "strong demand in Europe and Asia, while costs stayed flat.\nAnswer: The report said that sales rose by",
]
FREE = ["Once upon a time, in a small village by the sea,"]


def signature(out: Any) -> tuple:
    comps = []
    for c in out.outputs:
        lps = (
            None
            if c.logprobs is None
            else [[(t, lp.logprob, lp.rank) for t, lp in d.items()] for d in c.logprobs]
        )
        comps.append(
            (
                c.index,
                tuple(c.token_ids),
                c.text,
                str(lps),
                c.cumulative_logprob,
                c.finish_reason,
                c.stop_reason,
            )
        )
    return (out.prompt, tuple(comps))


def accepted(llm: LLM) -> int:
    return int(llm.stats()["spec_num_accepted_tokens"])


@pytest.fixture(scope="module")
def plain(default_model_path: str) -> LLM:
    return LLM(default_model_path, kv_cache_memory_bytes=KV)


@pytest.fixture(scope="module")
def spec(default_model_path: str) -> LLM:
    return LLM(default_model_path, kv_cache_memory_bytes=KV, speculative_config=NGRAM)


def same(a: LLM, b: LLM, prompts: list[str], sps: list[SamplingParams]) -> list[Any]:
    """Generates on both; asserts equal signatures; returns b's outputs."""
    x = a.generate(prompts, sps, use_tqdm=False)
    y = b.generate(prompts, sps, use_tqdm=False)
    for ox, oy in zip(x, y, strict=True):
        assert signature(ox) == signature(oy)
    return y


def test_speculative_config_is_validated(plain: LLM) -> None:
    bad = [
        ({"method": "ngram"}, "num_speculative_tokens"),
        ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens"),
        ({"method": "eagle", "num_speculative_tokens": 2}, "method"),
        ({"num_speculative_tokens": 2}, "method"),
        ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 0}, "prompt_lookup_min"),
        ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 3, "prompt_lookup_max": 2},
         "prompt_lookup_max"),
        ({"method": "ngram", "num_speculative_tokens": 2, "lookahead": 1}, "lookahead"),
        ({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 1},
         "disable_by_batch_size"),
        ({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 0},
         "disable_by_batch_size"),
        ({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": True},
         "disable_by_batch_size"),
        ({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": "8"},
         "disable_by_batch_size"),
        ({"model": "/no/such/draft", "num_speculative_tokens": 2}, "model"),
        ("{not json", "JSON"),
        ([1, 2], "dict"),
    ]  # fmt: skip
    for value, field in bad:
        with pytest.raises(ValueError, match=field):
            EngineArgs.from_kwargs(None, {"speculative_config": value})
    args = EngineArgs.from_kwargs(
        None, {"speculative_config": '{"method": "ngram", "num_speculative_tokens": 3}'}
    )
    from ossa.config import speculative_config_of

    c = speculative_config_of(args.speculative_config)
    assert (c.num_speculative_tokens, c.prompt_lookup_min, c.prompt_lookup_max) == (
        3,
        5,
        5,
    )  # vLLM's defaults
    c = speculative_config_of({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3})
    assert (c.prompt_lookup_min, c.prompt_lookup_max) == (3, 3)
    # disable_by_batch_size: absent, the measured default (the same in C++, the twin and the config);
    # None, never (0 in the engines).
    from ossa._native import core as _core
    from ossa.config import DEFAULT_DISABLE_BY_BATCH_SIZE
    from ossa.reference.engine import EngineConfig as TwinConfig

    assert c.disable_by_batch_size == DEFAULT_DISABLE_BY_BATCH_SIZE
    assert _core.EngineConfig().spec_disable_by_batch_size == DEFAULT_DISABLE_BY_BATCH_SIZE
    assert TwinConfig().spec_disable_by_batch_size == DEFAULT_DISABLE_BY_BATCH_SIZE
    assert speculative_config_of({**NGRAM, "disable_by_batch_size": None}).disable_by_batch_size == 0
    assert speculative_config_of({**NGRAM, "disable_by_batch_size": 5}).disable_by_batch_size == 5
    from ossa.reference.speculative import SpeculativeConfig as TwinSpec
    from ossa.reference.speculative import validate

    for bad_value in (1, -3):
        with pytest.raises(ValueError, match="disable_by_batch_size"):
            validate(TwinSpec("ngram", 2, 2, 2, bad_value))
        ec = _core.EngineConfig()
        for name, value in plain.config.engine_fields().items():
            setattr(ec, name, value)
        ec.spec_method, ec.num_speculative_tokens, ec.spec_disable_by_batch_size = "ngram", 2, bad_value
        with pytest.raises(ValueError, match="disable_by_batch_size"):
            _core.Engine(plain.model._handle, plain.tokenizer.core, ec)


def test_greedy_and_seeded_alone(plain: LLM, spec: LLM) -> None:
    sps = [
        SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True, logprobs=2),
        SamplingParams(temperature=0.8, top_p=0.95, seed=7, max_tokens=48, ignore_eos=True, logprobs=1),
        SamplingParams(temperature=1.0, top_k=40, seed=11, max_tokens=40, ignore_eos=True),
    ]
    before = accepted(spec)
    for prompt in COPY + FREE:
        for sp in sps:
            same(plain, spec, [prompt], [sp])
    assert accepted(spec) - before > 50


def crowd() -> tuple[list[str], list[SamplingParams]]:
    """32 requests: greedy and seeded, penalties, min_tokens with EOS, stop ids, stop strings, n > 1."""
    prompts, sps = [], []
    for i in range(32):
        prompts.append((COPY + FREE)[i % 5] + ("" if i < 5 else f" ({i})"))
        kind = i % 8
        if kind == 0:
            sp = SamplingParams(temperature=0.0, max_tokens=40, logprobs=1)
        elif kind == 1:
            sp = SamplingParams(temperature=0.7, seed=i, max_tokens=36, ignore_eos=True)
        elif kind == 2:
            sp = SamplingParams(temperature=0.0, max_tokens=32, repetition_penalty=1.2, frequency_penalty=0.3)
        elif kind == 3:
            sp = SamplingParams(temperature=0.9, seed=i, max_tokens=30, presence_penalty=0.5, min_tokens=12)
        elif kind == 4:
            sp = SamplingParams(temperature=0.0, max_tokens=40, stop=[" grapes", "return y"], logprobs=2)
        elif kind == 5:
            sp = SamplingParams(temperature=0.8, seed=i, max_tokens=28, n=2, logprobs=1)
        elif kind == 6:
            sp = SamplingParams(temperature=0.0, max_tokens=3 + i, stop_token_ids=[198], min_tokens=2)
        else:
            sp = SamplingParams(temperature=1.0, top_p=0.9, seed=i, max_tokens=25 + i % 7, ignore_eos=True)
        sps.append(sp)
    return prompts, sps


def test_among_32_requests(plain: LLM, spec: LLM) -> None:
    before = accepted(spec)
    same(plain, spec, *crowd())
    # In a batch of 32 a position must be right ~3 times in 4 to be worth verifying (SpecControl),
    # so fewer drafts are tried than alone; those tried still get accepted.
    assert accepted(spec) - before > 20


def test_chunked_prefill(plain: LLM, default_model_path: str) -> None:
    small = LLM(
        default_model_path, kv_cache_memory_bytes=KV, max_num_batched_tokens=16, speculative_config=NGRAM
    )
    prompts, sps = crowd()
    same(plain, small, prompts[:12], sps[:12])
    assert accepted(small) > 20


def test_forced_preemption(plain: LLM, default_model_path: str) -> None:
    # 23040 bytes a token (30 layers, 3 KV heads of 64, float16 K and V): 40 blocks of 16 tokens.
    tiny = LLM(
        default_model_path,
        kv_cache_memory_bytes=40 * 16 * 23040,
        max_model_len=256,
        speculative_config=NGRAM,
    )
    prompts, sps = crowd()
    same(plain, tiny, prompts[:16], sps[:16])
    st = tiny.stats()
    assert st["num_preemptions"] > 0 and st["spec_num_accepted_tokens"] > 20


def test_prefix_caching_over_speculated_blocks(plain: LLM, spec: LLM) -> None:
    # A second request whose prompt is the first one's prompt and output hits blocks whose K/V was
    # written by verification steps.
    sp = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    first = same(plain, spec, [COPY[0]], [sp])[0]
    hits = spec.stats()["prefix_hits"]
    follow = COPY[0] + first.outputs[0].text + "\n# again\n"
    second = same(plain, spec, [follow], [sp])[0]
    assert spec.stats()["prefix_hits"] - hits >= 64 and second.num_cached_tokens >= 64


def runs(llm: LLM, prompt: str, sp: SamplingParams) -> list[list[int]]:
    """The tokens each step appended to the request's (only) completion."""
    from ossa.input_processor import generation_params

    tok = llm.get_tokenizer()
    ids = tok.encode(prompt)
    e = llm.engine
    e.add_request(
        "runs",
        ids,
        generation_params(
            sp,
            prompt_len=len(ids),
            max_model_len=llm.max_model_len,
            eos_token_ids=tok.eos_token_ids,
            vocab_size=llm.model.config.n_vocab,
            backend=llm.backend,
        ),
    )
    steps = []
    while e.has_unfinished():
        for o in e.step():
            for d in o.completions:
                if d.token_ids:
                    steps.append(list(d.token_ids))
    return steps


def test_stops_inside_accepted_runs(plain: LLM, spec: LLM) -> None:
    """EOS / stop ids, stop strings, max_tokens and min_tokens that fall inside a run of accepted
    drafts end the request exactly where plain decoding ends it."""
    prompt = COPY[0]
    base = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    steps = runs(spec, prompt, base)
    tokens = [t for s in steps for t in s]
    # Output positions inside a run: not the first token of their step.
    inside = []
    pos = 0
    for s in steps:
        inside += list(range(pos + 1, pos + len(s)))
        pos += len(s)
    assert len(inside) > 10
    cut = [p for p in inside if tokens.index(tokens[p]) == p]  # the token's first occurrence
    assert cut
    p = cut[len(cut) // 2]
    tok = spec.get_tokenizer()
    text_before = tok.decode(tokens[:p])
    piece = tok.decode(tokens[: p + 1])[len(text_before) :]
    assert piece.strip()
    cases = [
        SamplingParams(temperature=0.0, max_tokens=64, stop_token_ids=[tokens[p]]),  # a stop id in a run
        SamplingParams(temperature=0.0, max_tokens=64, stop=[piece.strip()]),  # a stop string in a run
        SamplingParams(temperature=0.0, max_tokens=64, stop=[piece.strip()], include_stop_str_in_output=True),
        SamplingParams(temperature=0.0, max_tokens=inside[len(inside) // 2], ignore_eos=True),  # max_tokens
        SamplingParams(temperature=0.0, max_tokens=64, stop_token_ids=[tokens[p]], min_tokens=p + 3),
        SamplingParams(temperature=0.0, max_tokens=64, logprobs=3, stop_token_ids=[tokens[p]]),
    ]
    for sp in cases:
        out = same(plain, spec, [prompt], [sp])[0]
        # (min_tokens masks the stop id before it, which changes the path; it need not stop early)
        assert len(out.outputs[0].token_ids) < 64 or sp.min_tokens > 0
    # EOS ids take the same per-token check as stop ids (Scheduler::check_stop); test_scheduler's
    # speculative traces draw EOS inside accepted runs.


def test_n_greater_than_one(plain: LLM, spec: LLM) -> None:
    sps = [SamplingParams(temperature=0.8, seed=3, n=3, max_tokens=40, ignore_eos=True, logprobs=1)]
    before = accepted(spec)
    same(plain, spec, [COPY[2]], sps)
    same(plain, spec, [COPY[1]], [SamplingParams(temperature=0.0, n=2, max_tokens=40)])
    assert accepted(spec) > before


def test_request_metrics_count_drafts(spec: LLM) -> None:
    st0 = spec.stats()
    out = spec.generate(
        [COPY[2]], SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True), use_tqdm=False
    )[0]
    st = spec.stats()
    drafted = st["spec_num_draft_tokens"] - st0["spec_num_draft_tokens"]
    acc = st["spec_num_accepted_tokens"] - st0["spec_num_accepted_tokens"]
    assert 0 < acc <= drafted
    assert sum(st["spec_accepted_per_pos"]) == st["spec_num_accepted_tokens"]
    # Steps: fewer than tokens, since runs of accepted drafts take one step each.
    assert st["steps"] - st0["steps"] < len(out.outputs[0].token_ids)
    m = out.metrics
    assert m is not None
    assert (m.spec_num_draft_tokens, m.spec_num_accepted_tokens) == (drafted, acc)
    assert m.spec_num_drafts == st["spec_num_drafts"] - st0["spec_num_drafts"] > 0
    assert m.spec_acceptance_rate == acc / drafted
    assert m.spec_mean_accepted_length == 1 + acc / m.spec_num_drafts


def test_prometheus_spec_decode_counters(spec: LLM) -> None:
    from ossa.server.metrics import ServerMetrics

    spec.generate([COPY[1]], SamplingParams(temperature=0.0, max_tokens=24), use_tqdm=False)
    st = spec.stats()
    text = ServerMetrics(spec.stats, "m").render().decode()
    lines = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith("ossa:")
    }
    assert lines['ossa:spec_decode_num_draft_tokens_total{model_name="m"}'] == st["spec_num_draft_tokens"]
    assert (
        lines['ossa:spec_decode_num_accepted_tokens_total{model_name="m"}'] == st["spec_num_accepted_tokens"]
    )
    assert lines['ossa:spec_decode_num_drafts_total{model_name="m"}'] == st["spec_num_drafts"]
    assert (
        lines['ossa:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"}']
        == (st["spec_accepted_per_pos"][0])
    )
    rate = lines['ossa:spec_decode_acceptance_rate{model_name="m"}']
    assert rate == pytest.approx(st["spec_num_accepted_tokens"] / st["spec_num_draft_tokens"])


def engine_trace(llm: LLM, prompts: list[str], sps: list[SamplingParams]) -> list[Any]:
    """The engine's outputs step by step (test_engine.deltas) for prompts[i] under sps[i], all added at
    once to ``llm``'s engine."""
    from test_engine import deltas, params

    e = llm.engine
    tok = llm.get_tokenizer()
    for i, (p, sp) in enumerate(zip(prompts, sps, strict=True)):
        ids = tok.encode(p)
        e.add_request(f"t{i}", ids, params(llm, sp, len(ids)))
    trace = []
    while e.has_unfinished():
        trace.append(deltas(e.step()))
    return trace


def test_twin_matches_cpp_with_speculation(default_model_path: str) -> None:
    """backend="python" implements the same rule: the same outputs step for step, and drafts accepted."""
    kw = dict(
        kv_cache_memory_bytes=KV,
        max_num_batched_tokens=256,
        kv_cache_dtype="float32",
        speculative_config=NGRAM,
    )
    llms = [LLM(default_model_path, **kw), LLM(default_model_path, backend="python", **kw)]
    sps = [
        SamplingParams(temperature=0.0, max_tokens=24, logprobs=1),
        SamplingParams(temperature=0.8, seed=4, max_tokens=24, n=2, repetition_penalty=1.1),
    ]
    traces = []
    for llm in llms:
        traces.append(engine_trace(llm, [COPY[1], COPY[3]], sps))
        assert llm.stats()["spec_num_accepted_tokens"] > 10
    assert traces[0] == traces[1]
    keys = ("spec_num_drafts", "spec_num_draft_tokens", "spec_num_accepted_tokens", "spec_accepted_per_pos")
    assert [llms[0].stats()[k] for k in keys] == [llms[1].stats()[k] for k in keys]


def test_beside_prompt_logprobs_and_forks(plain: LLM, spec: LLM) -> None:
    """A verifying sequence in a step whose logits rows are remapped (another request's prompt
    logprobs, a fork) keeps its own rows: requests join while the first one verifies drafts."""
    from test_engine import params

    sps = {
        "a": (COPY[0], SamplingParams(temperature=0.0, max_tokens=48, logprobs=1)),
        "b": (COPY[3], SamplingParams(temperature=0.0, max_tokens=8, prompt_logprobs=2)),
        "c": (COPY[1], SamplingParams(temperature=0.7, seed=2, max_tokens=24, n=2)),
    }
    tok = spec.get_tokenizer()
    e = spec.engine
    before = accepted(spec)
    got: dict[tuple[str, int], list[int]] = {}

    def add(rid: str) -> None:
        ids = tok.encode(sps[rid][0])
        e.add_request(rid, ids, params(spec, sps[rid][1], len(ids)))

    add("a")
    for _ in range(6):
        outs = e.step()
        for o in outs:
            for d in o.completions:
                got.setdefault((o.request_id, d.index), []).extend(d.token_ids)
    assert accepted(spec) > before  # "a" verifies drafts when the others join
    add("b")
    add("c")
    while e.has_unfinished():
        for o in e.step():
            for d in o.completions:
                got.setdefault((o.request_id, d.index), []).extend(d.token_ids)
    for rid, (prompt, sp) in sps.items():
        ref = plain.generate([prompt], sp, use_tqdm=False)[0]
        for c in ref.outputs:
            assert got[(rid, c.index)] == list(c.token_ids)


@pytest.mark.parametrize("backend", ["cpp", "python"])
def test_disable_by_batch_size(plain: LLM, default_model_path: str, backend: str) -> None:
    """With more sequences running than disable_by_batch_size no child drafts (the draft counter stays
    put in the next step); once fewer run, drafts come back; tokens equal plain decoding throughout, and
    the twin follows the C++ engine step for step."""
    from test_engine import deltas, params

    spec_cfg = {**NGRAM, "disable_by_batch_size": 2}
    kw: dict[str, Any] = dict(kv_cache_memory_bytes=KV, max_num_batched_tokens=256, kv_cache_dtype="float32")
    llm = LLM(default_model_path, backend=backend, speculative_config=spec_cfg, **kw)
    sps = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True) for m in (6, 12, 40, 48)]
    e = llm.engine
    tok = llm.get_tokenizer()
    for i, (p, sp) in enumerate(zip(COPY, sps, strict=True)):
        ids = tok.encode(p)
        e.add_request(f"d{i}", ids, params(llm, sp, len(ids)))
    running, drafts, trace = [], [], []
    while e.has_unfinished():
        trace.append(deltas(e.step()))
        st = llm.stats()
        running.append(st["num_running"])
        drafts.append(st["spec_num_drafts"])
    assert max(running) == 4
    for t in range(len(running) - 1):
        if running[t] > 2:
            assert drafts[t + 1] == drafts[t], (t, running, drafts)
    assert drafts[-1] > 0 and accepted(llm) > 0  # drafts came back with 2 running
    assert any(r > 2 for r, d in zip(running, drafts, strict=True) if d == 0)
    # The same requests without speculation: the same tokens.
    same(plain, llm, COPY, sps)
    if backend == "python":
        ref = LLM(default_model_path, speculative_config=spec_cfg, **kw)
        for i, (p, sp) in enumerate(zip(COPY, sps, strict=True)):
            ids = tok.encode(p)
            ref.engine.add_request(f"d{i}", ids, params(ref, sp, len(ids)))
        ref_trace = []
        while ref.engine.has_unfinished():
            ref_trace.append(deltas(ref.engine.step()))
        assert ref_trace == trace
