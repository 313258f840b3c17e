"""ossa: a small, fast, deterministic LLM inference engine for CPUs.

Python is the skin (API, chat templates, HTTP server); C++ is the bone (decode loop, scheduler,
paged KV cache, sampler, tokenizer, kernels).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# Public names are resolved lazily so that `import ossa` stays cheap and a partial development
# build of the core still imports.
_LAZY = {
    "load_model": ("ossa.models", "load_model"),
    "ModelError": ("ossa._native", "core.ModelError"),
    "Tokenizer": ("ossa.tokenizer", "Tokenizer"),
    "SamplingParams": ("ossa.sampling_params", "SamplingParams"),
    "LLM": ("ossa.llm", "LLM"),
    "AsyncLLM": ("ossa.async_engine", "AsyncLLM"),
    "AsyncLLMEngine": ("ossa.async_engine", "AsyncLLMEngine"),
    "EngineArgs": ("ossa.config", "EngineArgs"),
    "AsyncEngineArgs": ("ossa.config", "EngineArgs"),
    "RequestOutputKind": ("ossa.sampling_params", "RequestOutputKind"),
    "RequestOutput": ("ossa.outputs", "RequestOutput"),
    "CompletionOutput": ("ossa.outputs", "CompletionOutput"),
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'ossa' has no attribute {name!r}")
    import importlib

    module_name, attr = _LAZY[name]
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    globals()[name] = obj
    return obj
