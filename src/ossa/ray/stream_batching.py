"""Fewer Ray messages per stream: a replica's streamed response body, sent in batches.

Through Serve's HTTP proxy every ASGI message a replica sends is one Ray streaming item, received,
unpickled and written by the proxy, on the same cores as the engine. ossa's app streams one
server-sent event per token, so a replica would cost the proxy one message per token (the
measurements are in docs/scale-out.md). ``BatchedStream`` wraps the replica's app and joins the body
chunks of a streamed response that come within ``interval_s`` of the last one sent into one body
message, as Ray Serve LLM batches its engine's outputs every 50 ms: the first chunk goes at once
(time to first token is unchanged), then at most one message per interval, and the last chunk
flushes what is held. The client reads the very same events, byte for byte; only their grouping into
network writes changes. Responses that are not streamed (one body message) pass through untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

# Ray Serve LLM's default (RAYLLM_MODEL_RESPONSE_BATCH_TIMEOUT_MS); docs/scale-out.md has ossa's numbers.
DEFAULT_INTERVAL_MS = 100.0


class BatchedStream:
    """ASGI middleware: streamed ``http.response.body`` chunks held back up to ``interval_s`` and sent
    joined (``interval_s`` 0: every chunk at once)."""

    def __init__(self, app: Any, interval_s: float) -> None:
        self.app = app
        self.interval_s = interval_s

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or self.interval_s <= 0:
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        held: list[bytes] = []
        last_sent = -float("inf")
        timer: asyncio.Task[None] | None = None
        lock = asyncio.Lock()  # keeps the timer's flush and the app's own sends in order

        async def emit(message: dict[str, Any] | None) -> None:
            """Sends what is held, joined into ``message`` (the app's) or on its own (``None``)."""
            nonlocal last_sent
            async with lock:
                body = b"".join(held)
                held.clear()
                if message is None:
                    if not body:
                        return
                    message = {"type": "http.response.body", "body": body, "more_body": True}
                elif body:
                    message = {**message, "body": body + message.get("body", b"")}
                if message["type"] == "http.response.body":
                    last_sent = loop.time()
                await send(message)

        async def flush_later(delay: float) -> None:
            nonlocal timer
            await asyncio.sleep(delay)
            timer = None  # from here on the flush runs to its end
            await emit(None)

        async def batched_send(message: dict[str, Any]) -> None:
            nonlocal timer
            streaming = message["type"] == "http.response.body" and message.get("more_body", False)
            if not streaming:  # the start, or the last body message: flush everything with it
                if timer is not None:
                    timer.cancel()
                    timer = None
                await emit(message)
                return
            now = loop.time()
            if not held and now - last_sent >= self.interval_s:
                await emit(message)
                return
            held.append(message.get("body", b""))
            if timer is None:
                timer = asyncio.ensure_future(flush_later(max(0.0, last_sent + self.interval_s - now)))

        try:
            await self.app(scope, receive, batched_send)
        finally:
            if timer is not None:  # the app failed or was cancelled mid-stream
                timer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await timer
