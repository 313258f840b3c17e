"""Split GGUF models as llama.cpp writes them (twin of ``csrc/formats/gguf_split.cpp``).

``name-00001-of-00003.gguf`` … ``name-00003-of-00003.gguf``: each shard a complete GGUF file with
``split.no`` (0-based), ``split.count`` and, in the first, ``split.tensors.count`` and the model's
metadata; the tensors are spread over the shards. Opening any shard opens all of them; a missing or
mismatched shard, a tensor in two shards, or counts that do not add up raise ValueError.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from .gguf import GGUFFile, GGUFTensorInfo, read_gguf

_SHARD = re.compile(r"^(.*)-(\d{5})-of-(\d{5})\.gguf$")


def _split_keys(g: GGUFFile, path: str) -> tuple[int, int]:
    count, no = g.metadata.get("split.count", 1), g.metadata.get("split.no", 0)
    if not (isinstance(count, int) and isinstance(no, int) and 1 <= count <= 99999 and 0 <= no < count):
        raise ValueError(f"'{path}' has invalid split keys (split.no {no}, split.count {count})")
    return no, count


def shard_paths(path: str, opened: GGUFFile) -> list[str]:
    """Every shard of the model `path` is a file of (``[path]`` when it is not split)."""
    no, count = _split_keys(opened, path)
    if count == 1:
        return [path]
    m = _SHARD.match(path)
    if m is None:
        raise ValueError(
            f"'{path}' is shard {no + 1} of {count} of a split model (split.count), but its name does not "
            "end in -NNNNN-of-NNNNN.gguf, so the other shards cannot be found"
        )
    if int(m.group(3)) != count or int(m.group(2)) != no + 1:
        raise ValueError(
            f"'{path}' says it is shard {no + 1} of {count} (split.no, split.count), "
            "which its name contradicts"
        )
    return [f"{m.group(1)}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


@dataclass
class GGUFModel:
    """The shards of one model: metadata from the first, tensors from whichever holds them."""

    paths: list[str]
    shards: list[GGUFFile]
    tensors: dict[str | bytes, GGUFTensorInfo]
    _where: dict[str | bytes, GGUFFile]

    @property
    def metadata(self) -> dict[str, Any]:
        return self.shards[0].metadata

    def raw(self, name: str | bytes) -> np.ndarray:
        return self._where[name].raw(name)

    def tensor(self, name: str | bytes) -> np.ndarray:
        return self._where[name].tensor(name)


def read_gguf_model(path: str) -> GGUFModel:
    """Open the GGUF model `path` is a file of: all of its shards, checked against one another."""
    given = read_gguf(path)
    paths = shard_paths(path, given)
    shards: list[GGUFFile] = []
    where: dict[str | bytes, GGUFFile] = {}
    for i, p in enumerate(paths):
        if p != path and not os.path.isfile(p):
            raise ValueError(f"shard {i + 1} of {len(paths)} of '{path}' is missing: '{p}'")
        g = given if p == path else read_gguf(p)
        no, count = _split_keys(g, p)
        if (no, count) != (i, len(paths)):
            raise ValueError(
                f"'{p}' is not shard {i + 1} of {len(paths)} (its split.no is {no}, split.count {count}): "
                "a shard of another split?"
            )
        for name in g.tensors:
            if name in where:
                raise ValueError(f"tensor '{name!s}' appears in two shards of '{paths[0]}'")
            where[name] = g
        shards.append(g)
    expect = shards[0].metadata.get("split.tensors.count", len(where)) if len(paths) > 1 else len(where)
    if expect != len(where):
        raise ValueError(
            f"the {len(paths)} shards of '{paths[0]}' hold {len(where)} tensors, "
            f"but split.tensors.count says {expect}"
        )
    tensors = {name: g.tensors[name] for name, g in where.items()}
    return GGUFModel(paths, shards, tensors, where)
