"""``ossa.LLM``: offline generation with vLLM's names and shapes."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from .backend import get_backend
from .config import EngineArgs, speculative_config_of
from .input_processor import EngineRequest, InputError, InputProcessor, PromptType
from .output_processor import OutputProcessor
from .outputs import RequestOutput
from .sampling_params import SamplingParams


class LLM:
    """An LLM with its tokenizer and a KV cache, ready to generate.

    Safe to share between threads: ``generate``, ``chat`` and ``stream`` may be called from any number
    of threads at once; their requests join one continuous batch and each call returns its own outputs.

    ``LLM(model, **options)``: ``model`` is a GGUF file, a Hugging Face folder, or a short name
    (default ``"smollm2-135m"``, fetched on first use); the options are ``ossa.config.EngineArgs``'s
    (``max_model_len``, ``kv_cache_memory_bytes``, ``gpu_memory_utilization``, ``kv_cache_dtype``,
    ``dtype``, ``block_size``, ``max_num_seqs``, ``max_num_batched_tokens``,
    ``enable_prefix_caching``, ``seed``, ``num_threads``, ``backend``, ``scheduling_policy``, ``amx``,
    ``quantized_activations``, ...),
    each validated before anything loads.
    """

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        from . import models
        from ._native import core

        args = EngineArgs.from_kwargs(model, kwargs)
        model_source, tokenizer_source = args.hub_sources()
        self.model_path = models.resolve(args.model, model_source)
        if args.num_threads is not None:
            core.set_num_threads(int(args.num_threads))
        self.model = models.load_model(
            self.model_path, args.dtype, amx=args.amx, quantized_activations=args.quantized_activations
        )
        self._backend = get_backend(args.backend)
        self.backend = self._backend.name
        tokenizer_path = self.model_path
        if args.tokenizer is not None:
            tokenizer_path = models.resolve_tokenizer(args.tokenizer, tokenizer_source)
        self.tokenizer = self._backend.load_tokenizer(tokenizer_path)
        self.draft_model = None
        draft_name = speculative_config_of(args.speculative_config).model
        if draft_name is not None:
            from .draft_model import load_draft_model

            self.draft_model = load_draft_model(args, draft_name, self.model, self.tokenizer, self._backend)
        # The draft's KV cache (as many blocks as the target's) counts in the memory check.
        self.config = args.create_config(
            self.model,
            self.model_path,
            None if self.draft_model is None else self.draft_model.model,
            tokenizer_path,
        )
        if self.config.sampling_defaults:
            logging.getLogger("ossa").info(
                "default sampling parameters from the model's generation config: %s "
                "(generation_config='vllm' ignores it)",
                self.config.sampling_defaults,
            )
        if self.draft_model is not None and self.config.speculative.draft_cost is None:
            spec = dataclasses.replace(self.config.speculative, draft_cost=self.draft_model.cost)
            self.config = dataclasses.replace(self.config, speculative=spec)
        self.max_model_len = self.config.max_model_len
        self.num_blocks = self.config.cache.num_blocks
        self.block_size = self.config.cache.block_size
        self.kv_cache_dtype = self.config.cache.kv_cache_dtype
        # KV-cache memory: the target's (kv_cache_memory_bytes) and, on top of it, the draft model's.
        self.kv_cache_memory_bytes = self.config.cache.kv_cache_memory_bytes
        self.draft_kv_cache_memory_bytes = self.config.cache.draft_kv_cache_memory_bytes
        self._counter = itertools.count()  # next() on it is atomic: request ids are unique across threads
        self.engine: Any = self._backend.create_engine(
            self.model, self.tokenizer, self.config, self.draft_model
        )
        from .structured import ConstraintHost

        # Structured outputs: the engine asks this for the masks of constrained rows (llguidance is
        # imported only when a request brings a grammar).
        self.constraints = ConstraintHost(self.tokenizer, self.config.load.vocab_size)
        self.engine.set_constraint_host(self.constraints)
        self.input_processor = InputProcessor(
            self.tokenizer,
            self._backend,
            max_model_len=self.max_model_len,
            vocab_size=self.config.load.vocab_size,
            max_num_seqs=self.config.scheduler.max_num_seqs,
            constraints=self.constraints,
        )
        from .step_driver import StepDriver

        # Any number of threads may call generate/chat/stream at once: their requests share the
        # engine's batch, and the driver hands each caller its own outputs (ossa.step_driver).
        self._driver = StepDriver(self.engine, serialize=self._backend.serialize_steps)

    # -- public API ----------------------------------------------------------------------------

    def get_tokenizer(self) -> Any:
        return self.tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        """The SamplingParams a request without its own gets: the model's generation_config.json
        fields (temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens) unless the
        engine was created with ``generation_config="vllm"``; else SamplingParams()."""
        return SamplingParams(**self.config.sampling_defaults)

    def generate(
        self,
        prompts: PromptType | Sequence[PromptType],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        priority: Sequence[int] | None = None,
    ) -> list[RequestOutput]:
        """Generates for every prompt (strings, token-id lists, or ``{"prompt"|"prompt_token_ids": ...}``)
        and returns the ``RequestOutput``s in input order."""
        return self._run(
            self._requests(self.input_processor.prompts(prompts), sampling_params, priority), use_tqdm
        )

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
        continues it; ``chat_template_kwargs`` (and any further keyword) are template variables."""
        if not messages:
            raise InputError("messages is empty", "messages")
        conversations = [messages] if isinstance(messages[0], dict) else messages
        prompts = []
        for conv in conversations:
            if not isinstance(conv, list):
                raise InputError("each conversation must be a list of {'role': ..., 'content': ...} dicts")
            prompts.append(
                self.input_processor.chat(
                    conv,
                    add_generation_prompt,
                    chat_template,
                    {**(chat_template_kwargs or {}), **kwargs},
                    continue_final_message=continue_final_message,
                    tools=tools,
                )
            )
        return self._run(self._requests(prompts, sampling_params, None), use_tqdm)

    def stream(self, prompt: PromptType, sampling_params: SamplingParams | None = None) -> Iterator[str]:
        """Generates for one prompt, yielding text deltas of completion 0 as they are produced; the
        final ``RequestOutput`` is ``last_output`` afterwards."""
        (request,) = self._requests([self.input_processor.prompt(prompt)], sampling_params, None)
        outputs = OutputProcessor(self._decode_token, self.tokenizer.eos_token_id)
        state = outputs.add_request(request)
        # Leaving early (the generator closed, an exception) aborts the request and waits for its end.
        with self._driver.session() as session:
            try:
                session.add(request.request_id, request.prompt.token_ids, request.engine_params)
            except Exception:
                self.input_processor.release([request])
                raise
            for deltas in session.outputs(step_by_step=True):
                for _, new in outputs.process(deltas):
                    if "error" in new.extra:
                        raise RuntimeError(new.extra["error"])
                    for c in new.outputs:
                        if c.index == 0 and c.text:
                            yield c.text
        self.last_output = state.output

    def stats(self) -> dict[str, Any]:
        return dict(self.engine.stats())

    # -- internals ---------------------------------------------------------------------------------

    def _requests(
        self,
        prompts: list[Any],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None,
        priority: Sequence[int] | None,
    ) -> list[EngineRequest]:
        """Validates everything before any work starts."""
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        if isinstance(sampling_params, SamplingParams):
            params_list = [sampling_params] * len(prompts)
        else:
            params_list = list(sampling_params)
            if len(params_list) != len(prompts):
                raise InputError(
                    f"got {len(params_list)} SamplingParams for {len(prompts)} prompts; give one or one each"
                )
        if priority is not None and len(priority) != len(prompts):
            raise InputError(f"got {len(priority)} priorities for {len(prompts)} prompts")
        requests: list[EngineRequest] = []
        try:
            for i, (p, sp) in enumerate(zip(prompts, params_list, strict=True)):
                rid = str(next(self._counter))
                requests.append(
                    self.input_processor.process(rid, p, sp, 0 if priority is None else int(priority[i]))
                )
        except Exception:
            self.input_processor.release(requests)
            raise
        return requests

    def _decode_token(self, token_id: int) -> str:
        return self.tokenizer.decode([int(token_id)], skip_special_tokens=False)

    def _run(self, requests: list[EngineRequest], use_tqdm: bool) -> list[RequestOutput]:
        outputs = OutputProcessor(self._decode_token, self.tokenizer.eos_token_id)
        states = []
        errors: list[str] = []
        with self._driver.session() as session:
            try:
                for r in requests:
                    session.add(r.request_id, r.prompt.token_ids, r.engine_params)
                    states.append(outputs.add_request(r))
            except Exception:
                self.input_processor.release(requests[len(states) :])
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
                    for _, new in outputs.process(deltas):
                        n_out += sum(len(c.token_ids) for c in new.outputs)
                        if "error" in new.extra:
                            errors.append(f"request {new.request_id}: {new.extra['error']}")
                        if new.finished and pbar is not None:
                            elapsed = max(time.perf_counter() - start, 1e-9)
                            pbar.set_postfix_str(f"output {n_out / elapsed:.1f} tok/s", refresh=False)
                            pbar.update(1)
            finally:
                if pbar is not None:
                    pbar.close()
        if errors:
            raise RuntimeError("; ".join(errors))
        return [s.output for s in states]
