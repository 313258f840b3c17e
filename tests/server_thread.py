"""A uvicorn server on a free loopback port, in a background thread, for the server tests, and the
helpers those tests share (the engine's /metrics, concurrent streams)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any


class ServerThread:
    def __init__(self, app: Any) -> None:
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(60)


def metrics(server: ServerThread) -> dict[str, float]:
    """The ossa:* samples of /metrics, by name."""
    import httpx

    out = {}
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        if line.startswith("ossa:") and "{" in line:
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0]] = float(value)
    return out


def wait_idle(server: ServerThread, timeout_s: float = 60) -> dict[str, float]:
    """Polls /metrics until nothing runs or waits (a deadline against hangs, not a timing check)."""
    deadline = time.monotonic() + timeout_s
    while True:
        m = metrics(server)
        if m["ossa:num_requests_running"] == 0 and m["ossa:num_requests_waiting"] == 0:
            return m
        assert time.monotonic() < deadline, f"requests still active: {m}"
        time.sleep(0.05)


def concurrent_streams(server: ServerThread, prompts: list[str], **kw: Any) -> list[str]:
    """Every prompt as a streamed completion (seed = its index), all at once through the official
    async client; the concatenated text of each."""
    import openai

    async def run() -> list[str]:
        aclient = openai.AsyncOpenAI(
            base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300
        )

        async def one(i: int) -> str:
            stream = await aclient.completions.create(prompt=prompts[i], seed=i, stream=True, **kw)
            return "".join([c.choices[0].text async for c in stream])

        try:
            return await asyncio.gather(*[one(i) for i in range(len(prompts))])
        finally:
            await aclient.close()

    return asyncio.run(run())
