"""Builds Hugging Face tokenizer.json files from GPT-2's BPE as openai-whisper ships it.

GPT-2's vocabulary is ``whisper/assets/gpt2.tiktoken`` in the openai-whisper sdist (base64 token bytes
and rank per line). The merges are recovered from the ranks: the merge that creates the token of rank
r is the pair BPE reaches on the token's bytes using only ranks below r. Five tokenizer.json files
come out, all on this vocabulary:

- ``gpt2``: GPT-2 itself (ByteLevel pre-tokenizer with the GPT-2 regex, <|endoftext|>);
- ``qwen2``: Qwen2's pre-tokenizer (Split with Qwen2's regex, then ByteLevel) and Qwen2's chat special
  tokens appended, a Qwen2-style tokenizer on a vocabulary available offline;
- ``llama3``: Llama 3's pre-tokenizer regex and ``ignore_merges``, likewise;
- ``qwen25``: ``qwen2`` with the NFC normalizer in front, the pipeline of Qwen2.5's tokenizer.json;
- ``phi4``: the o200k split regex (tiktoken's o200k_base, as Phi-4-mini's tokenizer.json uses it)
  with Phi's chat special tokens;
- ``tekken``: the Tekken split regex (Mistral NeMo, Ministral, Mistral Small 3) with Mistral's
  instruction tokens;
- ``qwen35``: Qwen3.5's pipeline (NFC, then its split regex: Qwen2's with combining marks in the letter
  runs) with Qwen's chat special tokens.

The sdist is fetched with ``pip download --no-deps --no-binary :all: openai-whisper==20250625`` into
``$OSSA_HOME/tokenizer_assets`` (default ~/.cache/ossa); mistral-common (for a SentencePiece model)
the same way. The tests and benchmarks/tokenizer.py call the functions here.

Run: python scripts/make_gpt2_tokenizer.py OUT_DIR
(writes OUT_DIR/{gpt2,qwen2,llama3,qwen25,phi4,tekken,qwen35}/tokenizer.json)
"""

from __future__ import annotations

import base64
import glob
import json
import os
import subprocess
import sys
import tarfile
import zipfile

# The split regexes and GPT-2's byte alphabet are the pretokenizer twin's (one definition of each).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "src"))
from ossa.reference.pretokenizer import (  # noqa: E402
    BLOOM_REGEX,
    BYTE_TO_CHAR,
    LLAMA3_REGEX,
    O200K_REGEX,
    QWEN2_REGEX,
    QWEN35_REGEX,
    TEKKEN_REGEX,
)

WHISPER = "openai-whisper==20250625"
MISTRAL_COMMON = "mistral-common==1.13.1"


def cache_dir() -> str:
    d = os.path.join(os.environ.get("OSSA_HOME", os.path.expanduser("~/.cache/ossa")), "tokenizer_assets")
    os.makedirs(d, exist_ok=True)
    return d


def _pip_download(requirement: str, pattern: str, sdist: bool) -> str:
    d = cache_dir()
    found = glob.glob(os.path.join(d, pattern))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", d, requirement]
        if sdist:
            cmd[5:5] = ["--no-binary", ":all:"]
        subprocess.run(cmd, check=True)
        found = glob.glob(os.path.join(d, pattern))
    if not found:
        raise FileNotFoundError(f"pip download {requirement} left no {pattern} in {d}")
    return found[0]


def gpt2_tiktoken_path() -> str:
    """Path of gpt2.tiktoken, extracted from the openai-whisper sdist (downloaded once)."""
    out = os.path.join(cache_dir(), "gpt2.tiktoken")
    if not os.path.exists(out):
        sdist = _pip_download(WHISPER, "openai_whisper-*.tar.gz", sdist=True)
        with tarfile.open(sdist) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith("whisper/assets/gpt2.tiktoken"))
            data = tar.extractfile(member)
            assert data is not None
            with open(out + ".tmp", "wb") as f:
                f.write(data.read())
        os.replace(out + ".tmp", out)
    return out


def mistral_tokenizer_model_path() -> str:
    """Path of mistral-common's tokenizer.model.v1 (a SentencePiece BPE model), in a folder of its own
    as tokenizer.model so transformers can load it."""
    folder = os.path.join(cache_dir(), "mistral_v1")
    out = os.path.join(folder, "tokenizer.model")
    if not os.path.exists(out):
        wheel = _pip_download(MISTRAL_COMMON, "mistral_common-*.whl", sdist=False)
        os.makedirs(folder, exist_ok=True)
        with zipfile.ZipFile(wheel) as z:
            name = next(n for n in z.namelist() if n.endswith("data/tokenizer.model.v1"))
            with open(out + ".tmp", "wb") as f:
                f.write(z.read(name))
        os.replace(out + ".tmp", out)
    return out


def load_tiktoken(path: str) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


def recover_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merge list, in rank order, that reproduces a tiktoken rank table."""
    merges: list[tuple[int, bytes, bytes]] = []
    for token, rank in ranks.items():
        if len(token) == 1:
            continue
        parts = [bytes([b]) for b in token]
        while True:
            best = None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) != 2:
            raise ValueError(f"token {token!r} (rank {rank}) is not reachable by one merge")
        merges.append((rank, parts[0], parts[1]))
    merges.sort()
    return [(a, b) for _, a, b in merges]


def _added(i: int, content: str) -> dict:
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}  # fmt: skip


def build_tokenizer_jsons(tiktoken_path: str) -> dict[str, dict]:
    """{"gpt2": ..., "qwen2": ..., "llama3": ..., "qwen25": ...} tokenizer.json contents."""
    ranks = load_tiktoken(tiktoken_path)

    def spell(b: bytes) -> str:
        return "".join(BYTE_TO_CHAR[x] for x in b)

    vocab = {spell(t): r for t, r in ranks.items()}
    merges = [f"{spell(a)} {spell(b)}" for a, b in recover_merges(ranks)]
    eot = len(vocab)
    vocab_eot = dict(vocab, **{"<|endoftext|>": eot})

    def model(ignore_merges: bool) -> dict:
        return {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                "ignore_merges": ignore_merges, "vocab": vocab_eot, "merges": merges}  # fmt: skip

    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    base = {"version": "1.0", "truncation": None, "padding": None, "normalizer": None,
            "post_processor": dict(byte_level), "decoder": dict(byte_level)}  # fmt: skip
    gpt2 = dict(
        base, added_tokens=[_added(eot, "<|endoftext|>")], pre_tokenizer=byte_level, model=model(False)
    )

    def split_variant(regex: str, specials: list[str], ignore_merges: bool) -> dict:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
            dict(byte_level, use_regex=False)]}  # fmt: skip
        added = [_added(eot + k, s) for k, s in enumerate(specials)]
        m = model(ignore_merges)
        m["vocab"] = dict(vocab, **{s: eot + k for k, s in enumerate(specials)})
        return dict(base, added_tokens=added, pre_tokenizer=pre, model=m)

    qwen2 = split_variant(QWEN2_REGEX, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], False)
    llama3 = split_variant(LLAMA3_REGEX, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], True)
    qwen25 = dict(qwen2, normalizer={"type": "NFC"})
    phi_specials = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
    phi4 = split_variant(O200K_REGEX, phi_specials, False)
    tekken = split_variant(TEKKEN_REGEX, ["<s>", "</s>", "[INST]", "[/INST]"], False)
    qwen_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    qwen35 = dict(split_variant(QWEN35_REGEX, qwen_specials, False), normalizer={"type": "NFC"})
    bloom = split_variant(BLOOM_REGEX, ["<unk>", "<s>", "</s>", "<pad>"], False)  # (BLOOM's pattern)
    return {"gpt2": gpt2, "qwen2": qwen2, "llama3": llama3, "qwen25": qwen25, "phi4": phi4, "tekken": tekken,
            "qwen35": qwen35, "bloom": bloom}  # fmt: skip


def write_tokenizers(out_dir: str) -> dict[str, str]:
    """Writes out_dir/<name>/tokenizer.json (+ tokenizer_config.json) once; returns the folders."""
    names = ("gpt2", "qwen2", "llama3", "qwen25", "phi4", "tekken", "qwen35", "bloom")
    folders = {name: os.path.join(out_dir, name) for name in names}
    if all(os.path.exists(os.path.join(f, "tokenizer.json")) for f in folders.values()):
        return folders
    configs = {
        "gpt2": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
        "qwen2": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        "qwen25": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        "phi4": {"eos_token": "<|end|>", "pad_token": "<|endoftext|>"},
        "tekken": {"bos_token": "<s>", "eos_token": "</s>"},
        "qwen35": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        "bloom": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"},
    }
    for name, tj in build_tokenizer_jsons(gpt2_tiktoken_path()).items():
        os.makedirs(folders[name], exist_ok=True)
        for fname, content in (("tokenizer_config.json", configs[name]), ("tokenizer.json", tj)):
            tmp = os.path.join(folders[name], fname + ".tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(content, f, ensure_ascii=False)
            os.replace(tmp, os.path.join(folders[name], fname))
    return folders


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(cache_dir(), "hf")
    for name, folder in write_tokenizers(out).items():
        print(f"{name}: {folder}/tokenizer.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
