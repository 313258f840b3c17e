"""Tokenizer golden tests: ossa (C++ and the Python twin) against Hugging Face tokenizers.

Vocabularies: SmolLM2 (the default GGUF, via transformers' GGUF conversion), GPT-2 (rebuilt from
openai-whisper's gpt2.tiktoken by scripts/make_gpt2_tokenizer.py), Qwen2- and Llama 3-style
pre-tokenizers on that vocabulary (and Qwen2.5's: Qwen2's with the NFC normalizer; Phi-4-mini's o200k
split regex; Mistral NeMo's Tekken regex), a SentencePiece BPE (mistral-common's tokenizer.model.v1,
converted by transformers), and Gemma 3's tokenizer.json pipeline on that SentencePiece vocabulary
(Replace normalizer, Split on " ", no prefix space, BOS added). The ``*_gguf`` vocabularies are GGUF
files written from those tokenizer.json files as llama.cpp's converter writes them (tokens, merges,
token types and the ``tokenizer.ggml.pre`` name llama.cpp gives the regex): ossa loads the GGUF, the
oracle is Hugging Face on the tokenizer.json it came from. Ids must be identical, not similar.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import pathlib
import shutil
import unicodedata
from dataclasses import dataclass
from typing import Any

import hf_gguf
import pytest

from ossa.tokenizer import Tokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = sorted((ROOT / "tests" / "data" / "tokenizer_corpus").glob("*.txt"))
VOCABS = [
    "smollm2",
    "gpt2",
    "qwen2",
    "llama3",
    "mistral",
    "qwen25",
    "gemma3",
    "phi4",
    "tekken",
    "qwen35",
    "bloom",
]
# GGUF vocabularies: name -> (the tokenizer.json vocabulary it is written from, tokenizer.ggml.pre).
GGUF_VOCABS = {
    "llama3_gguf": ("llama3", "llama-bpe"),
    "qwen2_gguf": ("qwen2", "qwen2"),
    "phi4_gguf": ("phi4", "gpt-4o"),
    "llama4_gguf": ("phi4", "llama4"),
    "tekken_gguf": ("tekken", "tekken"),
    "qwen35_gguf": ("qwen35", "qwen35"),  # (NFC, as Qwen3.5's tokenizer.json)
    "bloom_gguf": ("bloom", "bloom"),  # (BLOOM's pattern: the text between its runs kept whole)
}
# SentencePiece GGUFs written from mistral-common's tokenizer.model as llama.cpp's converter writes
# them, under the architectures whose pipeline transformers picks by name (the oracle is its GGUF
# conversion): name -> (general.architecture, general.name).
SPM_GGUF_VOCABS = {
    "mistral_gguf": ("llama", "Mistral 7B v0.1"),
    "phi3_gguf": ("phi3", "Phi-3-mini-4k-instruct"),
    "gemma3_gguf": ("gemma3", "Gemma 3 1b It"),
    "gemma3n_gguf": ("gemma3n", "Gemma 3n E2B It"),  # (Gemma 3's pipeline: llama.cpp converts it so)
}
# Gemma 4's files (tokenizer.ggml.model "gemma4"): the gemma3-style tokenizer.json as llama.cpp's
# converter writes it (its tokens and merges), with Gemma 4's turn tokens.
GEMMA4_GGUF = "gemma4_gguf"
# A folder holding Mistral 7B v0.1's SentencePiece tokenizer.model alone (no tokenizer.json): read as
# transformers converts it (LlamaTokenizer's fast tokenizer is the oracle).
SPM_FOLDER = "mistral_spm"
# A folder as OPT's (and GPT-Neo's, older GPT-2 uploads') hold their tokenizer: GPT-2's vocab.json +
# merges.txt without a tokenizer.json, OPT's special tokens (</s> as BOS / EOS / UNK, <pad>) appended to
# the vocabulary, add_bos_token, special_tokens_map.json; the oracle is transformers' GPT2Tokenizer.
OPT_FOLDER = "opt_files"


def _assets() -> Any:
    spec = importlib.util.spec_from_file_location(
        "make_gpt2_tokenizer", ROOT / "scripts" / "make_gpt2_tokenizer.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Vocab:
    name: str
    path: str  # what ossa loads
    hf: Any  # tokenizers.Tokenizer
    cpp: Tokenizer
    py: Tokenizer
    lossless: bool  # decode(encode(s)) == s for every valid s


@functools.cache
def load_vocab(name: str, gguf_path: str) -> Vocab:
    """Builds (once per session) the Hugging Face oracle and both ossa backends for a vocabulary."""
    import tokenizers

    assets = _assets()
    if name == "smollm2":
        hf = hf_gguf.tokenizer(gguf_path).backend_tokenizer
        # SmolLM2's vocabulary lacks a few control bytes (e.g. 0x1D): HF drops them too.
        path, lossless = gguf_path, False
    elif name == "mistral":
        from transformers import LlamaTokenizer

        folder = os.path.dirname(assets.mistral_tokenizer_model_path())
        hf_tok = LlamaTokenizer.from_pretrained(folder)
        hf = hf_tok.backend_tokenizer
        path = os.path.join(assets.cache_dir(), "hf", "mistral_v1")
        if not os.path.exists(os.path.join(path, "tokenizer.json")):
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
                json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, f)
            hf.save(os.path.join(path, "tokenizer.json.tmp"))
            os.replace(os.path.join(path, "tokenizer.json.tmp"), os.path.join(path, "tokenizer.json"))
        lossless = False  # the leading-space strip loses a leading space
    elif name == SPM_FOLDER:
        from transformers import LlamaTokenizer

        path = os.path.join(assets.cache_dir(), "hf", "mistral_spm")
        if not os.path.exists(os.path.join(path, "tokenizer.model")):
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, "tokenizer_config.json"), "w") as f:  # (as Mistral's own says)
                json.dump(
                    {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}, f
                )
            shutil.copy(assets.mistral_tokenizer_model_path(), os.path.join(path, "tokenizer.model.tmp"))
            os.replace(os.path.join(path, "tokenizer.model.tmp"), os.path.join(path, "tokenizer.model"))
        hf = _TransformersTokenizer(LlamaTokenizer.from_pretrained(path))  # (BOS added, as transformers)
        lossless = False  # the leading-space strip loses a leading space
    elif name == OPT_FOLDER:
        from transformers import AutoTokenizer

        path = os.path.join(assets.cache_dir(), "hf", OPT_FOLDER)
        if not os.path.exists(os.path.join(path, "merges.txt")):
            write_vocab_merges_folder(
                os.path.join(load_vocab("gpt2", gguf_path).path, "tokenizer.json"), path
            )
        hf = _TransformersTokenizer(AutoTokenizer.from_pretrained(path))
        lossless = False  # (BOS added; "</s>" in the text is the special token)
    elif name in GGUF_VOCABS:
        source, pre = GGUF_VOCABS[name]
        src = load_vocab(source, gguf_path)
        hf = src.hf
        path = os.path.join(assets.cache_dir(), "gguf", f"{name}.gguf")
        if not os.path.exists(path):
            _write_byte_level_gguf(os.path.join(src.path, "tokenizer.json"), pre, path)
        lossless = src.lossless
    elif name in SPM_GGUF_VOCABS:
        path = os.path.join(assets.cache_dir(), "gguf", f"{name}.gguf")
        if not os.path.exists(path):
            _write_sentencepiece_gguf(assets.mistral_tokenizer_model_path(), *SPM_GGUF_VOCABS[name], path)
        hf = _phi3_rstrip(hf_gguf.tokenizer(path).backend_tokenizer) if name == "phi3_gguf" else None
        if name == "gemma3n_gguf":  # (transformers reads no gemma3n GGUF: the same tokens as gemma3's file)
            hf = load_vocab("gemma3_gguf", gguf_path).hf
        hf = hf or hf_gguf.tokenizer(path).backend_tokenizer
        lossless = False
    elif name == GEMMA4_GGUF:
        path = os.path.join(assets.cache_dir(), "gguf", f"{name}.gguf")
        if not os.path.exists(path):
            _write_gemma4_gguf(os.path.join(load_vocab("gemma3", gguf_path).path, "tokenizer.json"), path)
        hf = hf_gguf.tokenizer(path).backend_tokenizer
        lossless = False  # U+2581 in the text decodes as a space
    elif name == "gemma3":
        path = os.path.join(assets.cache_dir(), "hf", "gemma3_style")
        if not os.path.exists(os.path.join(path, "tokenizer.json")):
            _write_gemma3_style(load_vocab("mistral", gguf_path).path, path)
        hf = tokenizers.Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        lossless = False  # U+2581 in the text decodes as a space
    else:
        path = assets.write_tokenizers(os.path.join(assets.cache_dir(), "hf"))[name]
        hf = tokenizers.Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        lossless = name not in ("qwen25", "qwen35")  # NFC: decode(encode(s)) is NFC(s)
    return Vocab(
        name, path, hf, Tokenizer.from_file(path), Tokenizer.from_file(path, backend="python"), lossless
    )


def write_vocab_merges_folder(tokenizer_json: str, out: str) -> None:
    """OPT's tokenizer files (vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json)
    on the vocabulary and merges of ``tokenizer_json``, the specials appended after its tokens."""
    with open(tokenizer_json, encoding="utf-8") as f:
        model = json.load(f)["model"]
    vocab = dict(model["vocab"])
    for token in ("<s>", "<pad>", "</s>", "<unk>"):
        vocab[token] = len(vocab)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with open(os.path.join(tmp, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(tmp, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for m in model["merges"]:
            f.write((m if isinstance(m, str) else " ".join(m)) + "\n")
    special = {"content": "</s>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True}
    with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
        json.dump({"errors": "replace", "unk_token": special, "bos_token": special, "eos_token": special,
                   "pad_token": {**special, "content": "<pad>"}, "add_prefix_space": False,
                   "add_bos_token": True}, f)  # fmt: skip
    with open(os.path.join(tmp, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "</s>", "eos_token": "</s>", "unk_token": "</s>", "pad_token": "<pad>"}, f)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump({"model_type": "opt"}, f)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


class _TransformersTokenizer:
    """A transformers tokenizer behind the tokenizers.Tokenizer calls these tests make (encode(...).ids,
    decode, get_vocab_size): where the oracle is transformers' own tokenizer object (its special tokens
    added as it adds them), not its backend."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok

    def encode(self, text: str, add_special_tokens: bool = True) -> Any:
        import types

        return types.SimpleNamespace(ids=self.tok.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return str(
            self.tok.decode(ids, skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=False)
        )

    def get_vocab_size(self) -> int:
        return int(self.tok.backend_tokenizer.get_vocab_size())


def _write_byte_level_gguf(tokenizer_json: str, pre: str, out: str) -> None:
    """A vocabulary-only GGUF of a byte-level BPE tokenizer.json, with the keys llama.cpp's converter
    writes: tokens by id, merges, token types (special added tokens control, others normal) and the
    pre-tokenizer's name."""
    import gguf

    with open(tokenizer_json, encoding="utf-8") as f:
        tj = json.load(f)
    vocab: dict[str, int] = dict(tj["model"]["vocab"])
    types = {}
    for t in tj.get("added_tokens", []):
        vocab[t["content"]] = t["id"]
        types[t["id"]] = 3 if t.get("special") else 4
    tokens = [""] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    w = gguf.GGUFWriter(out + ".tmp", "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([types.get(i, 1) for i in range(len(tokens))])
    w.add_token_merges(merges)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(out + ".tmp", out)


def _write_gemma4_gguf(tokenizer_json: str, out: str) -> None:
    """A vocabulary-only GGUF of a Gemma-style tokenizer.json as llama.cpp's Gemma 4 converter writes
    it: tokenizer model "gemma4", the tokens as the tokenizer.json spells them, its merges, token types
    (special added tokens control), Gemma 4's turn tokens appended (control) with a channel token
    (user-defined, as the converter marks its visible tokens), add_bos_token true (which transformers
    and ossa ignore: the model's tokenizer adds none) and no space prefix."""
    import gguf

    with open(tokenizer_json, encoding="utf-8") as f:
        tj = json.load(f)
    vocab: dict[str, int] = dict(tj["model"]["vocab"])
    types = {i: 3 for i in (0, 1, 2)}  # (<unk>, <s>, </s>)
    for t in tj.get("added_tokens", []):
        vocab[t["content"]] = t["id"]
        types[t["id"]] = 3 if t.get("special") else 4
    tokens = [""] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    for text, ty in (("<|turn>", 3), ("<turn|>", 3), ("<|channel>", 4)):
        types[len(tokens)] = ty
        tokens.append(text)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    w = gguf.GGUFWriter(out + ".tmp", "gemma4")
    w.add_tokenizer_model("gemma4")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([types.get(i, 1) for i in range(len(tokens))])
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_space_prefix(False)
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(out + ".tmp", out)


def _write_sentencepiece_gguf(model_path: str, arch: str, model_name: str, out: str) -> None:
    """A vocabulary-only GGUF of a SentencePiece model with the keys llama.cpp's converter writes
    (pieces, scores, piece types, special ids, add_space_prefix from the model's normalizer), plus
    what each family's files hold: Phi-3's chat tokens appended as control tokens; Gemma's space-run
    tokens stored as real spaces, scores that do not follow the merge order, no prefix space, a chat
    control token and a user-defined one."""
    import gguf
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    with open(model_path, "rb") as f:
        proto.ParseFromString(f.read())
    tokens = [p.piece for p in proto.pieces]
    scores = [p.score for p in proto.pieces]
    types = [int(p.type) for p in proto.pieces]
    add_space_prefix = proto.normalizer_spec.add_dummy_prefix
    extra: list[tuple[str, int]] = []
    if arch == "phi3":
        extra = [(t, 3) for t in ("<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>", "<|user|>")]
    elif arch == "gemma3":
        add_space_prefix = False
        tokens = [" " * len(t) if len(t) >= 2 and set(t) == {"\u2581"} else t for t in tokens]
        types[tokens.index("   ")] = 4  # a user-defined space run: not added (its spelling is respelled)
        scores = [float((i * 7919) % 1009) for i in range(len(scores))]  # Gemma's: not in merge order
        extra = [("<start_of_turn>", 3), ("<end_of_turn>", 3), ("<table>", 4)]
    for t, ty in extra:
        tokens.append(t)
        scores.append(0.0)
        types.append(ty)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    w = gguf.GGUFWriter(out + ".tmp", arch)
    w.add_name(model_name)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(proto.trainer_spec.bos_id)
    w.add_eos_token_id(proto.trainer_spec.eos_id)
    w.add_unk_token_id(proto.trainer_spec.unk_id)
    w.add_add_space_prefix(add_space_prefix)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(out + ".tmp", out)


def _phi3_rstrip(backend: Any) -> Any:
    """transformers' GGUF conversion of a Phi-3 file with the added tokens' rstrip of Phi-3's own
    tokenizer.json (every added token but <unk>, <s> and <|endoftext|>): the file does not carry it,
    and llama.cpp sets it when general.name holds "phi-3" or "phi3" (as in Microsoft's own GGUF files,
    named "Phi3")."""
    import tokenizers

    tj = json.loads(backend.to_str())
    for t in tj["added_tokens"]:
        t["rstrip"] = t["content"] not in ("<unk>", "<s>", "<|endoftext|>")
    return tokenizers.Tokenizer.from_str(json.dumps(tj))


def _gguf_with(src: str | os.PathLike[str], dst: str | os.PathLike[str], add: Any) -> str:
    """A copy of a vocabulary-only GGUF file's metadata with more keys, written by add(writer)."""
    import gguf
    import tiny_models

    w = gguf.GGUFWriter(str(dst), "llama")
    tiny_models._copy_metadata(gguf.GGUFReader(str(src)), w)
    add(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(dst)


def _write_gemma3_style(mistral_folder: str, out: str) -> None:
    """Gemma 3's tokenizer.json components (as transformers' GemmaTokenizer builds them) around the
    Mistral SentencePiece vocabulary: spaces replaced by U+2581 in the normalizer, a Split on " "
    (left with nothing to split), no prefix space, byte fallback, BOS added by the post-processor."""
    with open(os.path.join(mistral_folder, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    tj["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    tj["pre_tokenizer"] = {
        "type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False,
    }  # fmt: skip
    tj["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}  # fmt: skip
    tj["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
    }  # fmt: skip
    os.makedirs(out, exist_ok=True)
    for name, content in (
        ("tokenizer_config.json", {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
        ("tokenizer.json", tj),
    ):
        with open(os.path.join(out, name + ".tmp"), "w", encoding="utf-8") as f:
            json.dump(content, f, ensure_ascii=False)
        os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))


@pytest.fixture(
    scope="module",
    params=VOCABS + list(GGUF_VOCABS) + list(SPM_GGUF_VOCABS) + [GEMMA4_GGUF, SPM_FOLDER, OPT_FOLDER],
)
def vocab(request: pytest.FixtureRequest, default_model_path: str) -> Vocab:
    return load_vocab(request.param, default_model_path)


def check_text(v: Vocab, text: str, twin: bool = True) -> list[int]:
    """Every property the tokenizer promises, on one text; returns the ids."""
    for add in (False, True):
        expected = v.hf.encode(text, add_special_tokens=add).ids
        ids = v.cpp.encode(text, add_special_tokens=add)
        assert ids == expected, (v.name, text[:80], add)
        if twin:
            assert v.py.encode(text, add_special_tokens=add) == expected, (v.name, "twin", text[:80])
    for skip in (False, True):
        decoded = v.cpp.decode(ids, skip_special_tokens=skip)
        assert decoded == v.hf.decode(ids, skip_special_tokens=skip), (v.name, text[:80], skip)
        if twin:
            assert v.py.decode(ids, skip_special_tokens=skip) == decoded
        d = v.cpp.detokenizer(skip_special_tokens=skip)
        deltas = [d.push(i) for i in ids] + [d.flush()]
        assert "".join(deltas) == decoded
    if v.lossless or v.name == "smollm2" and text.isprintable():
        assert v.cpp.decode(v.cpp.encode(text, add_special_tokens=False)) == text
    nfc = unicodedata.normalize("NFC", text)
    round_trip = {"qwen25": nfc, "qwen35": nfc, "qwen35_gguf": nfc, "gemma3": text.replace("\u2581", " ")}
    if v.name in round_trip:
        assert v.cpp.decode(v.cpp.encode(text, add_special_tokens=False)) == round_trip[v.name]
    return ids


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_corpus_matches_hf(vocab: Vocab, path: pathlib.Path) -> None:
    text = path.read_text(encoding="utf-8")
    check_text(vocab, text)
    for line in text.splitlines(keepends=True):
        check_text(vocab, line)


EDGE_CASES = [
    "", " ", "  ", "\n", " \n ", "a", " a", "  a", "\t\ta", "a  ", "'s", "'S", "'\u017f", "x'LL'Ve'rE",
    "\u00a0\u00a0x", "\u3000", "1234567", "١٢٣٤", "a1b2", "\r\n\r\n", " \r\n x", "🤖", "e\u0301", "\x00",
    "a\x00b", "<|endoftext|>", "<|endoftext|><|endoftext|>", " <|im_start|> ", "<s>", "</s>x", "<unk>",
    "<0x41>", "\u2581", "\u2581\u2581a", "▁ ▁", "\ufffd", "\U0010ffff", "\U000e0001",
]  # fmt: skip


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_match_hf(vocab: Vocab, text: str) -> None:
    check_text(vocab, text)


def test_encode_batch_and_bytes(vocab: Vocab) -> None:
    texts = [p.read_text(encoding="utf-8") for p in CORPUS] * 3
    expected = [vocab.cpp.encode(t) for t in texts]
    assert vocab.cpp.encode_batch(texts) == expected
    assert vocab.py.encode_batch(texts[:3]) == expected[:3]
    assert vocab.cpp.encode(texts[0].encode("utf-8")) == expected[0]


@pytest.mark.parametrize("backend", ["cpp", "python"])
def test_invalid_input_is_a_value_error(default_model_path: str, backend: str) -> None:
    tok = load_vocab("smollm2", default_model_path)
    t = tok.cpp if backend == "cpp" else tok.py
    with pytest.raises(ValueError, match="UTF-8"):
        t.encode(b"abc\xff")
    with pytest.raises(ValueError, match="UTF-8"):
        t.encode(b"\xe6\x97")  # truncated
    with pytest.raises(ValueError, match="surrogate"):
        t.encode("a\ud800b")
    assert t.encode("a\x00b") == tok.hf.encode("a\x00b").ids
    # Unknown ids decode to nothing, as in tokenizers; partial UTF-8 becomes U+FFFD.
    assert t.decode([10**6, 19556]) == "Hello"
    assert t.decode(t.encode("日")[:1]) == "\ufffd"


def test_special_ids_and_eos_rule(default_model_path: str) -> None:
    v = load_vocab("smollm2", default_model_path)
    for t in (v.cpp, v.py):
        assert t.vocab_size == v.hf.get_vocab_size()
        # eos, then the tokens whose text llama.cpp ends generation on: <|endoftext|> is id 0 here
        assert (
            t.eos_token_id == 2 and t.eos_token_ids == [2, 0] and t.bos_token_id == 1 and t.pad_token_id == 2
        )
        assert t.eos_token == "<|im_end|>"
    m = load_vocab("mistral", default_model_path)
    assert m.cpp.bos_token_id == 1 and m.cpp.eos_token_ids == [2]  # a tokenizer.json folder: its eos only
    # Phi-3 files say <|endoftext|> is eos and Gemma files often <eos>: their turns end on <|end|> and
    # <end_of_turn>, which stop generation as they do in llama.cpp.
    for name, texts in (
        ("phi3_gguf", ["</s>", "<|endoftext|>", "<|end|>"]),
        ("gemma3_gguf", ["</s>", "<end_of_turn>"]),
        ("gemma4_gguf", ["</s>", "<turn|>"]),
    ):
        v = load_vocab(name, default_model_path)
        for t in (v.cpp, v.py):
            assert [t.id_to_token(i) for i in t.eos_token_ids] == texts, (name, t.backend)


def test_gguf_eos_token_ids_list(tmp_path: pathlib.Path, default_model_path: str) -> None:
    """tokenizer.ggml.eos_token_ids (newer converters write generation_config's eos list) ends
    generation too; an id outside the vocabulary is a clear error."""
    src = _assets().mistral_tokenizer_model_path()
    base = tmp_path / "base.gguf"
    _write_sentencepiece_gguf(src, "llama", "m", str(base))
    for ids, ok in (([2, 28705, 13], True), ([2, 10**6], False)):
        path = _gguf_with(
            base, tmp_path / f"{ok}.gguf", lambda w, ids=ids: w.add_array("tokenizer.ggml.eos_token_ids", ids)
        )
        for backend in ("cpp", "python"):
            if ok:
                assert Tokenizer.from_file(str(path), backend=backend).eos_token_ids == ids
            else:
                with pytest.raises(ValueError, match="eos_token_ids"):
                    Tokenizer.from_file(str(path), backend=backend)


def test_harmony_end_does_not_end_generation(tmp_path: pathlib.Path, default_model_path: str) -> None:
    """gpt-oss's harmony vocabulary (<|return|> and <|call|> beside <|end|>): <|end|> closes the
    reasoning message before the answer, so it does not stop generation there (llama.cpp's rule);
    <|return|> and <|call|> do. Without <|call|> (Phi-3's vocabulary) <|end|> still stops."""
    import gguf
    import tiny_models

    reader = gguf.GGUFReader(default_model_path)
    tokens = list(reader.fields["tokenizer.ggml.tokens"].contents())
    types = list(reader.fields["tokenizer.ggml.token_type"].contents())
    for extra, stops in ((["<|return|>", "<|call|>", "<|end|>"], ["<|return|>", "<|call|>"]),
                         (["<|end|>", "<|return|>"], ["<|end|>", "<|return|>"])):  # fmt: skip
        path = tmp_path / f"{len(extra)}.gguf"
        w = gguf.GGUFWriter(str(path), "llama")
        tiny_models._copy_metadata(reader, w, skip=("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"))
        w.add_token_list(tokens + extra)
        w.add_token_types(types + [3] * len(extra))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        for backend in ("cpp", "python"):
            t = Tokenizer.from_file(str(path), backend=backend)
            got = [t.id_to_token(i) for i in t.eos_token_ids]
            assert got[2:] == stops, (backend, got)  # after the file's eos <|im_end|> and <|endoftext|>


def test_streaming_never_splits_characters(default_model_path: str) -> None:
    v = load_vocab("gpt2", default_model_path)
    text = "日本語 👨‍👩‍👧 é"
    ids = v.cpp.encode(text)
    for backend in (v.cpp, v.py):
        d = backend.detokenizer()
        deltas = [d.push(i) for i in ids]
        assert "\ufffd" not in "".join(deltas)
        assert "".join(deltas) + d.flush() == text


def test_chat_template_matches_transformers(default_model_path: str) -> None:
    hf = hf_gguf.tokenizer(default_model_path)
    tok = load_vocab("smollm2", default_model_path).cpp
    messages = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "What's 2+2?"}]  # fmt: skip
    for gen in (True, False):
        expected = hf.apply_chat_template(messages, add_generation_prompt=gen, tokenize=False)
        assert tok.apply_chat_template(messages, add_generation_prompt=gen) == expected
    ids = tok.apply_chat_template(messages, tokenize=True)
    assert ids == hf.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    with pytest.raises(Exception, match="boom"):
        tok.apply_chat_template(messages, chat_template="{{ raise_exception('boom') }}")
    # The sandbox refuses attribute access to internals.
    with pytest.raises(Exception):  # noqa: B017
        tok.apply_chat_template(
            messages, chat_template="{{ messages.__class__.__mro__ }}{{ ''.__class__.mro() }}"
        )


def test_unsupported_components_are_named(tmp_path: pathlib.Path, default_model_path: str) -> None:
    v = load_vocab("gpt2", default_model_path)
    tj = json.loads(pathlib.Path(v.path, "tokenizer.json").read_text(encoding="utf-8"))
    cases = {
        "normalizer": dict(tj, normalizer={"type": "NFKC"}),
        "model": dict(tj, model={"type": "WordPiece"}),
        "Split pre-tokenizer": dict(
            tj,
            pre_tokenizer={
                "type": "Split",
                "pattern": {"Regex": r"\w+"},
                "behavior": "Isolated",
                "invert": False,
            },
        ),
        "post-processor": dict(tj, post_processor={"type": "RobertaProcessing"}),
        # Splitting on " " is a no-op only after Gemma's Replace normalizer; here it would split.
        "Split pre-tokenizer on ' '": dict(
            tj,
            pre_tokenizer={
                "type": "Sequence",
                "pretokenizers": [
                    {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious"},
                    tj["pre_tokenizer"],
                ],
            },
        ),
    }
    for what, content in cases.items():
        p = tmp_path / what.replace(" ", "_")
        p.mkdir()
        (p / "tokenizer.json").write_text(json.dumps(content), encoding="utf-8")
        for backend in ("cpp", "python"):
            with pytest.raises(ValueError, match=what):
                Tokenizer.from_file(str(p), backend=backend)


def test_vocab_merges_folders_match_transformers(tmp_path: pathlib.Path, default_model_path: str) -> None:
    """vocab.json + merges.txt folders with other configs than OPT's: GPT-2's defaults (<|endoftext|>),
    special_tokens_map.json over tokenizer_config.json, additional special tokens the vocabulary lacks
    (appended), added_tokens_decoder beyond the vocabulary (special or not), add_prefix_space and
    add_eos_token: ids and decodes equal to transformers' GPT2Tokenizer on each."""
    from transformers import AutoTokenizer

    src = load_vocab(OPT_FOLDER, default_model_path).path
    decoder = {
        str(i): {"content": c, "special": s, "lstrip": False, "rstrip": False, "normalized": False,
                 "single_word": False}
        for i, c, s in [(50256, "<|endoftext|>", True), (50261, "<|im_start|>", True),
                        (50262, "<|im_end|>", True), (50263, "<think>", False)]
    }  # fmt: skip
    configs = {
        "defaults": ({}, None),
        "special_map": (
            {"add_bos_token": True, "bos_token": "<s>"},
            {
                "bos_token": "</s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "pad_token": "<pad>",
                "additional_special_tokens": ["<|x|>", "<|y|>"],
            },
        ),  # fmt: skip
        "added": (
            {
                "add_prefix_space": True,
                "add_eos_token": True,
                "eos_token": "<|im_end|>",
                "added_tokens_decoder": decoder,
            },
            None,
        ),  # fmt: skip
    }
    texts = ["Hello world</s> <pad>x<|endoftext|>", "a</s><s><unk><|x|><|y|>", " Hi<|im_start|>x<think> y",
             "  spaces  and\n\nnew lines 123 ", ""]  # fmt: skip
    for name, (config, special_map) in configs.items():
        folder = tmp_path / name
        shutil.copytree(src, folder)
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
        (folder / "special_tokens_map.json").unlink()
        if special_map is not None:
            (folder / "special_tokens_map.json").write_text(json.dumps(special_map))
        hf = AutoTokenizer.from_pretrained(folder)
        for backend in ("cpp", "python"):
            tok = Tokenizer.from_file(str(folder), backend=backend)
            assert (tok.vocab_size, tok.bos_token_id, tok.eos_token_id) == (
                len(hf), hf.bos_token_id, hf.eos_token_id), (name, backend)  # fmt: skip
            for text in texts:
                for add in (True, False):
                    ids = tok.encode(text, add_special_tokens=add)
                    assert ids == hf.encode(text, add_special_tokens=add), (name, backend, text, add)
                    for skip in (True, False):
                        assert tok.decode(ids, skip_special_tokens=skip) == hf.decode(
                            ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False
                        ), (name, backend, text, skip)
    # Other classes' vocab.json + merges.txt (Qwen2's split, RoBERTa's post-processing) are refused by
    # name rather than read as GPT-2's; broken files are a ModelError.
    bad = tmp_path / "bad"
    shutil.copytree(src, bad)
    (bad / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "Qwen2Tokenizer"}))
    for backend in ("cpp", "python"):
        with pytest.raises(ValueError, match="Qwen2Tokenizer"):
            Tokenizer.from_file(str(bad), backend=backend)
    (bad / "tokenizer_config.json").write_text("{}")
    for merges, match in [("#version: 0.2\na b c\n", "line 2"), ("\xff", "unreadable")]:
        (bad / "merges.txt").write_bytes(merges.encode("latin-1"))
        with pytest.raises(ValueError, match=match):
            Tokenizer.from_file(str(bad))
    (bad / "merges.txt").write_text("")
    (bad / "vocab.json").write_text('{"a": -1}')
    with pytest.raises(ValueError, match="not a map"):
        Tokenizer.from_file(str(bad))


def test_corrupt_gguf_is_a_model_error(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "bad.gguf"
    p.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    for backend in ("cpp", "python"):
        with pytest.raises(ValueError):
            Tokenizer.from_file(str(p), backend=backend)


def _patched_gguf(src: str, dst: pathlib.Path, old: bytes, new: bytes) -> str:
    """A copy of src with one GGUF string (length-prefixed) replaced by another of the same length."""
    assert len(old) == len(new)
    data = pathlib.Path(src).read_bytes()
    key = len(old).to_bytes(8, "little") + old
    i = data.index(key)
    dst.write_bytes(data[: i + 8] + new + data[i + 8 + len(old) :])
    return str(dst)


def test_gguf_token_that_is_not_utf8(default_model_path: str, tmp_path: pathlib.Path) -> None:
    """A token stored as bytes that are not UTF-8 (the GGUF reader returns bytes for it): both
    backends load the file as LLM does (the C++ loader re-spells the raw bytes), and agree."""
    from ossa.reference.pretokenizer import byte_level_encode
    from ossa.reference.tokenizer_spec import spec_from_gguf

    path = _patched_gguf(default_model_path, tmp_path / "t.gguf", b"<repo_name>", b"<repo_nam\xff>")
    spec = spec_from_gguf(path)
    assert byte_level_encode(b"<repo_nam\xff>") in spec.vocab
    cpp, py = Tokenizer.from_file(path), Tokenizer.from_file(path, backend="python")
    text = "Hello <repo_name> world, caf\u00e9"
    assert cpp.encode(text) == py.encode(text) and cpp.encode(text)


def test_gguf_merge_broken_by_a_non_utf8_token_names_file_and_field(
    default_model_path: str, tmp_path: pathlib.Path
) -> None:
    import ossa

    path = _patched_gguf(default_model_path, tmp_path / "m.gguf", b"hello", b"hel\xff\xfe")
    with pytest.raises(ossa.ModelError, match=r"m\.gguf: tokenizer\.ggml\.tokens/merges: .*'hello'"):
        Tokenizer.from_file(path)
    with pytest.raises(ossa.ModelError, match=r"m\.gguf: tokenizer\.ggml"):
        ossa.LLM(path)


def test_phi3_gguf_rstrip_follows_the_model_name(default_model_path: str, tmp_path: pathlib.Path) -> None:
    """Phi-3's added tokens take the white space after them only when general.name says Phi-3 (as
    llama.cpp decides it); a phi3 file named otherwise keeps its white space, as transformers does."""
    v = load_vocab("phi3_gguf", default_model_path)
    texts = ["<|user|>\nHello<|end|>\n<|assistant|>\n", "</s>  x", "<|endoftext|> y", "<s> z", "<unk>\tw"]
    for name, rstrip in (("Phi3", True), ("PHI-3 medium", True), ("Phi 3 Mini 4k Instruct", False)):
        path = tmp_path / f"{name}.gguf"
        _write_sentencepiece_gguf(_assets().mistral_tokenizer_model_path(), "phi3", name, str(path))
        hf = hf_gguf.tokenizer(str(path)).backend_tokenizer
        hf = _phi3_rstrip(hf) if rstrip else hf
        for backend in ("cpp", "python"):
            tok = Tokenizer.from_file(str(path), backend=backend)
            for text in texts:
                assert tok.encode(text) == hf.encode(text).ids, (name, backend, text)
    assert v.cpp.encode(texts[0]) != hf.encode(texts[0]).ids  # the rule changes these ids


NAMED_TEMPLATES = [
    {"name": "default", "template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
     "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"},
    {"name": "tool_use", "template": "TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}"
     "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"},
    {"name": "rag", "template": "RAG:{% for m in messages %}{{ m.content }}{% endfor %}"},
]  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
MESSAGES = [{"role": "user", "content": "Hi there"}]


def _named_folder(src: str, out: pathlib.Path, as_files: bool) -> str:
    """A copy of a tokenizer folder whose tokenizer_config.json lists named chat templates (or, with
    as_files, which holds them as chat_template.jinja and additional_chat_templates/NAME.jinja)."""
    out.mkdir()
    shutil.copy(os.path.join(src, "tokenizer.json"), out / "tokenizer.json")
    config = json.loads(pathlib.Path(src, "tokenizer_config.json").read_text(encoding="utf-8"))
    if as_files:
        (out / "chat_template.jinja").write_text(NAMED_TEMPLATES[0]["template"], encoding="utf-8")
        (out / "additional_chat_templates").mkdir()
        for t in NAMED_TEMPLATES[1:]:
            (out / "additional_chat_templates" / f"{t['name']}.jinja").write_text(
                t["template"], encoding="utf-8"
            )
        config["chat_template"] = "IGNORED: the files take priority"
    else:
        config["chat_template"] = NAMED_TEMPLATES
    (out / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(out)


@pytest.mark.parametrize("as_files", [False, True])
def test_named_chat_templates_match_transformers(
    default_model_path: str, tmp_path: pathlib.Path, as_files: bool
) -> None:
    """A model with several chat templates: tools pick "tool_use", chat_template= may name one, the
    default otherwise, as transformers' get_chat_template does (the oracle, on the same folder)."""
    from transformers import AutoTokenizer

    folder = _named_folder(load_vocab("qwen2", default_model_path).path, tmp_path / "m", as_files)
    hf = AutoTokenizer.from_pretrained(folder)
    for backend in ("cpp", "python"):
        tok = Tokenizer.from_file(folder, backend=backend)
        for kw in ({}, {"tools": TOOLS}, {"chat_template": "rag"}, {"chat_template": "rag", "tools": TOOLS}):
            expected = hf.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True, **kw)
            got = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, **kw)
            assert got == expected, (backend, kw)
        assert tok.apply_chat_template(MESSAGES, tools=TOOLS).startswith("TOOLS:get_weather;")


def test_gguf_named_chat_templates(tmp_path: pathlib.Path, default_model_path: str) -> None:
    """A GGUF file's tokenizer.chat_template.NAME keys (gguf-py writes a list of named templates so):
    the engine's tokenizer (C++ loader, chat templates read key by key) and the twin pick alike."""
    from ossa.backend import get_backend

    src = load_vocab("phi4_gguf", default_model_path).path
    path = _gguf_with(src, tmp_path / "named.gguf", lambda w: w.add_chat_template(NAMED_TEMPLATES))
    engine_tok = get_backend("cpp").load_tokenizer(str(path))
    for tok in (engine_tok, Tokenizer.from_file(str(path), backend="python")):
        assert tok.chat_template == NAMED_TEMPLATES[0]["template"]
        assert sorted(tok.chat_templates) == ["default", "rag", "tool_use"]
        assert tok.apply_chat_template(MESSAGES).startswith("<|im_start|>user\nHi there<|im_end|>")
        assert tok.apply_chat_template(MESSAGES, tools=TOOLS) == "TOOLS:get_weather;[user]Hi there"
        assert tok.apply_chat_template(MESSAGES, chat_template="rag") == "RAG:Hi there"


def test_gguf_bos_default_follows_the_pre_tokenizer(tmp_path: pathlib.Path, default_model_path: str) -> None:
    """Without tokenizer.ggml.add_bos_token (Meta's Llama 3 conversions leave it out), a Llama 3-style
    or Tekken vocabulary adds BOS and uses ignore_merges, as llama.cpp and those models' own
    tokenizer.json do; other byte-level vocabularies add none; the key, when present, decides."""

    src = json.loads(
        pathlib.Path(load_vocab("llama3", default_model_path).path, "tokenizer.json").read_text()
    )
    bos = next(t["id"] for t in src["added_tokens"] if t["content"] == "<|begin_of_text|>")
    for pre, key, adds in (
        ("llama-bpe", None, True), ("tekken", None, True), ("pixtral", None, True), ("qwen2", None, False),
        ("gpt-4o", None, False), ("dbrx", None, False), ("llama-bpe", False, False), ("qwen2", True, True),
    ):  # fmt: skip
        path = tmp_path / f"{pre}-{key}.gguf"
        llama3_json = os.path.join(load_vocab("llama3", default_model_path).path, "tokenizer.json")
        _write_byte_level_gguf(llama3_json, pre, str(path))

        def keys(w: Any, key: bool | None = key) -> None:
            w.add_bos_token_id(bos)
            if key is not None:
                w.add_add_bos_token(key)

        _gguf_with(path, str(path) + ".2", keys)
        for backend in ("cpp", "python"):
            tok = Tokenizer.from_file(str(path) + ".2", backend=backend)
            ids = tok.encode("Hello world")
            assert (ids[0] == bos) == adds, (pre, key, backend)
            assert tok.encode("Hello world", add_special_tokens=False) == (ids[1:] if adds else ids)
    from ossa.reference.tokenizer_spec import spec_from_file

    assert spec_from_file(str(tmp_path / "llama-bpe-None.gguf.2")).ignore_merges
    assert not spec_from_file(str(tmp_path / "qwen2-None.gguf.2")).ignore_merges


def test_processor_chat_template_file(default_model_path: str, tmp_path: pathlib.Path) -> None:
    """A vision-language folder whose template is only in chat_template.json (the processor's, as
    Qwen3-VL's and Llama 4's releases hold it): used when tokenizer_config.json and chat_template.jinja
    have none, as transformers' processor does (its output is the oracle); a tokenizer_config template
    takes priority."""
    from transformers.utils.chat_template_utils import render_jinja_template

    folder = _named_folder(load_vocab("qwen2", default_model_path).path, tmp_path / "m", as_files=False)
    config_path = pathlib.Path(folder, "tokenizer_config.json")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config.pop("chat_template")
    config_path.write_text(json.dumps(config), encoding="utf-8")
    template = NAMED_TEMPLATES[2]["template"]
    pathlib.Path(folder, "chat_template.json").write_text(json.dumps({"chat_template": template}))
    expected = render_jinja_template([MESSAGES], chat_template=template)[0][0]
    for backend in ("cpp", "python"):
        assert Tokenizer.from_file(folder, backend=backend).apply_chat_template(MESSAGES) == expected
    config["chat_template"] = NAMED_TEMPLATES[0]["template"]
    config_path.write_text(json.dumps(config), encoding="utf-8")
    assert Tokenizer.from_file(folder).apply_chat_template(MESSAGES).startswith("<|im_start|>user")


def _train_spm(tmp_path: pathlib.Path, model_type: str, **kw: Any) -> bytes:
    """A small SentencePiece model trained on the committed corpus (the sentencepiece package)."""
    import io

    import sentencepiece as spm

    text = "\n".join(p.read_text(encoding="utf-8") for p in CORPUS)
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text.splitlines()), model_writer=out, model_type=model_type, vocab_size=900,
        character_coverage=1.0, byte_fallback=True, bos_id=1, eos_id=2, unk_id=0, **kw,
    )  # fmt: skip
    return out.getvalue()


@pytest.mark.parametrize("legacy", [False, True])
def test_sentencepiece_folder_as_transformers_reads_it(tmp_path: pathlib.Path, legacy: bool) -> None:
    """A folder with a SentencePiece BPE tokenizer.model and no tokenizer.json (InternLM3's, older Llama
    2 fine-tunes'): ids as transformers' LlamaTokenizer gives them from the same folder (its merges in
    piece order, the prefix space on the first segment or, legacy, on every one), with a user-defined
    piece, a control piece and an added token beyond the pieces (tokenizer_config's
    added_tokens_decoder); both backends."""
    from transformers import LlamaTokenizer

    data = _train_spm(tmp_path, "bpe", user_defined_symbols=["<|im_start|>"], control_symbols=["<ctl>"])
    folder = tmp_path / "spm"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(data)
    config = {
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
        "legacy": legacy, "added_tokens_decoder": {"900": {"content": "<|extra|>", "special": True}},
    }  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    hf = LlamaTokenizer.from_pretrained(str(folder))
    cpp, py = Tokenizer.from_file(str(folder)), Tokenizer.from_file(str(folder), backend="python")
    texts = [p.read_text(encoding="utf-8") for p in CORPUS] + [
        "<|im_start|>user\nhi<|extra|> there<ctl>x", "  two  spaces ", "<|extra|><|extra|>",
        "\u00e9\u2581 \U0001f600",
    ]  # fmt: skip
    for text in texts:
        for add in (False, True):
            want = hf.encode(text, add_special_tokens=add)
            assert cpp.encode(text, add_special_tokens=add) == want, (text[:60], add, legacy)
            assert py.encode(text, add_special_tokens=add) == want, (text[:60], add, legacy)
        ids = cpp.encode(text)
        assert cpp.decode(ids) == hf.decode(ids, clean_up_tokenization_spaces=False), text[:60]
    assert cpp.bos_token_id == 1 and cpp.eos_token_id == 2 and cpp.vocab_size == 901


def test_sentencepiece_unigram_is_refused(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "uni"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(_train_spm(tmp_path, "unigram"))
    for backend in ("cpp", "python"):
        with pytest.raises(ValueError, match="unigram"):
            Tokenizer.from_file(str(folder), backend=backend)
    (folder / "tokenizer.model").write_bytes(b"\x0a\xff\xff")  # (truncated protobuf)
    with pytest.raises(ValueError, match="protobuf"):
        Tokenizer.from_file(str(folder))
