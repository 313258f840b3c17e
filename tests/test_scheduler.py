"""Scheduler: the C++ core against its Python twin, step by step, on random traces, with invariants.

The traces are generated from a seed (hypothesis picks the seed and the configuration): arrivals with
shared prefixes, prompt and output lengths, EOS / stop ids, min_tokens, n > 1, priorities, aborts and
stop-string finishes at any time (also between schedule() and update()), and pools small enough to
force preemption. After every step both implementations must agree on everything they report, and:

- each block is free or held, with a ref count equal to the number of block tables holding it, and
  free + held = all blocks;
- a simulated KV memory (each batch writes (token, position) into its slots, block copies applied
  first) holds, for every scheduled sequence, exactly its tokens at every position it attends to; this
  checks prefix hits, forks, copy-on-write and preemption end to end;
- the batch is well formed (budget, caps, positions, logits rows);
- when every request has finished or been aborted, every block is free, every time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ossa.reference import batch_builder as ref_batch
from ossa.reference import scheduler as ref

core = pytest.importorskip("ossa._native").core

# What the scheduler reports, and the model's batch the engine builds from it (engine/batch_builder).
OUTPUT_FIELDS = (
    "seqs",
    "num_draft",
    "drafts",
    "block_table_start",
    "block_tables",
    "num_tokens",
    "num_samples",
    "block_copies",
    "preempted",
    "finished_requests",
    "state_slots",
    "state_copies",
)
BATCH_FIELDS = (
    "token_ids",
    "positions",
    "slot_mapping",
    "seq_start",
    "context_len",
    "block_table_start",
    "block_tables",
    "logits_rows",
    "state_slots",
)
STATS_FIELDS = (
    "num_running",
    "num_waiting",
    "kv_usage_percent",
    "prefix_queries",
    "prefix_hits",
    "num_preemptions",
)
EOS = 1
VOCAB = 40


def batch_of(out: Any, block_size: int) -> Any:
    """The batch built from a scheduler output, by the builder of the same side."""
    if isinstance(out, ref.SchedulerOutput):
        return ref_batch.build_batch(out, block_size)
    return core.build_batch(out, block_size)


def _plain(v: Any) -> Any:
    return [tuple(x) if isinstance(x, tuple | list) else x for x in v] if isinstance(v, list) else v


def output_dict(out: Any, batch: Any) -> dict[str, Any]:
    d = {name: _plain(getattr(out, name)) for name in OUTPUT_FIELDS}
    d.update({f"batch.{name}": _plain(getattr(batch, name)) for name in BATCH_FIELDS})
    return d


def stats_tuple(s: Any) -> tuple:
    return tuple(getattr(s.stats(), name) for name in STATS_FIELDS)


def make_pair(config: dict) -> tuple[Any, Any]:
    return core.Scheduler(core.SchedulerConfig(**config)), ref.Scheduler(ref.SchedulerConfig(**config))


def add_both(cpp: Any, twin: Any, **kw: Any) -> bool:
    """Adds a request to both; True when accepted, False when both reject it with ValueError."""
    errors = []
    for sched, request_type in ((cpp, core.Request), (twin, ref.Request)):
        try:
            sched.add_request(request_type(**kw))
            errors.append(None)
        except ValueError as e:
            errors.append(str(e))
    assert errors[0] == errors[1]
    return errors[0] is None


@dataclass
class KVModel:
    """The K/V memory as the model runner would fill it: slot -> (token, position)."""

    block_size: int
    slots: dict[int, tuple[int, int]] = field(default_factory=dict)

    def apply(self, out: Any, batch: Any) -> None:
        bs = self.block_size
        for src, dst in out.block_copies:
            for i in range(bs):
                if src * bs + i in self.slots:
                    self.slots[dst * bs + i] = self.slots[src * bs + i]
                else:
                    self.slots.pop(dst * bs + i, None)
        for tok, pos, slot in zip(batch.token_ids, batch.positions, batch.slot_mapping, strict=True):
            self.slots[slot] = (tok, pos)


@dataclass
class StateModel:
    """Recurrent state slots as the model runner would fill them: slot -> the tokens its state has
    taken in. A scheduled sequence's slot must hold exactly its computed tokens (or start from zero at
    position 0); a fork's child starts from a copy of its parent's."""

    slots: dict[int, list[int]] = field(default_factory=dict)

    def apply(self, out: Any, batch: Any, expected: dict[tuple[int, int], list[int]], num_slots: int) -> None:
        for src, dst in out.state_copies:
            self.slots[dst] = list(self.slots.get(src, []))
        if not num_slots:
            assert list(out.state_slots) == [-1] * len(out.seqs) and not list(batch.state_slots)
            return
        assert list(batch.state_slots) == list(out.state_slots)
        assert len(set(out.state_slots)) == len(out.seqs)  # distinct within a step
        for (rid, child, num_computed, num_tokens, _), slot in zip(out.seqs, out.state_slots, strict=True):
            assert 0 <= slot < num_slots
            tokens = expected[(rid, child)]
            if num_computed == 0:
                self.slots[slot] = []
            assert self.slots.get(slot) == tokens[:num_computed], (rid, child, slot)
            self.slots[slot] = tokens[: num_computed + num_tokens]


def check_batch(
    out: Any,
    batch: Any,
    config: dict,
    expected: dict[tuple[int, int], list[int]],
    kv: KVModel,
    drafts: dict[tuple[int, int], list[int]] | None = None,
) -> None:
    bs = config["block_size"]
    n_seqs = len(out.seqs)
    assert list(batch.block_tables) == list(out.block_tables)
    assert list(batch.block_table_start) == list(out.block_table_start)
    assert out.num_tokens == len(batch.token_ids) and out.num_samples == len(batch.logits_rows)
    assert len(batch.seq_start) == n_seqs + 1 and len(batch.context_len) == n_seqs
    assert len(batch.token_ids) <= config["max_num_batched_tokens"]
    assert n_seqs <= config["max_num_seqs"]
    assert list(batch.logits_rows) == sorted(batch.logits_rows)
    rows = []
    for i, (rid, child, num_computed, num_tokens, num_samples) in enumerate(out.seqs):
        a, b = batch.seq_start[i], batch.seq_start[i + 1]
        assert b - a == num_tokens > 0
        assert list(batch.positions[a:b]) == list(range(num_computed, num_computed + num_tokens))
        assert batch.context_len[i] == num_computed + num_tokens
        table = batch.block_tables[batch.block_table_start[i] : batch.block_table_start[i + 1]]
        assert len(table) == -(-batch.context_len[i] // bs)
        tokens = expected[(rid, child)]
        nd = out.num_draft[i]
        if nd:  # verifying a draft: the last token then d1..d_nd, a logits row at each
            assert (
                drafts is not None and num_computed + 1 == len(tokens) and num_tokens == nd + 1 == num_samples
            )
            tokens = tokens + drafts[(rid, child)][:nd]
            rows += list(range(a, b))
        assert list(batch.token_ids[a:b]) == tokens[num_computed : num_computed + num_tokens]
        if num_samples and not nd:
            assert num_computed + num_tokens == len(tokens)
            rows += [b - 1] * num_samples
        # Every position this sequence attends to holds its own token (prefix hits, forks, copies).
        for p in range(batch.context_len[i]):
            assert kv.slots.get(table[p // bs] * bs + p % bs) == (tokens[p], p), (rid, child, p)
    assert list(batch.logits_rows) == rows


def check_blocks(sched: Any, config: dict, live: set[tuple[int, int]]) -> None:
    refs = sched.ref_counts()
    counts = [0] * config["num_blocks"]
    for rid, child in live:
        for b in sched.block_table(rid, child):
            counts[b] += 1
    assert refs == counts
    free = sched.free_queue()
    assert sorted(free) == [b for b in range(config["num_blocks"]) if refs[b] == 0]
    assert len(free) + sum(1 for r in refs if r) == config["num_blocks"]


def random_config(rng: random.Random) -> dict:
    block_size = rng.choice([1, 2, 4, 8, 16])
    max_model_len = rng.randint(4, 80)
    watermark = rng.choice([0.0, 0.0, 0.05, 0.1])
    need = -(-max_model_len // block_size)
    num_blocks = need + rng.choice([0, 0, 1, 2, 3, 5, 20, 60])
    while int(watermark * num_blocks) + need > num_blocks:
        num_blocks += 1
    return dict(
        num_blocks=num_blocks,
        block_size=block_size,
        max_num_batched_tokens=rng.choice([1, 3, 8, 16, 64, 256]),
        max_num_seqs=rng.choice([1, 2, 4, 8, 32]),
        max_model_len=max_model_len,
        policy=rng.choice(["fcfs", "priority"]),
        enable_prefix_caching=rng.random() < 0.8,
        watermark=watermark,
    )


def random_request(rng: random.Random, rid: int, config: dict, prefixes: list[list[int]]) -> dict:
    limit = config["max_model_len"]
    if rng.random() < 0.05:
        length = rng.randint(limit, limit + 5)  # never fits: rejected at admission
    else:
        length = rng.randint(1, max(1, min(limit - 1, rng.choice([4, 16, 48]))))
    prompt = list(rng.choice(prefixes))[:length] if rng.random() < 0.7 else []
    prompt += [rng.randrange(2, VOCAB) for _ in range(length - len(prompt))]
    max_tokens = rng.randint(1, 24)
    return dict(
        id=rid,
        prompt=prompt,
        max_tokens=max_tokens,
        min_tokens=rng.choice([0, 0, rng.randint(0, max_tokens)]),
        eos_token_ids=[EOS],
        stop_token_ids=rng.choice([[], [7], [7, 9]]),
        ignore_eos=rng.random() < 0.2,
        n=rng.choice([1, 1, 1, 2, 3]),
        priority=rng.randint(0, 3),
        cache_salt=rng.choice([0, 0, 0, 5]),
    )


def run_trace(
    seed: int, config: dict | None = None, speculate: bool = False, state_slots: bool = False
) -> dict[str, int]:
    rng = random.Random(seed)
    config = config or random_config(rng)
    if state_slots:  # a model with recurrent layers: a few slots, no prefix caching
        config = dict(config, num_state_slots=rng.choice([1, 2, 3, 5]), enable_prefix_caching=False)
    states = StateModel()
    max_arrivals = rng.randint(1, 30)
    p_arrival = rng.choice([0.2, 0.5, 0.8])
    cpp, twin = make_pair(config)
    kv = KVModel(config["block_size"])
    prefixes = [[rng.randrange(2, VOCAB) for _ in range(80)] for _ in range(3)]
    expected: dict[tuple[int, int], list[int]] = {}  # live children: their tokens as fed
    n_of: dict[int, int] = {}
    next_id = 0
    arrivals = 0
    facts = {"steps": 0, "preempted": 0, "copies": 0, "hits": 0, "finished": 0, "verified": 0, "accepted": 0,
             "state_copies": 0}  # fmt: skip
    drafts: dict[tuple[int, int], list[int]] = {}  # speculate: the draft each live child was given

    def random_cancel() -> None:
        if not n_of or rng.random() > 0.06:
            return
        rid = rng.choice(sorted(n_of) + [10**6])
        if rng.random() < 0.5:
            assert cpp.abort(rid) == twin.abort(rid)
            for key in [k for k in expected if k[0] == rid]:
                del expected[key]
            n_of.pop(rid, None)
        else:
            child = rng.randrange(n_of.get(rid, 1))
            ok = cpp.finish(rid, child)
            assert ok == twin.finish(rid, child)
            assert ok == ((rid, child) in expected)
            expected.pop((rid, child), None)
            if ok and not any(k[0] == rid for k in expected):
                n_of.pop(rid)

    for step in range(3000):
        while arrivals < max_arrivals and rng.random() < p_arrival:
            kw = random_request(rng, next_id, config, prefixes)
            next_id += 1
            arrivals += 1
            if add_both(cpp, twin, **kw):
                expected[(kw["id"], 0)] = list(kw["prompt"])
                n_of[kw["id"]] = kw["n"]
        random_cancel()
        if arrivals >= max_arrivals and not cpp.has_unfinished():
            break
        out_c, out_t = cpp.schedule(), twin.schedule()
        batch_c = batch_of(out_c, config["block_size"])
        d = output_dict(out_c, batch_c)
        assert d == output_dict(out_t, batch_of(out_t, config["block_size"])), f"step {step}"
        facts["steps"] += 1
        facts["preempted"] += len(d["preempted"])
        facts["copies"] += len(d["block_copies"])
        facts["state_copies"] += len(d["state_copies"])
        kv.apply(out_c, batch_c)
        check_batch(out_c, batch_c, config, expected, kv, drafts)
        states.apply(out_c, batch_c, expected, config.get("num_state_slots", 0))
        for rid, child, *_ in d["seqs"]:
            drafts.pop((rid, child), None)  # a scheduled child's draft is used or dropped
        for key in [k for k in drafts if (k[0], k[1]) in set(out_c.preempted)]:
            del drafts[key]
        random_cancel()  # abort / finish between schedule() and update()
        sampled = [EOS if rng.random() < 0.1 else rng.randrange(2, VOCAB) for _ in d["batch.logits_rows"]]
        row = 0
        for i, (_, _, _, _, num_samples) in enumerate(d["seqs"]):
            nd = d["num_draft"][i]
            if nd:  # rows that mostly draw the draft, so that runs get accepted
                draft = batch_c.token_ids[batch_c.seq_start[i] + 1 : batch_c.seq_start[i] + 1 + nd]
                for j in range(nd):
                    if rng.random() < 0.75:
                        sampled[row + j] = draft[j]
            row += num_samples
        if d["seqs"]:
            events = cpp.update(sampled)
            assert [tuple(e) for e in events] == [tuple(e) for e in twin.update(sampled)]
        else:
            assert not sampled
            events = []
        row = 0
        appended = list(out_c.num_appended) if d["seqs"] else []
        assert appended == (list(out_t.num_appended) if d["seqs"] else [])
        for i, (rid, child, _, _, num_samples) in enumerate(d["seqs"]):
            if d["num_draft"][i]:
                facts["verified"] += 1
                facts["accepted"] += max(0, appended[i] - 1)
                if (rid, child) in expected:
                    expected[(rid, child)].extend(sampled[row : row + appended[i]])
                row += num_samples
                continue
            if (rid, child) in expected:
                base = expected[(rid, child)]
                for k in range(num_samples):
                    expected[(rid, child + k)] = base + [sampled[row + k]] if k else base
                base.append(sampled[row]) if num_samples else None
            row += num_samples
        for rid, child, reason, stop_token, request_done in events:
            tokens = expected.pop((rid, child))
            assert reason in ("stop", "length")
            assert (stop_token == tokens[-1]) if reason == "stop" else stop_token == -1
            assert request_done == (not any(k[0] == rid for k in expected))
            if request_done:
                n_of.pop(rid)
            facts["finished"] += 1
        for key, tokens in expected.items():
            assert cpp.tokens(*key) == tokens == twin.tokens(*key)
        if speculate:
            for key in sorted(expected):
                if rng.random() < 0.5:
                    draft = [rng.randrange(2, VOCAB) for _ in range(rng.randint(1, 5))]
                    assert cpp.set_draft(*key, draft) and twin.set_draft(*key, draft)
                    drafts[key] = draft
        assert cpp.running() == twin.running() and cpp.waiting() == twin.waiting()
        assert cpp.ref_counts() == twin.ref_counts()
        assert cpp.free_queue() == twin.free_queue()
        assert cpp.cached_blocks() == twin.cached_blocks()
        assert stats_tuple(cpp) == stats_tuple(twin)
        check_blocks(cpp, config, set(expected))
    else:
        pytest.fail("requests did not finish within 3000 steps")
    # Everything finished or aborted: no leak.
    assert not expected and not twin.has_unfinished()
    assert sorted(cpp.free_queue()) == list(range(config["num_blocks"]))
    assert cpp.ref_counts() == [0] * config["num_blocks"]
    assert cpp.stats().kv_usage_percent == 0.0
    facts["hits"] = cpp.stats().prefix_hits
    return facts


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_random_traces_cpp_equals_twin(seed: int) -> None:
    run_trace(seed)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_random_state_slot_traces_cpp_equals_twin(seed: int) -> None:
    """Models with recurrent state: each scheduled sequence's slot holds exactly its computed tokens
    (zero at position 0, a copy of the parent's after a fork), slots distinct within a step, the C++
    scheduler equal to its twin; requests with n above the slots are refused by both."""
    run_trace(seed, state_slots=True)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_random_speculative_traces_cpp_equals_twin(seed: int) -> None:
    """Drafts on random children, rows that mostly draw them: the same batches, accepted runs, stop
    events, block tables and prefix cache on both sides, and every attended slot holds its token."""
    run_trace(seed, speculate=True)


def test_speculative_traces_verify_and_accept() -> None:
    totals = {"verified": 0, "accepted": 0, "preempted": 0, "hits": 0}
    for seed in range(30):
        facts = run_trace(seed, speculate=True)
        for k in totals:
            totals[k] += facts[k]
    assert all(v > 0 for v in totals.values()), totals


def test_traces_exercise_preemption_forks_and_hits() -> None:
    # The random traces must actually reach the interesting paths, or the test above proves little.
    totals = {"preempted": 0, "copies": 0, "hits": 0, "finished": 0}
    for seed in range(40):
        facts = run_trace(seed)
        for k in totals:
            totals[k] += facts[k]
    assert all(v > 0 for v in totals.values()), totals
    state = {"preempted": 0, "state_copies": 0, "finished": 0}
    for seed in range(40):
        facts = run_trace(seed, state_slots=True)
        for k in state:
            state[k] += facts[k]
    assert all(v > 0 for v in state.values()), state


# -- directed behaviour, on both implementations ---------------------------------------------------

IMPLS = {
    "cpp": (core.Scheduler, core.SchedulerConfig, core.Request),
    "twin": (ref.Scheduler, ref.SchedulerConfig, ref.Request),
}


@pytest.fixture(params=sorted(IMPLS))
def impl(request: pytest.FixtureRequest) -> tuple[Any, Any, Any]:
    return IMPLS[request.param]


def new_sched(impl: tuple[Any, Any, Any], **config: Any) -> tuple[Any, Any]:
    sched_type, config_type, request_type = impl
    return sched_type(config_type(**config)), request_type


def step(sched: Any, token: int = 5) -> tuple[Any, list]:
    out = sched.schedule()
    events = [tuple(e) for e in sched.update([token] * out.num_samples)] if out.seqs else []
    return out, events


def test_rejects_requests_that_can_never_fit(impl: tuple) -> None:
    sched, Request = new_sched(impl, num_blocks=8, block_size=4, max_model_len=20, watermark=0.0)
    with pytest.raises(ValueError, match="max_model_len=20"):
        sched.add_request(Request(id=1, prompt=[3] * 20))
    sched.add_request(Request(id=2, prompt=[3] * 19))  # 19 + 1 tokens fit exactly
    with pytest.raises(ValueError, match="already in use"):
        sched.add_request(Request(id=2, prompt=[3]))
    for bad in (dict(prompt=[]), dict(prompt=[-1]), dict(prompt=[3], max_tokens=0), dict(prompt=[3], n=0)):
        with pytest.raises(ValueError):
            sched.add_request(Request(id=9, **bad))
    with pytest.raises(ValueError, match="min_tokens"):
        sched.add_request(Request(id=9, prompt=[3], max_tokens=2, min_tokens=3))
    assert sched.stats().num_waiting == 1


def test_rejects_a_cache_smaller_than_one_sequence(impl: tuple) -> None:
    sched_type, config_type, _ = impl
    with pytest.raises(ValueError, match="cannot hold one sequence"):
        sched_type(config_type(num_blocks=4, block_size=4, max_model_len=17, watermark=0.0))
    with pytest.raises(ValueError, match="policy"):
        sched_type(config_type(num_blocks=4, policy="lifo"))


def test_chunked_prefill_then_decode(impl: tuple) -> None:
    sched, Request = new_sched(impl, num_blocks=16, block_size=4, max_num_batched_tokens=5, max_model_len=40)
    sched.add_request(Request(id=7, prompt=list(range(10, 22)), max_tokens=2))
    chunks = []
    while sched.has_unfinished():
        out, events = step(sched)
        batch = batch_of(out, 4)
        chunks.append((list(batch.positions), list(batch.logits_rows), events))
    assert chunks == [
        ([0, 1, 2, 3, 4], [], []),
        ([5, 6, 7, 8, 9], [], []),
        ([10, 11], [1], []),
        ([12], [0], [(7, 0, "length", -1, True)]),
    ]


def test_stop_conditions(impl: tuple) -> None:
    sched, Request = new_sched(impl, num_blocks=32, block_size=4, max_model_len=12)
    sched.add_request(Request(id=1, prompt=[3], eos_token_ids=[5], min_tokens=2, max_tokens=9))
    sched.add_request(Request(id=2, prompt=[3], eos_token_ids=[5], ignore_eos=True, max_tokens=3))
    sched.add_request(Request(id=3, prompt=[3], stop_token_ids=[5], max_tokens=9))
    sched.add_request(Request(id=4, prompt=[3] * 9, max_tokens=9))  # stopped by max_model_len
    events = []
    while sched.has_unfinished():
        events += step(sched, token=5)[1]
    assert sorted(events) == [
        (1, 0, "stop", 5, True),
        (2, 0, "length", -1, True),
        (3, 0, "stop", 5, True),
        (4, 0, "length", -1, True),
    ]
    assert [e[0] for e in events] == [3, 1, 2, 4]  # 3 stops at once, 1 after min_tokens, 2 and 4 by length


def test_priority_policy_orders_admission(impl: tuple) -> None:
    sched, Request = new_sched(
        impl, num_blocks=32, block_size=4, max_num_seqs=1, max_model_len=32, policy="priority"
    )
    for rid, prio in ((1, 5), (2, 0), (3, 5), (4, -1)):
        sched.add_request(Request(id=rid, prompt=[3, 4], max_tokens=1, priority=prio))
    order = []
    while sched.has_unfinished():
        order += [e[0] for e in step(sched)[1]]
    assert order == [4, 2, 1, 3]


def test_preemption_by_recompute_of_the_latest(impl: tuple) -> None:
    # 6 blocks of 2 tokens: two requests fill the pool while decoding, the later one is preempted.
    sched, Request = new_sched(impl, num_blocks=6, block_size=2, max_model_len=12, watermark=0.0)
    sched.add_request(Request(id=1, prompt=[3, 4, 5], max_tokens=8))
    sched.add_request(Request(id=2, prompt=[6, 7, 8], max_tokens=8))
    preempted, finished = [], []
    for _ in range(100):
        if not sched.has_unfinished():
            break
        out, events = step(sched)
        preempted += list(out.preempted)
        finished += [e[0] for e in events]
    assert preempted and set(preempted) == {(2, 0)}
    assert finished == [1, 2]
    assert sched.stats().num_preemptions == len(preempted)
    assert sorted(sched.free_queue()) == list(range(6))


def test_fork_shares_prompt_and_copies_the_partial_block(impl: tuple) -> None:
    sched, Request = new_sched(
        impl, num_blocks=16, block_size=4, max_model_len=32, enable_prefix_caching=False
    )
    sched.add_request(Request(id=1, prompt=[3] * 6, max_tokens=2, n=3))
    out, _ = step(sched)
    assert list(batch_of(out, 4).logits_rows) == [5, 5, 5]  # one row per child, same logits
    assert [tuple(s) for s in out.seqs] == [(1, 0, 0, 6, 3)]
    tables = [sched.block_table(1, c) for c in range(3)]
    assert tables[0] == tables[1] == tables[2] == [0, 1]
    assert sched.ref_counts()[:2] == [3, 3]
    out = sched.schedule()
    # Children 0 and 1 write position 6 into shared block 1 and get private copies; child 2 keeps it.
    assert list(out.block_copies) == [(1, 2), (1, 3)]
    assert [sched.block_table(1, c) for c in range(3)] == [[0, 2], [0, 3], [0, 1]]
    assert list(batch_of(out, 4).slot_mapping) == [2 * 4 + 2, 3 * 4 + 2, 1 * 4 + 2]
    events = sched.update([8, 9, 10])
    assert [tuple(e) for e in events] == [
        (1, 0, "length", -1, False),
        (1, 1, "length", -1, False),
        (1, 2, "length", -1, True),
    ]
    assert sorted(sched.free_queue()) == list(range(16))


def test_prefix_hit_skips_cached_blocks(impl: tuple) -> None:
    sched, Request = new_sched(impl, num_blocks=16, block_size=4, max_model_len=32)
    sched.add_request(Request(id=1, prompt=list(range(2, 12)), max_tokens=1))
    step(sched)
    sched.add_request(Request(id=2, prompt=list(range(2, 12)) + [40], max_tokens=1))
    sched.add_request(Request(id=3, prompt=list(range(2, 10)), max_tokens=1))  # all 8 cached: recompute 4
    sched.add_request(Request(id=4, prompt=list(range(2, 12)), max_tokens=1, cache_salt=1))
    out = sched.schedule()
    assert [s[2] for s in out.seqs] == [8, 4, 0]  # num_computed from the cache
    s = sched.stats()
    assert (s.prefix_queries, s.prefix_hits) == (10 + 11 + 8 + 10, 8 + 4)


def test_abort_and_finish_in_every_state(impl: tuple) -> None:
    sched, Request = new_sched(impl, num_blocks=16, block_size=4, max_num_seqs=2, max_model_len=32)
    for rid in range(4):
        sched.add_request(Request(id=rid, prompt=[3] * 5, max_tokens=50, n=2 if rid == 1 else 1))
    step(sched)
    assert sched.running() == [(0, 0), (1, 0), (1, 1)] and sched.waiting() == [(2, 0), (3, 0)]
    assert sched.abort(3) and not sched.abort(3)  # waiting
    assert sched.finish(1, 1) and not sched.finish(1, 1)  # one running child
    out = sched.schedule()
    assert list(out.finished_requests) == [3]
    assert sched.abort(0)  # scheduled, between schedule() and update()
    assert sched.finish(1, 0)
    assert sched.update([5] * out.num_samples) == []
    assert sched.running() == [] and sched.waiting() == [(2, 0)]
    out = sched.schedule()
    assert sorted(out.finished_requests) == [0, 1]
    assert [s[0] for s in out.seqs] == [2]
    assert sched.abort(2) and not sched.has_unfinished()
    assert list(sched.update([5] * out.num_samples)) == []
    assert sorted(sched.free_queue()) == list(range(16))


def test_step_protocol_errors(impl: tuple) -> None:
    sched, Request = new_sched(impl, num_blocks=16, block_size=4, max_model_len=32)
    with pytest.raises(ValueError, match="without a scheduled step"):
        sched.update([])
    assert list(batch_of(sched.schedule(), 4).token_ids) == []  # nothing to do: no update needed
    sched.add_request(Request(id=1, prompt=[3, 4], max_tokens=2))
    sched.schedule()
    with pytest.raises(ValueError, match="before update"):
        sched.schedule()
    with pytest.raises(ValueError, match="expects 1 sampled"):
        sched.update([1, 2])
    with pytest.raises(ValueError, match=">= 0"):
        sched.update([-3])
    assert list(sched.update([4])) == []  # the errors left the step intact
