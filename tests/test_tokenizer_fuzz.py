"""Hypothesis fuzz: random Unicode strings, 10,000 cases per vocabulary, C++ == HF == Python twin.

Strings mix random assigned code points (any category but surrogates and unassigned: the tables are
Unicode 14, Python's unicodedata; Hugging Face's regex engine may know newer code points) with the
fragments the pre-tokenizers care about: spaces and line breaks, digits, apostrophe contractions,
letters in several scripts, combining marks, emoji with ZWJ, and special tokens.
"""

from __future__ import annotations

import unicodedata

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_tokenizer import OPT_FOLDER, SPM_FOLDER, VOCABS, Vocab, load_vocab

# The SentencePiece GGUF pipelines (Llama 2 / Mistral, Phi-3 with rstrip, Gemma) are fuzzed too; the
# byte-level GGUFs share their tokenizer.json twins' pipelines and are checked on the corpus.
FUZZ_VOCABS = [*VOCABS, "mistral_gguf", "phi3_gguf", "gemma3_gguf", "gemma4_gguf", SPM_FOLDER, OPT_FOLDER]

FRAGMENTS = [
    " ", "  ", "   ", "\n", "\r\n", "\t", "\u00a0", "\u3000", "\u2581", "'", "'s", "'T", "'ll", "'Re",
    "'\u017f", "0", "12", "345", "\u0661", "a", "Z", "\u00e9", "e\u0301", "\u0436", "\u65e5\u672c",
    "\u0639", "\u0928", "\u093f", "\U0001f600", "\U0001f44d\U0001f3fd", "\u200d",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>",
    "</s>", "<|eot_id|>", "<", "|", ".", "...", "\x00", "<unk>", "<|user|>", "<|end|>", "<start_of_turn>",
    "<table>", "(", ")", ",", "!?", "\u2026", "\u3002", "\uff0c", "\u3001", "\u0964", "\u06d4", "\u060c",
]  # fmt: skip

fragment = st.one_of(
    st.sampled_from(FRAGMENTS),
    st.characters(exclude_categories=("Cs", "Cn")),
    st.text(st.characters(exclude_categories=("Cs", "Cn")), max_size=4),
)
texts = st.lists(fragment, max_size=12).map("".join)


def check_case(v: Vocab, text: str) -> None:
    """The per-case checks, kept small so 10,000 cases per vocabulary fit the CI budget."""
    expected = v.hf.encode(text).ids
    ids = v.cpp.encode(text)
    assert ids == expected, (v.name, text)
    assert v.py.encode(text) == expected, (v.name, "twin", text)
    decoded = v.cpp.decode(ids)
    assert decoded == v.hf.decode(ids, skip_special_tokens=False), (v.name, text)
    d = v.cpp.detokenizer()
    assert "".join([d.push(i) for i in ids]) + d.flush() == decoded
    if v.lossless or (v.name == "smollm2" and text.isprintable()):
        assert v.cpp.decode(v.cpp.encode(text, add_special_tokens=False)) == text
    nfc = unicodedata.normalize("NFC", text)
    round_trip = {"qwen25": nfc, "qwen35": nfc, "qwen35_gguf": nfc, "gemma3": text.replace("\u2581", " ")}
    if v.name in round_trip:
        assert v.cpp.decode(v.cpp.encode(text, add_special_tokens=False)) == round_trip[v.name]


def test_fuzz_matches_hf_and_twin(default_model_path: str) -> None:
    """Each generated string is checked on every vocabulary: 10,000 cases per vocabulary."""
    vocabs = [load_vocab(name, default_model_path) for name in FUZZ_VOCABS]

    @settings(max_examples=10_000, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(texts)
    def run(text: str) -> None:
        for v in vocabs:
            check_case(v, text)

    run()
