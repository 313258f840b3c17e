"""ossa's C++ core (private; use the ossa package).

Generated from the built extension by nanobind's stubgen: run `python tools/stubgen.py --core-dir
<build>/csrc` after changing the bindings (CI checks that this file matches the built module).
"""

from collections.abc import Sequence
from typing import Annotated, overload

import numpy
from numpy.typing import NDArray


class ModelError(ValueError):
    pass

def set_num_threads(n: int) -> None:
    """Set the number of OpenMP threads the kernels use."""

def get_num_threads() -> int: ...

def build_info() -> str:
    """CPU features the core was compiled for."""

class Model:
    """A loaded model (opaque); use ossa.load_model."""

    @property
    def config(self) -> dict: ...

    @property
    def path(self) -> str: ...

    @property
    def format(self) -> str: ...

    @property
    def compute_dtype(self) -> str:
        """'float32' or 'bfloat16' (load_model's dtype)"""

    @property
    def uses_amx(self) -> bool:
        """
        Whether the forward pass multiplies any matrix on the AMX kernels (load_model's amx).
        """

    @property
    def int8_matrices(self) -> dict[str, int]:
        """
        The matrices the forward pass multiplies with activations split into int8 pieces, by ossa.reference's names ('layers.0.wq', 'layers.1.experts.3.w_up', 'output'), each with the values per split block: 32, or 64 (Q2_K / Q3_K). With quantized_activations, 32 marks the matrices whose inputs are rounded to 8-bit blocks instead.
        """

    @property
    def quantized_activations(self) -> bool:
        """
        Whether quantized weights multiply 8-bit activation blocks (load_model's option).
        """

    def tensors(self) -> list:
        """All tensors of the file(s): (name, type_name, rows, cols, nbytes)."""

def load_model(path: str, dtype: str = 'auto', amx: bool = True, quantized_activations: bool = False) -> Model:
    """
    Load a GGUF file or a Hugging Face folder; dtype 'auto'/'float32' (default numerics) or 'bfloat16' (matrices and their inputs rounded to bf16). amx: repack matrices for the AMX kernels where the CPU allows (and OSSA_AMX=0 is not set); False keeps the exact f32 kernels. quantized_activations: quantized weights multiply 8-bit activation blocks (faster, less exact) where that is the faster kernel (with AMX, the types on bf16 tiles keep their inputs; int8_matrices lists the matrices that round). Raises ModelError naming the problem.
    """

def gguf_metadata(path: str, keys: Sequence[str] | None = None) -> dict:
    """
    The metadata of a GGUF file as Python values (arrays as lists); for any shard of a split model, the model's (its first shard's). keys: only these (those present), e.g. one string without converting a 100k-entry vocabulary.
    """

def gguf_shard_paths(path: str) -> list[str]:
    """
    Every file of the GGUF model `path` is a file of: [path] for an unsplit file, else its shards in order, all opened and checked (a missing or mismatched shard raises ModelError).
    """

@overload
def dequantize_tensor(model: Model, name: str) -> Annotated[NDArray[numpy.float32], dict(shape=(None, None))]:
    """
    A tensor (file name or canonical name such as 'layers.0.wq') dequantized to float32 [rows, cols].
    """

@overload
def dequantize_tensor(model: Model, name: bytes) -> Annotated[NDArray[numpy.float32], dict(shape=(None, None))]:
    """The same, for a tensor whose stored name is not UTF-8."""

def tensor_type(model: Model, name: str) -> str:
    """
    The type a tensor is stored as ('Q4_0', 'F32', ...; file name or canonical name), as loaded (before any AMX repacking): what a quantized folder's matrices became.
    """

def model_logits(model: Model, token_ids: Sequence[int]) -> Annotated[NDArray[numpy.float32], dict(shape=(None, None))]:
    """Logits [n_tokens, n_vocab] of a fresh forward over one sequence."""

class ModelRunner:
    """A model with its paged K/V pool and preallocated work buffers."""

    def __init__(self, model: Model, num_blocks: int, block_size: int, max_num_batched_tokens: int, kv_cache_dtype: str = 'float32', num_state_slots: int = 1) -> None: ...

    def forward(self, token_ids: Sequence[int], positions: Sequence[int], slot_mapping: Sequence[int], seq_start: Sequence[int], context_len: Sequence[int], block_table_start: Sequence[int], block_tables: Sequence[int], logits_rows: Sequence[int], state_slots: Sequence[int] = []) -> Annotated[NDArray[numpy.float32], dict(shape=(None, None))]:
        """
        One batched step; returns logits [len(logits_rows), n_vocab]. state_slots: each sequence's recurrent state slot (models with delta-net layers; empty: slot i for sequence i).
        """

    def copy_block(self, src: int, dst: int) -> None: ...

    def copy_state(self, src: int, dst: int) -> None:
        """A forked sequence's recurrent state: slot dst gets slot src's."""

    @property
    def num_state_slots(self) -> int: ...

    @property
    def num_blocks(self) -> int: ...

    @property
    def block_size(self) -> int: ...

    @property
    def max_num_batched_tokens(self) -> int: ...

    @property
    def kv_cache_dtype(self) -> str: ...

    @staticmethod
    def kv_bytes_per_token(model: Model, kv_cache_dtype: str = 'float32') -> int: ...

def kernel_matmul(weight: Annotated[NDArray[numpy.uint8], dict(order='C', writable=False)], ggml_type: int, rows: int, cols: int, x: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C')], q8: bool = False, dtype: str = 'float32', amx: bool = True) -> Annotated[NDArray[numpy.float32], dict(shape=(None, None))]: ...

def kernel_act_quantize(x: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C')], mode: str, scale: float = 0.0) -> Annotated[NDArray[numpy.float32], dict(shape=(None, None))]: ...

def kernel_bitnet_matmul(ternary: Annotated[NDArray[numpy.int8], dict(shape=(None, None), order='C', writable=False)], scale: float, x: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C')], reps: int = 1) -> Annotated[NDArray[numpy.float32], dict(shape=(None, None))]: ...

def kernel_matmul_timed(weight: Annotated[NDArray[numpy.uint8], dict(order='C', writable=False)], ggml_type: int, rows: int, cols: int, x: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C')], reps: int, dtype: str = 'float32', amx: bool = True, cpu_time: bool = False, q8: bool = False) -> list[float]: ...

def kernel_takes_q8(ggml_type: int, rows: int, cols: int, amx: bool = True) -> bool:
    """
    Whether kernel_matmul(q8=True) rounds the activations to 8-bit blocks for this weight (as a model loaded with quantized_activations does; kernels/matmul.h takes_q8).
    """

def amx_available() -> bool:
    """
    Whether the AMX kernels can run here (compiled in and granted by the OS).
    """

def amx_default() -> bool:
    """
    Whether AMX is used by default: amx_available() unless OSSA_AMX=0 is in the environment.
    """

def repack_default() -> bool:
    """
    Whether load_model repacks weights by default (amx=True): for AMX, or without AMX the types of the VNNI / AVX2 int8 kernels (Q8_0, Q4_K, Q6_K, Q5_0, Q5_1, Q5_K; with VNNI also IQ4_NL, IQ4_XS, MXFP4, Q2_K, Q3_K); OSSA_AMX=0 turns both off.
    """

def i8_avx2_available() -> bool:
    """
    Whether this build has the AVX2 int8 kernels (Q8_0, Q4_K, Q6_K, Q5_0, Q5_1, Q5_K; used where there is no AMX; with VNNI only Q8_0's).
    """

def i8_vnni_available() -> bool:
    """
    Whether Q4_K / Q6_K / Q2_K / Q3_K run the AVX-512 VNNI int8 loops: with AMX for few rows, without AMX for every row count (the same results as the AMX and AVX2 kernels), and then Q5_0 / Q5_1 / IQ4_NL / Q5_K / IQ4_XS / MXFP4 too.
    """

def kernel_quantize_q8(x: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C')]) -> tuple: ...

class Tokenizer:
    """A BPE tokenizer (byte-level or SentencePiece-style)."""

    @staticmethod
    def from_gguf(path: str) -> Tokenizer:
        """The tokenizer described by a GGUF file's metadata."""

    @staticmethod
    def from_spec(spec: dict) -> Tokenizer:
        """
        A tokenizer from a spec dict (see ossa.reference.tokenizer.TokenizerSpec).
        """

    def encode(self, text: object, add_special_tokens: bool = True) -> list: ...

    def encode_batch(self, texts: list, add_special_tokens: bool = True, num_threads: int = 0) -> list:
        """Encodes texts in parallel (OpenMP threads, GIL released)."""

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str: ...

    def token_bytes(self, arg: int, /) -> bytes: ...

    def id_to_token(self, arg: int, /) -> object: ...

    def token_to_id(self, arg: str, /) -> object: ...

    def is_special(self, arg: int, /) -> bool: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def bos_token_id(self) -> object: ...

    @property
    def eos_token_id(self) -> object: ...

    @property
    def pad_token_id(self) -> object: ...

    @property
    def eos_token_ids(self) -> list[int]: ...

    @property
    def add_bos(self) -> bool: ...

class Detokenizer:
    """Streaming detokenizer: push ids, get complete UTF-8 text deltas."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False) -> None: ...

    def push(self, arg: int, /) -> str: ...

    def flush(self) -> str: ...

    def reset(self) -> None: ...

    @property
    def pending_bytes(self) -> int: ...

unicode_version: str = '14.0.0'

def unicode_nfc(text: str) -> str:
    """
    Unicode normalization form C of the text (the tokenizer's NFC normalizer).
    """

class SamplingParams:
    """
    The C++ sampler's per-request parameters (build with ossa.SamplingParams.to_core).
    """

    def __init__(self) -> None: ...

    @property
    def temperature(self) -> float: ...

    @temperature.setter
    def temperature(self, arg: float, /) -> None: ...

    @property
    def top_k(self) -> int: ...

    @top_k.setter
    def top_k(self, arg: int, /) -> None: ...

    @property
    def top_p(self) -> float: ...

    @top_p.setter
    def top_p(self, arg: float, /) -> None: ...

    @property
    def min_p(self) -> float: ...

    @min_p.setter
    def min_p(self, arg: float, /) -> None: ...

    @property
    def repetition_penalty(self) -> float: ...

    @repetition_penalty.setter
    def repetition_penalty(self, arg: float, /) -> None: ...

    @property
    def frequency_penalty(self) -> float: ...

    @frequency_penalty.setter
    def frequency_penalty(self, arg: float, /) -> None: ...

    @property
    def presence_penalty(self) -> float: ...

    @presence_penalty.setter
    def presence_penalty(self, arg: float, /) -> None: ...

    @property
    def seed(self) -> int | None: ...

    @seed.setter
    def seed(self, arg: int | None, /) -> None: ...

    @property
    def logit_bias(self) -> list[tuple[int, float]]: ...

    @logit_bias.setter
    def logit_bias(self, arg: Sequence[tuple[int, float]], /) -> None: ...

    @property
    def allowed_token_ids(self) -> list[int]: ...

    @allowed_token_ids.setter
    def allowed_token_ids(self, arg: Sequence[int], /) -> None: ...

    @property
    def bad_words(self) -> list[list[int]]: ...

    @bad_words.setter
    def bad_words(self, arg: Sequence[Sequence[int]], /) -> None: ...

    @property
    def min_tokens(self) -> int: ...

    @min_tokens.setter
    def min_tokens(self, arg: int, /) -> None: ...

    @property
    def stop_token_ids(self) -> list[int]: ...

    @stop_token_ids.setter
    def stop_token_ids(self, arg: Sequence[int], /) -> None: ...

    @property
    def eos_token_ids(self) -> list[int]: ...

    @eos_token_ids.setter
    def eos_token_ids(self, arg: Sequence[int], /) -> None: ...

    @property
    def ignore_eos(self) -> bool: ...

    @ignore_eos.setter
    def ignore_eos(self, arg: bool, /) -> None: ...

    @property
    def logprobs(self) -> int: ...

    @logprobs.setter
    def logprobs(self, arg: int, /) -> None: ...

def validate_sampling_params(params: SamplingParams, vocab: int) -> None:
    """Raise ValueError naming the first field out of range."""

MAX_LOGPROBS: int = 20

class Sampler:
    """The batch sampler; holds per-thread scratch buffers."""

    def __init__(self) -> None: ...

    def sample(self, logits: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cpu', writable=False)], params: Sequence[SamplingParams], prompt_token_ids: Sequence[Sequence[int]], output_token_ids: Sequence[Sequence[int]], seeds: Sequence[int], streams: Sequence[int], steps: Sequence[int], token_masks: Annotated[NDArray[numpy.int32], dict(shape=(None, None), order='C', device='cpu', writable=False)] | None = None) -> tuple:
        """
        Sample one token per row (token_masks: optional int32 [n_rows, ceil(vocab / 32)] allowed-token
        bits, llguidance's layout). Returns (tokens, logprobs, top_ids, top_logprobs, n_top); top_* are
        [n_rows, MAX_LOGPROBS] with n_top valid entries per row; logprobs is NaN where not requested.
        """

    def logprobs(self, logits: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cpu', writable=False)], token_ids: Sequence[int], top_n: int) -> tuple:
        """
        Raw logprob of token_ids[r] in row r and the top_n alternatives (prompt_logprobs).
        """

def philox4x32_10(counter: Sequence[int], key: Sequence[int]) -> list[int]: ...

def philox_uniform(seed: int, stream: int, step: int) -> float: ...

def exp_ref(z: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> NDArray[numpy.float64]:
    """The sampler's exp for z <= 0 (for the reference twin's tests)."""

def hash_block_tokens(parent: int, extra_key: int, tokens: Sequence[int]) -> int:
    """64-bit FNV-1a of (parent, extra_key, tokens) as little-endian bytes."""

def kv_block_bytes(n_layer: int, n_head_kv: int, head_dim: int, block_size: int = 16, dtype_bytes: int = 2) -> int:
    """Bytes of one KV-cache block (K and V, all layers)."""

def num_blocks_for_memory(memory_bytes: int, n_layer: int, n_head_kv: int, head_dim: int, block_size: int = 16, dtype_bytes: int = 2) -> int:
    """How many KV-cache blocks a byte budget holds."""

def watermark_blocks_for(watermark: float, num_blocks: int) -> int:
    """
    floor(watermark * num_blocks): the blocks the scheduler keeps free when admitting.
    """

DEFAULT_WATERMARK: float = 0.01

class BlockPool:
    """KV-cache blocks: ref counts, LRU free queue, prefix-cache map."""

    def __init__(self, num_blocks: int, block_size: int) -> None: ...

    @property
    def num_blocks(self) -> int: ...

    @property
    def block_size(self) -> int: ...

    @property
    def num_free(self) -> int: ...

    @property
    def num_evictions(self) -> int: ...

    def allocate(self) -> int: ...

    def touch(self, block: int) -> None: ...

    def release(self, block: int) -> None: ...

    def lookup(self, hash: int, parent: int, extra_key: int, tokens: Sequence[int]) -> int: ...

    def cache(self, block: int, hash: int, parent: int, extra_key: int, tokens: Sequence[int]) -> bool: ...

    def free_queue(self) -> list[int]: ...

    def ref_counts(self) -> list[int]: ...

    def cached_blocks(self) -> list[tuple[int, int]]:
        """
        (block, hash) of every block that carries a prefix-cache hash, by block id.
        """

class CacheStats:
    @property
    def num_blocks(self) -> int: ...

    @property
    def num_free_blocks(self) -> int: ...

    @property
    def usage_percent(self) -> float: ...

    @property
    def prefix_queries(self) -> int: ...

    @property
    def prefix_hits(self) -> int: ...

class KVCacheManager:
    """Block tables per sequence over a BlockPool."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True, watermark: float = 0.01) -> None: ...

    @property
    def watermark_blocks(self) -> int: ...

    def get_computed_blocks(self, seq: int, tokens: Sequence[int], extra_key: int = 0) -> tuple[list[int], int]:
        """(hit blocks, tokens they cover) for a sequence holding no blocks."""

    def allocate_slots(self, seq: int, num_computed: int, num_new: int, hits: Sequence[int] = [], apply_watermark: bool = False) -> tuple[bool, list[tuple[int, int]]]:
        """(ok, [(src, dst) copy-on-write block copies])."""

    def cache_full_blocks(self, seq: int, tokens: Sequence[int], num_computed: int, extra_key: int = 0) -> None: ...

    def free(self, seq: int) -> None: ...

    def fork(self, parent: int, child: int) -> None: ...

    def block_table(self, seq: int) -> list[int]: ...

    def stats(self) -> CacheStats: ...

    @property
    def pool(self) -> BlockPool: ...

class SchedulerConfig:
    def __init__(self, num_blocks: int, block_size: int = 16, max_num_batched_tokens: int = 2048, max_num_seqs: int = 256, max_model_len: int = 2048, policy: str = 'fcfs', enable_prefix_caching: bool = True, watermark: float = 0.01, num_state_slots: int = 0) -> None: ...

    @property
    def num_blocks(self) -> int: ...

    @num_blocks.setter
    def num_blocks(self, arg: int, /) -> None: ...

    @property
    def block_size(self) -> int: ...

    @block_size.setter
    def block_size(self, arg: int, /) -> None: ...

    @property
    def max_num_batched_tokens(self) -> int: ...

    @max_num_batched_tokens.setter
    def max_num_batched_tokens(self, arg: int, /) -> None: ...

    @property
    def max_num_seqs(self) -> int: ...

    @max_num_seqs.setter
    def max_num_seqs(self, arg: int, /) -> None: ...

    @property
    def max_model_len(self) -> int: ...

    @max_model_len.setter
    def max_model_len(self, arg: int, /) -> None: ...

    @property
    def enable_prefix_caching(self) -> bool: ...

    @enable_prefix_caching.setter
    def enable_prefix_caching(self, arg: bool, /) -> None: ...

    @property
    def watermark(self) -> float: ...

    @watermark.setter
    def watermark(self, arg: float, /) -> None: ...

    @property
    def num_state_slots(self) -> int: ...

    @num_state_slots.setter
    def num_state_slots(self, arg: int, /) -> None: ...

class Request:
    def __init__(self, id: int, prompt: Sequence[int], max_tokens: int = 16, min_tokens: int = 0, eos_token_ids: Sequence[int] = [], stop_token_ids: Sequence[int] = [], ignore_eos: bool = False, n: int = 1, priority: int = 0, cache_salt: int = 0) -> None: ...

    @property
    def id(self) -> int: ...

    @id.setter
    def id(self, arg: int, /) -> None: ...

    @property
    def prompt(self) -> list[int]: ...

    @prompt.setter
    def prompt(self, arg: Sequence[int], /) -> None: ...

    @property
    def max_tokens(self) -> int: ...

    @max_tokens.setter
    def max_tokens(self, arg: int, /) -> None: ...

    @property
    def min_tokens(self) -> int: ...

    @min_tokens.setter
    def min_tokens(self, arg: int, /) -> None: ...

    @property
    def eos_token_ids(self) -> list[int]: ...

    @eos_token_ids.setter
    def eos_token_ids(self, arg: Sequence[int], /) -> None: ...

    @property
    def stop_token_ids(self) -> list[int]: ...

    @stop_token_ids.setter
    def stop_token_ids(self, arg: Sequence[int], /) -> None: ...

    @property
    def ignore_eos(self) -> bool: ...

    @ignore_eos.setter
    def ignore_eos(self, arg: bool, /) -> None: ...

    @property
    def n(self) -> int: ...

    @n.setter
    def n(self, arg: int, /) -> None: ...

    @property
    def priority(self) -> int: ...

    @priority.setter
    def priority(self, arg: int, /) -> None: ...

    @property
    def cache_salt(self) -> int: ...

    @cache_salt.setter
    def cache_salt(self, arg: int, /) -> None: ...

class SchedulerOutput:
    """
    One step, per sequence: positions, draft, block table, samples (build_batch turns it into the model's Batch).
    """

    @property
    def block_table_start(self) -> list[int]: ...

    @property
    def block_tables(self) -> list[int]: ...

    @property
    def num_tokens(self) -> int: ...

    @property
    def num_samples(self) -> int: ...

    @property
    def drafts(self) -> list[list[int]]:
        """The draft each sequence verifies this step (empty when none)."""

    @property
    def seqs(self) -> list:
        """
        (request_id, child, num_computed before, num_tokens scheduled, num_samples) per sequence.
        """

    @property
    def num_draft(self) -> list[int]:
        """Draft tokens each sequence verifies this step (speculative decoding)."""

    @property
    def state_slots(self) -> list[int]:
        """Each sequence's recurrent state slot (-1 without num_state_slots)."""

    @property
    def state_copies(self) -> list[tuple[int, int]]:
        """(src, dst) state slots to copy before the forward (forks)."""

    @property
    def num_appended(self) -> list[int]:
        """
        After update(): tokens each verifying sequence appended (its accepted run).
        """

    @property
    def block_copies(self) -> list[tuple[int, int]]: ...

    @property
    def preempted(self) -> list[tuple[int, int]]: ...

    @property
    def finished_requests(self) -> list[int]: ...

class SchedulerStats:
    @property
    def num_running(self) -> int: ...

    @property
    def num_waiting(self) -> int: ...

    @property
    def kv_usage_percent(self) -> float: ...

    @property
    def prefix_queries(self) -> int: ...

    @property
    def prefix_hits(self) -> int: ...

    @property
    def num_preemptions(self) -> int: ...

class Scheduler:
    """Continuous-batching scheduler over a paged KV cache."""

    def __init__(self, config: SchedulerConfig) -> None: ...

    def add_request(self, request: Request) -> None: ...

    def abort(self, request_id: int) -> bool: ...

    def finish(self, request_id: int, child: int) -> bool: ...

    def set_draft(self, request_id: int, child: int, draft: Sequence[int]) -> bool: ...

    def schedule(self) -> SchedulerOutput: ...

    def update(self, sampled_tokens: Sequence[int]) -> list:
        """
        Returns (request_id, child, reason, stop_token, request_done) per finished child.
        """

    def has_unfinished(self) -> bool: ...

    def stats(self) -> SchedulerStats: ...

    def block_table(self, request_id: int, child: int) -> list[int]: ...

    def tokens(self, request_id: int, child: int) -> list[int]: ...

    def running(self) -> list[tuple[int, int]]: ...

    def waiting(self) -> list[tuple[int, int]]: ...

    def ref_counts(self) -> list[int]: ...

    def free_queue(self) -> list[int]: ...

    def cached_blocks(self) -> list[tuple[int, int]]: ...

    def bench_steps(self, n_steps: int, token: int) -> float: ...

class Batch:
    """One step's flat batch for the forward pass (model/batch.h)."""

    @property
    def token_ids(self) -> list[int]: ...

    @property
    def positions(self) -> list[int]: ...

    @property
    def slot_mapping(self) -> list[int]: ...

    @property
    def seq_start(self) -> list[int]: ...

    @property
    def context_len(self) -> list[int]: ...

    @property
    def block_table_start(self) -> list[int]: ...

    @property
    def block_tables(self) -> list[int]: ...

    @property
    def logits_rows(self) -> list[int]: ...

    @property
    def state_slots(self) -> list[int]: ...

def build_batch(scheduler_output: SchedulerOutput, block_size: int) -> Batch:
    """The Batch of one scheduled step: one logits row per sampled token."""

class EngineConfig:
    def __init__(self) -> None: ...

    @property
    def num_blocks(self) -> int: ...

    @num_blocks.setter
    def num_blocks(self, arg: int, /) -> None: ...

    @property
    def block_size(self) -> int: ...

    @block_size.setter
    def block_size(self, arg: int, /) -> None: ...

    @property
    def max_num_batched_tokens(self) -> int: ...

    @max_num_batched_tokens.setter
    def max_num_batched_tokens(self, arg: int, /) -> None: ...

    @property
    def max_num_seqs(self) -> int: ...

    @max_num_seqs.setter
    def max_num_seqs(self, arg: int, /) -> None: ...

    @property
    def max_model_len(self) -> int: ...

    @max_model_len.setter
    def max_model_len(self, arg: int, /) -> None: ...

    @property
    def enable_prefix_caching(self) -> bool: ...

    @enable_prefix_caching.setter
    def enable_prefix_caching(self, arg: bool, /) -> None: ...

    @property
    def watermark(self) -> float: ...

    @watermark.setter
    def watermark(self, arg: float, /) -> None: ...

    @property
    def num_state_slots(self) -> int: ...

    @num_state_slots.setter
    def num_state_slots(self, arg: int, /) -> None: ...

    @property
    def policy(self) -> str: ...

    @policy.setter
    def policy(self, arg: str, /) -> None: ...

    @property
    def seed(self) -> int: ...

    @seed.setter
    def seed(self, arg: int, /) -> None: ...

    @property
    def kv_cache_dtype(self) -> str: ...

    @kv_cache_dtype.setter
    def kv_cache_dtype(self, arg: str, /) -> None: ...

    @property
    def spec_method(self) -> str:
        """Speculative decoding: 'none' or 'ngram'."""

    @spec_method.setter
    def spec_method(self, arg: str, /) -> None: ...

    @property
    def num_speculative_tokens(self) -> int: ...

    @num_speculative_tokens.setter
    def num_speculative_tokens(self, arg: int, /) -> None: ...

    @property
    def prompt_lookup_min(self) -> int: ...

    @prompt_lookup_min.setter
    def prompt_lookup_min(self, arg: int, /) -> None: ...

    @property
    def prompt_lookup_max(self) -> int: ...

    @prompt_lookup_max.setter
    def prompt_lookup_max(self, arg: int, /) -> None: ...

    @property
    def spec_disable_by_batch_size(self) -> int:
        """No speculation in a step when more sequences than this run (0: never)."""

    @spec_disable_by_batch_size.setter
    def spec_disable_by_batch_size(self, arg: int, /) -> None: ...

    @property
    def spec_draft_cost(self) -> float:
        """
        Method draft_model: a draft position's cost as a share of a target step.
        """

    @spec_draft_cost.setter
    def spec_draft_cost(self, arg: float, /) -> None: ...

class GenerationParams:
    def __init__(self) -> None: ...

    @property
    def sampling(self) -> SamplingParams: ...

    @sampling.setter
    def sampling(self, arg: SamplingParams, /) -> None: ...

    @property
    def max_tokens(self) -> int: ...

    @max_tokens.setter
    def max_tokens(self, arg: int, /) -> None: ...

    @property
    def n(self) -> int: ...

    @n.setter
    def n(self, arg: int, /) -> None: ...

    @property
    def priority(self) -> int: ...

    @priority.setter
    def priority(self, arg: int, /) -> None: ...

    @property
    def stop(self) -> list[str]: ...

    @stop.setter
    def stop(self, arg: Sequence[str], /) -> None: ...

    @property
    def include_stop_str_in_output(self) -> bool: ...

    @include_stop_str_in_output.setter
    def include_stop_str_in_output(self, arg: bool, /) -> None: ...

    @property
    def skip_special_tokens(self) -> bool: ...

    @skip_special_tokens.setter
    def skip_special_tokens(self, arg: bool, /) -> None: ...

    @property
    def prompt_logprobs(self) -> int: ...

    @prompt_logprobs.setter
    def prompt_logprobs(self, arg: int, /) -> None: ...

    @property
    def constraint(self) -> int: ...

    @constraint.setter
    def constraint(self, arg: int, /) -> None: ...

class TokenLogprobs:
    @property
    def token(self) -> int: ...

    @property
    def logprob(self) -> float: ...

    @property
    def rank(self) -> int: ...

    @property
    def top(self) -> list[tuple[int, float]]: ...

class CompletionDelta:
    @property
    def index(self) -> int: ...

    @property
    def token_ids(self) -> list[int]: ...

    @property
    def text(self) -> str: ...

    @property
    def logprobs(self) -> list[TokenLogprobs]: ...

    @property
    def cumulative_logprob(self) -> float: ...

    @property
    def finish_reason(self) -> str: ...

    @property
    def stop_str(self) -> str: ...

    @property
    def stop_token(self) -> int: ...

class EngineOutput:
    @property
    def request_id(self) -> str: ...

    @property
    def completions(self) -> list[CompletionDelta]: ...

    @property
    def finished(self) -> bool: ...

    @property
    def has_prompt_logprobs(self) -> bool: ...

    @property
    def prompt_logprobs(self) -> list[TokenLogprobs]: ...

    @property
    def num_prompt_tokens(self) -> int: ...

    @property
    def num_cached_tokens(self) -> int: ...

    @property
    def arrival_time(self) -> float: ...

    @property
    def first_scheduled_time(self) -> float: ...

    @property
    def first_token_time(self) -> float: ...

    @property
    def finished_time(self) -> float: ...

    @property
    def error(self) -> str: ...

    @property
    def num_drafts(self) -> int: ...

    @property
    def num_draft_tokens(self) -> int: ...

    @property
    def num_accepted_tokens(self) -> int: ...

class Engine:
    """
    The C++ decode loop (schedule, forward, sample, detokenize, stop checks).
    """

    def __init__(self, model: Model, tokenizer: Tokenizer, config: EngineConfig, draft_model: Model | None = None) -> None:
        """
        draft_model: the proposer of speculative_config method 'draft_model' (the target's vocabulary).
        """

    def add_request(self, request_id: str, prompt_token_ids: Sequence[int], params: GenerationParams) -> None: ...

    def abort(self, request_id: str) -> bool: ...

    def step(self) -> list[EngineOutput]: ...

    def run_to_completion(self) -> list[EngineOutput]: ...

    def has_unfinished(self) -> bool: ...

    def set_constraint_host(self, host: object | None, overlap: bool = True) -> None:
        """
        Where constrained rows get their token masks: an object with compute(handles, children,
        feed_offsets, feed_tokens, released, masks) -> [(row, error)] (ossa.structured.ConstraintHost).
        overlap: compute on a worker thread while the forward pass runs.
        """

    def start(self) -> None: ...

    def stop(self) -> None: ...

    @property
    def running(self) -> bool: ...

    def get_outputs(self, timeout_s: float = 0.0) -> list[EngineOutput]: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def config(self) -> EngineConfig:
        """
        A copy of the engine's EngineConfig (as built; changing it changes nothing).
        """

    def stats(self) -> dict: ...
