"""Python twin of the C++ tokenizer (csrc/tokenizer/tokenizer.cpp, bpe.cpp, detokenizer.cpp).

Same spec, same algorithms, same ids: added tokens split out leftmost-longest (raw pass, then
[NFC] and the normalized pass), per segment [metaspace] -> pre-tokenizer -> BPE merging the lowest
rank (leftmost first) with a heap, decode through token bytes with byte-fallback runs resolved as a
unit.
"""

from __future__ import annotations

import heapq
import unicodedata
from typing import Any

from .pretokenizer import WHITE_SPACE, byte_level_decode, flags, pre_tokenize
from .tokenizer_spec import METASPACE, ModelError, TokenizerSpec, spec_from_file

__all__ = ["Tokenizer", "Detokenizer", "TokenizerSpec", "ModelError", "derive_merges_from_scores"]


def derive_merges_from_scores(vocab: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """transformers' generate_merges for a scored vocabulary (see csrc/tokenizer/sentencepiece.h)."""
    ids = {t: i for i, t in enumerate(vocab)}
    score_of = dict(zip(vocab, scores, strict=True))
    merges: list[tuple[str, str, float]] = []
    for tok, sc in score_of.items():
        local = [(tok[:k], tok[k:], sc) for k in range(1, len(tok)) if tok[:k] in ids and tok[k:] in ids]
        merges.extend(sorted(local, key=lambda x: (ids[x[0]], ids[x[1]])))
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(a, b) for a, b, _ in merges]


def _parse_byte_token(s: str) -> int:
    if len(s) == 6 and s.startswith("<0x") and s.endswith(">"):
        try:
            return int(s[3:5], 16)
        except ValueError:
            return -1
    return -1


class Tokenizer:
    """The plain-Python tokenizer; ``ossa.Tokenizer.from_file(path, backend="python")`` wraps it."""

    def __init__(self, spec: TokenizerSpec) -> None:
        self.spec = spec
        byte_level = spec.model == "byte_level_bpe"
        n = max([len(spec.vocab)] + [t["id"] + 1 for t in spec.added_tokens])
        spelled = list(spec.vocab) + [""] * (n - len(spec.vocab))
        for t in spec.added_tokens:
            spelled[t["id"]] = t["content"]
        self.token_strings = spelled
        self.token_bytes: list[bytes] = []
        self.is_byte_token = [False] * n
        for i, s in enumerate(spelled):
            if byte_level:
                raw = byte_level_decode(s)
                self.token_bytes.append(raw if raw is not None else s.encode("utf-8"))
            else:
                b = _parse_byte_token(s) if spec.byte_fallback else -1
                self.is_byte_token[i] = b >= 0
                self.token_bytes.append(bytes([b]) if b >= 0 else s.replace(METASPACE, " ").encode("utf-8"))
        model_ids = {s: i for i, s in enumerate(spec.vocab) if s}
        # BPE key space: raw bytes for byte-level (latin-1 str of them), pieces for SentencePiece.
        self.vocab: dict[str, int] = {}
        for s, i in model_ids.items():
            if byte_level:
                raw = byte_level_decode(s)
                if raw is not None:
                    self.vocab.setdefault(raw.decode("latin-1"), i)
            else:
                self.vocab.setdefault(s, i)
        merges = spec.merges
        if not merges and not byte_level and spec.scores:
            merges = derive_merges_from_scores(spec.vocab, spec.scores)
        self.merges: dict[tuple[int, int], tuple[int, int]] = {}
        for rank, (left, right) in enumerate(merges):
            for part in (left, right, left + right):
                if part not in model_ids:
                    raise ModelError(f"BPE merge part '{part}' is not in the vocabulary")
            self.merges.setdefault((model_ids[left], model_ids[right]), (rank, model_ids[left + right]))
        if byte_level:
            self.byte_ids = [self.vocab.get(chr(b), -1) for b in range(256)]
        else:
            self.byte_ids = [
                self.vocab.get(f"<0x{b:02X}>", -1) if spec.byte_fallback else -1 for b in range(256)
            ]
        self.is_special = [False] * n
        self.raw_tokens: dict[str, dict[str, Any]] = {}
        self.normalized_tokens: dict[str, dict[str, Any]] = {}
        for t in spec.added_tokens:
            if t["special"]:
                self.is_special[t["id"]] = True
            if t["normalized"] and spec.prefix == "prepend":
                raise ModelError(f"added token '{t['content']}' is normalized=true with a Prepend normalizer")
            table = self.normalized_tokens if t["normalized"] else self.raw_tokens
            if t["content"]:
                table.setdefault(t["content"], t)
        self.cache: dict[str, list[int]] = {}

    @classmethod
    def from_file(cls, path: str) -> Tokenizer:
        return cls(spec_from_file(path))

    @property
    def vocab_size(self) -> int:
        return len(self.token_bytes)

    # -- special tokens, as core.Tokenizer answers (what ossa.Tokenizer reads) -------------------

    @property
    def bos_token_id(self) -> int | None:
        return self.spec.bos_id if self.spec.bos_id >= 0 else None

    @property
    def eos_token_id(self) -> int | None:
        return self.spec.eos_id if self.spec.eos_id >= 0 else None

    @property
    def pad_token_id(self) -> int | None:
        return self.spec.pad_id if self.spec.pad_id >= 0 else None

    @property
    def eos_token_ids(self) -> list[int]:
        return list(self.spec.eos_ids)

    def id_to_token(self, token_id: int) -> str | None:
        t = self.token_strings
        return t[token_id] if 0 <= token_id < len(t) and t[token_id] else None

    # -- encoding ---------------------------------------------------------------------------------

    def _split_added(self, text: str, table: dict[str, dict[str, Any]]) -> list[tuple[int, int, int]]:
        """(start, end, id) of added-token matches, leftmost-longest, with lstrip/rstrip/single_word."""
        if not table:
            return []
        lengths = sorted({len(c) for c in table}, reverse=True)
        firsts = {c[0] for c in table}
        out: list[tuple[int, int, int]] = []
        start_offset = i = 0
        n = len(text)
        while i < n:
            if text[i] not in firsts:
                i += 1
                continue
            tok = next((table[text[i : i + k]] for k in lengths if text[i : i + k] in table), None)
            if tok is None:
                i += 1
                continue
            start, stop = i, i + len(tok["content"])
            i = stop
            if tok["single_word"]:

                def word(c: str) -> bool:
                    return c == "_" or bool(flags(c) & 11)  # letter, number or mark

                if (start > 0 and word(text[start - 1])) or (stop < n and word(text[stop])):
                    continue
            if tok["lstrip"]:
                while start > start_offset and flags(text[start - 1]) & WHITE_SPACE:
                    start -= 1
            if tok["rstrip"]:
                while stop < n and flags(text[stop]) & WHITE_SPACE:
                    stop += 1
                i = stop
            out.append((start, stop, tok["id"]))
            start_offset = stop
        return out

    def encode(self, text: str | bytes, add_special_tokens: bool = True) -> list[int]:
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"text is not valid UTF-8 (first bad byte at offset {e.start})") from e
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError("text contains a lone surrogate code point, which has no UTF-8 encoding") from e
        out: list[int] = list(self.spec.prefix_ids) if add_special_tokens else []

        def encode_gap(begin: int, end: int) -> None:
            if begin >= end:
                return
            gap = text[begin:end]
            if self.spec.nfc:
                gap = unicodedata.normalize("NFC", gap)
            p = 0
            for s, stop, tid in self._split_added(gap, self.normalized_tokens):
                if p < s:
                    self._encode_segment(gap[p:s], begin + p == 0, out)
                out.append(tid)
                p = stop
            if p < len(gap):
                self._encode_segment(gap[p:], begin + p == 0, out)

        pos = 0
        for s, stop, tid in self._split_added(text, self.raw_tokens):
            encode_gap(pos, s)
            out.append(tid)
            pos = stop
        encode_gap(pos, len(text))
        if add_special_tokens:
            out.extend(self.spec.suffix_ids)
        return out

    def _encode_segment(self, segment: str, at_text_start: bool, out: list[int]) -> None:
        spec = self.spec
        if spec.model == "byte_level_bpe":
            if spec.add_prefix_space and not segment.startswith(" "):
                segment = " " + segment
            for piece in pre_tokenize(spec.pre_tokenizer, segment):
                self._encode_piece(piece.encode("utf-8").decode("latin-1"), out)
            return
        norm = segment.replace(" ", METASPACE)
        starts = norm.startswith(METASPACE)
        if (
            spec.prefix == "prepend"
            or (spec.prefix == "always" and not starts)
            or (spec.prefix == "first" and not starts and at_text_start)
        ):
            norm = METASPACE + norm
        if not spec.metaspace_split:
            self._encode_piece(norm, out)
            return
        start = 0
        for i in range(1, len(norm)):
            if norm[i] == METASPACE:
                self._encode_piece(norm[start:i], out)
                start = i
        self._encode_piece(norm[start:], out)

    def _encode_piece(self, piece: str, out: list[int]) -> None:
        """piece: a latin-1 string of raw bytes (byte-level) or the normalized text (SentencePiece)."""
        if not piece:
            return
        if self.spec.ignore_merges and piece in self.vocab:
            out.append(self.vocab[piece])
            return
        cached = self.cache.get(piece)
        if cached is None:
            cached = self._bpe(piece)
            if len(self.cache) > 100_000:
                self.cache.clear()
            self.cache[piece] = cached
        out.extend(cached)

    def _bpe(self, piece: str) -> list[int]:
        spec = self.spec
        symbols: list[int] = []
        last_unk = False

        def push_unk() -> None:
            nonlocal last_unk
            if spec.unk_id < 0:
                return
            if not (spec.fuse_unk and last_unk):
                symbols.append(spec.unk_id)
            last_unk = True

        if spec.model == "byte_level_bpe":
            for ch in piece:
                i = self.byte_ids[ord(ch)]
                if i < 0:
                    push_unk()
                else:
                    symbols.append(i)
                    last_unk = False
        else:
            for ch in piece:
                i = self.vocab.get(ch, -1)
                raw = ch.encode("utf-8")
                if i >= 0:
                    symbols.append(i)
                    last_unk = False
                elif spec.byte_fallback and all(self.byte_ids[b] >= 0 for b in raw):
                    symbols.extend(self.byte_ids[b] for b in raw)
                    last_unk = False
                else:
                    push_unk()
        return bpe_merge(self.merges, symbols)

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        return [self.encode(t, add_special_tokens) for t in texts]

    # -- decoding ---------------------------------------------------------------------------------

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        d = Detokenizer(self, skip_special_tokens)
        return "".join(d.push(i) for i in ids) + d.flush()


def bpe_merge(merges: dict[tuple[int, int], tuple[int, int]], ids: list[int]) -> list[int]:
    """Merges the lowest-ranked pair (leftmost on ties) until none is left; heap over a linked list."""
    n = len(ids)
    if n <= 1:
        return list(ids)
    sym = list(ids)
    nxt = [i + 1 if i + 1 < n else -1 for i in range(n)]
    prv = [i - 1 for i in range(n)]
    heap: list[tuple[int, int, int]] = []

    def push(pos: int) -> None:
        j = nxt[pos]
        if j >= 0:
            m = merges.get((sym[pos], sym[j]))
            if m is not None:
                heapq.heappush(heap, (m[0], pos, m[1]))

    for i in range(n - 1):
        push(i)
    while heap:
        _, pos, merged = heapq.heappop(heap)
        if sym[pos] < 0 or nxt[pos] < 0:
            continue
        j = nxt[pos]
        m = merges.get((sym[pos], sym[j]))
        if m is None or m[1] != merged:
            continue
        sym[pos] = merged
        nxt[pos] = nxt[j]
        sym[j] = -1
        if nxt[pos] >= 0:
            prv[nxt[pos]] = pos
        if prv[pos] >= 0:
            push(prv[pos])
        push(pos)
    out = []
    i = 0
    while i >= 0:
        out.append(sym[i])
        i = nxt[i]
    return out


class Detokenizer:
    """Twin of ossa::IncrementalDetokenizer: push ids, get the text that became final."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False) -> None:
        self.tok = tokenizer
        self.skip = skip_special_tokens
        self.pending = b""
        self.run = b""
        self.started = False

    def _flush_run(self) -> None:
        if self.run:
            try:
                self.run.decode("utf-8")
                self.pending += self.run
            except UnicodeDecodeError:
                self.pending += "\ufffd".encode() * len(self.run)
            self.run = b""

    def _emit(self, final: bool) -> str:
        data = self.pending
        if final:
            text, self.pending = data.decode("utf-8", "replace"), b""
        else:
            keep = _incomplete_tail(data)
            text = data[: len(data) - keep].decode("utf-8", "replace")
            self.pending = data[len(data) - keep :]
        if not self.started and text:
            self.started = True
            if self.tok.spec.strip_leading_space and text[0] == " ":
                text = text[1:]
        return text

    def push(self, token_id: int) -> str:
        t = self.tok
        if token_id < 0 or token_id >= t.vocab_size or (self.skip and t.is_special[token_id]):
            return ""
        if t.is_byte_token[token_id]:
            self.run += t.token_bytes[token_id]
            return ""
        self._flush_run()
        self.pending += t.token_bytes[token_id]
        return self._emit(False)

    def flush(self) -> str:
        self._flush_run()
        return self._emit(True)


def _incomplete_tail(data: bytes) -> int:
    """Length of a final, incomplete but so far valid UTF-8 sequence (0 if none)."""
    for k in range(1, min(4, len(data)) + 1):
        tail = data[-k:]
        c = tail[0]
        need = 2 if 0xC2 <= c <= 0xDF else 3 if 0xE0 <= c <= 0xEF else 4 if 0xF0 <= c <= 0xF4 else 0
        if need:
            if k >= need:
                return 0
            try:
                tail.decode("utf-8")
            except UnicodeDecodeError as e:
                return k if e.reason == "unexpected end of data" else 0
            return 0
        if c & 0xC0 != 0x80:
            return 0
    return 0
