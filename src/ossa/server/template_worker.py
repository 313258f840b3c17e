"""A child process that renders untrusted chat templates (``python -m ossa.server.template_worker``).

It caps its own address space (``RLIMIT_AS``, from argv[1] in bytes), lowers its own priority, and
reads requests from stdin, writing one reply per request to stdout; the server kills it when a reply
is late. Frames are a 4-byte big-endian length and ASCII JSON (lone surrogates in messages survive as
escapes): first ``{"ready": true}`` once started, then per request ``{"template", "messages",
"add_generation_prompt", "variables"}`` a reply ``{"text"}`` or ``{"error"}``.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import struct
import sys
from typing import Any, BinaryIO

MAX_FRAME = 64 << 20


def read_frame(f: BinaryIO, limit: int = MAX_FRAME) -> Any:
    head = f.read(4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack(">I", head)
    if n > limit:
        raise ValueError(f"frame of {n} bytes is over the limit of {limit}")
    data = f.read(n)
    if len(data) < n:
        return None
    return json.loads(data)


def write_frame(f: BinaryIO, obj: Any) -> None:
    data = json.dumps(obj, ensure_ascii=True).encode()
    f.write(struct.pack(">I", len(data)) + data)
    f.flush()


def serve(memory_bytes: int) -> None:
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    # A hostile template burns a core until the server kills it: the engine's threads come first.
    with contextlib.suppress(OSError):
        os.nice(10)
    from ossa.chat_template import TemplateCache, render

    cache = TemplateCache(limited=True)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    write_frame(stdout, {"ready": True})  # imports done: the server's time limit starts per render
    while True:
        req = read_frame(stdin)
        if req is None:
            return
        try:
            text = render(
                cache, req["template"], req["messages"], bool(req["add_generation_prompt"]), req["variables"]
            )
            reply: dict[str, Any] = {"text": text}
        except MemoryError:
            cache = TemplateCache(limited=True)  # drop whatever the failed render left behind
            reply = {"error": "the template needs more memory than the limit for request templates"}
        except RecursionError:
            reply = {"error": "the template recurses too deeply"}
        except Exception as e:  # syntax errors, raise_exception, sandbox refusals, bad variables
            reply = {"error": f"{type(e).__name__}: {e}"}
        write_frame(stdout, reply)


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
