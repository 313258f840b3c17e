"""Started by every Python process of the vLLM peer (benchmarks/peer_env.py puts this folder on its
PYTHONPATH), vLLM's own subprocesses included, such as its model-registry inspection.

/root/vllm-venv holds torch 2.13.0+cpu beside a CUDA build of torchvision 0.28.0 (it bundles libcudart;
``RuntimeError: operator torchvision::nms does not exist``) and a torchaudio 2.11.1 built for another
torch (``OSError: Could not load this library: .../_torchaudio.so``). transformers and vLLM import them
whenever they find them installed, so ``import vllm`` failed. Text models need neither: each of them
that does not import is hidden here (``importlib.util.find_spec`` then reports it absent). Nothing
else of vLLM's environment or settings changes.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys


def _hide_broken(packages: tuple[str, ...] = ("torchvision", "torchaudio", "torchcodec")) -> None:
    for package in packages:
        if importlib.util.find_spec(package) is None:
            continue
        try:
            importlib.import_module(package)
        except Exception:  # whatever breaks its import, the package is unusable here
            for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
                del sys.modules[name]
            sys.modules[package] = None  # type: ignore[assignment]


_hide_broken()
