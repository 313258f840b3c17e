"""gpt-oss's replies (OpenAI's "harmony" format) turned into the chat API's fields as they stream:
``reasoning_content``, ``content`` and ``tool_calls`` (what vLLM answers for these models).

A harmony reply is a run of messages, each a header, ``<|message|>``, a body and an end::

    <|channel|>analysis<|message|>The user asks for the weather...<|end|><|start|>assistant
    <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>

    <|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>It is 4 C.<|return|>

The header names the message's channel (``analysis``: reasoning; ``final``: the answer;
``commentary``: tool calls, or a preamble the user may see) and, for a tool call, its recipient
(``to=functions.NAME``, before or after the channel). ``<|end|>`` closes a message the reply goes
on after; ``<|return|>`` and ``<|call|>`` end the reply (they are the model's stop tokens, so the
text usually ends without them). Routing, per message: ``analysis`` -> reasoning; a recipient
``functions.NAME`` -> a tool call whose arguments are the body (streamed as it comes); a recipient of
another kind (a built-in tool) -> reasoning; anything else (``final``, a ``commentary`` preamble, no
channel) -> content. With tool calls turned off (``tools=False``: no tools, or tool_choice "none")
a call's body is content.

The markers are special tokens, so the server decodes replies with special tokens and drops the
text of every other special token (``drop``). A reply that does not open with a marker is not in
harmony at all and is passed through as content. The non-streamed reply is what the stream adds up to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .tool_stream import SpecialTextFilter, ToolCall

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
END, RETURN, CALL = "<|end|>", "<|return|>", "<|call|>"
MARKERS = (START, CHANNEL, MESSAGE, CONSTRAIN, END, RETURN, CALL)
# What ends a message's body: its end markers, and a new message's start (a body cut short).
_BODY_ENDS = (END, RETURN, CALL, START, CHANNEL)
_CHANNEL_NAME = re.compile(re.escape(CHANNEL) + r"\s*([A-Za-z0-9_-]+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")

_HEADER, _BODY, _PLAIN = range(3)


def is_harmony_template(template: str | None) -> bool:
    """Whether a chat template renders harmony (gpt-oss's): its messages open with channels."""
    return bool(template) and CHANNEL in (template or "") and MESSAGE in (template or "")


def _held_prefix(text: str) -> int:
    """How many characters at the end of ``text`` could still grow into a marker."""
    at = text.rfind("<", max(0, len(text) - max(map(len, MARKERS)) + 1))
    while at >= 0:
        tail = text[at:]
        if any(m.startswith(tail) for m in MARKERS):
            return len(tail)
        at = text.find("<", at + 1)
    return 0


class HarmonyStream:
    """Feeds on a reply's text deltas; each feed returns (reasoning text, content text, tool-call
    deltas in OpenAI's streaming form). ``finish`` returns what is left when the reply ends."""

    def __init__(self, drop: Iterable[str] = (), tools: bool = True) -> None:
        self._filter = SpecialTextFilter(drop)
        self._tools = tools
        self._buf = ""
        self._state = _HEADER
        self._route = "content"  # the open message's: "reasoning", "content" or "call"
        self._messages = 0  # headers read
        self.calls: list[ToolCall] = []
        self.reasoning = ""  # the whole reply's, as sent
        self.content = ""

    def feed(self, text: str) -> tuple[str, str, list[dict[str, Any]]]:
        return self._step(self._filter.feed(text), final=False)

    def finish(self) -> tuple[str, str, list[dict[str, Any]]]:
        return self._step(self._filter.feed("", final=True), final=True)

    def _step(self, text: str, final: bool) -> tuple[str, str, list[dict[str, Any]]]:
        self._buf += text
        out = {"reasoning": "", "content": ""}
        deltas: list[dict[str, Any]] = []

        def emit(piece: str) -> None:
            if not piece:
                return
            if self._route == "call":
                self.calls[-1].arguments += piece
                deltas.append({"index": len(self.calls) - 1, "function": {"arguments": piece}})
            else:
                out[self._route] += piece

        while True:
            if self._state == _PLAIN:
                self._route = "content"
                emit(self._buf)
                self._buf = ""
                break
            if self._state == _HEADER:
                at = self._buf.find(MESSAGE)
                if at < 0:
                    head = self._buf.lstrip()
                    if (
                        self._messages == 0
                        and head
                        and not head.startswith("<|")
                        and not "<|".startswith(head)
                    ):
                        self._state = _PLAIN  # not harmony: all of it is content
                        continue
                    if final:  # a header cut short: nothing of it is text
                        self._buf = ""
                    break
                self._open(self._buf[:at], deltas)
                self._buf = self._buf[at + len(MESSAGE) :]
                self._state = _BODY
                continue
            # _BODY: up to the first marker that ends it
            ends = [(i, m) for m in _BODY_ENDS if (i := self._buf.find(m)) >= 0]
            if ends:
                at, marker = min(ends)
                emit(self._buf[:at])
                # A new header's markers stay in the buffer for the header scan.
                self._buf = self._buf[at + len(marker) :] if marker in (END, RETURN, CALL) else self._buf[at:]
                self._state = _HEADER
                continue
            keep = 0 if final else _held_prefix(self._buf)
            emit(self._buf[: len(self._buf) - keep])
            self._buf = self._buf[len(self._buf) - keep :]
            break
        self.reasoning += out["reasoning"]
        self.content += out["content"]
        return out["reasoning"], out["content"], deltas

    def _open(self, header: str, deltas: list[dict[str, Any]]) -> None:
        """A message's header read: where its body goes."""
        self._messages += 1
        m = _CHANNEL_NAME.search(header)
        channel = m.group(1) if m else ""
        r = _RECIPIENT.search(header)
        recipient = r.group(1) if r else ""
        if recipient.startswith("functions.") and len(recipient) > len("functions.") and self._tools:
            self.calls.append(ToolCall(recipient[len("functions.") :], ""))
            index = len(self.calls) - 1
            call = self.calls[index]
            deltas.append(
                {
                    "index": index,
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }
            )
            self._route = "call"
        elif channel == "analysis" or (recipient and not recipient.startswith("functions.")):
            self._route = "reasoning"
        else:
            self._route = "content"


def parse_harmony(
    text: str, drop: Iterable[str] = (), tools: bool = True
) -> tuple[str | None, str | None, list[ToolCall]]:
    """(reasoning, content, tool calls) of a whole reply: what its stream adds up to (a call's
    arguments are its body's text as the model wrote it)."""
    hs = HarmonyStream(drop, tools)
    hs.feed(text)
    hs.finish()
    return hs.reasoning or None, hs.content or None, hs.calls
