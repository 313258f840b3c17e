"""ossa.Tokenizer: the C++ tokenizer (or its Python twin) plus Hugging Face-style chat templates.

tok = ossa.Tokenizer.from_file("model.gguf")          # or tokenizer.json, or a HF folder
ids = tok.encode("Hello")                             # identical to Hugging Face tokenizers
text = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .chat_template import TemplateCache, render
from .reference.tokenizer_spec import TokenizerSpec, spec_from_file


@dataclass
class _Specials:
    bos: int | None
    eos: int | None
    pad: int | None
    eos_ids: list[int]


class Tokenizer:
    """A BPE tokenizer with identical ids to Hugging Face ``tokenizers``.

    ``backend="cpp"`` (default) runs ossa's C++ tokenizer (``core``; the engine shares it);
    ``backend="python"`` runs the plain-Python twin in ``ossa.reference.tokenizer``.
    """

    def __init__(
        self,
        impl: Any,
        spec: TokenizerSpec | None,
        backend: str,
        chat_template: str | None,
        chat_templates: dict[str, str] | None = None,
    ) -> None:
        self._impl = impl
        self._spec = spec
        self.backend = backend
        self.chat_template = chat_template
        # Named templates where the model has several ("default", "tool_use", ...): a request with
        # tools takes "tool_use", and chat_template= may name one, as in transformers.
        self.chat_templates: dict[str, str] = dict(chat_templates or {})

    # -- construction -----------------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str, backend: str = "cpp") -> Tokenizer:
        """Loads a tokenizer.json, a Hugging Face folder (tokenizer.json + configs) or a GGUF file."""
        from .backend import get_backend

        impl = get_backend(backend)  # ValueError for an unknown backend, before any file is read
        spec = spec_from_file(path)
        return cls(impl.tokenizer_impl(spec, path), spec, backend, spec.chat_template, spec.chat_templates)

    @classmethod
    def from_spec(cls, spec: TokenizerSpec, backend: str = "cpp") -> Tokenizer:
        from .backend import get_backend

        impl = get_backend(backend).tokenizer_impl(spec)
        return cls(impl, spec, backend, spec.chat_template, spec.chat_templates)

    def token_table(self) -> tuple[list[bytes], list[bool]]:
        """Every token as bytes, and whether it is a special token (for grammars and tool markers)."""
        from .backend import get_backend

        return get_backend(self.backend).token_table(self._impl)

    @property
    def core(self) -> Any:
        """The ``core.Tokenizer`` (C++ backend only), for the engine."""
        if self.backend != "cpp":
            raise ValueError("the python backend has no core tokenizer")
        return self._impl

    # -- encoding / decoding ----------------------------------------------------------------------

    def encode(self, text: str | bytes, add_special_tokens: bool = True) -> list[int]:
        """Token ids of text. bytes must be valid UTF-8; a str with a lone surrogate is a ValueError."""
        return self._impl.encode(text, add_special_tokens)

    def encode_batch(self, texts: Sequence[str | bytes], add_special_tokens: bool = True) -> list[list[int]]:
        """Encodes many texts (in parallel with the C++ backend)."""
        return self._impl.encode_batch(list(texts), add_special_tokens)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of ids; unknown ids are skipped, invalid UTF-8 becomes U+FFFD."""
        return self._impl.decode([int(i) for i in ids], skip_special_tokens)

    def detokenizer(self, skip_special_tokens: bool = False) -> Any:
        """A streaming detokenizer: ``push(id) -> str`` deltas, ``flush() -> str`` at the end."""
        from .backend import get_backend

        return get_backend(self.backend).detokenizer(self._impl, skip_special_tokens)

    @property
    def vocab_size(self) -> int:
        return int(self._impl.vocab_size)

    def _specials(self) -> _Specials:
        i = self._impl  # core.Tokenizer or its twin: the same properties
        return _Specials(i.bos_token_id, i.eos_token_id, i.pad_token_id, list(i.eos_token_ids))

    @property
    def bos_token_id(self) -> int | None:
        return self._specials().bos

    @property
    def eos_token_id(self) -> int | None:
        return self._specials().eos

    @property
    def pad_token_id(self) -> int | None:
        return self._specials().pad

    @property
    def eos_token_ids(self) -> list[int]:
        """Ids that end generation (see ossa.reference.tokenizer_spec for the rule)."""
        return self._specials().eos_ids

    def id_to_token(self, token_id: int) -> str | None:
        return self._impl.id_to_token(token_id)

    @property
    def bos_token(self) -> str | None:
        return None if self.bos_token_id is None else self.id_to_token(self.bos_token_id)

    @property
    def eos_token(self) -> str | None:
        return None if self.eos_token_id is None else self.id_to_token(self.eos_token_id)

    # -- chat templates ---------------------------------------------------------------------------

    def select_chat_template(self, chat_template: str | None = None, tools: Any = None) -> str:
        """The template a request renders with, as transformers' get_chat_template picks it: a name
        among the model's templates, else a template text given; without one, "tool_use" when tools
        are given and the model has it, else the default."""
        named = self.chat_templates
        if chat_template:
            return named.get(chat_template, chat_template)
        if tools is not None and "tool_use" in named:
            return named["tool_use"]
        if self.chat_template is None:
            if named:
                raise ValueError(
                    f"this model has several chat templates and no default; pass chat_template= one of "
                    f"{sorted(named)}"
                )
            raise ValueError("this tokenizer has no chat template; pass chat_template=...")
        return self.chat_template

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tokenize: bool = False,
        chat_template: str | None = None,
        continue_final_message: bool = False,
        tools: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str | list[int]:
        """Renders messages with the model's chat template as Hugging Face does (jinja2 sandbox).

        ``tools`` become the template's ``tools`` variable. ``continue_final_message`` cuts the text
        right after the last message's content, so the model continues that message instead of
        starting a new one (it excludes ``add_generation_prompt``). The text already holds any
        special tokens the template writes, so tokenizing it adds none.
        """
        template = self.select_chat_template(chat_template, tools)
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message and add_generation_prompt cannot both be set")
        variables: dict[str, Any] = {"bos_token": self.bos_token or "", "eos_token": self.eos_token or ""}
        variables.update(kwargs)
        if tools is not None:
            variables["tools"] = tools
        text = render(_TEMPLATES, template, messages, add_generation_prompt, variables)
        if continue_final_message:
            text = cut_after_final_message(text, messages)
        if tokenize:
            return self.encode(text, add_special_tokens=False)
        return text


def cut_after_final_message(text: str, messages: list[dict[str, Any]]) -> str:
    """text up to the end of the last message's content (templates may strip its outer spaces)."""
    if not messages:
        raise ValueError("continue_final_message needs at least one message")
    content = messages[-1].get("content")
    if isinstance(content, list):  # OpenAI content parts: the last text part
        texts = [p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        content = texts[-1] if texts else None
    if not isinstance(content, str):
        raise ValueError("continue_final_message needs the last message to have text content")
    core = content.strip()
    at = text.rfind(core)
    if at < 0:
        raise ValueError("continue_final_message: the chat template did not write the last message's text")
    # Keep the message's trailing spaces where the template kept them.
    kept = content.lstrip()
    end = at + len(kept) if text.startswith(kept, at) else at + len(core)
    return text[:end]


def _is_gguf(path: str) -> bool:
    if os.path.isdir(path):
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"


_TEMPLATES = TemplateCache()  # bounded: LLM.chat(chat_template=...) may pass many distinct ones
