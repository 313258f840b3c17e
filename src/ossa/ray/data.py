"""Batch inference over a ``ray.data.Dataset`` with ossa engines, shaped like ``ray.data.llm``.

    import ray
    from ossa.ray.data import ProcessorConfig, build_processor

    config = ProcessorConfig(model="smollm2-135m", concurrency=2, batch_size=32, num_threads=1)
    processor = build_processor(
        config,
        preprocess=lambda row: {"messages": [{"role": "user", "content": row["question"]}],
                                "sampling_params": {"max_tokens": 64, "temperature": 0.7, "seed": row["id"]}},
        postprocess=lambda row: {"id": row["id"], "answer": row["generated_text"]},
    )
    ds = processor(ray.data.from_items(questions))   # lazy; or processor.run(ds) to execute and report

Each of ``concurrency`` actors holds one ``ossa.LLM`` (its kernel threads = the actor's ``num_cpus``)
and answers a whole batch with one ``LLM.generate`` call: one crossing into C++, which schedules the
batch's rows together. A row is ``prompt`` (text), ``prompt_token_ids`` or ``messages`` (a chat,
rendered with the model's template), with optional ``sampling_params`` (``SamplingParams``'s fields
as a dict). Output rows keep their input columns and gain ``generated_text``,
``generated_token_ids``, ``num_input_tokens``, ``num_generated_tokens`` and ``finish_reason``.

Determinism: ossa's kernels are batch invariant and each request samples from its own counter-based
stream keyed by its seed, so a greedy row, or a sampled row with a ``seed``, gives bitwise the same
output whatever the number of actors, the batch size or the node it lands on, and the same as one
process running ``LLM.generate`` over the whole dataset. A sampled row without a seed draws from a
seed derived from its order of arrival at its engine, which differs between runs: give seeds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import require

logger = logging.getLogger("ossa.ray.data")

Row = dict[str, Any]

# LLM() arguments that the config owns (or that only make sense in one process).
_RESERVED_ENGINE_KWARGS = ("model", "num_threads", "backend")


@dataclass
class ProcessorConfig:
    """How to run batch inference (``ray.data.llm.ProcessorConfig``'s shape, ossa's engine).

    Args:
        model: a GGUF path, Hugging Face folder or short name, resolved on each actor's node (a
            short name or Hub id is downloaded into that node's cache on first use; a path must
            exist on every node).
        engine_kwargs: further ``ossa.LLM`` arguments (``max_model_len``, ``kv_cache_memory_bytes``,
            ``dtype``, ``max_num_seqs``, ``enable_prefix_caching``, ``seed``...).
        concurrency: how many engine actors (each holds one copy of the weights and a KV cache).
        batch_size: rows per ``LLM.generate`` call; results do not depend on it.
        num_threads: kernel threads per actor, reserved as the actor's ``num_cpus``.
        apply_chat_template: render ``messages`` rows with the model's chat template (else a
            ``messages`` row is an error).
        sampling_params: defaults for rows that bring no ``sampling_params`` (or lack a field).
        runtime_env: Ray runtime environment of the actors (for example ``env_vars``).
    """

    model: str | None = None
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    concurrency: int = 1
    batch_size: int = 64
    num_threads: int = 1
    apply_chat_template: bool = True
    sampling_params: dict[str, Any] | None = None
    runtime_env: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in ("concurrency", "batch_size", "num_threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ProcessorConfig.{name} must be a positive integer, got {value!r}")
        reserved = sorted(set(self.engine_kwargs) & set(_RESERVED_ENGINE_KWARGS))
        if reserved:
            raise ValueError(
                f"engine_kwargs must not set {reserved}: use ProcessorConfig.model / num_threads "
                "(Ray Data runs the C++ engine)"
            )
        if self.sampling_params is not None:
            _sampling_params(self.sampling_params, None)  # fail here, not on the first actor


def _sampling_params(row_params: Any, defaults: dict[str, Any] | None) -> Any:
    from ..sampling_params import SamplingParams

    merged = dict(defaults or {})
    if row_params is not None:
        if not isinstance(row_params, dict):
            raise ValueError(f"sampling_params must be a dict of SamplingParams fields, got {row_params!r}")
        # Columns of dicts are stored as structs: fields one row did not give come back as None.
        merged.update({k: v for k, v in row_params.items() if v is not None})
    sp = SamplingParams(**merged)
    if sp.n != 1:
        raise ValueError(f"batch inference generates one completion per row (n=1), got n={sp.n}")
    return sp


class _EngineActor:
    """One ossa engine per Ray actor; each batch is one ``LLM.generate`` call."""

    def __init__(self, config: ProcessorConfig) -> None:
        from ..llm import LLM

        self.config = config
        self.llm = LLM(config.model, num_threads=config.num_threads, **config.engine_kwargs)

    def _prompt(self, row: Row) -> Any:
        if row.get("prompt_token_ids") is not None:
            return {
                "prompt_token_ids": [int(t) for t in row["prompt_token_ids"]],
                "prompt": row.get("prompt"),
            }
        if row.get("messages") is not None:
            if not self.config.apply_chat_template:
                raise ValueError("a row has 'messages' but apply_chat_template is False")
            text = self.llm.get_tokenizer().apply_chat_template(row["messages"], add_generation_prompt=True)
            # The template writes its own special tokens: encode without adding BOS again.
            return {"prompt": text, "prompt_token_ids": self.llm.get_tokenizer().encode(text, False)}
        if isinstance(row.get("prompt"), str):
            return row["prompt"]
        raise ValueError(f"a row needs 'prompt', 'prompt_token_ids' or 'messages'; got columns {sorted(row)}")

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        # Arrow rows, not numpy: a struct column (sampling_params) with fields some rows leave out
        # keeps its integers exact here (numpy would turn a seed next to a null into a float).
        rows: list[Row] = batch.to_pylist()
        prompts = [self._prompt(r) for r in rows]
        params = [_sampling_params(r.get("sampling_params"), self.config.sampling_params) for r in rows]
        outputs = self.llm.generate(prompts, params, use_tqdm=False) if rows else []
        first = [o.outputs[0] for o in outputs]
        columns = {
            "generated_text": pa.array([c.text for c in first], pa.string()),
            "generated_token_ids": pa.array([list(c.token_ids) for c in first], pa.list_(pa.int64())),
            "num_input_tokens": pa.array([len(o.prompt_token_ids) for o in outputs], pa.int64()),
            "num_generated_tokens": pa.array([len(c.token_ids) for c in first], pa.int64()),
            "finish_reason": pa.array([c.finish_reason for c in first], pa.string()),
        }
        for name, column in columns.items():
            if name in batch.column_names:
                batch = batch.drop_columns([name])
            batch = batch.append_column(name, column)
        return batch


@dataclass
class Throughput:
    """What one ``Processor.run`` did."""

    rows: int
    input_tokens: int
    generated_tokens: int
    seconds: float

    def __str__(self) -> str:
        s = max(self.seconds, 1e-9)
        return (
            f"{self.rows} rows in {self.seconds:.1f} s: {self.rows / s:.2f} rows/s, "
            f"{self.input_tokens / s:.1f} input tok/s, {self.generated_tokens / s:.1f} generated tok/s"
        )


class Processor:
    """Maps a dataset through preprocess -> ossa engines -> postprocess (lazily, like Ray Data)."""

    def __init__(
        self,
        config: ProcessorConfig,
        preprocess: Callable[[Row], Row] | None = None,
        postprocess: Callable[[Row], Row] | None = None,
    ) -> None:
        self.config = config
        self.preprocess = preprocess
        self.postprocess = postprocess
        self.last_throughput: Throughput | None = None

    def __call__(self, ds: Any) -> Any:
        """The lazy dataset of results (nothing runs until it is consumed)."""
        data = require("ray.data")
        if self.preprocess is not None:
            ds = ds.map(self.preprocess)
        remote_args: dict[str, Any] = {}
        if self.config.runtime_env is not None:
            remote_args["runtime_env"] = self.config.runtime_env
        ds = ds.map_batches(
            _EngineActor,
            fn_constructor_args=(self.config,),
            batch_size=self.config.batch_size,
            batch_format="pyarrow",
            compute=data.ActorPoolStrategy(size=self.config.concurrency),
            num_cpus=self.config.num_threads,
            udf_modifying_row_count=False,
            **remote_args,
        )
        if self.postprocess is not None:
            ds = ds.map(self.postprocess)
        return ds

    def run(self, ds: Any) -> Any:
        """Runs the processor to completion, logs (and keeps in ``last_throughput``) its throughput,
        and returns the materialized dataset. Token counts need the engine's columns: a postprocess
        that drops ``num_input_tokens`` / ``num_generated_tokens`` reports rows only."""
        start = time.perf_counter()
        out = self(ds).materialize()
        seconds = time.perf_counter() - start
        names = set(out.columns() or [])
        tokens = [
            int(out.sum(c) or 0) if c in names else 0 for c in ("num_input_tokens", "num_generated_tokens")
        ]
        self.last_throughput = Throughput(out.count(), tokens[0], tokens[1], seconds)
        logger.info("ossa.ray.data: %s", self.last_throughput)
        print(f"ossa.ray.data: {self.last_throughput}", flush=True)
        return out


def build_processor(
    config: ProcessorConfig,
    preprocess: Callable[[Row], Row] | None = None,
    postprocess: Callable[[Row], Row] | None = None,
) -> Processor:
    """A batch-inference processor (``ray.data.llm.build_processor``'s shape): ``processor(ds)``
    returns the lazy result dataset; ``processor.run(ds)`` executes it and reports throughput."""
    require("ray.data")
    if not isinstance(config, ProcessorConfig):
        raise TypeError(f"config must be an ossa.ray.data.ProcessorConfig, got {type(config).__name__}")
    return Processor(config, preprocess, postprocess)
