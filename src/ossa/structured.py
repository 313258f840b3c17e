"""Structured output: grammar constraints on sampling, with llguidance (the ``structured`` extra).

``SamplingParams(structured_outputs=StructuredOutputsParams(json=schema))`` makes every token of a
request follow a JSON schema (or a regex, a choice list, a Lark/GBNF grammar, any JSON object). The
grammar compiles when the parameters are built, so a bad one is a ValueError quoting llguidance.

In the engine, a ``ConstraintHost`` owns one llguidance matcher per constrained sequence. Once per
step the engine hands it every constrained row of the batch together: the tokens each row sampled
since its last mask and the requests that ended; it feeds the tokens and writes the next-token
bitmasks straight into the engine's buffer (llguidance computes them in parallel with the GIL
released). The C++ engine calls it from a worker thread while the forward pass runs; the twin
(``backend="python"``) calls it inline. A finished grammar allows only end-of-sequence, so the
request stops with finish_reason "stop"; a matcher that cannot continue ends its request with an
error naming the grammar's complaint.

Why llguidance and not xgrammar (vLLM's default): one MIT abi3 wheel with no dependencies, masks
computed in Rust from byte-string vocabularies; xgrammar brings torch, transformers and triton into
the runtime, which a lean CPU engine does not otherwise need.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

INSTALL_HINT = "structured outputs need llguidance: pip install 'ossa[structured]'"


def llguidance() -> Any:
    """The llguidance module, or a ValueError naming the extra that installs it."""
    try:
        import llguidance as llg
    except ImportError:
        raise ValueError(INSTALL_HINT) from None
    return llg


_KINDS = ("json", "regex", "choice", "grammar", "json_object")


@dataclass
class StructuredOutputsParams:
    """One grammar for a request's output (vLLM's ``StructuredOutputsParams``): exactly one of

    - ``json``: a JSON schema (dict or JSON text); the output is a JSON value that validates
    - ``regex``: the output matches the regular expression (Rust regex syntax) as a whole
    - ``choice``: the output is one of these strings
    - ``grammar``: a Lark grammar (llguidance's dialect) or a GBNF/EBNF grammar (llama.cpp's)
    - ``json_object=True``: any JSON object (OpenAI's ``response_format={"type": "json_object"}``)

    ``disable_any_whitespace`` keeps JSON compact (no free whitespace between tokens);
    ``disable_additional_properties`` treats objects without ``additionalProperties`` as closed.
    """

    json: str | dict[str, Any] | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    compiled: str = field(init=False, repr=False, compare=False, default="")

    def __post_init__(self) -> None:
        given = [k for k in _KINDS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise ValueError(
                "structured_outputs needs exactly one of json, regex, choice, grammar, json_object; "
                f"got {', '.join(given) if given else 'none'}"
            )
        kind = given[0]
        for name in ("disable_any_whitespace", "disable_additional_properties"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"structured_outputs.{name} must be a bool, got {getattr(self, name)!r}")
        if self.whitespace_pattern is not None and not isinstance(self.whitespace_pattern, str):
            raise ValueError("structured_outputs.whitespace_pattern must be a string")
        if kind == "json_object" and self.json_object is not True:
            raise ValueError(f"structured_outputs.json_object must be True, got {self.json_object!r}")
        if kind in ("regex", "grammar") and not isinstance(getattr(self, kind), str):
            raise ValueError(f"structured_outputs.{kind} must be a string, got {getattr(self, kind)!r}")
        if kind == "choice":
            c = self.choice
            if not isinstance(c, (list, tuple)) or not all(isinstance(s, str) for s in c):
                raise ValueError(f"structured_outputs.choice must be a list of strings, got {c!r}")
            if not c:
                raise ValueError("structured_outputs.choice must not be empty")
            if any(s == "" for s in c):
                raise ValueError("structured_outputs.choice must not contain an empty string")
            self.choice = list(c)
        if kind == "json" and not isinstance(self.json, (str, dict)):
            raise ValueError(
                f"structured_outputs.json must be a JSON schema (dict or str), got {self.json!r}"
            )
        self.compiled = self._compile(kind)

    @property
    def kind(self) -> str:
        return next(k for k in _KINDS if getattr(self, k) not in (None, False))

    def _json_options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"whitespace_flexible": not self.disable_any_whitespace}
        if self.whitespace_pattern is not None:
            opts["whitespace_pattern"] = self.whitespace_pattern
        return opts

    def _compile(self, kind: str) -> str:
        llg = llguidance()
        M = llg.LLMatcher
        try:
            if kind in ("json", "json_object"):
                schema: Any = {"type": "object"} if kind == "json_object" else self.json
                if isinstance(schema, str):
                    try:
                        schema = json.loads(schema)
                    except json.JSONDecodeError as e:
                        raise ValueError(f"structured_outputs.json is not valid JSON: {e}") from None
                if not isinstance(schema, (dict, bool)):
                    raise ValueError("structured_outputs.json must be a JSON schema object")
                if self.disable_additional_properties and isinstance(schema, dict):
                    schema = _close_objects(schema)
                grammar = M.grammar_from_json_schema(schema, defaults=self._json_options())
            elif kind == "regex":
                grammar = M.grammar_from_regex(self.regex)
            elif kind == "choice":
                grammar = M.grammar_from_lark(
                    "start: " + " | ".join(json.dumps(s) for s in self.choice or [])
                )
            else:
                grammar = llg.grammar_from("grammar", self.grammar or "")
        except ValueError as e:
            if str(e).startswith("structured_outputs"):
                raise
            raise ValueError(f"structured_outputs.{kind} does not compile: {e}") from None
        error = M.validate_grammar(grammar)
        if error:
            raise ValueError(f"structured_outputs.{kind} does not compile: {error.strip()}")
        return grammar


def _close_objects(schema: Any) -> Any:
    """The schema with ``additionalProperties: false`` on every object that does not say."""
    if isinstance(schema, list):
        return [_close_objects(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _close_objects(v) for k, v in schema.items()}
    if (out.get("type") == "object" or "properties" in out) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


# -- the tokenizer glue -----------------------------------------------------------------------------


class _Vocabulary:
    """What llguidance's TokenizerWrapper reads: every token as bytes (special tokens marked with a
    leading 0xFF, llguidance's convention), the EOS id, and a tokenize callback."""

    def __init__(self, tokenizer: Any, n_vocab: int) -> None:
        impl = tokenizer._impl
        n = int(tokenizer.vocab_size)
        if tokenizer.backend == "cpp":
            raw = [impl.token_bytes(i) for i in range(n)]
            special = [bool(impl.is_special(i)) for i in range(n)]
        else:
            raw = list(impl.token_bytes)
            special = list(impl.is_special)
        tokens = [b"\xff" + b if s and b else b for b, s in zip(raw, special, strict=True)]
        tokens += [b""] * max(0, n_vocab - n)  # ids the model has beyond the tokenizer's
        self.tokens = tokens[:n_vocab]
        self.special_token_ids = [i for i, s in enumerate(special) if s and i < n_vocab]
        eos = [i for i in tokenizer.eos_token_ids if 0 <= i < n_vocab]
        self.eos_ids = eos
        self.eos_token_id = eos[0] if eos else None
        bos = tokenizer.bos_token_id
        self.bos_token_id = bos if bos is not None and 0 <= bos < n_vocab else None
        self._encode = impl.encode

    def __call__(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TypeError("text only")  # tells llguidance to pass str, not bytes
        return list(self._encode(text, False))


def llg_tokenizer(tokenizer: Any, n_vocab: int) -> Any:
    """llguidance's tokenizer for an ``ossa.Tokenizer`` (byte-level or SentencePiece), with the model's
    vocabulary size; built once per tokenizer and kept on it."""
    cache = tokenizer.__dict__.setdefault("_llg_tokenizers", {})
    if n_vocab not in cache:
        llg = llguidance()
        vocab = _Vocabulary(tokenizer, n_vocab)
        if vocab.eos_token_id is None:
            raise ValueError("structured outputs need a tokenizer with an end-of-sequence token")
        cache[n_vocab] = llg.LLTokenizer(
            llg.TokenizerWrapper(vocab), n_vocab=n_vocab, eos_token=vocab.eos_ids
        )
    return cache[n_vocab]


# -- the engine side --------------------------------------------------------------------------------


class ConstraintHost:
    """The matchers of one engine's constrained requests (``core.Engine.set_constraint_host``)."""

    def __init__(self, tokenizer: Any, n_vocab: int, num_threads: int | None = None) -> None:
        self._tokenizer = tokenizer
        self.n_vocab = int(n_vocab)
        self.words = (self.n_vocab + 31) // 32
        self._num_threads = num_threads
        self._llg: Any = None
        self._executor: Any = None
        self._handles = itertools.count()
        self._grammars: dict[int, str] = {}
        self._matchers: dict[tuple[int, int], Any] = {}
        # LLM callers on several threads register and release while the stepping thread computes.
        self._lock = threading.RLock()

    def _ready(self) -> None:
        if self._llg is None:
            llg = llguidance()
            self._lltok = llg_tokenizer(self._tokenizer, self.n_vocab)
            self._executor = llg.LLExecutor(num_threads=self._num_threads)
            self._limits = llg.LLParserLimits(verbose_errors=False)  # messages without parser dumps
            self._llg = llg

    def register(self, params: StructuredOutputsParams, n: int = 1) -> int:
        """A handle for a request's grammar, with one matcher for each of its n sequences."""
        with self._lock:
            self._ready()
        handle = next(self._handles)
        matchers = [
            self._llg.LLMatcher(self._lltok, params.compiled, log_level=0, limits=self._limits)
            for _ in range(n)
        ]
        error = matchers[0].get_error()
        if error:
            raise ValueError(f"structured_outputs.{params.kind} does not compile: {error.strip()}")
        with self._lock:
            self._grammars[handle] = params.compiled
            for child, m in enumerate(matchers):
                self._matchers[(handle, child)] = m
        return handle

    def release(self, handle: int) -> None:
        """Forget a request's matchers (the engine reports ended requests in compute())."""
        with self._lock:
            if self._grammars.pop(int(handle), None) is not None:
                for key in [k for k in self._matchers if k[0] == handle]:
                    del self._matchers[key]

    @property
    def num_live(self) -> int:
        return len(self._grammars)

    def compute(
        self,
        handles: np.ndarray,
        children: np.ndarray,
        feed_offsets: np.ndarray,
        feed_tokens: np.ndarray,
        released: np.ndarray,
        masks: np.ndarray,
    ) -> list[tuple[int, str]]:
        """Releases ended requests, feeds each row the tokens it sampled since its last mask, and
        writes row i's next-token bitmask into ``masks[i]``. Returns (row, message) for rows whose
        matcher cannot continue."""
        with self._lock:
            return self._compute(handles, children, feed_offsets, feed_tokens, released, masks)

    def _compute(
        self,
        handles: np.ndarray,
        children: np.ndarray,
        feed_offsets: np.ndarray,
        feed_tokens: np.ndarray,
        released: np.ndarray,
        masks: np.ndarray,
    ) -> list[tuple[int, str]]:
        for h in released.tolist():
            self.release(h)
        errors: list[tuple[int, str]] = []
        if len(handles) == 0:
            return errors
        offsets = feed_offsets.tolist()
        tokens = feed_tokens.tolist()
        rows: list[tuple[Any, int]] = []
        singles: list[tuple[Any, int]] = []
        for i, (h, c) in enumerate(zip(handles.tolist(), children.tolist(), strict=True)):
            m = self._matchers.get((h, c))
            if m is None:
                errors.append((i, f"no matcher for request handle {h} child {c}"))
                continue
            feed = tokens[offsets[i] : offsets[i + 1]]
            if len(feed) == 1:
                singles.append((m, feed[0]))
            elif feed and not m.consume_tokens(feed):
                pass  # reported below from the matcher's error state
            rows.append((m, i))
        if singles:
            self._executor.consume_token_par(singles)
        ok: list[tuple[Any, int]] = []
        for m, i in rows:
            if m.is_error():
                errors.append((i, f"the grammar cannot continue: {m.get_error().strip()}"))
            else:
                ok.append((m, i))
        if ok:
            assert masks.dtype == np.int32 and masks.flags["C_CONTIGUOUS"] and masks.shape[1] == self.words
            self._executor.unsafe_compute_mask_ptr(ok, masks.ctypes.data, self.words * 4, masks.shape[0])
            for m, i in ok:
                if m.is_error():
                    errors.append((i, f"the grammar cannot continue: {m.get_error().strip()}"))
        return errors
