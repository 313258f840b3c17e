"""Hugging Face transformers objects built from a GGUF file once per test session.

transformers reads a GGUF file (``from_pretrained(..., gguf_file=...)``) field by field in Python and
converts its vocabulary into a fast tokenizer; for the default model that is most of a minute of CPU
for the tokenizer alone, and the model dequantizes every tensor besides. Several test modules use
the same oracle, so each is built once per file and session here: the tokenizer is handed out as a
deep copy (callers may add tokens to theirs), the model, which no test changes, as the one object.
"""

from __future__ import annotations

import copy
import functools
import os
from typing import Any


@functools.cache
def _tokenizer(gguf_path: str) -> Any:
    from transformers import AutoTokenizer

    folder, file = os.path.split(gguf_path)
    return AutoTokenizer.from_pretrained(folder, gguf_file=file)


def tokenizer(gguf_path: str) -> Any:
    """A fresh copy of ``AutoTokenizer.from_pretrained(folder, gguf_file=name)`` (parsed once)."""
    return copy.deepcopy(_tokenizer(os.path.abspath(gguf_path)))


@functools.cache
def _causal_lm(gguf_path: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    folder, file = os.path.split(gguf_path)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32)
    model.eval()
    return model


def causal_lm(gguf_path: str) -> Any:
    """``AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=float32)``, in eval mode,
    loaded once per session: shared, so callers must not change it."""
    return _causal_lm(os.path.abspath(gguf_path))
