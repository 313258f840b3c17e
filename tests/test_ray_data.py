"""Ray Data batch inference on a local three-node cluster: the processor's outputs equal one
in-process ``LLM.generate`` over the same rows, whatever the number of actors and the batch size
(chat and text rows, greedy and seeded sampling mixed); bad input is a clear error."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

ENGINE = {"kv_cache_memory_bytes": 64 << 20, "max_model_len": 512}
N_ROWS = 200


def _rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i in range(N_ROWS):
        params: dict[str, Any] = {"max_tokens": 2 + i % 5}
        if i % 3:
            params |= {"temperature": 0.9, "top_p": 0.95, "seed": 1000 + i}
        else:
            params |= {"temperature": 0.0}
        if i % 2:
            rows.append(
                {"id": i, "messages": [{"role": "user", "content": f"Give me {i} reasons to smile."}]}
            )
        else:
            rows.append({"id": i, "prompt": f"Item {i} of the list is"})
        rows[-1]["sampling_params"] = params
    return rows


@pytest.fixture(scope="module")
def expected() -> dict[int, list[int]]:
    """Generated token ids per row id from one engine in this process (chat rows through LLM.chat)."""
    from ossa import LLM, SamplingParams

    llm = LLM(num_threads=1, **ENGINE)
    rows = _rows()
    out: dict[int, list[int]] = {}
    for kind in ("prompt", "messages"):
        subset = [r for r in rows if kind in r]
        params = [SamplingParams(**r["sampling_params"]) for r in subset]
        if kind == "prompt":
            results = llm.generate([r["prompt"] for r in subset], params, use_tqdm=False)
        else:
            results = llm.chat([r["messages"] for r in subset], params, use_tqdm=False)
        out.update({r["id"]: list(o.outputs[0].token_ids) for r, o in zip(subset, results, strict=True)})
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("concurrency", "batch_size", "n_rows"), [(2, 16, N_ROWS), (1, 7, 40)])
def test_processor_equals_single_process(
    ray_cluster: Any, expected: dict[int, list[int]], concurrency: int, batch_size: int, n_rows: int
) -> None:
    import ray

    from ossa.ray.data import ProcessorConfig, build_processor

    config = ProcessorConfig(engine_kwargs=ENGINE, concurrency=concurrency, batch_size=batch_size)
    processor = build_processor(
        config,
        postprocess=lambda row: {
            "id": row["id"],
            "tokens": row["generated_token_ids"],
            "text": row["generated_text"],
            "num_input_tokens": row["num_input_tokens"],
            "num_generated_tokens": row["num_generated_tokens"],
        },
    )
    ds = ray.data.from_items(_rows()[:n_rows], override_num_blocks=8)
    result = processor.run(ds).take_all()
    got = {r["id"]: list(r["tokens"]) for r in result}
    assert got == {i: expected[i] for i in range(n_rows)}
    stats = processor.last_throughput
    assert stats is not None and stats.rows == n_rows
    assert stats.generated_tokens == sum(len(t) for t in got.values())


def test_config_and_rows_are_validated(ray_cluster: Any) -> None:
    import ray

    from ossa.ray.data import ProcessorConfig, build_processor

    with pytest.raises(ValueError, match="concurrency"):
        ProcessorConfig(concurrency=0)
    with pytest.raises(ValueError, match="num_threads"):
        ProcessorConfig(engine_kwargs={"num_threads": 2})
    with pytest.raises(ValueError, match="temperature"):
        ProcessorConfig(sampling_params={"temperature": -1.0})
    with pytest.raises(TypeError, match="ProcessorConfig"):
        build_processor({"model": "x"})  # type: ignore[arg-type]
    processor = build_processor(ProcessorConfig(engine_kwargs=ENGINE))
    with pytest.raises(Exception, match="needs 'prompt', 'prompt_token_ids' or 'messages'"):
        processor(ray.data.from_items([{"question": "no prompt here"}])).take_all()


def test_ray_is_an_optional_extra() -> None:
    # Without Ray, ossa imports; Ray Data, Ray Serve and `ossa serve --ray` name the extra.
    code = """
import sys
sys.modules["ray"] = None  # as if Ray were not installed
import ossa, ossa.llm, ossa.ray
from ossa.cli import main
from ossa.ray.data import ProcessorConfig, build_processor
try:
    build_processor(ProcessorConfig())
except ImportError as e:
    print("data:", e)
try:
    import ossa.ray.serve
except ImportError as e:
    print("serve:", e)
print("cli:", main(["serve", "--ray"]))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count('pip install "ossa[ray]"') == 2 and "cli: 2" in r.stdout, r.stdout
    assert 'pip install "ossa[ray]"' in r.stderr
