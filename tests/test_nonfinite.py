"""Weights that turn into NaN/Inf in the forward (infinite scales in a damaged file) fail the request
with a clear error and finish_reason "error", in the C++ engine and in the twin, instead of sampling
garbage (before, C++ attention's fmax and clamped exp turned NaN scores into numbers); the server
ends such a stream with a finish_reason "error" chunk, an error event and [DONE], and a
non-streaming request with a JSON 500.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import httpx
import pytest

pytestmark = pytest.mark.timeout(600)

F16_INF = (0x7C00).to_bytes(2, "little")
PROMPT_OK = "The capital of France is"


def damaged_copy(src: str, dst: Path, tensor: str, rows: list[int] | None = None) -> str:
    """A copy of src whose blocks' f16 scale (the first two bytes of each Q4_1/Q8_0 block) is +inf:
    every block of the tensor, or only those of the given rows."""
    reader = gguf.GGUFReader(src)
    t = next(t for t in reader.tensors if t.name == tensor)
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[t.tensor_type]
    n_cols = int(t.shape[0])
    row_bytes = n_cols // block_elems * block_bytes
    data = bytearray(Path(src).read_bytes())
    for r in rows if rows is not None else range(int(t.n_bytes) // row_bytes):
        for b in range(n_cols // block_elems):
            o = int(t.data_offset) + r * row_bytes + b * block_bytes
            data[o : o + 2] = F16_INF
    dst.write_bytes(bytes(data))
    return str(dst)


def run_engine(llm: Any, prompts: list[list[int]], max_tokens: int = 4) -> dict[str, list[Any]]:
    """Every delta of each request (ids "0", "1", ...), all added before the first step."""
    from ossa import SamplingParams

    deltas: dict[str, list[Any]] = {}
    for i, ids in enumerate(prompts):
        g = llm.input_processor.engine_params(SamplingParams(max_tokens=max_tokens, temperature=0), len(ids))
        llm.engine.add_request(str(i), ids, g)
        deltas[str(i)] = []
    for d in llm.engine.run_to_completion():
        deltas[d.request_id].append(d)
    assert not llm.engine.has_unfinished()
    return deltas


def failed_with_nan(ds: list[Any]) -> str:
    last = ds[-1]
    assert last.finished and "NaN" in last.error, last.error
    assert [c.finish_reason for c in last.completions] == ["error"]
    return str(last.error)


@pytest.fixture(scope="module")
def inf_q(default_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Every scale of layer 0's query projection is +inf: q is inf/NaN, and attention must not turn
    that into finite numbers (fmax and a clamped exp would)."""
    dst = tmp_path_factory.mktemp("nonfinite") / "inf_q.gguf"
    return damaged_copy(default_model_path, dst, "blk.0.attn_q.weight")


@pytest.mark.parametrize("backend", ["cpp", "python"])
def test_inf_scales_fail_the_request(inf_q: str, backend: str) -> None:
    from ossa import LLM

    llm = LLM(inf_q, kv_cache_memory_bytes=8 << 20, max_model_len=64, backend=backend)
    ids = llm.tokenizer.encode(PROMPT_OK)
    msg = failed_with_nan(run_engine(llm, [ids])["0"])
    assert "sampling failed" in msg
    with pytest.raises(RuntimeError, match="NaN"):
        llm.generate(PROMPT_OK, use_tqdm=False)


@pytest.fixture(scope="module")
def server(inf_q: str) -> Iterator[Any]:
    from server_thread import ServerThread

    from ossa.async_engine import AsyncEngine
    from ossa.server.app import create_app

    engine = AsyncEngine.from_model(inf_q, kv_cache_memory_bytes=8 << 20, max_model_len=64)
    with ServerThread(create_app(engine, served_model_name="m")) as s:
        yield s


def test_server_ends_a_nan_request_with_finish_reason_error(server: Any) -> None:
    body = {"prompt": PROMPT_OK, "max_tokens": 4, "temperature": 0}
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    assert "NaN" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/v1/completions", json={**body, "stream": True}, timeout=120)
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-2]["choices"][0]["finish_reason"] == "error"
    assert "NaN" in chunks[-1]["error"]["message"]
    assert httpx.get(server.url + "/health").status_code == 200  # still serving
