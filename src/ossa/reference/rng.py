"""Philox4x32-10, the counter-based RNG of the sampler (twin of ``csrc/util/philox.h``).

A draw is a pure function of (key, counter): the sampler keys it by the request's seed and counts
by (stream, step), so a request's step t gets the same number whatever else is in the batch.
"""

from __future__ import annotations

_MASK32 = 0xFFFFFFFF
_MUL0, _MUL1 = 0xD2511F53, 0xCD9E8D57
_WEYL0, _WEYL1 = 0x9E3779B9, 0xBB67AE85


def philox4x32_10(counter: tuple[int, int, int, int], key: tuple[int, int]) -> tuple[int, int, int, int]:
    """Ten Philox rounds over a 4 x 32-bit counter with a 2 x 32-bit key (Random123's philox4x32_10)."""
    c0, c1, c2, c3 = (int(v) & _MASK32 for v in counter)
    k0, k1 = (int(v) & _MASK32 for v in key)
    for round_ in range(10):
        if round_ > 0:
            k0 = (k0 + _WEYL0) & _MASK32
            k1 = (k1 + _WEYL1) & _MASK32
        p0 = _MUL0 * c0
        p1 = _MUL1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & _MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & _MASK32)
    return c0, c1, c2, c3


def philox_uniform(seed: int, stream: int, step: int) -> float:
    """The sampler's uniform draw in [0, 1) for (seed, stream, step).

    key = (seed lo, seed hi), counter = (step lo, step hi, stream lo, stream hi);
    u = (((x0 << 32) | x1) >> 11) * 2**-53.
    """
    seed &= (1 << 64) - 1
    stream &= (1 << 64) - 1
    step &= (1 << 64) - 1
    x = philox4x32_10(
        (step & _MASK32, step >> 32, stream & _MASK32, stream >> 32), (seed & _MASK32, seed >> 32)
    )
    bits = ((x[0] << 32) | x[1]) >> 11
    return bits * 2.0**-53
