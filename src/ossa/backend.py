"""The two engines behind one interface: the C++ core (``"cpp"``) and its Python twin (``"python"``).

Everything that differs between them is here, chosen once by name (``get_backend``): how the
tokenizer loads, how the engine is built from an ``OssaConfig``, and the per-request parameter objects
the engine takes. Both engines then answer the same calls (``add_request``, ``abort``, ``step``,
``run_to_completion``, ``has_unfinished``, ``stats``) with outputs of the same shape
(``EngineOutput`` / ``CompletionDelta`` / ``TokenLogprobs``), which ``ossa.output_processor`` reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import OssaConfig
    from .draft_model import DraftModel
    from .models import Model
    from .reference.tokenizer_spec import TokenizerSpec
    from .sampling_params import SamplingParams
    from .tokenizer import Tokenizer

Words = Sequence[Sequence[int]]  # bad_words as token sequences


class Backend:
    """What one kind of engine needs from the Python side."""

    name = ""
    serves = False  # runs a background loop (start / stop / get_outputs) the server can drive
    serialize_steps = True  # calls into the engine need one lock (the twin is not thread-safe)

    def load_tokenizer(self, path: str) -> Tokenizer:
        from .tokenizer import Tokenizer

        return Tokenizer.from_file(path, backend=self.name)

    def tokenizer_impl(self, spec: TokenizerSpec, path: str | None = None) -> Any:
        """The tokenizer for a spec (read from ``path``, when it is given)."""
        raise NotImplementedError

    def detokenizer(self, impl: Any, skip_special_tokens: bool) -> Any:
        raise NotImplementedError

    def token_table(self, impl: Any) -> tuple[list[bytes], list[bool]]:
        """Every token of a tokenizer as bytes, and whether it is a special token."""
        raise NotImplementedError

    def create_engine(
        self, model: Model, tokenizer: Tokenizer, config: OssaConfig, draft: DraftModel | None = None
    ) -> Any:
        """The engine; ``draft``: the proposer of speculative_config method "draft_model"."""
        raise NotImplementedError

    def new_generation_params(self) -> Any:
        raise NotImplementedError

    def sampler_params(self, params: SamplingParams, eos_ids: Sequence[int], bad_words: Words = ()) -> Any:
        raise NotImplementedError


class CppBackend(Backend):
    name = "cpp"
    serves = True
    serialize_steps = False  # add_request and abort are thread-safe; the step driver orders steps

    def load_tokenizer(self, path: str) -> Tokenizer:
        """On a GGUF file, the C++ loader alone (about 0.2 s): the Python spec reader that
        ``Tokenizer.from_file`` also runs takes seconds on a 49k-token vocabulary, and the C++
        tokenizer needs only the chat template from it."""
        from ._native import core
        from .tokenizer import Tokenizer, _is_gguf

        if not _is_gguf(path):
            return Tokenizer.from_file(path, backend=self.name)
        from .reference.tokenizer_spec import gguf_chat_templates

        md = core.gguf_metadata(path, ["tokenizer.chat_template", "tokenizer.chat_templates"])
        names = md.get("tokenizer.chat_templates")
        if isinstance(names, list) and names:  # the named templates (tool_use, ...) it lists
            keys = [f"tokenizer.chat_template.{n}" for n in names if isinstance(n, str)]
            md.update(core.gguf_metadata(path, keys))
        default, named = gguf_chat_templates(md)
        return Tokenizer(core.Tokenizer.from_gguf(path), None, self.name, default, named)

    def tokenizer_impl(self, spec: TokenizerSpec, path: str | None = None) -> Any:
        from ._native import core
        from .tokenizer import _is_gguf

        if path is not None and _is_gguf(path):
            return core.Tokenizer.from_gguf(path)
        return core.Tokenizer.from_spec(spec.to_dict())

    def detokenizer(self, impl: Any, skip_special_tokens: bool) -> Any:
        from ._native import core

        return core.Detokenizer(impl, skip_special_tokens)

    def token_table(self, impl: Any) -> tuple[list[bytes], list[bool]]:
        n = int(impl.vocab_size)
        return [impl.token_bytes(i) for i in range(n)], [bool(impl.is_special(i)) for i in range(n)]

    def create_engine(
        self, model: Model, tokenizer: Tokenizer, config: OssaConfig, draft: DraftModel | None = None
    ) -> Any:
        from ._native import core

        ec = core.EngineConfig()
        for name, value in config.engine_fields().items():
            setattr(ec, name, value)
        return core.Engine(model._handle, tokenizer.core, ec, None if draft is None else draft.model._handle)

    def new_generation_params(self) -> Any:
        from ._native import core

        return core.GenerationParams()

    def sampler_params(self, params: SamplingParams, eos_ids: Sequence[int], bad_words: Words = ()) -> Any:
        return params.to_core(eos_ids, bad_words_ids=bad_words)


class PythonBackend(Backend):
    name = "python"

    def tokenizer_impl(self, spec: TokenizerSpec, path: str | None = None) -> Any:
        from .reference.tokenizer import Tokenizer

        return Tokenizer(spec)

    def detokenizer(self, impl: Any, skip_special_tokens: bool) -> Any:
        from .reference.tokenizer import Detokenizer

        return Detokenizer(impl, skip_special_tokens)

    def token_table(self, impl: Any) -> tuple[list[bytes], list[bool]]:
        return list(impl.token_bytes), list(impl.is_special)

    def create_engine(
        self, model: Model, tokenizer: Tokenizer, config: OssaConfig, draft: DraftModel | None = None
    ) -> Any:
        from .reference.draft_model import DraftOptions
        from .reference.engine import Engine, EngineConfig

        return Engine(
            config.load.model_path,
            tokenizer._impl,
            EngineConfig(
                **config.engine_fields(),
                # Round activations as the model's C++ kernels do (8-bit blocks, AMX's bf16 halves).
                quantized_activations=bool(model._handle.quantized_activations),
                amx_activations=bool(model._handle.uses_amx),
                int8_matrices=dict(model._handle.int8_matrices),
                compute_dtype=config.load.dtype,
            ),
            None
            if draft is None
            else DraftOptions(
                draft.path,
                quantized_activations=bool(draft.model._handle.quantized_activations),
                amx_activations=bool(draft.model._handle.uses_amx),
                int8_matrices=dict(draft.model._handle.int8_matrices),
            ),
        )

    def new_generation_params(self) -> Any:
        from .reference.engine import GenerationParams

        return GenerationParams()

    def sampler_params(self, params: SamplingParams, eos_ids: Sequence[int], bad_words: Words = ()) -> Any:
        return params.to_reference(eos_ids, bad_words)


_BACKENDS: dict[str, Backend] = {b.name: b for b in (CppBackend(), PythonBackend())}


def get_backend(name: str) -> Backend:
    """The backend called ``name`` ("cpp" or "python"); ValueError if there is none."""
    if name not in _BACKENDS:
        raise ValueError(f"backend must be one of {sorted(_BACKENDS)}, got {name!r}")
    return _BACKENDS[name]
