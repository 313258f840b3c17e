"""The Llama-family forward pass in plain NumPy, written to be read.

The twin of ``csrc/model/llama.cpp``: Llama / SmolLM / Mistral, Qwen2 (qkv bias) and Qwen3 (RMSNorm
over each head of q and k before RoPE), with grouped-query attention and Llama-3 or linear RoPE
scaling. It runs in float32 on weights already dequantized (``ossa.reference.loader.load_weights``),
one sequence at a time, without a KV cache: every token attends causally to the ones before it.

The C++ kernels may round the activations they multiply (bf16 hi + lo on AMX, 8-bit blocks when
asked); ``forward`` can apply the same rounding, and then the two agree to float32 rounding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from . import moe as moe_twin

# No matrix split into int8 pieces (the default of ``int8_matrices``: name -> values per block).
NO_INT8: Mapping[str, int] = MappingProxyType({})


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """Scale each row of ``x`` to unit root-mean-square, then by ``weight``.

    The mean square is taken in float64 and the scaling done in float32, as the C++ kernel does.
    """
    mean_square = np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True)
    inv = (1.0 / np.sqrt(mean_square + eps)).astype(np.float32)
    return (weight * (x.astype(np.float32) * inv)).astype(np.float32)


def layer_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm without a bias (Cohere): (x - mean) / sqrt(var + eps) times ``weight``, the mean and the
    variance in float64, the rest in float32 (twin of ops layernorm_row)."""
    x64 = x.astype(np.float64)
    mean = np.mean(x64, axis=-1, keepdims=True)
    var = np.mean((x64 - mean) ** 2, axis=-1, keepdims=True)
    inv = (1.0 / np.sqrt(var + eps)).astype(np.float32)
    return (weight * ((x.astype(np.float32) - mean.astype(np.float32)) * inv)).astype(np.float32)


def norm(c: dict[str, Any], x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """The model's norm: LayerNorm (Cohere; StarCoder2's with a bias) or RMSNorm (twin of forward_util's
    norm_row)."""
    out = (layer_norm if c["layer_norm"] else rms_norm)(x, weight, c["rms_eps"])
    return out if bias is None else (out + bias).astype(np.float32)


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """Exact GELU, 0.5 x (1 + erf(x / sqrt 2)), in float32 (twin of ops gelu_erf_row)."""
    x = x.astype(np.float32)
    erf = np.asarray(np.frompyfunc(math.erf, 1, 1)((x * np.float32(1 / math.sqrt(2))).astype(np.float64)))
    return (np.float32(0.5) * x * (np.float32(1) + erf.astype(np.float32))).astype(np.float32)


def gelu_ffn(w: dict[str, np.ndarray], p: str, h: np.ndarray, q8: Any, c: dict[str, Any]) -> np.ndarray:
    """StarCoder2's feed-forward: down(gelu_tanh(up h + b_up)) + b_down (biases where the model has them);
    the exact GELU where c["gelu_erf"] (GPT-NeoX, Falcon), a ReLU where c["ffn_relu"] (OPT)."""
    from .gemma3 import gelu_tanh_glu

    up = q8(h, p + "w_up") @ w[p + "w_up"].T
    if p + "b_up" in w:
        up = up + w[p + "b_up"]
    if c["ffn_relu"]:
        mid = np.maximum(up, np.float32(0)).astype(np.float32)
    else:
        mid = gelu_erf(up) if c["gelu_erf"] else gelu_tanh_glu(up, np.ones(1, dtype=np.float32))
    out = q8(mid, p + "w_down") @ w[p + "w_down"].T
    return (out + w[p + "b_down"]).astype(np.float32) if p + "b_down" in w else out


def rope_inv_freq(config: dict[str, Any], long_factors: bool = False) -> np.ndarray:
    """Per-pair rotation frequencies of the rotated dimensions (``rope_dim``, else all of a head),
    after linear, Llama-3, LongRoPE or YaRN scaling (``long_factors``: LongRoPE's long divisors)."""
    dim = config.get("rope_dim") or config["head_dim"]
    inv_freq = 1.0 / config["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    if config.get("rope_freqs"):  # (llama.cpp's rope_freqs tensor: a divisor per pair, before any scaling)
        inv_freq = inv_freq / np.asarray(config["rope_freqs"], dtype=np.float64)
    scaling = config["rope_scaling"]
    if scaling["type"] == "longrope":  # Phi-3: a divisor per frequency
        factors = scaling["long_factor"] if long_factors else scaling["short_factor"]
        inv_freq = inv_freq / np.asarray(factors, dtype=np.float64)
    elif scaling["type"] == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif scaling["type"] == "llama3":
        # Long wavelengths are slowed by `factor`, short ones kept, the band between interpolated.
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_len = scaling["original_max_position"]
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_len / wavelen - low) / (high - low)
        interpolated = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        inv_freq = np.where(
            wavelen > old_len / low,
            inv_freq / factor,
            np.where(wavelen < old_len / high, inv_freq, interpolated),
        )
    elif scaling["type"] == "yarn":
        # Frequencies turning fewer than beta_fast times over the original context are divided by
        # `factor`, more than beta_slow kept (extrapolated), a linear ramp over the dimensions between.
        def dim_of(turns: float) -> float:
            return (
                dim
                * math.log(scaling["original_max_position"] / (turns * 2 * math.pi))
                / (2 * math.log(config["rope_theta"]))
            )

        lo, hi = dim_of(scaling["beta_fast"]), dim_of(scaling["beta_slow"])
        if scaling["truncate"]:
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        extrapolate = 1 - np.clip((np.arange(dim // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
        inv_freq = inv_freq / scaling["factor"] * (1 - extrapolate) + inv_freq * extrapolate
    return inv_freq.astype(np.float32)


def token_inv_freq(config: dict[str, Any], positions: np.ndarray) -> np.ndarray:
    """The frequencies each token is rotated with: ``rope_inv_freq``, except that with LongRoPE a
    token at or past original_max_position takes the long factors ([n_tokens, rotated/2] then). The
    choice is the position's alone, so it never depends on the batch or the sequence's length."""
    short = rope_inv_freq(config)
    scaling = config["rope_scaling"]
    if scaling["type"] != "longrope":
        return short
    long = rope_inv_freq(config, long_factors=True)
    return np.where((positions >= scaling["original_max_position"])[:, None], long[None], short[None])


def apply_rope(
    x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray, style: str, attn_factor: float = 1.0
) -> np.ndarray:
    """Rotate ``x`` [n_tokens, n_heads, head_dim] by each token's position.

    "neox" pairs dimension i with i + head_dim/2 (Hugging Face's rotate_half); "interleaved" pairs
    2i with 2i+1 (llama.cpp's layout, whose converter permutes Llama's Q/K rows to match). With fewer
    frequencies than head_dim/2 (partial rotary) only the first 2 * len(inv_freq) dimensions turn;
    ``inv_freq`` may be per token ([n_tokens, rotated/2]); cos and sin are multiplied by ``attn_factor``
    (LongRoPE's).
    """
    rot = 2 * inv_freq.shape[-1]
    if rot < x.shape[-1]:
        out = x.copy()
        out[..., :rot] = apply_rope(x[..., :rot], positions, inv_freq, style, attn_factor)
        return out
    angle = positions.astype(np.float32)[:, None] * inv_freq  # [n_tokens, head_dim/2]
    cos = np.cos(angle.astype(np.float64)).astype(np.float32)[:, None, :] * np.float32(attn_factor)
    sin = np.sin(angle.astype(np.float64)).astype(np.float32)[:, None, :] * np.float32(attn_factor)
    half = x.shape[-1] // 2
    if style == "neox":
        a, b = x[..., :half], x[..., half:]
    else:
        a, b = x[..., 0::2], x[..., 1::2]
    ra, rb = a * cos - b * sin, a * sin + b * cos
    out = np.empty_like(x)
    if style == "neox":
        out[..., :half], out[..., half:] = ra, rb
    else:
        out[..., 0::2], out[..., 1::2] = ra, rb
    return out


def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    scale: float = 0.0,
    window: int = 0,
    softcap: float = 0.0,
    sinks: np.ndarray | None = None,
    chunk: int = 0,
    alibi: np.ndarray | None = None,
) -> np.ndarray:
    """Causal grouped-query attention. q [n, n_head, d], k/v [n, n_head_kv, d] -> [n, n_head * d].

    Scores are q.k times ``scale`` (0: divided by sqrt(d)), then ``softcap`` * tanh(scores / softcap)
    when ``softcap`` > 0 (Gemma 2); with ``window`` > 0 a token sees only the last ``window``
    positions, itself included; with ``chunk`` > 0 (Llama 4) only those of its own chunk of that size.
    ``sinks`` [n_head] (gpt-oss): one more logit per head in the softmax, with no value row (it only
    takes probability away from the positions). ``alibi`` [n_head] (BLOOM, MPT): slope * (key position -
    query position) added to each head's scores after the scale (alibi_bias).
    """
    n, n_head, d = q.shape
    group = n_head // k.shape[1]
    k = np.repeat(k, group, axis=1)  # each KV head serves `group` query heads
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k)
    scores = scores * np.float32(scale) if scale > 0 else scores / np.float32(math.sqrt(d))
    if alibi is not None:
        scores = scores + alibi_bias(alibi, np.arange(n), np.arange(n))
    if softcap > 0:
        scores = np.float32(softcap) * np.tanh(scores / np.float32(softcap))
    seen = np.tril(np.ones((n, n), dtype=bool))
    if window > 0:
        seen &= ~np.tril(np.ones((n, n), dtype=bool), -window)  # key index <= query index - window
    if chunk > 0:
        idx = np.arange(n) // chunk
        seen &= idx[:, None] == idx[None, :]
    probs = softmax(np.where(seen[None], scores, -np.inf), sinks)
    return np.einsum("hqk,khd->qhd", probs, v).reshape(n, n_head * d).astype(np.float32)


def alibi_bias(slopes: np.ndarray, q_pos: np.ndarray, k_pos: np.ndarray) -> np.ndarray:
    """ALiBi's bias [n_head, q, k]: slope * (k - q), the distance exact in float32, one product (twin of
    attention.cpp's alibi_bias)."""
    rel = (k_pos[None, :] - q_pos[:, None]).astype(np.float32)
    return (slopes.astype(np.float32)[:, None, None] * rel[None]).astype(np.float32)


def softmax(scores: np.ndarray, sinks: np.ndarray | None = None) -> np.ndarray:
    """Softmax of masked scores [n_head, q, k] over k; with ``sinks`` [n_head] (gpt-oss) each head's
    sink joins the max and the denominator (exp(sink - max)) but gets no probability row of its own."""
    top = scores.max(axis=-1, keepdims=True)
    if sinks is not None:
        top = np.maximum(top, sinks.astype(np.float32)[:, None, None])
    probs = np.exp(scores - top)
    total = probs.sum(axis=-1, keepdims=True)
    if sinks is not None:
        total = total + np.exp(sinks.astype(np.float32)[:, None, None] - top)
    return probs / total


def quantize_q8(x: np.ndarray) -> np.ndarray:
    """Round each block of 32 values to int8 steps of max|block|/127, as the C++ kernels do with the
    activations they multiply by quantized weights (llama.cpp's Q8 activation blocks) in a model
    loaded with ``quantized_activations``: the first of ``split_int8``'s pieces."""
    return split_int8(x, pieces=1).astype(np.float32)


def split_int8(x: np.ndarray, block: int = 32, pieces: int = 3) -> np.ndarray:
    """x as the C++ int8 kernels see it (kernels/matmul_amx_i8.cpp: Q4_K / Q6_K on AMX-INT8, VNNI or
    AVX2; without AMX Q8_0 and Q5_0 / Q5_1 / Q5_K on VNNI or AVX2, Q4_0 / Q4_1 / IQ4_NL / IQ4_XS / MXFP4
    on VNNI; kernels/matmul_amx_q23k.cpp: Q2_K / Q3_K with ``block`` 64), in float64:
    each block of ``block`` values is d * (a0 + a1 / 2^7 + a2 / 2^11) with d = max|block| / 127 and int8
    pieces y = x * (127 / max), a0 = rint(y), a1 = rint(128 (y - a0)), a2 = rint(16 (128 (y - a0) - a1))
    (float32 steps, as the kernel computes them); off by ~1 / (127 * 4096) of the block's largest value.
    ``pieces`` 1 (a model loaded with ``quantized_activations``): a0 alone, d * a0, an 8-bit block."""
    blocks = x.reshape(*x.shape[:-1], -1, block).astype(np.float32)
    mx = np.max(np.abs(blocks), axis=-1, keepdims=True)
    inv = np.divide(np.float32(127), mx, out=np.zeros_like(mx), where=mx != 0).astype(np.float32)
    y = (blocks * inv).astype(np.float32)
    a0 = np.rint(y)
    r1 = ((y - a0) * np.float32(128)).astype(np.float32)
    a1 = np.rint(r1)
    a2 = np.rint(((r1 - a1) * np.float32(16)).astype(np.float32))
    if pieces == 1:
        a1 = a2 = np.zeros_like(a0)
    elif pieces != 3:
        raise ValueError(f"pieces must be 1 or 3, got {pieces}")
    d = (mx / np.float32(127)).astype(np.float64)
    value = d * (a0.astype(np.float64) + a1 / 128.0 + a2 / 2048.0)
    return value.reshape(x.shape)


def _bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), kept as float32."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) & np.uint64(0xFFFF0000)
    return rounded.astype(np.uint32).view(np.float32)


def split_bf16(x: np.ndarray) -> np.ndarray:
    """x as the C++ AMX kernels see their activations: hi = bf16(x) plus lo = bf16(x - hi), which
    keeps 16 of float32's 24 significant bits (relative error below 2^-16)."""
    hi = _bf16(x)
    return (hi + _bf16(x.astype(np.float32) - hi)).astype(np.float32)


MATRICES = (
    "wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "wq_a", "wq_b", "wkv_a",
    "ssm_qkv", "ssm_z", "ssm_beta", "ssm_alpha", "ssm_out", "sc_in", "sc_out", "ple_gate", "ple_proj",
)  # fmt: skip


def bf16_matrices(config: dict[str, Any], weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The weights as ``load_model(dtype="bfloat16")`` multiplies them: every matrix (the layers' and
    the output's, not the embedding lookup's) rounded to bf16, ties to even; BitNet's ternary matrices
    (quants.BitLinear) kept, as load_model keeps them."""
    from .quants import BitLinear

    out = dict(weights)
    names = [
        f"layers.{i}.{m}" for i in range(config["n_layer"]) for m in MATRICES if f"layers.{i}.{m}" in weights
    ]
    names += ["output", *moe_twin.matrix_names(config)]
    names += [n for n in ("ple_model_proj",) if n in weights]  # (Gemma 4's per-layer embeddings)
    names += [n for n in weights if ".wk_b." in n or ".wv_b." in n]  # DeepSeek's per-head matrices
    for name in names:
        if not isinstance(weights[name], BitLinear):
            out[name] = _bf16(weights[name])
    return out


class ActivationRounding:
    """The rounding the C++ kernels apply to a matmul input: ``rounding(x, name)`` for the input of
    matrix ``name`` ("layers.0.wq", "layers.1.experts.3.w_up", "output"): bf16 (dtype "bfloat16"),
    8-bit blocks, the int8 pieces (``split_int8``, per 32 or 64 values as ``int8_matrices`` says:
    the loaded model's ``int8_matrices``) for the matrices listed there, else ``base`` (bf16 hi + lo
    on AMX, or none). With ``quantized`` (a model loaded with ``quantized_activations``) a matrix
    listed with 32 takes 8-bit blocks (``quantize_q8``) and an unlisted one ``unlisted``."""

    def __init__(
        self,
        base: Any,
        int8_matrices: Mapping[str, int] = NO_INT8,
        quantized: bool = False,
        unlisted: Any = None,
    ) -> None:
        self.base = base
        self.int8_matrices = int8_matrices
        self.quantized = quantized
        self.unlisted = unlisted if unlisted is not None else base

    exact: frozenset[str] = frozenset()  # (BitNet's matrices: their own int8 rows, from x as it is)

    def __call__(self, x: np.ndarray, name: str | None = None) -> np.ndarray:
        if name is not None and name in self.exact:
            return x
        if name is None:
            return self.base(x)  # type: ignore[no-any-return]
        block = self.int8_matrices.get(name)
        if block is None:
            return self.unlisted(x)  # type: ignore[no-any-return]
        if self.quantized and block == 32:
            return quantize_q8(x)
        return split_int8(x, block).astype(np.float32)


def exact_matrices(w: Mapping[str, Any]) -> frozenset[str]:
    """The matrices whose kernels read their inputs unrounded whatever the model's options (BitNet's:
    ``quants.BitLinear``)."""
    from .quants import BitLinear

    return frozenset(name for name, v in w.items() if isinstance(v, BitLinear))


def activation_rounding(
    quantized_activations: bool,
    amx_activations: bool,
    bf16_compute: bool = False,
    int8_matrices: Mapping[str, int] | None = None,
) -> ActivationRounding:
    """The C++ kernels' matmul input rounding for a model loaded with these options (see
    ``ActivationRounding``; ``int8_matrices``: the loaded model's ``int8_matrices``). With
    ``quantized_activations`` the loaded model lists with 32 the matrices whose inputs are rounded to
    8-bit blocks (``quantize_q8``, which is also the int8 kernels' first piece alone), with 64 the
    Q2_K / Q3_K ones (their own split); the others keep theirs (exact, or bf16 hi + lo with
    ``amx_activations``). Without a list (None),
    every input is rounded to 8-bit blocks (a model whose matrices all take them)."""
    if bf16_compute:
        return ActivationRounding(_bf16)
    if quantized_activations:
        if int8_matrices is None:
            return ActivationRounding(quantize_q8)
        # The unlisted matrices keep their own inputs: on AMX the bf16-tile ones (Q5_0, IQ4_NL, ...)
        # split them into bf16 hi + lo, as in an exact model.
        unlisted = split_bf16 if amx_activations else (lambda a: a)
        return ActivationRounding(quantize_q8, int8_matrices, quantized=True, unlisted=unlisted)
    listed = int8_matrices if int8_matrices is not None else NO_INT8
    return ActivationRounding(split_bf16 if amx_activations else (lambda a: a), listed)


def temperature(c: dict[str, Any], positions: np.ndarray) -> np.ndarray:
    """Llama 4's attention temperature per position (float32 [n], 1 when off: twin of
    forward_util.h's attn_temp_factor): 1 + scale * ln(1 + floor((position + offset) / length)), in
    float64."""
    if not c["attn_temp_scale"]:
        return np.ones(len(positions), dtype=np.float32)
    k = np.floor((np.asarray(positions, dtype=np.float64) + c["attn_temp_offset"]) / c["attn_temp_length"])
    return (1.0 + np.float64(np.float32(c["attn_temp_scale"])) * np.log(1.0 + k)).astype(np.float32)


def embed(
    c: dict[str, Any], w: dict[str, np.ndarray], ids: np.ndarray, positions: np.ndarray | None = None
) -> np.ndarray:
    """The tokens' embedding rows, times ``embd_scale`` when set (Gemma's sqrt(n_embd), Granite's
    embedding_multiplier), plus the learned rows of their ``positions`` (GPT-2, StarCoder: pos_embd),
    through the embeddings' LayerNorm (BLOOM: embd_norm); twin of forward_util's embed_row."""
    x = w["tok_embd"][ids].astype(np.float32)
    x = x * np.float32(c["embd_scale"]) if c["embd_scale"] > 0 else x
    if c["pos_embd"]:
        pos = np.arange(len(ids)) if positions is None else np.asarray(positions, dtype=np.int64)
        if len(pos) and (pos.min() < 0 or pos.max() >= len(w["pos_embd"])):
            raise ValueError(f"a position is beyond the model's {len(w['pos_embd'])} learned positions")
        x = (x + w["pos_embd"][pos].astype(np.float32)).astype(np.float32)
    if c["embd_norm"]:
        x = norm(c, x, w["tok_embd_norm"], w.get("tok_embd_norm_b"))
    return x


def finish_logits(c: dict[str, Any], logits: np.ndarray) -> np.ndarray:
    """The output matmul's logits after the config's final soft-cap (Gemma 2/3) or division by
    ``logit_scale`` (Granite); twin of the end of forward_util's output_logits."""
    logits = logits.astype(np.float32)
    if c["final_softcap"] > 0:
        cap = np.float32(c["final_softcap"])
        logits = (cap * np.tanh(logits / cap)).astype(np.float32)
    if c["logit_scale"] > 0:
        logits = (logits / np.float32(c["logit_scale"])).astype(np.float32)
    return logits


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


def xielu(x: np.ndarray, c: dict[str, Any], i: int) -> np.ndarray:
    """Apertus's xIELU with layer i's applied parameters (twin of ops xielu_row): x > 0: alpha_p x^2 +
    beta x; else (expm1(min(x, eps)) - x) alpha_n + beta x, in float32 in transformers' order."""
    ap, an, beta, eps = (np.float32(v) for v in c["xielu"][4 * i : 4 * i + 4])
    x = x.astype(np.float32)
    pos = ap * x * x + beta * x
    neg = (np.expm1(np.minimum(x, eps)) - x) * an + beta * x
    return np.where(x > 0, pos, neg).astype(np.float32)


def relu2(x: np.ndarray) -> np.ndarray:
    """relu(x)^2 (Nemotron-H's feed-forward activation; twin of ops relu2_row)."""
    return (np.maximum(x, 0) * np.maximum(x, 0)).astype(np.float32)


def forward(
    config: dict[str, Any],
    weights: dict[str, np.ndarray],
    token_ids: list[int],
    quantized_activations: bool = False,
    amx_activations: bool = False,
    bf16_compute: bool = False,
    int8_matrices: Mapping[str, int] | None = None,
) -> np.ndarray:
    """Logits [len(token_ids), n_vocab] (float32) of one sequence starting at position 0.

    With ``quantized_activations`` the matmul inputs are first rounded like the C++ kernels round
    them for quantized weights (``quantize_q8``): those of the listed ``int8_matrices`` (the loaded
    model's list), or every one without a list. With ``amx_activations`` as the AMX kernels split
    them (``split_bf16``; for models whose matrices are all quantized or BF16). With
    ``bf16_compute`` (dtype "bfloat16") the inputs are rounded to bf16 and ``weights`` should come
    from ``bf16_matrices``. Otherwise ``int8_matrices``: the matrices whose inputs the C++ kernels
    split into int8 pieces, with the values per block (the loaded model's ``int8_matrices``).
    """
    c, w = config, weights
    q8 = activation_rounding(quantized_activations, amx_activations, bf16_compute, int8_matrices)
    q8.exact = exact_matrices(w)
    if c["arch"] in ("gemma", "gemma2", "gemma3"):
        from .gemma3 import forward_gemma3

        return forward_gemma3(c, w, token_ids, q8)
    if c["arch"] in ("gemma4", "gemma3n"):
        from .gemma4 import forward_gemma4

        return forward_gemma4(c, w, token_ids, q8)
    eps = c["rms_eps"]
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.ndim != 1 or len(ids) == 0 or ids.min() < 0 or ids.max() >= c["n_vocab"]:
        raise ValueError("token ids must be a non-empty list of ids within the vocabulary")
    positions = np.arange(len(ids))
    inv_freq = token_inv_freq(c, positions)
    x = embed(c, w, ids, positions)  # (Granite scales it; GPT-2's positions, BLOOM's norm)
    res = np.float32(c["residual_scale"]) if c["residual_scale"] > 0 else None  # Granite's

    def add(x: np.ndarray, out: np.ndarray) -> np.ndarray:
        return x + out if res is None else x + out * res

    post_only = c["arch"] in ("olmo2", "olmo3", "exaone4") or c["no_pre_norms"]  # no pre-norms; post-norms
    post_normed = post_only or c["arch"] in ("glm4", "afmoe")  # (GLM-4, AFMoE: both)
    olmo2 = c["arch"] in ("olmo2", "olmo3", "olmoe", "minimax-m2")  # q / k normalised over all heads at once
    # OLMo 3's sliding layers: their own RoPE base, unscaled (as Gemma 3's in gemma3.py)
    local = dict(c, rope_theta=c["rope_theta_swa"], rope_scaling={"type": "none"})
    inv_freq_local = rope_inv_freq(local) if c["rope_theta_swa"] > 0 else None

    def pre(x: np.ndarray, name: str) -> np.ndarray:
        return x if post_only else norm(c, x, w[name], w.get(name + "_b"))

    def post(out: np.ndarray, name: str) -> np.ndarray:
        return rms_norm(out, w[name], eps) if post_normed else out

    states = None
    from .delta_net import DeltaState, has_recurrent, is_recurrent, recurrent_layer

    if has_recurrent(c):  # Qwen3.5, LFM2, Granite 4.0-H: one sequence's states, from zero
        states = [DeltaState(c)]
    for i in range(c["n_layer"]):
        p = f"layers.{i}."
        if c["layer_no_mixer"] and c["layer_no_mixer"][i]:  # (Nemotron-H: a feed-forward block)
            pass
        elif c["layer_linear_attn"] and c["layer_linear_attn"][i]:  # (deci: wo(norm x), no K/V)
            h = pre(x, p + "attn_norm")
            x = add(x, q8(h, p + "wo") @ w[p + "wo"].T)
        elif states is not None and is_recurrent(c, i) and c["parallel_ssm"]:  # Falcon-H1: both, summed
            h = pre(x, p + "attn_norm")
            beside = recurrent_layer(c, w, i, h, positions, [0, len(ids)], states, q8)
            x = _attention(c, w, i, x, h, positions, inv_freq, inv_freq_local, q8, add, post, olmo2) + beside
        elif states is not None and is_recurrent(c, i):  # (delta-nets, short convolutions, Mamba-2)
            h = pre(x, p + "attn_norm")
            x = add(x, recurrent_layer(c, w, i, h, positions, [0, len(ids)], states, q8))
        elif c["mla"]["kv_lora_rank"]:  # DeepSeek's latent attention: ossa.reference.mla
            from .mla import mla_attention

            x = add(
                x, mla_attention(c, w, i, pre(x, p + "attn_norm"), positions, inv_freq, q8)
            )  # (MiniCPM3's scale)
        else:
            h = pre(x, p + "attn_norm")
            if c["parallel_norms"]:  # (GPT-NeoX: the parallel MLP's own norm of the layer's input)
                h_mlp = pre(x, p + "ffn_norm")
            x = _attention(c, w, i, x, h, positions, inv_freq, inv_freq_local, q8, add, post, olmo2)
        if c["parallel_block"]:  # Cohere: the MLP of the attention's input, added after the attention
            if c["ffn_gelu"]:  # (Phi-2's)
                x = x + gelu_ffn(w, p, h_mlp if c["parallel_norms"] else h, q8, c)
                continue
            act = silu(q8(h, p + "w_gate") @ w[p + "w_gate"].T) * (q8(h, p + "w_up") @ w[p + "w_up"].T)
            x = x + q8(act, p + "w_down") @ w[p + "w_down"].T
            continue
        if c["layer_no_ffn"] and c["layer_no_ffn"][i]:  # (Nemotron-H: a mixer block)
            continue
        if i in c["moe"]["layers"]:  # mixture of experts: ossa.reference.moe
            x = add(x, post(moe_twin.moe_ffn(c, w, i, pre(x, p + "ffn_norm"), q8), p + "post_ffn_norm"))
            continue
        h = pre(x, p + "ffn_norm")
        if c["ffn_gelu"]:  # StarCoder2: down(gelu(up h + b_up)) + b_down
            x = add(x, gelu_ffn(w, p, h, q8, c))
            continue
        if c["ffn_relu2"]:  # Nemotron-H: down(relu(up h)^2) (Jais 2: with biases)
            up = q8(h, p + "w_up") @ w[p + "w_up"].T
            up = up + w[p + "b_up"] if p + "b_up" in w else up
            out = q8(relu2(up), p + "w_down") @ w[p + "w_down"].T
            x = add(x, out + w[p + "b_down"] if p + "b_down" in w else out)
            continue
        if c["ffn_xielu"]:  # Apertus: down(xielu(up h))
            x = add(x, q8(xielu(q8(h, p + "w_up") @ w[p + "w_up"].T, c, i), p + "w_down") @ w[p + "w_down"].T)
            continue
        from .runner import mup_swiglu

        act = mup_swiglu(c, q8(h, p + "w_gate") @ w[p + "w_gate"].T, q8(h, p + "w_up") @ w[p + "w_up"].T)
        if c["sub_norms"]:  # (BitNet: the product's RMSNorm before w_down)
            act = rms_norm(act, w[p + "ffn_sub_norm"], c["rms_eps"])
        x = add(x, post(q8(act, p + "w_down") @ w[p + "w_down"].T, p + "post_ffn_norm"))
    logits = q8(norm(c, x, w["output_norm"], w.get("output_norm_b")), "output") @ w["output"].T
    return finish_logits(c, logits + w["output_b"] if "output_b" in w else logits)  # (Phi-2's bias)


def _attention(
    c: dict[str, Any],
    w: dict[str, np.ndarray],
    i: int,
    x: np.ndarray,
    h: np.ndarray,
    positions: np.ndarray,
    inv_freq: np.ndarray,
    inv_freq_local: np.ndarray | None,
    q8: ActivationRounding,
    add: Any,
    post: Any,
    olmo2: bool,
) -> np.ndarray:
    """x plus layer i's attention sublayer (h: x normalised for it), for every architecture but
    DeepSeek's."""
    n_head, n_head_kv, hd, eps = c["n_head"], c["n_head_kv"], c["head_dim"], c["rms_eps"]
    mscale, p, ids = c["rope_scaling"]["attn_factor"], f"layers.{i}.", positions
    q, k, v = (q8(h, p + m) @ w[p + m].T for m in ("wq", "wk", "wv"))
    gate = None
    if c["attn_gate_proj"]:  # AFMoE: sigmoid of the gate's own projection
        gate = (1 / (1 + np.exp(-(q8(h, p + "wg") @ w[p + "wg"].T)))).astype(np.float32)
    elif c["attn_gate"]:  # Qwen3.5: [query | gate] per head
        from .delta_net import gate_attention

        q, gate = gate_attention(q, n_head, hd)
    if c["qkv_bias"]:
        q, k, v = q + w[p + "bq"], k + w[p + "bk"], v + w[p + "bv"]
    from .runner import mup_qkv

    q, k, v = mup_qkv(c, q, k, v)
    if olmo2:
        q, k = rms_norm(q, w[p + "q_norm"], eps), rms_norm(k, w[p + "k_norm"], eps)
    q = q.reshape(len(ids), n_head, hd)
    k = k.reshape(len(ids), n_head_kv, hd)
    v = v.reshape(len(ids), n_head_kv, hd)
    if c["qk_norm"] and not olmo2 and not c["qk_norm_after_rope"]:  # (Cohere: LayerNorm, a row per head)
        q, k = norm(c, q, w[p + "q_norm"]), norm(c, k, w[p + "k_norm"])
    if c["clamp_qkv"] > 0:  # OLMoE's clip_qkv, after the norms
        lim = np.float32(c["clamp_qkv"])
        q, k, v = np.clip(q, -lim, lim), np.clip(k, -lim, lim), np.clip(v, -lim, lim)
    window = c["sliding_window"] if c["layer_sliding"] and c["layer_sliding"][i] else 0  # Phi-3
    window, chunk = (0, window) if c["attn_chunked"] else (window, 0)  # (Llama 4: chunks of that size)
    nope = bool(c["layer_nope"]) and c["layer_nope"][i]
    alibi = np.asarray(c["alibi"], dtype=np.float32) if c["alibi"] else None
    if not nope:  # SmolLM3's NoPE layers: no positions
        freq, factor = (inv_freq_local, 1.0) if inv_freq_local is not None and window else (inv_freq, mscale)
        q = apply_rope(q, positions, freq, c["rope_style"], factor)
        k = apply_rope(k, positions, freq, c["rope_style"], factor)
        if c["qk_l2_norm"]:  # (Llama 4: weightless, after RoPE)
            ones = np.ones(hd, dtype=np.float32)
            q, k = rms_norm(q, ones, eps), rms_norm(k, ones, eps)
    if c["qk_norm"] and c["qk_norm_after_rope"]:  # (Hunyuan: weighted, after RoPE)
        q, k = rms_norm(q, w[p + "q_norm"], eps), rms_norm(k, w[p + "k_norm"], eps)
    if nope or not c["attn_temp_nope"]:  # (Ministral 3's long-context queries; Llama 4's NoPE layers')
        q = q * temperature(c, positions)[:, None, None]
    sinks = w[p + "sinks"] if c["attn_sinks"] else None  # gpt-oss
    att = attention(q, k, v, scale=c["attn_scale"], window=window, sinks=sinks, chunk=chunk, alibi=alibi)
    if gate is not None:
        att = att * gate
    if c["sub_norms"]:  # (BitNet: the output's RMSNorm before wo)
        att = rms_norm(att, w[p + "attn_sub_norm"], c["rms_eps"])
    if c["mup"]["active"]:  # (Falcon-H1's attention_out_multiplier)
        att = att * np.float32(c["mup"]["attn_out"])
    o = q8(att, p + "wo") @ w[p + "wo"].T
    return add(x, post(o + w[p + "bo"] if c["o_bias"] else o, p + "post_attn_norm"))  # type: ignore[no-any-return]
