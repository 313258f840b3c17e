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
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from functools import partial
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from .. import __version__
from ..async_engine import AsyncEngine, EngineStoppedError
from ..input_processor import chat_messages
from ..tokenizer import cut_after_final_message
from .chat_templates import TemplateSandbox, request_template
from .guard import GuardMiddleware
from .metrics import CONTENT_TYPE, ServerMetrics
from .protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    ErrorResponse,
    ModelCard,
    ModelList,
    TokenizeRequest,
)
from .responses import ResponsesRequest, full_responses, responses_prep, stream_responses
from .serving import (
    APIError,
    bad_request,
    chat_inputs,
    check_generation_prompt,
    checked,
    full_response,
    prepare_chat,
    prepare_completion,
    stream_response,
)

logger = logging.getLogger("ossa.server")

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


class SafeJSONResponse(JSONResponse):
    """JSON that any string survives: text with a lone surrogate (which a client can send, e.g. as a
    model name, and an error message may quote) is written with \\u escapes instead of failing."""

    def render(self, content: Any) -> bytes:
        try:
            return json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode()
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode()


def _error_json(
    status: int,
    message: str,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = APIError(status, message, type_, param, code).body()
    return SafeJSONResponse(body, status_code=status, headers=headers)


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


def _openapi_400(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """FastAPI documents 422 for a body that fails validation; this server answers 400 with an
    OpenAI-shaped error, so the schema says that."""
    from fastapi.openapi.utils import get_openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components["ErrorResponse"] = ErrorResponse.model_json_schema(
            ref_template="#/components/schemas/{model}"
        )
        for name, sub in components["ErrorResponse"].pop("$defs", {}).items():
            components[name] = sub
        for name in ("HTTPValidationError", "ValidationError"):
            components.pop(name, None)
        error = {
            "description": "Invalid request (OpenAI-shaped error)",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}},
        }
        for path in schema.get("paths", {}).values():
            for op in path.values():
                responses = op.get("responses", {})
                if responses.pop("422", None) is not None:
                    responses["400"] = error
        app.openapi_schema = schema
        return schema

    return openapi


def create_app(
    engine: AsyncEngine,
    served_model_name: str = "ossa",
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    owns_engine: bool = True,
    allowed_origins: list[str] | None = None,
    allowed_methods: list[str] | None = None,
    allowed_headers: list[str] | None = None,
    allow_credentials: bool = False,
    trust_request_chat_template: bool = False,
    template_sandbox: TemplateSandbox | None = None,
    tool_call_parser: str | None = None,
    reasoning_parser: str = "auto",
) -> FastAPI:
    """The FastAPI app. With ``owns_engine`` the app starts the engine on startup and stops it on
    shutdown (after uvicorn has let in-flight requests finish).

    CORS as vLLM's defaults: any origin, method and header, no credentials; a preflight needs no API
    key. ``trust_request_chat_template`` lets requests bring their own chat template, rendered in
    ``template_sandbox`` (default: a ``TemplateSandbox()``). ``tool_call_parser``: the model's tool-call
    format for ``tool_choice="auto"`` (one of ``tools.PARSERS``; default: from the chat template).
    ``reasoning_parser``: "auto" (a thinking model's <think> block becomes ``reasoning_content`` where
    the chat template writes one), "think" (always looked for) or "none" (the reply as it is)."""
    from .reasoning import PARSERS as REASONING_PARSERS
    from .tools import PARSERS

    if tool_call_parser is not None and tool_call_parser not in PARSERS:
        raise ValueError(f"unknown tool_call_parser {tool_call_parser!r} (one of {', '.join(PARSERS)})")
    if reasoning_parser not in REASONING_PARSERS:
        raise ValueError(
            f"unknown reasoning_parser {reasoning_parser!r} (one of {', '.join(REASONING_PARSERS)})"
        )
    metrics = ServerMetrics(engine.stats, served_model_name)
    engine.on_finished = metrics.observe_finished
    sandbox = template_sandbox or TemplateSandbox()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if owns_engine:
            engine.start()
        try:
            yield
        finally:
            await sandbox.close()
            if owns_engine:
                engine.shutdown()

    app = FastAPI(
        title="ossa", version=__version__, lifespan=lifespan, default_response_class=SafeJSONResponse
    )
    app.openapi = _openapi_400(app)  # type: ignore[method-assign]
    app.state.engine = engine
    app.state.metrics = metrics
    app.state.draining = False  # set by the launcher on SIGTERM: /health answers 503
    app.add_middleware(GuardMiddleware, api_key=api_key, max_body_bytes=max_body_bytes)
    # Added last, so outermost: a preflight is answered before the API key is asked for, and every
    # answer (401 and 413 included) carries the CORS headers.
    app.add_middleware(
        CORSMiddleware,
        allow_origins=["*"] if allowed_origins is None else allowed_origins,
        allow_methods=["*"] if allowed_methods is None else allowed_methods,
        allow_headers=["*"] if allowed_headers is None else allowed_headers,
        allow_credentials=allow_credentials,
    )

    @app.exception_handler(APIError)
    async def _api_error(request: Request, e: APIError) -> JSONResponse:
        return SafeJSONResponse(e.body(), status_code=e.status)

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
        return _error_json(e.status_code, msg, code=code, headers=e.headers)  # 405 keeps its Allow

    @app.exception_handler(EngineStoppedError)
    async def _stopped(request: Request, e: EngineStoppedError) -> JSONResponse:
        return _error_json(503, str(e), type_="server_error", code="shutting_down")

    @app.exception_handler(Exception)
    async def _internal(request: Request, e: Exception) -> JSONResponse:
        logger.error("%s %s failed: %s: %s", request.method, request.url.path, type(e).__name__, e)
        return _error_json(500, f"internal error: {type(e).__name__}", type_="server_error")

    def check_model(name: str | None) -> str:
        if name is not None and name != served_model_name:
            raise APIError(
                404,
                f"the model '{name}' does not exist; this server serves '{served_model_name}'",
                param="model",
                code="model_not_found",
            )
        return served_model_name

    def template_variables(kwargs: dict[str, Any] | None) -> dict[str, Any]:
        variables = {
            "bos_token": engine.tokenizer.bos_token or "",
            "eos_token": engine.tokenizer.eos_token or "",
        }
        variables.update(kwargs or {})
        return variables

    async def render_in_sandbox(
        template: str,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool,
        continue_final_message: bool,
        kwargs: dict[str, Any] | None,
    ) -> str:
        """A request's own template rendered in the sandbox; ``continue_final_message`` cuts it
        after the last message's text, as the server's own template is cut."""
        rendered = await sandbox.render(template, messages, add_generation_prompt, template_variables(kwargs))
        if continue_final_message:
            try:
                rendered = cut_after_final_message(rendered, messages)
            except ValueError as e:
                raise bad_request(f"cannot apply the chat template: {e}", param="messages") from None
        return rendered

    async def reply(
        request: Request,
        stream: bool,
        events: Callable[[], AsyncIterator[bytes]],
        whole: Callable[[], Awaitable[dict[str, Any]]],
    ) -> Response:
        """An SSE stream of ``events()``, or the JSON body ``whole()`` builds."""
        if stream:
            return SSEResponse(
                events(),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        completed, body = await _unless_disconnected(request, whole())
        if not completed:
            return Response(status_code=499)  # nobody is listening; nginx's "client closed request"
        return SafeJSONResponse(body)

    async def respond(request: Request, prep: Any, chat: bool) -> Response:
        return await reply(
            request,
            prep.stream,
            partial(stream_response, engine, prep, chat),
            partial(full_response, engine, prep, chat),
        )

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        return await respond(request, prepare_completion(engine, body, check_model(body.model)), chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        model = check_model(body.model)
        template = request_template(body, trust_request_chat_template)
        rendered = None
        if template is not None:
            inputs = chat_inputs(body, template)
            kwargs = {
                **(body.chat_template_kwargs or {}),
                **({"tools": inputs.tools} if inputs.tools else {}),
            }
            rendered = await render_in_sandbox(
                template, inputs.messages, body.add_generation_prompt, body.continue_final_message, kwargs
            )
        prep = prepare_chat(engine, body, model, rendered, tool_call_parser, template, reasoning_parser)
        return await respond(request, prep, chat=True)

    @app.post("/v1/responses")
    async def responses(body: ResponsesRequest, request: Request) -> Response:
        prep = responses_prep(engine, body, check_model(body.model), tool_call_parser, reasoning_parser)
        return await reply(
            request,
            prep.stream,
            partial(stream_responses, engine, prep, body),
            partial(full_responses, engine, prep, body),
        )

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
            check_generation_prompt(body.add_generation_prompt, body.continue_final_message)
            template = request_template(body, trust_request_chat_template)
            proc = engine.input_processor
            kwargs = body.chat_template_kwargs
            if template is not None:
                rendered = await render_in_sandbox(
                    template,
                    checked(chat_messages, body.messages),
                    body.add_generation_prompt,
                    body.continue_final_message,
                    kwargs,
                )
                ids = checked(proc.encode, rendered, False, "messages")
            else:
                ids = checked(
                    proc.chat,
                    body.messages,
                    body.add_generation_prompt,
                    None,
                    kwargs,
                    continue_final_message=body.continue_final_message,
                ).token_ids
        else:
            assert body.prompt is not None
            if body.prompt == "":
                ids = []
            else:
                ids = checked(engine.input_processor.encode, body.prompt, body.add_special_tokens)
        return {"count": len(ids), "max_model_len": engine.max_model_len, "tokens": ids}

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest) -> dict[str, Any]:
        check_model(body.model)
        if body.tokens:
            checked(engine.input_processor.token_ids, body.tokens, "tokens")
        return {"prompt": engine.tokenizer.decode(body.tokens)}

    @app.get("/health")
    async def health() -> Response:
        if app.state.draining:
            return _error_json(503, "the server is shutting down", type_="server_error", code="shutting_down")
        if not engine.running:
            return _error_json(503, "the engine is not running", type_="server_error")
        return SafeJSONResponse({"status": "ok"})

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": __version__}

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    return app
