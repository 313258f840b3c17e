"""Batch invariance of the forward pass: a sequence's logits are bitwise the same computed alone,
inside a batch with 7 other sequences, prefilled in chunks of 1, 7 and 64 tokens, and with 1 or 2
threads, with a float32 or a float16 K/V cache. Also copy-on-write (copy_block), the runner's input
validation and the float16 cache against the reference runner."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from tiny_models import hf_to_gguf, make_hf_model, with_random_kquants

from ossa._native import core

BLOCK = 16
SEQ_LEN = 72  # not a multiple of the block size, nor of the chunk sizes
BLOCKS_PER_SEQ = (SEQ_LEN + BLOCK - 1) // BLOCK


class Runner:
    """A ModelRunner where sequence i owns blocks [i * BLOCKS_PER_SEQ, (i + 1) * BLOCKS_PER_SEQ),
    laid out in reverse so block ids and slots are not simply the positions."""

    def __init__(self, model: Any, n_seqs: int, max_tokens: int, kv: str = "float32") -> None:
        # (a model with recurrent layers: sequence i keeps its state in slot i)
        self.runner = core.ModelRunner(
            model, n_seqs * BLOCKS_PER_SEQ, BLOCK, max_tokens, kv, num_state_slots=n_seqs
        )
        self.n_seqs = n_seqs

    def table(self, seq: int) -> list[int]:
        first = (self.n_seqs - 1 - seq) * BLOCKS_PER_SEQ
        return list(range(first + BLOCKS_PER_SEQ - 1, first - 1, -1))

    def step(self, chunks: list[tuple[int, list[int], int]]) -> list[np.ndarray]:
        """chunks: (seq, tokens, first position). Returns each chunk's logits [len(tokens), vocab]."""
        ids, pos, slots, seq_start, ctx, bt_start, tables, rows = [], [], [], [0], [], [0], [], []
        for seq, tokens, start in chunks:
            table = self.table(seq)
            for i, tok in enumerate(tokens):
                p = start + i
                rows.append(len(ids))
                ids.append(tok)
                pos.append(p)
                slots.append(table[p // BLOCK] * BLOCK + p % BLOCK)
            seq_start.append(len(ids))
            ctx.append(start + len(tokens))
            tables += table
            bt_start.append(len(tables))
        states = [seq for seq, _, _ in chunks]
        logits = self.runner.forward(ids, pos, slots, seq_start, ctx, bt_start, tables, rows, states)
        out, at = [], 0
        for _, tokens, _ in chunks:
            out.append(logits[at : at + len(tokens)])
            at += len(tokens)
        return out


def chunked(tokens: list[int], size: int) -> Iterator[tuple[list[int], int]]:
    for start in range(0, len(tokens), size):
        yield tokens[start : start + size], start


def check_invariance(model: Any, vocab: int, seed: int, kv: str = "float32") -> None:
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(0, vocab, SEQ_LEN).tolist() for _ in range(8)]
    target = seqs[3]
    reference = None
    for threads in (1, 2):
        core.set_num_threads(threads)
        alone = Runner(model, 1, SEQ_LEN, kv).step([(0, target, 0)])[0]
        if reference is None:
            reference = alone
        np.testing.assert_array_equal(alone, reference)
        # Inside a batch with 7 others (the target in the middle, others of varied lengths).
        batch = Runner(model, 8, 8 * SEQ_LEN, kv)
        chunks = [(i, s[: SEQ_LEN - 5 * i] if i != 3 else s, 0) for i, s in enumerate(seqs)]
        np.testing.assert_array_equal(batch.step(chunks)[3], reference)
        # Chunked prefill, alone and next to another sequence's chunks.
        for size in (1, 7, 64):
            r = Runner(model, 2, 2 * SEQ_LEN, kv)
            got = []
            other = list(chunked(seqs[0], 5))
            for i, (toks, start) in enumerate(chunked(target, size)):
                step = [(1, toks, start)]
                if i < len(other):
                    step.insert(0, (0, *other[i]))
                got.append(r.step(step)[-1])
            np.testing.assert_array_equal(np.concatenate(got), reference, err_msg=f"chunk size {size}")
    core.set_num_threads(2)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_hf_model(
        tmp_path_factory.mktemp("inv") / "qwen2",
        arch="qwen2",
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=128,
        vocab_size=96,
    )


@pytest.mark.parametrize("kv", ["float32", "float16"])
@pytest.mark.parametrize("fmt", ["F32", "BF16", "Q4_1"])
def test_tiny_model_is_batch_invariant(
    tiny_dir: str, fmt: str, kv: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = hf_to_gguf(tiny_dir, tmp_path_factory.mktemp("g") / f"m-{fmt}.gguf", fmt)
    check_invariance(core.load_model(path), 96, seed=1, kv=kv)


@pytest.mark.parametrize(
    ("heads", "kv_heads", "head_dim"),
    [(6, 2, 20), (8, 1, 18), (4, 4, 36), (8, 2, 64), (4, 2, 128), (2, 1, 256)],
    ids=["group3-hd20", "group8-hd18", "group1-hd36", "group4-hd64", "group2-hd128", "group2-hd256"],
)
def test_attention_shapes_are_batch_invariant(
    heads: int, kv_heads: int, head_dim: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Prefill attention takes runs of a sequence's consecutive tokens together (kernels/
    attention.cpp, attend_tokens: up to 16 (token, head) chains in the lanes) and single tokens
    one by one (attend_heads): chunk size 1 against the whole prompt checks that the two give the
    same bits, here for heads per KV group 1 to 8 (runs of 16 down to 4 tokens), head sizes that are
    not a multiple of 16 (a masked last column chunk) nor of 4 (the score chain 0 tail), and
    Llama-3B's 128 and Gemma's 256 (the largest head sizes attend_heads takes)."""
    d = tmp_path_factory.mktemp("shape")
    hf = make_hf_model(d / "llama", arch="llama", hidden_size=48, num_layers=1, num_heads=heads,
                       num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=64,
                       vocab_size=96, seed=3)  # fmt: skip
    model = core.load_model(hf_to_gguf(hf, d / "m.gguf", "F32"))
    for kv in ("float32", "float16"):
        check_invariance(model, 96, seed=2, kv=kv)


@pytest.fixture(scope="module")
def kquant_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Rows of 256 and 512 (K-quant super-blocks): Q4_K and Q6_K matrices as in a Q4_K_M file."""
    d = tmp_path_factory.mktemp("kq")
    hf = make_hf_model(d / "llama", arch="llama", hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
                       intermediate_size=512, vocab_size=96)  # fmt: skip
    return with_random_kquants(hf_to_gguf(hf, d / "f32.gguf", "F32"), d / "kq.gguf", seed=7)


def test_kquant_model_is_batch_invariant(kquant_path: str) -> None:
    check_invariance(core.load_model(kquant_path), 96, seed=5)


def test_kquant_model_matches_the_reference_runner(kquant_path: str) -> None:
    """The Q4_K / Q6_K kernels in a whole forward (several weights of mixed types per matmul call)
    against the NumPy twin on the same file's dequantized weights."""
    from ossa.reference.loader import load_weights
    from ossa.reference.runner import ModelRunner as RefRunner

    config, weights = load_weights(kquant_path)
    n = 40
    tokens = np.random.default_rng(6).integers(0, 96, n).tolist()
    nb = (n + BLOCK - 1) // BLOCK
    table = list(range(nb))
    args = (tokens, list(range(n)), list(range(n)), [0, n], [n], [0, nb], table, list(range(n)))
    got = core.ModelRunner(core.load_model(kquant_path), nb, BLOCK, n).forward(*args)
    ref = RefRunner(config, weights, nb, BLOCK).forward(*args)
    assert np.all(np.isfinite(ref)) and np.abs(ref).max() > 1e-2  # a forward with something in it
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("kv", ["float32", "float16"])
def test_default_model_is_batch_invariant(default_model_path: str, kv: str) -> None:
    check_invariance(core.load_model(default_model_path), 49152, seed=2, kv=kv)


def test_float16_cache_matches_the_reference_runner(tiny_dir: str) -> None:
    """The C++ float16 K/V cache rounds K and V as the reference runner's float16 pool does: with
    f32 kernels (F32 weights) the two runners agree far more closely than either does with a
    float32 cache, so the test would catch a cache that stored, or read back, something else."""
    from ossa.reference.loader import load_weights
    from ossa.reference.runner import ModelRunner as RefRunner

    config, weights = load_weights(tiny_dir)
    tokens = np.random.default_rng(4).integers(0, 96, SEQ_LEN).tolist()
    table = list(range(BLOCKS_PER_SEQ))
    args = (
        tokens,
        list(range(SEQ_LEN)),
        [table[p // BLOCK] * BLOCK + p % BLOCK for p in range(SEQ_LEN)],
        [0, SEQ_LEN],
        [SEQ_LEN],
        [0, BLOCKS_PER_SEQ],
        table,
        list(range(SEQ_LEN)),
    )
    model = core.load_model(tiny_dir)
    got = {
        kv: core.ModelRunner(model, BLOCKS_PER_SEQ, BLOCK, SEQ_LEN, kv).forward(*args)
        for kv in ("float32", "float16")
    }
    ref = {
        kv: RefRunner(config, weights, BLOCKS_PER_SEQ, BLOCK, kv_cache_dtype=kv).forward(*args)
        for kv in ("float32", "float16")
    }
    rounding = np.abs(ref["float16"] - ref["float32"]).max()
    assert rounding > 1e-5  # float16 K/V visibly moves the logits ...
    assert np.abs(got["float16"] - ref["float16"]).max() < rounding / 10  # ... and both sides move alike
    assert np.abs(got["float32"] - ref["float32"]).max() < rounding / 10
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        core.ModelRunner(model, 2, BLOCK, 8, "int8")
    assert core.ModelRunner(model, 2, BLOCK, 8, "float16").kv_cache_dtype == "float16"


@pytest.mark.parametrize("kv", ["float32", "float16"])
def test_copy_block_forks_a_sequence(tiny_dir: str, kv: str) -> None:
    model = core.load_model(tiny_dir)
    tokens = np.random.default_rng(3).integers(0, 96, 40).tolist()
    r = Runner(model, 2, 64, kv)
    expect = r.step([(0, tokens, 0)])[0]
    # Sequence 1 shares sequence 0's first 32 tokens by copying its blocks, then computes the rest.
    for b in range(2):
        r.runner.copy_block(r.table(0)[b], r.table(1)[b])
    got = r.step([(1, tokens[32:], 32)])[0]
    np.testing.assert_array_equal(got, expect[32:])


def test_runner_rejects_bad_batches(tiny_dir: str) -> None:
    r = core.ModelRunner(core.load_model(tiny_dir), 2, BLOCK, 8)
    ok = dict(
        token_ids=[1, 2],
        positions=[0, 1],
        slot_mapping=[0, 1],
        seq_start=[0, 2],
        context_len=[2],
        block_table_start=[0, 1],
        block_tables=[0],
        logits_rows=[1],
    )
    assert r.forward(**ok).shape == (1, 96)
    bad = [
        dict(token_ids=[1, 96]),
        dict(positions=[0, 16]),
        dict(slot_mapping=[0, 32]),
        dict(block_tables=[2]),
        dict(context_len=[17]),
        dict(seq_start=[0, 1]),
        dict(logits_rows=[1, 0]),
        dict(token_ids=[1] * 9, positions=list(range(9)), slot_mapping=list(range(9)), seq_start=[0, 9]),
    ]
    for change in bad:
        with pytest.raises(ValueError):
            r.forward(**{**ok, **change})
    with pytest.raises(ValueError):
        r.copy_block(0, 2)
    with pytest.raises(ValueError):
        core.ModelRunner(core.load_model(tiny_dir), 0, BLOCK, 8)
