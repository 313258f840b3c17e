"""TokenizerSpec: the tokenizer a file describes, reduced to what ossa's tokenizer implements.

Built from a Hugging Face ``tokenizer.json`` (+ ``tokenizer_config.json``, ``generation_config.json``)
or from GGUF metadata. Both the C++ tokenizer (``core.Tokenizer.from_spec``) and the Python twin take
it. A component ossa does not implement raises ``ModelError`` naming it; nothing is approximated.

EOS-like ids (``eos_ids``, the ids that end generation): for a Hugging Face folder, the tokenizer's
eos token plus ``generation_config.json``'s ``eos_token_id`` (int or list); for GGUF,
``tokenizer.ggml.eos_token_id``, ``eot_token_id`` and ``eom_token_id`` (the keys llama.cpp stops on).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

from .pretokenizer import byte_level_decode, byte_level_encode, pattern_from_regex

METASPACE = "\u2581"


class ModelError(ValueError):
    """A tokenizer file ossa cannot load (the Python twin's counterpart of ossa.ModelError)."""


@dataclass
class TokenizerSpec:
    """Field names and meanings match ossa::TokenizerSpec (csrc/tokenizer/tokenizer.h)."""

    model: str = "byte_level_bpe"  # or "sentencepiece_bpe"
    vocab: list[str] = field(default_factory=list)
    merges: list[tuple[str, str]] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    added_tokens: list[dict[str, Any]] = field(default_factory=list)
    pre_tokenizer: list[str] = field(default_factory=list)
    add_prefix_space: bool = False
    prefix: str = "never"  # never | first | always | prepend
    metaspace_split: bool = False
    byte_fallback: bool = False
    fuse_unk: bool = False
    ignore_merges: bool = False
    nfc: bool = False  # the NFC normalizer, applied to the text between raw added tokens
    unk_id: int = -1
    prefix_ids: list[int] = field(default_factory=list)
    suffix_ids: list[int] = field(default_factory=list)
    bos_id: int = -1
    eos_id: int = -1
    pad_id: int = -1
    eos_ids: list[int] = field(default_factory=list)
    strip_leading_space: bool = False
    chat_template: str | None = None
    # Named templates ("default", "tool_use", ...) where the model has several (tokenizer_config's list,
    # additional_chat_templates/*.jinja, a GGUF file's tokenizer.chat_template.<name> keys).
    chat_templates: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["merges"] = [list(m) for m in self.merges]
        d.pop("chat_template")
        d.pop("chat_templates")
        return d


def _unsupported(what: str, detail: Any) -> ModelError:
    return ModelError(f"unsupported tokenizer component: {what} {json.dumps(detail)[:200]}")


def _flatten(node: dict | None) -> list[dict]:
    if node is None:
        return []
    if node.get("type") == "Sequence":
        key = next(k for k in ("pretokenizers", "normalizers", "processors", "decoders") if k in node)
        return [x for child in node[key] for x in _flatten(child)]
    return [node]


def _token_content(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value


def spec_from_tokenizer_json(
    tj: dict, config: dict | None = None, generation_config: dict | None = None
) -> TokenizerSpec:
    """A spec from a parsed tokenizer.json and optional tokenizer_config.json / generation_config.json."""
    config = config or {}
    model = tj.get("model") or {}
    if model.get("type") != "BPE":
        raise _unsupported("model", model.get("type"))
    if model.get("dropout") not in (None, 0, 0.0):
        raise _unsupported("BPE dropout", model.get("dropout"))
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise _unsupported(f"BPE {key}", model.get(key))
    spec = TokenizerSpec()
    vocab: dict[str, int] = model["vocab"]
    size = max(vocab.values(), default=-1) + 1
    spec.vocab = [""] * size
    for tok, i in vocab.items():
        spec.vocab[i] = tok
    spec.merges = [_merge_pair(m) for m in model.get("merges", [])]
    spec.byte_fallback = bool(model.get("byte_fallback"))
    spec.fuse_unk = bool(model.get("fuse_unk"))
    spec.ignore_merges = bool(model.get("ignore_merges"))

    added = {t["content"]: t["id"] for t in tj.get("added_tokens", [])}
    spec.added_tokens = [
        {k: t[k] for k in ("id", "content", "special", "lstrip", "rstrip", "normalized", "single_word")}
        for t in tj.get("added_tokens", [])
    ]

    def id_of(token: str | None) -> int:
        if token is None:
            return -1
        if token in added:
            return added[token]
        return vocab.get(token, -1)

    if model.get("unk_token") is not None:
        spec.unk_id = id_of(model["unk_token"])

    byte_level = metaspace = False
    space_split = False  # Gemma's Split(" ", MergedWithPrevious): see below
    for i, pre in enumerate(_flatten(tj.get("pre_tokenizer"))):
        kind = pre.get("type")
        if kind == "Split" and pre.get("pattern") == {"String": " "} and not pre.get("invert"):
            space_split = True
            continue
        if kind == "ByteLevel":
            byte_level = True
            if pre.get("use_regex", True):
                spec.pre_tokenizer.append("gpt2")
            if pre.get("add_prefix_space"):
                if i != 0:
                    raise _unsupported("ByteLevel add_prefix_space after another pre-tokenizer", pre)
                spec.add_prefix_space = True
        elif kind == "Split":
            regex = pre.get("pattern", {}).get("Regex")
            name = pattern_from_regex(regex) if regex is not None else None
            if name is None or pre.get("behavior") != "Isolated" or pre.get("invert"):
                raise _unsupported("Split pre-tokenizer", pre)
            spec.pre_tokenizer.append(name)
        elif kind == "Digits":
            spec.pre_tokenizer.append(
                "digits_individual" if pre.get("individual_digits") else "digits_contiguous"
            )
        elif kind == "Metaspace":
            if pre.get("replacement") != METASPACE:
                raise _unsupported("Metaspace replacement", pre)
            metaspace = True
            scheme = pre.get("prepend_scheme", "always" if pre.get("add_prefix_space", True) else "never")
            spec.prefix = scheme
            spec.metaspace_split = bool(pre.get("split", True))
        else:
            raise _unsupported("pre-tokenizer", kind)
    normalizers = _flatten(tj.get("normalizer"))
    if normalizers and normalizers[0].get("type") == "NFC":  # Qwen2 / Qwen2.5: NFC first (or alone)
        spec.nfc = True
        normalizers = normalizers[1:]
    for norm in normalizers:
        kind = norm.get("type")
        if kind == "Prepend" and norm.get("prepend") == METASPACE:
            spec.prefix = "prepend"
        elif (
            kind == "Replace" and norm.get("pattern") == {"String": " "} and norm.get("content") == METASPACE
        ):
            metaspace = True
        else:
            raise _unsupported("normalizer", norm)
    if normalizers and [n["type"] for n in normalizers] not in (["Prepend", "Replace"], ["Replace"]):
        raise _unsupported("normalizer sequence", tj.get("normalizer"))
    # Gemma's tokenizer.json splits on " " after its Replace normalizer has turned every space into
    # U+2581: nothing is left to split on, so the step changes nothing. Without that normalizer it
    # would split, which ossa does not implement.
    if space_split and "Replace" not in [n["type"] for n in normalizers]:
        raise _unsupported("Split pre-tokenizer on ' '", tj.get("pre_tokenizer"))
    if byte_level == metaspace:
        raise _unsupported(
            "BPE without exactly one of ByteLevel / Metaspace",
            [tj.get("pre_tokenizer"), tj.get("normalizer")],
        )
    spec.model = "byte_level_bpe" if byte_level else "sentencepiece_bpe"
    if metaspace and spec.pre_tokenizer:
        raise _unsupported("pre-tokenizer steps with a SentencePiece-style model", tj.get("pre_tokenizer"))

    for dec in _flatten(tj.get("decoder")):
        kind = dec.get("type")
        if kind == "ByteLevel" and byte_level:
            continue
        if kind in ("ByteFallback", "Fuse") and not byte_level:
            continue
        if kind == "Replace" and dec.get("pattern") == {"String": METASPACE} and dec.get("content") == " ":
            continue
        if (
            kind == "Strip"
            and dec.get("content") == " "
            and dec.get("start") in (0, 1)
            and dec.get("stop") == 0
        ):
            spec.strip_leading_space = dec.get("start") == 1
            continue
        if kind == "Metaspace" and not byte_level:
            spec.strip_leading_space = dec.get("prepend_scheme", "always") != "never"
            continue
        raise _unsupported("decoder", dec)

    for proc in _flatten(tj.get("post_processor")):
        kind = proc.get("type")
        if kind == "ByteLevel":
            continue
        if kind != "TemplateProcessing":
            raise _unsupported("post-processor", kind)
        before = True
        for item in proc["single"]:
            if "Sequence" in item:
                before = False
                continue
            token_ids = proc["special_tokens"][item["SpecialToken"]["id"]]["ids"]
            (spec.prefix_ids if before else spec.suffix_ids).extend(token_ids)

    spec.bos_id = id_of(_token_content(config.get("bos_token")))
    spec.eos_id = id_of(_token_content(config.get("eos_token")))
    spec.pad_id = id_of(_token_content(config.get("pad_token")))
    eos: list[int] = [spec.eos_id] if spec.eos_id >= 0 else []
    extra = (generation_config or {}).get("eos_token_id")
    for i in extra if isinstance(extra, list) else [extra] if extra is not None else []:
        if i not in eos:
            eos.append(i)
    spec.eos_ids = eos
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates, as transformers keeps them (a dict by name)
        spec.chat_templates = {
            t["name"]: t["template"]
            for t in template
            if isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str)
        }
        template = spec.chat_templates.get("default")
    spec.chat_template = template if isinstance(template, str) else None
    return spec


def _proto_fields(data: bytes, what: str) -> list[tuple[int, int, Any]]:
    """The (field number, wire type, value) of a protobuf message, in order: varints as ints, fixed32 /
    fixed64 as their raw bytes, length-delimited fields as bytes (the wire format alone; nothing else is
    needed to read a SentencePiece model)."""
    out: list[tuple[int, int, Any]] = []
    i, n = 0, len(data)

    def varint() -> int:
        nonlocal i
        shift = value = 0
        while True:
            if i >= n or shift > 63:
                raise ModelError(f"{what}: truncated or malformed protobuf")
            b = data[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value

    while i < n:
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value: Any = varint()
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if i + size > n:
                raise ModelError(f"{what}: truncated protobuf")
            value, i = data[i : i + size], i + size
        elif wire == 2:
            size = varint()
            if i + size > n:
                raise ModelError(f"{what}: truncated protobuf")
            value, i = data[i : i + size], i + size
        else:
            raise ModelError(f"{what}: unsupported protobuf wire type {wire}")
        out.append((number, wire, value))
    return out


def _spm_merges(vocab: dict[str, int]) -> list[tuple[str, str]]:
    """The merges transformers derives for a SentencePiece BPE vocabulary (tokenization_utils_base's
    generate_merges without scores): every split of a piece into two pieces, ordered by the piece's id,
    then by the left part's length and the right part's (in code points); within a piece by the parts'
    ids."""
    merges: list[tuple[str, str, int]] = []
    for piece, rank in vocab.items():
        local = [
            (piece[:i], piece[i:], rank)
            for i in range(1, len(piece))
            if piece[:i] in vocab and piece[i:] in vocab
        ]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])))
    return [(m[0], m[1]) for m in merges]


def spec_from_sentencepiece(
    data: bytes,
    config: dict | None = None,
    generation_config: dict | None = None,
    what: str = "tokenizer.model",
) -> TokenizerSpec:
    """A spec from a SentencePiece BPE model file (a folder's tokenizer.model without a tokenizer.json) as
    transformers builds its tokenizer from one (LlamaTokenizer, transformers 5): the pieces with merges
    in piece order (``_spm_merges``), byte fallback, a prefix space on the first segment (every segment
    where tokenizer_config.json says legacy, none where add_prefix_space is false), control pieces as
    special added tokens and user-defined ones as plain added tokens, then tokenizer_config.json's
    special tokens and added_tokens_decoder; BOS / EOS added where it says add_bos_token / add_eos_token
    (released Llama 2 / Mistral configs say add_bos_token: true). The model's own normalizer spec is not
    applied (nor by transformers). Unigram models are refused by name."""
    import struct

    config = config or {}
    pieces: list[tuple[str, int]] = []
    trainer: dict[int, Any] = {}
    for number, _, value in _proto_fields(data, what):
        if number == 1:  # a piece: its text (1), score (2) and type (3)
            p = {k: v for k, _, v in _proto_fields(value, what)}
            text = p[1].decode("utf-8", "surrogateescape") if isinstance(p.get(1), bytes) else ""
            if isinstance(p.get(2), bytes):
                struct.unpack("<f", p[2])  # (a score must be a float; transformers orders by id)
            pieces.append((text, int(p.get(3, 1))))
        elif number == 2:
            trainer = {k: v for k, _, v in _proto_fields(value, what)}
    if not pieces:
        raise ModelError(f"{what}: no pieces (not a SentencePiece model)")
    model_type = int(trainer.get(3, 1))
    if model_type != 2:
        type_name = {1: "unigram", 3: "word", 4: "char"}.get(model_type, str(model_type))
        raise ModelError(f"{what}: SentencePiece {type_name} models are not supported (BPE ones are)")

    spec = TokenizerSpec(model="sentencepiece_bpe")
    spec.vocab = [p[0] for p in pieces]
    ranks = {text: i for i, (text, _) in enumerate(pieces)}  # (a repeated piece: its last id)
    spec.merges = _spm_merges(ranks)
    spec.byte_fallback = spec.fuse_unk = True
    add_prefix = config.get("add_prefix_space")
    add_prefix = True if add_prefix is None else bool(add_prefix)
    spec.prefix = "never" if not add_prefix else "always" if config.get("legacy", False) else "first"
    spec.strip_leading_space = add_prefix
    flags = {"lstrip": False, "rstrip": False, "normalized": False, "single_word": False}
    added: dict[str, int] = {}

    def add(i: int, content: str, special: bool, extra: dict[str, bool] | None = None) -> None:
        if content in added:
            return
        added[content] = i
        spec.added_tokens.append({"id": i, "content": content, "special": special, **(extra or flags)})

    for index, (piece, kind) in enumerate(pieces):
        if kind in (3, 4):  # control (special), user-defined (not)
            add(index, piece, kind == 3)
    decoder = config.get("added_tokens_decoder") or {}
    for key, tok in sorted(decoder.items(), key=lambda kv: int(kv[0])) if isinstance(decoder, dict) else []:
        i = int(key)
        content = tok.get("content") if isinstance(tok, dict) else None
        if not isinstance(content, str) or not 0 <= i <= 1 << 24:
            raise ModelError(f"{what}: malformed added_tokens_decoder entry {key!r}")
        while len(spec.vocab) <= i:  # (ids beyond the pieces: the added tokens' own)
            spec.vocab.append(content if len(spec.vocab) == i else f"<unused_{len(spec.vocab)}>")
        own = {k: bool(tok.get(k, False)) for k in ("lstrip", "rstrip", "normalized", "single_word")}
        add(i, content, bool(tok.get("special", True)), own)

    def id_of(value: Any, default: str | None) -> int:
        content = _token_content(value) if value is not None else default
        if content is None:
            return -1
        i = added.get(content, ranks.get(content, -1))
        if i >= 0:
            add(i, content, True)  # (the special tokens are added tokens)
        return i

    spec.unk_id = id_of(config.get("unk_token"), "<unk>")
    spec.bos_id = id_of(config.get("bos_token"), "<s>")
    spec.eos_id = id_of(config.get("eos_token"), "</s>")
    spec.pad_id = id_of(config.get("pad_token"), None)
    if config.get("add_bos_token", False) and spec.bos_id >= 0:  # (transformers 5's default: off)
        spec.prefix_ids = [spec.bos_id]
    if config.get("add_eos_token", False) and spec.eos_id >= 0:
        spec.suffix_ids = [spec.eos_id]
    eos: list[int] = [spec.eos_id] if spec.eos_id >= 0 else []
    extra = (generation_config or {}).get("eos_token_id")
    for i in extra if isinstance(extra, list) else [extra] if extra is not None else []:
        if isinstance(i, int) and i not in eos:
            eos.append(i)
    spec.eos_ids = eos
    spec.added_tokens.sort(key=lambda t: t["id"])
    template = config.get("chat_template")
    spec.chat_template = template if isinstance(template, str) else None
    return spec


# The special-token names of a tokenizer config, in the order transformers adds the ones a vocabulary
# lacks.
_SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# The byte-level BPE classes of folders that hold vocab.json + merges.txt and no tokenizer.json (OPT,
# GPT-Neo, older GPT-2 uploads), read as transformers 5's GPT2Tokenizer builds them.
_GPT2_CLASSES = {"GPT2Tokenizer", "GPT2TokenizerFast", "CodeGenTokenizer", "CodeGenTokenizerFast"}


def spec_from_vocab_merges(folder: str, config: dict | None, generation_config: dict | None) -> TokenizerSpec:
    """A spec from a folder's vocab.json + merges.txt (GPT-2's slow-tokenizer files, no tokenizer.json),
    as transformers 5's GPT2Tokenizer builds its tokenizer from them: byte-level BPE with the GPT-2 split,
    add_prefix_space from the config; the special tokens of tokenizer_config.json and
    special_tokens_map.json (the latter wins, as in transformers; bos / eos / unk default to
    <|endoftext|>), each an added special token, at its vocabulary id or appended; added_tokens_decoder's
    entries with their own flags; BOS / EOS added where add_bos_token / add_eos_token say."""
    config = dict(config or {})
    what = os.path.join(folder, "vocab.json")
    cls = config.get("tokenizer_class")
    if cls is not None and cls not in _GPT2_CLASSES:
        raise ModelError(
            f"{folder}: a {cls} from vocab.json + merges.txt is not supported without a tokenizer.json "
            f"(GPT-2's byte-level BPE is: {', '.join(sorted(_GPT2_CLASSES))})"
        )
    try:
        with open(what, encoding="utf-8") as f:
            vocab = json.load(f)
        with open(os.path.join(folder, "merges.txt"), encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelError(f"{folder}: unreadable vocab.json / merges.txt ({e})") from e
    if not isinstance(vocab, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and 0 <= v < 1 << 24 for k, v in vocab.items()
    ):
        raise ModelError(f"{what}: not a map of tokens to ids")
    merges: list[list[str]] = []
    for number, line in enumerate(lines):
        if (number == 0 and line.startswith("#version")) or not line.strip():
            continue
        pair = line.split(" ")
        if len(pair) != 2:
            raise ModelError(f"{folder}/merges.txt: line {number + 1} is not a pair of tokens: {line[:80]!r}")
        merges.append(pair)
    special_map = _load_json(os.path.join(folder, "special_tokens_map.json"))
    if isinstance(special_map, dict):
        config.update({k: v for k, v in special_map.items() if v is not None})
    for name in ("bos_token", "eos_token", "unk_token"):  # (GPT2Tokenizer's defaults)
        config.setdefault(name, "<|endoftext|>")
    added: list[dict[str, Any]] = []
    taken: dict[str, int] = {}
    next_id = max(vocab.values(), default=-1) + 1
    flags = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False}
    decoder = config.get("added_tokens_decoder") or {}
    for key, tok in sorted(decoder.items(), key=lambda kv: int(kv[0])) if isinstance(decoder, dict) else []:
        content = tok.get("content") if isinstance(tok, dict) else None
        if not isinstance(content, str) or not str(key).isdigit() or int(key) >= 1 << 24:
            raise ModelError(f"{folder}: malformed added_tokens_decoder entry {key!r}")
        own = {k: bool(tok.get(k, False)) for k in flags}
        added.append({"id": int(key), "content": content, "special": bool(tok.get("special", True)), **own})
        taken[content] = int(key)
        next_id = max(next_id, int(key) + 1)
    extra = config.get("additional_special_tokens") or config.get("extra_special_tokens") or []
    named = [config.get(n) for n in _SPECIAL_NAMES] + (list(extra) if isinstance(extra, list) else [])
    for value in named:
        content = _token_content(value)
        if content is None or content in taken:
            continue
        i = vocab.get(content, next_id)
        next_id += i == next_id
        own = {k: bool(value.get(k, False)) for k in flags} if isinstance(value, dict) else flags
        added.append({"id": i, "content": content, "special": True, **own})
        taken[content] = i
    added.sort(key=lambda t: t["id"])
    for t in added:
        vocab.setdefault(t["content"], t["id"])

    def template(ids: list[str]) -> list[dict]:
        return [{"SpecialToken": {"id": s, "type_id": 0}} for s in ids]

    bos, eos = _token_content(config.get("bos_token")), _token_content(config.get("eos_token"))
    before = [bos] if config.get("add_bos_token", False) and bos in taken else []
    after = [eos] if config.get("add_eos_token", False) and eos in taken else []
    tj = {
        "model": {"type": "BPE", "vocab": vocab, "merges": merges},
        "added_tokens": added,
        "pre_tokenizer": {
            "type": "ByteLevel",
            "add_prefix_space": bool(config.get("add_prefix_space", False)),
        },
        "decoder": {"type": "ByteLevel"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": template(before) + [{"Sequence": {"id": "A", "type_id": 0}}] + template(after),
            "special_tokens": {s: {"ids": [taken[s]]} for s in before + after},
        },
    }
    return spec_from_tokenizer_json(tj, config, generation_config)


def _load_json(path: str) -> Any:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ModelError(f"{path}: not valid JSON ({e})") from e


def spec_from_hf_path(path: str) -> TokenizerSpec:
    """A spec from a tokenizer.json file or a folder holding one (with its config files); a folder with a
    SentencePiece tokenizer.model and no tokenizer.json reads that (``spec_from_sentencepiece``), one with
    GPT-2's vocab.json + merges.txt those (``spec_from_vocab_merges``)."""
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    tj_path = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path

    def load(name: str) -> dict | None:
        p = os.path.join(folder, name)
        if not os.path.exists(p):
            return None
        with open(p, encoding="utf-8") as f:
            return json.load(f)

    spm_path = os.path.join(folder, "tokenizer.model")
    if not os.path.exists(tj_path) and os.path.isdir(path) and os.path.isfile(spm_path):
        with open(spm_path, "rb") as fb:
            data = fb.read()
        spec = spec_from_sentencepiece(data, load("tokenizer_config.json"), load("generation_config.json"),
                                       spm_path)  # fmt: skip
    elif (
        not os.path.exists(tj_path)
        and os.path.isdir(path)
        and os.path.isfile(os.path.join(folder, "vocab.json"))
        and os.path.isfile(os.path.join(folder, "merges.txt"))
    ):
        spec = spec_from_vocab_merges(folder, load("tokenizer_config.json"), load("generation_config.json"))
    else:
        if not os.path.exists(tj_path):
            raise ModelError(
                f"{path}: no tokenizer.json (nor a SentencePiece tokenizer.model, nor vocab.json and "
                "merges.txt)"
            )
        with open(tj_path, encoding="utf-8") as f:
            try:
                tj = json.load(f)
            except json.JSONDecodeError as e:
                raise ModelError(f"{tj_path}: not valid JSON ({e})") from e
        spec = spec_from_tokenizer_json(tj, load("tokenizer_config.json"), load("generation_config.json"))
    # Template files take priority over tokenizer_config's entries, as in transformers:
    # chat_template.jinja is the default, additional_chat_templates/NAME.jinja the named ones.
    files: dict[str, str] = {}
    jinja = os.path.join(folder, "chat_template.jinja")
    if os.path.exists(jinja):
        with open(jinja, encoding="utf-8") as f:
            files["default"] = f.read()
    extra = os.path.join(folder, "additional_chat_templates")
    if os.path.isdir(extra):
        for name in sorted(os.listdir(extra)):
            if name.endswith(".jinja"):
                with open(os.path.join(extra, name), encoding="utf-8") as f:
                    files[name[: -len(".jinja")]] = f.read()
    if files:
        spec.chat_template = files.get("default")
        spec.chat_templates = files if set(files) != {"default"} else {}
    if spec.chat_template is None:  # a multimodal folder's processor template (Qwen3-VL, Llama 4)
        processor = load("chat_template.json")
        template = processor.get("chat_template") if isinstance(processor, dict) else None
        spec.chat_template = template if isinstance(template, str) else None
    return spec


_LLAMA3_PRE = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
               "jina-v5-nano", "dbrx", "smaug-bpe", "chatglm-bpe", "glm4"}  # fmt: skip
_BLOOM_PRE = {"bloom", "poro-chat", "gpt3-finnish"}
_QWEN2_PRE = {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez"}
# Token texts that end generation whatever the eos/eot/eom keys say (llama.cpp's list; see
# csrc/tokenizer/tokenizer_gguf.cpp).
_END_OF_GENERATION_TEXTS = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<turn|>",
    "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>",  # DeepSeek's
}  # fmt: skip
# The names for which llama.cpp adds BOS when tokenizer.ggml.add_bos_token is absent and applies
# ignore_merges (as Llama 3's and Tekken's tokenizer.json do).
_BOS_AND_IGNORE_MERGES_PRE = {
    "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "tekken",
}  # fmt: skip
_O200K_PRE = {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}
_UNSUPPORTED_PRE: set[str] = set()


def spec_from_gguf_metadata(md: dict[str, Any], path: str = "GGUF") -> TokenizerSpec:
    """The twin of Tokenizer::from_gguf (csrc/tokenizer/tokenizer_gguf.cpp); same rules, same order."""
    model = md.get("tokenizer.ggml.model")
    if not model:
        raise ModelError(f"{path}: no tokenizer in this GGUF (tokenizer.ggml.model is missing)")
    arch = md.get("general.architecture", "")
    tokens: list[str] = list(md.get("tokenizer.ggml.tokens") or [])
    if not tokens:
        raise ModelError(f"{path}: tokenizer.ggml.tokens is missing or empty")
    types = list(md.get("tokenizer.ggml.token_type") or [])
    merges = list(md.get("tokenizer.ggml.merges") or [])
    spec = TokenizerSpec()
    byte_level = model == "gpt2"

    # A string that is not UTF-8 comes back from the GGUF reader as bytes (C++ keeps the raw bytes).
    def in_alphabet(t: str | bytes) -> bool:
        return isinstance(t, str) and byte_level_decode(t) is not None

    def raw(t: str | bytes) -> bytes:
        return t if isinstance(t, bytes) else t.encode("utf-8")

    def text(t: str | bytes) -> str:
        return t if isinstance(t, str) else t.decode("utf-8", "surrogateescape")

    if byte_level:
        pre = md.get("tokenizer.ggml.pre", "")
        if pre in _UNSUPPORTED_PRE:
            raise ModelError(f"{path}: unsupported GGUF pre-tokenizer '{pre}'")
        spec.pre_tokenizer = [
            "llama3" if pre in _LLAMA3_PRE
            else "qwen2" if pre in _QWEN2_PRE
            else "o200k" if pre in _O200K_PRE
            else "tekken" if pre == "tekken"
            else "qwen35" if pre == "qwen35"
            else "bloom" if pre in _BLOOM_PRE
            else "gpt2"
        ]  # fmt: skip
        spec.nfc = pre == "qwen35"  # (Qwen3.5's tokenizer.json normalises to NFC)
        spec.vocab = [t if in_alphabet(t) else byte_level_encode(raw(t)) for t in tokens]
        spec.ignore_merges = pre in _BOS_AND_IGNORE_MERGES_PRE
        add_bos = bool(md.get("tokenizer.ggml.add_bos_token", spec.ignore_merges))
    elif model == "llama":
        # The pipeline is picked by architecture, as transformers' GGUF builders do: Llama 2 / Mistral
        # (prefix on the first segment), Phi-3 (Prepend normalizer: every segment), Gemma (no prefix,
        # space runs respelled as U+2581 runs, merges in token order).
        gemma = arch in ("gemma", "gemma2", "gemma3", "gemma3n")
        spec.model = "sentencepiece_bpe"
        spec.vocab = [text(t) for t in tokens]
        spec.byte_fallback = spec.fuse_unk = True
        if gemma:
            spec.vocab = [METASPACE * len(t) if " " in t and not t.strip() else t for t in spec.vocab]
            spec.prefix, spec.strip_leading_space = "never", False
        else:
            space_prefix = bool(md.get("tokenizer.ggml.add_space_prefix", True))
            spec.prefix = "prepend" if arch == "phi3" else "first" if space_prefix else "never"
            spec.strip_leading_space = True
        if not merges:
            if gemma:
                # Gemma's scores do not follow its merge order; the token order does: a token's
                # score is minus its index (derive_merges_from_scores keeps the last of equal spellings).
                spec.scores = [-float(i) for i in range(len(spec.vocab))]
            else:
                scores = list(md.get("tokenizer.ggml.scores") or [])
                if len(scores) != len(tokens):
                    raise ModelError(f"{path}: tokenizer.ggml.scores is missing or has the wrong length")
                spec.scores = [float(s) for s in scores]
        add_bos = bool(md.get("tokenizer.ggml.add_bos_token", True))
    elif model == "gemma4":
        # Gemma 4: GemmaTokenizer's pipeline over the file's tokens and merges (transformers' GGUF
        # conversion), no BOS whatever the file says (the model's tokenizer adds none; its chat template
        # writes <bos>).
        spec.model = "sentencepiece_bpe"
        spec.vocab = [text(t) for t in tokens]
        spec.byte_fallback = spec.fuse_unk = True
        spec.prefix, spec.strip_leading_space = "never", False
        if not merges:  # (as Gemma's: the token order is the merge order)
            spec.scores = [-float(i) for i in range(len(spec.vocab))]
        add_bos = False
    else:
        raise ModelError(
            f"{path}: unsupported GGUF tokenizer model '{model}' (supported: gpt2, llama, gemma4)"
        )
    for m in map(text, merges):
        if " " not in m:
            raise ModelError(f"{path}: malformed merge '{m}'")
        a, b = m.split(" ", 1)
        spec.merges.append((a, b))

    def id_key(key: str) -> int:
        i = int(md.get(key, -1))
        if i < -1 or i >= len(tokens):
            raise ModelError(f"{path}: {key} is out of range")
        return i

    spec.bos_id = id_key("tokenizer.ggml.bos_token_id")
    spec.eos_id = id_key("tokenizer.ggml.eos_token_id")
    spec.pad_id = id_key("tokenizer.ggml.padding_token_id")
    if not byte_level:
        spec.unk_id = id_key("tokenizer.ggml.unknown_token_id")

    def add_eos(i: int) -> None:
        if i >= 0 and i not in spec.eos_ids:
            spec.eos_ids.append(i)

    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        add_eos(id_key(key))
    for i in md.get("tokenizer.ggml.eos_token_ids") or []:  # newer files: the list
        if not 0 <= int(i) < len(tokens):
            raise ModelError(f"{path}: tokenizer.ggml.eos_token_ids holds an out-of-range id")
        add_eos(int(i))
    for i, tok in enumerate(tokens):  # the texts llama.cpp ends generation on
        if isinstance(tok, str) and tok in _END_OF_GENERATION_TEXTS:
            add_eos(i)
    # gpt-oss's harmony vocabulary: <|end|> closes each message of a reply (its reasoning, then the
    # answer), <|return|> and <|call|> the reply; so <|end|> does not end generation (llama.cpp's rule).
    if "<|return|>" in tokens and "<|call|>" in tokens and "<|end|>" in tokens:
        end = tokens.index("<|end|>")
        spec.eos_ids = [i for i in spec.eos_ids if i != end]
    if add_bos and spec.bos_id >= 0:
        spec.prefix_ids = [spec.bos_id]
    if md.get("tokenizer.ggml.add_eos_token", False) and spec.eos_id >= 0:
        spec.suffix_ids = [spec.eos_id]
    vocab_set = set(spec.vocab)  # a user-defined token is added when its spelling is in the vocabulary
    for i, (tok, ty) in enumerate(zip(tokens, types, strict=False)):
        if ty == 4 and text(tok) not in vocab_set:
            continue
        if ty in (2, 3, 4) and (not byte_level or in_alphabet(tok)):  # unknown, control, user-defined
            flags = {"lstrip": False, "rstrip": False, "normalized": False, "single_word": False}
            spec.added_tokens.append({"id": i, "content": text(tok), "special": ty != 4, **flags})
    # Phi-3's added tokens take the white space after them (rstrip in its tokenizer.json); a GGUF file
    # does not say so, and llama.cpp keys it on the model's name, as this does (ASCII case ignored).
    name = text(md.get("general.name", "")).encode("utf-8", "surrogateescape").lower()
    if b"phi-3" in name or b"phi3" in name:
        for t in spec.added_tokens:
            t["rstrip"] = t["content"] not in ("<unk>", "<s>", "<|endoftext|>")
    spec.chat_template, spec.chat_templates = gguf_chat_templates(md)
    return spec


def gguf_chat_templates(md: dict[str, Any]) -> tuple[str | None, dict[str, str]]:
    """A GGUF file's default chat template (tokenizer.chat_template) and its named ones
    (tokenizer.chat_template.NAME, e.g. tool_use, as llama.cpp's converter writes a list of them)."""
    default = md.get("tokenizer.chat_template")
    default = default if isinstance(default, str) else None
    prefix = "tokenizer.chat_template."
    named = {k[len(prefix) :]: v for k, v in md.items() if k.startswith(prefix) and isinstance(v, str)}
    if named and default is not None:
        named["default"] = default
    return default, named


def spec_from_gguf(path: str) -> TokenizerSpec:
    from .gguf_split import read_gguf_model

    return spec_from_gguf_metadata(read_gguf_model(path).metadata, path)  # a split model's first shard


def spec_from_file(path: str) -> TokenizerSpec:
    """tokenizer.json, a Hugging Face folder, or a GGUF file."""
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    if os.path.isfile(path):
        with open(path, "rb") as f:
            if f.read(4) == b"GGUF":
                return spec_from_gguf(path)
    return spec_from_hf_path(path)


def _merge_pair(m: Any) -> tuple[str, str]:
    """A merge as tokenizer.json writes it: "a b" (older files) or ["a", "b"]."""
    parts = m.split(" ", 1) if isinstance(m, str) else list(m)
    if len(parts) != 2 or not all(isinstance(x, str) for x in parts):
        raise ValueError(f"malformed BPE merge {m!r} in tokenizer.json")
    return parts[0], parts[1]
