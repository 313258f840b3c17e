"""Python twin of ``csrc/engine/constraints``: which sampled rows of a step carry a grammar, the
tokens each one's matcher still has to consume, and the masks the ``ConstraintHost`` returns.

The C++ engine computes the masks on a worker thread while the forward pass runs; the twin calls
the host inline. Both hand it the same batch in the same order, so the matchers see the same tokens
and the sampler the same masks.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class ConstraintStage:
    def __init__(self) -> None:
        self.host: Any = None
        self.released: list[int] = []
        self.calls = 0

    def release(self, handle: int) -> None:
        self.released.append(handle)

    def run(
        self, rows: list[tuple[int, int, list[int], int]], n_vocab: int
    ) -> tuple[list[np.ndarray | None], list[str]]:
        """rows: (handle, child, output tokens, fed so far) of each constrained sampling row, in the
        engine's order. Returns each row's mask (None if its matcher failed) and error message."""
        words = (n_vocab + 31) // 32
        handles = np.array([r[0] for r in rows], dtype=np.int64)
        children = np.array([r[1] for r in rows], dtype=np.int32)
        feed: list[int] = []
        offsets = [0]
        for _h, _c, tokens, fed in rows:
            feed.extend(tokens[fed:])
            offsets.append(len(feed))
        released, self.released = np.array(self.released, dtype=np.int64), []
        masks = np.full((len(rows), words), -1, dtype=np.int32)
        self.calls += 1
        try:
            failed = self.host.compute(
                handles, children, np.array(offsets, dtype=np.int32), np.array(feed, dtype=np.int32),
                released, masks,
            )  # fmt: skip
        except Exception as e:  # the whole batch fails, as in C++
            msg = f"the constraint host failed: {e}"
            return [None] * len(rows), [msg] * len(rows)
        errors = [""] * len(rows)
        for i, message in failed or []:
            errors[i] = message
        return [None if errors[i] else masks[i] for i in range(len(rows))], errors
