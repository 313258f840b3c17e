"""``ossa serve``: uvicorn set up for an inference server that meets slow, many and leaving clients.

- Connections: a client must send its request headers within ``header_timeout_s`` of connecting (or of
  its previous response), else the connection is closed (slowloris); idle keep-alive connections close
  after ``timeout_keep_alive_s``; past ``limit_concurrency`` connections or requests uvicorn answers
  503. The open-file limit is raised to its hard limit, and "too many open files" from ``accept()`` is
  logged at most once per ``_ACCEPT_LOG_EVERY_S`` with a count, not once per attempt.
- SIGTERM/SIGINT: stop accepting; an idle connection stays open for ``_IDLE_GRACE_S`` (capped by the
  header timeout) so that a request already sent on it is answered (within the drain, else with a
  JSON 503) rather than met by a closed socket, then closes; /health answers 503; requests in flight
  get up to
  ``shutdown_timeout_s`` to finish; then the engine stops, which ends each remaining stream with an
  OpenAI-shaped error event and ``data: [DONE]`` and answers each remaining non-streaming request with
  a JSON 503; then uvicorn's own shutdown (the app's lifespan) runs, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import os
import resource
import time
from collections.abc import Generator
from typing import Any

logger = logging.getLogger("ossa.server")

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_KEEP_ALIVE_S = 5.0
DEFAULT_SHUTDOWN_TIMEOUT_S = 10.0
DEFAULT_LIMIT_CONCURRENCY = 4096
_ACCEPT_LOG_EVERY_S = 10.0
_FLUSH_S = 10.0  # after the engine stops, how long the ended requests get to write their last bytes
# On shutdown, how long an idle connection stays open for a request already on its way: one whose
# bytes are in flight (or in the socket buffer) when SIGTERM lands is answered, not met by a closed socket.
_IDLE_GRACE_S = 1.0


def raise_open_file_limit(target: int = 65535) -> None:
    """Raises the soft RLIMIT_NOFILE towards ``target`` (as vLLM does); never lowers it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = target if hard == resource.RLIM_INFINITY else min(target, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


class AcceptErrorFilter:
    """An asyncio exception handler that folds repeated accept() resource errors (EMFILE, ENFILE,
    ENOBUFS, ENOMEM) into one line per interval; anything else goes to the default handler."""

    _ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}

    def __init__(self, every_s: float = _ACCEPT_LOG_EVERY_S) -> None:
        self.every_s = every_s
        self.suppressed = 0
        self.last = -float("inf")

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in self._ERRNOS:
            now = time.monotonic()
            if now - self.last < self.every_s:
                self.suppressed += 1
                return
            more = f" ({self.suppressed} more since the last report)" if self.suppressed else ""
            logger.error("cannot accept connections: %s%s", os.strerror(exc.errno or 0), more)
            self.last, self.suppressed = now, 0
            return
        loop.default_exception_handler(context)


def _protocol_class(header_timeout_s: float) -> type:
    """uvicorn's HTTP protocol (httptools where installed, as uvicorn's "auto" picks, else h11) with a
    deadline for request headers."""
    base: type
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol as base

    grace_s = min(_IDLE_GRACE_S, header_timeout_s) if header_timeout_s > 0 else _IDLE_GRACE_S

    class HeaderTimeoutProtocol(base):  # type: ignore[misc, valid-type]
        _header_timer: asyncio.TimerHandle | None = None
        _grace_timer: asyncio.TimerHandle | None = None
        _shutting_down = False

        def _waiting_for_headers(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            if self._header_timer is None and header_timeout_s > 0:
                self._header_timer = self.loop.call_later(header_timeout_s, self._header_timeout)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _close_if_waiting(self) -> None:
            if self._waiting_for_headers() and not self.transport.is_closing():
                self.transport.close()

        def _header_timeout(self) -> None:
            self._header_timer = None
            self._close_if_waiting()

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._grace_timer is not None:
                self._grace_timer.cancel()
                self._grace_timer = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            if self._waiting_for_headers():
                self._arm()  # the first bytes of a next request start its clock
            super().data_received(data)
            if self.cycle is not cycle:  # the headers are in: a request started
                self._disarm()
                if self._shutting_down and self.cycle is not None:
                    self.cycle.keep_alive = False  # answered, then closed

        def _end_of_grace(self) -> None:
            self._grace_timer = None
            self._close_if_waiting()

        def shutdown(self) -> None:
            # The drain asks every connection to shut down, then uvicorn's shutdown asks again.
            if self.transport.is_closing():
                return
            self._shutting_down = True
            if self._waiting_for_headers():
                # Idle: a request may already be on the wire (the client cannot know we are leaving);
                # give it a moment to arrive and be answered 503 before the connection closes.
                if self._grace_timer is None:
                    self._grace_timer = self.loop.call_later(grace_s, self._end_of_grace)
                return
            with contextlib.suppress(Exception):  # h11's LocalProtocolError on a closed connection
                super().shutdown()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._disarm()  # idle now: the keep-alive timeout applies until the next bytes

    return HeaderTimeoutProtocol


def make_server(
    app: Any,
    host: str,
    port: int,
    log_level: str = "info",
    shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    timeout_keep_alive_s: float = DEFAULT_KEEP_ALIVE_S,
    limit_concurrency: int | None = DEFAULT_LIMIT_CONCURRENCY,
) -> Any:
    """A ``uvicorn.Server`` for ``app`` (from ``create_app``) with the behaviour described above."""
    import uvicorn

    class _Server(uvicorn.Server):  # type: ignore[misc]
        @contextlib.contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            # uvicorn re-raises SIGINT/SIGTERM after its shutdown; a shutdown that ended every request
            # well is a success, so the exit status stays 0.
            import signal
            import threading

            if threading.current_thread() is not threading.main_thread():
                yield
                return
            sigs = (signal.SIGINT, signal.SIGTERM)
            original = {s: signal.signal(s, self.handle_exit) for s in sigs}
            try:
                yield
            finally:
                for s, h in original.items():
                    signal.signal(s, h)

        async def startup(self, sockets: list[Any] | None = None) -> None:
            asyncio.get_running_loop().set_exception_handler(AcceptErrorFilter())
            await super().startup(sockets=sockets)

        async def shutdown(self, sockets: list[Any] | None = None) -> None:
            await self._drain(sockets)
            await super().shutdown(sockets=sockets)

        async def _drain(self, sockets: list[Any] | None) -> None:
            loop = asyncio.get_running_loop()
            for server in self.servers:
                server.close()  # stop accepting
            for sock in sockets or []:
                sock.close()
            state = getattr(app, "state", None)
            if state is not None:
                state.draining = True
            for connection in list(self.server_state.connections):
                connection.shutdown()  # idle ones close now, busy ones after their response
            deadline = loop.time() + shutdown_timeout_s
            while self.server_state.tasks and loop.time() < deadline and not self.force_exit:
                await asyncio.sleep(0.05)
            engine = getattr(state, "engine", None)
            if self.server_state.tasks and engine is not None:
                logger.warning(
                    "shutdown timeout (%g s) reached: ending %d request(s) with an error",
                    shutdown_timeout_s,
                    len(self.server_state.tasks),
                )
                engine.shutdown()  # every waiting request gets EngineStoppedError: error event / 503
                deadline = loop.time() + _FLUSH_S
                while self.server_state.tasks and loop.time() < deadline and not self.force_exit:
                    await asyncio.sleep(0.05)

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        http=_protocol_class(header_timeout_s),
        timeout_keep_alive=max(1, int(round(timeout_keep_alive_s))),
        limit_concurrency=limit_concurrency,
        timeout_graceful_shutdown=int(_FLUSH_S),
    )
    return _Server(config)


def default_served_name(model: str | None, model_path: str) -> str:
    """The name a model is served under when none is given: its file's, or a Hub id as given (as vLLM
    does). ``ossa serve`` and the Ray Serve replicas share it."""
    from ..hub import parse_id

    if model is not None and not os.path.exists(model) and parse_id(model) is not None:
        return model
    return os.path.basename(str(model_path)).removesuffix(".gguf")


def describe_speculative(spec: Any) -> str:
    """The speculative config an engine runs with, for its start-up log ("off" when none)."""
    if spec.method == "none":
        return "off"
    fields = {k: v for k, v in dataclasses.asdict(spec).items() if v is not None}
    if spec.method == "draft_model":  # prompt lookup's fields mean nothing to a draft model
        fields.pop("prompt_lookup_min", None)
        fields.pop("prompt_lookup_max", None)
    return f"{fields.pop('method')} " + ", ".join(f"{k}={v}" for k, v in fields.items())


def describe_kv_memory(cache: Any) -> str:
    """The KV cache's blocks and memory for the start-up log, the draft model's cache (as many blocks,
    on top of kv_cache_memory_bytes) included."""
    mib = cache.kv_cache_memory_bytes / 2**20
    text = f"{cache.num_blocks} blocks of {cache.block_size} tokens, {mib:.0f} MiB"
    if cache.draft_kv_cache_memory_bytes:
        text += f" + the draft model's {cache.draft_kv_cache_memory_bytes / 2**20:.0f} MiB"
    return text


def run_server(args: Any, engine_kwargs: dict[str, Any]) -> int:
    """``ossa serve``: loads the model, serves until SIGINT/SIGTERM, then exits 0."""
    from ..async_engine import AsyncEngine
    from .app import DEFAULT_MAX_BODY_BYTES, create_app
    from .chat_templates import load_operator_template

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    max_body = getattr(args, "max_body_bytes", DEFAULT_MAX_BODY_BYTES)
    if max_body is None or max_body < 1:
        raise ValueError(f"--max-body-bytes must be >= 1, got {max_body}")

    def option(flag: str, default: float) -> float:
        value = getattr(args, flag, None)
        value = default if value is None else value
        if value < 0 or value != value:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 0, got {value}")
        return float(value)

    shutdown_s = option("shutdown_timeout", DEFAULT_SHUTDOWN_TIMEOUT_S)
    header_s = option("header_timeout", DEFAULT_HEADER_TIMEOUT_S)
    keep_alive_s = option("timeout_keep_alive", DEFAULT_KEEP_ALIVE_S)
    limit = getattr(args, "limit_concurrency", None) or DEFAULT_LIMIT_CONCURRENCY
    if getattr(args, "limit_concurrency", None) is not None and args.limit_concurrency < 1:
        raise ValueError(f"--limit-concurrency must be >= 1, got {args.limit_concurrency}")
    operator_template = None
    if getattr(args, "chat_template", None):
        operator_template = load_operator_template(args.chat_template)
    raise_open_file_limit()
    engine = AsyncEngine.from_model(args.model, **engine_kwargs)
    if operator_template is not None:
        engine.tokenizer.chat_template = operator_template
    name = args.served_model_name or default_served_name(args.model, engine.llm.model_path)
    app = create_app(
        engine,
        served_model_name=name,
        api_key=args.api_key,
        max_body_bytes=max_body,
        allowed_origins=getattr(args, "allowed_origins", None),
        allowed_methods=getattr(args, "allowed_methods", None),
        allowed_headers=getattr(args, "allowed_headers", None),
        allow_credentials=bool(getattr(args, "allow_credentials", False)),
        trust_request_chat_template=bool(getattr(args, "trust_request_chat_template", False)),
        tool_call_parser=getattr(args, "tool_call_parser", None),
        reasoning_parser=getattr(args, "reasoning_parser", None) or "auto",
    )
    logger.info(
        "serving %s as '%s' on http://%s:%d (max_model_len=%d)",
        engine.llm.model_path,
        name,
        args.host,
        args.port,
        engine.max_model_len,
    )
    logger.info("KV cache: %s", describe_kv_memory(engine.llm.config.cache))
    logger.info("speculative decoding: %s", describe_speculative(engine.llm.config.speculative))
    server = make_server(
        app,
        args.host,
        args.port,
        shutdown_timeout_s=shutdown_s,
        header_timeout_s=header_s,
        timeout_keep_alive_s=keep_alive_s,
        limit_concurrency=int(limit),
    )
    server.run()
    if not server.started:
        return 1
    return 0
