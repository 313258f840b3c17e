"""Which chat template a request renders with, and rendering the untrusted ones off the event loop.

A request may bring its own template (vLLM's ``chat_template`` field, or ``chat_template`` inside
``chat_template_kwargs``). That is refused with a 400 unless the operator started the server with
``--trust-request-chat-template``; then it renders in one of a few worker processes
(``template_worker``), each with an address-space limit, and a render that does not answer within the
time limit has its worker killed (a fresh one takes its place) and is answered with a 400. The event
loop only waits on a pipe, so ``/health`` and the streams keep going meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct
import sys
from typing import Any

from .. import chat_template
from .serving import APIError, bad_request

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MEMORY_BYTES = 1 << 30
DEFAULT_WORKERS = 2
_START_TIMEOUT_S = 120.0  # a worker's start (imports) on a busy machine


def load_operator_template(value: str) -> str:
    """``--chat-template FILE|STRING``: a file's contents if it names a file, else the string itself;
    compiled once here so that a broken template stops the server at startup, not at the first chat."""
    text = value
    if os.path.isfile(value):
        with open(value, encoding="utf-8") as f:
            text = f.read()
    elif "{" not in value and ("/" in value or value.endswith((".jinja", ".j2", ".txt"))):
        raise ValueError(f"--chat-template: no such file: {value}")
    try:
        chat_template.make_environment().from_string(text)
    except Exception as e:
        raise ValueError(f"--chat-template does not compile: {e}") from None
    return text


def request_template(body: Any, trusted: bool) -> str | None:
    """The template a chat request brings (None: the server's), refused unless trusted; the kwargs'
    copy of it is removed so it is not passed on as a template variable."""
    kwargs = body.chat_template_kwargs or {}
    template = getattr(body, "chat_template", None)
    if "chat_template" in kwargs:
        template = kwargs.pop("chat_template") if template is None else template
        kwargs.pop("chat_template", None)
    if template is None:
        return None
    if not isinstance(template, str):
        raise bad_request("chat_template must be a string", param="chat_template")
    if not trusted:
        raise bad_request(
            "this server does not render chat templates sent in requests (start it with "
            "--trust-request-chat-template to allow them)",
            param="chat_template",
        )
    return template


class _Worker:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def call(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        data = json.dumps(request, ensure_ascii=True).encode()
        self.proc.stdin.write(struct.pack(">I", len(data)) + data)
        await self.proc.stdin.drain()
        return await self.reply()

    async def reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        (n,) = struct.unpack(">I", await self.proc.stdout.readexactly(4))
        if n > (chat_template.MAX_OUTPUT_CHARS * 6 + 4096):  # \uXXXX escapes are 6 bytes
            raise ConnectionError("oversized reply")
        return dict(json.loads(await self.proc.stdout.readexactly(n)))

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()


class TemplateSandbox:
    """A small pool of template worker processes, started on first use."""

    def __init__(
        self,
        workers: int = DEFAULT_WORKERS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
    ) -> None:
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        self._slots = asyncio.Semaphore(workers)
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()

    async def _spawn(self) -> _Worker:
        import ossa

        src = os.path.dirname(os.path.dirname(os.path.abspath(ossa.__file__)))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ossa.server.template_worker", str(self.memory_bytes),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        w = _Worker(proc)
        self._all.add(w)
        try:  # its imports are not the template's time: wait for it to say it is ready
            await asyncio.wait_for(w.reply(), _START_TIMEOUT_S)
        except BaseException:
            await self._discard(w)
            raise
        return w

    async def _discard(self, w: _Worker) -> None:
        w.kill()
        self._all.discard(w)
        with contextlib.suppress(Exception):
            await w.proc.wait()

    async def render(
        self,
        template: str,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool,
        variables: dict[str, Any],
    ) -> str:
        """The rendered prompt; APIError(400) for a template error or a limit it ran into."""
        request = {
            "template": template,
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
            "variables": variables,
        }
        async with self._slots:
            try:
                w = self._idle.pop() if self._idle else await self._spawn()
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
                raise APIError(
                    503, f"cannot start a chat template renderer: {e}", type_="server_error"
                ) from None
            try:
                reply = await asyncio.wait_for(w.call(request), self.timeout_s)
            except asyncio.TimeoutError:
                await self._discard(w)
                raise bad_request(
                    f"cannot apply the chat template: rendering took longer than {self.timeout_s:g} s",
                    param="chat_template",
                ) from None
            except (ConnectionError, asyncio.IncompleteReadError, ValueError, OSError):
                await self._discard(w)  # it died (e.g. out of memory outside Python's reach)
                raise bad_request(
                    "cannot apply the chat template: its renderer ran out of resources", param="chat_template"
                ) from None
            except BaseException:
                await self._discard(w)  # cancelled mid-call: its pipe holds half a frame
                raise
            self._idle.append(w)
        if "error" in reply:
            raise bad_request(f"cannot apply the chat template: {reply['error']}", param="chat_template")
        return str(reply["text"])

    async def close(self) -> None:
        for w in list(self._all):
            await self._discard(w)
        self._idle.clear()


__all__ = ["APIError", "TemplateSandbox", "load_operator_template", "request_template"]
