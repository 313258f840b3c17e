"""Hugging Face folders: config.json (transformers 4.x and 5.x), single and sharded safetensors."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import tiny_models
import torch
from safetensors.torch import load_file, save_file

from ossa._native import core
from ossa.reference.loader import load_weights
from ossa.reference.safetensors import read_safetensors

HF_NAMES = {
    "tok_embd": "model.embed_tokens.weight", "output_norm": "model.norm.weight", "output": "lm_head.weight",
    "attn_norm": "input_layernorm.weight", "wq": "self_attn.q_proj.weight", "wk": "self_attn.k_proj.weight",
    "wv": "self_attn.v_proj.weight", "wo": "self_attn.o_proj.weight", "bq": "self_attn.q_proj.bias",
    "bk": "self_attn.k_proj.bias", "bv": "self_attn.v_proj.bias", "q_norm": "self_attn.q_norm.weight",
    "k_norm": "self_attn.k_norm.weight", "ffn_norm": "post_attention_layernorm.weight",
    "w_gate": "mlp.gate_proj.weight", "w_up": "mlp.up_proj.weight", "w_down": "mlp.down_proj.weight",
}  # fmt: skip


def hf_name(canonical: str) -> str:
    parts = canonical.split(".")
    if parts[0] == "layers":
        return f"model.layers.{parts[1]}.{HF_NAMES[parts[2]]}"
    return HF_NAMES[canonical]


CASES = {
    # arch, kwargs: odd sizes, head_dim != hidden/heads, GQA ratios 1, 3, 4
    "llama-f32": ("llama", dict(num_heads=6, num_kv_heads=2, head_dim=12, dtype="float32")),
    "qwen2-bf16": ("qwen2", dict(num_heads=4, num_kv_heads=4, dtype="bfloat16")),
    "qwen3-f16-tied": ("qwen3", dict(num_heads=8, num_kv_heads=2, head_dim=16, dtype="float16", tie=True)),
    "mistral-f32": ("mistral", dict(num_heads=4, num_kv_heads=1, dtype="float32")),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("hf")
    return {
        name: tiny_models.make_hf_model(
            root / name, arch, hidden_size=48, num_layers=2, intermediate_size=72, vocab_size=83, seed=3, **kw
        )
        for name, (arch, kw) in CASES.items()
    }


@pytest.mark.parametrize("case", list(CASES))
def test_hf_folder_twin_and_oracle(folders: dict[str, str], case: str) -> None:
    arch, kw = CASES[case]
    path = folders[case]
    m = core.load_model(path)
    cfg, w = load_weights(path)
    assert m.config == cfg
    assert m.format == "safetensors"
    assert cfg["arch"] == arch and cfg["rope_style"] == "neox"
    assert cfg["head_dim"] == kw.get("head_dim", 48 // kw["num_heads"])
    assert (cfg["n_head"], cfg["n_head_kv"], cfg["n_vocab"], cfg["n_ff"]) == (
        kw["num_heads"],
        kw["num_kv_heads"],
        83,
        72,
    )
    assert cfg["qkv_bias"] == (arch == "qwen2") and cfg["qk_norm"] == (arch == "qwen3")
    assert cfg["tied_embeddings"] == bool(kw.get("tie"))
    assert cfg["rms_eps"] == float(np.float32(1e-6))
    oracle = {
        k: v.to(torch.float32).numpy() for k, v in load_file(str(Path(path) / "model.safetensors")).items()
    }
    for name, arr in w.items():
        mine = core.dequantize_tensor(m, name).reshape(arr.shape)
        assert np.array_equal(mine.view(np.uint32), arr.view(np.uint32)), name
        ref = oracle[hf_name("tok_embd" if name == "output" and cfg["tied_embeddings"] else name)]
        assert np.array_equal(mine, ref.reshape(mine.shape)), name
    dtype = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}[kw["dtype"]]
    types = {t[0]: t[1] for t in m.tensors()}
    assert types["model.layers.0.mlp.up_proj.weight"] == dtype
    assert types["model.norm.weight"] == dtype  # stored type; the canonical vector view is F32


def test_sharded_folder(folders: dict[str, str], tmp_path: Path) -> None:
    src = Path(folders["llama-f32"])
    dst = tmp_path / "sharded"
    dst.mkdir()
    shutil.copy(src / "config.json", dst / "config.json")
    tensors = load_file(str(src / "model.safetensors"))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for file, part in shards.items():
        save_file({n: tensors[n] for n in part}, str(dst / file))
        weight_map.update({n: file for n in part})
    (dst / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    a, b = core.load_model(str(src)), core.load_model(str(dst))
    assert a.config == b.config
    cfg, w = load_weights(str(dst))
    assert cfg == b.config
    for name in w:
        assert np.array_equal(core.dequantize_tensor(a, name), core.dequantize_tensor(b, name)), name
    # ossa inspect names the shards; a shard's own path, or the shards without their config.json,
    # say what to pass instead
    from ossa import models

    info = models.inspect(str(dst))
    assert info["files"] == [str(dst / f) for f in shards] and info["n_tensors"] == len(names)
    assert "split into 2 shards: model-00001-of-00002.safetensors" in models.format_inspect(info)
    with pytest.raises(core.ModelError, match="file of the Hugging Face model folder .*: pass the folder"):
        core.load_model(str(dst / "model-00001-of-00002.safetensors"))
    bare = tmp_path / "bare"
    bare.mkdir()
    for file in shards:
        shutil.copy(dst / file, bare / file)
    with pytest.raises(core.ModelError, match=r"weights \(2 files: .*\) but no config.json"):
        core.load_model(str(bare))
    # a shard name escaping the folder is refused
    weight_map[names[0]] = "../evil.safetensors"
    (dst / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(core.ModelError, match="invalid file name"):
        core.load_model(str(dst))


def copy_folder(src: str, dst: Path, edit=None) -> str:  # type: ignore[no-untyped-def]
    shutil.copytree(src, dst)
    if edit is not None:
        cfg = json.loads((dst / "config.json").read_text())
        edit(cfg)
        (dst / "config.json").write_text(json.dumps(cfg))
    return str(dst)


def test_config_transformers4_style(folders: dict[str, str], tmp_path: Path) -> None:
    def v4(cfg: dict) -> None:  # type: ignore[type-arg]
        del cfg["rope_parameters"]
        cfg["rope_theta"] = 500000.0
        cfg["rope_scaling"] = {"type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}  # fmt: skip

    path = copy_folder(folders["llama-f32"], tmp_path / "v4", v4)
    cfg = core.load_model(path).config
    assert cfg == load_weights(path)[0]
    assert cfg["rope_theta"] == 500000.0
    assert cfg["rope_scaling"] == {"type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position": 8192,
                                   "short_factor": [], "long_factor": [], "attn_factor": 1.0,
                                   "beta_fast": 32.0, "beta_slow": 1.0, "truncate": True}  # fmt: skip


def test_config_transformers5_rope_parameters(tmp_path: Path) -> None:
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 2.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}  # fmt: skip
    path = tiny_models.make_hf_model(tmp_path / "m", "llama", hidden_size=32, num_layers=1, num_heads=2,
                                     num_kv_heads=1, intermediate_size=64, vocab_size=50, rope_theta=12345.0,
                                     rope_scaling=scaling)  # fmt: skip
    written = json.loads((Path(path) / "config.json").read_text())
    assert "rope_parameters" in written  # what transformers 5 writes
    cfg = core.load_model(path).config
    assert cfg == load_weights(path)[0]
    assert cfg["rope_theta"] == 12345.0
    assert cfg["rope_scaling"] == {"type": "llama3", "factor": 8.0, "low_freq_factor": 2.0,
                                   "high_freq_factor": 4.0, "original_max_position": 64,
                                   "short_factor": [], "long_factor": [], "attn_factor": 1.0,
                                   "beta_fast": 32.0, "beta_slow": 1.0, "truncate": True}  # fmt: skip


def test_errors_name_the_problem(folders: dict[str, str], tmp_path: Path) -> None:
    src = folders["llama-f32"]

    def arch(cfg: dict) -> None:  # type: ignore[type-arg]
        cfg["model_type"] = "xyz"

    with pytest.raises(core.ModelError, match="unknown architecture 'xyz'"):
        core.load_model(copy_folder(src, tmp_path / "a", arch))

    def dynamic(cfg: dict) -> None:  # type: ignore[type-arg]
        # (dynamic NTK is read: it changes nothing within the context; an unknown type is refused)
        cfg["rope_parameters"] = {"rope_type": "ntk-by-parts", "rope_theta": 1e4, "factor": 4.0}

    with pytest.raises(core.ModelError, match="unsupported rope scaling type 'ntk-by-parts'"):
        core.load_model(copy_folder(src, tmp_path / "b", dynamic))

    def layers(cfg: dict) -> None:  # type: ignore[type-arg]
        cfg["num_hidden_layers"] = 3

    with pytest.raises(core.ModelError, match="missing tensor 'model.layers.2.input_layernorm.weight'"):
        core.load_model(copy_folder(src, tmp_path / "c", layers))

    def ff(cfg: dict) -> None:  # type: ignore[type-arg]
        cfg["intermediate_size"] = 70

    with pytest.raises(
        core.ModelError, match=r"shape mismatch for tensor 'model.layers.0.mlp.gate_proj.weight'"
    ):
        core.load_model(copy_folder(src, tmp_path / "d", ff))

    # an unsupported stored dtype is named
    d = Path(copy_folder(src, tmp_path / "e"))
    tensors = load_file(str(d / "model.safetensors"))
    tensors["model.norm.weight"] = tensors["model.norm.weight"].to(torch.float64)
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(core.ModelError, match="unsupported .*'F64' for tensor 'model.norm.weight'"):
        core.load_model(str(d))
    with pytest.raises(ValueError, match="unsupported dtype 'F64'"):
        load_weights(str(d))

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(core.ModelError, match="without config.json"):
        core.load_model(str(empty))


def test_header_checks(folders: dict[str, str], tmp_path: Path) -> None:
    src = Path(folders["llama-f32"]) / "model.safetensors"
    data = src.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    name = "model.norm.weight"
    assert read_safetensors(str(src)).tensors[name].shape == header[name]["shape"]

    def write(h: dict, body: bytes) -> str:  # type: ignore[type-arg]
        raw = json.dumps(h).encode()
        p = tmp_path / "bad.safetensors"
        p.write_bytes(struct.pack("<Q", len(raw)) + raw + body)
        d = tmp_path / "bad"
        d.mkdir(exist_ok=True)
        shutil.copy(src.parent / "config.json", d / "config.json")
        shutil.copy(p, d / "model.safetensors")
        return str(d)

    body = data[8 + n :]
    h = json.loads(json.dumps(header))
    h[name]["data_offsets"][1] += 4
    with pytest.raises(core.ModelError, match="do not match its shape"):
        core.load_model(write(h, body))
    h = json.loads(json.dumps(header))
    h[name]["data_offsets"] = [len(body), len(body) + 4 * h[name]["shape"][0]]
    with pytest.raises(core.ModelError, match="past the end of the file"):
        core.load_model(write(h, body))
    h = json.loads(json.dumps(header))
    h[name]["shape"] = [2**40, 2**40]
    with pytest.raises(core.ModelError, match="do not match|overflows"):
        core.load_model(write(h, body))
