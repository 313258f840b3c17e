"""A GGUF v2/v3 reader in plain Python/NumPy (twin of ``csrc/formats/gguf.cpp``).

Layout: ``"GGUF" | u32 version | u64 n_tensors | u64 n_kv | kv... | tensor infos... | pad | data``;
tensor data sits at ``data_offset + offset`` with ``data_offset`` the header end rounded up to
``general.alignment`` (default 32). Every read is bounds-checked; problems raise ValueError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import quants

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 10: "<Q", 11: "<q", 12: "<d"}
_MIN_SIZE = {0: 1, 1: 1, 7: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 10: 8, 11: 8, 12: 8, 8: 8, 9: 12}
_MAX_ARRAY_DEPTH = 8
_MAX_ARRAY_ELEMS = 1 << 24


@dataclass
class GGUFTensorInfo:
    name: str | bytes
    ne: list[int]  # ne[0] is the contiguous dimension
    ggml_type: int
    offset: int  # relative to the data section

    @property
    def type_name(self) -> str:
        return quants.type_name(self.ggml_type)

    @property
    def rows(self) -> int:
        return int(np.prod(self.ne[1:], dtype=np.int64)) if len(self.ne) > 1 else 1

    @property
    def cols(self) -> int:
        return self.ne[0]


@dataclass
class GGUFFile:
    path: str
    version: int
    metadata: dict[str, Any]
    tensors: dict[str | bytes, GGUFTensorInfo]  # names that are not UTF-8 stay bytes
    data_offset: int
    _data: np.ndarray = field(repr=False)

    def raw(self, name: str | bytes) -> np.ndarray:
        """The stored bytes of a tensor as uint8 [rows, row_bytes]."""
        info = self.tensors[name]
        if info.ggml_type not in quants.TYPES:
            raise ValueError(f"unsupported tensor type '{info.type_name}' for tensor '{name!s}'")
        rb = quants.row_bytes(info.ggml_type, info.cols)
        start = self.data_offset + info.offset
        return self._data[start : start + rb * info.rows].reshape(info.rows, rb)

    def tensor(self, name: str | bytes) -> np.ndarray:
        """A tensor dequantized to float32 [rows, cols] (rows = product of ne[1:])."""
        info = self.tensors[name]
        return quants.dequantize(self.raw(name), info.ggml_type, info.cols)


class _Reader:
    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.pos = 0
        self.array_elems = 0

    def fail(self, what: str) -> ValueError:
        return ValueError(f"corrupt GGUF file: {what} (at byte {self.pos})")

    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int, what: str) -> memoryview:
        if n > self.left():
            raise self.fail(f"{what} runs past the end of the file")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str | bytes:
        raw = bytes(self.take(self.scalar("<Q", what), what))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw  # not UTF-8: kept as bytes, like the C++ binding

    def value_type(self, what: str) -> int:
        t = self.scalar("<I", what)
        if t > 12:
            raise self.fail(f"unknown metadata value type {t}")
        return t

    def value(self, t: int, depth: int) -> Any:
        if t in _SCALARS:
            v = self.scalar(_SCALARS[t], "value")
            return float(v) if t == 6 else v
        if t == 7:
            b = self.scalar("<B", "value")
            if b > 1:
                raise self.fail(f"bool value {b}")
            return b == 1
        if t == 8:
            return self.string("string value")
        if depth >= _MAX_ARRAY_DEPTH:
            raise self.fail(f"arrays nested deeper than {_MAX_ARRAY_DEPTH}")
        elem = self.value_type("array type")
        n = self.scalar("<Q", "array length")
        if n > self.left() // _MIN_SIZE[elem]:
            raise self.fail(f"array of {n} elements cannot fit")
        self.array_elems += n
        if self.array_elems > _MAX_ARRAY_ELEMS:
            raise self.fail("more than 2^24 metadata array elements")
        return [self.value(elem, depth + 1) for _ in range(n)]


def read_gguf(path: str) -> GGUFFile:
    """Parse a GGUF file's header; tensor data stays in a read-only memory map."""
    data = np.memmap(path, dtype=np.uint8, mode="r") if _size(path) > 0 else np.zeros(0, np.uint8)
    r = _Reader(memoryview(data))  # type: ignore[arg-type]
    if len(data) < 4 or bytes(data[:4]) != b"GGUF":
        raise ValueError(f"'{path}' is not a GGUF file (bad magic)")
    r.pos = 4
    version = r.scalar("<I", "version")
    if version not in (2, 3):
        raise ValueError(f"unsupported GGUF version {version} in '{path}' (ossa reads versions 2 and 3)")
    n_tensors = r.scalar("<Q", "tensor count")
    n_kv = r.scalar("<Q", "metadata count")
    if n_kv > r.left() // 13:
        raise r.fail(f"metadata count {n_kv} cannot fit in the file")
    if n_tensors > r.left() // 24:
        raise r.fail(f"tensor count {n_tensors} cannot fit in the file")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string("metadata key")
        t = r.value_type("metadata type")
        value = r.value(t, 0)
        if key in metadata:
            raise r.fail(f"duplicate metadata key '{key!s}'")
        metadata[key] = value  # type: ignore[index]
    alignment = metadata.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise r.fail(f"general.alignment {alignment} is not a power of two")
    tensors: dict[str | bytes, GGUFTensorInfo] = {}
    for _ in range(n_tensors):
        name = r.string("tensor name")
        n_dims = r.scalar("<I", "tensor dims")
        if not 1 <= n_dims <= 4:
            raise r.fail(f"tensor '{name!s}' has {n_dims} dimensions")
        ne = [r.scalar("<q", "tensor shape") for _ in range(n_dims)]
        if any(x < 0 for x in ne):
            raise r.fail(f"tensor '{name!s}' has a negative dimension")
        n = 1
        for x in ne:
            n *= x
        if n >= 1 << 63:
            raise r.fail(f"tensor '{name!s}' has an absurd number of elements")
        ggml_type = r.scalar("<I", "tensor type")
        offset = r.scalar("<Q", "tensor offset")
        if offset % alignment:
            raise r.fail(f"tensor '{name!s}' offset is not a multiple of the alignment")
        if name in tensors:
            raise r.fail(f"duplicate tensor '{name!s}'")
        tensors[name] = GGUFTensorInfo(name, ne, ggml_type, offset)
    data_offset = (r.pos + alignment - 1) // alignment * alignment
    if data_offset > len(data) and tensors:
        raise r.fail("data section starts past the end of the file")
    data_size = max(len(data) - data_offset, 0)
    for info in tensors.values():
        if info.ggml_type not in quants.TYPES:
            continue
        _, block_elems, block_bytes = quants.TYPES[info.ggml_type]
        if info.ne[0] % block_elems:
            raise ValueError(
                f"tensor '{info.name!s}' of type {info.type_name} has {info.ne[0]} columns, "
                f"not a multiple of the block size {block_elems}"
            )
        nbytes = info.ne[0] // block_elems * block_bytes
        for x in info.ne[1:]:
            nbytes *= x
        if info.offset > data_size or nbytes > data_size - info.offset:
            raise ValueError(f"corrupt GGUF file: tensor '{info.name!s}' runs past the end of the file")
    return GGUFFile(path, version, metadata, tensors, data_offset, data)


def _size(path: str) -> int:
    import os

    return os.path.getsize(path)
