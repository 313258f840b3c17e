"""Tool calling for /v1/chat/completions: validating ``tools`` / ``tool_choice``, constraining
"required" and named choices with a grammar, and parsing the model's reply into ``tool_calls``.

As vLLM does it:

- ``tool_choice`` "none": tools are still shown to the template, nothing is parsed.
- a named function: the output is constrained to that function's ``parameters`` schema and becomes
  one call's ``arguments`` (streamed as argument deltas as it is generated).
- "required": the output is constrained to a JSON array of ``{"name", "parameters"}`` objects, one
  of the functions each (one element unless ``parallel_tool_calls``).
- "auto" (the default with tools): the model writes what it wants; a parser for its format finds
  the calls: Hermes / Qwen (``<tool_call>{...}</tool_call>``), Llama 3 JSON (``{"name": ...,
  "parameters": ...}``, after ``<|python_tag|>`` or alone), Mistral (``[TOOL_CALLS][{...}]``). The
  parser comes from ``--tool-call-parser`` or is recognised in the chat template (Hermes otherwise).

A chat template that does not mention ``tools`` (SmolLM2's, for one) would drop them silently; then
the tools and the Hermes call format are described in a system message instead.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from ..structured import StructuredOutputsParams

PARSERS = ("hermes", "llama3_json", "mistral")
_NAME = re.compile(r"^[a-zA-Z0-9_.\-]{1,64}$")


class ToolError(ValueError):
    """A bad ``tools`` / ``tool_choice`` value; ``param`` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


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


def check_tools(tools: list[Any] | None, tool_choice: Any) -> tuple[list[dict[str, Any]], str | None]:
    """Validates the request's tools and tool_choice; returns (function definitions, mode): mode is
    "none", "auto", "required" or the named function. Raises ToolError naming the field."""
    functions: list[dict[str, Any]] = []
    for i, t in enumerate(tools or []):
        if not isinstance(t, dict) or t.get("type", "function") != "function":
            raise ToolError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}", "tools")
        f = t.get("function")
        if not isinstance(f, dict):
            raise ToolError(f"tools[{i}].function must be an object", "tools")
        name = f.get("name")
        if not isinstance(name, str) or not name:
            raise ToolError(f"tools[{i}].function.name is missing: every tool needs a name", "tools")
        if not _NAME.match(name):
            raise ToolError(
                f"tools[{i}].function.name {name!r} must be 1-64 of a-z, A-Z, 0-9, _ . -", "tools"
            )
        params = f.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise ToolError(f"tools[{i}].function.parameters must be a JSON schema object", "tools")
        if any(g["name"] == name for g in functions):
            raise ToolError(f"tools[{i}]: the function name {name!r} is given twice", "tools")
        functions.append({**f, "parameters": params})
    if tool_choice is None:
        return functions, ("auto" if functions else None)
    if isinstance(tool_choice, str):
        if tool_choice not in ("none", "auto", "required"):
            raise ToolError(
                f"tool_choice must be 'none', 'auto', 'required' or a function, got {tool_choice!r}",
                "tool_choice",
            )
        if tool_choice != "none" and not functions:
            raise ToolError(f"tool_choice {tool_choice!r} needs tools", "tool_choice")
        return functions, tool_choice
    fn = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise ToolError("tool_choice must be {'type': 'function', 'function': {'name': ...}}", "tool_choice")
    if not any(f["name"] == name for f in functions):
        known = ", ".join(f["name"] for f in functions) or "no tools"
        raise ToolError(
            f"tool_choice names the function {name!r}, which is not in tools ({known})", "tool_choice"
        )
    return functions, name


def forced_output(
    functions: list[dict[str, Any]], mode: str, parallel: bool
) -> StructuredOutputsParams | None:
    """The grammar that enforces "required" or a named function (None for "none" / "auto")."""
    if mode in ("none", "auto"):
        return None
    ws = r"[ \n]?"  # a little whitespace: small models otherwise pad JSON with it without end
    if mode != "required":
        f = next(f for f in functions if f["name"] == mode)
        return StructuredOutputsParams(json=f["parameters"], whitespace_pattern=ws)
    items = [
        {
            "type": "object",
            "properties": {"name": {"type": "string", "enum": [f["name"]]}, "parameters": f["parameters"]},
            "required": ["name", "parameters"],
            "additionalProperties": False,
        }
        for f in functions
    ]
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": items}}
    if not parallel:
        schema["maxItems"] = 1
    return StructuredOutputsParams(json=schema, whitespace_pattern=ws)


def forced_calls(text: str, mode: str) -> list[ToolCall]:
    """The calls of an output generated under forced_output (a named function: the text is its
    arguments; "required": a JSON array of {name, parameters})."""
    if mode != "required":
        return [ToolCall(mode, text)]
    ts = ToolStream("hermes", "required")  # the array's complete elements (all, unless cut short)
    ts.feed(text)
    return ts.calls


# -- the model's own formats ("auto") ----------------------------------------------------------------


def parser_for_template(template: str | None) -> str:
    """The parser a chat template's own tool-call format needs (Hermes when it shows none)."""
    t = template or ""
    if "[TOOL_CALLS]" in t:
        return "mistral"
    if "<|python_tag|>" in t or "ipython" in t:
        return "llama3_json"
    return "hermes"


def template_shows_tools(template: str | None) -> bool:
    return bool(template) and re.search(r"\btools\b", template or "") is not None


def tools_system_message(functions: list[dict[str, Any]]) -> str:
    """A Hermes-style description of the tools, for templates that have no place for them."""
    listing = "\n".join(
        json.dumps({"type": "function", "function": f}, ensure_ascii=False) for f in functions
    )
    return (
        "You can call functions. Their signatures, one per line:\n<tools>\n" + listing + "\n</tools>\n"
        "To call one, reply with a JSON object holding its name and arguments inside tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def _call_from(obj: Any, args_key: str = "arguments") -> ToolCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get(args_key, obj.get("parameters" if args_key == "arguments" else "arguments", {}))
    if isinstance(args, str):
        try:
            json.loads(args)
        except json.JSONDecodeError:
            return None
        return ToolCall(obj["name"], args)
    return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False))


def _json_values(text: str) -> list[Any] | None:
    """Consecutive JSON values in text separated by whitespace or ';' (None if anything else)."""
    dec = json.JSONDecoder()
    out: list[Any] = []
    i = 0
    while True:
        while i < len(text) and text[i] in " \t\r\n;":
            i += 1
        if i == len(text):
            return out
        try:
            value, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return None
        out.append(value)


HERMES_START, MISTRAL_START, LLAMA_TAG = "<tool_call>", "[TOOL_CALLS]", "<|python_tag|>"
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)


def parse_tool_calls(parser: str, text: str) -> tuple[str | None, list[ToolCall]]:
    """(content, calls) of a reply in the model's own format; the text stays content when it holds
    no call that parses."""
    if parser == "hermes":
        at = text.find(HERMES_START)
        if at < 0:
            return text, []
        calls = []
        for m in _HERMES.finditer(text, at):
            try:
                calls.append(_call_from(json.loads(m.group(1))))
            except json.JSONDecodeError:
                return text, []
        if not calls or any(c is None for c in calls):
            return text, []
        return (text[:at].strip() or None), [c for c in calls if c is not None]
    if parser == "mistral":
        at = text.find(MISTRAL_START)
        if at < 0:
            return text, []
        values = _json_values(text[at + len(MISTRAL_START) :])
        items = values[0] if values and len(values) == 1 and isinstance(values[0], list) else values
        calls = [_call_from(v) for v in items or []]
        if not calls or any(c is None for c in calls):
            return text, []
        return (text[:at].strip() or None), [c for c in calls if c is not None]
    body = text.split(LLAMA_TAG, 1)[1] if LLAMA_TAG in text else text
    if not body.lstrip().startswith("{"):
        return text, []
    values = _json_values(body)
    calls = [_call_from(v, "parameters") for v in values or []]
    if not calls or any(c is None for c in calls):
        return text, []
    return None, [c for c in calls if c is not None]


def call_start(parser: str) -> str:
    """Text that begins a call in this format (held back from streamed content)."""
    return {"hermes": HERMES_START, "mistral": MISTRAL_START, "llama3_json": "{"}[parser]


def arguments_as_dicts(messages: list[dict[str, Any]]) -> None:
    """Assistant tool_calls' ``arguments`` JSON strings -> objects, as chat templates expect them."""
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                try:
                    fn["arguments"] = json.loads(fn["arguments"])
                except json.JSONDecodeError:
                    pass  # leave it as the client sent it


class ToolStream:
    """Turns a streamed reply into OpenAI chat deltas: content text and ``tool_calls`` entries.

    A named function streams its arguments as they are generated; "required" emits each call as soon
    as its array element is complete; "auto" streams content until the format's call marker shows,
    holds back text that could begin one, and parses the rest when the reply ends (text that turns
    out to hold no call is sent as content then)."""

    def __init__(self, parser: str, mode: str) -> None:
        self.parser, self.mode = parser, mode
        self.calls: list[ToolCall] = []
        self._buf = ""
        self._sent = 0  # required: characters of _buf already turned into calls; auto: content sent
        self._in_call = False

    def feed(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        self._buf += text
        if self.mode not in ("auto", "required"):  # a named function: arguments as they come
            deltas: list[dict[str, Any]] = []
            if not self.calls:
                self.calls.append(ToolCall(self.mode, ""))
                deltas.append(
                    {**self.calls[0].to_openai(0), "function": {"name": self.mode, "arguments": ""}}
                )
            if text:
                self.calls[0].arguments += text
                deltas.append({"index": 0, "function": {"arguments": text}})
            return "", deltas
        if self.mode == "required":
            return "", self._complete_elements()
        if self._in_call:
            return "", []
        start = call_start(self.parser)
        if self.parser == "llama3_json":
            head = self._buf.lstrip()
            if head.startswith("{") or head.startswith(LLAMA_TAG) or LLAMA_TAG.startswith(head):
                self._in_call = bool(head) and not LLAMA_TAG.startswith(head)
                return "", []
            out, self._sent = self._buf[self._sent :], len(self._buf)
            return out, []
        at = self._buf.find(start, self._sent)
        if at >= 0:
            self._in_call = True
            out, self._sent = self._buf[self._sent : at], at
            return out, []
        keep = 0  # the longest tail that could still grow into the marker
        for k in range(min(len(start) - 1, len(self._buf) - self._sent), 0, -1):
            if start.startswith(self._buf[-k:]):
                keep = k
                break
        end = len(self._buf) - keep
        out, self._sent = self._buf[self._sent : end], max(self._sent, end)
        return out, []

    def finish(self) -> tuple[str, list[dict[str, Any]]]:
        """What is left when the reply ends."""
        if self.mode == "auto":
            rest = self._buf[self._sent :]
            content, calls = parse_tool_calls(self.parser, rest)
            self.calls = calls
            deltas = [c.to_openai(i) for i, c in enumerate(calls)]
            return (content or "") if calls else rest, deltas
        if self.mode == "required":
            return "", self._complete_elements()
        if not self.calls:  # a named function that produced nothing at all
            return self.feed("")
        return "", []

    def _complete_elements(self) -> list[dict[str, Any]]:
        """Calls for every array element of _buf that closed since the last look."""
        deltas: list[dict[str, Any]] = []
        dec = json.JSONDecoder()
        i = self._sent or (self._buf.find("[") + 1 if "[" in self._buf else 0)
        if i == 0:
            return deltas
        while True:
            while i < len(self._buf) and self._buf[i] in " \t\r\n,":
                i += 1
            try:
                item, end = dec.raw_decode(self._buf, i)
            except json.JSONDecodeError:
                break
            if not isinstance(item, dict) or "name" not in item:
                break
            call = ToolCall(item["name"], json.dumps(item.get("parameters", {}), ensure_ascii=False))
            deltas.append(call.to_openai(len(self.calls)))
            self.calls.append(call)
            i = end
        self._sent = i
        return deltas


def format_tool_calls(parser: str, calls: list[ToolCall], content: str = "") -> str:
    """A reply holding these calls in the format's own syntax (what the parser reads back)."""
    objs = [{"name": c.name, "arguments": json.loads(c.arguments)} for c in calls]
    if parser == "hermes":
        body = "\n".join(f"<tool_call>\n{json.dumps(o, ensure_ascii=False)}\n</tool_call>" for o in objs)
        return (content + "\n" if content else "") + body
    if parser == "mistral":
        return content + MISTRAL_START + json.dumps(objs, ensure_ascii=False)
    return LLAMA_TAG + "; ".join(
        json.dumps({"name": o["name"], "parameters": o["arguments"]}, ensure_ascii=False) for o in objs
    )
