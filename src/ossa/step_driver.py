"""One engine, many calling threads: ``LLM.generate``/``chat``/``stream`` from any number of threads.

The engine is stepped from the callers' own threads (no background thread, as offline generation has
always run), but by one of them at a time. A call opens a ``Session``, adds its requests and then
loops: if outputs for its requests are waiting, it takes them; else, if nobody is stepping the engine,
it becomes the driver for one step (or, when it is the only caller, every step until the engine is
idle) and hands each output to the session that owns its request; else it waits. So requests of all
callers join the same continuous batch and each caller gets exactly its own outputs.

A caller that leaves early (an exception, an abandoned stream, KeyboardInterrupt) aborts its
unfinished requests and keeps stepping until the engine has ended them, so no KV blocks stay behind
and nobody else waits on them.

    driver = StepDriver(engine, serialize=False)
    with driver.session() as s:
        s.add("0", ids, params)
        for deltas in s.outputs():
            ...
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any


class Session:
    """One caller's requests. Not shared between threads."""

    def __init__(self, driver: StepDriver) -> None:
        self._driver = driver
        self.pending: set[str] = set()  # added, not finished: guarded by the driver's condition
        self.outbox: deque[Any] = deque()
        self.lost = False  # the engine went idle with requests of ours unfinished (never expected)

    def add(self, request_id: str, prompt_token_ids: list[int], params: Any) -> None:
        """Adds a request to the engine; raises what the engine raises (nothing is added then)."""
        d = self._driver
        with d._cond:  # under the lock, so a driver never sees it half-registered
            if request_id in d._owner:
                raise ValueError(f"request id {request_id!r} is already in use")
            d._call(d.engine.add_request, request_id, prompt_token_ids, params)
            d._owner[request_id] = self
            self.pending.add(request_id)

    def outputs(self, step_by_step: bool = False) -> Iterator[list[Any]]:
        """This session's engine outputs, a batch at a time, until all its requests have finished.
        ``step_by_step``: never run the engine to idle in one call (a caller showing progress)."""
        d = self._driver
        while True:
            with d._cond:
                while not self.outbox:
                    if not self.pending:
                        return
                    if not d._driving:
                        d._driving = True
                        break
                    d._cond.wait()
                batch = list(self.outbox)
                self.outbox.clear()
            if batch:
                yield batch
                continue
            d._drive(alone=not step_by_step and d._sessions == 1)

    def abort(self) -> None:
        """Aborts this session's unfinished requests and waits until the engine has ended them."""
        d = self._driver
        with d._cond:
            pending = list(self.pending)
        for rid in pending:
            d._call(d.engine.abort, rid)
        for _ in self.outputs():
            pass


class StepDriver:
    """Shares one engine (``core.Engine`` or the twin's) between threads; see the module docstring.

    ``serialize``: also hold a lock around every engine call (the twin's engine is plain Python and
    not safe to add to while it steps; the C++ engine's add_request and abort are)."""

    def __init__(self, engine: Any, serialize: bool = False) -> None:
        self.engine = engine
        self._cond = threading.Condition()
        self._driving = False
        self._owner: dict[str, Session] = {}
        self._sessions = 0
        self._engine_lock = threading.Lock() if serialize else None

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._engine_lock is None:
            return fn(*args)
        with self._engine_lock:
            return fn(*args)

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        s = Session(self)
        with self._cond:
            self._sessions += 1
        try:
            yield s
        except BaseException:
            s.abort()
            raise
        else:
            if s.pending:  # the caller stopped reading (e.g. a closed stream)
                s.abort()
        finally:
            with self._cond:
                self._sessions -= 1
                for rid in [r for r, owner in self._owner.items() if owner is s]:
                    del self._owner[rid]

    def _drive(self, alone: bool) -> None:
        """One step (every step until idle when ``alone``: one crossing for the whole run); routes
        the outputs. Called with ``_driving`` set by this thread."""
        outputs: list[Any] = []
        try:
            outputs = self._call(self.engine.run_to_completion if alone else self.engine.step)
        finally:
            with self._cond:
                for out in outputs:
                    s = self._owner.get(out.request_id)
                    if s is None:
                        continue  # its caller left (aborted): nobody wants it
                    s.outbox.append(out)
                    if out.finished:
                        s.pending.discard(out.request_id)
                        del self._owner[out.request_id]
                if self._owner and not self._call(self.engine.has_unfinished):
                    for rid, s in list(self._owner.items()):  # would wait for ever: end them
                        s.pending.discard(rid)
                        s.lost = True
                        del self._owner[rid]
                self._driving = False
                self._cond.notify_all()
