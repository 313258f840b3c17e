"""ossa on Ray: Ray Serve replicas behind the OpenAI API (``ossa.ray.serve``) and Ray Data batch
inference (``ossa.ray.data``). Ray is an optional extra: ``pip install "ossa[ray]"``.

Nothing here imports Ray at ``import ossa`` time; the submodules do, and without Ray they raise an
ImportError that names the extra.
"""

from __future__ import annotations

import importlib
from types import ModuleType

RAY_EXTRA_HINT = 'ossa\'s Ray integration needs Ray Serve and Ray Data: pip install "ossa[ray]"'


def require(module: str = "ray") -> ModuleType:
    """Imports ``module`` (``ray``, ``ray.serve``, ``ray.data``), or raises an ImportError naming the
    extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{RAY_EXTRA_HINT} (importing {module!r} failed: {e})") from e
