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

from .config import parse_json_text

INSTALL_HINT = "structured outputs need llguidance: pip install 'ossa[structured]'"


def llguidance() -> Any:
    """The llguidance module, or a ValueError naming the extra that installs it."""
    try:
        import llguidance as llg
    except ImportError:
        raise ValueError(INSTALL_HINT) from None
    return llg


_KINDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


@dataclass
class StructuredOutputsParams:
    """One grammar for a request's output (vLLM's ``StructuredOutputsParams``): exactly one of

    - ``json``: a JSON schema (dict or JSON text); the output is a JSON value that validates
    - ``regex``: the output matches the regular expression (Rust regex syntax) as a whole
    - ``choice``: the output is one of these strings
    - ``grammar``: a Lark grammar (llguidance's dialect) or a GBNF/EBNF grammar (llama.cpp's)
    - ``json_object=True``: any JSON object (OpenAI's ``response_format={"type": "json_object"}``)
    - ``structural_tag``: free text in which each ``begin`` (opened by one of the ``triggers``) is
      followed by JSON that validates against its ``schema`` and then its ``end``: ``{"structures":
      [{"begin", "schema", "end"}, ...], "triggers": [...]}`` (dict or JSON text, vLLM's shape). A
      trigger written ``<...>`` that is a special token of the model's tokenizer means that token.

    ``disable_any_whitespace`` keeps JSON compact (no free whitespace between tokens);
    ``disable_additional_properties`` treats objects without ``additionalProperties`` as closed.
    """

    json: str | dict[str, Any] | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    structural_tag: str | dict[str, Any] | None = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    compiled: str = field(init=False, repr=False, compare=False, default="")
    _tags: list[tuple[str, str, dict[str, Any], str]] = field(
        init=False, repr=False, compare=False, default_factory=list
    )

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
        if kind == "structural_tag":
            self._tags = _struct_tags(self.structural_tag, self._json_options())
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
                schema = parse_json_text(schema, "structured_outputs.json")
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
            elif kind == "structural_tag":
                grammar = _struct_tag_lark(self._tags, {})
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

    def grammar_for(self, special_texts: dict[str, int]) -> str:
        """The grammar for a tokenizer with these special tokens: a structural tag's trigger or end
        that is one of them means that token (as the model writes it), else text; the other kinds
        do not depend on the tokenizer."""
        if self.kind != "structural_tag":
            return self.compiled
        if not any(t[0] in special_texts or t[3] in special_texts for t in self._tags):
            return self.compiled
        return _struct_tag_lark(self._tags, special_texts)


def _struct_tag_lark(tags: list[tuple[str, str, dict[str, Any], str]], specials: dict[str, int]) -> str:
    """A Lark grammar (llguidance's dialect) for structural tags: free text in which a trigger
    starts its tag's begin, schema-valid JSON and end. A text trigger is a lazy lexeme (it ends
    the free text as soon as it appears); a special-token trigger is that token."""

    def piece(text: str) -> str:
        if not text:
            return ""
        return f"<[{specials[text]}]>" if text in specials else json.dumps(text)

    rules = ["%llguidance {}", "start: (" + " | ".join(f"tag_{i}" for i in range(len(tags))) + ")* FREE"]
    rules.append(r"FREE: /(.|\n)*/")
    for i, (trigger, begin, schema, end) in enumerate(tags):
        body = f"{piece(begin[len(trigger) :])} %json {json.dumps(schema)} {piece(end)}"
        if trigger in specials:
            rules.append(f"tag_{i}: FREE {piece(trigger)} {body}")
        else:
            rules.append(f"tag_{i}_open[lazy]: FREE {json.dumps(trigger)}")
            rules.append(f"tag_{i}: tag_{i}_open {body}")
    return "\n".join(rules) + "\n"


def _struct_tags(spec: Any, json_options: dict[str, Any]) -> list[tuple[str, str, dict[str, Any], str]]:
    """(trigger, begin, schema, end) of each structure of a structural_tag spec; ValueError naming
    what is wrong."""
    where = "structured_outputs.structural_tag"
    spec = parse_json_text(spec, where)
    if not isinstance(spec, dict):
        raise ValueError(f"{where} must be an object with structures and triggers")
    if "format" in spec and "structures" not in spec:
        raise ValueError(
            f"{where}: the 'format' form (xgrammar's) is not supported; give structures and triggers"
        )
    structures, triggers = spec.get("structures"), spec.get("triggers")
    if not isinstance(triggers, list) or not triggers or not all(isinstance(t, str) and t for t in triggers):
        raise ValueError(f"{where}.triggers must be a non-empty list of non-empty strings")
    if not isinstance(structures, list) or not structures:
        raise ValueError(f"{where}.structures must be a non-empty list")
    tags = []
    for i, st in enumerate(structures):
        if (
            not isinstance(st, dict)
            or not isinstance(st.get("begin"), str)
            or not isinstance(st.get("end"), str)
        ):
            raise ValueError(f"{where}.structures[{i}] needs 'begin' and 'end' strings")
        schema = st.get("schema", {})
        if schema is None:
            schema = {}
        if not isinstance(schema, dict):
            raise ValueError(f"{where}.structures[{i}].schema must be a JSON schema object")
        trigger = next((t for t in triggers if st["begin"].startswith(t)), None)
        if trigger is None:
            raise ValueError(
                f"{where}.structures[{i}].begin {st['begin']!r} starts with none of the triggers"
            )
        options = {**json_options, **(schema.get("x-guidance") or {})}
        tags.append((trigger, st["begin"], {**schema, "x-guidance": options}, st["end"]))
    return tags


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
        raw, special = tokenizer.token_table()
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
        self._special = special
        self._special_text = {i: tokenizer.decode([i]) for i in self.special_token_ids}

    def __call__(self, text: str) -> list[int]:
        """Text's tokens, a special token's text spelled out as text: llguidance tokenizes the text
        a grammar forces, and a special token there would not be the text the grammar asked for."""
        if not isinstance(text, str):
            raise TypeError("text only")  # tells llguidance to pass str, not bytes
        ids = list(self._encode(text, False))
        if not any(self._special[i] for i in ids if i < len(self._special)):
            return ids
        out: list[int] = []
        for i in ids:
            t = self._special_text.get(i, "") if i < len(self._special) and self._special[i] else ""
            out += self(t[:1]) + self(t[1:]) if len(t) > 1 else [i]
        return out


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
            lt = self._lltok
            self._special_texts = {
                self._tokenizer.decode([i]): i for i in range(self.n_vocab) if lt.is_special_token(i)
            }
            self._llg = llg

    def register(self, params: StructuredOutputsParams, n: int = 1) -> int:
        """A handle for a request's grammar, with one matcher for each of its n sequences."""
        with self._lock:
            self._ready()
        handle = next(self._handles)
        grammar = params.grammar_for(self._special_texts)
        matchers = [
            self._llg.LLMatcher(self._lltok, grammar, log_level=0, limits=self._limits) for _ in range(n)
        ]
        error = matchers[0].get_error()
        if error:
            raise ValueError(f"structured_outputs.{params.kind} does not compile: {error.strip()}")
        with self._lock:
            self._grammars[handle] = grammar
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
