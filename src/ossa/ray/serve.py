"""ossa behind Ray Serve: replicas that each hold one engine behind the OpenAI-compatible app.

    from ray import serve
    from ossa.ray.serve import build_app

    serve.run(build_app(model="smollm2-135m", num_replicas=2, num_threads=1))
    # or autoscaling: build_app(model=..., autoscaling_config={"min_replicas": 1, "max_replicas": 4})

From the shell: ``serve run ossa.ray.serve:build_app model=smollm2-135m num_replicas=2`` or
``ossa serve smollm2-135m --ray --num-replicas 2``.

Every replica (``OssaReplica``) loads one engine with ``num_threads`` kernel threads, reserves as many
CPUs (``num_cpus``), and serves the very app ``ossa serve`` runs (``ossa.server.app.create_app``,
built on the replica around its engine through ``@serve.ingress``): the same routes, streaming,
errors, API key and body limit. Ray Serve's HTTP proxy routes each request to the least loaded of two
random replicas. ``prefix_routing=True`` puts a light router ingress (``OssaRouter``) in front: it
reads the request body, forwards the request to a replica picked by ``PrefixAffinityRouter``
(requests sharing a prompt prefix go where that prefix is cached), and relays the replica's response
(the replica still answers with the same app). Health checks ask the replica's engine; a replica
taken away by a scale-down drains (Serve stops routing to it and waits up to
``graceful_shutdown_timeout_s`` for its in-flight requests and streams); a replica that dies is
replaced by Serve. Each replica's engine gauges go to Ray's metrics (``ossa_*`` tagged with the
replica) next to Serve's own; ``/metrics`` over HTTP is the answering replica's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import json
import logging
import os
import signal
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from . import require

serve = require("ray.serve")
from ray.serve.config import RequestRouterConfig  # noqa: E402
from ray.serve.exceptions import RequestCancelledError  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import Response  # noqa: E402

from ..config import SERVER_LIMITS, EngineArgs  # noqa: E402
from ..server.app import DEFAULT_MAX_BODY_BYTES  # noqa: E402
from .stream_batching import DEFAULT_INTERVAL_MS, BatchedStream  # noqa: E402

logger = logging.getLogger("ossa.ray.serve")

# The engine options a replica takes, given flat like the others: every EngineArgs option but those
# the deployment decides (``model`` and ``num_threads`` are ServeArgs' own; replicas run the C++ engine).
_ENGINE_FIELDS = tuple(
    f.name for f in dataclasses.fields(EngineArgs) if f.name not in ("model", "num_threads", "backend")
)


_DEPLOYMENT_FIELDS = (
    "num_replicas",
    "autoscaling_config",
    "max_ongoing_requests",
    "graceful_shutdown_timeout_s",
    "health_check_period_s",
)


class ServeArgs(BaseModel):
    """The arguments of ``build_app`` (strings from ``serve run ... key=value`` are converted)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model: str | None = None
    served_model_name: str | None = None
    num_replicas: int | None = Field(default=None, ge=1)
    autoscaling_config: dict[str, Any] | None = None
    num_threads: int = Field(default=1, ge=1)
    max_ongoing_requests: int | None = Field(default=None, ge=1)
    prefix_routing: bool = False
    api_key: str | None = None
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1)
    chat_template: str | None = None  # a file, or the template itself, instead of the model's
    trust_request_chat_template: bool = False
    allowed_origins: list[str] | None = None
    allowed_methods: list[str] | None = None
    allowed_headers: list[str] | None = None
    allow_credentials: bool = False
    graceful_shutdown_timeout_s: float = Field(default=60.0, gt=0)
    health_check_period_s: float = Field(default=10.0, gt=0)
    # A streamed response's chunks within this many ms of the last one sent go to Serve's proxy as one
    # message (ossa.ray.stream_batching; 0: one message per chunk, i.e. per token).
    stream_batching_interval_ms: float = Field(default=DEFAULT_INTERVAL_MS, ge=0)
    # The engine options (``_ENGINE_FIELDS``, given flat: ``max_num_seqs=8``), gathered here; those
    # left unset take a server's defaults (AsyncEngine.from_model).
    engine: EngineArgs = Field(default_factory=EngineArgs)

    @model_validator(mode="before")
    @classmethod
    def _gather_engine_options(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(k in data for k in _ENGINE_FIELDS):
            given = data.get("engine")
            engine = dataclasses.asdict(given) if isinstance(given, EngineArgs) else dict(given or {})
            engine |= {k: v for k, v in data.items() if k in _ENGINE_FIELDS}
            data = {k: v for k, v in data.items() if k not in _ENGINE_FIELDS} | {"engine": engine}
        return data

    @field_validator(
        "autoscaling_config", "allowed_origins", "allowed_methods", "allowed_headers", mode="before"
    )
    @classmethod
    def _json_dict(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> ServeArgs:
        if self.num_replicas is not None and self.autoscaling_config is not None:
            raise ValueError("give num_replicas or autoscaling_config, not both")
        if (self.engine.model, self.engine.num_threads, self.engine.backend) != (None, None, "cpp"):
            raise ValueError("model and num_threads are ServeArgs' own options; replicas run backend 'cpp'")
        self.engine.validate()
        return self

    def engine_kwargs(self) -> dict[str, Any]:
        kwargs = {name: getattr(self.engine, name) for name in _ENGINE_FIELDS}
        return {k: v for k, v in kwargs.items() if v is not None}


@dataclass
class ForwardedRequest:
    """An HTTP request relayed by ``OssaRouter`` to a replica; ``routing_text`` is what
    ``PrefixAffinityRouter`` keys on."""

    scope: dict[str, Any]
    body: bytes
    routing_text: str


def _served_name(args: ServeArgs, model_path: str) -> str:
    from ..server.launcher import default_served_name

    return args.served_model_name or default_served_name(args.model, model_path)


class _EngineGauges:
    """Pushes the replica's engine gauges to Ray's metrics every ``period_s`` (a daemon thread)."""

    def __init__(self, engine: Any, period_s: float = 2.0) -> None:
        from ray.serve.metrics import Gauge

        names = {
            "num_running": "requests running in the replica's engine",
            "num_waiting": "requests waiting in the replica's engine",
            "kv_usage_percent": "KV-cache blocks in use, percent",
            "prefix_queries": "prompt tokens looked up in the prefix cache",
            "prefix_hits": "prompt tokens found in the prefix cache",
        }
        self.gauges = {k: Gauge(f"ossa_{k}", description=d) for k, d in names.items()}
        self.engine = engine
        self.period_s = period_s
        self.stop = threading.Event()
        threading.Thread(target=self._run, name="ossa-ray-gauges", daemon=True).start()

    def _run(self) -> None:
        while not self.stop.wait(self.period_s):
            with contextlib.suppress(Exception):  # the engine is stopping
                stats = self.engine.stats()
                for key, gauge in self.gauges.items():
                    gauge.set(float(stats.get(key, 0)))


class _ReplicaHeader:
    """Names the answering replica in an ``x-ossa-replica`` response header (which engine, and so
    which prefix cache and which /metrics, a response came from)."""

    def __init__(self, app: Any, replica: str) -> None:
        self.app = app
        self.replica = replica.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_named(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), (b"x-ossa-replica", self.replica)]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_named)


@serve.ingress()
class OssaReplica:
    """One Serve replica: one engine (``num_threads`` kernel threads) and its OpenAI app."""

    def __init__(self, args: ServeArgs) -> None:
        from ..async_engine import AsyncEngine

        self.args = args
        self.engine = AsyncEngine.from_model(args.model, num_threads=args.num_threads, **args.engine_kwargs())
        if args.chat_template:
            from ..server.chat_templates import load_operator_template

            self.engine.tokenizer.chat_template = load_operator_template(args.chat_template)
        self.gauges = _EngineGauges(self.engine)
        from ..server.launcher import describe_speculative

        logger.info("speculative decoding: %s", describe_speculative(self.engine.llm.config.speculative))

    def __serve_build_asgi_app__(self) -> Any:
        from ..server.app import create_app

        app = create_app(
            self.engine,
            served_model_name=_served_name(self.args, self.engine.llm.model_path),
            api_key=self.args.api_key,
            max_body_bytes=self.args.max_body_bytes,
            allowed_origins=self.args.allowed_origins,
            allowed_methods=self.args.allowed_methods,
            allowed_headers=self.args.allowed_headers,
            allow_credentials=self.args.allow_credentials,
            trust_request_chat_template=self.args.trust_request_chat_template,
        )
        app.add_middleware(_ReplicaHeader, replica=serve.get_replica_context().replica_id.unique_id)
        app.add_middleware(BatchedStream, interval_s=self.args.stream_batching_interval_ms / 1000)
        return app

    def check_health(self) -> None:
        """Serve's health check: the engine's loop and output pump must be running."""
        thread = getattr(self.engine, "_thread", None)
        if not self.engine.running or thread is None or not thread.is_alive():
            raise RuntimeError("the ossa engine is not running")

    async def forward(self, request: ForwardedRequest) -> AsyncIterator[dict[str, Any]]:
        """Runs a relayed HTTP request through this replica's app, yielding its ASGI messages.
        Cancelling the call (the client left) cancels the app, which aborts the engine request."""
        sent: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": request.body, "more_body": False}
            await asyncio.Event().wait()  # the client's disconnect arrives as a cancellation
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            await sent.put(message)

        async def run() -> None:
            try:
                await self.app(request.scope, receive, send)  # type: ignore[attr-defined]
            finally:
                await sent.put(None)

        task = asyncio.ensure_future(run())
        try:
            while (message := await sent.get()) is not None:
                yield message
            await task
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


_SCOPE_KEYS = ("type", "http_version", "method", "scheme", "path", "raw_path", "query_string", "headers")


def _routing_text(path: str, body: bytes) -> str:
    """The prompt or the chat messages' contents of a request body (the path for other requests). A
    Responses API body (instructions, input) reads as the chat messages it becomes, so both endpoints
    route a shared conversation prefix alike."""
    try:
        data = json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict):
        prompt = data.get("prompt")
        if isinstance(prompt, str):
            return prompt
        messages = data.get("messages")
        inp = data.get("input")
        if messages is None and isinstance(inp, (str, list)):
            messages = (
                [{"role": "system", "content": data["instructions"]}] if data.get("instructions") else []
            )
            messages += [{"role": "user", "content": inp}] if isinstance(inp, str) else inp
        if isinstance(messages, list):
            parts = []
            for m in messages:
                content = m.get("content") if isinstance(m, dict) else None
                if isinstance(content, list):
                    content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
                parts.append(f"{m.get('role', '') if isinstance(m, dict) else ''}:{content or ''}\n")
            return "".join(parts)
    return path


class _Relay(Response):
    """Sends the ASGI messages of a replica's ``forward`` stream to the client; a client that
    leaves cancels the stream (and so the request in the replica's engine)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.background = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        left = False

        async def watch_disconnect() -> None:
            nonlocal left
            while (await receive())["type"] != "http.disconnect":
                pass
            left = True
            self.stream.cancel()

        watcher = asyncio.ensure_future(watch_disconnect())
        try:
            async for message in self.stream:
                await send(message)
        except RequestCancelledError:
            if not left:
                raise  # cancelled by someone else than the client: let Serve report it
        finally:
            watcher.cancel()


class OssaRouter:
    """The HTTP entry of ``prefix_routing``: relays each request to an ``OssaReplica`` chosen by
    ``PrefixAffinityRouter``, which needs the request body (Serve's HTTP proxy routes on the path
    and headers alone). Not an ASGI ingress itself: an application has one, the replicas' app."""

    def __init__(self, replicas: Any, max_body_bytes: int) -> None:
        self.replicas = replicas.options(stream=True)
        self.max_body_bytes = max_body_bytes

    async def __call__(self, request: Request) -> Response:
        chunks, size = [], 0
        async for chunk in request.stream():
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_body_bytes:  # the replica's app answers 413; no need to read on
                break
        body = b"".join(chunks)
        scope = {k: request.scope[k] for k in _SCOPE_KEYS if k in request.scope}
        forwarded = ForwardedRequest(
            scope | {"root_path": "", "state": {}}, body, _routing_text(scope.get("path", ""), body)
        )
        return _Relay(self.replicas.forward.remote(forwarded))


# Serve runs a replica's user code on a second event loop in its own thread by default, so that code
# which blocks its loop cannot stall the replica's own work; every ASGI message (one per streamed
# token) then crosses between the two loops. ossa's app never blocks its loop (the engine computes in
# its own threads), so replicas run it on the replica's loop, as Serve's throughput-optimized mode
# does (docs/scale-out.md has the measurements).
REPLICA_ENV = {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0"}

# Serve's HTTP proxy hands each request to a replica and receives each of its streamed messages as Ray
# actor calls whose results go through Ray's object layer; with ``RAY_SERVE_PROXY_USE_GRPC=1`` (part
# of Serve's throughput-optimized mode) it talks to the replicas over gRPC instead, which takes
# Serve 25-30% less CPU per streamed message (docs/scale-out.md). The proxy reads it
# from its own process's environment, set where the cluster starts: ``ossa serve --ray`` sets it
# (unless given) when it starts the cluster itself; for ``ray start``, set it there.
PROXY_ENV = {"RAY_SERVE_PROXY_USE_GRPC": "1"}


def _build(args: ServeArgs) -> Any:
    options: dict[str, Any] = {
        "ray_actor_options": {"num_cpus": args.num_threads, "runtime_env": {"env_vars": dict(REPLICA_ENV)}},
        "max_ongoing_requests": args.max_ongoing_requests
        or args.engine.max_num_seqs
        or SERVER_LIMITS["max_num_seqs"],
        "graceful_shutdown_timeout_s": args.graceful_shutdown_timeout_s,
        "health_check_period_s": args.health_check_period_s,
    }
    if args.autoscaling_config is not None:
        options["autoscaling_config"] = args.autoscaling_config
    else:
        options["num_replicas"] = args.num_replicas or 1
    if args.prefix_routing:
        # (Ray's pydantic-v1 shim misleads mypy about this field's type: it takes an import path.)
        options["request_router_config"] = RequestRouterConfig(
            request_router_class="ossa.ray.prefix_router:PrefixAffinityRouter"  # type: ignore[arg-type]
        )
    # The replicas get only what they use: a change of replica count or timeouts then scales the
    # deployment in place (Serve's lightweight update) instead of replacing every replica.
    replica_args = args.model_copy(update={k: ServeArgs.model_fields[k].default for k in _DEPLOYMENT_FIELDS})
    replicas = serve.deployment(OssaReplica, name="OssaReplica").options(**options).bind(replica_args)
    if not args.prefix_routing:
        return replicas
    router = serve.deployment(OssaRouter, name="OssaRouter").options(
        ray_actor_options={"num_cpus": 0}, max_ongoing_requests=100_000
    )
    return router.bind(replicas, args.max_body_bytes)


def build_app(args: ServeArgs | dict[str, Any] | None = None, /, **kwargs: Any) -> Any:
    """A Serve application of ossa replicas for ``serve.run`` (see the module doc for the options).

    ``build_app(model=..., num_replicas=2)`` from Python; ``serve run ossa.ray.serve:build_app
    model=... num_replicas=2`` from the shell (Serve passes the ``key=value`` pairs as one dict).
    """
    if isinstance(args, ServeArgs):
        parsed = args.model_copy(update=kwargs) if kwargs else args
        parsed = ServeArgs.model_validate(parsed.model_dump())
    else:
        parsed = ServeArgs.model_validate({**(args or {}), **kwargs})
    return _build(parsed)


def run_from_cli(args: Any, engine_kwargs: dict[str, Any]) -> int:
    """``ossa serve MODEL --ray``: deploys on the Ray cluster (``RAY_ADDRESS``, a local ``ray start``,
    or a new one-machine cluster) and serves on ``--host:--port`` until Ctrl-C."""
    import time

    ray = require("ray")
    if engine_kwargs.get("backend", "cpp") != "cpp":
        raise ValueError("--ray serves the C++ engine; --backend python is for offline use")
    for flag in ("header_timeout", "timeout_keep_alive", "limit_concurrency"):
        if getattr(args, flag, None) is not None:
            raise ValueError(
                f"--{flag.replace('_', '-')} does not apply with --ray: Ray Serve's HTTP proxy holds the "
                "connections (configure it through Serve's http_options)"
            )
    kwargs = {k: v for k, v in engine_kwargs.items() if k in _ENGINE_FIELDS and v is not None}
    if getattr(args, "shutdown_timeout", None) is not None:
        kwargs["graceful_shutdown_timeout_s"] = args.shutdown_timeout
    for name in ("chat_template", "allowed_origins", "allowed_methods", "allowed_headers"):
        if getattr(args, name, None) is not None:
            kwargs[name] = getattr(args, name)
    kwargs["allow_credentials"] = bool(getattr(args, "allow_credentials", False))
    kwargs["trust_request_chat_template"] = bool(getattr(args, "trust_request_chat_template", False))
    parsed = ServeArgs(
        model=args.model,
        served_model_name=args.served_model_name,
        num_replicas=args.num_replicas,
        num_threads=engine_kwargs.get("num_threads") or 1,
        prefix_routing=args.prefix_routing,
        api_key=args.api_key,
        max_body_bytes=args.max_body_bytes,
        **kwargs,
    )
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not os.environ.get("RAY_ADDRESS"):  # a cluster started here inherits this environment
        for key, value in PROXY_ENV.items():
            os.environ.setdefault(key, value)
    ray.init(address=os.environ.get("RAY_ADDRESS"))
    started_serve = _serve_client() is None  # else Serve runs on the cluster already, with its own proxy
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM ends it like Ctrl-C: the replicas are taken down
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        http = getattr(_serve_client(), "http_config", None)
        host, port = (http.host, http.port) if http is not None else (args.host, args.port)
        if (host, port) != (args.host, args.port):
            logger.warning(
                "Serve already runs on this cluster with its proxy on %s:%s; --host/--port are not applied",
                host,
                port,
            )
        logger.info("deploying %s", _describe(parsed))
        serve.run(_build(parsed), name="ossa")
        print(f"ossa: serving on http://{host}:{port} through Ray Serve (Ctrl-C stops)", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # Take down what this command started: Serve itself if it did, else only its application.
        with contextlib.suppress(Exception):
            if started_serve:
                serve.shutdown()
            else:
                serve.delete("ossa")
        ray.shutdown()  # (stops a cluster ray.init started here; only disconnects from another)
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _serve_client() -> Any:
    """Serve's controller client when Serve runs on the connected cluster, else None."""
    from ray.serve.context import _get_global_client

    return _get_global_client(raise_if_no_controller_running=False)


def _describe(args: ServeArgs) -> str:
    """One log line: the deployment and the engine options given (the speculative config among them)."""
    scale = (
        f"autoscaling {json.dumps(args.autoscaling_config)}"
        if args.autoscaling_config is not None
        else f"{args.num_replicas or 1} replica(s)"
    )
    engine = ", ".join(f"{k}={v!r}" for k, v in sorted(args.engine_kwargs().items())) or "server defaults"
    return f"{args.model or 'the default model'}: {scale} x {args.num_threads} thread(s); engine: {engine}"


# `serve run module:builder key=value ...` wants a builder of exactly one parameter (and converts the
# dict into its pydantic annotation); the keyword form above is for Python callers.
build_app.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter("args", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ServeArgs)]
)
