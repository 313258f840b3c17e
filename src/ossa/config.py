"""The one validated configuration of an engine: what ``LLM``, the async engine, the server and the CLI
all build from.

``EngineArgs`` holds the user's options, flat, with vLLM's names; ``EngineArgs.validate`` checks each
before anything loads. ``EngineArgs.create_config(model)`` then derives, once, what depends on the
loaded model: the longest sequence (``max_model_len``), the KV-cache budget and its block count (the
C++ ``num_blocks_for_memory``) and the scheduler's watermark (the C++ default), into an ``OssaConfig``
of four parts (load, cache, scheduler, parallel) from which each backend builds its engine.

Memory on a CPU: ``kv_cache_memory_bytes`` sets the KV cache's budget directly. Without it,
``gpu_memory_utilization`` (vLLM's name, kept so scripts port) means the share of the machine's
available memory that the weights plus the KV cache may take: the KV cache gets that share less the
weights. Without either, the KV cache gets 1 GiB or a fifth of the available memory, whichever is less.

ossa runs one engine per process: ``tensor_parallel_size``, ``pipeline_parallel_size`` and
``data_parallel_size`` other than 1 are refused (a ValueError), never ignored; to use more cores or
machines, run several engines as Ray replicas (``ossa.ray``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

DEFAULT_KV_CACHE_BYTES = 1 << 30  # 1 GiB, or a fifth of available memory if that is less
# The step limits a sequence count and token budget left unset get, by how the engine is used (vLLM's
# usage contexts): an offline batch (``LLM``, ``ossa generate | chat | bench``) favours throughput; a
# server (``AsyncEngine.from_model``: ``ossa serve``, Ray Serve) keeps steps short, so that a burst of
# new prompts holds up the streams already running for less time.
OFFLINE_LIMITS = {"max_num_seqs": 256, "max_num_batched_tokens": 2048}
SERVER_LIMITS = {"max_num_seqs": 64, "max_num_batched_tokens": 512}
BACKENDS = ("cpp", "python")
POLICIES = ("fcfs", "priority")
# Options vLLM takes that mean nothing on one CPU process and change no output; accepted (and
# ignored) so scripts port; the CLI takes them as hidden flags. (ossa always chunks long prompts: with
# batch invariance the tokens are the same either way.)
IGNORED_OPTIONS = frozenset(
    {
        "trust_remote_code",
        "enforce_eager",
        "disable_log_stats",
        "swap_space",
        "enable_chunked_prefill",
        "disable_custom_all_reduce",
        "max_seq_len_to_capture",
        "compilation_config",
        "distributed_executor_backend",
    }
)
_IGNORED_SWITCHES = frozenset(
    {
        "trust_remote_code",
        "enforce_eager",
        "disable_log_stats",
        "enable_chunked_prefill",
        "disable_custom_all_reduce",
    }
)


def available_memory() -> int | None:
    """The kernel's estimate of memory available to a new process (MemAvailable), in bytes."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return None


def _positive_int(name: str, value: Any, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def parse_json_text(value: Any, where: str) -> Any:
    """An option given as a value or as its JSON text (vLLM takes both): the value, parsed when it is a
    string; ValueError "<where> is not valid JSON: ..." when that fails."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where} is not valid JSON: {e}") from None


@dataclass
class EngineArgs:
    """An engine's options (``LLM(model, **options)``; the CLI's ``--flags`` have the same names).

    Args:
        model: a GGUF file, a Hugging Face folder, or a short name (default ``"smollm2-135m"``,
            fetched on first use).
        tokenizer: where to read the tokenizer from (default: the model): a tokenizer.json, a
            folder, a GGUF file, or a Hub id (``org/name``: its tokenizer files only, from the
            Hugging Face cache or fetched), as vLLM takes for GGUF models.
        revision: the branch, tag or commit of a Hub id ``model`` (default: main).
        tokenizer_revision: the same for a Hub id ``tokenizer`` (default: main).
        download_dir: the Hugging Face cache folder Hub ids are looked up in and fetched into
            (default: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub).
        hf_token: the Hugging Face token for gated or private repositories (default: the one
            ``huggingface_hub`` finds, $HF_TOKEN or ``huggingface-cli login``'s).
        max_model_len: the longest sequence (prompt + output); default: the model's context length,
            or what the KV cache holds if that is less.
        kv_cache_memory_bytes: the KV-cache budget in bytes (see ``gpu_memory_utilization``).
        gpu_memory_utilization: on a CPU, the share (0, 1] of available memory that the weights plus
            the KV cache may take; sizes the KV cache when ``kv_cache_memory_bytes`` is not given.
        kv_cache_dtype: ``"auto"`` (float16), ``"float16"`` or ``"float32"``: the element type of
            the cached K and V (float16 halves what decode attention reads; float32 is exact).
        dtype: the matmuls' precision. ``"auto"``/``"float32"``: quantized weights exact, activations
            f32 (on AMX split into two bf16 halves, ~3e-6 of sum |x w|). ``"bfloat16"``: every matrix
            rounded to bf16 once at load and its inputs rounded to bf16, f32 accumulation (vLLM-CPU's
            numerics): faster prefill on AMX, weights take 2 bytes each. Both are deterministic and
            batch invariant.
        block_size: tokens per KV-cache block.
        max_num_seqs: the most sequences in one step (default: 256 offline, 64 in a server such as
            ``ossa serve``).
        max_num_batched_tokens: the most tokens in one step, long prompts chunked (default: 2048
            offline, 512 in a server).
        enable_prefix_caching: reuse the KV blocks of shared prompt prefixes.
        seed: seeds every request that brings no seed of its own.
        num_threads: kernel threads (default: all cores).
        backend: ``"cpp"`` (the C++ engine) or ``"python"`` (the ``ossa.reference`` twins; slow).
        scheduling_policy: ``"fcfs"`` or ``"priority"``.
        amx: the repacked kernels: AMX where the CPU has it; without AMX the int8 kernels (exact
            integer products of the activations' int8 pieces) for the quantized types the CPU's
            VNNI or AVX2 loops take (docs/quant-types.md). ``OSSA_AMX=0``
            in the environment turns them off everywhere; False: the exact f32 kernels for every matrix.
        quantized_activations: quantized weights multiply activations rounded to 8-bit blocks of
            32 values (llama.cpp's scheme: 1.5-2.7x the prefill on CPUs without AMX, and it changes
            answers) where that is the faster kernel: with AMX the K-quants' int8 kernels take them,
            and the types on bf16 tiles (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, IQ4_NL, Q5_K, IQ4_XS) keep
            their exact inputs; default exact activations.
        speculative_config: speculative decoding (vLLM's dict, or its JSON text):
            ``{"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4,
            "prompt_lookup_min": 2}`` drafts k tokens by prompt lookup; outputs are bitwise those of
            plain decoding (docs/speculative.md); ``{"model": DRAFT, "num_speculative_tokens": k}``
            has a draft model of the same vocabulary propose them greedily. ``disable_by_batch_size``
            (default 8, None: never): no drafts in a step with more sequences running. Constrained
            (structured-output) requests do not speculate.
        generation_config: where requests' default sampling comes from (vLLM's option):
            ``"auto"`` reads the model folder's ``generation_config.json`` (its temperature, top_p,
            top_k, min_p, repetition_penalty and max_new_tokens, as the model's authors recommend;
            for a GGUF file, its ``general.sampling.*`` keys: temp, top_p, top_k, min_p,
            penalty_repeat, which llama.cpp's converter writes from that file),
            ``"vllm"`` ignores it (vLLM's neutral defaults), or a folder holding such a file.
        override_generation_config: those fields set over the file's (a dict, or its JSON text).
        tensor_parallel_size, pipeline_parallel_size, data_parallel_size: must be 1 (one engine per
            process; run Ray replicas to scale out).
    """

    model: str | None = None
    tokenizer: str | None = None
    revision: str | None = None
    tokenizer_revision: str | None = None
    download_dir: str | None = None
    hf_token: str | bool | None = None
    max_model_len: int | None = None
    kv_cache_memory_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"
    block_size: int = 16
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_prefix_caching: bool = True
    seed: int = 0
    num_threads: int | None = None
    backend: str = "cpp"
    scheduling_policy: str = "fcfs"
    amx: bool = True
    quantized_activations: bool = False
    speculative_config: dict[str, Any] | str | None = None
    generation_config: str = "auto"
    override_generation_config: dict[str, Any] | str | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1

    @classmethod
    def from_kwargs(cls, model: str | None, kwargs: dict[str, Any]) -> EngineArgs:
        """``LLM(model, **kwargs)``'s options; TypeError for a name that is no option."""
        names = {f.name for f in fields(cls)}
        unknown = set(kwargs) - names - IGNORED_OPTIONS
        if unknown:
            raise TypeError(f"LLM() got unexpected keyword arguments: {sorted(unknown)}")
        args = cls(model=model, **{k: v for k, v in kwargs.items() if k in names})
        args.validate()
        return args

    def validate(self) -> None:
        """Raises ValueError naming the first option out of range (nothing is loaded yet)."""
        from . import models

        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be 'cpp' or 'python', got {self.backend!r}")
        for name in ("tokenizer", "revision", "tokenizer_revision", "download_dir"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        if self.hf_token is not None and not isinstance(self.hf_token, (str, bool)):
            raise ValueError(f"hf_token must be a string or a bool, got {type(self.hf_token).__name__}")
        _positive_int("block_size", self.block_size)
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, name) is not None:
                _positive_int(name, getattr(self, name))
        if self.max_model_len is not None:
            _positive_int("max_model_len", self.max_model_len, minimum=2)
        if self.kv_cache_memory_bytes is not None:
            _positive_int("kv_cache_memory_bytes", self.kv_cache_memory_bytes)
        if self.gpu_memory_utilization is not None:
            u = self.gpu_memory_utilization
            if isinstance(u, bool) or not isinstance(u, (int, float)) or not 0.0 < u <= 1.0:
                raise ValueError(
                    f"gpu_memory_utilization must be in (0, 1] (the share of available memory the "
                    f"weights plus the KV cache may take), got {u!r}"
                )
        if self.num_threads is not None:
            _positive_int("num_threads", self.num_threads)
        if self.scheduling_policy not in POLICIES:
            raise ValueError(
                f"scheduling_policy must be 'fcfs' or 'priority', got {self.scheduling_policy!r}"
            )
        for name in ("amx", "quantized_activations", "enable_prefix_caching"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        models.kv_cache_dtype_of(self.kv_cache_dtype)
        models.dtype_of(self.dtype)
        speculative_config_of(self.speculative_config)
        if not isinstance(self.generation_config, str) or not self.generation_config:
            raise ValueError(
                f"generation_config must be 'auto', 'vllm' or a folder, got {self.generation_config!r}"
            )
        if self.generation_config not in ("auto", "vllm") and not os.path.isdir(self.generation_config):
            raise ValueError(
                f"generation_config={self.generation_config!r} is not 'auto', 'vllm' or a folder"
            )
        sampling_fields(
            parse_json_text(self.override_generation_config, "override_generation_config"),
            "override_generation_config",
        )
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            value = getattr(self, name)
            _positive_int(name, value)
            if value > 1:
                raise ValueError(
                    f"{name}={value}: ossa runs one engine per process, with no tensor, pipeline or "
                    f"data parallelism; to use more cores or machines, run several engines as Ray "
                    f"replicas (ossa.ray) and give each its share of the cores (num_threads)"
                )

    # -- the CLI ----------------------------------------------------------------------------------

    @classmethod
    def add_cli_args(cls, p: argparse.ArgumentParser, only: Sequence[str] | None = None) -> None:
        """One ``--flag`` per option (``model`` aside: each command takes it its own way), built from
        the fields: the flag is the name with dashes, its default the field's, its help the class
        docstring's; bools get ``--name/--no-name``. ``only``: just these options."""
        from . import models

        helps = _docstring_args(cls.__doc__ or "")
        hints = typing.get_type_hints(cls)
        choices = {
            "kv_cache_dtype": models.KV_CACHE_DTYPE_NAMES,
            "dtype": models.DTYPE_NAMES,
            "backend": BACKENDS,
            "scheduling_policy": POLICIES,
        }
        for f in fields(cls):
            if f.name == "model" or (only is not None and f.name not in only):
                continue
            flag = _CLI_FLAGS.get(f.name, "--" + f.name.replace("_", "-"))
            kwargs: dict[str, Any] = {"dest": _cli_dest(f.name), "default": f.default}
            kwargs["help"] = _with_default(helps[f.name], f.default).replace("%", "%%")
            if hints[f.name] is bool:
                p.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
                continue
            hint = hints[f.name]  # int, str, or `int | None` and the like
            kwargs["type"] = next(t for t in (int, float, str) if t == hint or t in typing.get_args(hint))
            if f.name in choices:
                kwargs["choices"] = list(choices[f.name])
            p.add_argument(flag, **kwargs)
        if only is None:  # vLLM's flags that change nothing here (IGNORED_OPTIONS), hidden
            for name in sorted(IGNORED_OPTIONS):
                flag = "--" + name.replace("_", "-")
                if name in _IGNORED_SWITCHES:
                    p.add_argument(
                        flag,
                        dest="ignored_" + name,
                        action=argparse.BooleanOptionalAction,
                        help=argparse.SUPPRESS,
                    )
                else:
                    p.add_argument(flag, dest="ignored_" + name, metavar="VALUE", help=argparse.SUPPRESS)
        if only is None or "enable_prefix_caching" in only:
            p.add_argument(  # the spelling ossa's CLI had first
                "--no-prefix-caching",
                dest="enable_prefix_caching",
                action="store_false",
                help=argparse.SUPPRESS,
            )

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> EngineArgs:
        """The options the flags of ``add_cli_args`` give (``model`` too when the command has one)."""
        names = [f.name for f in fields(cls)]
        values = {n: getattr(args, _cli_dest(n)) for n in names if hasattr(args, _cli_dest(n))}
        engine_args = cls(**values)
        engine_args.validate()
        return engine_args

    def hub_sources(self) -> tuple[Any, Any]:
        """Where Hub ids of the model and of the tokenizer come from (``ossa.hub.Source``)."""
        from .hub import Source

        return (
            Source(self.revision, self.download_dir, self.hf_token),
            Source(self.tokenizer_revision, self.download_dir, self.hf_token),
        )

    # -- derived values ---------------------------------------------------------------------------

    def create_config(
        self, model: Any, model_path: str, draft: Any | None = None, tokenizer_path: str | None = None
    ) -> OssaConfig:
        """The validated config with every derived value, for a loaded ``ossa.models.Model`` (and the
        loaded draft model of ``speculative_config``, whose KV cache has as many blocks as the target's
        and comes on top of ``kv_cache_memory_bytes``: it counts in the available-memory check)."""
        from . import models
        from ._native import core

        self.validate()
        arch = model.config
        kv_dtype = models.kv_cache_dtype_of(self.kv_cache_dtype)
        dtype_bytes = 2 if kv_dtype == "float16" else 4
        weight_bytes = _weight_bytes(model_path)
        kv_layers = arch.n_kv_layers or arch.n_layer  # (recurrent layers hold no K/V)
        geometry = arch.kv_geometry()  # (Gemma 4's layers differ in width: summed)
        block_bytes = int(core.kv_block_bytes(*geometry, self.block_size, dtype_bytes))
        recurrent = arch.state_bytes > 0
        if recurrent and speculative_config_of(self.speculative_config).method != "none":
            raise ValueError(
                f"speculative_config is not supported for {arch.arch} models: the state of their "
                "recurrent layers cannot take back rejected draft tokens"
            )
        if draft is not None and draft.config.state_bytes > 0:
            raise ValueError(
                f"speculative_config model: a {draft.config.arch} draft is not supported (the state of "
                "its recurrent layers cannot take back rejected draft tokens)"
            )
        draft_weight_bytes = draft_block_bytes = 0
        if draft is not None:
            d = draft.config
            draft_weight_bytes = _weight_bytes(draft.path)
            draft_block_bytes = int(
                core.kv_block_bytes(d.n_layer, d.n_head_kv, d.head_dim, self.block_size, dtype_bytes)
            )
        with_draft = f" and the draft model ({draft_weight_bytes / 2**20:.0f} MiB)" if draft else ""
        avail = available_memory()
        kv_bytes = self.kv_cache_memory_bytes
        if kv_bytes is None and self.gpu_memory_utilization is not None:
            if avail is None:
                raise ValueError("gpu_memory_utilization needs the available memory, which is unknown here")
            share = int(self.gpu_memory_utilization * avail) - weight_bytes - draft_weight_bytes
            # The share holds both KV caches, of one block count: the target's gets its part of it.
            kv_bytes = share * block_bytes // (block_bytes + draft_block_bytes) if share > 0 else 0
            if kv_bytes <= 0:
                raise ValueError(
                    f"gpu_memory_utilization={self.gpu_memory_utilization} of the available memory "
                    f"({avail / 2**20:.0f} MiB) leaves nothing for the KV cache beside the weights "
                    f"({weight_bytes / 2**20:.0f} MiB){with_draft}; raise it or give kv_cache_memory_bytes"
                )
        if kv_bytes is None:
            kv_bytes = DEFAULT_KV_CACHE_BYTES if avail is None else min(DEFAULT_KV_CACHE_BYTES, avail // 5)
        # Recurrent state (Qwen3.5, LFM2): one slot per running sequence, out of the same budget: as many
        # as max_num_seqs where half the budget holds them, else what half holds (at least one); the
        # KV blocks get the rest. A model without K/V at all (Mamba alone) gives the slots the whole
        # budget.
        max_num_seqs = self.max_num_seqs or OFFLINE_LIMITS["max_num_seqs"]
        num_state_slots = 0
        if recurrent:
            share = kv_bytes if kv_layers == 0 else kv_bytes // 2
            num_state_slots = max(1, min(max_num_seqs, share // arch.state_bytes))
        if recurrent and arch.n_kv_layers == 0:
            # No K/V to store: the blocks are bookkeeping alone (the pool holds no layer), as many as
            # every slot's sequence of the model's length needs (at most 128Ki tokens each unless
            # max_model_len asks for more), twice over for the scheduler's free margin.
            if self.max_model_len is not None:
                want = int(self.max_model_len)
            else:
                want = min(arch.n_ctx_train, 1 << 17) if arch.n_ctx_train > 0 else 2048
            per_seq = -(-want // self.block_size)
            num_blocks = min(2**31 - 1, 2 * num_state_slots * per_seq)
        else:
            num_blocks = int(
                core.num_blocks_for_memory(
                    kv_bytes - num_state_slots * arch.state_bytes,
                    *geometry,
                    self.block_size,
                    dtype_bytes,
                )
            )
        draft_kv_bytes = num_blocks * draft_block_bytes
        if avail is not None and weight_bytes + kv_bytes + draft_weight_bytes + draft_kv_bytes > avail:
            if draft is None:
                raise ValueError(
                    f"the model ({weight_bytes / 2**20:.0f} MiB) and the KV cache "
                    f"({kv_bytes / 2**20:.0f} MiB) do not fit in the available memory "
                    f"({avail / 2**20:.0f} MiB); lower kv_cache_memory_bytes"
                )
            raise ValueError(
                f"the model ({weight_bytes / 2**20:.0f} MiB), its KV cache ({kv_bytes / 2**20:.0f} MiB), "
                f"the draft model of speculative_config ({draft_weight_bytes / 2**20:.0f} MiB) and the "
                f"draft's KV cache ({num_blocks} blocks, as many as the target's, x {draft_block_bytes} "
                f"bytes = {draft_kv_bytes / 2**20:.0f} MiB) do not fit in the available memory "
                f"({avail / 2**20:.0f} MiB); lower kv_cache_memory_bytes"
            )
        watermark = float(core.DEFAULT_WATERMARK)
        # One sequence must fit beside the blocks the scheduler keeps free.
        usable_tokens = (num_blocks - int(core.watermark_blocks_for(watermark, num_blocks))) * self.block_size
        model_len = arch.n_ctx_train if self.max_model_len is None else int(self.max_model_len)
        if model_len <= 0:
            model_len = 2048
        if arch.pos_embd and model_len > arch.n_ctx_train:  # (GPT-2's table ends there)
            raise ValueError(
                f"max_model_len={model_len} is beyond the model's {arch.n_ctx_train} learned positions "
                f"(position embeddings, {arch.arch}); at most {arch.n_ctx_train}"
            )
        if usable_tokens < model_len:
            if self.max_model_len is not None:
                raise ValueError(
                    f"the KV cache ({kv_bytes} bytes = {usable_tokens} usable tokens) cannot hold one "
                    f"sequence of max_model_len={model_len} tokens; raise kv_cache_memory_bytes or "
                    f"lower max_model_len"
                )
            model_len = usable_tokens  # the model's own context does not fit: use what does
            if model_len < 2:
                raise ValueError(f"kv_cache_memory_bytes={kv_bytes} holds no KV-cache block")
        limits = OFFLINE_LIMITS  # for the options left unset (a server sets its own: server_defaults)
        return OssaConfig(
            load=LoadConfig(
                model_path=model_path,
                tokenizer_path=tokenizer_path or self.tokenizer or model_path,
                dtype=models.dtype_of(self.dtype),
                backend=self.backend,
                vocab_size=int(arch.n_vocab),
            ),
            cache=CacheConfig(
                block_size=self.block_size,
                kv_cache_dtype=kv_dtype,
                kv_cache_memory_bytes=int(kv_bytes),
                num_blocks=num_blocks,
                draft_kv_cache_memory_bytes=draft_kv_bytes,
                watermark=watermark,
                # (a recurrent state has no per-block prefix to reuse: off for such models, as vLLM)
                enable_prefix_caching=bool(self.enable_prefix_caching) and not recurrent,
                num_state_slots=num_state_slots,
            ),
            scheduler=SchedulerConfig(
                max_model_len=model_len,
                max_num_seqs=self.max_num_seqs or limits["max_num_seqs"],
                max_num_batched_tokens=self.max_num_batched_tokens or limits["max_num_batched_tokens"],
                policy=self.scheduling_policy,
            ),
            parallel=ParallelConfig(num_threads=self.num_threads),
            seed=int(self.seed) % (1 << 64),
            speculative=speculative_config_of(self.speculative_config),
            sampling_defaults=self.sampling_defaults(model_path),
        )

    def sampling_defaults(self, model_path: str) -> dict[str, Any]:
        """The SamplingParams fields that generation_config / override_generation_config set (vLLM's
        "diff" sampling parameters): requests that leave a field unset take its value."""
        folder = None
        if self.generation_config == "auto":
            folder = model_path if os.path.isdir(model_path) else None
        elif self.generation_config != "vllm":
            folder = self.generation_config
        found: dict[str, Any] = {}
        if self.generation_config == "auto" and os.path.isfile(model_path):
            found = gguf_sampling_defaults(model_path)
        if folder is not None:
            path = os.path.join(folder, "generation_config.json")
            if os.path.isfile(path):
                try:
                    with open(path, encoding="utf-8") as f:
                        found = sampling_fields(json.load(f), path, strict=False)
                except (OSError, ValueError) as e:
                    if self.generation_config != "auto":
                        raise ValueError(f"{path}: not a readable generation config ({e})") from None
                    # a model's own odd file does not stop it loading: vLLM's defaults then
                    logging.getLogger("ossa").warning("%s ignored: %s", path, e)
            elif self.generation_config not in ("auto", "vllm"):
                raise ValueError(f"generation_config={folder!r}: the folder has no generation_config.json")
        override = parse_json_text(self.override_generation_config, "override_generation_config")
        return {**found, **sampling_fields(override, "override_generation_config")}


# No drafts in a step with more sequences running than this, unless given (measured: docs/speculative.md;
# the same default as the C++ SpeculativeConfig and the twin's).
DEFAULT_DISABLE_BY_BATCH_SIZE = 8
SPECULATIVE_KEYS = (
    "method",
    "num_speculative_tokens",
    "prompt_lookup_max",
    "prompt_lookup_min",
    "disable_by_batch_size",
    "model",
    "draft_cost",
)


def _weight_bytes(path: str) -> int:
    """Bytes of a GGUF model's files (every shard); 0 for a Hugging Face folder (loaded into memory)."""
    from . import models

    return models.weight_bytes(path) if os.path.isfile(path) else 0


# generation_config.json's fields that become default sampling parameters (vLLM's list), and their
# SamplingParams names.
GENERATION_SAMPLING_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "max_new_tokens": "max_tokens",
}


# A GGUF file's sampling defaults (llama.cpp's converter writes them from generation_config.json),
# under generation_config's names.
GGUF_SAMPLING_KEYS = {
    "general.sampling.temp": "temperature",
    "general.sampling.top_p": "top_p",
    "general.sampling.top_k": "top_k",
    "general.sampling.min_p": "min_p",
    "general.sampling.penalty_repeat": "repetition_penalty",
}


def gguf_sampling_defaults(path: str) -> dict[str, Any]:
    """The sampling defaults a GGUF file's general.sampling.* keys set, as SamplingParams fields (the
    GGUF counterpart of a folder's generation_config.json; an odd value is skipped with a warning)."""
    from ._native import core

    try:
        meta = core.gguf_metadata(path, list(GGUF_SAMPLING_KEYS))
    except (OSError, ValueError):
        return {}  # not a GGUF file, or an unreadable one: the model loader says so
    config = {GGUF_SAMPLING_KEYS[k]: v for k, v in meta.items() if k in GGUF_SAMPLING_KEYS}
    return sampling_fields(config, path, strict=False)


def sampling_fields(config: Any, where: str, strict: bool = True) -> dict[str, Any]:
    """The sampling defaults a generation config sets, as SamplingParams fields. ``strict`` (an
    override someone typed): a key that is no such field, or a value of the wrong type, is a
    ValueError; a model's file may hold other keys (do_sample, eos_token_id, ...), which are skipped."""
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ValueError(f"{where} must be a dict (or its JSON text), got {config!r}")
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = GENERATION_SAMPLING_FIELDS.get(key, key if key == "max_tokens" else None)
        if name is None:
            if strict:
                known = ", ".join(GENERATION_SAMPLING_FIELDS)
                raise ValueError(f"{where}: {key!r} is not a sampling field ({known})")
            continue
        if value is None:
            continue
        integral = name in ("top_k", "max_tokens")
        value = -1 if name == "top_k" and value == 0 else value  # top_k 0: no top-k (vLLM's)
        problem = None
        if isinstance(value, bool) or not isinstance(value, int if integral else (int, float)):
            problem = f"{key} must be {'an integer' if integral else 'a number'}, got {value!r}"
        else:
            from .sampling_params import SamplingParams

            try:
                field_value: dict[str, Any] = {name: value}
                SamplingParams(**field_value)
            except ValueError as e:
                problem = str(e)
        if problem is None:
            out[name] = value
        elif strict:
            raise ValueError(f"{where}: {problem}")
        else:  # a model file's odd value: left to the neutral default
            logging.getLogger("ossa").warning("%s: %s; ignored", where, problem)
    return out


def speculative_config_of(value: dict[str, Any] | str | None) -> SpeculativeConfig:
    """``speculative_config`` (a dict, its JSON text, or None) validated: ValueError naming the field.
    As vLLM: with neither prompt_lookup bound given both are 5; with one, the other equals it."""
    if value is None:
        return SpeculativeConfig()
    value = parse_json_text(value, "speculative_config")
    if not isinstance(value, dict):
        raise ValueError(f"speculative_config must be a dict (or its JSON text), got {value!r}")
    unknown = sorted(set(value) - set(SPECULATIVE_KEYS))
    if unknown:
        raise ValueError(f"speculative_config has unknown fields {unknown}; known: {list(SPECULATIVE_KEYS)}")
    method = value.get("method")
    draft = value.get("model")
    if draft is not None or method == "draft_model":
        if method not in (None, "draft_model"):
            raise ValueError(f"speculative_config method must be 'draft_model' with a model, got {method!r}")
        if not isinstance(draft, str) or not draft:
            raise ValueError(f"speculative_config model must be a draft model's path or name, got {draft!r}")
        _check_draft_model(draft)
        for name in ("prompt_lookup_min", "prompt_lookup_max"):
            if value.get(name) is not None:
                raise ValueError(f"speculative_config {name} is for method 'ngram', not a draft model")
        method = "draft_model"
        cost = value.get("draft_cost")
        if cost is not None and (
            isinstance(cost, bool) or not isinstance(cost, (int, float)) or not 0 <= cost <= 1
        ):
            raise ValueError(f"speculative_config draft_cost must be a number in [0, 1], got {cost!r}")
    elif value.get("draft_cost") is not None:
        raise ValueError("speculative_config draft_cost is for a draft model (its 'model')")
    elif method != "ngram":
        raise ValueError(f"speculative_config method must be 'ngram' or 'draft_model', got {method!r}")
    k = value.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
        raise ValueError(
            f"speculative_config num_speculative_tokens must be an integer in [1, 64], got {k!r}"
        )
    given = {name: value.get(name) for name in ("prompt_lookup_min", "prompt_lookup_max")}
    for name, v in given.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"speculative_config {name} must be an integer >= 1, got {v!r}")
    lo_given, hi_given = given["prompt_lookup_min"], given["prompt_lookup_max"]
    lo: int = lo_given if lo_given is not None else hi_given if hi_given is not None else 5
    hi: int = hi_given if hi_given is not None else lo
    if hi < lo:
        raise ValueError(f"speculative_config prompt_lookup_max ({hi}) must be >= prompt_lookup_min ({lo})")
    # As vLLM: None (given) never disables; ossa's default when absent comes from measurement.
    dbs = value.get("disable_by_batch_size", DEFAULT_DISABLE_BY_BATCH_SIZE)
    if dbs is not None and (isinstance(dbs, bool) or not isinstance(dbs, int) or dbs < 2):
        raise ValueError(
            f"speculative_config disable_by_batch_size must be an integer >= 2 or None, got {dbs!r}"
        )
    return SpeculativeConfig(
        method=method,
        num_speculative_tokens=k,
        prompt_lookup_min=lo,
        prompt_lookup_max=hi,
        disable_by_batch_size=0 if dbs is None else dbs,
        model=draft,
        draft_cost=None if value.get("draft_cost") is None else float(value["draft_cost"]),
    )


def _check_draft_model(text: str) -> None:
    """ValueError naming speculative_config model unless ``text`` is a model ``models.resolve`` takes
    (an existing file or folder, a known name, a Hub id); nothing is fetched here."""
    from . import hub, models

    if Path(text).expanduser().exists() or text in models.KNOWN_MODELS or hub.parse_id(text) is not None:
        return
    raise ValueError(
        f"speculative_config model {text!r} is not a GGUF file, a Hugging Face folder, a Hub id or a "
        "known name"
    )


def server_defaults(engine_kwargs: dict[str, Any]) -> dict[str, Any]:
    """A server's engine options: those given (None values dropped), ``SERVER_LIMITS`` for the rest."""
    return SERVER_LIMITS | {k: v for k, v in engine_kwargs.items() if v is not None}


# The flags spelled otherwise than their option: the commands that take a request seed as --seed.
_CLI_FLAGS = {"seed": "--engine-seed"}


def _cli_dest(name: str) -> str:
    return _CLI_FLAGS[name].removeprefix("--").replace("-", "_") if name in _CLI_FLAGS else name


def _with_default(text: str, default: Any) -> str:
    if default is None or isinstance(default, bool):
        return text
    return f"{text.rstrip('.')} (default: {default})."


def _docstring_args(doc: str) -> dict[str, str]:
    """The ``Args:`` entries of a Google-style docstring, name -> one line of text without rST markup
    (``a, b: text`` gives both names the text)."""
    out: dict[str, str] = {}
    names: list[str] = []
    body = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    for line in body.splitlines():
        entry = re.match(r"^ {8}([a-z_, ]+): (.*)$", line)
        if entry:
            names = [n.strip() for n in entry.group(1).split(",")]
            for n in names:
                out[n] = entry.group(2)
        elif line.startswith(" " * 12) and names:
            for n in names:
                out[n] += " " + line.strip()
    return {k: v.replace("``", "") for k, v in out.items()}


@dataclass(frozen=True)
class LoadConfig:
    model_path: str
    tokenizer_path: str
    dtype: str  # the matmuls' precision: "float32" or "bfloat16"
    backend: str  # "cpp" or "python"
    vocab_size: int


@dataclass(frozen=True)
class CacheConfig:
    block_size: int
    kv_cache_dtype: str  # "float16" or "float32"
    kv_cache_memory_bytes: int
    num_blocks: int
    watermark: float  # share of blocks the scheduler keeps free when admitting waiting sequences
    enable_prefix_caching: bool
    # The draft model's KV cache (as many blocks as the target's), on top of kv_cache_memory_bytes.
    draft_kv_cache_memory_bytes: int = 0
    # Recurrent state slots (Qwen3.5's delta-net layers), within kv_cache_memory_bytes; 0: none.
    num_state_slots: int = 0


@dataclass(frozen=True)
class SchedulerConfig:
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    policy: str


@dataclass(frozen=True)
class ParallelConfig:
    num_threads: int | None = None  # kernel threads; None: all cores
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1


@dataclass(frozen=True)
class SpeculativeConfig:
    """Speculative decoding (``method`` "none": off)."""

    method: str = "none"
    num_speculative_tokens: int = 0
    prompt_lookup_min: int = 5
    prompt_lookup_max: int = 5
    disable_by_batch_size: int = DEFAULT_DISABLE_BY_BATCH_SIZE  # 0: never
    model: str | None = None  # method "draft_model": the draft's path or name (as given)
    # A draft position's cost as a share of a target step (None: the ratio of the weight bytes, set
    # when the draft loads; ossa's own field).
    draft_cost: float | None = None


@dataclass(frozen=True)
class OssaConfig:
    """Everything an engine is built from, validated, with the derived values computed once."""

    load: LoadConfig
    cache: CacheConfig
    scheduler: SchedulerConfig
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    seed: int = 0
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    # Default SamplingParams fields from the model's generation_config.json (EngineArgs.generation_config).
    sampling_defaults: dict[str, Any] = field(default_factory=dict)

    @property
    def max_model_len(self) -> int:
        return self.scheduler.max_model_len

    def engine_fields(self) -> dict[str, Any]:
        """The fields of the C++ ``EngineConfig`` (and of its twin's)."""
        return {
            "num_blocks": self.cache.num_blocks,
            "block_size": self.cache.block_size,
            "max_num_batched_tokens": self.scheduler.max_num_batched_tokens,
            "max_num_seqs": self.scheduler.max_num_seqs,
            "max_model_len": self.scheduler.max_model_len,
            "policy": self.scheduler.policy,
            "enable_prefix_caching": self.cache.enable_prefix_caching,
            "watermark": self.cache.watermark,
            "num_state_slots": self.cache.num_state_slots,
            "seed": self.seed,
            "kv_cache_dtype": self.cache.kv_cache_dtype,
            "spec_method": self.speculative.method,
            "num_speculative_tokens": self.speculative.num_speculative_tokens,
            "prompt_lookup_min": self.speculative.prompt_lookup_min,
            "prompt_lookup_max": self.speculative.prompt_lookup_max,
            "spec_disable_by_batch_size": self.speculative.disable_by_batch_size,
            "spec_draft_cost": self.speculative.draft_cost or 0.0,
        }
