"""Hugging Face Hub model ids (ossa.hub): lookup in a fake HF cache built in a temporary folder (the
models--org--name/{blobs,refs,snapshots} layout, refs/main honoured), picking one GGUF of several
(org/name:QUANT, --gguf-file), the one-line error offline, and fetching through a stand-in for
huggingface_hub (no network): only the files a model needs. End to end: LLM, ossa generate and
ossa inspect on a Hub id served from the fake cache."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from ossa import LLM, SamplingParams, hub, models

COMMIT_OLD = "a" * 40
COMMIT = "b" * 40


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty HF cache, offline by default; HF_HOME points elsewhere to show HF_HUB_CACHE wins."""
    root = tmp_path / "hf-cache"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    return root


def put(cache: Path, repo_id: str, commit: str, files: dict[str, bytes | Path], main: bool = True) -> Path:
    """Adds a snapshot as huggingface_hub writes it: contents in blobs/, the snapshot's files symlinks
    to them (a Path value links to that file instead: big models are not copied)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    for name, content in files.items():
        dst = snap / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            dst.symlink_to(content)
            continue
        blob = repo / "blobs" / hashlib.sha256(content).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(content)
        dst.symlink_to(os.path.relpath(blob, dst.parent))
    if main:
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
    return snap


def test_parse_id() -> None:
    assert hub.parse_id("Qwen/Qwen2.5-0.5B-Instruct") == ("Qwen/Qwen2.5-0.5B-Instruct", None)
    assert hub.parse_id("org/name-GGUF:Q4_K_M") == ("org/name-GGUF", "Q4_K_M")
    assert hub.parse_id("org/name:model.q8_0.gguf") == ("org/name", "model.q8_0.gguf")
    for bad in ("name", "a/b/c", "/abs/path", "./x/y", "org/..", "org/na me", "org/name:", "org/name:a/b"):
        assert hub.parse_id(bad) is None, bad


def test_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    assert hub.cache_dir() == Path.home() / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub.cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c"))
    assert hub.cache_dir() == tmp_path / "c"


def test_safetensors_repo_from_cache_honours_refs_main(cache: Path) -> None:
    files: dict[str, bytes | Path] = {
        "config.json": b"{}",
        "model.safetensors": b"x",
        "tokenizer.json": b"{}",
    }
    put(cache, "org/tiny", COMMIT_OLD, files)
    new = put(cache, "org/tiny", COMMIT, files)
    assert models.resolve("org/tiny") == str(new)
    (cache / "models--org--tiny" / "refs" / "main").write_text(COMMIT_OLD)
    assert models.resolve("org/tiny").endswith(COMMIT_OLD)


def test_incomplete_snapshot_is_not_used(cache: Path) -> None:
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    put(cache, "org/sharded", COMMIT, {
        "config.json": b"{}", "model.safetensors.index.json": json.dumps(index).encode(),
        "model-00001-of-00002.safetensors": b"x",
    })  # fmt: skip
    with pytest.raises(ValueError, match="nor in the Hugging Face cache"):
        models.resolve("org/sharded")


def test_gguf_repo_picks_one_file(cache: Path) -> None:
    names = ["Model-Q4_K_M.gguf", "Model-Q8_0.gguf", "model.f16.gguf", "Model-Q2_K-00001-of-00002.gguf"]
    snap = put(cache, "org/m-GGUF", COMMIT, {n: b"GGUF" for n in names})
    assert models.resolve("org/m-GGUF") == str(snap / "Model-Q4_K_M.gguf")  # llama.cpp's default
    assert models.resolve("org/m-GGUF:Q8_0") == str(snap / "Model-Q8_0.gguf")
    assert models.resolve("org/m-GGUF:q8_0") == str(snap / "Model-Q8_0.gguf")
    assert models.resolve("org/m-GGUF:F16") == str(snap / "model.f16.gguf")
    assert models.resolve("org/m-GGUF:Model-Q8_0.gguf") == str(snap / "Model-Q8_0.gguf")
    with pytest.raises(
        ValueError, match=r"matching 'Q5_K_M' \(its GGUF files: Model-Q2_K-00001-of-00002.gguf, Mo"
    ):
        models.resolve("org/m-GGUF:Q5_K_M")
    one = put(cache, "org/one", COMMIT, {"only.Q6_K.gguf": b"GGUF"})
    assert models.resolve("org/one") == str(one / "only.Q6_K.gguf")
    put(cache, "org/many", COMMIT, {"a-Q8_0.gguf": b"GGUF", "a-Q6_K.gguf": b"GGUF"})
    with pytest.raises(ValueError, match=r"several GGUF files; pick one with org/many:QUANT"):
        models.resolve("org/many")


def test_offline_and_not_cached_is_one_line(cache: Path) -> None:
    with pytest.raises(ValueError) as e:
        models.resolve("Qwen/Qwen2.5-0.5B-Instruct")
    msg = str(e.value)
    assert "\n" not in msg
    assert "neither a local path nor in the Hugging Face cache" in msg and "HF_HUB_OFFLINE" in msg
    assert "ossa pull Qwen/Qwen2.5-0.5B-Instruct" in msg
    with pytest.raises(ValueError, match="not a GGUF file, a Hugging Face folder, a Hub id"):
        models.resolve("no-such-model")


class FakeHub:
    """Stands in for huggingface_hub: a repository listing, and downloads written into the cache."""

    def __init__(self, cache: Path, repos: dict[str, list[str]], fail: bool = False) -> None:
        self.cache, self.repos, self.fail = cache, repos, fail
        self.calls: list[tuple[str, Any]] = []

    def list_repo_files(self, repo_id: str) -> list[str]:
        if self.fail:
            raise OSError("Temporary failure in name resolution\nmore detail")
        return self.repos[repo_id]

    def snapshot_download(self, repo_id: str, *, allow_patterns: list[str], cache_dir: Path) -> str:
        assert Path(cache_dir) == self.cache
        self.calls.append(("snapshot", sorted(allow_patterns)))
        return str(put(self.cache, repo_id, COMMIT, {f: b"{}" for f in allow_patterns}))

    def hf_hub_download(self, repo_id: str, filename: str, *, cache_dir: Path) -> str:
        self.calls.append(("file", filename))
        return str(put(self.cache, repo_id, COMMIT, {filename: b"GGUF"}) / filename)


@pytest.fixture
def fake_hub(cache: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE")
    fake = FakeHub(cache, {
        "org/st": ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                   "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json",
                   "chat_template.jinja", "pytorch_model.bin", "README.md",
                   "original/consolidated.safetensors", "onnx/model.onnx", "generation_config.json"],
        "org/g": ["README.md", "x-Q4_K_M.gguf", "x-Q8_0.gguf", "x-IQ4_XS.gguf"],
    })  # fmt: skip
    for name in ("list_repo_files", "snapshot_download", "hf_hub_download"):
        monkeypatch.setattr(huggingface_hub, name, getattr(fake, name))
    return fake


def test_fetch_only_the_files_a_model_needs(fake_hub: FakeHub) -> None:
    path = models.resolve("org/st")
    assert fake_hub.calls == [("snapshot", [
        "chat_template.jinja", "config.json", "generation_config.json", "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json",
        "tokenizer_config.json",
    ])]  # fmt: skip
    assert Path(path, "config.json").is_file()
    assert models.resolve("org/g:IQ4_XS").endswith("x-IQ4_XS.gguf")
    assert models.resolve("org/g").endswith("x-Q4_K_M.gguf")
    assert fake_hub.calls[1:] == [("file", "x-IQ4_XS.gguf"), ("file", "x-Q4_K_M.gguf")]
    # A tag not in the cache is fetched; one in the cache is served without reaching the Hub.
    assert models.resolve("org/g:Q8_0").endswith("x-Q8_0.gguf")
    assert fake_hub.calls[-1] == ("file", "x-Q8_0.gguf")
    n = len(fake_hub.calls)
    models.resolve("org/g:IQ4_XS")
    assert len(fake_hub.calls) == n


def test_fetch_failure_is_one_line(fake_hub: FakeHub) -> None:
    fake_hub.fail = True
    with pytest.raises(
        ValueError, match=r"^cannot fetch 'org/st' from the Hugging Face Hub: Temporary failure"
    ):
        models.resolve("org/st")


def test_without_huggingface_hub(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails
    with pytest.raises(ValueError, match="fetching it needs huggingface_hub"):
        models.resolve("org/absent")


@pytest.fixture
def smol_repo(cache: Path, default_model_path: str) -> str:
    """The default model as one of two GGUF files of a cached Hub repository."""
    put(cache, "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", COMMIT, {
        "smollm2-135m-instruct-q4_1.gguf": Path(default_model_path),
        "smollm2-135m-instruct-q8_0.gguf": b"GGUF",
    })  # fmt: skip
    return "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"


def test_llm_and_cli_take_a_hub_id(smol_repo: str, default_model_path: str, capsys: Any) -> None:
    from ossa import cli

    sp = SamplingParams(temperature=0.0, max_tokens=6)
    by_id = LLM(f"{smol_repo}:Q4_1", kv_cache_memory_bytes=32 << 20)
    by_path = LLM(default_model_path, kv_cache_memory_bytes=32 << 20)
    text = by_id.generate("The capital of France is", sp, use_tqdm=False)[0].outputs[0].text
    assert text == by_path.generate("The capital of France is", sp, use_tqdm=False)[0].outputs[0].text
    assert by_id.model_path.endswith("smollm2-135m-instruct-q4_1.gguf")
    assert cli.main(["inspect", smol_repo, "--gguf-file", "smollm2-135m-instruct-q4_1.gguf"]) == 0
    assert "architecture  llama" in capsys.readouterr().out
    args = ["generate", "The capital of France is", "--model", smol_repo, "--gguf-file", "Q4_1"]
    assert cli.main([*args, "--max-tokens", "6", "--kv-cache-memory-bytes", str(32 << 20)]) == 0
    assert capsys.readouterr().out == "The capital of France is" + text + "\n"
    assert cli.main(["inspect", default_model_path, "--gguf-file", "Q4_1"]) == 2
    assert "--gguf-file needs a Hugging Face model id" in capsys.readouterr().err


def test_pull_takes_a_hub_id(smol_repo: str, capsys: Any) -> None:
    assert models.pull(f"{smol_repo}:Q4_1").endswith("q4_1.gguf")
    shutil.rmtree(hub.cache_dir())
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE is set"):
        models.pull(smol_repo)
