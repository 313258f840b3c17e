"""A thinking model's reasoning split from its answer: ``message.reasoning_content`` and ``content``
(streamed: ``delta.reasoning_content`` then ``delta.content``), as vLLM's reasoning parsers and
llama.cpp's server answer for these models.

The formats (``FORMATS``): the ``<think> ... </think>`` block of Qwen3 / Qwen3.5 / QwQ, DeepSeek R1
and V3.1's thinking mode, GLM-4.5+, SmolLM3, Nemotron, MiniMax-M2, Kimi K2 Thinking and the other
families that took it up; Gemma 4's thought channel ``<|channel>thought ... <channel|>``; Magistral's
``[THINK] ... [/THINK]``; Command's ``<|START_THINKING|> ... <|END_THINKING|>``; Seed-OSS's
``<seed:think> ... </seed:think>``. A reply that starts (after whitespace) with the opening tag reasons
until the closing one; a prompt that already ends with the opening tag (templates that open the block for the
model: DeepSeek R1, Qwen3's thinking-only releases) makes the whole reply reasoning until the closing
tag (a reply cut short before it is all reasoning). The text after the block is the content, its
leading whitespace dropped; a reply without the block is all content. Tool calls are then parsed from
the content.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .tool_stream import SpecialTextFilter

THINK, END_THINK = "<think>", "</think>"
FORMATS = {  # name -> (opening, closing)
    "think": (THINK, END_THINK),
    "gemma4": ("<|channel>thought", "<channel|>"),
    "mistral": ("[THINK]", "[/THINK]"),
    "command": ("<|START_THINKING|>", "<|END_THINKING|>"),  # (Command A Reasoning, Command R7B)
    "seed": ("<seed:think>", "</seed:think>"),  # (Seed-OSS)
}
_MARKS = {"gemma4": ("<|channel>", "<channel|>")}  # (what Gemma 4's template holds: the channel apart)
PARSERS = ("auto", "none", *FORMATS)


def reasoning_for_template(template: str | None) -> str | None:
    """The reasoning format a chat template writes (or opens), or None."""
    t = template or ""
    for name, tags in FORMATS.items():
        opening, closing = _MARKS.get(name, tags)
        if opening in t and closing in t:
            return name
    return None


def tag_texts(format: str) -> set[str]:
    """The texts a format's tags are made of (kept when special tokens are decoded for them)."""
    return {*FORMATS[format], *_MARKS.get(format, ())}


@dataclass
class ReasoningStream:
    """Feeds on a reply's text deltas; each feed returns (reasoning text, content text). ``inside``:
    the prompt ended with the opening tag (the reply starts in the reasoning). ``drop``: special-token
    texts removed first (when the server decodes special tokens for markers that are special).
    ``format``: a key of FORMATS."""

    inside: bool = False
    drop: Iterable[str] = ()
    format: str = "think"

    def __post_init__(self) -> None:
        self._filter = SpecialTextFilter(self.drop)
        self._open, self._close = FORMATS[self.format]
        self._buf = ""
        self._state = "think" if self.inside else "start"  # start -> think -> lead -> content
        self.reasoning = ""  # all the reasoning so far

    def feed(self, text: str) -> tuple[str, str]:
        return self._step(self._filter.feed(text), final=False)

    def finish(self) -> tuple[str, str]:
        return self._step(self._filter.feed("", final=True), final=True)

    def _step(self, text: str, final: bool) -> tuple[str, str]:
        self._buf += text
        reasoning = content = ""
        while True:
            buf = self._buf
            if self._state == "start":  # before the first non-space character: a <think> there?
                head = buf.lstrip()
                if head.startswith(self._open):
                    self._state, self._buf = "think", head[len(self._open) :]
                    continue
                if not final and self._open.startswith(head):
                    break  # (whitespace, or the tag's beginning: wait)
                self._state = "content"
                continue
            if self._state == "think":
                at = buf.find(self._close)
                if at >= 0:
                    reasoning += buf[:at]
                    self._state, self._buf = "lead", buf[at + len(self._close) :]
                    continue
                keep = 0 if final else _partial(buf, self._close)
                reasoning += buf[: len(buf) - keep]
                self._buf = buf[len(buf) - keep :]
                break
            if self._state == "lead":  # the whitespace between the block and the answer
                head = buf.lstrip()
                if not head and not final:
                    self._buf = ""
                    break
                self._state, self._buf = "content", head
                continue
            content += buf
            self._buf = ""
            break
        self.reasoning += reasoning
        return reasoning, content


def _partial(buf: str, tag: str) -> int:
    """The length of the longest end of ``buf`` that begins ``tag`` (held back: it may become it)."""
    for k in range(min(len(tag) - 1, len(buf)), 0, -1):
        if tag.startswith(buf[-k:]):
            return k
    return 0


def split_reasoning(
    text: str, inside: bool, drop: Iterable[str] = (), format: str = "think"
) -> tuple[str | None, str]:
    """(reasoning or None, content) of a whole reply: what its stream adds up to."""
    rs = ReasoningStream(inside, drop, format)
    r1, c1 = rs.feed(text)
    r2, c2 = rs.finish()
    return (r1 + r2) or None, c1 + c2
