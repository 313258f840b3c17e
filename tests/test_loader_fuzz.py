"""Corrupt model files: every mutation must give ModelError/ValueError or a clean load, never a crash.

Loads run in-process, so a crash (segfault, abort, OOM from a header-driven allocation) kills pytest,
which is the failure signal. About 20,000 cases in all, each on a file of a few kilobytes.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from collections import Counter
from pathlib import Path

import gguf
import numpy as np
import pytest
import tiny_models

from ossa._native import core

HUGE_U64 = [2**64 - 1, 2**63, 2**63 - 1, 2**60, 2**32, 2**32 - 1, 1 << 40]
HUGE_U32 = [2**32 - 1, 2**31, 0x7FFFFFFF, 5, 13, 100, 0]


def try_load(path: str, outcomes: Counter[str], metadata: bool) -> None:
    try:
        if metadata:
            core.gguf_metadata(path)
        m = core.load_model(path)
    except ValueError:  # ossa.ModelError is a ValueError
        outcomes["error"] += 1
        return
    # A clean load must give readable tensors: touch every byte of every one.
    for name, _type, rows, cols, _nbytes in m.tensors():
        try:
            a = core.dequantize_tensor(m, name)
        except ValueError:
            continue  # a type ossa does not read, not used by the model
        assert a.shape == (rows, cols)
    outcomes["loaded"] += 1


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_models.make_hf_model(
        tmp_path_factory.mktemp("fuzz") / "hf", "qwen2", hidden_size=32, num_layers=1, num_heads=2,
        num_kv_heads=1, intermediate_size=32, vocab_size=32, seed=5,
    )  # fmt: skip


def gguf_seed_file(tiny_hf: str, path: Path) -> tuple[bytes, int]:
    """A small Q8_0 GGUF with array metadata; returns its bytes and the size of its header."""
    tmp = path.with_suffix(".plain.gguf")
    tiny_models.hf_to_gguf(tiny_hf, tmp, "Q8_0")
    r = gguf.GGUFReader(tmp)
    w = gguf.GGUFWriter(str(path), "qwen2")
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        w.add_key_value(
            key, field.contents(), field.types[0], field.types[-1] if len(field.types) > 1 else None
        )
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(8)])
    w.add_array("test.nested", [[1, 2], [3]])
    w.add_array("test.floats", [0.5, 1.5])
    for t in r.tensors:
        data = np.asarray(t.data)
        w.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = path.read_bytes()
    first = min(t.data_offset for t in gguf.GGUFReader(path).tensors)
    return data, first


def test_fuzz_gguf_headers(tiny_hf: str, tmp_path: Path) -> None:
    seed_path = tmp_path / "seed.gguf"
    data, header_end = gguf_seed_file(tiny_hf, seed_path)
    assert core.load_model(str(seed_path)).config["arch"] == "qwen2"
    target = str(tmp_path / "mut.gguf")
    rng = np.random.default_rng(1234)
    outcomes: Counter[str] = Counter()

    def run(buf: bytes | bytearray) -> None:
        with open(target, "wb") as f:
            f.write(buf)
        try_load(target, outcomes, metadata=True)

    # Every header position gets absurd 64- and 32-bit values (counts, lengths, dims, offsets, types).
    for pos in range(4, header_end - 4):
        for value in HUGE_U64[:3] if pos + 8 <= header_end else []:
            buf = bytearray(data)
            buf[pos : pos + 8] = struct.pack("<Q", value)
            run(buf)
        buf = bytearray(data)
        buf[pos : pos + 4] = struct.pack("<I", HUGE_U32[int(rng.integers(len(HUGE_U32)))])
        run(buf)
    # Random byte damage, including the data section.
    for _ in range(3000):
        buf = bytearray(data)
        for _ in range(int(rng.integers(1, 9))):
            end = header_end if rng.random() < 0.9 else len(buf)
            buf[int(rng.integers(0, end))] = int(rng.integers(0, 256))
        run(buf)
    # Truncations anywhere.
    for cut in sorted(set(rng.integers(0, len(data), 400).tolist()) | {0, 3, 4, 8, 23, 24, header_end}):
        run(data[:cut])
    print(dict(outcomes))
    assert outcomes["error"] > 1000 and outcomes["loaded"] > 0, outcomes


def test_fuzz_safetensors_headers(tiny_hf: str, tmp_path: Path) -> None:
    src = Path(tiny_hf) / "model.safetensors"
    data = src.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = data[8 : 8 + n]
    folder = tmp_path / "mut"
    folder.mkdir()
    shutil.copy(Path(tiny_hf) / "config.json", folder / "config.json")
    target = folder / "model.safetensors"
    rng = np.random.default_rng(99)
    outcomes: Counter[str] = Counter()
    alphabet = b'{}[]",:0123456789-eE.ntrufalsF3216BIU_ \\'

    def run(buf: bytes | bytearray) -> None:
        target.write_bytes(buf)
        try_load(str(folder), outcomes, metadata=False)

    # Random JSON-ish characters in the header.
    for _ in range(4000):
        h = bytearray(header)
        for _ in range(int(rng.integers(1, 6))):
            h[int(rng.integers(0, len(h)))] = alphabet[int(rng.integers(0, len(alphabet)))]
        run(data[:8] + bytes(h) + data[8 + n :])
    # Every number in the header replaced by absurd ones.
    numbers = list(re.finditer(rb"\d+", header))
    for m in numbers:
        for value in [b"18446744073709551615", b"18446744073709551616", b"9223372036854775807",
                      b"-1", b"1e300", b"4294967296", b"0"]:  # fmt: skip
            run(data[:8] + header[: m.start()] + value + header[m.end() :] + data[8 + n :])
    # The length prefix and truncations.
    for value in [0, 1, n - 1, n + 1, len(data), 2**63, 2**64 - 1, 100 << 20]:
        run(struct.pack("<Q", value) + data[8:])
    for cut in sorted(set(rng.integers(0, len(data), 300).tolist()) | {0, 7, 8, 9, 8 + n}):
        run(data[:cut])
    # Deeply nested and structurally odd headers.
    for h in [
        b"[" * 100000,
        b'{"a":' * 5000,
        b"{}",
        b"[]",
        b"null",
        b'{"x": {"dtype": "F32"}}',
        b'{"a":1,"a":2}',
    ]:
        run(struct.pack("<Q", len(h)) + h)
    # config.json gets the same treatment, lightly.
    cfg = (Path(tiny_hf) / "config.json").read_bytes()
    target.write_bytes(data)
    for _ in range(1500):
        c = bytearray(cfg)
        for _ in range(int(rng.integers(1, 4))):
            c[int(rng.integers(0, len(c)))] = alphabet[int(rng.integers(0, len(alphabet)))]
        (folder / "config.json").write_bytes(c)
        try_load(str(folder), outcomes, metadata=False)
    for key, value in [("num_hidden_layers", 2**40), ("hidden_size", -1), ("num_attention_heads", 0),
                       ("vocab_size", 2**62), ("head_dim", 3), ("num_key_value_heads", 7)]:  # fmt: skip
        c = json.loads(cfg)
        c[key] = value
        (folder / "config.json").write_text(json.dumps(c))
        try_load(str(folder), outcomes, metadata=False)
    print(dict(outcomes))
    assert outcomes["error"] > 1000 and outcomes["loaded"] > 0, outcomes
