"""Chat templates: the jinja2 environment Hugging Face renders them in, and limits for untrusted ones.

A model's own template (and one an operator passes with ``--chat-template``) is trusted and renders in
transformers' environment (``ImmutableSandboxedEnvironment``, ``loopcontrols``, ``tojson``,
``raise_exception``, ``strftime_now``). A template that arrives in a request is not: the server renders
it in a worker process (``ossa.server.template_worker``) under a memory and time limit, in the same
environment with ``limited=True``, which also refuses string and list repetition past a size and stops
output past a length, so the common attacks fail fast with a clear message instead of at the limits.
"""

from __future__ import annotations

import datetime
import json
import threading
from collections import OrderedDict
from typing import Any

MAX_REPEAT_ITEMS = 1 << 20  # 'x' * n and [..] * n past this many items (characters) are refused
MAX_OUTPUT_CHARS = 16 << 20  # a rendered prompt past this is refused (the body limit is far below)
_CACHE_SIZE = 16  # compiled templates kept per process
_CACHE_CHARS = 4 << 20  # and at most this much template source in all


class TemplateLimitError(ValueError):
    """An untrusted template exceeded a limit of the limited environment."""


def make_environment(limited: bool = False) -> Any:
    """transformers' chat-template environment; ``limited`` adds the untrusted-template limits."""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class LimitedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**"])

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "*":
                for seq, n in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                        if len(seq) * max(n, 0) > MAX_REPEAT_ITEMS:
                            raise TemplateLimitError(
                                f"the template repeats a sequence to {len(seq) * n} items "
                                f"(at most {MAX_REPEAT_ITEMS})"
                            )
            elif operator == "**" and isinstance(right, int) and isinstance(left, int):
                if abs(right) > 4096 and abs(left) > 1:
                    raise TemplateLimitError(f"the template raises to the power {right} (at most 4096)")
            return super().call_binop(context, operator, left, right)

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
               sort_keys: bool = False) -> str:  # fmt: skip
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(fmt: str) -> str:
        return datetime.datetime.now().strftime(fmt)

    cls = LimitedEnvironment if limited else ImmutableSandboxedEnvironment
    env = cls(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class TemplateCache:
    """Compiled templates, least recently used first out, bounded in count and in source size."""

    def __init__(self, limited: bool = False) -> None:
        self.limited = limited
        self._env: Any = None
        self._compiled: OrderedDict[str, Any] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()  # LLM may render from several threads

    def get(self, template: str) -> Any:
        with self._lock:
            compiled = self._compiled.get(template)
            if compiled is not None:
                self._compiled.move_to_end(template)
                return compiled
            if self._env is None:
                self._env = make_environment(self.limited)
        compiled = self._env.from_string(template)
        with self._lock:
            if len(template) > _CACHE_CHARS or template in self._compiled:
                return compiled
            self._compiled[template] = compiled
            self._chars += len(template)
            while len(self._compiled) > _CACHE_SIZE or self._chars > _CACHE_CHARS:
                old, _ = self._compiled.popitem(last=False)
                self._chars -= len(old)
        return compiled

    def __len__(self) -> int:
        return len(self._compiled)


def render(
    cache: TemplateCache,
    template: str,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool,
    variables: dict[str, Any],
) -> str:
    """Renders a chat template; in a limited cache, output past ``MAX_OUTPUT_CHARS`` is refused."""
    compiled = cache.get(template)
    if not cache.limited:
        return str(
            compiled.render(messages=messages, add_generation_prompt=add_generation_prompt, **variables)
        )
    parts: list[str] = []
    size = 0
    for piece in compiled.generate(
        messages=messages, add_generation_prompt=add_generation_prompt, **variables
    ):
        size += len(piece)
        if size > MAX_OUTPUT_CHARS:
            raise TemplateLimitError(f"the rendered prompt is longer than {MAX_OUTPUT_CHARS} characters")
        parts.append(piece)
    return "".join(parts)
