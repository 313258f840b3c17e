"""Python twin of csrc/tokenizer/pretokenizer.cpp, unicode.cpp and byte_level.cpp.

The split regexes of GPT-2, Llama 3, Qwen2, o200k and Tekken are run by matchers that follow each regex's
alternation order and backtracking by hand; code point classes come from ``unicodedata`` (the same
source as the C++ tables) plus the White_Space property list.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from functools import lru_cache

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen3.5: Qwen2's with combining marks in the letter runs and out of the punctuation runs.
QWEN35_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# tiktoken's o200k_base (Phi-4-mini): letter runs split by case, contractions only as suffixes.
O200K_REGEX = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Tekken (Mistral NeMo, Ministral, Mistral Small 3): o200k without the contraction suffixes, single digits.
TEKKEN_REGEX = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# BLOOM (llama.cpp: "bloom", "poro-chat", "gpt3-finnish"): an optional space and a run of anything but white
# space and ( | ) . , ! ? … 。 ， 、 । ۔ ، -- the text between matches kept as pieces (Isolated). llama.cpp
# writes the punctuation flat in the class; tokenizer.json nests it in a class of its own (the same set).
BLOOM_REGEX = " ?[^(\\s|[.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c])]+"
_BLOOM_FLAT_REGEX = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
_BLOOM_EXCLUDED = frozenset("(|).,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c")

PATTERNS = {
    "gpt2": GPT2_REGEX,
    "llama3": LLAMA3_REGEX,
    "qwen2": QWEN2_REGEX,
    "o200k": O200K_REGEX,
    "tekken": TEKKEN_REGEX,
    "qwen35": QWEN35_REGEX,
    "bloom": BLOOM_REGEX,
}

LETTER, NUMBER, WHITE_SPACE, MARK, UPPER, LOWER = 1, 2, 4, 8, 16, 32
_WHITE_SPACE = frozenset(
    [
        *range(0x09, 0x0E),
        0x20,
        0x85,
        0xA0,
        0x1680,
        *range(0x2000, 0x200B),
        0x2028,
        0x2029,
        0x202F,
        0x205F,
        0x3000,
    ]
)


def pattern_from_regex(regex: str) -> str | None:
    """The pattern name ("gpt2", "llama3", "qwen2", "o200k", "tekken", "qwen35") a regex denotes, or None."""
    for name, r in PATTERNS.items():
        if regex == r:
            return name
    return "bloom" if regex == _BLOOM_FLAT_REGEX else None


@lru_cache(maxsize=65536)
def flags(ch: str) -> int:
    """LETTER/NUMBER/WHITE_SPACE/MARK bits of one character (letters: UPPER for Lu Lt, LOWER for Ll)."""
    cat = unicodedata.category(ch)
    f = 0
    if cat[0] == "L":
        f = LETTER | (UPPER if cat in ("Lu", "Lt") else LOWER if cat == "Ll" else 0)
    elif cat[0] == "N":
        f = NUMBER
    elif cat[0] == "M":
        f = MARK
    if ord(ch) in _WHITE_SPACE:
        f |= WHITE_SPACE
    return f


def _is_other(f: int) -> bool:
    return f & (LETTER | NUMBER | WHITE_SPACE) == 0


def _ci_eq(c: str, lower: str) -> bool:
    return c == lower or c == lower.upper() or (lower == "s" and c == "\u017f")


def _contraction(s: str, i: int, ignore_case: bool) -> int:
    n = len(s)
    if s[i] != "'" or i + 1 >= n:
        return 0

    def eq(k: int, lower: str) -> bool:
        return k < n and (_ci_eq(s[k], lower) if ignore_case else s[k] == lower)

    if eq(i + 1, "s") or eq(i + 1, "t") or eq(i + 1, "m") or eq(i + 1, "d"):
        return 2
    if (eq(i + 1, "r") or eq(i + 1, "v")) and eq(i + 2, "e"):
        return 3
    if eq(i + 1, "l") and eq(i + 2, "l"):
        return 3
    return 0


def _space_run(s: str, f: list[int], i: int) -> int:
    k = i
    while k < len(s) and f[k] & WHITE_SPACE:
        k += 1
    if k < len(s) and k - i >= 2:
        return k - 1 - i
    return k - i


def _match_gpt2(s: str, f: list[int], i: int) -> int:
    m = _contraction(s, i, False)
    if m:
        return m
    n = len(s)
    j = i + 1 if s[i] == " " else i
    if j < n:
        for pred in (
            lambda g: g & LETTER,
            lambda g: g & NUMBER,
            _is_other,
        ):
            if pred(f[j]):
                k = j
                while k < n and pred(f[k]):
                    k += 1
                return k - i
    if f[i] & WHITE_SPACE:
        return _space_run(s, f, i)
    return 1


def _match_llama3(s: str, f: list[int], i: int, max_digits: int, marks: bool = False) -> int:
    """One match of Llama 3's pattern (max_digits 3) or Qwen2's (1); with ``marks`` (Qwen3.5) combining
    marks join the letter runs (a mark that fails as the lead starts the run itself, as the regex
    backtracks) and leave the punctuation runs."""
    m = _contraction(s, i, True)
    if m:
        return m
    n = len(s)
    word = LETTER | MARK if marks else LETTER
    j = i + 1 if s[i] not in "\r\n" and not f[i] & (LETTER | NUMBER) else i
    if not (j < n and f[j] & word) and f[i] & word:
        j = i
    if j < n and f[j] & word:
        k = j
        while k < n and f[k] & word:
            k += 1
        return k - i
    if f[i] & NUMBER:
        k = i
        while k < n and k - i < max_digits and f[k] & NUMBER:
            k += 1
        return k - i
    j = i + 1 if s[i] == " " else i

    def other(g: int) -> bool:
        return _is_other(g) and not (marks and g & MARK)

    if j < n and other(f[j]):
        k = j
        while k < n and other(f[k]):
            k += 1
        while k < n and s[k] in "\r\n":
            k += 1
        return k - i
    if f[i] & WHITE_SPACE:
        k, last = i, -1
        while k < n and f[k] & WHITE_SPACE:
            if s[k] in "\r\n":
                last = k
            k += 1
        if last >= 0:
            return last + 1 - i
        return _space_run(s, f, i)
    return 1


def _upper_class(f: int) -> bool:  # [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
    return bool((f & LETTER and not f & LOWER) or f & MARK)


def _lower_class(f: int) -> bool:  # [\p{Ll}\p{Lm}\p{Lo}\p{M}]
    return bool((f & LETTER and not f & UPPER) or f & MARK)


def _match_o200k(s: str, f: list[int], i: int, contractions: bool = True, max_digits: int = 3) -> int:
    r"""One match of the o200k pattern (or Tekken's: no contraction suffixes, max_digits 1) at i, with
    the regex's backtracking: each letter branch tries with its optional lead [^\r\n\p{L}\p{N}], then
    without; upper* lower+ gives back upper-class characters from the right until a lower-class one
    follows."""
    n = len(s)

    def run(k: int, cls: Callable[[int], bool]) -> int:
        while k < n and cls(f[k]):
            k += 1
        return k

    def suffix(k: int) -> int:
        return k + (_contraction(s, k, True) if contractions and k < n else 0)

    lead = s[i] not in "\r\n" and not f[i] & (LETTER | NUMBER)
    starts = [i + 1, i] if lead else [i]
    for j in starts:  # lead? upper* lower+ contraction?
        for k in range(run(j, _upper_class), j - 1, -1):
            if k < n and _lower_class(f[k]):
                return suffix(run(k, _lower_class)) - i
    for j in starts:  # lead? upper+ lower* contraction?
        if j < n and _upper_class(f[j]):
            return suffix(run(run(j, _upper_class), _lower_class)) - i
    if f[i] & NUMBER:
        k = i
        while k < n and k - i < max_digits and f[k] & NUMBER:
            k += 1
        return k - i
    j = i + 1 if s[i] == " " else i
    if j < n and _is_other(f[j]):
        k = run(j, _is_other)
        while k < n and s[k] in "\r\n/":
            k += 1
        return k - i
    return _match_llama3(s, f, i, 3)  # only white space is left: the same branches as Llama 3's


def split_regex(pattern: str, text: str) -> list[str]:
    """Pieces of text under one of the known split patterns (matches isolated, none empty)."""
    f = [flags(c) for c in text]
    out: list[str] = []
    i = gap = 0  # (gap: where the text no match took begins)
    while i < len(text):
        if pattern == "bloom":
            m = _match_bloom(text, f, i)
            if m == 0:  # (a character no match starts at joins the text between matches)
                i += 1
                continue
        elif pattern == "gpt2":
            m = _match_gpt2(text, f, i)
        elif pattern == "o200k":
            m = _match_o200k(text, f, i)
        elif pattern == "tekken":
            m = _match_o200k(text, f, i, contractions=False, max_digits=1)
        elif pattern == "qwen35":
            m = _match_llama3(text, f, i, 1, marks=True)
        else:
            m = _match_llama3(text, f, i, 3 if pattern == "llama3" else 1)
        if gap < i:
            out.append(text[gap:i])
        out.append(text[i : i + m])
        i += m
        gap = i
    if gap < len(text):
        out.append(text[gap:])
    return out


def _bloom_char(s: str, f: list[int], i: int) -> bool:
    return not f[i] & WHITE_SPACE and s[i] not in _BLOOM_EXCLUDED


def _match_bloom(s: str, f: list[int], i: int) -> int:
    """BLOOM's pattern at i: its length, or 0 where nothing matches there."""
    j = i + (1 if s[i] == " " and i + 1 < len(s) and _bloom_char(s, f, i + 1) else 0)
    if not _bloom_char(s, f, j):
        return 0
    while j < len(s) and _bloom_char(s, f, j):
        j += 1
    return j - i


def split_digits(individual: bool, text: str) -> list[str]:
    """Hugging Face's Digits pre-tokenizer: numbers isolated one by one or as runs."""
    out: list[str] = []
    start = 0
    prev = False
    for i, c in enumerate(text):
        digit = bool(flags(c) & NUMBER)
        if digit and individual:
            if start < i:
                out.append(text[start:i])
            out.append(c)
            start = i + 1
        elif not individual and digit != prev:
            if start < i:
                out.append(text[start:i])
            start = i
        prev = digit
    if start < len(text):
        out.append(text[start:])
    return out


def pre_tokenize(steps: list[str], text: str) -> list[str]:
    """Applies each step ("gpt2", "llama3", "qwen2", "o200k", "tekken", "digits_individual",
    "digits_contiguous")."""
    if not text:
        return []
    pieces = [text]
    for step in steps:
        nxt: list[str] = []
        for p in pieces:
            if step.startswith("digits_"):
                nxt.extend(split_digits(step == "digits_individual", p))
            else:
                nxt.extend(split_regex(step, p))
        pieces = nxt
    return pieces


def _byte_alphabet() -> list[str]:
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


BYTE_TO_CHAR = _byte_alphabet()
CHAR_TO_BYTE = {c: b for b, c in enumerate(BYTE_TO_CHAR)}


def byte_level_encode(raw: bytes) -> str:
    return "".join(BYTE_TO_CHAR[b] for b in raw)


def byte_level_decode(s: str) -> bytes | None:
    """The bytes a byte-level spelling stands for, or None if s leaves the alphabet."""
    try:
        return bytes(CHAR_TO_BYTE[c] for c in s)
    except KeyError:
        return None
