"""A safetensors reader in plain Python/NumPy (twin of ``csrc/formats/safetensors.cpp``).

``u64 header_len | JSON header | data``; each header entry is ``{"dtype", "shape", "data_offsets"}``
with offsets relative to the data section.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field

import numpy as np

_SIZES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
}  # fmt: skip
_MAX_HEADER = 100 << 20


@dataclass
class SafetensorsInfo:
    name: str
    dtype: str
    shape: list[int]
    begin: int
    end: int


@dataclass
class SafetensorsFile:
    path: str
    tensors: dict[str, SafetensorsInfo]
    metadata: dict[str, str]
    data_offset: int
    _data: np.ndarray = field(repr=False)

    def tensor(self, name: str) -> np.ndarray:
        """A tensor as float32 in its own shape (F32/F16/BF16 only)."""
        info = self.tensors[name]
        raw = self._data[self.data_offset + info.begin : self.data_offset + info.end]
        if info.dtype == "F32":
            out = raw.view("<f4").astype(np.float32)
        elif info.dtype == "F16":
            out = raw.view("<f2").astype(np.float32)
        elif info.dtype == "BF16":
            out = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(
                f"unsupported dtype '{info.dtype}' for tensor '{name}' in '{self.path}' "
                "(ossa reads F32, F16 and BF16 safetensors)"
            )
        return out.reshape(info.shape)

    def raw(self, name: str) -> np.ndarray:
        """A tensor's stored bytes whatever its dtype, flat (FP8 weights and E8M0 scales)."""
        info = self.tensors[name]
        return self._data[self.data_offset + info.begin : self.data_offset + info.end]

    def u8(self, name: str) -> np.ndarray:
        """A U8 tensor's bytes in its own shape (HF MXFP4 blocks and scales); ValueError for any other
        dtype."""
        info = self.tensors[name]
        if info.dtype != "U8":
            raise ValueError(f"tensor '{name}' in '{self.path}' has type '{info.dtype}', expected U8")
        return self._data[self.data_offset + info.begin : self.data_offset + info.end].reshape(info.shape)


def read_safetensors(path: str) -> SafetensorsFile:
    """Parse a safetensors header, checking every offset and shape; data stays memory-mapped."""
    size = os.path.getsize(path)
    if size < 8:
        raise ValueError(f"corrupt safetensors file '{path}': shorter than its 8-byte header length")
    data = np.memmap(path, dtype=np.uint8, mode="r")
    (n,) = struct.unpack("<Q", bytes(data[:8]))
    if n > _MAX_HEADER or n > size - 8:
        raise ValueError(f"corrupt safetensors file '{path}': header length {n} exceeds the file size")
    try:
        header = json.loads(bytes(data[8 : 8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"invalid JSON in the header of '{path}': {e}") from None
    if not isinstance(header, dict):
        raise ValueError(f"corrupt safetensors file '{path}': header is not a JSON object")
    data_size = size - 8 - n
    tensors: dict[str, SafetensorsInfo] = {}
    metadata: dict[str, str] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise ValueError(f"corrupt safetensors file '{path}': bad __metadata__")
            metadata = dict(entry)
            continue
        where = f"tensor '{name}' in '{path}'"
        if not isinstance(entry, dict):
            raise ValueError(f"corrupt {where}: entry is not an object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or not isinstance(shape, list) or not isinstance(offsets, list):
            raise ValueError(f"corrupt {where}: needs dtype, shape and data_offsets")
        if dtype not in _SIZES:
            raise ValueError(f"corrupt {where}: unknown dtype '{dtype}'")
        ints = shape + offsets
        if len(offsets) != 2 or len(shape) > 8 or not all(type(x) is int and x >= 0 for x in ints):
            raise ValueError(f"corrupt {where}: bad shape or data_offsets")
        nbytes = int(np.prod(shape, dtype=object)) * _SIZES[dtype] if shape else _SIZES[dtype]
        begin, end = offsets
        if end < begin or end - begin != nbytes:
            raise ValueError(f"corrupt {where}: data_offsets do not match its shape and dtype")
        if end > data_size:
            raise ValueError(f"corrupt {where}: data runs past the end of the file")
        tensors[name] = SafetensorsInfo(name, dtype, list(shape), begin, end)
    return SafetensorsFile(path, tensors, metadata, 8 + n, data)
