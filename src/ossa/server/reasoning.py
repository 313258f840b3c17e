"""A thinking model's reasoning split from its answer: ``message.reasoning_content`` and ``content``
(streamed: ``delta.reasoning_content`` then ``delta.content``), as vLLM's reasoning parsers and
llama.cpp's server answer for these models.

The format is the ``<think> ... </think>`` block of Qwen3 / Qwen3.5 / QwQ, DeepSeek R1 and V3.1's
thinking mode, GLM-4.5+, SmolLM3, Nemotron, MiniMax-M2, Kimi K2 Thinking and the other families that
took it up. A reply that starts (after whitespace) with ``<think>`` reasons until ``</think>``; a
prompt that already ends with ``<think>`` (templates that open the block for the model: DeepSeek R1,
Qwen3's thinking-only releases) makes the whole reply reasoning until ``</think>`` (a reply cut short
before it is all reasoning). The text after ``</think>`` is the content, its leading whitespace
dropped; a reply without the block is all content. Tool calls are then parsed from the content.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .tool_stream import SpecialTextFilter

THINK, END_THINK = "<think>", "</think>"
PARSERS = ("auto", "none", "think")


def reasoning_for_template(template: str | None) -> bool:
    """Whether a chat template writes (or opens) the <think> block."""
    return THINK in (template or "") and END_THINK in (template or "")


@dataclass
class ReasoningStream:
    """Feeds on a reply's text deltas; each feed returns (reasoning text, content text). ``inside``:
    the prompt ended with <think> (the reply starts in the reasoning). ``drop``: special-token texts
    removed first (when the server decodes special tokens for markers that are special)."""

    inside: bool = False
    drop: Iterable[str] = ()

    def __post_init__(self) -> None:
        self._filter = SpecialTextFilter(self.drop)
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
                if head.startswith(THINK):
                    self._state, self._buf = "think", head[len(THINK) :]
                    continue
                if not final and THINK.startswith(head):
                    break  # (whitespace, or the tag's beginning: wait)
                self._state = "content"
                continue
            if self._state == "think":
                at = buf.find(END_THINK)
                if at >= 0:
                    reasoning += buf[:at]
                    self._state, self._buf = "lead", buf[at + len(END_THINK) :]
                    continue
                keep = 0 if final else _partial(buf, END_THINK)
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


def split_reasoning(text: str, inside: bool, drop: Iterable[str] = ()) -> tuple[str | None, str]:
    """(reasoning or None, content) of a whole reply: what its stream adds up to."""
    rs = ReasoningStream(inside, drop)
    r1, c1 = rs.feed(text)
    r2, c2 = rs.finish()
    return (r1 + r2) or None, c1 + c2
