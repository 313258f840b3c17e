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
        self.hub_kwargs: list[tuple[str, dict[str, Any]]] = []  # revision / token of each call

    def list_repo_files(self, repo_id: str, **kw: Any) -> list[str]:
        if self.fail:
            raise OSError("Temporary failure in name resolution\nmore detail")
        self.hub_kwargs.append(("list", kw))
        return self.repos[repo_id]

    def snapshot_download(
        self, repo_id: str, *, allow_patterns: list[str], cache_dir: Path, **kw: Any
    ) -> str:
        assert Path(cache_dir) == self.cache
        self.calls.append(("snapshot", sorted(allow_patterns)))
        self.hub_kwargs.append(("snapshot", kw))
        commit = kw.get("revision") or COMMIT
        return str(put(self.cache, repo_id, commit, {f: b"{}" for f in allow_patterns}))

    def hf_hub_download(self, repo_id: str, filename: str, *, cache_dir: Path, **kw: Any) -> str:
        assert Path(cache_dir) == self.cache
        self.calls.append(("file", filename))
        self.hub_kwargs.append(("file", kw))
        return str(put(self.cache, repo_id, COMMIT, {filename: b"GGUF"}) / filename)


@pytest.fixture
def fake_hub(cache: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE")
    fake = FakeHub(cache, {
        "org/st": ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                   "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json",
                   "chat_template.jinja", "pytorch_model.bin", "README.md",
                   "original/consolidated.safetensors", "onnx/model.onnx", "generation_config.json",
                   "additional_chat_templates/tool_use.jinja", "additional_chat_templates/x/y.jinja"],
        "org/g": ["README.md", "x-Q4_K_M.gguf", "x-Q8_0.gguf", "x-IQ4_XS.gguf"],
    })  # fmt: skip
    for name in ("list_repo_files", "snapshot_download", "hf_hub_download"):
        monkeypatch.setattr(huggingface_hub, name, getattr(fake, name))
    return fake


def test_fetch_only_the_files_a_model_needs(fake_hub: FakeHub) -> None:
    path = models.resolve("org/st")
    assert fake_hub.calls == [("snapshot", [
        "additional_chat_templates/tool_use.jinja", "chat_template.jinja", "config.json",
        "generation_config.json", "model-00001-of-00002.safetensors",
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


def test_revision_and_download_dir(cache: Path, tmp_path: Path) -> None:
    files: dict[str, bytes | Path] = {"config.json": b"{}", "model.safetensors": b"x"}
    new = put(cache, "org/tiny", COMMIT, files)
    old = put(cache, "org/tiny", COMMIT_OLD, files, main=False)
    (cache / "models--org--tiny" / "refs" / "v1.0").write_text(COMMIT_OLD)
    assert models.resolve("org/tiny") == str(new)
    assert models.resolve("org/tiny", hub.Source(revision="v1.0")) == str(old)  # a tag: refs/v1.0
    assert models.resolve("org/tiny", hub.Source(revision=COMMIT_OLD)) == str(old)  # a commit
    with pytest.raises(ValueError) as e:
        models.resolve("org/tiny", hub.Source(revision="v2"))
    assert "at revision 'v2'" in str(e.value) and "ossa pull org/tiny --revision v2" in str(e.value)
    # A lone snapshot without refs stands for main only, not for any revision asked for.
    put(cache, "org/norefs", COMMIT, files, main=False)
    assert models.resolve("org/norefs").endswith(COMMIT)
    with pytest.raises(ValueError, match="at revision 'dev'"):
        models.resolve("org/norefs", hub.Source(revision="dev"))
    # download_dir is the cache folder instead of HF_HUB_CACHE.
    other = tmp_path / "downloads"
    elsewhere = put(other, "org/tiny", COMMIT_OLD, files)
    assert models.resolve("org/tiny", hub.Source(download_dir=str(other))) == str(elsewhere)
    with pytest.raises(ValueError, match=f"Hugging Face cache \\({other}\\)"):
        models.resolve("org/absent", hub.Source(download_dir=str(other)))


def test_fetch_passes_revision_and_token(fake_hub: FakeHub) -> None:
    source = hub.Source(revision="c" * 40, token="hf_secret")
    path = models.resolve("org/st", source)
    assert path.endswith("c" * 40)
    assert models.resolve("org/g:Q8_0", source).endswith("x-Q8_0.gguf")
    want = {"revision": "c" * 40, "token": "hf_secret"}
    assert fake_hub.hub_kwargs == [("list", want), ("snapshot", want), ("list", want), ("file", want)]
    fake_hub.hub_kwargs.clear()
    models.resolve("org/g:x-IQ4_XS.gguf")
    assert fake_hub.hub_kwargs == [("list", {}), ("file", {})]  # huggingface_hub's own defaults
    fake_hub.fail = True
    with pytest.raises(ValueError, match=r"^cannot fetch 'org/st' at revision 'v9' from the Hugging Face"):
        models.resolve("org/st", hub.Source(revision="v9"))


def test_tokenizer_hub_id_fetches_only_tokenizer_files(fake_hub: FakeHub) -> None:
    path = models.resolve_tokenizer("org/st", hub.Source(revision="v2"))
    assert fake_hub.calls == [("snapshot", [
        "additional_chat_templates/tool_use.jinja", "chat_template.jinja", "generation_config.json",
        "tokenizer.json", "tokenizer_config.json",
    ])]  # fmt: skip
    assert fake_hub.hub_kwargs[0] == ("list", {"revision": "v2"})
    assert Path(path, "tokenizer.json").is_file() and not Path(path, "config.json").exists()
    # Cached now: no second download. The tokenizer files alone do not make the model cached.
    assert models.resolve_tokenizer("org/st", hub.Source(revision="v2")) == path
    assert len(fake_hub.calls) == 1
    # A repository of GGUF files only: its GGUF carries the tokenizer.
    assert models.resolve_tokenizer("org/g").endswith("x-Q4_K_M.gguf")
    assert models.resolve_tokenizer("org/g:Q8_0").endswith("x-Q8_0.gguf")
    with pytest.raises(ValueError, match="tokenizer 'no-such' is not a tokenizer.json, a folder"):
        models.resolve_tokenizer("no-such")


def test_llm_takes_a_tokenizer_hub_id(cache: Path, default_model_path: str, tmp_path: Path) -> None:
    """vLLM's documented way to run a GGUF file: LLM("x.gguf", tokenizer="org/name")."""
    import hf_gguf

    saved = tmp_path / "tok"
    hf_gguf.tokenizer(default_model_path).save_pretrained(saved)
    files: dict[str, bytes | Path] = {p.name: p.read_bytes() for p in saved.iterdir() if p.is_file()}
    assert "tokenizer.json" in files
    put(cache, "HuggingFaceTB/SmolLM2-135M-Instruct", COMMIT, files)
    sp = SamplingParams(temperature=0.0, max_tokens=6)
    llm = LLM(
        default_model_path, tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct", kv_cache_memory_bytes=32 << 20
    )
    plain = LLM(default_model_path, kv_cache_memory_bytes=32 << 20)
    for text in ("The capital of France is", "  déjà vu\n\t<|im_start|>user"):
        assert llm.tokenizer.encode(text) == plain.tokenizer.encode(text)
    prompt = "The capital of France is"
    assert (
        llm.generate(prompt, sp, use_tqdm=False)[0].outputs[0].text
        == plain.generate(prompt, sp, use_tqdm=False)[0].outputs[0].text
    )
    with pytest.raises(ValueError, match="at revision 'nope'"):
        LLM(default_model_path, tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct", tokenizer_revision="nope")
    with pytest.raises(ValueError, match="revision must be a non-empty string"):
        LLM(default_model_path, revision="")
    with pytest.raises(ValueError, match="hf_token must be a string or a bool"):
        LLM(default_model_path, hf_token=3)


def test_cli_pull_and_inspect_take_revision_and_download_dir(
    smol_repo: str, cache: Path, tmp_path: Path, capsys: Any
) -> None:
    from ossa import cli

    moved = tmp_path / "moved"
    shutil.move(str(cache), str(moved))
    assert cli.main(["pull", f"{smol_repo}:Q4_1", "--download-dir", str(moved)]) == 0
    assert capsys.readouterr().out.strip().startswith(str(moved))
    assert cli.main(["inspect", smol_repo, "--gguf-file", "Q4_1", "--download-dir", str(moved),
                     "--revision", COMMIT]) == 0  # fmt: skip
    assert "architecture  llama" in capsys.readouterr().out
    assert cli.main(["pull", smol_repo, "--revision", "v3", "--download-dir", str(moved)]) == 2
    assert "at revision 'v3'" in capsys.readouterr().err
