"""Python twin of ``csrc/engine/engine``: the whole decode loop, composed of the other twins.

One step, in the same order as the C++ engine:

    commands (add/abort) -> Scheduler.schedule -> block copies -> build_batch -> ModelRunner.forward
      -> sampler -> Scheduler.update -> Detokenizer + stop strings -> outputs

It is what ``LLM(backend="python")`` runs. Its outputs have the attribute names of
``core.EngineOutput`` / ``CompletionDelta`` / ``TokenLogprobs``, so ``ossa.output_processor``
consumes either. Text is kept as UTF-8 bytes, as the C++ engine keeps it, so stop strings, their
hold-back and the emitted deltas cut at the same byte offsets. Only the offline mode (``step`` /
``run_to_completion``) is mirrored; the background thread of the C++ engine adds no logic.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import sampler as ref_sampler
from .batch_builder import build_batch
from .constraints import ConstraintStage
from .draft_model import DraftModel, DraftOptions
from .loader import load_weights
from .logits_plan import LogitsPlan
from .output_processor import (
    CompletionDelta,
    CompletionState,
    StopStrings,
    TokenLogprobs,
    append_token,
    finish_completion,
    take_delta,
    token_logprobs,
)
from .request import ContractError, Request
from .runner import ModelRunner
from .scheduler import Scheduler, SchedulerConfig
from .speculative import (
    DEFAULT_DISABLE_BY_BATCH_SIZE,
    SpecControl,
    SpecStats,
    SpeculativeConfig,
    ngram_propose,
)
from .speculative import validate as validate_speculative
from .tokenizer import Detokenizer, Tokenizer

_U64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """The engine's seed mixer (same constants and 64-bit wrap-around as C++)."""
    x = (x + 0x9E3779B97F4A7C15) & _U64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _U64
    return x ^ (x >> 31)


def request_seed(engine_seed: int, key: int) -> int:
    """The seed of a request that brings none: the key is its 1-based order of arrival."""
    return splitmix64((engine_seed ^ splitmix64(key)) & _U64)


@dataclass
class EngineConfig:
    num_blocks: int = 0
    block_size: int = 16
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 64
    max_model_len: int = 2048
    policy: str = "fcfs"
    enable_prefix_caching: bool = True
    watermark: float = 0.01  # share of blocks kept free when admitting waiting sequences
    num_state_slots: int = 0  # recurrent state slots (Qwen3.5's delta-nets, LFM2's convolutions); 0: none
    seed: int = 0  # seeds requests that bring none
    quantized_activations: bool = False  # match a model loaded with quantized_activations=True
    amx_activations: bool = False  # match the AMX kernels' bf16 hi + lo activations (model.uses_amx)
    # inputs split into int8 pieces, name -> values per block (model.int8_matrices)
    int8_matrices: Mapping[str, int] = field(default_factory=dict)
    kv_cache_dtype: str = "float32"  # or "float16", as the C++ engine's K/V cache
    compute_dtype: str = "float32"  # or "bfloat16", as load_model(dtype=...)
    spec_method: str = "none"  # speculative decoding: "none", "ngram" or "draft_model"
    num_speculative_tokens: int = 0
    prompt_lookup_min: int = 5
    prompt_lookup_max: int = 5
    spec_disable_by_batch_size: int = DEFAULT_DISABLE_BY_BATCH_SIZE  # no drafts above this many running
    spec_draft_cost: float = 0.0  # method draft_model: a draft position's cost as a share of a step


@dataclass
class GenerationParams:
    """Everything about a request besides its prompt (the twin of ``core.GenerationParams``)."""

    sampling: ref_sampler.SamplerParams = field(default_factory=ref_sampler.SamplerParams)
    max_tokens: int = 16
    n: int = 1
    priority: int = 0
    stop: list[str] = field(default_factory=list)
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    prompt_logprobs: int = -1  # -1: none; k >= 0: each prompt token's logprob and the top k
    constraint: int = -1  # structured output: the ConstraintHost's handle; -1: none


@dataclass
class EngineOutput:
    request_id: str = ""
    completions: list[CompletionDelta] = field(default_factory=list)
    finished: bool = False
    has_prompt_logprobs: bool = False
    prompt_logprobs: list[TokenLogprobs] = field(default_factory=list)  # entry i: prompt token i + 1
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    arrival_time: float = 0.0
    first_scheduled_time: float = 0.0
    first_token_time: float = 0.0
    finished_time: float = 0.0
    error: str = ""
    num_drafts: int = 0  # speculative decoding so far: verification steps
    num_draft_tokens: int = 0  # draft tokens verified
    num_accepted_tokens: int = 0  # and of them accepted


@dataclass
class _Child(CompletionState):
    constraint_fed: int = 0  # output tokens its matcher has consumed
    spec: SpecControl = field(default_factory=SpecControl)


@dataclass
class _Request:
    id: str
    params: GenerationParams
    prompt: list[int]
    stops: StopStrings
    children: list[_Child]
    key: int = 0
    seed: int = 0
    prompt_lp_next: int = 1  # next prompt position whose logprob is owed
    prompt_logprobs: list[TokenLogprobs] = field(default_factory=list)
    prompt_logprobs_sent: bool = False
    num_cached_tokens: int = 0
    scheduled: bool = False
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    arrival_time: float = 0.0
    first_scheduled_time: float = 0.0
    first_token_time: float = 0.0


class Engine:
    """The decode loop on the ``ossa.reference`` twins (``LLM(backend="python")``)."""

    def __init__(
        self, model_path: str, tokenizer: Tokenizer, config: EngineConfig, draft: DraftOptions | None = None
    ) -> None:
        model_config, weights = load_weights(model_path)
        self.model_config = model_config
        self.config = config
        self.tokenizer = tokenizer
        self.n_vocab = int(model_config["n_vocab"])
        self.scheduler = Scheduler(
            SchedulerConfig(
                config.num_blocks,
                config.block_size,
                config.max_num_batched_tokens,
                config.max_num_seqs,
                config.max_model_len,
                config.policy,
                config.enable_prefix_caching,
                config.watermark,
                config.num_state_slots,
            )
        )
        self.runner = ModelRunner(
            model_config,
            weights,
            config.num_blocks,
            config.block_size,
            config.quantized_activations,
            config.amx_activations,
            config.kv_cache_dtype,
            config.compute_dtype,
            config.int8_matrices,
            max(config.num_state_slots, 1),
        )
        spec = tokenizer.spec
        eos = list(spec.eos_ids) or ([spec.eos_id] if spec.eos_id >= 0 else [])
        self.eos_ids = [i for i in eos if 0 <= i < self.n_vocab]
        self._requests: dict[int, _Request] = {}
        self._keys: dict[str, int] = {}
        self._live: set[str] = set()
        self._commands: list[tuple[bool, str, _Request | None]] = []
        self._touched: list[int] = []
        self._next_key = 1
        self._constraints = ConstraintStage()
        self.spec = SpeculativeConfig(
            config.spec_method,
            config.num_speculative_tokens,
            config.prompt_lookup_min,
            config.prompt_lookup_max,
            config.spec_disable_by_batch_size,
            config.spec_draft_cost,
        )
        validate_speculative(self.spec)
        if self.spec.enabled and model_config["state_bytes"]:
            raise ValueError(
                "speculative decoding is not supported for models with recurrent layers (Qwen3.5's "
                "delta-nets, LFM2's convolutions, Mamba-2): their state cannot take back rejected drafts"
            )
        self.draft_model: DraftModel | None = None
        if self.spec.enabled and self.spec.method == "draft_model":
            if draft is None:
                raise ValueError("speculative_config method 'draft_model' needs a draft model (its 'model')")
            self.draft_model = DraftModel(
                draft, config.num_blocks, config.block_size, config.max_num_batched_tokens,
                config.kv_cache_dtype, config.compute_dtype,
            )  # fmt: skip
            if self.draft_model.n_vocab != self.n_vocab:
                raise ValueError(
                    f"speculative_config model: the draft's vocab_size {self.draft_model.n_vocab} differs "
                    f"from the target's {self.n_vocab}"
                )
        self._spec_stats = SpecStats(
            accepted_per_pos=[0] * (config.num_speculative_tokens if self.spec.enabled else 0)
        )
        self._stats = {
            "prompt_tokens": 0, "generation_tokens": 0, "steps": 0, "requests_finished": 0,
            "time_forward": 0.0, "time_sample": 0.0, "time_schedule": 0.0, "time_detokenize": 0.0,
            "time_constraint": 0.0, "time_constraint_wait": 0.0,
        }  # fmt: skip

    @property
    def vocab_size(self) -> int:
        return self.n_vocab

    def set_constraint_host(self, host: Any, overlap: bool = True) -> None:
        """Where constrained rows get their token masks (``ossa.structured.ConstraintHost``); the twin
        always computes them inline."""
        self._constraints.host = host

    def _forget(self, r: _Request) -> None:
        if r.params.constraint >= 0:
            self._constraints.release(r.params.constraint)
        if self.draft_model is not None:
            self.draft_model.release(r.key)
        self._live.discard(r.id)

    # -- requests ---------------------------------------------------------------------------------

    def check_request(self, prompt: list[int], params: GenerationParams, sampling: Any) -> None:
        """add_request's contract (ContractError naming what is broken); as ``Engine::check_request``."""
        self.scheduler.check_request(prompt, params.max_tokens, params.sampling.min_tokens, params.n)
        for t in prompt:
            if t >= self.n_vocab:
                raise ContractError(f"prompt token id {t} is outside the vocabulary [0, {self.n_vocab})")
        if params.prompt_logprobs > ref_sampler.MAX_LOGPROBS:
            raise ContractError(f"prompt_logprobs must be <= {ref_sampler.MAX_LOGPROBS}")
        if any(s == "" for s in params.stop):
            raise ContractError("stop strings must not be empty")
        ref_sampler.validate(sampling, self.n_vocab)

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: GenerationParams) -> None:
        """Queues a request. User input is validated once, by ossa.input_processor; a request it would
        refuse raises ContractError here (check_request), a live id ValueError."""
        prompt = list(prompt_token_ids)
        sp = ref_sampler.SamplerParams(**{**vars(params.sampling), "eos_token_ids": list(self.eos_ids)})
        self.check_request(prompt, params, sp)
        stops = StopStrings.of(list(params.stop), params.include_stop_str_in_output, sp.min_tokens)
        gp = GenerationParams(**{**vars(params), "sampling": sp, "stop": list(params.stop)})
        skip = params.skip_special_tokens
        r = _Request(
            id=request_id,
            params=gp,
            prompt=prompt,
            stops=stops,
            children=[_Child(Detokenizer(self.tokenizer, skip)) for _ in range(params.n)],
            arrival_time=time.time(),
        )
        if request_id in self._live:
            raise ValueError(f"request id '{request_id}' is already in use")
        self._live.add(request_id)
        self._commands.append((False, request_id, r))

    def abort(self, request_id: str) -> bool:
        """Queues an abort; the request ends with finish_reason "abort". False if unknown."""
        if request_id not in self._live:
            return False
        self._commands.append((True, request_id, None))
        return True

    def has_unfinished(self) -> bool:
        return bool(self._live)

    def _apply_commands(self, outputs: list[EngineOutput]) -> None:
        commands, self._commands = self._commands, []
        for is_abort, rid, r in commands:
            if not is_abort:
                assert r is not None
                r.key = self._next_key
                self._next_key += 1
                sp = r.params.sampling
                r.seed = sp.seed if sp.seed is not None else request_seed(self.config.seed, r.key)
                # Prompt logprobs need every prompt position computed, so such requests skip prefix hits.
                salt = splitmix64(r.key) | 1 if r.params.prompt_logprobs >= 0 else 0
                req = Request(
                    id=r.key, prompt=list(r.prompt), max_tokens=r.params.max_tokens, min_tokens=sp.min_tokens,
                    eos_token_ids=list(self.eos_ids), stop_token_ids=list(sp.stop_token_ids),
                    ignore_eos=sp.ignore_eos, n=r.params.n, priority=r.params.priority, cache_salt=salt,
                )  # fmt: skip
                try:
                    self.scheduler.add_request(req)
                except ValueError as e:
                    now = time.time()
                    outputs.append(
                        EngineOutput(
                            request_id=r.id,
                            finished=True,
                            error=str(e),
                            arrival_time=r.arrival_time,
                            finished_time=now,
                        )
                    )
                    self._forget(r)
                    continue
                self._keys[r.id] = r.key
                self._requests[r.key] = r
            else:
                key = self._keys.get(rid)
                if key is None:
                    continue  # finished before the abort arrived
                req_state = self._requests[key]
                self.scheduler.abort(key)
                for ch in req_state.children:
                    if not ch.finished:
                        finish_completion(ch, "abort")
                self._touched.append(key)

    # -- the step ---------------------------------------------------------------------------------

    def step(self) -> list[EngineOutput]:
        """One step; returns the outputs of every request it touched (as ``Engine::run_step``)."""
        outputs: list[EngineOutput] = []
        self._apply_commands(outputs)
        if not self.scheduler.has_unfinished():
            self._collect_outputs(outputs)
            return outputs
        t0 = time.perf_counter()
        so = self.scheduler.schedule()
        t1 = time.perf_counter()
        self._stats["time_schedule"] += t1 - t0
        if so.num_tokens == 0:
            self._collect_outputs(outputs)
            return outputs
        batch, plan = self._prepare_batch(so)
        logits, masks = self._forward_batch(so, batch)
        t2 = time.perf_counter()
        self._stats["time_forward"] += t2 - t1
        row_child, results, sample_logits = self._sample_batch(so, plan, logits, masks, outputs)
        t3 = time.perf_counter()
        self._stats["time_sample"] += t3 - t2
        self._commit_samples(so, row_child, results, sample_logits)
        if self.spec.enabled:
            self._propose_drafts(so)
        self._stats["time_detokenize"] += time.perf_counter() - t3
        self._stats["steps"] += 1
        self._collect_outputs(outputs)
        return outputs

    def _prepare_batch(self, so: Any) -> tuple[Any, LogitsPlan]:
        """Block copies, first-schedule bookkeeping, the forward's batch and its logits plan."""
        for src, dst in so.block_copies:
            self.runner.copy_block(src, dst)
        for src, dst in so.state_copies:  # (forks of recurrent models)
            self.runner.copy_state(src, dst)
        now = time.time()
        prompt_len: list[int] = []  # per sequence: its prompt's length if it wants prompt logprobs
        for rid, _child, num_computed, num_tokens, _ns in so.seqs:
            r = self._requests[rid]
            if not r.scheduled:
                r.scheduled = True
                r.first_scheduled_time = now
                r.num_cached_tokens = num_computed
            prompt_len.append(len(r.prompt) if r.params.prompt_logprobs >= 0 else 0)
            if num_computed < len(r.prompt):
                self._stats["prompt_tokens"] += min(num_tokens, len(r.prompt) - num_computed)
        batch = build_batch(so, self.scheduler.config.block_size)
        plan = LogitsPlan()
        plan.plan(so, prompt_len, batch)
        return batch, plan

    def _forward_batch(self, so: Any, batch: Any) -> tuple[np.ndarray, tuple[dict, dict]]:
        """The forward pass's logits, and the constrained rows' masks and errors."""
        masks = self._constraint_masks(so)
        # IEEE arithmetic as in C++: non-finite weights give NaN logits, which the sampler refuses.
        with np.errstate(invalid="ignore", over="ignore"):
            logits = self.runner.forward(
                batch.token_ids, batch.positions, batch.slot_mapping, batch.seq_start, batch.context_len,
                batch.block_table_start, batch.block_tables, batch.logits_rows, batch.state_slots,
            )  # fmt: skip
        return logits, masks

    def _sampling_rows(self, so: Any) -> tuple[list[ref_sampler.RowInput], list[tuple[int, int]]]:
        """Sampling rows in the scheduler's order; a forking sequence owns n consecutive rows."""
        row_inputs: list[ref_sampler.RowInput] = []
        row_child: list[tuple[int, int]] = []
        for si, (rid, child0, _nc, _nt, num_samples) in enumerate(so.seqs):
            r = self._requests[rid]
            if so.num_draft[si] > 0:
                # Row k is output index n_out + k, as plain decoding samples it: the outputs then d1..dk.
                c = r.children[child0]
                verify = list(c.output_tokens) + so.drafts[si]
                n_out = len(c.output_tokens)
                for k in range(num_samples):
                    row_inputs.append(
                        ref_sampler.RowInput(
                            r.params.sampling, r.prompt, verify[: n_out + k], r.seed, child0, n_out + k
                        )
                    )
                    row_child.append((rid, child0))
                continue
            for k in range(num_samples):
                child = k if num_samples > 1 else child0
                c = r.children[child]
                row_inputs.append(
                    ref_sampler.RowInput(r.params.sampling, r.prompt, list(c.output_tokens), r.seed, child,
                                         len(c.output_tokens))
                )  # fmt: skip
                row_child.append((rid, child))
        return row_inputs, row_child

    def _sample_batch(
        self,
        so: Any,
        plan: LogitsPlan,
        logits: np.ndarray,
        masks: tuple[dict, dict],
        outputs: list[EngineOutput],
    ) -> tuple[list[tuple[int, int]], list[ref_sampler.SampleResult], np.ndarray]:
        """Sampling rows, masks, samples, prompt logprobs: (row_child, results, sampling logits)."""
        row_inputs, row_child = self._sampling_rows(so)
        constraint_failed: list[tuple[int, str]] = []
        row_masks, mask_errors = masks
        for i, mask in row_masks.items():
            row_inputs[i].token_mask = mask
            if mask_errors[i]:
                constraint_failed.append((row_child[i][0], f"structured output: {mask_errors[i]}"))
        sample_logits = plan.sample_logits(logits)
        results = self._sample_rows(sample_logits, row_inputs, row_child, outputs)
        for key, message in constraint_failed:
            self._fail_request(key, message, outputs)
        if plan.has_prompt_rows:
            self._record_prompt_logprobs(plan, logits)
        return row_child, results, sample_logits

    def _record_prompt_logprobs(self, plan: LogitsPlan, logits: np.ndarray) -> None:
        for i, (key, pos) in enumerate(plan.prompt_rows):
            if key not in self._requests:
                continue  # a sampling row (key -1), or a request that failed in sampling
            r = self._requests[key]
            if pos < r.prompt_lp_next:
                continue  # recomputed after a preemption
            tok = r.prompt[pos]
            lp = ref_sampler.logprobs(logits[i : i + 1], [tok], r.params.prompt_logprobs)[0]
            r.prompt_logprobs.append(token_logprobs(lp, tok, logits[i]))
            r.prompt_lp_next = pos + 1
            self._touched.append(key)

    def _commit_samples(
        self,
        so: Any,
        row_child: list[tuple[int, int]],
        results: list[ref_sampler.SampleResult],
        sample_logits: np.ndarray,
    ) -> None:
        """The samples go to the scheduler (update) and to their completions."""
        sampled = [res.token for res in results]
        events = self.scheduler.update(sampled)
        self._stats["generation_tokens"] += len(sampled)
        self._append_samples(so, row_child, results, sample_logits, sampled)
        self._apply_finish_events(events)

    def _append_samples(
        self,
        so: Any,
        row_child: list[tuple[int, int]],
        results: list[ref_sampler.SampleResult],
        sample_logits: np.ndarray,
        sampled: list[int],
    ) -> None:
        """Each used sample to its child's completion: logprobs, detokenized text, stop strings."""
        tok_time = time.time()
        used: list[bool] = []  # per row: whether it is part of its sequence's run
        for si, seq in enumerate(so.seqs):
            nd = so.num_draft[si]
            n_used = so.num_appended[si] if nd > 0 else seq[4]
            used.extend(k < n_used for k in range(seq[4]))
            if nd > 0:
                first = len(used) - seq[4]
                self._record_verification(seq[0], seq[1], so.drafts[si], sampled[first:], so.num_appended[si])
        self._stats["generation_tokens"] -= used.count(False)
        for i, (key, child) in enumerate(row_child):
            if not used[i]:
                continue
            if key not in self._requests:
                continue  # failed in sampling; the scheduler drops its row
            r = self._requests[key]
            if r.first_token_time == 0:
                r.first_token_time = tok_time
            c = r.children[child]
            self._touched.append(key)
            if c.finished:
                continue
            lp_res = results[i] if r.params.sampling.logprobs >= 0 else None
            if lp_res is not None:
                c.new_logprobs.append(token_logprobs(lp_res, lp_res.token, sample_logits[i]))
            if append_token(c, r.stops, sampled[i], None if lp_res is None else lp_res.logprob):
                self.scheduler.finish(r.key, child)

    def _apply_finish_events(self, events: list[Any]) -> None:
        """Children the scheduler ended this step (EOS, stop ids, length)."""
        for ev in events:
            r_opt = self._requests.get(ev.request_id)
            if r_opt is None:
                continue
            c = r_opt.children[ev.child]
            if c.finished:
                continue  # already ended by a stop string this step
            c.stop_token = ev.stop_token
            finish_completion(c, "length" if ev.reason == "length" else "stop")
            self._touched.append(ev.request_id)

    def _record_verification(
        self, key: int, child: int, draft: list[int], sampled: list[int], appended: int
    ) -> None:
        r = self._requests.get(key)
        if r is None:
            return
        accepted = 0
        while accepted < min(appended, len(draft)) and sampled[accepted] == draft[accepted]:
            accepted += 1
        r.children[child].spec.record(len(draft), accepted)
        r.num_drafts += 1
        r.num_draft_tokens += len(draft)
        r.num_accepted_tokens += accepted
        st = self._spec_stats
        st.num_drafts += 1
        st.num_draft_tokens += len(draft)
        st.num_accepted_tokens += accepted
        for j in range(accepted):
            st.accepted_per_pos[j] += 1

    def _propose_drafts(self, so: Any) -> None:
        """The drafts of this step's decoding children, for the next step."""
        sc = self.spec
        # Above the threshold no child drafts: the next step decodes plainly (tokens never depend on k).
        if sc.disable_by_batch_size > 0 and self.scheduler.stats().num_running > sc.disable_by_batch_size:
            return
        batch = sum(
            (1 if so.num_draft[si] > 0 else seq[4]) for si, seq in enumerate(so.seqs) if seq[4] > 0
        )  # sequences that decoded this step
        dm = self.draft_model
        if dm is not None:
            dm.clear()
        for si, (rid, child0, _nc, _nt, num_samples) in enumerate(so.seqs):
            if num_samples == 0:
                continue
            r = self._requests.get(rid)
            if r is None or r.params.constraint >= 0:
                continue  # constrained requests do not speculate
            n_children = num_samples if num_samples > 1 and so.num_draft[si] == 0 else 1
            for k in range(n_children):
                child = k if n_children > 1 else child0
                c = r.children[child]
                if c.finished:
                    continue
                n_out = len(c.output_tokens)
                n_tokens = len(r.prompt) + n_out
                limit = min(
                    c.spec.next(sc.num_speculative_tokens, batch, sc.draft_cost),
                    r.params.max_tokens - n_out - 1,
                    self.config.max_model_len - n_tokens - 1,
                )
                if limit <= 0:
                    continue
                if dm is not None:
                    dm.add(r.key, child, self.scheduler.tokens(r.key, child), limit)
                    continue
                draft = ngram_propose(
                    self.scheduler.tokens(r.key, child), sc.prompt_lookup_min, sc.prompt_lookup_max, limit
                )
                if draft:
                    self.scheduler.set_draft(r.key, child, draft)
        if dm is None or not dm.props:
            return
        dm.run()
        for i, p in enumerate(dm.props):
            if p.draft:
                self.scheduler.set_draft(p.request, p.child, dm.draft(i))

    def _constraint_masks(self, so: Any) -> tuple[dict[int, np.ndarray | None], dict[int, str]]:
        """Masks (None where the matcher failed) and errors of the constrained sampling rows, by row."""
        stage = self._constraints
        if stage.host is None:
            return {}, {}
        rows: list[tuple[int, int, list[int], int]] = []
        row_of: list[int] = []
        next_row = 0
        for rid, child0, _nc, _nt, num_samples in so.seqs:
            r = self._requests[rid]
            for k in range(num_samples):
                if r.params.constraint >= 0:
                    child = k if num_samples > 1 else child0
                    c = r.children[child]
                    rows.append((r.params.constraint, child, c.output_tokens, c.constraint_fed))
                    c.constraint_fed = len(c.output_tokens)
                    row_of.append(next_row)
                next_row += 1
        if not rows and not stage.released:
            return {}, {}
        t0 = time.perf_counter()
        masks, errors = stage.run(rows, self.n_vocab)
        self._stats["time_constraint"] += time.perf_counter() - t0
        return dict(zip(row_of, masks, strict=True)), dict(zip(row_of, errors, strict=True))

    def _fail_request(self, key: int, message: str, outputs: list[EngineOutput]) -> None:
        """Ends one request with an error (finish_reason "error") and forgets it."""
        r = self._requests.get(key)
        if r is None:
            return
        self.scheduler.abort(key)
        for c in r.children:
            if not c.finished:
                finish_completion(c, "error")
        out = self._make_output(r)
        out.finished = True
        out.error = message
        outputs.append(out)
        self._forget(r)
        del self._keys[r.id]
        del self._requests[key]

    def _sample_rows(
        self,
        logits: np.ndarray,
        rows: list[ref_sampler.RowInput],
        row_child: list[tuple[int, int]],
        outputs: list[EngineOutput],
    ) -> list[ref_sampler.SampleResult]:
        """One result per row; a row whose parameters make the sampler raise fails only its request
        (its row gets token 0, which update() drops)."""
        try:
            return ref_sampler.sample(logits, rows)
        except ValueError:
            pass
        results = []
        for i, row in enumerate(rows):
            try:
                results.append(ref_sampler.sample(logits[i : i + 1], [row])[0])
            except ValueError as e:
                results.append(ref_sampler.SampleResult(token=0))
                self._fail_request(row_child[i][0], f"sampling failed: {e}", outputs)
        return results

    def _make_output(self, r: _Request) -> EngineOutput:
        out = EngineOutput(
            request_id=r.id, num_prompt_tokens=len(r.prompt), num_cached_tokens=r.num_cached_tokens,
            arrival_time=r.arrival_time, first_scheduled_time=r.first_scheduled_time,
            first_token_time=r.first_token_time, num_drafts=r.num_drafts, num_draft_tokens=r.num_draft_tokens,
            num_accepted_tokens=r.num_accepted_tokens,
        )  # fmt: skip
        if r.params.prompt_logprobs >= 0 and not r.prompt_logprobs_sent and r.prompt_lp_next >= len(r.prompt):
            out.has_prompt_logprobs = True
            out.prompt_logprobs, r.prompt_logprobs = r.prompt_logprobs, []
            r.prompt_logprobs_sent = True
        all_finished = True
        for i, c in enumerate(r.children):
            all_finished = all_finished and c.finished
            if c.dirty:
                out.completions.append(take_delta(c, r.stops, i))
        out.finished = all_finished
        if all_finished:
            out.finished_time = time.time()
        return out

    def _collect_outputs(self, outputs: list[EngineOutput]) -> None:
        for key in sorted(set(self._touched)):
            r = self._requests.get(key)
            if r is None:
                continue
            out = self._make_output(r)
            outputs.append(out)
            if out.finished:
                self._stats["requests_finished"] += 1
                self._forget(r)
                del self._keys[r.id]
                del self._requests[key]
        self._touched = []

    def run_to_completion(self) -> list[EngineOutput]:
        """Steps until no request is left; returns every output in order."""
        outputs: list[EngineOutput] = []
        while True:
            outputs.extend(self.step())
            if not self.has_unfinished():
                return outputs

    def stats(self) -> dict[str, Any]:
        """The same keys as ``core.Engine.stats()``."""
        s = self.scheduler.stats()
        return {
            "num_running": s.num_running,
            "num_waiting": s.num_waiting,
            "kv_usage_percent": s.kv_usage_percent,
            "prefix_queries": s.prefix_queries,
            "prefix_hits": s.prefix_hits,
            "num_preemptions": s.num_preemptions,
            "num_blocks": self.config.num_blocks,
            **self._stats,
            "constraint_calls": self._constraints.calls,
            "spec_num_drafts": self._spec_stats.num_drafts,
            "spec_num_draft_tokens": self._spec_stats.num_draft_tokens,
            "spec_num_accepted_tokens": self._spec_stats.num_accepted_tokens,
            "spec_accepted_per_pos": list(self._spec_stats.accepted_per_pos),
        }
