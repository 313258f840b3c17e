"""The OpenAI-compatible HTTP server: FastAPI + uvicorn in front of the C++ engine's background loop.

    app = create_app(AsyncEngine.from_model("smollm2-135m"), served_model_name="smollm2")
    uvicorn.run(app, host="127.0.0.1", port=8000)

Errors are OpenAI-shaped (``{"error": {"message", "type", "param", "code"}}``): 400 for invalid
fields, 401 for a missing or wrong API key, 404 for an unknown model or route, 413 for a body over
the limit. A client that disconnects is aborted in the engine, which frees its KV blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from functools import partial
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..async_engine import AsyncEngine, EngineStoppedError
from .metrics import CONTENT_TYPE, ServerMetrics
from .protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    ModelCard,
    ModelList,
    TokenizeRequest,
)
from .serving import (
    APIError,
    bad_request,
    chat_prompt,
    encode,
    full_response,
    prepare_chat,
    prepare_completion,
    stream_response,
)

logger = logging.getLogger("ossa.server")

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
_OPEN_PATHS = ("/health", "/version", "/metrics", "/docs", "/openapi.json", "/redoc")


def _error_json(
    status: int,
    message: str,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> JSONResponse:
    return JSONResponse(APIError(status, message, type_, param, code).body(), status_code=status)


async def _send_json(
    send: Send, status: int, body: dict[str, Any], headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


class GuardMiddleware:
    """Checks the API key (constant-time) and caps the request body before the app sees either.

    The body is read here, up to the limit, and replayed to the app: a chunked upload without a
    Content-Length is held to the same limit as one with it.
    """

    def __init__(self, app: ASGIApp, api_key: str | None, max_body_bytes: int) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key else None
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if self.api_key is not None and scope["path"] not in _OPEN_PATHS:
            auth = headers.get(b"authorization", b"")
            given = auth[7:] if auth[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(given, self.api_key):
                body = APIError(
                    401,
                    "missing or invalid API key (send 'Authorization: Bearer <key>')",
                    code="invalid_api_key",
                ).body()
                await _send_json(send, 401, body, ((b"www-authenticate", b"Bearer"),))
                return
        length = headers.get(b"content-length")
        too_large = APIError(
            413,
            f"the request body is larger than the limit of {self.max_body_bytes} bytes",
            code="request_too_large",
        ).body()
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await _send_json(send, 400, bad_request("invalid Content-Length header").body())
                return
            if declared > self.max_body_bytes:
                await _send_json(send, 413, too_large)
                return
        if scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _send_json(send, 413, too_large)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class SSEResponse(StreamingResponse):
    """A stream that always watches for the client going away (whatever the ASGI spec version), so
    a disconnect cancels the generator, and the generator's cleanup aborts the engine request."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as tg:

                async def wrap(func: Callable[[], Awaitable[None]]) -> None:
                    await func()
                    tg.cancel_scope.cancel()

                tg.start_soon(wrap, partial(self.stream_response, send))
                await wrap(partial(self.listen_for_disconnect, receive))
        except OSError:  # the socket went away mid-send
            pass
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _unless_disconnected(request: Request, work: Awaitable[Any]) -> tuple[bool, Any]:
    """Runs work; if the client leaves first, cancels it (aborting its engine requests)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        watcher.cancel()
        raise
    if task in done:
        watcher.cancel()
        return True, task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    return False, None


def create_app(
    engine: AsyncEngine,
    served_model_name: str = "ossa",
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    owns_engine: bool = True,
) -> FastAPI:
    """The FastAPI app. With ``owns_engine`` the app starts the engine on startup and stops it on
    shutdown (after uvicorn has let in-flight requests finish)."""
    metrics = ServerMetrics(engine.stats, served_model_name)
    engine.on_finished = metrics.observe_finished

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if owns_engine:
            engine.start()
        try:
            yield
        finally:
            if owns_engine:
                engine.shutdown()

    app = FastAPI(title="ossa", version=__version__, lifespan=lifespan)
    app.state.engine = engine
    app.state.metrics = metrics
    app.add_middleware(GuardMiddleware, api_key=api_key, max_body_bytes=max_body_bytes)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, e: APIError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, e: RequestValidationError) -> JSONResponse:
        errors = e.errors()
        parts, param = [], None
        for err in errors[:5]:
            loc = [str(x) for x in err.get("loc", ()) if x != "body"]
            where = ".".join(loc)
            param = param or (where or None)
            parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg", "invalid")))
        return _error_json(400, "; ".join(parts) or "invalid request", param=param)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code)
        msg = (
            f"no route {request.method} {request.url.path}" if e.status_code in (404, 405) else str(e.detail)
        )
        return _error_json(e.status_code, msg, code=code)

    @app.exception_handler(EngineStoppedError)
    async def _stopped(request: Request, e: EngineStoppedError) -> JSONResponse:
        return _error_json(503, str(e), type_="server_error", code="shutting_down")

    def check_model(name: str | None) -> str:
        if name is not None and name != served_model_name:
            raise APIError(
                404,
                f"the model '{name}' does not exist; this server serves '{served_model_name}'",
                param="model",
                code="model_not_found",
            )
        return served_model_name

    async def respond(request: Request, prep: Any, chat: bool) -> Response:
        if prep.stream:
            return SSEResponse(
                stream_response(engine, prep, chat),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        completed, body = await _unless_disconnected(request, full_response(engine, prep, chat))
        if not completed:
            return Response(status_code=499)  # nobody is listening; nginx's "client closed request"
        return JSONResponse(body)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        return await respond(request, prepare_completion(engine, body, check_model(body.model)), chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        return await respond(request, prepare_chat(engine, body, check_model(body.model)), chat=True)

    @app.get("/v1/models")
    async def list_models() -> ModelList:
        root = getattr(engine.llm, "model_path", None)
        return ModelList(
            data=[ModelCard(id=served_model_name, root=root, max_model_len=engine.max_model_len)]
        )

    @app.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str) -> ModelCard:
        check_model(model_id)
        return ModelCard(id=served_model_name, max_model_len=engine.max_model_len)

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest) -> dict[str, Any]:
        check_model(body.model)
        if (body.prompt is None) == (body.messages is None):
            raise bad_request("give exactly one of prompt or messages")
        if body.messages is not None:
            ids = chat_prompt(engine, body.messages, body.add_generation_prompt, None).token_ids
        else:
            assert body.prompt is not None
            if body.prompt == "":
                ids = []
            else:
                ids = encode(engine, body.prompt, body.add_special_tokens, "prompt")
        return {"count": len(ids), "max_model_len": engine.max_model_len, "tokens": ids}

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest) -> dict[str, Any]:
        check_model(body.model)
        for t in body.tokens:
            if not 0 <= t < engine.vocab_size:
                raise bad_request(
                    f"token id {t} is outside the vocabulary [0, {engine.vocab_size})", param="tokens"
                )
        return {"prompt": engine.tokenizer.decode(body.tokens)}

    @app.get("/health")
    async def health() -> Response:
        if not engine.running:
            return _error_json(503, "the engine is not running", type_="server_error")
        return Response(status_code=200)

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": __version__}

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    return app


def _uvicorn_server(app: Any, host: str, port: int, log_level: str = "info", graceful_s: int = 10) -> Any:
    import uvicorn

    class _Server(uvicorn.Server):
        # uvicorn re-raises SIGINT/SIGTERM after its graceful shutdown; a clean shutdown that
        # finished (or aborted) every request is a success, so keep the exit status 0.
        @contextlib.contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
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

    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=graceful_s, access_log=False
    )
    return _Server(config)


def run_server(args: Any, engine_kwargs: dict[str, Any]) -> int:
    """``ossa serve``: loads the model, serves until SIGINT/SIGTERM, then exits 0."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    engine = AsyncEngine.from_model(args.model, **engine_kwargs)
    from ..hub import parse_id

    default_name = os.path.basename(str(engine.llm.model_path)).removesuffix(".gguf")
    if args.model is not None and not os.path.exists(args.model) and parse_id(args.model) is not None:
        default_name = args.model  # a Hub id is served under its own name, as vLLM does
    name = args.served_model_name or default_name
    max_body = getattr(args, "max_body_bytes", DEFAULT_MAX_BODY_BYTES)
    if max_body is None or max_body < 1:
        raise ValueError(f"--max-body-bytes must be >= 1, got {max_body}")
    app = create_app(engine, served_model_name=name, api_key=args.api_key, max_body_bytes=max_body)
    logger.info(
        "serving %s as '%s' on http://%s:%d (max_model_len=%d)",
        engine.llm.model_path,
        name,
        args.host,
        args.port,
        engine.max_model_len,
    )
    server = _uvicorn_server(app, args.host, args.port)
    server.run()
    if not server.started:
        return 1
    return 0
