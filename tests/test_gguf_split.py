"""Split GGUF models as llama.cpp writes them (``name-00001-of-00003.gguf`` …, split.no / split.count /
split.tensors.count, the metadata in the first shard), written here by gguf-py's own GGUFWriter
(``split_max_tensors``, the writer convert_hf_to_gguf.py uses): loading any shard loads every shard,
with logits bitwise equal to the unsplit file's, in C++ and in the twin; the tokenizer, the engine,
`ossa inspect` and Hub ids take them; a missing, renamed, foreign, truncated or corrupt shard is one
clear error, never a crash.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_hub import COMMIT, COMMIT_OLD, FakeHub, put
from test_hub import cache as cache  # noqa: F401  (the fixture)
from tiny_models import hf_to_gguf, make_hf_model, split_gguf

from ossa import LLM, SamplingParams, models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model
from ossa.reference.gguf_split import read_gguf_model

IDS = list(range(3, 40, 2))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str], str]:
    """A tiny Qwen2 model (qkv bias, GQA) in Q8_0: the whole file, its 3 shards, the HF folder."""
    root = tmp_path_factory.mktemp("split")
    hf = make_hf_model(root / "hf", "qwen2", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                       intermediate_size=96, vocab_size=128, seed=3)  # fmt: skip
    whole = hf_to_gguf(hf, root / "whole.gguf", "Q8_0")
    first = hf_to_gguf(hf, root / "tiny.gguf", "Q8_0", split_max_tensors=9)
    shards = models.model_files(first)
    assert [Path(p).name for p in shards] == [f"tiny-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    return whole, shards, hf


def test_every_shard_loads_the_whole_model(tiny: tuple[str, list[str], str]) -> None:
    whole, shards, _ = tiny
    expect = core.model_logits(core.load_model(whole), IDS)
    names = sorted(t[0] for t in core.load_model(whole).tensors())
    config, weights = ref_loader.load_weights(whole)
    twin = ref_model.forward(config, weights, IDS)
    md = core.gguf_metadata(whole)
    for path in shards:
        model = core.load_model(path)
        np.testing.assert_array_equal(core.model_logits(model, IDS), expect)
        assert sorted(t[0] for t in model.tensors()) == names
        assert models.model_files(path) == shards
        c, w = ref_loader.load_weights(path)
        assert c == config == model.config
        np.testing.assert_array_equal(ref_model.forward(c, w, IDS), twin)
        assert read_gguf_model(path).paths == shards
        got = core.gguf_metadata(path)  # the model's metadata, from the first shard
        assert got["split.count"] == 3 and got["split.tensors.count"] == len(names)
        assert {k: v for k, v in got.items() if not k.startswith("split.")} == md
    # Each shard holds only its part of the tensors.
    assert [len(read_gguf_model(whole).shards[0].tensors)] == [len(names)]
    counts = [len(s.tensors) for s in read_gguf_model(shards[0]).shards]
    assert sum(counts) == len(names) and max(counts) <= 9


def test_inspect_lists_the_shards(tiny: tuple[str, list[str], str]) -> None:
    whole, shards, _ = tiny
    info = models.inspect(shards[1])
    assert info["files"] == shards and info["n_tensors"] == models.inspect(whole)["n_tensors"]
    text = models.format_inspect(info)
    assert (
        "split into 3 shards: tiny-00001-of-00003.gguf, tiny-00002-of-00003.gguf, tiny-00003-of-00003.gguf"
        in text
    )
    assert "shards" not in models.format_inspect(models.inspect(whole))


def _both_raise(path: str, match: str) -> None:
    with pytest.raises(core.ModelError, match=match):
        core.load_model(path)
    with pytest.raises(ValueError, match=match):
        ref_loader.load_weights(path)


def test_missing_renamed_and_foreign_shards(tiny: tuple[str, list[str], str], tmp_path: Path) -> None:
    _, shards, hf = tiny
    for f in shards:
        shutil.copy(f, tmp_path)
    a = [str(tmp_path / Path(f).name) for f in shards]
    os.remove(a[2])
    for path in a[:2]:
        _both_raise(path, r"shard 3 of 3 of .* is missing: .*tiny-00003-of-00003\.gguf")
    # A shard under another shard's name.
    shutil.copy(shards[1], a[2])
    _both_raise(a[0], r"tiny-00003-of-00003\.gguf' is not shard 3 of 3 \(its split\.no is 1")
    _both_raise(a[2], "which its name contradicts")
    # A shard of the model renamed out of the pattern: its siblings cannot be found.
    shutil.copy(shards[1], tmp_path / "renamed.gguf")
    _both_raise(str(tmp_path / "renamed.gguf"), "does not end in -NNNNN-of-NNNNN.gguf")
    # A shard of another split of the same name and count: the tensors do not add up.
    shutil.copy(shards[2], a[2])
    foreign = split_gguf(hf_to_gguf(hf, tmp_path / "o.gguf", "F32"), tmp_path / "f", 12)
    assert len(foreign) == 3
    shutil.copy(foreign[1], a[1])
    with pytest.raises(core.ModelError, match="appears in two shards|split.tensors.count says"):
        core.load_model(a[0])
    with pytest.raises(ValueError, match="appears in two shards|split.tensors.count says"):
        ref_loader.load_weights(a[0])


def test_truncated_and_corrupt_shards_raise(tiny: tuple[str, list[str], str], tmp_path: Path) -> None:
    """A shard cut inside its tensor data or its header raises ModelError; random byte changes in a
    shard's header never crash (they load or raise)."""
    _, shards, hf = tiny
    a = [str(tmp_path / Path(f).name) for f in shards]
    data = [Path(f).read_bytes() for f in shards]
    for f, d in zip(a, data, strict=True):
        Path(f).write_bytes(d)
    for cut in (len(data[1]) - 100, 400, 30, 0):
        Path(a[1]).write_bytes(data[1][:cut])
        with pytest.raises(core.ModelError):
            core.load_model(a[0])
        with pytest.raises(ValueError):
            ref_loader.load_weights(a[0])
    rng = np.random.default_rng(0)
    for _ in range(200):
        buf = bytearray(data[1])
        for at in rng.integers(0, 600, 3):
            buf[at] = int(rng.integers(0, 256))
        Path(a[1]).write_bytes(bytes(buf))
        try:
            core.load_model(a[0])
        except core.ModelError:
            pass


def test_engine_runs_a_split_default_model(default_model_path: str, tmp_path: Path) -> None:
    """The default model (SmolLM2-135M, Q4_1) split in 4 by tensor count: generation from its second
    shard (tokenizer and chat template from the first) equals the unsplit file's, token for token."""
    n = len(core.load_model(default_model_path).tensors())
    shards = split_gguf(default_model_path, tmp_path / "smol", n // 4 + 1)
    assert len(shards) == 4
    params = SamplingParams(max_tokens=12, temperature=0.0)
    prompt = "The capital of France is"
    expect = LLM(default_model_path).generate([prompt], params)[0].outputs[0]
    got = LLM(shards[1]).generate([prompt], params)[0].outputs[0]
    assert got.token_ids == expect.token_ids and got.text == expect.text


def test_hub_id_picks_a_split_quant(
    tiny: tuple[str, list[str], str], cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`org/name:Q8_0` resolves to the first shard of a split quant (a file of its own folder, as
    bartowski's and unsloth's repositories lay them out); cached in part and offline: one line; online:
    every shard is fetched."""
    _, shards, hf = tiny
    names = [f"Q8_0/m-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    files: dict[str, bytes | Path] = {n: Path(f) for n, f in zip(names, shards, strict=True)}
    snap = put(cache, "org/split-GGUF", COMMIT, {**files, "m-Q4_K_M.gguf": b"GGUF"})
    path = models.resolve("org/split-GGUF:Q8_0")
    assert path == str(snap / names[0])
    np.testing.assert_array_equal(core.model_logits(core.load_model(path), IDS),
                                  core.model_logits(core.load_model(tiny[0]), IDS))  # fmt: skip
    assert models.resolve("org/split-GGUF:m-Q8_0.gguf") == path
    put(cache, "org/part-GGUF", COMMIT_OLD, {names[0]: Path(shards[0])})
    with pytest.raises(ValueError, match=r"without 2 of its shards .*ossa pull org/part-GGUF:Q8_0"):
        models.resolve("org/part-GGUF:Q8_0")

    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE")
    fake = FakeHub(cache, {"org/part-GGUF": ["README.md", "m-Q4_K_M.gguf", *names]})
    monkeypatch.setattr(huggingface_hub, "list_repo_files", fake.list_repo_files)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake.hf_hub_download)
    assert models.resolve("org/part-GGUF:Q8_0").endswith(names[0])
    assert fake.calls == [("file", n) for n in names]


def test_hub_listing_names_split_models_once(cache: Path) -> None:
    names = ["a-Q8_0.gguf", "a-Q6_K-00001-of-00002.gguf", "a-Q6_K-00002-of-00002.gguf"]
    put(cache, "org/many-GGUF", COMMIT, {n: b"GGUF" for n in names})
    with pytest.raises(ValueError, match=r"pick one with .*: a-Q6_K-00001-of-00002\.gguf, a-Q8_0\.gguf$"):
        models.resolve("org/many-GGUF")
