"""The server's front door: the API key (constant-time) and the request-body limit, checked before the
app sees the request. Answers are OpenAI-shaped JSON, written directly to the ASGI channel."""

from __future__ import annotations

import hmac
import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .serving import APIError, bad_request

# Open without the key: liveness and metrics for probes and scrapers, and the API's documentation.
_OPEN_PATHS = ("/health", "/version", "/metrics", "/docs", "/openapi.json", "/redoc")


async def _send_json(
    send: Send, status: int, body: dict[str, Any], headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    data = json.dumps(body).encode()  # ASCII: safe for any string
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
