"""The draft model of ``speculative_config={"model": DRAFT, "num_speculative_tokens": k}``: loaded with
the target's load options and checked to share its vocabulary (the same ``vocab_size`` and the same
token table: every token's bytes and whether it is special), so the draft's token ids mean what the
target's mean. The engine runs it (csrc/engine/draft_model.h; twin: ``ossa.reference.draft_model``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .backend import Backend
    from .config import EngineArgs
    from .models import Model
    from .tokenizer import Tokenizer


@dataclass
class DraftModel:
    model: Model
    path: str
    cost: float  # the ratio of its weight bytes to the target's (decode reads them once a step)


def load_draft_model(
    args: EngineArgs, name: str, target: Model, tokenizer: Tokenizer, backend: Backend
) -> DraftModel:
    """Loads the draft (ValueError naming ``speculative_config model`` for a bad file or a vocabulary
    that differs from the target's)."""
    from . import models
    from .hub import Source

    try:
        path = models.resolve(name, Source(None, args.download_dir, args.hf_token))
        model = models.load_model(
            path, args.dtype, amx=args.amx, quantized_activations=args.quantized_activations
        )
        draft_tokenizer = backend.load_tokenizer(path)
    except (ValueError, OSError) as e:
        raise ValueError(f"speculative_config model {name!r}: {e}") from None
    check_vocabulary(target, tokenizer, model, draft_tokenizer)
    ratio = models.weight_bytes(path) / max(models.weight_bytes(target.path), 1)
    return DraftModel(model, path, min(ratio, 1.0))


def check_vocabulary(target: Model, tokenizer: Tokenizer, draft: Model, draft_tokenizer: Tokenizer) -> None:
    """ValueError naming the field unless the draft's vocabulary is the target's."""
    if draft.config.n_vocab != target.config.n_vocab:
        raise ValueError(
            f"speculative_config model: the draft's vocab_size {draft.config.n_vocab} differs from the "
            f"target's {target.config.n_vocab}"
        )
    tokens, special = tokenizer.token_table()
    d_tokens, d_special = draft_tokenizer.token_table()
    if len(d_tokens) != len(tokens):
        raise ValueError(
            f"speculative_config model: the draft's token table has {len(d_tokens)} tokens, the "
            f"target's {len(tokens)}"
        )
    for i, (a, b, sa, sb) in enumerate(zip(tokens, d_tokens, special, d_special, strict=True)):
        if a != b or sa != sb:
            raise ValueError(
                f"speculative_config model: the draft's token table differs from the target's at token "
                f"id {i} ({_describe(b, sb)} vs {_describe(a, sa)})"
            )


def _describe(token: bytes, special: bool) -> str:
    return f"{token!r}{' special' if special else ''}"
