"""The tool-call formats that are not JSON objects in a reply (``tool_stream`` scans the JSON ones).

Each is a block between two markers, parsed whole when its end marker arrives (a call's arguments then
go out in one delta), or at the end of the reply when the model stopped before writing the end marker:

- ``qwen3_coder`` (Qwen3-Coder, Qwen3.5, Qwen3-Next): ``<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\n
  VALUE\\n</parameter>\\n...</function>\\n</tool_call>``.
- ``seed_oss`` (Seed-OSS): qwen3_coder's calls between ``<seed:tool_call>`` and ``</seed:tool_call>``.
- ``glm45`` (GLM-4.5 / 4.6 / 4.7): ``<tool_call>NAME\\n<arg_key>KEY</arg_key>\\n<arg_value>VALUE</arg_value>
  ...</tool_call>``.
- ``gemma4`` (Gemma 4): ``<|tool_call>call:NAME{key:<|"|>text<|"|>,n:5,o:{...},l:[...]}<tool_call|>``, and
  ``functiongemma`` (FunctionGemma): the same with ``<start_function_call>`` / ``<end_function_call>`` and
  ``<escape>`` around strings.
- ``deepseek_v3`` (DeepSeek V3 / V3.1 / R1): ``<｜tool▁calls▁begin｜>`` then per call
  ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>`` (V3.1), or
  ``function<｜tool▁sep｜>NAME``, a newline and the arguments fenced as json (V3), then
  ``<｜tool▁calls▁end｜>``.
- ``kimi_k2`` (Kimi K2): ``<|tool_calls_section_begin|>`` then per call ``<|tool_call_begin|>functions.NAME:
  INDEX<|tool_call_argument_begin|>{json}<|tool_call_end|>``, then ``<|tool_calls_section_end|>``.
- ``minimax_m2`` (MiniMax-M2): ``<minimax:tool_call><invoke name="NAME"><parameter name="KEY">VALUE
  </parameter>...</invoke>...</minimax:tool_call>``.
- ``command_r7b`` (Command R7B, Command A): ``<|START_ACTION|>[{"tool_call_id": "0", "tool_name": NAME,
  "parameters": {...}}, ...]<|END_ACTION|>``.
- ``pythonic`` (Llama 4, Llama 3.2's pythonic template): the whole reply a Python list of calls,
  ``[get_weather(city="Paris"), add(a=1, b=2)]`` (optionally between ``<|python_start|>`` and
  ``<|python_end|>``); held back while it can still be one, content otherwise.

XML-style values (qwen3_coder, seed_oss, glm45) are text: as vLLM converts them, a parameter the
function's schema types as other than a string is read as JSON (then as a Python literal); a string one,
or one the schema does not name, stays text (glm45: unnamed ones are read as JSON when they parse).
Every parse returns ``[(name, arguments JSON text)]`` or raises ``ValueError``.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Schemas = dict[str, dict[str, Any]]  # function name -> its parameters schema
Calls = list[tuple[str, str]]


@dataclass(frozen=True)
class BlockFormat:
    start: str
    end: str
    parse: Callable[[str, Schemas], Calls]
    write: Callable[[list[tuple[str, dict[str, Any]]]], str]
    inner: tuple[str, ...] = ()  # other special-token texts a block holds (kept when decoding them)


def _dumps(args: dict[str, Any]) -> str:
    return json.dumps(args, ensure_ascii=False)


def _typed(value: str, name: str, key: str, schemas: Schemas, unnamed_json: bool) -> Any:
    """A text value as the schema of function ``name`` types parameter ``key``."""
    prop = ((schemas.get(name) or {}).get("properties") or {}).get(key)
    types = prop.get("type") if isinstance(prop, dict) else None
    types = types if isinstance(types, list) else [types] if types else []
    if "string" in types or (not types and not unnamed_json):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value


def _one_newline(s: str) -> str:
    """A value without the one newline each side of it the format puts there."""
    s = s[1:] if s.startswith("\n") else s
    return s[:-1] if s.endswith("\n") else s


# -- qwen3_coder ---------------------------------------------------------------------------------------

_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|\Z)", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.S)


def _parse_qwen3_coder(body: str, schemas: Schemas) -> Calls:
    calls = []
    for m in _FUNCTION.finditer(body):
        name = m.group(1).strip()
        args = {}
        for p in _PARAMETER.finditer(m.group(2)):
            key = p.group(1).strip()
            args[key] = _typed(_one_newline(p.group(2)), name, key, schemas, unnamed_json=False)
        calls.append((name, _dumps(args)))
    if not calls or body[: body.find("<function=")].strip():
        raise ValueError("not a qwen3_coder call")
    return calls


def _text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def _xml_writer(start: str, end: str) -> Callable[[list[tuple[str, dict[str, Any]]]], str]:
    """qwen3_coder's calls, each in its own block between ``start`` and ``end``."""

    def write(calls: list[tuple[str, dict[str, Any]]]) -> str:
        out = []
        for name, args in calls:
            params = "".join(f"<parameter={k}>\n{_text(v)}\n</parameter>\n" for k, v in args.items())
            out.append(f"{start}\n<function={name}>\n{params}</function>\n{end}")
        return "\n".join(out)

    return write


_write_qwen3_coder = _xml_writer("<tool_call>", "</tool_call>")


# -- glm45 ---------------------------------------------------------------------------------------------

_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)(?:</arg_value>|\Z)", re.S)


def _parse_glm45(body: str, schemas: Schemas) -> Calls:
    cut = body.find("<arg_key>")
    name = (body if cut < 0 else body[:cut]).strip()
    if not name or "<" in name or "\n" in name:
        raise ValueError("not a glm45 call")
    args = {}
    for m in _ARG.finditer(body):
        key = m.group(1).strip()
        args[key] = _typed(m.group(2), name, key, schemas, unnamed_json=True)
    return [(name, _dumps(args))]


def _write_glm45(calls: list[tuple[str, dict[str, Any]]]) -> str:
    out = []
    for name, args in calls:
        pairs = "".join(
            f"<arg_key>{k}</arg_key>\n<arg_value>{_text(v)}</arg_value>\n" for k, v in args.items()
        )
        out.append(f"<tool_call>{name}\n{pairs}</tool_call>")
    return "\n".join(out)


# -- gemma4 / functiongemma ----------------------------------------------------------------------------


class _GemmaReader:
    """Gemma's call syntax: ``call:NAME{...}``, objects with bare keys, strings between ``quote``."""

    def __init__(self, text: str, quote: str) -> None:
        self.s, self.q, self.i = text, quote, 0

    def fail(self) -> ValueError:
        return ValueError(f"bad Gemma call syntax at {self.i}")

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def value(self) -> Any:
        self.ws()
        s = self.s
        if s.startswith(self.q, self.i):
            end = s.find(self.q, self.i + len(self.q))
            if end < 0:
                raise self.fail()
            out, self.i = s[self.i + len(self.q) : end], end + len(self.q)
            return out
        if s.startswith("{", self.i):
            return self.obj()
        if s.startswith("[", self.i):
            self.i += 1
            items: list[Any] = []
            self.ws()
            if s.startswith("]", self.i):
                self.i += 1
                return items
            while True:
                items.append(self.value())
                self.ws()
                if s.startswith("]", self.i):
                    self.i += 1
                    return items
                if not s.startswith(",", self.i):
                    raise self.fail()
                self.i += 1
        m = re.compile(r"[^,}\]]+").match(s, self.i)
        if m is None:
            raise self.fail()
        self.i = m.end()
        raw = m.group().strip()
        try:
            return json.loads(raw)  # numbers, true / false / null
        except json.JSONDecodeError:
            return raw  # (an unquoted word: kept as text)

    def obj(self) -> dict[str, Any]:
        s = self.s
        if not s.startswith("{", self.i):
            raise self.fail()
        self.i += 1
        out: dict[str, Any] = {}
        self.ws()
        if s.startswith("}", self.i):
            self.i += 1
            return out
        while True:
            self.ws()
            if s.startswith(self.q, self.i):
                key = self.value()
            else:
                colon = s.find(":", self.i)
                if colon < 0:
                    raise self.fail()
                key, self.i = s[self.i : colon].strip(), colon
            self.ws()
            if not s.startswith(":", self.i) or not isinstance(key, str) or not key:
                raise self.fail()
            self.i += 1
            out[key] = self.value()
            self.ws()
            if s.startswith("}", self.i):
                self.i += 1
                return out
            if not s.startswith(",", self.i):
                raise self.fail()
            self.i += 1


def _gemma_parser(quote: str) -> Callable[[str, Schemas], Calls]:
    def parse(body: str, schemas: Schemas) -> Calls:
        calls = []
        r = _GemmaReader(body, quote)
        while True:
            r.ws()
            if r.i == len(body):
                break
            if not body.startswith("call:", r.i):
                raise r.fail()
            brace = body.find("{", r.i)
            if brace < 0:
                raise r.fail()
            name = body[r.i + len("call:") : brace].strip()
            if not name:
                raise r.fail()
            r.i = brace
            calls.append((name, _dumps(r.obj())))
        if not calls:
            raise ValueError("no Gemma call")
        return calls

    return parse


def _gemma_writer(start: str, end: str, quote: str) -> Callable[[list[tuple[str, dict[str, Any]]]], str]:
    def value(v: Any) -> str:
        if isinstance(v, str):
            return f"{quote}{v}{quote}"
        if isinstance(v, dict):
            return "{" + ",".join(f"{k}:{value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ",".join(value(x) for x in v) + "]"
        return json.dumps(v)

    return lambda calls: "".join(f"{start}call:{name}{value(args)}{end}" for name, args in calls)


# -- deepseek_v3 / kimi_k2 -----------------------------------------------------------------------------

DS_CALLS, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL, DS_SEP, DS_CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"
_FENCED = re.compile(r"\A\s*(\S+)\s*\n```(?:json)?\s*\n(.*?)\n?```\s*\Z", re.S)


def _json_args(text: str) -> str:
    text = text.strip()
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("arguments are not a JSON object")
    return text


def _parse_deepseek(body: str, schemas: Schemas) -> Calls:
    calls = []
    for part in body.split(DS_CALL)[1:]:
        part = part.split(DS_CALL_END, 1)[0]
        left, sep, right = part.partition(DS_SEP)
        if not sep:
            raise ValueError("a DeepSeek call without its separator")
        if left.strip() == "function":  # V3: function<sep>NAME, then the arguments fenced as json
            m = _FENCED.match(right)
            if m is None:
                raise ValueError("a DeepSeek V3 call without its fenced arguments")
            calls.append((m.group(1), _json_args(m.group(2))))
        else:
            calls.append((left.strip(), _json_args(right)))
    if not calls or body.split(DS_CALL)[0].strip():
        raise ValueError("no DeepSeek call")
    return calls


def _write_deepseek(calls: list[tuple[str, dict[str, Any]]]) -> str:
    return (
        DS_CALLS + "".join(f"{DS_CALL}{n}{DS_SEP}{_dumps(a)}{DS_CALL_END}" for n, a in calls) + DS_CALLS_END
    )


KIMI_CALLS, KIMI_CALLS_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
KIMI_CALL, KIMI_ARGS, KIMI_CALL_END = (
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
)
_KIMI_ID = re.compile(r"\A\s*(?:functions\.)?([^\s:]+)(?::\d+)?\s*\Z")


def _parse_kimi(body: str, schemas: Schemas) -> Calls:
    calls = []
    for part in body.split(KIMI_CALL)[1:]:
        part = part.split(KIMI_CALL_END, 1)[0]
        head, sep, args = part.partition(KIMI_ARGS)
        m = _KIMI_ID.match(head)
        if not sep or m is None:
            raise ValueError("a Kimi call without its id or arguments")
        calls.append((m.group(1), _json_args(args)))
    if not calls or body.split(KIMI_CALL)[0].strip():
        raise ValueError("no Kimi call")
    return calls


def _write_kimi(calls: list[tuple[str, dict[str, Any]]]) -> str:
    return (
        KIMI_CALLS
        + "".join(
            f"{KIMI_CALL}functions.{n}:{i}{KIMI_ARGS}{_dumps(a)}{KIMI_CALL_END}"
            for i, (n, a) in enumerate(calls)
        )
        + KIMI_CALLS_END
    )


# -- minimax_m2 -----------------------------------------------------------------------------------------

_INVOKE = re.compile(r'<invoke name="([^"]+)">(.*?)(?:</invoke>|\Z)', re.S)
_MM_PARAM = re.compile(r'<parameter name="([^"]+)">(.*?)(?:</parameter>|\Z)', re.S)


def _parse_minimax(body: str, schemas: Schemas) -> Calls:
    calls = []
    for m in _INVOKE.finditer(body):
        name = m.group(1).strip()
        args = {}
        for p in _MM_PARAM.finditer(m.group(2)):
            key = p.group(1).strip()
            args[key] = _typed(_one_newline(p.group(2)), name, key, schemas, unnamed_json=True)
        calls.append((name, _dumps(args)))
    if not calls or body[: body.find("<invoke")].strip():
        raise ValueError("not a MiniMax-M2 call")
    return calls


def _write_minimax(calls: list[tuple[str, dict[str, Any]]]) -> str:
    out = []
    for name, args in calls:
        params = "".join(f'<parameter name="{k}">{_text(v)}</parameter>\n' for k, v in args.items())
        out.append(f'<invoke name="{name}">\n{params}</invoke>\n')
    return "<minimax:tool_call>\n" + "".join(out) + "</minimax:tool_call>"


# -- command_r7b ----------------------------------------------------------------------------------------

CR_START, CR_END = "<|START_ACTION|>", "<|END_ACTION|>"


def _parse_command_r7b(body: str, schemas: Schemas) -> Calls:
    try:
        actions = json.loads(body)
    except json.JSONDecodeError as e:
        raise ValueError("Command R7B's actions are not JSON") from e
    if not isinstance(actions, list) or not actions:
        raise ValueError("Command R7B's actions are not a list")
    calls = []
    for a in actions:
        if not isinstance(a, dict) or not isinstance(a.get("tool_name"), str):
            raise ValueError("a Command R7B action without its tool_name")
        args = a.get("parameters", {})
        if not isinstance(args, dict):
            raise ValueError("a Command R7B action whose parameters are not an object")
        calls.append((a["tool_name"], _dumps(args)))
    return calls


def _write_command_r7b(calls: list[tuple[str, dict[str, Any]]]) -> str:
    actions = [{"tool_call_id": str(i), "tool_name": n, "parameters": a} for i, (n, a) in enumerate(calls)]
    return CR_START + json.dumps(actions, ensure_ascii=False) + CR_END


# -- pythonic --------------------------------------------------------------------------------------------

PY_START, PY_END = "<|python_start|>", "<|python_end|>"


def _literal(node: ast.expr) -> Any:
    value = ast.literal_eval(node)
    json.dumps(value)  # (JSON-able: no sets, bytes, complex numbers)
    return value


def parse_pythonic(text: str) -> Calls:
    """``[f(a=1), g(b="x")]`` -> the calls; ValueError for anything else (keyword arguments, literals)."""
    body = text.strip()
    if body.startswith(PY_START):
        body = body[len(PY_START) :]
        body = body[: -len(PY_END)] if body.rstrip().endswith(PY_END) else body
        body = body.strip().removesuffix(PY_END).strip()
    try:
        tree = ast.parse(body, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        raise ValueError("not a pythonic call list") from e
    node = tree.body
    items = node.elts if isinstance(node, ast.List) else [node] if isinstance(node, ast.Call) else None
    if not items:
        raise ValueError("not a pythonic call list")
    calls = []
    for call in items:
        if (
            not isinstance(call, ast.Call)
            or call.args
            or not isinstance(call.func, (ast.Name, ast.Attribute))
        ):
            raise ValueError("not a pythonic call")
        name = ast.unparse(call.func)
        try:
            args = {kw.arg: _literal(kw.value) for kw in call.keywords if kw.arg is not None}
        except (ValueError, TypeError, SyntaxError, RecursionError) as e:
            raise ValueError("a pythonic call's argument is not a literal") from e
        if len(args) != len(call.keywords):
            raise ValueError("a pythonic call with **kwargs")
        calls.append((name, _dumps(args)))
    return calls


def write_pythonic(calls: list[tuple[str, dict[str, Any]]]) -> str:
    return "[" + ", ".join(f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})" for n, a in calls) + "]"


_GEMMA4 = ("<|tool_call>", "<tool_call|>", '<|"|>')
_FUNCTIONGEMMA = ("<start_function_call>", "<end_function_call>", "<escape>")
BLOCKS: dict[str, BlockFormat] = {
    "qwen3_coder": BlockFormat("<tool_call>", "</tool_call>", _parse_qwen3_coder, _write_qwen3_coder),
    "seed_oss": BlockFormat(
        "<seed:tool_call>",
        "</seed:tool_call>",
        _parse_qwen3_coder,
        _xml_writer("<seed:tool_call>", "</seed:tool_call>"),
    ),
    "glm45": BlockFormat("<tool_call>", "</tool_call>", _parse_glm45, _write_glm45),
    "gemma4": BlockFormat(
        _GEMMA4[0], _GEMMA4[1], _gemma_parser(_GEMMA4[2]), _gemma_writer(*_GEMMA4), (_GEMMA4[2],)
    ),
    "functiongemma": BlockFormat(
        _FUNCTIONGEMMA[0],
        _FUNCTIONGEMMA[1],
        _gemma_parser(_FUNCTIONGEMMA[2]),
        _gemma_writer(*_FUNCTIONGEMMA),
        (_FUNCTIONGEMMA[2],),
    ),
    "deepseek_v3": BlockFormat(
        DS_CALLS, DS_CALLS_END, _parse_deepseek, _write_deepseek, (DS_CALL, DS_SEP, DS_CALL_END)
    ),
    "command_r7b": BlockFormat(CR_START, CR_END, _parse_command_r7b, _write_command_r7b),
    "minimax_m2": BlockFormat("<minimax:tool_call>", "</minimax:tool_call>", _parse_minimax, _write_minimax),
    "kimi_k2": BlockFormat(
        KIMI_CALLS, KIMI_CALLS_END, _parse_kimi, _write_kimi, (KIMI_CALL, KIMI_ARGS, KIMI_CALL_END)
    ),
}
