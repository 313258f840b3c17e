"""A model's reply turned into OpenAI tool calls as it streams, and the same when it is whole.

One scanner serves both: the non-streamed reply is what the streamed deltas add up to, so a client
that accumulates ``delta.tool_calls`` gets exactly the non-streamed ``tool_calls`` (same names, same
``arguments`` text). OpenAI's order: content before the first call streams as content; each call
opens with a delta holding its ``id``, ``type`` and ``function.name`` (arguments ""), then its
arguments come in fragments as the model writes them (the raw JSON text of the arguments object).

Formats ("auto"): Hermes / Qwen ``<tool_call>{"name", "arguments"}</tool_call>`` (repeated), Llama 3
JSON ``<|python_tag|>{"name", "parameters"}; {...}`` or a bare object at the start, Mistral
``[TOOL_CALLS][{"name", "arguments"}, ...]``; and the block formats of ``tool_formats`` (Qwen3-Coder /
Qwen3.5's XML, GLM-4.5's, Gemma 4's, DeepSeek's, Kimi K2's, Llama 4's pythonic list), whose calls go out
whole as each block closes. "required" is the forced grammar's JSON array of ``{"name", "parameters"}``.

Markers that are special tokens (``<tool_call>`` in Hermes-2-Pro, ``<|python_tag|>``,
``[TOOL_CALLS]``) vanish when special tokens are skipped; the server then decodes special tokens and
this module drops the text of every special token except the markers (``SpecialTextFilter``).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .tool_formats import BLOCKS, PY_END, PY_START, Schemas, parse_pythonic

HERMES_START, HERMES_END = "<tool_call>", "</tool_call>"
MISTRAL_START, LLAMA_TAG = "[TOOL_CALLS]", "<|python_tag|>"
MARKERS = {
    "hermes": (HERMES_START, HERMES_END),
    "mistral": (MISTRAL_START,),
    "llama3_json": (LLAMA_TAG,),
    "pythonic": (PY_START, PY_END),
    **{name: (f.start, f.end, *f.inner) for name, f in BLOCKS.items()},
}

_WS = " \t\r\n"
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_NEXT = re.compile(r'["{}\[\]]')
_SCALAR_END = re.compile(r"[\s,}\]:;]")


@dataclass
class ToolCall:
    name: str
    arguments: str  # a JSON text, as OpenAI sends it
    id: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            self.id = f"call_{uuid.uuid4().hex[:24]}"

    def to_openai(self, index: int | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        if index is not None:
            d["index"] = index
        return d


class SpecialTextFilter:
    """Removes the given strings (special tokens' texts) from streamed text, holding back a tail
    that could still grow into one."""

    def __init__(self, drop: Iterable[str]) -> None:
        words = sorted({d for d in drop if d}, key=len, reverse=True)
        self._re = re.compile("|".join(map(re.escape, words))) if words else None
        self._prefixes = {w[:k] for w in words for k in range(1, len(w))}
        self._longest = max((len(w) for w in words), default=0)
        self._held = ""

    def feed(self, text: str, final: bool = False) -> str:
        if self._re is None:
            return text
        # The held tail is raw text: what the filter removed must not join what is left into a new
        # match ("<|im" + "<|im_end|>" + "_end|>" keeps its outer "<|im_end|>", as one pass would).
        raw = self._held + text
        split = len(raw)
        if not final:
            for k in range(min(self._longest - 1, len(raw)), 0, -1):
                if raw[-k:] in self._prefixes:
                    split -= k
                    break
            for m in self._re.finditer(raw):  # a whole match across the split goes out whole
                if m.start() < split < m.end():
                    split = m.end()
        self._held = raw[split:]
        return self._re.sub("", raw[:split])


class _Incomplete(Exception):
    pass


class _Malformed(Exception):
    pass


def _skip_ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def _value_end(s: str, i: int, final: bool) -> int:
    """The end of the JSON value starting at s[i] (its text is checked when used)."""
    c = s[i]
    if c == '"':
        m = _STRING.match(s, i)
        if m is None:
            raise _Incomplete
        return m.end()
    if c in "{[":
        depth, j = 0, i
        while True:
            m = _NEXT.search(s, j)
            if m is None:
                raise _Incomplete
            ch = m.group()
            if ch == '"':
                sm = _STRING.match(s, m.start())
                if sm is None:
                    raise _Incomplete
                j = sm.end()
                continue
            depth += 1 if ch in "{[" else -1
            j = m.end()
            if depth == 0:
                return j
    m = _SCALAR_END.search(s, i)
    if m is None:
        if not final:
            raise _Incomplete
        return len(s)
    if m.start() == i:
        raise _Malformed
    return m.start()


@dataclass
class _Scan:
    name: str | None = None
    args: tuple[int, int | None] | None = None  # the arguments value's span (end None: still growing)
    end: int | None = None  # just past the closing brace


def _scan_call(s: str, i: int, final: bool) -> _Scan:
    """What s[i:] (an object, ``{`` at i) says so far of ``{"name": ..., "arguments" | "parameters":
    ...}``; other keys are passed over. Raises _Malformed for text no call object can continue."""
    out = _Scan()
    j = i + 1
    first = True
    while True:
        j = _skip_ws(s, j)
        if j == len(s):
            return out
        if s[j] == "}":
            out.end = j + 1
            return out
        if not first:
            if s[j] != ",":
                raise _Malformed
            j = _skip_ws(s, j + 1)
            if j == len(s):
                return out
        if s[j] != '"':
            raise _Malformed
        m = _STRING.match(s, j)
        if m is None:
            return out
        key = json.loads(m.group())
        j = _skip_ws(s, m.end())
        if j == len(s):
            return out
        if s[j] != ":":
            raise _Malformed
        j = _skip_ws(s, j + 1)
        if j == len(s):
            return out
        is_args = key in ("arguments", "parameters") and out.args is None
        try:
            end = _value_end(s, j, final)
        except _Incomplete:
            if is_args:
                out.args = (j, None)
            return out
        if key == "name" and out.name is None:
            try:
                name = json.loads(s[j:end])
            except json.JSONDecodeError:
                raise _Malformed from None
            if not isinstance(name, str):
                raise _Malformed
            out.name = name
        elif is_args:
            out.args = (j, end)
        j = end
        first = False


@dataclass
class _Open:
    """The call being scanned."""

    start: int
    call: ToolCall | None = None  # set when its header has been sent
    sent: int = 0  # characters of its arguments text sent


_CONTENT, _BETWEEN, _CALL, _AFTER, _PLAIN, _DONE = range(6)


@dataclass
class ToolStream:
    """Feeds on a reply's text deltas; each feed returns (content text, tool-call deltas).

    ``mode``: "auto" (the model's own ``parser`` format), "required" (the forced JSON array) or a
    function's name (the whole reply is that function's arguments). ``drop``: special-token texts
    to remove (the server decodes special tokens when a marker is one). ``schemas``: the functions'
    parameters schemas by name (the XML formats type their text values by them)."""

    parser: str
    mode: str
    drop: Iterable[str] = ()
    schemas: Schemas | None = None
    calls: list[ToolCall] = field(default_factory=list)  # every call begun, in index order
    done: list[ToolCall] = field(default_factory=list)  # the calls whose object closed and parsed
    broken: bool = False  # a call was cut short or did not parse

    def __post_init__(self) -> None:
        self._filter = SpecialTextFilter(self.drop)
        self._buf = ""
        self._pos = 0  # how far the scanner has committed
        self._state = _BETWEEN if self.mode == "required" else _CONTENT
        self._sent = 0  # content: characters of _buf sent
        self._open: _Open | None = None
        self._array = False

    def feed(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        content, deltas = self._step(self._filter.feed(text), final=False)
        return content, coalesce_tool_deltas(deltas)

    def finish(self) -> tuple[str, list[dict[str, Any]]]:
        """What is left when the reply ends."""
        content, deltas = self._step(self._filter.feed("", final=True), final=True)
        return content, coalesce_tool_deltas(deltas)

    # -- the scanner ------------------------------------------------------------------------------

    def _step(self, text: str, final: bool) -> tuple[str, list[dict[str, Any]]]:
        self._buf += text
        deltas: list[dict[str, Any]] = []
        if self.mode not in ("auto", "required"):  # a named function: arguments as they come
            if not self.calls:
                self.calls.append(ToolCall(self.mode, ""))
                deltas.append(self._header(0))
            if text:
                self.calls[0].arguments += text
                deltas.append({"index": 0, "function": {"arguments": text}})
            if final:
                self.done = list(self.calls)
            return "", deltas
        if self.mode == "auto" and self.parser in BLOCKS:
            return self._blocks(final)
        if self.mode == "auto" and self.parser == "pythonic":
            return self._pythonic(final)
        content = ""
        while True:
            before = (self._state, self._pos)
            if self._state == _CONTENT:
                content += self._content(final)
            elif self._state == _PLAIN:
                content += self._buf[self._sent :]
                self._sent = len(self._buf)
            elif self._state == _BETWEEN:
                self._between(final)
            elif self._state == _CALL:
                try:
                    self._call(final, deltas)
                except _Malformed:
                    content += self._give_up()
            elif self._state == _AFTER:
                self._after()
            if (self._state, self._pos) == before:
                break
        if final and self._state == _CALL:
            content += self._give_up()  # cut short
        return content, deltas

    def _content(self, final: bool) -> str:
        buf, marker = self._buf, MARKERS[self.parser][0] if self.mode == "auto" else ""
        if self.parser == "llama3_json" and not buf[: self._sent].strip():
            head = _skip_ws(buf, self._sent)
            if head < len(buf) and buf[head] == "{":
                self._state, self._pos = _BETWEEN, head  # a bare call object opens the reply
                return ""
        at = buf.find(marker, self._sent)
        if at >= 0:
            out = buf[self._sent : at].rstrip()
            self._state, self._pos, self._sent = _BETWEEN, at + len(marker), self._sent + len(out)
            return out
        return self._held_content(marker, final)

    def _between(self, final: bool) -> None:
        buf = self._buf
        j = self._pos
        while j < len(buf) and buf[j] in _WS + ",;":
            j += 1
        self._pos = j
        if j == len(buf):
            return
        c = buf[j]
        if c == "{":
            self._state, self._open = _CALL, _Open(j)
        elif c == "[" and not self._array and (self.mode == "required" or self.parser != "hermes"):
            self._array, self._pos = True, j + 1
        elif c == "]" and self._array:
            self._state, self._pos = _AFTER, j + 1
        elif self.parser == "hermes" and self.mode == "auto" and buf.startswith(HERMES_END, j):
            self._state, self._pos = _AFTER, j + len(HERMES_END)
        elif not final and self.mode == "auto" and self.parser == "hermes" and HERMES_END.startswith(buf[j:]):
            return  # the end tag, still arriving
        else:
            self._state = _AFTER

    def _call(self, final: bool, deltas: list[dict[str, Any]]) -> None:
        op = self._open
        assert op is not None
        buf = self._buf
        scan = _scan_call(buf, op.start, final)
        if op.call is None and scan.name is not None:
            op.call = ToolCall(scan.name, "")
            self.calls.append(op.call)
            deltas.append(self._header(len(self.calls) - 1))
        index = len(self.calls) - 1
        if op.call is not None and scan.args is not None and buf[scan.args[0]] == "{":
            a, b = scan.args
            piece = buf[a + op.sent : len(buf) if b is None else b]
            if piece:
                op.call.arguments += piece
                op.sent += len(piece)
                deltas.append({"index": index, "function": {"arguments": piece}})
        if scan.end is None:
            return
        if op.call is None:
            raise _Malformed  # an object with no name
        if scan.args is None:
            args = "{}"
        else:
            raw = buf[scan.args[0] : scan.args[1]]
            try:
                value = json.loads(raw)
                if isinstance(value, str):
                    json.loads(value)  # arguments sent as a JSON string: it must hold JSON
            except json.JSONDecodeError:
                raise _Malformed from None
            if not isinstance(value, (dict, str)):
                raise _Malformed
            args = value if isinstance(value, str) else raw
        rest = args[op.sent :] if args.startswith(op.call.arguments) else None
        if rest is None:
            raise _Malformed
        if rest:
            op.call.arguments += rest
            deltas.append({"index": index, "function": {"arguments": rest}})
        self.done.append(op.call)
        self._state, self._pos, self._open = _BETWEEN, scan.end, None

    def _held_content(self, marker: str, final: bool) -> str:
        """Content up to a possible start of ``marker`` (and the whitespace before it: it may precede
        a call), or all of it at the end."""
        buf = self._buf
        if final:
            out, self._sent = buf[self._sent :], len(buf)
            return out
        end = len(buf)
        for k in range(min(len(marker) - 1, len(buf) - self._sent), 0, -1):
            if marker.startswith(buf[-k:]):
                end -= k
                break
        end = max(self._sent, len(buf[:end].rstrip()))
        out, self._sent = buf[self._sent : end], end
        return out

    def _emit(self, name: str, arguments: str, deltas: list[dict[str, Any]]) -> None:
        call = ToolCall(name, arguments)
        self.calls.append(call)
        self.done.append(call)
        deltas.append(self._header(len(self.calls) - 1))
        deltas.append({"index": len(self.calls) - 1, "function": {"arguments": arguments}})

    def _blocks(self, final: bool) -> tuple[str, list[dict[str, Any]]]:
        """The block formats (tool_formats.BLOCKS): content until the start marker, then each block
        parsed whole at its end marker (or at the end of the reply), the text between blocks passed
        over as Hermes' is."""
        fmt = BLOCKS[self.parser]
        content = ""
        deltas: list[dict[str, Any]] = []
        while True:
            buf = self._buf
            if self._state == _CONTENT:
                at = buf.find(fmt.start, self._sent)
                if at < 0:
                    content += self._held_content(fmt.start, final)
                    break
                out = buf[self._sent : at].rstrip()
                content += out
                self._sent += len(out)
                self._state, self._pos = _CALL, at + len(fmt.start)
            elif self._state == _CALL:
                end = buf.find(fmt.end, self._pos)
                if end < 0 and not final:
                    break
                try:
                    calls = fmt.parse(buf[self._pos : end if end >= 0 else len(buf)], self.schemas or {})
                except ValueError:
                    content += self._give_up()
                    continue
                for name, arguments in calls:
                    self._emit(name, arguments, deltas)
                self._state, self._pos = _AFTER, (end + len(fmt.end) if end >= 0 else len(buf))
            elif self._state == _AFTER:
                at = buf.find(fmt.start, self._pos)
                if at < 0:
                    break
                self._state, self._pos = _CALL, at + len(fmt.start)
            elif self._state == _PLAIN:
                content += buf[self._sent :]
                self._sent = len(buf)
                break
            else:
                break
        return content, deltas

    def _pythonic(self, final: bool) -> tuple[str, list[dict[str, Any]]]:
        """Llama 4's pythonic calls: a reply that is a list of calls (after <|python_start|>, or from
        its first character) is held back until it ends and then parsed; any other reply is content."""
        deltas: list[dict[str, Any]] = []
        if self._state == _CONTENT:
            head = self._buf.lstrip()
            if head[:1] == "[" or head.startswith(PY_START) or (not final and PY_START.startswith(head)):
                if not final:
                    return "", deltas
                try:
                    calls = parse_pythonic(self._buf)
                except ValueError:
                    calls = []
                if calls:
                    for name, arguments in calls:
                        self._emit(name, arguments, deltas)
                    self._state, self._sent = _DONE, len(self._buf)
                    return "", deltas
                self.broken = bool(head)
            self._state = _PLAIN
        if self._state == _PLAIN:
            out, self._sent = self._buf[self._sent :], len(self._buf)
            return out, deltas
        return "", deltas

    def _after(self) -> None:
        if self.mode != "auto":
            return
        marker = MARKERS[self.parser][0]
        at = self._buf.find(marker, self._pos)
        if at >= 0:
            self._state, self._pos, self._array = _BETWEEN, at + len(marker), False

    def _give_up(self) -> str:
        """A call that does not parse: with nothing of it sent yet the text so far is content (as
        the non-streamed reply has it); else the stream stops there, marked broken."""
        self.broken = True
        self._open = None
        if self.mode == "auto" and not self.calls:
            self._state = _PLAIN
            out, self._sent = self._buf[self._sent :], len(self._buf)
            return out
        self._state = _AFTER if self.mode == "auto" else _DONE  # nothing more from this reply
        return ""

    def _header(self, index: int) -> dict[str, Any]:
        call = self.calls[index]
        return {
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }


def coalesce_tool_deltas(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per call index, in order, as OpenAI streams them: a call's header and argument
    pieces that fall in one chunk become one entry (a client that reads each chunk's entries by
    position, not by index, then still sees every argument)."""
    out: dict[int, dict[str, Any]] = {}
    for d in deltas:
        index = d["index"]
        if index not in out:
            out[index] = {**d, "function": dict(d.get("function", {}))}
            continue
        merged = out[index]
        for key in ("id", "type"):
            if key in d:
                merged.setdefault(key, d[key])
        function = merged["function"]
        for key, value in d.get("function", {}).items():
            function[key] = function.get(key, "") + value if key == "arguments" else function.get(key, value)
    return list(out.values())


def parse_tool_calls(
    parser: str, text: str, drop: Iterable[str] = (), schemas: Schemas | None = None
) -> tuple[str | None, list[ToolCall]]:
    """(content, calls) of a whole reply in the model's own format: what its stream adds up to. A
    reply with a call that does not parse is all content, with no calls (as vLLM answers it)."""
    ts = ToolStream(parser, "auto", drop, schemas)
    content, _ = ts.feed(text)
    more, _ = ts.finish()
    content += more
    if ts.broken or not ts.done:
        whole = SpecialTextFilter(drop).feed(text, final=True)
        return whole, []
    return (content or None), ts.done
