"""The GGUF types of Q2_K..Q5_K_M, IQ4_XS and MXFP4 files (Q5_0, Q5_1, Q5_K, Q3_K, Q2_K, IQ4_NL, IQ4_XS,
MXFP4):
the twin's dequantization against the `gguf` package's (the oracle), the C++ loader's against both,
and tiny models whose matrices are in each type, run by ossa against the NumPy twin on the same
dequantized weights (float32 and bfloat16 numerics, greedy tokens, batch invariance). The kernels
themselves are checked per type in test_kernels.py."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from quant_blocks import (
    E8M0_FIELDS,
    F16_FIELDS,
    IQ23_TYPES,
    NEW_TYPES,
    QT,
    iq1m_d,
    random_blocks,
    set_iq1m_d,
    split_product_error,
)
from test_batch_invariance import Runner, check_invariance

from ossa import models
from ossa._native import core
from ossa.reference import loader, quants
from ossa.reference import model as ref_model
from ossa.reference.gguf import read_gguf

E, FF, VOCAB, LAYERS = 256, 512, 96, 2  # every K-quant row needs a multiple of 256 values


@pytest.mark.parametrize("type_name", NEW_TYPES + IQ23_TYPES)
def test_twin_dequantizer_matches_gguf_oracle(type_name: str) -> None:
    rng = np.random.default_rng(1)
    block_elems = gguf.GGML_QUANT_SIZES[QT[type_name]][0]
    for rows, n_blocks in ((1, 1), (7, 3), (64, 2)):
        raw = random_blocks(type_name, rows, block_elems * n_blocks, rng)
        mine = quants.dequantize(raw, int(QT[type_name]), block_elems * n_blocks)
        oracle = gguf.quants.dequantize(raw, QT[type_name]).astype(np.float32).reshape(mine.shape)
        assert mine.dtype == np.float32
        assert np.array_equal(mine.view(np.uint32), oracle.view(np.uint32)), type_name


def test_iq_codebooks_are_the_oracles_and_generated_files_current() -> None:
    """The i-quants' codebooks as the twin expands them (ossa.reference.iq_grids) are the gguf package's
    grids, and both generated files (that module and csrc/kernels/iq_grids.h) are what
    tools/gen_iq_grids.py writes from it today."""
    from ossa.reference import iq_grids

    for name, cls in (("IQ2_XXS", gguf.quants.IQ2_XXS), ("IQ2_XS", gguf.quants.IQ2_XS),
                      ("IQ2_S", gguf.quants.IQ2_S), ("IQ3_XXS", gguf.quants.IQ3_XXS),
                      ("IQ3_S", gguf.quants.IQ3_S), ("IQ1", gguf.quants.IQ1_S)):  # fmt: skip
        cls.init_grid()
        oracle = np.asarray(cls.grid).reshape(cls.grid_shape)
        assert np.array_equal(iq_grids.codebook(name), oracle), name
    tool = Path(__file__).resolve().parents[1] / "tools" / "gen_iq_grids.py"
    r = subprocess.run([sys.executable, str(tool), "--check"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def scaled_blocks(type_name: str, rows: int, cols: int, rng: np.random.Generator, rms: float) -> np.ndarray:
    """Random blocks whose dequantized weights have about the given root mean square (the f16 scale
    fields set so, every other byte random)."""
    raw = random_blocks(type_name, rows, cols, rng, scale=1.0)
    w = quants.dequantize(raw, int(QT[type_name]), cols)
    factor = rms / float(np.sqrt(np.mean(w.astype(np.float64) ** 2)))
    block_bytes = gguf.GGML_QUANT_SIZES[QT[type_name]][1]
    blocks = raw.reshape(rows, -1, block_bytes)
    for at in F16_FIELDS.get(type_name, ()):
        half = np.ascontiguousarray(blocks[..., at : at + 2]).view(np.float16)
        blocks[..., at : at + 2] = (half.astype(np.float32) * factor).astype(np.float16).view(np.uint8)
    for at in E8M0_FIELDS.get(type_name, ()):  # a power-of-two scale: the nearest power of factor
        blocks[..., at] += np.int64(np.round(np.log2(factor))).astype(np.uint8)
    if type_name == "IQ1_M":
        set_iq1m_d(blocks, (iq1m_d(blocks).astype(np.float32) * factor).astype(np.float16))
    return np.ascontiguousarray(blocks.reshape(rows, -1))


# The matrices of a layer of the tiny llama: name -> (rows, cols).
LAYER_SHAPES = {"attn_q": (E, E), "attn_k": (E // 2, E), "attn_v": (E // 2, E), "attn_output": (E, E),
                "ffn_gate": (FF, E), "ffn_up": (FF, E), "ffn_down": (E, FF)}  # fmt: skip


def llama_writer(path: Path) -> gguf.GGUFWriter:
    """A GGUF writer at ``path`` with the tiny llama's hyper-parameters (E wide, LAYERS layers, 4 heads,
    2 KV heads, FF)."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_embedding_length(E)
    w.add_block_count(LAYERS)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_feed_forward_length(FF)
    w.add_context_length(256)
    w.add_layer_norm_rms_eps(1e-5)
    return w


def add_norms_and_write(w: gguf.GGUFWriter, rng: np.random.Generator) -> None:
    """The output norm and each layer's two norms (F32, near 1), then the file written and closed."""
    norms = [f"blk.{i}.{n}_norm.weight" for i in range(LAYERS) for n in ("attn", "ffn")]
    for name in ["output_norm.weight", *norms]:
        w.add_tensor(name, (1 + 0.1 * rng.standard_normal(E)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_model(path: Path, types: list[str], seed: int) -> str:
    """A tiny llama GGUF whose matrices take the given types in turn (norms F32, output untied)."""
    rng = np.random.default_rng(seed)
    w = llama_writer(path)
    mats = [("token_embd.weight", VOCAB, E), ("output.weight", VOCAB, E)]
    mats += [(f"blk.{i}.{n}.weight", *shape) for i in range(LAYERS) for n, shape in LAYER_SHAPES.items()]
    for k, (name, rows, cols) in enumerate(mats):
        t = types[k % len(types)]
        raw = scaled_blocks(t, rows, cols, rng, rms=1.0 if name == "token_embd.weight" else 0.06)
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=QT[t])
    add_norms_and_write(w, rng)
    return str(path)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("quant-types")


def greedy(model: object, prompt: list[int], n: int) -> tuple[list[int], np.ndarray]:
    """n greedy tokens through the paged runner: one prefill step, then one-token decode steps.
    Returns the tokens and the logits of every position (prompt and generated)."""
    r = Runner(model, 1, len(prompt) + n)
    rows = [r.step([(0, prompt, 0)])[0]]
    tokens = list(prompt)
    for _ in range(n):
        tokens.append(int(np.argmax(rows[-1][-1])))
        rows.append(r.step([(0, tokens[-1:], len(tokens) - 1)])[0])
    return tokens[len(prompt) :], np.concatenate(rows)


@pytest.mark.parametrize("type_name", NEW_TYPES + IQ23_TYPES)
def test_model_in_each_type_matches_the_twin(model_dir: Path, type_name: str) -> None:
    path = write_model(model_dir / f"{type_name}.gguf", [type_name], seed=int(QT[type_name]))
    m = core.load_model(path)
    listed = {t[0]: t[1] for t in m.tensors()}
    assert listed["blk.1.ffn_down.weight"] == listed["token_embd.weight"] == type_name
    # The loader's dequantization: the twin's and the oracle's, bitwise.
    twin_file = read_gguf(path)
    for t in gguf.GGUFReader(path).tensors:
        mine = core.dequantize_tensor(m, t.name)
        oracle = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(mine.shape)
        assert np.array_equal(mine.view(np.uint32), oracle.view(np.uint32)), t.name
        assert np.array_equal(mine.view(np.uint32), twin_file.tensor(t.name).view(np.uint32)), t.name
    # Logits of the paged runner (prefill, then decode one token at a time) against the twin's
    # float32 forward on the same weights (each int8 kernel's input split as it splits it:
    # int8_matrices); greedy tokens equal.
    config, weights = loader.load_weights(path)
    prompt = np.random.default_rng(7).integers(0, VOCAB, 11).tolist()
    tokens, got = greedy(m, prompt, 8)
    ids = prompt + tokens
    twin = ref_model.forward(config, weights, ids, int8_matrices=m.int8_matrices)
    scale = float(np.max(np.abs(twin)))
    assert scale > 1.0  # logits of ordinary size, not a degenerate model
    assert float(np.max(np.abs(got - twin))) / scale < 1e-4
    twin_tokens = [int(np.argmax(twin[len(prompt) - 1 + i])) for i in range(8)]
    assert tokens == twin_tokens
    # A whole-sequence forward gives the same logits as the decode steps did, bitwise.
    np.testing.assert_array_equal(core.model_logits(m, ids), got)
    # dtype "bfloat16": the new types dequantize and round like the others (each matmul exactly the
    # rounded product: test_kernels.py). In a whole forward, bf16 roundings of activations that the
    # f32 accumulation order tips one way or the other (~1e-3 of a logit each) keep the C++ and the
    # twin's emulation apart by about as much as either is from float32, so only closeness is checked.
    bf_model = models.load_model(path, "bfloat16")
    assert bf_model.compute_dtype == "bfloat16"
    bf = np.asarray(bf_model.logits(ids), np.float64)
    twin_bf = ref_model.forward(config, ref_model.bf16_matrices(config, weights), ids, bf16_compute=True)
    assert 0 < np.max(np.abs(bf - twin)) < 0.05 * scale
    assert np.max(np.abs(bf - twin_bf)) < 0.05 * scale


@pytest.mark.parametrize(
    "mix",
    ["Q4_K,Q6_K,Q8_0", "Q4_0,Q4_1,Q5_0", "Q5_1,IQ4_NL,Q5_K,IQ4_XS", "Q2_K,Q3_K,Q4_K", ",".join(IQ23_TYPES)],
)
def test_quantized_activations_match_twin_and_are_batch_invariant(model_dir: Path, mix: str) -> None:
    """load_model(quantized_activations=True): every matmul input rounded to 8-bit blocks of 32 values
    (the int8 kernels' first piece alone where the build runs them, matmul_q8.cpp elsewhere), as the
    twin's quantize_q8 rounds the inputs of the matrices the model lists; the same for a row alone or
    in a batch. Exact (to f32 summation) on one token; over longer sequences the two sides' different
    summation orders tip an occasional value across a rounding boundary (measured on a 4-token Q4_0 /
    Q4_1 / Q5_0 model: 1.5e-7 of the largest logit at positions 0-1, 5.5e-3 after the first such
    value), so those are only close. Each kernel's rounding alone: test_kernels.py."""
    types = mix.split(",")
    path = write_model(model_dir / f"q8-{'-'.join(types)}.gguf", types, seed=5)
    m = core.load_model(path, quantized_activations=True)
    config, weights = loader.load_weights(path)
    listed = m.int8_matrices
    ids = np.random.default_rng(9).integers(0, VOCAB, 24).tolist()
    amx = bool(m.uses_amx)  # the bf16-tile matrices (Q5_0, ...) split their inputs into hi + lo
    twin = ref_model.forward(
        config, weights, ids, quantized_activations=True, int8_matrices=listed, amx_activations=amx
    )
    scale = float(np.max(np.abs(twin)))
    got = core.model_logits(m, ids)
    assert float(np.max(np.abs(got - twin))) / scale < 5e-2
    one = ref_model.forward(
        config, weights, ids[:1], quantized_activations=True, int8_matrices=listed, amx_activations=amx
    )
    assert float(np.max(np.abs(got[:1] - one))) / scale < 1e-5
    if 32 in listed.values():
        plain = ref_model.forward(config, weights, ids[:1], int8_matrices=core.load_model(path).int8_matrices)
        assert float(np.max(np.abs(plain - one))) / scale > 1e-4  # the rounding is visible
    else:  # no matrix takes 8-bit blocks here (on AMX these types multiply bf16 tiles): no change
        np.testing.assert_array_equal(got, core.model_logits(core.load_model(path), ids))
    check_invariance(m, VOCAB, seed=6)


# Types mixed inside one matmul call (Q/K/V, gate/up take different types), as llama.cpp's K mixes do:
# the new types alone, and with Q4_K / Q6_K, whose kernels lay the activations out their own way.
MIXES = {"new": list(NEW_TYPES), "k-mix": ["Q4_K", "Q5_K", "Q3_K", "Q2_K", "IQ4_XS", "Q6_K", "Q5_0"],
         "iq-mix": [*IQ23_TYPES, "Q4_K", "IQ4_XS", "Q2_K"]}  # fmt: skip


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_mixed_model_matches_twin_is_batch_invariant_and_inspected(model_dir: Path, mix: str) -> None:
    types = MIXES[mix]
    path = write_model(model_dir / f"mixed-{mix}.gguf", types, seed=3)
    m = core.load_model(path)
    config, weights = loader.load_weights(path)
    ids = np.random.default_rng(8).integers(0, VOCAB, 24).tolist()
    twin = ref_model.forward(config, weights, ids, int8_matrices=m.int8_matrices)
    assert float(np.max(np.abs(core.model_logits(m, ids) - twin))) / float(np.max(np.abs(twin))) < 1e-4
    check_invariance(m, VOCAB, seed=4)
    info = models.inspect(path)
    assert set(info["tensor_types"]) == set(types) | {"F32"}
    text = models.format_inspect(info)
    assert all(f"{t} x" in text for t in types)


# GGUF matrix names -> the twin's (ossa.reference's) names.
TWIN_NAMES = {"attn_q": "wq", "attn_k": "wk", "attn_v": "wv", "attn_output": "wo", "ffn_gate": "w_gate",
              "ffn_up": "w_up", "ffn_down": "w_down"}  # fmt: skip


def twin_name(gguf_name: str) -> str | None:
    parts = gguf_name.split(".")
    if gguf_name == "output.weight":
        return "output"
    if parts[0] != "blk" or parts[2] not in TWIN_NAMES:
        return None
    return f"layers.{parts[1]}.{TWIN_NAMES[parts[2]]}"


def test_int8_matrices_name_the_split_each_kernel_multiplies(model_dir: Path) -> None:
    """``Model.int8_matrices`` lists each matrix whose kernel splits its input into int8 pieces, with
    the values per block (Q2_K / Q3_K with VNNI: 64; the other int8 kernels: 32), and the twin's rounding for
    that name (``ActivationRounding``) is what the kernel multiplies: each matrix of a mixed file, by
    the kernel the model runs it on, within f32 rounding (~1e-7 measured) of the twin's rounded input
    times the dequantized weights, where the unrounded input, or the other block size, is 6e-6 to
    1.4e-5 off (the activations have one value 30x the others at the start of every 64, so the
    32- and 64-value blocks' scales differ). Matrices not listed take their input as it is."""
    types = MIXES["k-mix"]
    path = write_model(model_dir / "int8-names.gguf", types, seed=3)
    m = core.load_model(path)
    listed = m.int8_matrices
    config, weights = loader.load_weights(path)
    assert set(listed) <= set(weights)
    q23k = core.i8_vnni_available() and core.repack_default()  # matmul_amx_q23k.cpp's builds
    # AVX2 without VNNI: Q2_K / Q3_K on matmul_amx_i8.cpp's kernels, pieces per 32 values
    avx2_q23k = core.i8_avx2_available() and not core.i8_vnni_available() and core.repack_default()
    rng = np.random.default_rng(5)
    checked = 0
    for t in gguf.GGUFReader(path).tensors:
        name = twin_name(t.name)
        if name is None:
            continue
        type_name = t.tensor_type.name
        if type_name in ("Q2_K", "Q3_K"):
            assert listed.get(name) == (64 if q23k else 32 if avx2_q23k else None), (name, type_name)
        else:
            assert listed.get(name) in (None, 32), (name, type_name)
        if name not in listed and m.uses_amx:
            continue  # (the AMX bf16 kernels: test_kernels.py)
        rows, cols = int(t.shape[1]), int(t.shape[0])
        x = rng.standard_normal((9, cols)).astype(np.float32)
        x[:, ::64] *= 30
        got = core.kernel_matmul(np.ascontiguousarray(t.data), int(t.tensor_type), rows, cols, x)
        exact = split_product_error(got, x, weights[name], name, listed)
        assert exact < 1e-6, (name, type_name, listed.get(name), exact)
        if name in listed:  # the unrounded input, and the other block size, are visibly off
            for wrong in ({}, {name: 96 - listed[name]}):
                assert split_product_error(got, x, weights[name], name, wrong) > 3e-6, (name, wrong)
            checked += 1
    assert checked >= (8 if q23k or avx2_q23k else 0)


def test_malformed_tensors_are_clear_errors(model_dir: Path) -> None:
    good = write_model(model_dir / "good.gguf", ["Q5_K", "IQ4_XS", "Q3_K"], seed=9)
    data = Path(good).read_bytes()
    last = [t for t in gguf.GGUFReader(good).tensors if t.tensor_type != QT.F32][-1]
    trunc = model_dir / "trunc.gguf"
    trunc.write_bytes(data[: int(last.data_offset) + int(last.n_bytes) // 2])  # inside a quantized tensor
    with pytest.raises(core.ModelError, match=f"tensor '{last.name}'.*runs past the end of the file"):
        core.load_model(str(trunc))
    with pytest.raises(ValueError, match="runs past the end"):
        read_gguf(str(trunc))
    # A row length that is not a whole number of 256-value blocks (the header says 128 columns).
    at = data.index(b"blk.0.attn_q.weight") + len(b"blk.0.attn_q.weight")
    assert data[at : at + 12] == (2).to_bytes(4, "little") + (E).to_bytes(8, "little")
    bad = model_dir / "bad-cols.gguf"
    bad.write_bytes(data[: at + 4] + (128).to_bytes(8, "little") + data[at + 12 :])
    with pytest.raises(core.ModelError, match="tensor 'blk.0.attn_q.weight' of type Q3_K has 128 columns"):
        core.load_model(str(bad))
    with pytest.raises(ValueError):
        read_gguf(str(bad)).tensor("blk.0.attn_q.weight")


def test_unsupported_type_is_one_clear_line(model_dir: Path) -> None:
    """A type ossa does not read (TQ2_0) fails load and `ossa inspect` with one line naming it."""
    good = gguf.GGUFReader(write_model(model_dir / "for-tq2.gguf", ["Q5_K"], seed=5))
    bad = str(model_dir / "tq2.gguf")
    w = gguf.GGUFWriter(bad, "llama")
    for key, field in good.fields.items():
        if not key.startswith("GGUF.") and key != "general.architecture":
            w.add_key_value(
                key, field.contents(), field.types[0], field.types[-1] if len(field.types) > 1 else None
            )
    for t in good.tensors:
        data = np.asarray(t.data)
        if t.name == "blk.1.ffn_up.weight":  # 512 rows of one 256-value TQ2_0 block (66 bytes)
            data, t_type = np.zeros((FF, 66), np.uint8), QT.TQ2_0
        else:
            t_type = t.tensor_type
        w.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=t_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(
        core.ModelError, match="unsupported tensor type 'TQ2_0' for tensor 'blk.1.ffn_up.weight'"
    ):
        core.load_model(bad)
    r = subprocess.run(
        [sys.executable, "-m", "ossa.cli", "inspect", bad], capture_output=True, text=True, timeout=120
    )
    assert r.returncode != 0 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "'TQ2_0'" in r.stderr and "blk.1.ffn_up.weight" in r.stderr


# llama.cpp's own quantizer, where llama-cpp-python is installed: real blocks (not random bytes) of
# every new type, in the mixes llama.cpp writes. The files must read back close to the F16 weights
# they came from (an independent check that ossa, the twin and the gguf package all read llama.cpp's
# bytes as llama.cpp meant them), and bitwise as the oracle and the twin read them.
# (IQ3_S / IQ3_M: the i-quant mixes llama.cpp writes without an importance matrix; IQ3_XXS / IQ3_XS and
# the IQ2_* / IQ1_* ones it refuses without one.)
LLAMA_MIXES = ["Q5_0", "Q5_1", "IQ4_NL", "Q5_K_M", "Q3_K_M", "Q2_K", "IQ4_XS", "IQ3_S", "IQ3_M"]
# Root-mean-square quantization error relative to the weights' RMS, per type: what rounding Gaussian
# weights to that many bits gives (measured 0.018, 0.036-0.043, 0.071-0.077, 0.15, 0.30; IQ3_S 0.166), with
# margin.
TYPE_ERROR = {"F32": 0.0, "Q6_K": 0.03, "Q5_0": 0.06, "Q5_1": 0.06, "Q5_K": 0.06, "Q4_K": 0.1,
              "IQ4_NL": 0.1, "IQ4_XS": 0.1, "Q3_K": 0.2, "Q2_K": 0.4, "IQ3_S": 0.2}  # fmt: skip


@pytest.fixture(scope="module")
def f16_model(model_dir: Path) -> str:
    rng = np.random.default_rng(11)
    path = model_dir / "base-f16.gguf"
    w = llama_writer(path)
    w.add_rope_dimension_count(E // 4)
    w.add_tensor("token_embd.weight", rng.standard_normal((VOCAB, E)).astype(np.float16))
    w.add_tensor("output.weight", (0.06 * rng.standard_normal((VOCAB, E))).astype(np.float16))
    for i in range(LAYERS):
        for n, shape in LAYER_SHAPES.items():
            w.add_tensor(f"blk.{i}.{n}.weight", (0.06 * rng.standard_normal(shape)).astype(np.float16))
    add_norms_and_write(w, rng)
    return str(path)


@pytest.mark.parametrize("mix", LLAMA_MIXES)
def test_files_quantized_by_llama_cpp(f16_model: str, model_dir: Path, mix: str) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    path = model_dir / f"llama-{mix}.gguf"
    # In a child process: llama.cpp's logging and file handles stay out of this one.
    code = (
        "import ctypes, sys, llama_cpp as l; p = l.llama_model_quantize_default_params(); "
        f"p.ftype = l.LLAMA_FTYPE_MOSTLY_{mix}; "
        "sys.exit(l.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p)))"
    )
    r = subprocess.run([sys.executable, "-c", code, f16_model, str(path)], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    m = core.load_model(str(path))
    types = {t[1] for t in m.tensors()}
    assert types & set(NEW_TYPES + IQ23_TYPES), types
    base = {t.name: np.asarray(t.data, np.float32) for t in gguf.GGUFReader(f16_model).tensors}
    twin_file = read_gguf(str(path))
    for t in gguf.GGUFReader(str(path)).tensors:
        mine = core.dequantize_tensor(m, t.name)
        oracle = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(mine.shape)
        assert np.array_equal(mine.view(np.uint32), oracle.view(np.uint32)), t.name
        assert np.array_equal(mine.view(np.uint32), twin_file.tensor(t.name).view(np.uint32)), t.name
        ref = base[t.name].reshape(mine.shape)
        err = np.sqrt(np.mean((mine - ref) ** 2) / np.mean(ref**2))
        assert err <= TYPE_ERROR[t.tensor_type.name], (t.name, t.tensor_type.name, err)
    config, weights = loader.load_weights(str(path))
    ids = np.random.default_rng(2).integers(0, VOCAB, 16).tolist()
    twin = ref_model.forward(config, weights, ids, int8_matrices=m.int8_matrices)
    assert float(np.max(np.abs(core.model_logits(m, ids) - twin))) / float(np.max(np.abs(twin))) < 1e-4


def test_moe_experts_in_iquants_match_twin_and_are_batch_invariant(tmp_path: Path) -> None:
    """A mixture-of-experts model (Qwen3-MoE) whose matrices are i-quant blocks (IQ2_XXS ... IQ1_M in
    turn, the 3-D expert tensors included, as IQ2_* / IQ3_* MoE downloads hold them), read in place:
    logits against the twin on the same dequantized weights, and batch invariance."""
    from tiny_models import hf_to_gguf, make_hf_model

    hf = make_hf_model(tmp_path / "hf", "qwen3_moe", hidden_size=256, num_layers=2, num_heads=4,
                       num_kv_heads=2, head_dim=64, intermediate_size=512, vocab_size=VOCAB,
                       num_experts=4, num_experts_per_tok=2, moe_intermediate_size=256,
                       norm_topk_prob=True, seed=3)  # fmt: skip
    src = gguf.GGUFReader(hf_to_gguf(hf, tmp_path / "f32.gguf", "F32"))
    path = str(tmp_path / "iq-moe.gguf")
    w = gguf.GGUFWriter(path, "qwen3moe")
    for key, field in src.fields.items():
        if not key.startswith("GGUF.") and key != "general.architecture":
            w.add_key_value(
                key, field.contents(), field.types[0], field.types[-1] if len(field.types) > 1 else None
            )
    rng = np.random.default_rng(4)
    k = 0
    for t in src.tensors:
        shape = [int(x) for x in t.shape[::-1]]
        if len(shape) == 1 or shape[-1] % 256 != 0 or t.name.endswith("ffn_gate_inp.weight"):
            w.add_tensor(t.name, np.asarray(t.data))
            continue
        type_name = IQ23_TYPES[k % len(IQ23_TYPES)]
        k += 1
        rows = int(np.prod(shape[:-1]))
        rms = 1.0 if t.name == "token_embd.weight" else 0.05
        raw = scaled_blocks(type_name, rows, shape[-1], rng, rms=rms)
        raw = raw.reshape([*shape[:-1], raw.shape[-1]])
        w.add_tensor(t.name, raw, raw_shape=raw.shape, raw_dtype=QT[type_name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    m = core.load_model(path)
    types = {t[1] for t in m.tensors()}
    assert set(IQ23_TYPES) <= types, types
    assert any("exps" in t[0] and t[1] in IQ23_TYPES for t in m.tensors())
    config, weights = loader.load_weights(path)
    ids = np.random.default_rng(8).integers(0, VOCAB, 20).tolist()
    twin = ref_model.forward(config, weights, ids, int8_matrices=m.int8_matrices)
    got = core.model_logits(m, ids)
    assert float(np.max(np.abs(got - twin))) / float(np.max(np.abs(twin))) < 1e-4
    check_invariance(m, VOCAB, seed=2)
