"""``AsyncEngine``: the C++ engine's background loop behind asyncio.

One thread pulls batches of output deltas from the engine (``get_outputs`` blocks with the GIL
released) and hands each batch to the event loop with a single ``call_soon_threadsafe``; the loop
turns them into ``RequestOutput``s (``ossa.output_processor``, as ``LLM`` does) and routes each to
its request's ``asyncio.Queue``. Python does no per-token work beyond that. A consumer that falls
behind (a slow client, a busy loop) gets the outputs of the steps it missed merged into one, so it
sends one stream chunk for them instead of one per step.
A request whose consumer goes away (client disconnect, task cancellation, generator closed) is
aborted in the engine, which frees its KV blocks.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from .input_processor import EngineRequest
from .output_processor import OutputProcessor, RequestState, merge_delta
from .outputs import RequestOutput

logger = logging.getLogger("ossa.async_engine")

_POLL_S = 0.05  # how long the pump waits for outputs before checking whether it should stop


class EngineStoppedError(RuntimeError):
    """The engine stopped before the request finished (server shutting down)."""


class _Stopped:
    """A request's last output when the engine stopped under it."""

    def __init__(self, state: RequestState) -> None:
        self.state = state


class AsyncEngine:
    """Wraps an ``ossa.LLM`` (built, not running) for concurrent async generation.

    ``on_finished(output, num_generated_tokens)`` is called on the event loop once per finished
    request with its final ``RequestOutput`` (engine timings) and its number of generated tokens.
    """

    def __init__(self, llm: Any, on_finished: Callable[[RequestOutput, int], None] | None = None) -> None:
        if not llm._backend.serves:
            raise ValueError("the server runs the C++ engine; backend='python' is for offline use")
        self.llm = llm
        self.engine = llm.engine
        self.tokenizer = llm.tokenizer
        self.input_processor = llm.input_processor
        self.max_model_len: int = int(llm.max_model_len)
        # Fields of the model's generation config that requests leaving them unset take (vLLM's).
        self.sampling_defaults: dict[str, Any] = dict(llm.config.sampling_defaults)
        self.vocab_size: int = int(llm.config.load.vocab_size)
        self.max_num_seqs: int = int(self.engine.config.max_num_seqs)
        self.on_finished = on_finished
        self.output_processor = OutputProcessor(llm._decode_token, llm.tokenizer.eos_token_id)
        self._queues: dict[str, asyncio.Queue[Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._stopped = False

    @classmethod
    def from_model(cls, model: str | None = None, **engine_kwargs: Any) -> AsyncEngine:
        """Loads a model for a server (``ossa.LLM``'s options; a None value or an option not given
        takes its default, a server's step limits for ``max_num_seqs`` and ``max_num_batched_tokens``:
        ``ossa.config.SERVER_LIMITS``)."""
        from .config import server_defaults
        from .llm import LLM

        return cls(LLM(model, **server_defaults(engine_kwargs)))

    # -- life cycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Starts the engine's loop and the output pump; call from inside the running event loop."""
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._stop.clear()
        self._stopped = False
        self.engine.start()
        self._thread = threading.Thread(target=self._pump, name="ossa-output-pump", daemon=True)
        self._thread.start()

    def bind_loop(self) -> None:
        """Starts the engine, or moves the output pump to the running event loop if it was started
        in another one (``asyncio.run`` called again): outputs go to the loop that waits for them."""
        loop = asyncio.get_running_loop()
        if self._thread is None:
            return self.start()
        if self._loop is loop:
            return
        if self._queues:
            raise RuntimeError("this engine is serving requests on another event loop")
        self._stop.set()
        self._thread.join()
        self._stop.clear()
        self._loop = loop
        self._thread = threading.Thread(target=self._pump, name="ossa-output-pump", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stops the engine (running requests are aborted) and wakes every waiting request."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.engine.stop()
        leftover = self.engine.get_outputs(0.0)
        self._stopped = True
        # The engine ended what was still running with finish reason "abort": for their consumers that
        # is the server going away (EngineStoppedError), not an ordinary end.
        cut = {
            o.request_id
            for o in leftover
            if o.finished and all(c.finish_reason == "abort" for c in o.completions)
        }
        for state, new in self.output_processor.process(leftover):
            q = self._queues.get(new.request_id)
            if q is None:
                if new.finished:
                    self._observe(state)
            elif new.request_id in cut:
                q.put_nowait(_Stopped(state))
            else:
                q.put_nowait((state, new))
        for q in list(self._queues.values()):
            q.put_nowait(None)  # engine gone: no more deltas are coming

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._stopped

    def _pump(self) -> None:
        loop = self._loop
        assert loop is not None
        while not self._stop.is_set():
            try:
                outputs = self.engine.get_outputs(_POLL_S)
            except Exception:  # never let the pump die silently: requests would hang
                logger.exception("engine.get_outputs failed")
                continue
            if outputs:
                try:
                    loop.call_soon_threadsafe(self._dispatch, outputs)
                except RuntimeError:  # the loop closed under us
                    return

    def _dispatch(self, outputs: list[Any]) -> None:
        for state, new in self.output_processor.process(outputs):
            q = self._queues.get(new.request_id)
            if q is not None:
                q.put_nowait((state, new))
            elif new.finished:  # a request its consumer left: its last output (aborted) still counts
                self._observe(state)

    def _observe(self, state: RequestState) -> None:
        if self.on_finished is not None:
            try:
                self.on_finished(state.output, state.num_generated_tokens)
            except Exception:
                logger.exception("on_finished hook failed")

    # -- requests ----------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return dict(self.engine.stats())

    async def generate(self, request: EngineRequest, delta: bool = True) -> AsyncIterator[RequestOutput]:
        """Adds a validated request (``ossa.input_processor``) and yields its ``RequestOutput``s until
        it finishes: with ``delta`` only what each step brought, else the cumulative output.

        Raises ValueError (from the engine) before anything is yielded if the engine refuses it, and
        ``EngineStoppedError`` if the engine stops first. Leaving the iteration early aborts it.
        """
        if not self.running:
            raise EngineStoppedError("the engine is not running")
        request_id = request.request_id
        if request_id in self._queues:
            raise ValueError(f"request id {request_id!r} is already in use")
        q: asyncio.Queue[Any] = asyncio.Queue()
        self._queues[request_id] = q
        try:
            self.output_processor.add_request(request)
            self.engine.add_request(request_id, request.prompt.token_ids, request.engine_params)
        except BaseException:
            del self._queues[request_id]
            self.output_processor.forget(request_id)
            self.input_processor.release([request])  # its grammar, if any: the engine never saw it
            raise
        finished = False
        held: Any = None  # taken from the queue while catching up, handled next
        try:
            while True:
                item, held = (held, None) if held is not None else (await q.get(), None)
                if isinstance(item, _Stopped):
                    finished = True
                    self._observe(item.state)
                    item = None
                if item is None:
                    raise EngineStoppedError("the server is shutting down")
                state: RequestState = item[0]
                new: RequestOutput = item[1]
                # A consumer that fell behind gets what the missed steps brought as one output.
                while not new.finished and not q.empty():
                    held = q.get_nowait()
                    if not isinstance(held, tuple):
                        break
                    new = merge_delta(new, held[1]) if delta else held[1]
                    held = None
                if new.finished:
                    finished = True
                    self._observe(state)
                yield new if delta else state.output
                if finished:
                    return
        finally:
            self._queues.pop(request_id, None)
            # An abandoned request stays with the output processor until the engine ends it, so its
            # last output (finish reason "abort") is still counted.
            if not finished and (self._stopped or not self.engine.abort(request_id)):
                self.output_processor.forget(request_id)

    def has_request(self, request_id: str) -> bool:
        """A request of this id has a consumer waiting on it."""
        return request_id in self._queues

    @property
    def num_active(self) -> int:
        """Requests that have a consumer waiting on them."""
        return len(self._queues)


class AsyncLLM:
    """vLLM's asyncio engine API (``vllm.v1.engine.async_llm.AsyncLLM``, also ``AsyncLLMEngine``)
    over ``AsyncEngine``: ``generate(prompt, sampling_params, request_id)`` is an async generator of
    ``RequestOutput``s, shaped by ``sampling_params.output_kind`` (cumulative by default, as vLLM's).

        llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model="model.gguf"))
        async for out in llm.generate("Hello", SamplingParams(max_tokens=32), "req-1"):
            print(out.outputs[0].text)
        llm.shutdown()

    The engine starts on the first ``generate`` (inside the running event loop). Breaking out of the
    iteration, cancelling its task or ``abort(request_id)`` ends the request and frees its KV blocks.
    The step limits are a server's (``ossa.config.SERVER_LIMITS``) unless given."""

    def __init__(self, model: str | None = None, **engine_kwargs: Any) -> None:
        self.engine = AsyncEngine.from_model(model, **engine_kwargs)
        self.llm = self.engine.llm
        self._aborted: set[str] = set()

    @classmethod
    def from_engine_args(cls, engine_args: Any) -> AsyncLLM:
        """From an ``ossa.config.EngineArgs`` (``AsyncEngineArgs``), the options it sets."""
        import dataclasses

        from .config import EngineArgs

        defaults = {f.name: f.default for f in dataclasses.fields(EngineArgs)}
        given = {
            name: value
            for name, value in dataclasses.asdict(engine_args).items()
            if name != "model" and value != defaults[name]
        }
        return cls(engine_args.model, **given)

    async def generate(
        self,
        prompt: Any,
        sampling_params: Any = None,
        request_id: str | None = None,
        *,
        priority: int = 0,
    ) -> AsyncIterator[RequestOutput]:
        """The outputs of one request: ``prompt`` as ``LLM.generate`` takes one (a string, token
        ids, ``{"prompt": ...}`` or ``{"prompt_token_ids": ...}``). ValueError (before anything is
        yielded) for a bad prompt or parameters, or a request id in use."""
        import copy
        import uuid

        from .sampling_params import RequestOutputKind

        if sampling_params is None:
            sampling_params = self.llm.get_default_sampling_params()
        request_id = uuid.uuid4().hex if request_id is None else str(request_id)
        if self.engine.has_request(request_id):
            raise ValueError(f"request id {request_id!r} is already in use")
        proc = self.llm.input_processor
        request = proc.process(request_id, proc.prompt(prompt), sampling_params, priority)
        self.engine.bind_loop()
        kind = sampling_params.output_kind
        self._aborted.discard(request_id)
        async for out in self.engine.generate(request, delta=kind == RequestOutputKind.DELTA):
            if request_id in self._aborted:
                self._aborted.discard(request_id)
                return
            if kind == RequestOutputKind.DELTA:
                yield out
            elif kind == RequestOutputKind.CUMULATIVE or out.finished:
                yield copy.deepcopy(out)  # a snapshot: the request's output grows on

    async def abort(self, request_id: str) -> None:
        """Ends a request: its generator returns (without a final output) and its KV blocks free."""
        request_id = str(request_id)
        if self.engine.has_request(request_id):  # (an id that already ended is not remembered)
            self._aborted.add(request_id)
        self.engine.engine.abort(request_id)

    async def get_tokenizer(self) -> Any:
        return self.llm.get_tokenizer()

    def get_default_sampling_params(self) -> Any:
        return self.llm.get_default_sampling_params()

    @property
    def is_running(self) -> bool:
        return self.engine.running

    def shutdown(self) -> None:
        """Stops the engine; requests still running end with ``EngineStoppedError``."""
        self.engine.shutdown()


AsyncLLMEngine = AsyncLLM
