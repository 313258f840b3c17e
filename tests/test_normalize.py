"""The C++ NFC normalizer (csrc/tokenizer/normalize.cpp, core.unicode_nfc) against Python's
unicodedata.normalize("NFC", ...) (the twin's, and the source of the tables): every code point alone,
and random sequences built to exercise decomposition, canonical reordering, blocking, Hangul and
composition exclusions. The tokenizer-level NFC (Qwen2.5's normalizer) is tested against Hugging Face
tokenizers in test_tokenizer.py and test_tokenizer_fuzz.py (vocabulary "qwen25")."""

from __future__ import annotations

import random
import unicodedata

from ossa._native import core


def test_every_code_point() -> None:
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        s = chr(cp)
        assert core.unicode_nfc(s) == unicodedata.normalize("NFC", s), hex(cp)


def test_random_sequences() -> None:
    rng = random.Random(0)
    marks = [c for c in range(0x300, 0x20000) if unicodedata.combining(chr(c))]
    marks += [0x1161, 0x1175, 0x11A8, 0x11C2, 0x0F71, 0x0F72, 0x0F80, 0x093C, 0x0CD5, 0x0B3E, 0x0DCF]
    bases = [c for c in range(0x20, 0x20000) if unicodedata.decomposition(chr(c))]
    bases += [0x41, 0x61, 0x20, 0x1100, 0x1112, 0xAC00, 0xAC01, 0x0915, 0x0CC6, 0x0B47, 0x0DD9, 0x3000]
    for _ in range(50_000):
        s = "".join(chr(rng.choice(marks if rng.random() < 0.6 else bases)) for _ in range(rng.randint(1, 8)))
        assert core.unicode_nfc(s) == unicodedata.normalize("NFC", s), ascii(s)


def test_fast_path() -> None:
    text = "plain ASCII and Latin-1: caf\u00e9 \u00c5 \u00ff"  # all below U+0300: returned as is
    assert core.unicode_nfc(text) == text
    assert core.unicode_nfc("") == ""
