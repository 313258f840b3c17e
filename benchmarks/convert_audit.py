"""llama.cpp's own converter against ossa's reading of GGUF files (session 60).

The tests convert their tiny models with ``tests/tiny_models.hf_to_gguf``, which writes each family as
llama.cpp's converter does, to ossa's understanding of it. Where that understanding is wrong, test and
reader agree with each other and both are wrong (as with Llama 3's RoPE scaling, which llama.cpp writes
as a ``rope_freqs`` tensor and ossa ignored until session 60). This script takes the converter itself
(``convert_hf_to_gguf.py``, its ``conversion`` package and its ``gguf-py``, from the llama-cpp-python
sdist on PyPI, the version installed or 0.3.36), converts tiny random models of the test suites' cases
(transformers-built, with the default model's vocabulary and tokenizer) to F32 GGUF files, and prints
ossa's largest logit difference from transformers' float32 logits over the largest logit, per family;
a converter failure prints its last line (the converter needs files tiny models lack for some families,
e.g. a SentencePiece tokenizer.model).

    PYTHONPATH=src:tests python benchmarks/convert_audit.py [name ...]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

V = 49152  # (the default model's vocabulary: its tokenizer goes into every folder)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}  # fmt: skip
# Families the test modules do not list with a config of their own here: the common ones.
BASE: dict[str, dict[str, Any]] = {
    "llama3": dict(arch="llama", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                   intermediate_size=96, rope_scaling=LLAMA3),
    "mistral": dict(arch="mistral", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                    intermediate_size=96),
    "qwen2": dict(arch="qwen2", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                  intermediate_size=96, tie=True),
    "qwen3": dict(arch="qwen3", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32,
                  intermediate_size=96),
    "qwen3_moe": dict(arch="qwen3_moe", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                      head_dim=16, intermediate_size=96, num_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=32, norm_topk_prob=True),  # (as released; llama.cpp's always)
    "qwen2_moe": dict(arch="qwen2_moe", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                      intermediate_size=96, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                      shared_expert_intermediate_size=48),
    "mixtral": dict(arch="mixtral", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                    intermediate_size=48, num_local_experts=4, num_experts_per_tok=2),
    "phi3": dict(arch="phi3", pad_token_id=0, bos_token_id=1, eos_token_id=2, hidden_size=64, num_layers=2,
                 num_heads=4, num_kv_heads=2, intermediate_size=96,
                 max_position_embeddings=64, original_max_position_embeddings=48, partial_rotary_factor=0.75,
                 rope_scaling={"rope_type": "longrope", "short_factor": [1.0 + 0.2 * i for i in range(6)],
                               "long_factor": [2.0 + 0.5 * i for i in range(6)]}),
    "smollm3": dict(arch="smollm3", hidden_size=64, num_layers=4, num_heads=4, num_kv_heads=2,
                    intermediate_size=96),
    "granite": dict(arch="granite", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                    intermediate_size=96, embedding_multiplier=12.0, residual_multiplier=0.22,
                    attention_multiplier=0.0625, logits_scaling=6.0),
}  # fmt: skip


def converter() -> Path:
    """llama.cpp's converter from the llama-cpp-python sdist, unpacked once into the cache."""
    try:
        import llama_cpp

        version = llama_cpp.__version__
    except ImportError:
        version = "0.3.36"
    root = (
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        / "ossa"
        / f"llamacpp-convert-{version}"
    )
    vendor = root / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if (vendor / "convert_hf_to_gguf.py").exists():
        return vendor
    root.mkdir(parents=True, exist_ok=True)
    sdist = root / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.exists():  # (PyPI's JSON for the sdist's address: pip download would prepare a build)
        import json
        import urllib.request

        with urllib.request.urlopen(f"https://pypi.org/pypi/llama-cpp-python/{version}/json") as r:
            url = next(u["url"] for u in json.load(r)["urls"] if u["packagetype"] == "sdist")
        urllib.request.urlretrieve(url, sdist)
    with tarfile.open(sdist) as tar:
        parts = ("/vendor/llama.cpp/convert_hf_to_gguf.py", "/vendor/llama.cpp/conversion/",
                 "/vendor/llama.cpp/gguf-py/")  # fmt: skip
        keep = [m for m in tar.getmembers() if any(p in m.name for p in parts)]
        tar.extractall(root, members=keep, filter="data")
    return vendor


def tokenizer_files(out: Path) -> Path:
    """The default model's tokenizer as a Hugging Face tokenizer folder (transformers' GGUF reading)."""
    from transformers import AutoTokenizer

    from ossa import models

    if not (out / "tokenizer.json").exists():
        gguf = models.resolve("smollm2-135m")
        AutoTokenizer.from_pretrained(
            os.path.dirname(gguf), gguf_file=os.path.basename(gguf)
        ).save_pretrained(out)
    return out


def spm_tokenizer_files(out: Path) -> Path:
    """Mistral 7B v0.1's SentencePiece tokenizer.model (32000 pieces, from mistral-common's wheel) with its
    config, for the converters that read a tokenizer.model (Phi-3, Nemotron, MiniCPM3, ERNIE, ...)."""
    import importlib.util
    import json

    if not (out / "tokenizer.model").exists():
        root = Path(__file__).resolve().parent.parent
        spec = importlib.util.spec_from_file_location(
            "make_gpt2_tokenizer", root / "scripts" / "make_gpt2_tokenizer.py"
        )
        assert spec is not None and spec.loader is not None
        assets = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(assets)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(assets.mistral_tokenizer_model_path(), out / "tokenizer.model")
        config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
                  "tokenizer_class": "LlamaTokenizer"}  # fmt: skip
        (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


# The test modules whose CASES (name -> make_hf_model keywords, or (keywords, formats)) are converted too.
MODULES = tuple(
    """tiny_llamacpp test_more_archs test_forward_hf test_phi3 test_gemma test_gemma2 test_gemma3 test_gpt_oss
    test_deepseek test_glm4_moe test_glm4 test_lfm2 test_llama4 test_cohere test_minimax_m2 test_ministral3
    test_granite test_granite_hybrid test_falcon_h1 test_jamba test_mamba test_mamba2 test_qwen35
    test_qwen3_next test_afmoe test_dbrx test_gpt_classic test_helium""".split()
)


def cases(names: list[str]) -> dict[str, dict[str, Any]]:
    import importlib

    out: dict[str, dict[str, Any]] = dict(BASE)
    for module in MODULES:
        try:
            found = importlib.import_module(module).CASES
        except (ImportError, AttributeError):
            continue
        for n, v in found.items():
            kw = v[0] if isinstance(v, tuple) else v
            if isinstance(kw, dict) and "arch" in kw and n not in out:
                out[n] = dict(kw)
    return {n: kw for n, kw in out.items() if not names or n in names}


def main() -> None:
    from tiny_models import hf_logits, make_hf_model

    from ossa._native import core

    vendor = converter()
    tmp = Path(tempfile.mkdtemp())
    bpe, spm = tokenizer_files(tmp / "tokenizer"), spm_tokenizer_files(tmp / "spm")
    env = {**os.environ, "PYTHONPATH": str(vendor / "gguf-py")}
    for i, (name, kw) in enumerate(cases(sys.argv[1:]).items()):
        tried: tuple[str, Path, int, Any] | None = None
        for tok, vocab in ((bpe, V), (spm, 32000)):  # (the SentencePiece one where the converter asks for it)
            try:
                folder = make_hf_model(tmp / f"{name}-{vocab}", seed=i, **{**kw, "vocab_size": vocab})
            except Exception as e:  # (a case of another vocabulary's shape)
                print(f"{name:20s} not built ({type(e).__name__})", flush=True)
                break
            for f in os.listdir(tok):
                shutil.copy(tok / f, folder)
            out = tmp / f"{name}-{vocab}.gguf"
            command = [sys.executable, str(vendor / "convert_hf_to_gguf.py"), folder, "--outfile", str(out),
                       "--outtype", "f32"]  # fmt: skip
            tried = (folder, out, vocab, subprocess.run(command, env=env, capture_output=True, text=True))
            if tried[3].returncode == 0 or "tokenizer.model" not in tried[3].stderr:
                break
        if tried is None:
            continue
        folder, out, vocab, run = tried
        if run.returncode != 0:
            last = (run.stderr.strip().splitlines() or ["?"])[-1][:90]
            print(f"{name:20s} converter failed: {last}", flush=True)
            continue
        ids = [int(t) for t in np.random.default_rng(i).integers(100, min(40000, vocab), 40)]
        hf = hf_logits(folder, ids)
        try:
            got = core.model_logits(core.load_model(str(out)), ids)
            err = float(np.abs(got - hf).max() / np.abs(hf).max())
            print(f"{name:20s} ossa {err:.2e}{'   <-- differs' if err > 1e-4 else ''}", flush=True)
        except Exception as e:
            print(f"{name:20s} ossa refused: {str(e)[:90]}", flush=True)


if __name__ == "__main__":
    main()
