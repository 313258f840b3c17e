"""Python twin of ``csrc/scheduler/scheduler``: continuous batching by token counts.

No prefill and decode phases: every running sequence has ``num_computed`` tokens catching up to its
``num_tokens``. Each step fills a token budget and a sequence cap, running sequences first in policy
order, then waiting ones without skipping (not in a step that had to preempt); long prompts are
split across steps. fcfs orders by (arrival, child), priority by (priority, arrival, child); both
lists keep that order, so the sequence preempted when blocks run out is the last running one, and
it re-enters the waiting list ahead of everything ordered after it. Preemption is by recompute.

Step protocol: ``out = schedule()``; the engine copies ``out.block_copies``, builds the model's batch
from ``out`` (``batch_builder``), runs the forward and samples ``out.num_samples`` tokens, each
sequence's in order; ``update(tokens)``. A sequence that forks this step samples n tokens, one per
child, from its last token's logits.

Speculative decoding: a decoding sequence with a draft d1..dk (``set_draft``) is scheduled as the
k + 1 positions [last token, d1..dk] with a logits row at each (k shrunk to the budget and
max_model_len, and to 0 when its blocks would not fit without preempting); ``update`` appends row i's
token, checks the stop conditions, and goes on only while it equals d(i+1). ``num_computed`` advances
over the positions whose input token was right, so rejected drafts never reach the prefix cache.

Recurrent state (``num_state_slots`` > 0: models with delta-net layers): a sequence holds one of the
slots while running, taken at admission with n - 1 more for the children it will fork, given back when
it finishes, is aborted or preempted; a waiting sequence is admitted only when its slots are free. A
fork's children take the reserved slots, and the next ``schedule()`` lists (parent slot, child slot) in
``state_copies``. Prefix caching and drafts are refused with such state.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field

from .kv_cache_manager import KVCacheManager, watermark_blocks_for
from .request import ContractError, FinishEvent, Request, SeqStatus, Sequence


@dataclass
class SchedulerConfig:
    num_blocks: int
    block_size: int = 16
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    max_model_len: int = 2048
    policy: str = "fcfs"  # "fcfs" or "priority"
    enable_prefix_caching: bool = True
    watermark: float = 0.01  # fraction of blocks kept free when admitting waiting sequences
    num_state_slots: int = 0  # recurrent state slots (0: a model without recurrent layers)


@dataclass
class SchedulerOutput:
    """One step, per sequence (as ``ossa::SchedulerOutput``): positions, tokens and draft, block
    table, samples; ``batch_builder.build_batch`` turns it into the model's batch."""

    # (request_id, child, num_computed before, num_tokens scheduled, num_samples) per sequence
    seqs: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    block_table_start: list[int] = field(default_factory=lambda: [0])
    block_tables: list[int] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)  # each sequence's tokens, valid until update()
    drafts: list[list[int]] = field(default_factory=list)  # the draft each sequence verifies
    num_tokens: int = 0  # positions scheduled, all sequences
    num_samples: int = 0  # tokens update() expects
    block_copies: list[tuple[int, int]] = field(default_factory=list)
    preempted: list[tuple[int, int]] = field(default_factory=list)
    finished_requests: list[int] = field(default_factory=list)
    # (seq slot, generation) per sequence, for update()
    scheduled: list[tuple[int, int]] = field(default_factory=list)
    num_draft: list[int] = field(default_factory=list)  # draft tokens each sequence verifies
    num_appended: list[int] = field(default_factory=list)  # set by update() for verifying ones
    state_slots: list[int] = field(default_factory=list)  # each sequence's state slot (-1: none)
    state_copies: list[tuple[int, int]] = field(default_factory=list)  # (src, dst) slots, before the forward

    def block_table(self, si: int) -> list[int]:
        return self.block_tables[self.block_table_start[si] : self.block_table_start[si + 1]]


@dataclass
class SchedulerStats:
    num_running: int
    num_waiting: int
    kv_usage_percent: float
    prefix_queries: int
    prefix_hits: int
    num_preemptions: int


@dataclass
class _RequestState:
    params: Request
    arrival: int
    num_live: int
    child_seq: list[int]  # seq slot per child, -1 when finished or not yet forked


def _validated(c: SchedulerConfig) -> SchedulerConfig:
    if c.block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {c.block_size}")
    if c.num_blocks < 1:
        raise ValueError(f"num_blocks must be >= 1, got {c.num_blocks}")
    if c.max_num_batched_tokens < 1:
        raise ValueError(f"max_num_batched_tokens must be >= 1, got {c.max_num_batched_tokens}")
    if c.max_num_seqs < 1:
        raise ValueError(f"max_num_seqs must be >= 1, got {c.max_num_seqs}")
    if c.max_model_len < 2:
        raise ValueError(f"max_model_len must be >= 2, got {c.max_model_len}")
    if c.policy not in ("fcfs", "priority"):
        raise ValueError(f"policy must be 'fcfs' or 'priority', got {c.policy!r}")
    if not 0.0 <= c.watermark < 1.0:
        raise ValueError(f"watermark must be in [0, 1), got {c.watermark}")
    if c.num_state_slots < 0:
        raise ValueError(f"num_state_slots must be >= 0, got {c.num_state_slots}")
    if c.num_state_slots > 0 and c.enable_prefix_caching:
        raise ValueError("prefix caching is not supported with recurrent state (num_state_slots > 0)")
    wm = watermark_blocks_for(c.watermark, c.num_blocks)
    need = (c.max_model_len + c.block_size - 1) // c.block_size
    if need + wm > c.num_blocks:
        raise ValueError(
            f"the KV cache ({c.num_blocks} blocks of {c.block_size} tokens, {wm} kept free) cannot hold one "
            f"sequence of max_model_len={c.max_model_len} tokens; lower max_model_len or give the cache "
            "more memory"
        )
    return c


class Scheduler:
    """Continuous-batching scheduler over a paged KV cache (the twin of ``ossa::Scheduler``)."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = _validated(config)
        self.kv = KVCacheManager(
            config.num_blocks, config.block_size, config.enable_prefix_caching, config.watermark
        )
        self._requests: list[_RequestState | None] = []
        self._free_requests: list[int] = []
        self._request_index: dict[int, int] = {}
        self._seqs: list[Sequence] = []
        self._free_seqs: list[int] = []
        self._running: list[int] = []
        self._waiting: list[int] = []
        self._next_arrival = 0
        self._num_preemptions = 0
        self._update_pending = False
        self._out = SchedulerOutput()
        self._finished_since_schedule: list[int] = []
        self._free_state_slots = list(range(config.num_state_slots - 1, -1, -1))  # taken from the back
        self._pending_state_copies: list[tuple[int, int]] = []

    def _release_state(self, s: Sequence) -> None:
        if s.state_slot >= 0:
            self._free_state_slots.append(s.state_slot)
        self._free_state_slots.extend(s.reserved_slots)
        s.state_slot = -1
        s.reserved_slots = []

    # -- ordering ---------------------------------------------------------------------------------

    def _key(self, sid: int) -> tuple[int, int, int]:
        s = self._seqs[sid]
        r = self._requests[s.request]
        assert r is not None
        priority = r.params.priority if self.config.policy == "priority" else 0
        return (priority, r.arrival, s.child)

    def _insert_sorted(self, lst: list[int], sid: int) -> None:
        bisect.insort_right(lst, sid, key=self._key)

    # -- requests ---------------------------------------------------------------------------------

    def _new_seq(self, request: int, child: int) -> int:
        if self._free_seqs:
            sid = self._free_seqs.pop()
        else:
            sid = len(self._seqs)
            self._seqs.append(Sequence())
        s = self._seqs[sid]
        s.request = request
        s.child = child
        s.generation += 1
        s.status = SeqStatus.WAITING
        s.pending_fork = False
        s.tokens = []
        s.num_prompt_tokens = 0
        s.num_computed = 0
        s.num_output = 0
        s.draft = []
        s.state_slot = -1
        s.reserved_slots = []
        return sid

    def check_request(self, prompt: list[int], max_tokens: int, min_tokens: int, n: int) -> None:
        """add_request's contract for a request's shape (ContractError naming what is broken)."""
        if not prompt:
            raise ContractError("the prompt must hold at least one token")
        for t in prompt:
            if t < 0:
                raise ContractError(f"prompt token ids must be >= 0, got {t}")
        if max_tokens < 1:
            raise ContractError(f"max_tokens must be >= 1, got {max_tokens}")
        if not 0 <= min_tokens <= max_tokens:
            raise ContractError(f"min_tokens must be in [0, max_tokens={max_tokens}], got {min_tokens}")
        if n < 1:
            raise ContractError(f"n must be >= 1, got {n}")
        slots = self.config.num_state_slots
        if slots and n > slots:
            raise ContractError(
                f"n={n} exceeds the {slots} sequences this model's recurrent state slots let run at once"
            )
        # The constructor made sure one max_model_len sequence fits the cache beside the watermark.
        if len(prompt) + 1 > self.config.max_model_len:
            raise ContractError(
                f"the prompt has {len(prompt)} tokens, which leaves no room to generate within "
                f"max_model_len={self.config.max_model_len}"
            )

    def add_request(self, r: Request) -> None:
        """Queues a request: a fresh id and check_request's contract, or ContractError."""
        if r.id in self._request_index:
            raise ContractError(f"request id {r.id} is already in use")
        self.check_request(r.prompt, r.max_tokens, r.min_tokens, r.n)
        state = _RequestState(params=r, arrival=self._next_arrival, num_live=1, child_seq=[-1] * r.n)
        self._next_arrival += 1
        if self._free_requests:
            rid = self._free_requests.pop()
            self._requests[rid] = state
        else:
            rid = len(self._requests)
            self._requests.append(state)
        sid = self._new_seq(rid, 0)
        s = self._seqs[sid]
        s.tokens = list(r.prompt)
        s.num_prompt_tokens = len(r.prompt)
        s.pending_fork = r.n > 1
        state.child_seq[0] = sid
        self._request_index[r.id] = rid
        self._insert_sorted(self._waiting, sid)

    def _req(self, rid: int) -> _RequestState:
        r = self._requests[rid]
        assert r is not None
        return r

    def _preempt(self, sid: int) -> None:
        s = self._seqs[sid]
        self.kv.free(sid)
        self._release_state(s)
        s.num_computed = 0
        s.draft = []
        s.status = SeqStatus.WAITING
        self._insert_sorted(self._waiting, sid)
        self._out.preempted.append((self._req(s.request).params.id, s.child))
        self._num_preemptions += 1

    def _retire(self, sid: int) -> bool:
        s = self._seqs[sid]
        assert s.status != SeqStatus.FINISHED
        s.status = SeqStatus.FINISHED
        self.kv.free(sid)
        self._release_state(s)
        r = self._req(s.request)
        r.child_seq[s.child] = -1
        r.num_live -= 1
        return r.num_live == 0

    def _retire_request(self, rid: int) -> None:
        r = self._req(rid)
        del self._request_index[r.params.id]
        self._finished_since_schedule.append(r.params.id)
        self._free_requests.append(rid)

    def _find_seq(self, request_id: int, child: int) -> int:
        rid = self._request_index.get(request_id)
        if rid is None:
            return -1
        r = self._req(rid)
        if not 0 <= child < len(r.child_seq):
            return -1
        return r.child_seq[child]

    def abort(self, request_id: int) -> bool:
        """Drops a request in any state; False when it is unknown."""
        rid = self._request_index.get(request_id)
        if rid is None:
            return False
        for sid in list(self._req(rid).child_seq):
            if sid < 0:
                continue
            lst = self._running if self._seqs[sid].status == SeqStatus.RUNNING else self._waiting
            lst.remove(sid)
            self._retire(sid)
            self._free_seqs.append(sid)
        self._retire_request(rid)
        return True

    def finish(self, request_id: int, child: int) -> bool:
        """Ends one child (a stop string found by the detokenizer); False when unknown or done."""
        sid = self._find_seq(request_id, child)
        if sid < 0:
            return False
        rid = self._seqs[sid].request
        lst = self._running if self._seqs[sid].status == SeqStatus.RUNNING else self._waiting
        lst.remove(sid)
        done = self._retire(sid)
        self._free_seqs.append(sid)
        if done:
            self._retire_request(rid)
        return True

    def set_draft(self, request_id: int, child: int, draft: SequenceABC[int]) -> bool:
        """The tokens proposed to follow a live child's tokens, verified at its next decoding step."""
        if self.config.num_state_slots and draft:
            raise ValueError("speculative decoding is not supported with recurrent state")
        sid = self._find_seq(request_id, child)
        if sid < 0:
            return False
        self._seqs[sid].draft = list(draft)
        return True

    # -- the step -----------------------------------------------------------------------------------

    def _emit(self, out: SchedulerOutput, sid: int, num_new: int, num_draft: int = 0) -> None:
        s = self._seqs[sid]
        table = self.kv.table_view(sid)
        start = s.num_computed
        assert len(table) * self.config.block_size >= start + num_new
        out.block_tables.extend(table)
        out.block_table_start.append(len(out.block_tables))
        r = self._req(s.request)
        samples = 0
        if num_draft > 0:
            samples = num_draft + 1
        elif start + num_new == s.num_tokens:
            samples = r.params.n if s.pending_fork else 1
        out.seqs.append((r.params.id, s.child, start, num_new, samples))
        out.tokens.append(s.tokens)
        out.drafts.append(s.draft[:num_draft])
        out.num_tokens += num_new
        out.num_samples += samples
        out.scheduled.append((sid, s.generation))
        out.num_draft.append(num_draft)
        out.num_appended.append(0)
        out.state_slots.append(s.state_slot)
        s.draft = []  # used or stale

    def schedule(self) -> SchedulerOutput:
        """Decides this step's batch."""
        if self._update_pending:
            raise ValueError("schedule() called again before update() for the previous step")
        c = self.config
        out = self._out = SchedulerOutput(
            finished_requests=self._finished_since_schedule, state_copies=self._pending_state_copies
        )
        self._finished_since_schedule = []
        self._pending_state_copies = []
        budget = c.max_num_batched_tokens

        preempted_any = False
        i = 0
        while i < len(self._running) and budget > 0 and len(out.seqs) < c.max_num_seqs:
            sid = self._running[i]
            s = self._seqs[sid]
            num_new = min(s.num_tokens - s.num_computed, budget)
            assert num_new > 0
            if s.draft and s.num_computed + 1 == s.num_tokens:
                num_draft = min(len(s.draft), budget - 1, c.max_model_len - s.num_tokens)
                if num_draft > 0:
                    ok, copies = self.kv.allocate_slots(sid, s.num_computed, 1 + num_draft, (), False)
                    if ok:
                        out.block_copies.extend(copies)
                        self._emit(out, sid, 1 + num_draft, num_draft)
                        budget -= 1 + num_draft
                        i += 1
                        continue
            while True:
                ok, copies = self.kv.allocate_slots(sid, s.num_computed, num_new, (), False)
                if ok:
                    out.block_copies.extend(copies)
                    break
                victim = self._running.pop()
                self._preempt(victim)
                preempted_any = True
                if victim == sid:
                    break
            if not ok:
                break
            self._emit(out, sid, num_new)
            budget -= num_new
            i += 1

        while not preempted_any and self._waiting and budget > 0 and len(self._running) < c.max_num_seqs:
            sid = self._waiting[0]
            s = self._seqs[sid]
            # (recurrent state: its slot, and its children's, must be free)
            slots = 0 if not c.num_state_slots else self._req(s.request).params.n if s.pending_fork else 1
            if len(self._free_state_slots) < slots:
                break
            hits, num_hit = self.kv.get_computed_blocks(sid, s.tokens, self._req(s.request).params.cache_salt)
            num_new = min(s.num_tokens - num_hit, budget)
            ok, copies = self.kv.allocate_slots(sid, num_hit, num_new, hits, True)
            if not ok:
                break
            out.block_copies.extend(copies)
            self._waiting.pop(0)
            for k in range(slots):
                slot = self._free_state_slots.pop()
                if k == 0:
                    s.state_slot = slot
                else:
                    s.reserved_slots.append(slot)
            s.num_computed = num_hit
            s.status = SeqStatus.RUNNING
            self._insert_sorted(self._running, sid)
            self._emit(out, sid, num_new)
            budget -= num_new
        self._update_pending = bool(out.seqs)
        return out

    def _check_stop(self, s: Sequence, r: Request, token: int) -> str:
        if s.num_output >= r.min_tokens:
            if not r.ignore_eos and token in r.eos_token_ids:
                return "stop"
            if token in r.stop_token_ids:
                return "stop"
        if s.num_output >= r.max_tokens or s.num_tokens >= self.config.max_model_len:
            return "length"
        return ""

    def update(self, sampled_tokens: SequenceABC[int]) -> list[FinishEvent]:
        """The last schedule()'s ``num_samples`` tokens, sequence by sequence; returns the children that
        finished."""
        out = self._out
        if not self._update_pending:
            raise ValueError("update() called without a scheduled step to update")
        if len(sampled_tokens) != out.num_samples:
            raise ValueError(
                f"update() expects {out.num_samples} sampled tokens (one per logits row), "
                f"got {len(sampled_tokens)}"
            )
        for t in sampled_tokens:
            if t < 0:
                raise ValueError(f"sampled token ids must be >= 0, got {t}")
        self._update_pending = False
        events: list[FinishEvent] = []
        forked: list[int] = []
        retired: list[int] = []
        row = 0
        for si, (seq_info, (sid, generation)) in enumerate(zip(out.seqs, out.scheduled, strict=True)):
            num_tokens, num_samples = seq_info[3], seq_info[4]
            first_row = row
            row += num_samples
            s = self._seqs[sid]
            if s.generation != generation or s.status != SeqStatus.RUNNING:
                continue  # aborted or finished between schedule() and update()
            rid = s.request
            r = self._req(rid)
            num_draft = out.num_draft[si]
            if num_draft > 0:
                # Verification: the run plain decoding would have appended one step at a time.
                draft = out.drafts[si]
                reason, token, appended = "", -1, 0
                for j in range(num_draft + 1):
                    token = sampled_tokens[first_row + j]
                    s.tokens.append(token)
                    s.num_output += 1
                    appended += 1
                    reason = self._check_stop(s, r.params, token)
                    if reason or (j < num_draft and token != draft[j]):
                        break
                out.num_appended[si] = appended
                s.num_computed += appended
                self.kv.cache_full_blocks(sid, s.tokens, s.num_computed, r.params.cache_salt)
                self.kv.trim(sid, s.num_computed)  # blocks that held only rejected drafts
                if reason:
                    done = self._retire(sid)
                    if done:
                        self._retire_request(rid)
                    retired.append(sid)
                    events.append(
                        FinishEvent(r.params.id, s.child, reason, token if reason == "stop" else -1, done)
                    )
                continue
            s.num_computed += num_tokens
            self.kv.cache_full_blocks(sid, s.tokens, s.num_computed, r.params.cache_salt)
            if num_samples == 0:
                continue
            if s.pending_fork:
                s.pending_fork = False
                for k in range(1, num_samples):
                    cid = self._new_seq(rid, k)
                    ch = self._seqs[cid]
                    ch.tokens = list(s.tokens)
                    ch.num_prompt_tokens = s.num_prompt_tokens
                    ch.num_computed = s.num_computed
                    ch.status = SeqStatus.RUNNING
                    self.kv.fork(sid, cid)
                    if s.reserved_slots:  # (recurrent state: a copy of the parent's)
                        ch.state_slot = s.reserved_slots.pop()
                        self._pending_state_copies.append((s.state_slot, ch.state_slot))
                    r.child_seq[k] = cid
                    r.num_live += 1
                    forked.append(cid)
            for k in range(num_samples):
                cid = sid if k == 0 else r.child_seq[k]
                ch = self._seqs[cid]
                token = sampled_tokens[first_row + k]
                ch.tokens.append(token)
                ch.num_output += 1
                reason = self._check_stop(ch, r.params, token)
                if not reason:
                    continue
                done = self._retire(cid)
                if done:
                    self._retire_request(rid)
                retired.append(cid)
                stop_token = token if reason == "stop" else -1
                events.append(FinishEvent(r.params.id, ch.child, reason, stop_token, done))
        if events:
            self._running = [sid for sid in self._running if self._seqs[sid].status == SeqStatus.RUNNING]
        for cid in forked:
            if self._seqs[cid].status == SeqStatus.RUNNING:
                self._insert_sorted(self._running, cid)
        self._free_seqs.extend(retired)
        return events

    # -- inspection -----------------------------------------------------------------------------------

    def has_unfinished(self) -> bool:
        return bool(self._request_index)

    def stats(self) -> SchedulerStats:
        cs = self.kv.stats()
        return SchedulerStats(
            num_running=len(self._running),
            num_waiting=len(self._waiting),
            kv_usage_percent=cs.usage_percent,
            prefix_queries=cs.prefix_queries,
            prefix_hits=cs.prefix_hits,
            num_preemptions=self._num_preemptions,
        )

    def block_table(self, request_id: int, child: int) -> list[int]:
        sid = self._find_seq(request_id, child)
        if sid < 0:
            raise ValueError(f"no live child {child} of request {request_id}")
        return self.kv.block_table(sid)

    def tokens(self, request_id: int, child: int) -> list[int]:
        sid = self._find_seq(request_id, child)
        if sid < 0:
            raise ValueError(f"no live child {child} of request {request_id}")
        return list(self._seqs[sid].tokens)

    def running(self) -> list[tuple[int, int]]:
        return [(self._req(self._seqs[s].request).params.id, self._seqs[s].child) for s in self._running]

    def waiting(self) -> list[tuple[int, int]]:
        return [(self._req(self._seqs[s].request).params.id, self._seqs[s].child) for s in self._waiting]

    def ref_counts(self) -> list[int]:
        return self.kv.pool.ref_counts()

    def free_queue(self) -> list[int]:
        return self.kv.pool.free_queue()

    def cached_blocks(self) -> list[tuple[int, int]]:
        return self.kv.pool.cached_blocks()
