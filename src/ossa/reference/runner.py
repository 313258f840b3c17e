"""Python twin of ``csrc/model/runner``: a batched forward over a paged K/V pool, in NumPy.

The same contract as ``ossa::ModelRunner``: a flat batch (token ids, positions, slot mapping,
per-sequence token ranges, context lengths and block tables, the rows whose logits are wanted) goes
in, float32 logits ``[len(logits_rows), n_vocab]`` come out, and each token's K/V is written into its
slot so later steps attend to it. ``copy_block`` is the copy-on-write of forked sequences. A model
with recurrent layers (Qwen3.5's delta-nets, LFM2's convolutions, Mamba-2: ``ossa.reference.delta_net``) keeps
sequence s's state in slot ``state_slots[s]`` (empty: slot s) of ``num_state_slots``; ``copy_state``
copies a fork's.

K/V pool, float32, slot = block_id * block_size + offset:

    kv[layer, 0 (K) | 1 (V), slot, n_head_kv * head_dim]

Built on the functions of ``ossa.reference.model`` and ``ossa.reference.gemma3`` (the one-sequence
twins of the forward passes), so both compute the same thing; here each step's tokens come from
several sequences and attend to the cached K/V of their own sequence through its block table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import gemma4 as gemma4_twin
from . import model as ref_model
from . import moe as moe_twin
from .delta_net import DeltaState, has_recurrent, is_recurrent, recurrent_layer
from .gemma3 import gelu_tanh_glu
from .quants import BitLinear, QdqLinear


class ModelRunner:
    """A model's dequantized weights, its paged K/V pool, and one batched forward per step."""

    def __init__(
        self,
        config: dict[str, Any],
        weights: dict[str, np.ndarray],
        num_blocks: int,
        block_size: int,
        quantized_activations: bool = False,
        amx_activations: bool = False,
        kv_cache_dtype: str = "float32",
        compute_dtype: str = "float32",
        int8_matrices: Mapping[str, int] = ref_model.NO_INT8,
        num_state_slots: int = 1,
    ) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be >= 1")
        if kv_cache_dtype not in ("float32", "float16"):
            raise ValueError(f"kv_cache_dtype must be 'float32' or 'float16', got {kv_cache_dtype!r}")
        if compute_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"compute_dtype must be 'float32' or 'bfloat16', got {compute_dtype!r}")
        self.kv_cache_dtype = kv_cache_dtype
        self.compute_dtype = compute_dtype
        self.config = config
        # dtype "bfloat16": matrices rounded once here, every matmul input rounded in forward.
        self.weights = ref_model.bf16_matrices(config, weights) if compute_dtype == "bfloat16" else weights
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.quantized_activations = quantized_activations
        self.amx_activations = amx_activations
        self.int8_matrices = int8_matrices  # inputs split into int8 pieces: the model's int8_matrices
        kv_dim = config["n_head_kv"] * config["head_dim"]
        # np.zeros maps fresh zero pages lazily, so a large pool costs nothing until it is written. An f16
        # pool stores K and V rounded to nearest, as the C++ cache does; attention reads them as f32.
        # (Gemma 4: one array per layer with K/V of its own, their widths differing: gemma4.kv_pool)
        self.kv: Any = (
            gemma4_twin.kv_pool(config, num_blocks * block_size, kv_cache_dtype)
            if config["arch"] in ("gemma4", "gemma3n")
            else np.zeros(
                (config["n_layer"], 2, num_blocks * block_size, kv_dim), dtype=np.dtype(kv_cache_dtype)
            )
        )
        self.states: list[Any] = []
        if has_recurrent(config):
            if num_state_slots < 1:
                raise ValueError("num_state_slots must be >= 1")
            self.states = [DeltaState(config) for _ in range(num_state_slots)]
        self.inv_freq_local: np.ndarray | None = None  # Gemma 3's sliding layers: their own base, unscaled
        if config["rope_theta_swa"] > 0:
            local = dict(config, rope_theta=config["rope_theta_swa"], rope_scaling={"type": "none"})
            self.inv_freq_local = ref_model.rope_inv_freq(local)

    def copy_block(self, src: int, dst: int) -> None:
        """Block ``dst`` gets block ``src``'s K/V in every layer."""
        if not (0 <= src < self.num_blocks and 0 <= dst < self.num_blocks):
            raise ValueError("copy_block: block id out of range")
        bs = self.block_size
        for layer in self.kv.values() if isinstance(self.kv, dict) else [self.kv]:
            layer[..., dst * bs : (dst + 1) * bs, :] = layer[..., src * bs : (src + 1) * bs, :]

    def copy_state(self, src: int, dst: int) -> None:
        """State slot ``dst`` gets slot ``src``'s (recurrent models; otherwise nothing)."""
        if not self.states:
            return
        if not (0 <= src < len(self.states) and 0 <= dst < len(self.states)):
            raise ValueError("copy_state: state slot out of range")
        if src != dst:
            self.states[dst].copy_from(self.states[src])

    def _validate(
        self,
        token_ids: Sequence[int],
        positions: Sequence[int],
        slot_mapping: Sequence[int],
        seq_start: Sequence[int],
        context_len: Sequence[int],
        block_table_start: Sequence[int],
        block_tables: Sequence[int],
        logits_rows: Sequence[int],
    ) -> None:
        n = len(token_ids)
        n_slots = self.num_blocks * self.block_size
        if len(positions) != n or len(slot_mapping) != n:
            raise ValueError("forward: token_ids, positions and slot_mapping differ in length")
        if len(seq_start) != len(context_len) + 1 or len(block_table_start) != len(context_len) + 1:
            raise ValueError("forward: seq_start / block_table_start must have n_seqs + 1 entries")
        if seq_start[0] != 0 or seq_start[-1] != n:
            raise ValueError("forward: seq_start must run from 0 to n_tokens")
        if any(not 0 <= t < self.config["n_vocab"] for t in token_ids):
            raise ValueError("forward: token id outside the vocabulary")
        if any(not 0 <= s < n_slots for s in slot_mapping):
            raise ValueError("forward: slot out of range")
        if any(not 0 <= b < self.num_blocks for b in block_tables):
            raise ValueError("forward: block id out of range")
        for s in range(len(context_len)):
            lo, hi = seq_start[s], seq_start[s + 1]
            n_blocks = block_table_start[s + 1] - block_table_start[s]
            if hi < lo or context_len[s] > n_blocks * self.block_size or context_len[s] < hi - lo:
                raise ValueError(f"forward: sequence {s} has an inconsistent context or block table")
        if any(not 0 <= r < n for r in logits_rows):
            raise ValueError("forward: logits row out of range")

    def forward(
        self,
        token_ids: Sequence[int],
        positions: Sequence[int],
        slot_mapping: Sequence[int],
        seq_start: Sequence[int],
        context_len: Sequence[int],
        block_table_start: Sequence[int],
        block_tables: Sequence[int],
        logits_rows: Sequence[int],
        state_slots: Sequence[int] = (),
    ) -> np.ndarray:
        """Logits ``[len(logits_rows), n_vocab]`` of one step; writes this step's K/V into the pool."""
        self._validate(
            token_ids,
            positions,
            slot_mapping,
            seq_start,
            context_len,
            block_table_start,
            block_tables,
            logits_rows,
        )
        c, w = self.config, self.weights
        q8 = ref_model.activation_rounding(
            self.quantized_activations,
            self.amx_activations,
            self.compute_dtype == "bfloat16",
            self.int8_matrices,
        )
        q8.exact = ref_model.exact_matrices(w)
        n_head, n_head_kv, hd, eps = c["n_head"], c["n_head_kv"], c["head_dim"], c["rms_eps"]
        bs = self.block_size
        n = len(token_ids)
        ids = np.asarray(token_ids, dtype=np.int64)
        pos = np.asarray(positions, dtype=np.int64)
        slots = np.asarray(slot_mapping, dtype=np.int64)
        # Per sequence: the pool slots of its whole context, in position order.
        ctx_slots = []
        for s in range(len(context_len)):
            table = np.asarray(block_tables[block_table_start[s] : block_table_start[s + 1]], dtype=np.int64)
            ctx_pos = np.arange(context_len[s])
            ctx_slots.append(table[ctx_pos // bs] * bs + ctx_pos % bs)
        if c["arch"] in ("gemma4", "gemma3n"):  # (gemma4.py)
            rows = np.asarray(logits_rows, dtype=np.int64)
            return gemma4_twin.paged_forward(c, w, self.kv, ids, pos, slots, seq_start, ctx_slots, rows, q8)

        states = []
        if self.states:  # (recurrent models: distinct slots, one per sequence)
            chosen = list(state_slots) if state_slots else list(range(len(context_len)))
            if (
                len(chosen) != len(context_len)
                or len(set(chosen)) != len(chosen)
                or any(not 0 <= s < len(self.states) for s in chosen)
            ):
                raise ValueError("forward: state slots out of range, repeated or not one per sequence")
            states = [self.states[s] for s in chosen]
        x = ref_model.embed(c, w, ids, pos)
        gemma = c["arch"] in ("gemma", "gemma2", "gemma3")
        post_norms = c["arch"] in ("gemma2", "gemma3", "olmo2", "olmo3", "exaone4", "glm4", "afmoe")
        post_norms = (post_norms or c["no_pre_norms"]) and not c["no_post_norms"]  # (VaultGemma; FlexOlmo)
        post_only = c["arch"] in ("olmo2", "olmo3", "exaone4") or c["no_pre_norms"]  # no pre-norms
        olmo2 = c["arch"] in ("olmo2", "olmo3", "olmoe", "minimax-m2")  # q / k normed over all heads
        global_freq = ref_model.token_inv_freq(c, pos)  # LongRoPE: by position
        mscale = c["rope_scaling"]["attn_factor"]
        for i in range(c["n_layer"]):
            p = f"layers.{i}."
            sliding = bool(c["layer_sliding"]) and c["layer_sliding"][i]
            freq = self.inv_freq_local if sliding and self.inv_freq_local is not None else global_freq
            window = c["sliding_window"] if sliding else 0
            window, chunk = (0, window) if c["attn_chunked"] else (window, 0)  # (Llama 4's chunks)
            no_ffn = bool(c["layer_no_ffn"]) and c["layer_no_ffn"][i]  # (Nemotron-H's blocks)
            if c["layer_no_mixer"] and c["layer_no_mixer"][i]:  # (deci's may have no feed-forward either)
                x = x if no_ffn else _plain_ffn(c, w, i, x, q8)
                continue
            if c["layer_linear_attn"] and c["layer_linear_attn"][i]:  # (deci: wo(norm x), no K/V)
                h = ref_model.norm(c, x, w[p + "attn_norm"])
                x = x + _scaled(c, _linear(q8(h, p + "wo"), w[p + "wo"]))
                x = x if no_ffn else _plain_ffn(c, w, i, x, q8)
                continue
            h = x if post_only else ref_model.norm(c, x, w[p + "attn_norm"], w.get(p + "attn_norm_b"))
            if c["parallel_norms"]:  # (GPT-NeoX: the parallel MLP's own norm of the layer's input)
                h_mlp = ref_model.norm(c, x, w[p + "ffn_norm"], w.get(p + "ffn_norm_b"))
            beside = None  # (Falcon-H1: the mixer's output, added after the attention's)
            if states and is_recurrent(c, i) and c["parallel_ssm"]:
                beside = recurrent_layer(c, w, i, h, pos, seq_start, states, q8)
            elif states and is_recurrent(c, i):  # (Qwen3.5's delta-nets, LFM2's convolutions, Mamba-2)
                out = recurrent_layer(c, w, i, h, pos, seq_start, states, q8)
                x = x + _scaled(c, out)
                x = x if no_ffn else _plain_ffn(c, w, i, x, q8)
                continue
            if c["mla"]["kv_lora_rank"]:  # DeepSeek: one latent row per token (reference/mla.py)
                x = _plain_ffn(
                    c,
                    w,
                    i,
                    x + _scaled(c, _mla_paged(self, i, h, pos, global_freq, slots, seq_start, ctx_slots, q8)),
                    q8,
                )
                continue
            q, k, v = (_linear(q8(h, p + m), w[p + m]) for m in ("wq", "wk", "wv"))
            gate = None
            if c["attn_gate_proj"]:  # AFMoE: sigmoid of the gate's own projection
                gate = (1 / (1 + np.exp(-_linear(q8(h, p + "wg"), w[p + "wg"])))).astype(np.float32)
            elif c["attn_gate"]:  # Qwen3.5: [query | gate] per head
                from .delta_net import gate_attention

                q, gate = gate_attention(q, n_head, hd)
            if c["qkv_bias"]:
                q, k, v = q + w[p + "bq"], k + w[p + "bk"], v + w[p + "bv"]
            q, k, v = mup_qkv(c, q, k, v)
            if olmo2:
                q, k = (
                    ref_model.rms_norm(q, w[p + "q_norm"], eps),
                    ref_model.rms_norm(k, w[p + "k_norm"], eps),
                )
            q = q.reshape(n, n_head, hd)
            k = k.reshape(n, n_head_kv, hd)
            if (
                c["qk_norm"] and not olmo2 and not c["qk_norm_after_rope"]
            ):  # (Cohere: LayerNorm, a row a head)
                q, k = ref_model.norm(c, q, w[p + "q_norm"]), ref_model.norm(c, k, w[p + "k_norm"])
            if c["clamp_qkv"] > 0:  # OLMoE's clip_qkv, after the norms
                lim = np.float32(c["clamp_qkv"])
                q, k, v = np.clip(q, -lim, lim), np.clip(k, -lim, lim), np.clip(v, -lim, lim)
            nope = bool(c["layer_nope"]) and c["layer_nope"][i]
            if not nope:  # SmolLM3's NoPE layers
                # (a sliding layer's own table is unscaled: no attention factor either)
                factor = 1.0 if freq is self.inv_freq_local else mscale
                q = ref_model.apply_rope(q, pos, freq, c["rope_style"], factor)
                k = ref_model.apply_rope(k, pos, freq, c["rope_style"], factor)
                if c["qk_l2_norm"]:  # (Llama 4: weightless, after RoPE)
                    ones = np.ones(hd, dtype=np.float32)
                    q, k = ref_model.rms_norm(q, ones, eps), ref_model.rms_norm(k, ones, eps)
            if c["qk_norm"] and c["qk_norm_after_rope"]:  # (Hunyuan: weighted, after RoPE)
                q, k = (
                    ref_model.rms_norm(q, w[p + "q_norm"], eps),
                    ref_model.rms_norm(k, w[p + "k_norm"], eps),
                )
            if nope or not c["attn_temp_nope"]:
                q = q * ref_model.temperature(c, pos)[:, None, None]
            self.kv[i, 0, slots] = k.reshape(n, n_head_kv * hd)
            self.kv[i, 1, slots] = v.reshape(n, n_head_kv * hd)
            attn = np.empty((n, n_head * hd), dtype=np.float32)
            for s in range(len(context_len)):
                lo, hi = seq_start[s], seq_start[s + 1]
                if hi == lo:
                    continue
                kc = self.kv[i, 0, ctx_slots[s]].astype(np.float32).reshape(-1, n_head_kv, hd)
                vc = self.kv[i, 1, ctx_slots[s]].astype(np.float32).reshape(-1, n_head_kv, hd)
                attn[lo:hi] = _paged_attention(
                    q[lo:hi], kc, vc, pos[lo:hi], c["attn_scale"], window, c["attn_softcap"],
                    w[p + "sinks"] if c["attn_sinks"] else None, chunk,
                    np.asarray(c["alibi"], dtype=np.float32) if c["alibi"] else None,
                )  # fmt: skip
            if gate is not None:
                attn = attn * gate
            if c["sub_norms"]:  # (BitNet: the output's RMSNorm before wo)
                attn = ref_model.rms_norm(attn, w[p + "attn_sub_norm"], eps)
            if c["mup"]["active"]:  # (Falcon-H1's attention_out_multiplier)
                attn = attn * np.float32(c["mup"]["attn_out"])
            out = _linear(q8(attn, p + "wo"), w[p + "wo"])
            if c["o_bias"]:  # gpt-oss
                out = out + w[p + "bo"]
            if post_norms:
                out = ref_model.rms_norm(out, w[p + "post_attn_norm"], eps)
            elif c["residual_scale"] > 0:  # Granite's residual_multiplier
                out = out * np.float32(c["residual_scale"])
            x = x + out
            if beside is not None:
                x = x + beside
            if no_ffn:
                continue
            if c["parallel_block"] and c["ffn_gelu"]:  # (Phi-2: its GELU MLP of the attention's input)
                x = x + ref_model.gelu_ffn(w, p, h_mlp if c["parallel_norms"] else h, q8, c)
                continue
            if c["parallel_block"]:  # Cohere: the MLP of the attention's input
                act = ref_model.silu(_linear(q8(h, p + "w_gate"), w[p + "w_gate"])) * _linear(
                    q8(h, p + "w_up"), w[p + "w_up"]
                )
                x = x + _linear(q8(act, p + "w_down"), w[p + "w_down"])
                continue
            if c["ffn_relu2"] or c["ffn_xielu"]:
                x = _plain_ffn(c, w, i, x, q8)
                continue
            if c["ffn_gelu"]:  # StarCoder2: down(gelu(up h + b_up)) + b_down, of its LayerNorm with bias
                h = ref_model.norm(c, x, w[p + "ffn_norm"], w.get(p + "ffn_norm_b"))
                x = x + ref_model.gelu_ffn(w, p, h, q8, c)
                continue
            h = x if post_only else ref_model.norm(c, x, w[p + "ffn_norm"], w.get(p + "ffn_norm_b"))
            if i in c["moe"]["layers"]:  # mixture of experts (each token routed alone)
                out = moe_twin.moe_ffn(c, w, i, h, q8)
                if post_norms:  # (AFMoE: the experts' and shared MLP's sum normalised)
                    out = ref_model.rms_norm(out, w[p + "post_ffn_norm"], eps)
                x = x + (
                    out * np.float32(c["residual_scale"]) if c["residual_scale"] > 0 else out
                )  # Granite MoE
                continue
            gate, up = (
                _linear(q8(h, p + "w_gate"), w[p + "w_gate"]),
                _linear(q8(h, p + "w_up"), w[p + "w_up"]),
            )
            act = gelu_tanh_glu(gate, up) if gemma else mup_swiglu(c, gate, up)
            if c["sub_norms"]:  # (BitNet: the product's RMSNorm before w_down)
                act = ref_model.rms_norm(act, w[p + "ffn_sub_norm"], eps)
            out = _linear(q8(act, p + "w_down"), w[p + "w_down"])
            if post_norms:
                out = ref_model.rms_norm(out, w[p + "post_ffn_norm"], eps)
            elif c["residual_scale"] > 0:
                out = out * np.float32(c["residual_scale"])
            x = x + out
        rows = np.asarray(logits_rows, dtype=np.int64)
        h = q8(ref_model.norm(c, x[rows], w["output_norm"], w.get("output_norm_b")), "output")
        logits = _linear(h, w["output"])
        return ref_model.finish_logits(c, logits + w["output_b"] if "output_b" in w else logits)


def mup_qkv(
    c: dict[str, Any], q: np.ndarray, k: np.ndarray, v: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, k, v times Falcon-H1's attention_in_multiplier (k also its key_multiplier), where set."""
    u = c["mup"]
    if not u["active"]:
        return q, k, v
    a, kk = np.float32(u["attn_in"]), np.float32(u["attn_in"]) * np.float32(u["key"])
    return q * a, k * kk, v * a


def mup_swiglu(c: dict[str, Any], gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """SiLU(gate) * up, with Falcon-H1's MLP multipliers where set (the gate's before SiLU, then the
    output's); BitNet's relu(gate)^2 * up (glu_relu2)."""
    u = c["mup"]
    if c["glu_relu2"]:  # (twin of ops relu2_glu_row)
        r = np.maximum(gate, np.float32(0))
        return (r * r * up).astype(np.float32)  # type: ignore[no-any-return]
    if not u["active"]:
        return ref_model.silu(gate) * up  # type: ignore[no-any-return]
    act = ref_model.silu(gate * np.float32(u["mlp_gate"])) * up
    return act * np.float32(u["mlp_down"])  # type: ignore[no-any-return]


def _scaled(c: dict[str, Any], out: np.ndarray) -> np.ndarray:
    """A sublayer's output times Granite's residual_multiplier (when the model has one)."""
    return out * np.float32(c["residual_scale"]) if c["residual_scale"] > 0 else out


def _plain_ffn(c: dict[str, Any], w: dict[str, np.ndarray], i: int, x: np.ndarray, q8: Any) -> np.ndarray:
    """x plus layer i's feed-forward (SwiGLU or MoE) of rmsnorm(x), times residual_scale where set: the
    pre-norm layers without post norms (DeepSeek's, Qwen3.5's, LFM2's, Granite 4.0-H's)."""
    p = f"layers.{i}."
    h = ref_model.norm(c, x, w[p + "ffn_norm"], w.get(p + "ffn_norm_b"))  # (Nemotron's LayerNorm, bias)
    if i in c["moe"]["layers"]:
        return x + _scaled(c, moe_twin.moe_ffn(c, w, i, h, q8))  # type: ignore[no-any-return]
    if c["ffn_relu2"] or c["ffn_xielu"]:  # Nemotron-H: down(relu(up h)^2); Apertus: down(xielu(up h))
        up = _linear(q8(h, p + "w_up"), w[p + "w_up"])
        up = up + w[p + "b_up"] if p + "b_up" in w else up  # (Jais 2's biases)
        mid = ref_model.xielu(up, c, i) if c["ffn_xielu"] else ref_model.relu2(up)
        out = _linear(q8(mid, p + "w_down"), w[p + "w_down"])
        out = out + w[p + "b_down"] if p + "b_down" in w else out
        return x + _scaled(c, out)  # type: ignore[no-any-return]
    act = ref_model.silu(_linear(q8(h, p + "w_gate"), w[p + "w_gate"])) * _linear(
        q8(h, p + "w_up"), w[p + "w_up"]
    )
    return x + _scaled(c, _linear(q8(act, p + "w_down"), w[p + "w_down"]))  # type: ignore[no-any-return]


def _linear(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """x [m, k] times weight [n, k] transposed. einsum's own loop rather than BLAS: each output is
    one dot product in a fixed order, so a row's result does not depend on the batch around it, and
    a multi-threaded BLAS on few rows is slow on a busy machine (threads spin for cores). BitNet's
    matrices (quants.BitLinear) take their own product."""
    if isinstance(weight, (BitLinear, QdqLinear)):
        return weight.apply(x)
    return np.einsum("ij,kj->ik", x, weight)


def _mla_paged(
    self: ModelRunner,
    i: int,
    h: np.ndarray,
    pos: np.ndarray,
    inv_freq: np.ndarray,
    slots: np.ndarray,
    seq_start: Any,
    ctx_slots: list[np.ndarray],
    q8: Any,
) -> np.ndarray:
    """Layer i's latent attention (before the residual): the rows cached as the one KV head's key
    and value, each sequence's queries over its context."""
    from .mla import mla_output, mla_query_and_row

    c = self.config
    query, row = mla_query_and_row(c, self.weights, i, h, pos, inv_freq, q8)
    self.kv[i, 0, slots] = row
    self.kv[i, 1, slots] = row
    out = np.empty(query.shape, dtype=np.float32)
    for s in range(len(ctx_slots)):
        lo, hi = seq_start[s], seq_start[s + 1]
        if hi == lo:
            continue
        kc = self.kv[i, 0, ctx_slots[s]].astype(np.float32)[:, None, :]
        out[lo:hi] = _paged_attention(query[lo:hi], kc, kc, pos[lo:hi], c["attn_scale"]).reshape(
            hi - lo, c["n_head"], -1
        )
    return mla_output(c, self.weights, i, out, q8)


def _paged_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    positions: np.ndarray,
    scale: float = 0.0,
    window: int = 0,
    softcap: float = 0.0,
    sinks: np.ndarray | None = None,
    chunk: int = 0,
    alibi: np.ndarray | None = None,
) -> np.ndarray:
    """Grouped-query attention of a chunk's queries q [m, n_head, d] (at ``positions``) over a
    context k/v [ctx, n_head_kv, d]; query at position p sees context positions <= p (and, with a
    ``window``, > p - window; with a ``chunk``, >= p // chunk * chunk: Llama 4). Scores are scaled by
    ``scale`` (0: 1/sqrt(d)), then soft-capped
    (``softcap`` * tanh(scores / softcap)) when ``softcap`` > 0; ``sinks`` [n_head] join each
    head's softmax denominator (gpt-oss); ``alibi`` [n_head] slopes add slope * (key - query position)
    after the scale (BLOOM, MPT)."""
    m, n_head, d = q.shape
    group = n_head // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k)
    scores = scores * np.float32(scale) if scale > 0 else scores / np.float32(math.sqrt(d))
    if alibi is not None:
        scores = scores + ref_model.alibi_bias(alibi, np.asarray(positions), np.arange(k.shape[0]))
    if softcap > 0:
        scores = np.float32(softcap) * np.tanh(scores / np.float32(softcap))
    ctx = np.arange(k.shape[0])[None, :]
    visible = ctx <= positions[:, None]  # [m, ctx]
    if window > 0:
        visible &= ctx > positions[:, None] - window
    if chunk > 0:
        visible &= ctx >= positions[:, None] // chunk * chunk
    probs = ref_model.softmax(np.where(visible[None], scores, -np.inf), sinks)
    return np.einsum("hqk,khd->qhd", probs, v).reshape(m, n_head * d).astype(np.float32)
