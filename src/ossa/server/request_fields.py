"""Request fields beyond sampling: the output constraint a request asks for, and the OpenAI fields
this server does not implement (a 400 naming the field, never silently ignored).

Constraint sources, at most one per request:

- ``response_format``: ``{"type": "text"}`` (none), ``{"type": "json_object"}``,
  ``{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}``, or vLLM's
  ``{"type": "structural_tag", "structures": [{"begin", "schema", "end"}], "triggers": [...]}``
- vLLM's ``structured_outputs`` extra body: ``{"json" | "regex" | "choice" | "grammar" | "json_object" |
  "structural_tag": ...}``
- vLLM's older ``guided_json``, ``guided_regex``, ``guided_choice``, ``guided_grammar`` (with
  ``guided_whitespace_pattern``)
- a forced tool call (``tool_choice`` "required" or a named function)
"""

from __future__ import annotations

from typing import Any

from ..structured import StructuredOutputsParams


class FieldError(ValueError):
    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


# OpenAI request fields with no implementation here, and the values that mean "nothing asked".
_UNIMPLEMENTED: dict[str, tuple[Any, ...]] = {
    "audio": (None,),
    "functions": (None,),
    "function_call": (None,),
    "modalities": (None, ["text"]),
    "prediction": (None,),
    "reasoning_effort": (None,),
    "verbosity": (None,),
    "web_search_options": (None,),
    "store": (None, False),
    "metadata": (None, {}),
    "service_tier": (None, "auto", "default"),
    # vLLM's extras that change outputs and that ossa does not implement (chat's echo: completions
    # have their own)
    "use_beam_search": (None, False),
    "length_penalty": (None, 1.0, 1),
    "logits_processors": (None, []),
    "return_tokens_as_token_ids": (None, False),
    "echo": (None, False),
}


def reject_unimplemented(extra: dict[str, Any] | None) -> None:
    """A 400 for any OpenAI field this server cannot honour (unknown non-OpenAI fields are ignored,
    as vLLM does)."""
    for name, value in (extra or {}).items():
        if name in _UNIMPLEMENTED and value not in _UNIMPLEMENTED[name]:
            hint = " (use tools and tool_choice)" if name in ("functions", "function_call") else ""
            raise FieldError(f"{name} is not supported by this server{hint}", name)


def _response_format(rf: Any) -> StructuredOutputsParams | None:
    if rf is None:
        return None
    if not isinstance(rf, dict) or not isinstance(rf.get("type"), str):
        raise FieldError("response_format must be an object with a 'type'", "response_format")
    kind = rf["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    if kind == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict):
            raise FieldError("response_format.json_schema must be an object", "response_format")
        schema = js.get("schema", js.get("json_schema"))
        if not isinstance(schema, (dict, bool)):
            raise FieldError(
                "response_format.json_schema.schema is missing or not an object", "response_format"
            )
        strict = js.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise FieldError("response_format.json_schema.strict must be a bool", "response_format")
        # strict is accepted: the grammar enforces the schema whether or not it is set.
        return StructuredOutputsParams(json=schema if isinstance(schema, dict) else {})
    if kind == "structural_tag":  # vLLM's: {"type", "structures": [{begin, schema, end}], "triggers"}
        tag = {k: v for k, v in rf.items() if k != "type"}
        try:
            return StructuredOutputsParams(structural_tag=tag)
        except ValueError as e:
            raise FieldError(
                str(e).replace("structured_outputs.", "response_format.", 1), "response_format"
            ) from None
    raise FieldError(
        f"response_format type {kind!r} is not supported (text, json_object, json_schema, structural_tag)",
        "response_format",
    )


def _guided(extra: dict[str, Any]) -> StructuredOutputsParams | None:
    kinds = {
        "guided_json": "json",
        "guided_regex": "regex",
        "guided_choice": "choice",
        "guided_grammar": "grammar",
    }
    given = {k: v for k, v in extra.items() if k in kinds and v is not None}
    backend = extra.get("guided_decoding_backend")
    if backend not in (None, "auto", "guidance", "llguidance"):
        raise FieldError(
            f"guided_decoding_backend {backend!r} is not available (this server uses llguidance)",
            "guided_decoding_backend",
        )
    if not given:
        return None
    if len(given) > 1:
        raise FieldError(f"give one of {', '.join(kinds)}, not {' and '.join(given)}", next(iter(given)))
    (name, value), kw = next(iter(given.items())), {}
    if isinstance(extra.get("guided_whitespace_pattern"), str):
        kw["whitespace_pattern"] = extra["guided_whitespace_pattern"]
    return StructuredOutputsParams(**{kinds[name]: value}, **kw)


def requested_constraint(
    response_format: Any, extra: dict[str, Any] | None, forced: StructuredOutputsParams | None = None
) -> StructuredOutputsParams | None:
    """The request's output constraint (raising FieldError naming the field for a bad one or for
    two at once)."""
    extra = extra or {}
    found: list[tuple[str, StructuredOutputsParams]] = []
    try:
        rf = _response_format(response_format)
        if rf is not None:
            found.append(("response_format", rf))
    except ValueError as e:
        raise FieldError(str(e), "response_format") from None
    so = extra.get("structured_outputs")
    if so is not None:
        if not isinstance(so, dict):
            raise FieldError("structured_outputs must be an object", "structured_outputs")
        try:
            found.append(("structured_outputs", StructuredOutputsParams(**so)))
        except TypeError as e:
            raise FieldError(f"structured_outputs: {e}", "structured_outputs") from None
        except ValueError as e:
            raise FieldError(str(e), "structured_outputs") from None
    try:
        guided = _guided(extra)
    except FieldError:
        raise
    except (ValueError, TypeError) as e:
        param = next((k for k in extra if k.startswith("guided_") and extra[k] is not None), "guided_json")
        raise FieldError(str(e).replace("structured_outputs.", param + ": ", 1), param) from None
    if guided is not None:
        found.append(("guided_*", guided))
    if forced is not None:
        found.append(("tool_choice", forced))
    if len(found) > 1:
        names = " and ".join(n for n, _ in found)
        raise FieldError(f"only one output constraint per request: got {names}", found[1][0])
    return found[0][1] if found else None
