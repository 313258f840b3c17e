"""A tiny random Llama whose tokenizer is SmolLM2's plus the tool-call markers of common formats as
special added tokens (Hermes-2-Pro's ``<tool_call>`` / ``</tool_call>``, Llama 3's
``<|python_tag|>``, Mistral's ``[TOOL_CALLS]``), for tests of what special-token markers change."""

from __future__ import annotations

import os

MARKERS = ["<tool_call>", "</tool_call>", "<|python_tag|>", "[TOOL_CALLS]"]


def make_marker_model(
    out: str, default_model_path: str, markers: list[str] | None = None, chat_template: str | None = None
) -> str:
    """The model at ``out`` (made once): SmolLM2's tokenizer plus ``markers`` (default MARKERS) as
    special added tokens, and ``chat_template`` in place of SmolLM2's when given."""
    import hf_gguf
    from tiny_models import make_hf_model

    if not os.path.exists(os.path.join(out, "model.safetensors")):
        tok = hf_gguf.tokenizer(default_model_path)  # a copy: the tokens added here stay in it
        tok.add_special_tokens({"additional_special_tokens": markers or MARKERS})  # type: ignore[dict-item]
        if chat_template is not None:
            tok.chat_template = chat_template
        tok.save_pretrained(out)
        make_hf_model(
            out, "llama", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
            intermediate_size=128, vocab_size=len(tok),
        )  # fmt: skip
    return out
