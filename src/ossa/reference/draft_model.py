"""Python twin of ``csrc/engine/draft_model``: a draft model of the target's vocabulary proposes each
decoding child's next k tokens greedily (argmax, lowest id on ties, NaN never chosen).

Its own runner (as many blocks as the target's cache) and KVCacheManager (no prefix caching); per
child a draft sequence of the tokens whose draft K/V is written. A proposal keeps the longest common
prefix of those and the child's tokens (the last token always fed again), trims the blocks to it,
feeds the rest (chunked by the token budget), then k - 1 one-token forwards batched over the
proposing children. Blocks that do not fit: the sequences of children not proposing this step are
freed, least recently used first (ties: request key, then child); when that is not enough the child
gets no draft. The same steps in the same order as the C++ class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .batch_builder import Batch, append_sequence
from .kv_cache_manager import KVCacheManager
from .loader import load_weights
from .runner import ModelRunner


@dataclass
class DraftOptions:
    """How the draft was loaded (so the twin rounds activations as its C++ kernels do)."""

    path: str
    quantized_activations: bool = False
    amx_activations: bool = False
    int8_matrices: Mapping[str, int] = field(default_factory=dict)  # the draft's int8_matrices


@dataclass
class _Seq:
    slot: int
    tokens: list[int] = field(default_factory=list)
    last_used: int = 0


@dataclass
class _Proposal:
    request: int
    child: int
    tokens: list[int]
    k: int
    seq: _Seq | None = None
    draft: list[int] = field(default_factory=list)


def argmax(row: np.ndarray) -> int:
    """The first maximum; NaN never chosen (C++'s ``l[v] > best`` from -inf); 0 when none is > -inf."""
    clean = np.where(np.isnan(row), -np.inf, row)
    best = int(np.argmax(clean))
    return best if clean[best] > -np.inf else 0


class DraftModel:
    def __init__(
        self,
        options: DraftOptions,
        num_blocks: int,
        block_size: int,
        max_num_batched_tokens: int,
        kv_cache_dtype: str,
        compute_dtype: str,
    ) -> None:
        config, weights = load_weights(options.path)
        if config["state_bytes"]:
            raise ValueError(
                "a draft model with recurrent layers (Qwen3.5's delta-nets, LFM2's convolutions, Mamba-2) "
                "is not supported"
            )
        self.n_vocab = int(config["n_vocab"])
        self.runner = ModelRunner(
            config, weights, num_blocks, block_size, options.quantized_activations,
            options.amx_activations, kv_cache_dtype, compute_dtype, options.int8_matrices,
        )  # fmt: skip
        self.kv = KVCacheManager(num_blocks, block_size, enable_prefix_caching=False, watermark=0.0)
        self.block_size = block_size
        self.max_tokens = max_num_batched_tokens
        self.seqs: dict[tuple[int, int], _Seq] = {}
        self.free_slots: list[int] = []
        self.next_slot = 0
        self.step = 0
        self.props: list[_Proposal] = []

    def clear(self) -> None:
        self.props = []

    def add(self, request: int, child: int, tokens: Sequence[int], k: int) -> None:
        assert k >= 1 and len(tokens) > 0
        self.props.append(_Proposal(request, child, list(tokens), k))

    def release(self, request: int) -> None:
        """A request ended: its children's draft sequences are freed."""
        for key in sorted(k for k in self.seqs if k[0] == request):
            s = self.seqs.pop(key)
            self.kv.free(s.slot)
            self.free_slots.append(s.slot)

    def _make_room(self, seq: _Seq, num_computed: int, num_new: int) -> bool:
        while not self.kv.allocate_slots(seq.slot, num_computed, num_new)[0]:
            victims = [(s.last_used, key) for key, s in self.seqs.items() if s.last_used < self.step]
            if not victims:
                return False
            _, key = min(victims)
            s = self.seqs.pop(key)
            self.kv.free(s.slot)
            self.free_slots.append(s.slot)
        return True

    def run(self) -> None:
        self.step += 1
        for p in self.props:
            s = self.seqs.get((p.request, p.child))
            if s is None:
                slot = self.free_slots.pop() if self.free_slots else self._new_slot()
                s = self.seqs[(p.request, p.child)] = _Seq(slot)
            s.last_used = self.step
            p.seq = s
        pieces: list[tuple[int, int, int]] = []  # (proposal, first position, tokens)
        for i, p in enumerate(self.props):
            s = p.seq
            assert s is not None
            n = len(p.tokens)
            common = 0
            while common < min(len(s.tokens), n) and s.tokens[common] == p.tokens[common]:
                common += 1
            keep = min(common, n - 1)
            self.kv.trim(s.slot, keep)
            del s.tokens[keep:]
            if not self._make_room(s, keep, n + p.k - 1 - keep):
                p.seq = None  # no draft this step
                continue
            s.tokens.extend(p.tokens[keep:])
            pieces.append((i, keep, n - keep))
        self._feed(pieces)
        k_max = max((p.k for p in self.props), default=0)
        for j in range(1, k_max):
            pieces = []
            for i, p in enumerate(self.props):
                if p.seq is None or p.k <= j:
                    continue
                pieces.append((i, len(p.seq.tokens), 1))
                p.seq.tokens.append(p.draft[j - 1])
            self._feed(pieces)

    def _new_slot(self) -> int:
        self.next_slot += 1
        return self.next_slot - 1

    def draft(self, i: int) -> list[int]:
        return self.props[i].draft

    def _feed(self, pieces: list[tuple[int, int, int]]) -> None:
        chunk: list[tuple[int, int, int, bool]] = []
        used = 0
        for i, pos, n in pieces:
            left = n
            while left > 0:
                take = min(left, self.max_tokens - used)
                chunk.append((i, pos, take, take == left))
                used, pos, left = used + take, pos + take, left - take
                if used == self.max_tokens:
                    self._forward(chunk)
                    chunk, used = [], 0
        if used > 0:
            self._forward(chunk)

    def _forward(self, chunk: list[tuple[int, int, int, bool]]) -> None:
        b = Batch()
        for i, pos, n, want in chunk:
            s = self.props[i].seq
            assert s is not None
            append_sequence(b, self.block_size, s.tokens, [], pos, n, self.kv.table_view(s.slot))
            if want:
                b.logits_rows.append(len(b.token_ids) - 1)
        with np.errstate(invalid="ignore", over="ignore"):
            logits = self.runner.forward(
                b.token_ids, b.positions, b.slot_mapping, b.seq_start, b.context_len,
                b.block_table_start, b.block_tables, b.logits_rows,
            )  # fmt: skip
        r = 0
        for i, _pos, _n, want in chunk:
            if want:
                self.props[i].draft.append(argmax(logits[r]))
                r += 1
