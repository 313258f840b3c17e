"""GGUF tokenizer metadata as files in the wild get it wrong: every mutation of a small vocabulary's
keys must load cleanly or raise ValueError (ossa.ModelError), never crash, in C++ and in the twin, and
a clean load must encode and decode. Loads run in-process, so a crash kills pytest (the failure signal).

Mutations hit what the GGUF tokenizer reads: token texts (empty, duplicated, not UTF-8, space runs,
end-of-generation texts), token types (out of range, negative, too few or too many), scores (short,
non-finite), merges (malformed, naming unknown tokens), the special ids and the eos_token_ids list
(out of range, wrong type), add_bos/add_space_prefix, tokenizer.ggml.pre and general.name (Phi-3's
rstrip rule), under the architectures whose pipelines differ (llama, phi3, gemma3)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import gguf
import pytest

from ossa.tokenizer import Tokenizer

TEXTS = ["Hello world", "  two  spaces\n\nand lines", "<s>[INST] hi</s>", "<|end|>\n x", "日本語 🤖 é", ""]


def _spm_vocab() -> tuple[list[str], list[float], list[int]]:
    """A small SentencePiece-style vocabulary: control tokens, the 256 byte tokens, pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    pieces = ["\u2581", "\u2581\u2581", "\u2581\u2581\u2581"] + list("abcdefghijklmnopqrstuvwxyzHWIN[]/|<>")
    pieces += ["\u2581H", "He", "ll", "llo", "\u2581Hello", "\u2581w", "or", "ld", "\u2581wor", "\u2581world"]
    pieces += ["<|end|>", "<end_of_turn>", "<|user|>"]
    tokens += pieces
    types += [1] * (len(pieces) - 3) + [3, 3, 4]
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return tokens, scores, types


def _bpe_vocab() -> tuple[list[str], list[str], list[int]]:
    """A small byte-level vocabulary with merges."""
    alphabet = [chr(c) for c in range(ord("!"), ord("~") + 1)] + ["\u0120", "\u010a"]
    tokens = alphabet + ["\u0120w", "or", "ld", "\u0120wor", "\u0120world", "He", "llo", "Hello"]
    merges = ["\u0120 w", "o r", "l d", "\u0120w or", "\u0120wor ld", "H e", "l lo", "He llo"]
    merges.insert(6, "l o")
    tokens.insert(len(alphabet) + 6, "lo")
    tokens += ["<|im_end|>", "<|endoftext|>"]
    return tokens, merges, [1] * (len(tokens) - 2) + [3, 3]


def _mutate(rng: random.Random, kv: dict[str, Any]) -> dict[str, Any]:
    kv = dict(kv)
    n = len(kv["tokenizer.ggml.tokens"])
    for _ in range(rng.randint(1, 3)):
        what = rng.randrange(12)
        if what == 0:  # a token text
            toks = list(kv["tokenizer.ggml.tokens"])
            toks[rng.randrange(n)] = rng.choice(
                [
                    "",
                    " ",
                    "   ",
                    "\t \t",
                    toks[rng.randrange(n)],
                    "<end_of_turn>",
                    "<|endoftext|>",
                    "\u2581" * 40,
                ]
            )
            kv["tokenizer.ggml.tokens"] = toks
        elif what == 1:  # token types
            types = list(kv.get("tokenizer.ggml.token_type", []))
            if types and rng.random() < 0.5:
                types[rng.randrange(len(types))] = rng.choice([-1, 0, 5, 7, 99, 2**31 - 1, 2, 4])
            else:
                types = types[: rng.randrange(len(types) + 1)] if rng.random() < 0.5 else types + [1] * 5
            kv["tokenizer.ggml.token_type"] = types
        elif what == 2 and "tokenizer.ggml.scores" in kv:  # scores
            scores = list(kv["tokenizer.ggml.scores"])
            scores = scores[:-1] if rng.random() < 0.3 else scores
            if scores:
                scores[rng.randrange(len(scores))] = rng.choice([float("nan"), float("inf"), -1e30, 0.0])
            kv["tokenizer.ggml.scores"] = scores
        elif what == 3:  # merges
            merges = list(kv.get("tokenizer.ggml.merges", []))
            merges.append(rng.choice(["nospace", "a b", "zz yy", " ", "a  b", "\u2581 \u2581"]))
            kv["tokenizer.ggml.merges"] = merges
        elif what == 4:  # special ids
            key = rng.choice(["bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id",
                              "eot_token_id", "eom_token_id"])  # fmt: skip
            kv[f"tokenizer.ggml.{key}"] = rng.choice([0, 1, n - 1, n, n + 7, 2**32 - 1])
        elif what == 5:  # the eos list
            kv["tokenizer.ggml.eos_token_ids"] = rng.choice([[2], [n - 1, 0], [n], [-1], []])
        elif what == 6:
            kv["tokenizer.ggml.add_bos_token"] = rng.random() < 0.5
        elif what == 7:
            kv["tokenizer.ggml.add_space_prefix"] = rng.random() < 0.5
        elif what == 8:
            kv["tokenizer.ggml.pre"] = rng.choice(
                ["gpt-4o", "tekken", "llama-bpe", "qwen2", "qwen35", "?", ""]
            )
        elif what == 9:
            kv["general.name"] = rng.choice(["Phi3", "phi-3 mini", "PHI3", "Gemma", "\u0130phi3"])
        elif what == 10:
            kv["general.architecture"] = rng.choice(["llama", "phi3", "gemma3", "gemma", "qwen2"])
        else:  # drop a key
            key = rng.choice(
                sorted(k for k in kv if k not in ("general.architecture", "tokenizer.ggml.tokens"))
            )
            del kv[key]
    return kv


def _write(path: Path, kv: dict[str, Any]) -> None:
    w = gguf.GGUFWriter(str(path), kv["general.architecture"])
    for key, value in kv.items():
        if key == "general.architecture" or (isinstance(value, list) and not value):
            continue  # gguf-py writes no empty arrays: the key is left out
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value) if 0 <= value < 2**32 else w.add_int64(key, value)
        elif key == "tokenizer.ggml.scores":
            w.add_array(key, [float(x) for x in value])
        elif key in ("tokenizer.ggml.token_type", "tokenizer.ggml.eos_token_ids"):
            w.add_key_value(
                key, [int(x) for x in value], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT32
            )
        else:
            w.add_array(key, list(value))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("model", ["llama", "gpt2"])
def test_mutated_gguf_tokenizers_load_or_fail_cleanly(model: str, tmp_path: Path) -> None:
    if model == "llama":
        tokens, scores, types = _spm_vocab()
        base: dict[str, Any] = {"tokenizer.ggml.scores": scores}
    else:
        tokens, merges, types = _bpe_vocab()
        base = {"tokenizer.ggml.merges": merges, "tokenizer.ggml.pre": "llama-bpe"}
    base.update({
        "general.architecture": "llama", "tokenizer.ggml.model": model, "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types, "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
    })  # fmt: skip
    rng = random.Random(1234 if model == "llama" else 4321)
    outcomes = {"loaded": 0, "error": 0}
    for case in range(300):
        kv = _mutate(rng, base)
        path = tmp_path / f"{case}.gguf"
        _write(path, kv)
        results = []
        for backend in ("cpp", "python"):
            try:
                tok = Tokenizer.from_file(str(path), backend=backend)
            except ValueError:
                results.append("error")
                continue
            ids = [tok.encode(t) for t in TEXTS]
            for i in ids:
                tok.decode(i)
            results.append((ids, tok.eos_token_ids))
        # Both backends agree: both refuse, or both give the same ids and end-of-generation set.
        assert results[0] == results[1] or "error" in results and results.count("error") == 2, (case, kv)
        outcomes["loaded" if results[0] != "error" else "error"] += 1
        path.unlink()
    assert outcomes["loaded"] > 20 and outcomes["error"] > 5, outcomes
