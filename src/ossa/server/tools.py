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
  "parameters": ...}``, after ``<|python_tag|>`` or alone), Mistral (``[TOOL_CALLS][{...}]``), and
  the formats of ``tool_formats``: Qwen3-Coder / Qwen3.5's XML (``qwen3_coder``), GLM-4.5's
  (``glm45``), Gemma 4's and FunctionGemma's, DeepSeek V3's, Kimi K2's, Llama 4's pythonic list. The
  parser comes from ``--tool-call-parser`` or is recognised in the chat template (Hermes otherwise).

A chat template that does not mention ``tools`` (SmolLM2's, for one) would drop them silently; then
the tools and the Hermes call format are described in a system message instead.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..structured import StructuredOutputsParams
from .tool_formats import BLOCKS, PY_START, write_pythonic
from .tool_stream import LLAMA_TAG, MARKERS, MISTRAL_START, ToolCall, ToolStream, parse_tool_calls

__all__ = ["ToolCall", "ToolStream", "parse_tool_calls"]

PARSERS = ("hermes", "llama3_json", "mistral", "pythonic", *BLOCKS)
_NAME = re.compile(r"^[a-zA-Z0-9_.\-]{1,64}$")


class ToolError(ValueError):
    """A bad ``tools`` / ``tool_choice`` value; ``param`` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


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
    ts.finish()
    return ts.done


# -- the model's own formats ("auto") ----------------------------------------------------------------


def parser_for_template(template: str | None) -> str:
    """The parser a chat template's own tool-call format needs (Hermes when it shows none)."""
    t = template or ""
    if "[TOOL_CALLS]" in t:
        return "mistral"
    for marker, parser in (
        ("<|tool_call>", "gemma4"),
        ("<start_function_call>", "functiongemma"),
        ("tool▁calls▁begin", "deepseek_v3"),
        ("<|tool_calls_section_begin|>", "kimi_k2"),
        ("<|START_ACTION|>", "command_r7b"),
        ("<minimax:tool_call>", "minimax_m2"),
        ("<seed:tool_call>", "seed_oss"),
        ("<arg_key>", "glm45"),
        ("<parameter=", "qwen3_coder"),
        (PY_START, "pythonic"),
        ("[func_name1(", "pythonic"),  # (Llama 4's and Llama 3.2's pythonic instructions)
    ):
        if marker in t:
            return parser
    if "<|python_tag|>" in t or "ipython" in t:
        return "llama3_json"
    return "hermes"


def special_texts(tokenizer: Any) -> list[str]:
    """The texts of the tokenizer's special tokens (found once per tokenizer, kept on it)."""
    cached = tokenizer.__dict__.get("_special_texts")
    if cached is None:
        ids = [i for i, special in enumerate(tokenizer.token_table()[1]) if special]
        cached = [t for t in (tokenizer.decode([i]) for i in ids) if t]
        tokenizer.__dict__["_special_texts"] = cached
    return list(cached)


def marker_decoding(tokenizer: Any, parser: str) -> list[str] | None:
    """None when the parser's markers are plain text in this tokenizer; else the special-token
    texts to drop from a reply decoded with special tokens (all but the markers), as the markers
    only reach the parser that way (vLLM turns skip_special_tokens off for them likewise)."""
    specials = special_texts(tokenizer)
    markers = MARKERS[parser]
    if not any(m in specials for m in markers):
        return None
    return [t for t in specials if t not in markers]


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


def format_tool_calls(parser: str, calls: list[ToolCall], content: str = "") -> str:
    """A reply holding these calls in the format's own syntax (what the parser reads back)."""
    objs = [{"name": c.name, "arguments": json.loads(c.arguments)} for c in calls]
    if parser in BLOCKS:
        body = BLOCKS[parser].write([(o["name"], o["arguments"]) for o in objs])
        return (content + "\n" if content else "") + body
    if parser == "pythonic":
        return write_pythonic([(o["name"], o["arguments"]) for o in objs])
    if parser == "hermes":
        body = "\n".join(f"<tool_call>\n{json.dumps(o, ensure_ascii=False)}\n</tool_call>" for o in objs)
        return (content + "\n" if content else "") + body
    if parser == "mistral":
        return content + MISTRAL_START + json.dumps(objs, ensure_ascii=False)
    return LLAMA_TAG + "; ".join(
        json.dumps({"name": o["name"], "parameters": o["arguments"]}, ensure_ascii=False) for o in objs
    )
