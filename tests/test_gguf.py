"""GGUF reading: C++ reader vs the NumPy twin vs the `gguf` package (the oracle), and error reporting."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest
import tiny_models
from gguf import GGMLQuantizationType as QT

from ossa._native import core
from ossa.reference.gguf import read_gguf
from ossa.reference.loader import load_weights


def oracle_dequant(path: str) -> dict[str, np.ndarray]:
    """Every tensor of a GGUF file dequantized by the gguf package, as [rows, cols]."""
    out = {}
    for t in gguf.GGUFReader(path).tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        out[t.name] = a.reshape(-1, int(t.shape[0]))
    return out


def assert_bitwise(a: np.ndarray, b: np.ndarray, what: str) -> None:
    assert a.shape == b.shape, what
    assert a.dtype == b.dtype == np.float32, what
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), what


# ---- the default model ------------------------------------------------------------------------


def test_default_model_metadata_and_config(default_model_path: str) -> None:
    md = core.gguf_metadata(default_model_path)
    twin = read_gguf(default_model_path)
    assert twin.version == 3
    assert md == twin.metadata
    assert md["general.architecture"] == "llama"
    assert len(md["tokenizer.ggml.tokens"]) == 49152
    assert isinstance(md["tokenizer.chat_template"], str)
    m = core.load_model(default_model_path)
    cfg, _ = load_weights(default_model_path)
    assert m.config == cfg
    assert (cfg["n_layer"], cfg["n_embd"], cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"]) == (
        30,
        576,
        9,
        3,
        64,
    )
    assert cfg["rope_style"] == "interleaved" and cfg["tied_embeddings"]
    assert m.format == "gguf"
    listed = {t[0]: t for t in m.tensors()}
    assert set(listed) == set(twin.tensors)
    assert listed["token_embd.weight"][1:4] == ("Q8_0", 49152, 576)


def test_default_model_dequant_twin_and_oracle(default_model_path: str) -> None:
    m = core.load_model(default_model_path)
    twin = read_gguf(default_model_path)
    oracle = oracle_dequant(default_model_path)
    types = set()
    for name, info in twin.tensors.items():
        mine = core.dequantize_tensor(m, name)
        assert_bitwise(mine, twin.tensor(name), name)
        assert_bitwise(mine, oracle[name], name)
        types.add(info.type_name)
    assert types == {"F32", "Q4_1", "Q8_0"}


def test_default_model_canonical_names(default_model_path: str) -> None:
    m = core.load_model(default_model_path)
    _, w = load_weights(default_model_path)
    assert "output" in w and w["output"] is w["tok_embd"]
    for name in [
        "tok_embd",
        "output_norm",
        "output",
        "layers.0.wq",
        "layers.29.w_down",
        "layers.7.attn_norm",
    ]:
        assert_bitwise(core.dequantize_tensor(m, name).reshape(w[name].shape), w[name], name)
    with pytest.raises(ValueError, match="no tensor 'layers.30.wq'"):
        core.dequantize_tensor(m, "layers.30.wq")


# ---- tiny converted models, every writable type ---------------------------------------------------


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("gguf_tiny")
    common = dict(hidden_size=64, num_layers=2, intermediate_size=96, vocab_size=96, seed=1)
    return {
        "llama": tiny_models.make_hf_model(root / "llama", "llama", num_heads=4, num_kv_heads=2, head_dim=24,
                                           rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                         "original_max_position_embeddings": 64}, **common),
        "qwen2": tiny_models.make_hf_model(root / "qwen2", "qwen2", num_heads=4, num_kv_heads=4, **common),
        "qwen3": tiny_models.make_hf_model(root / "qwen3", "qwen3", num_heads=6, num_kv_heads=2, head_dim=32,
                                           tie=True, **common),
    }  # fmt: skip


@pytest.mark.parametrize("ftype", ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1"])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_tiny_gguf_twin_and_oracle(tiny_hf: dict[str, str], tmp_path: Path, arch: str, ftype: str) -> None:
    path = tiny_models.hf_to_gguf(tiny_hf[arch], tmp_path / f"{arch}-{ftype}.gguf", ftype)
    m = core.load_model(path)
    cfg, w = load_weights(path)
    assert m.config == cfg
    hf_cfg, _ = load_weights(tiny_hf[arch])
    for key in ["n_vocab", "n_embd", "n_layer", "n_head", "n_head_kv", "head_dim", "n_ff", "rms_eps",
                "rope_theta", "qkv_bias", "qk_norm", "tied_embeddings"]:  # fmt: skip
        assert cfg[key] == hf_cfg[key], key
    if arch == "llama":  # (Llama-3 scaling: llama.cpp's rope_freqs tensor in the file, no key)
        assert cfg["rope_scaling"]["type"] == "none" and len(cfg["rope_freqs"]) == 12
        from ossa.reference.model import rope_inv_freq

        np.testing.assert_allclose(rope_inv_freq(cfg), rope_inv_freq(hf_cfg), rtol=1e-6)
        assert not np.allclose(rope_inv_freq(cfg), rope_inv_freq(dict(hf_cfg, rope_scaling={"type": "none"})))
    else:
        assert cfg["rope_scaling"] == hf_cfg["rope_scaling"]
    assert cfg["rope_style"] == ("interleaved" if arch == "llama" else "neox")
    twin = read_gguf(path)
    oracle = oracle_dequant(path)
    seen = set()
    for name in twin.tensors:
        mine = core.dequantize_tensor(m, name)
        assert_bitwise(mine, twin.tensor(name), name)
        assert_bitwise(mine, oracle[name], name)
        seen.add(twin.tensors[name].type_name)
    assert ftype in seen
    for name, arr in w.items():
        assert_bitwise(core.dequantize_tensor(m, name).reshape(arr.shape), arr, name)


def test_llama_qk_permutation(tiny_hf: dict[str, str], tmp_path: Path) -> None:
    """GGUF llama files hold Q/K rows permuted so interleaved RoPE pairs (2i, 2i+1) = HF's (i, i+d/2)."""
    path = tiny_models.hf_to_gguf(tiny_hf["llama"], tmp_path / "llama.gguf", "F32")
    g = core.load_model(path)
    h = core.load_model(tiny_hf["llama"])
    hd = 24
    for name, n_head in [("layers.1.wq", 4), ("layers.1.wk", 2)]:
        hf = core.dequantize_tensor(h, name).reshape(n_head, hd, -1)
        gg = core.dequantize_tensor(g, name).reshape(n_head, hd, -1)
        np.testing.assert_array_equal(gg[:, 0::2], hf[:, : hd // 2])
        np.testing.assert_array_equal(gg[:, 1::2], hf[:, hd // 2 :])
    np.testing.assert_array_equal(
        core.dequantize_tensor(g, "layers.1.wv"), core.dequantize_tensor(h, "layers.1.wv")
    )


# ---- K-quants: gguf cannot quantize them, so use random blocks with sane scales ----------------


def random_kquant_rows(t: QT, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[t]
    raw = rng.integers(0, 256, size=(rows, cols // block_elems, block_bytes), dtype=np.uint8)
    scales = rng.uniform(-0.05, 0.05, size=raw.shape[:2] + (2,)).astype(np.float16).view(np.uint8)
    if t == QT.Q4_K:
        raw[..., 0:4] = scales.reshape(raw.shape[:2] + (4,))  # d, dmin
    else:
        raw[..., 208:210] = scales.reshape(raw.shape[:2] + (4,))[..., :2]  # d
    return raw.reshape(rows, -1)


def test_kquants_twin_and_oracle(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    path = str(tmp_path / "kquants.gguf")
    w = gguf.GGUFWriter(path, "llama")
    shapes = {"q4k.weight": (QT.Q4_K, 3, 512), "q6k.weight": (QT.Q6_K, 5, 256), "q8.weight": (QT.Q8_0, 2, 64)}
    for name, (t, rows, cols) in shapes.items():
        if t == QT.Q8_0:
            raw = gguf.quants.quantize(rng.standard_normal((rows, cols)).astype(np.float32), t)
        else:
            raw = random_kquant_rows(t, rows, cols, rng)
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    twin = read_gguf(path)
    oracle = oracle_dequant(path)
    # load_model would reject this file (no model in it): read the tensors through a dummy handle.
    with pytest.raises(ValueError, match="embedding_length"):
        core.load_model(path)
    for name, (_, rows, cols) in shapes.items():
        a = twin.tensor(name)
        assert a.shape == (rows, cols)
        assert_bitwise(a, oracle[name], name)
    _check_cpp_kquants(tmp_path, rng)


def _check_cpp_kquants(tmp_path: Path, rng: np.random.Generator) -> None:
    """A tiny llama whose matrices are Q4_K/Q6_K: C++ dequant == twin == oracle, bitwise."""
    e, ff, v = 256, 512, 32
    path = str(tmp_path / "kq-model.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_embedding_length(e)
    w.add_block_count(1)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_feed_forward_length(ff)
    w.add_context_length(64)
    mats = {
        "token_embd.weight": (QT.Q6_K, v, e),
        "blk.0.attn_q.weight": (QT.Q4_K, e, e),
        "blk.0.attn_k.weight": (QT.Q6_K, e, e),
        "blk.0.attn_v.weight": (QT.Q4_K, e, e),
        "blk.0.attn_output.weight": (QT.Q6_K, e, e),
        "blk.0.ffn_gate.weight": (QT.Q4_K, ff, e),
        "blk.0.ffn_up.weight": (QT.Q4_K, ff, e),
        "blk.0.ffn_down.weight": (QT.Q6_K, e, ff),
    }
    for name, (t, rows, cols) in mats.items():
        raw = random_kquant_rows(t, rows, cols, rng)
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=t)
    for name in ["output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"]:
        w.add_tensor(name, rng.standard_normal(e).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    m = core.load_model(path)
    twin = read_gguf(path)
    oracle = oracle_dequant(path)
    for name in twin.tensors:
        mine = core.dequantize_tensor(m, name)
        assert_bitwise(mine, twin.tensor(name), name)
        assert_bitwise(mine, oracle[name], name)
    assert {t[1] for t in m.tensors()} == {"Q4_K", "Q6_K", "F32"}


# ---- metadata value types, versions --------------------------------------------------------------


def test_all_metadata_types_and_v2(tmp_path: Path) -> None:
    path = str(tmp_path / "meta.gguf")
    w = gguf.GGUFWriter(path, "llama")
    V = gguf.GGUFValueType
    values = {
        "t.u8": (200, V.UINT8), "t.i8": (-100, V.INT8), "t.u16": (60000, V.UINT16),
        "t.i16": (-30000, V.INT16),
        "t.u32": (4_000_000_000, V.UINT32), "t.i32": (-2_000_000_000, V.INT32), "t.f32": (0.1, V.FLOAT32),
        "t.bool": (True, V.BOOL), "t.str": ("héllo", V.STRING), "t.u64": (2**64 - 1, V.UINT64),
        "t.i64": (-(2**63), V.INT64), "t.f64": (0.1, V.FLOAT64),
    }  # fmt: skip
    for k, (v, t) in values.items():
        w.add_key_value(k, v, t)
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_str", ["a", "bc", ""])
    w.add_array("t.nested", [[1, 2], [3]])
    w.add_array("t.nested_str", [["x"], ["y", "z"]])
    w.add_key_value("t.bytes", b"\xff\xfe", V.STRING)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    md = core.gguf_metadata(path)
    assert md == read_gguf(path).metadata
    assert md["t.f32"] == float(np.float32(0.1)) and md["t.f64"] == 0.1
    for k, (v, t) in values.items():
        if t not in (V.FLOAT32,):
            assert md[k] == v, k
    assert md["t.arr_str"] == ["a", "bc", ""]
    assert md["t.nested"] == [[1, 2], [3]] and md["t.nested_str"] == [["x"], ["y", "z"]]
    assert md["t.bytes"] == b"\xff\xfe"
    data = bytearray(Path(path).read_bytes())
    data[4:8] = struct.pack("<I", 2)
    Path(path).write_bytes(data)
    assert core.gguf_metadata(path) == md and read_gguf(path).version == 2
    for version in (1, 4):
        data[4:8] = struct.pack("<I", version)
        Path(path).write_bytes(data)
        with pytest.raises(core.ModelError, match=f"unsupported GGUF version {version}"):
            core.gguf_metadata(path)
        with pytest.raises(ValueError, match=f"unsupported GGUF version {version}"):
            read_gguf(path)


# ---- errors that name the problem ---------------------------------------------------------------


def rewrite_gguf(src: str, dst: str, *, arch: str | None = None, drop: str | None = None,
                 replace: dict[str, tuple[np.ndarray, QT]] | None = None) -> str:  # fmt: skip
    """Copy a GGUF file, changing the architecture, dropping or replacing a tensor."""
    r = gguf.GGUFReader(src)
    old_arch = str(r.fields["general.architecture"].contents())
    w = gguf.GGUFWriter(dst, arch or old_arch)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        if arch and key.startswith(old_arch + "."):
            key = arch + key[len(old_arch) :]
        w.add_key_value(key, value, field.types[0], field.types[-1] if len(field.types) > 1 else None)
    for t in r.tensors:
        if t.name == drop:
            continue
        if replace and t.name in replace:
            arr, qt = replace[t.name]
            w.add_tensor(t.name, arr, raw_shape=arr.shape, raw_dtype=qt)
            continue
        data = np.asarray(t.data)
        w.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


@pytest.fixture(scope="module")
def tiny_gguf(tiny_hf: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_models.hf_to_gguf(tiny_hf["llama"], tmp_path_factory.mktemp("g") / "llama-q8.gguf", "Q8_0")


def test_error_unknown_architecture(tiny_gguf: str, tmp_path: Path) -> None:
    bad = rewrite_gguf(tiny_gguf, str(tmp_path / "x.gguf"), arch="xyz")
    with pytest.raises(core.ModelError, match="unknown architecture 'xyz'"):
        core.load_model(bad)
    with pytest.raises(ValueError, match="unknown architecture 'xyz'"):
        load_weights(bad)


def test_error_missing_tensor(tiny_gguf: str, tmp_path: Path) -> None:
    bad = rewrite_gguf(tiny_gguf, str(tmp_path / "x.gguf"), drop="blk.1.ffn_up.weight")
    with pytest.raises(core.ModelError, match="missing tensor 'blk.1.ffn_up.weight'"):
        core.load_model(bad)
    with pytest.raises(ValueError, match="missing tensor 'blk.1.ffn_up.weight'"):
        load_weights(bad)


def test_error_unsupported_type(tiny_gguf: str, tmp_path: Path) -> None:
    raw = np.zeros((96, 66), np.uint8)  # one TQ2_0 block per row (256 values, not the 64 expected)
    replace = {"blk.0.ffn_up.weight": (raw, QT.TQ2_0)}
    bad = rewrite_gguf(tiny_gguf, str(tmp_path / "x.gguf"), replace=replace)
    with pytest.raises(
        core.ModelError, match="unsupported tensor type 'TQ2_0' for tensor 'blk.0.ffn_up.weight'"
    ):
        core.load_model(bad)
    assert core.gguf_metadata(bad)["general.architecture"] == "llama"  # the header itself reads fine


def test_error_shape_mismatch(tiny_gguf: str, tmp_path: Path) -> None:
    wrong = gguf.quants.quantize(np.ones((95, 64), np.float32), QT.Q8_0)
    bad = rewrite_gguf(
        tiny_gguf, str(tmp_path / "x.gguf"), replace={"blk.0.ffn_gate.weight": (wrong, QT.Q8_0)}
    )
    with pytest.raises(
        core.ModelError, match=r"shape mismatch for tensor 'blk.0.ffn_gate.weight'.*expected 96 x 64"
    ):
        core.load_model(bad)


def test_error_truncated_and_not_gguf(tiny_gguf: str, tmp_path: Path) -> None:
    data = Path(tiny_gguf).read_bytes()
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(data[:-100])
    with pytest.raises(core.ModelError, match="runs past the end of the file"):
        core.load_model(str(trunc))
    with pytest.raises(ValueError, match="runs past the end"):
        read_gguf(str(trunc))
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"hello world")
    with pytest.raises(core.ModelError, match="neither a GGUF file"):
        core.load_model(str(junk))
    with pytest.raises(core.ModelError, match="no such model"):
        core.load_model(str(tmp_path / "missing.gguf"))
    assert os.path.exists(tiny_gguf)


def test_open_file_shares_its_parse_until_the_file_changes(tiny_gguf: str, tmp_path: Path) -> None:
    """While a loaded model holds a GGUF file, opening it again (the tokenizer, the metadata, the shard
    list) reuses its parse (csrc/formats/gguf.h): the same answers as a fresh parse, and a file changed in
    place or replaced at the same path is parsed anew."""
    path = tmp_path / "m.gguf"
    data = Path(tiny_gguf).read_bytes()
    path.write_bytes(data)
    fresh = core.gguf_metadata(str(path))  # nothing holds the file: parsed, then closed
    m = core.load_model(str(path))
    assert core.gguf_metadata(str(path)) == fresh
    assert core.gguf_metadata(str(path), ["general.architecture", "no.such.key"]) == {
        "general.architecture": "llama"
    }
    assert core.gguf_shard_paths(str(path)) == [str(path)]
    # The same inode, its header changed in place (same size): not the old parse.
    at = data.index(struct.pack("<Q", 5) + b"llama")
    with open(path, "r+b") as f:
        f.seek(at + 8)
        f.write(b"llamb")
    assert core.gguf_metadata(str(path))["general.architecture"] == "llamb"
    # Replaced at the same path by a truncated copy: the error, not a parse of the file that was there.
    (tmp_path / "t.gguf").write_bytes(data[:-100])
    os.replace(tmp_path / "t.gguf", path)
    with pytest.raises(core.ModelError, match="runs past the end of the file"):
        core.gguf_metadata(str(path))
    del m
