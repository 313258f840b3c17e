"""Loads the C++ core, ``ossa._core``.

Normally the extension sits in the installed package. For development builds made with plain CMake
(``cmake -S . -B build/dev && cmake --build build/dev``), set ``OSSA_CORE_DIR`` to the folder holding
the built ``_core*.so`` and run with ``PYTHONPATH=src``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType


def _load() -> ModuleType:
    core_dir = os.environ.get("OSSA_CORE_DIR")
    if core_dir:
        for name in sorted(os.listdir(core_dir)):
            if name.startswith("_core") and name.endswith((".so", ".pyd")):
                spec = importlib.util.spec_from_file_location("ossa._core", os.path.join(core_dir, name))
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules["ossa._core"] = module
                spec.loader.exec_module(module)
                return module
        raise ImportError(f"OSSA_CORE_DIR={core_dir!r} holds no _core extension")
    from . import _core  # type: ignore[attr-defined]

    return _core


core = _load()
