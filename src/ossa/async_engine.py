"""``AsyncEngine``: the C++ engine's background loop behind asyncio.

One thread pulls batches of output deltas from the engine (``get_outputs`` blocks with the GIL
released) and hands each batch to the event loop with a single ``call_soon_threadsafe``; the loop
routes every delta to its request's ``asyncio.Queue``. Python does no per-token work beyond that.
A request whose consumer goes away (client disconnect, task cancellation, generator closed) is
aborted in the engine, which frees its KV blocks.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

logger = logging.getLogger("ossa.async_engine")

_POLL_S = 0.05  # how long the pump waits for outputs before checking whether it should stop


class EngineStoppedError(RuntimeError):
    """The engine stopped before the request finished (server shutting down)."""


class _Stopped:
    """A request's last output when the engine stopped under it."""

    def __init__(self, output: Any) -> None:
        self.output = output


class AsyncEngine:
    """Wraps an ``ossa.LLM`` (built, not running) for concurrent async generation.

    ``on_finished(output, num_generated_tokens)`` is called on the event loop once per finished
    request with its last engine output (timings) and its total number of generated tokens.
    """

    def __init__(
        self, llm: Any, on_finished: Callable[[Any, int], None] | None = None, max_num_seqs: int = 256
    ) -> None:
        if getattr(llm, "backend", "cpp") != "cpp":
            raise ValueError("the server runs the C++ engine; backend='python' is for offline use")
        self.llm = llm
        self.engine = llm.engine
        self.tokenizer = llm.tokenizer
        self.max_model_len: int = int(llm.max_model_len)
        self.vocab_size: int = int(llm.model.config.n_vocab)
        self.eos_token_ids: list[int] = list(llm.tokenizer.eos_token_ids)
        self.on_finished = on_finished
        self.max_num_seqs = int(max_num_seqs)  # LLM's default; the engine does not expose its config
        self._queues: dict[str, asyncio.Queue[Any]] = {}
        self._abandoned: dict[str, int] = {}  # aborted by their consumer: tokens seen, until the end
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._stopped = False

    @classmethod
    def from_model(cls, model: str | None = None, **engine_kwargs: Any) -> AsyncEngine:
        """Loads a model (``ossa.LLM``'s arguments) and wraps its engine."""
        from .llm import LLM

        kwargs = {k: v for k, v in engine_kwargs.items() if v is not None}
        return cls(LLM(model, **kwargs), max_num_seqs=int(kwargs.get("max_num_seqs", 256)))

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
        cut = [o for o in leftover if o.finished and all(c.finish_reason == "abort" for c in o.completions)]
        self._dispatch([o for o in leftover if not any(o is c for c in cut)])
        for out in cut:
            q = self._queues.get(out.request_id)
            if q is not None:
                q.put_nowait(_Stopped(out))
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
        for out in outputs:
            q = self._queues.get(out.request_id)
            if q is not None:
                q.put_nowait(out)
            elif out.request_id in self._abandoned:
                # A request its consumer left: its last output (finish reason "abort") still counts.
                generated = self._abandoned[out.request_id]
                generated += sum(len(c.token_ids) for c in out.completions)
                if out.finished:
                    del self._abandoned[out.request_id]
                    self._observe(out, generated)
                else:
                    self._abandoned[out.request_id] = generated

    def _observe(self, out: Any, generated: int) -> None:
        if self.on_finished is not None:
            try:
                self.on_finished(out, generated)
            except Exception:
                logger.exception("on_finished hook failed")

    # -- requests ----------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return dict(self.engine.stats())

    async def generate(self, request_id: str, prompt_token_ids: list[int], params: Any) -> AsyncIterator[Any]:
        """Adds a request and yields its ``EngineOutput`` deltas until it finishes.

        Raises ValueError (from the engine) for invalid input before anything is yielded, and
        ``EngineStoppedError`` if the engine stops first. Leaving the iteration early aborts it.
        """
        if not self.running:
            raise EngineStoppedError("the engine is not running")
        if request_id in self._queues:
            raise ValueError(f"request id {request_id!r} is already in use")
        q: asyncio.Queue[Any] = asyncio.Queue()
        self._queues[request_id] = q
        try:
            self.engine.add_request(request_id, prompt_token_ids, params)
        except BaseException:
            del self._queues[request_id]
            raise
        finished = False
        generated = 0
        try:
            while True:
                out = await q.get()
                if isinstance(out, _Stopped):
                    generated += sum(len(c.token_ids) for c in out.output.completions)
                    finished = True
                    self._observe(out.output, generated)
                    out = None
                if out is None:
                    raise EngineStoppedError("the server is shutting down")
                for c in out.completions:
                    generated += len(c.token_ids)
                if out.finished:
                    finished = True
                    self._observe(out, generated)
                yield out
                if finished:
                    return
        finally:
            self._queues.pop(request_id, None)
            if not finished and not self._stopped and self.engine.abort(request_id):
                self._abandoned[request_id] = generated

    @property
    def num_active(self) -> int:
        """Requests that have a consumer waiting on them."""
        return len(self._queues)
