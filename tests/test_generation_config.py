"""A model's generation_config.json as the default sampling parameters (vLLM's generation_config /
override_generation_config options): LLM.get_default_sampling_params, generate() without params, and
the server's requests that leave the fields unset. The greedy outputs compared here are the engine's
own, with the same fields given explicitly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_thread import ServerThread

from ossa import LLM, SamplingParams
from ossa.config import EngineArgs

# A model's file as the Hub ships them: sampling fields beside ones that are not (skipped).
GENERATION_CONFIG = {
    "bos_token_id": 1,
    "eos_token_id": [2],
    "do_sample": True,
    "temperature": 0.0,
    "top_k": 0,
    "top_p": 0.9,
    "repetition_penalty": 1.0,
    "max_new_tokens": 5,
    "transformers_version": "4.45.0",
}
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def gen_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("genconfig")
    (d / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG))
    return str(d)


@pytest.fixture(scope="module")
def llm(default_model_path: str, gen_dir: str) -> LLM:
    return LLM(default_model_path, generation_config=gen_dir, kv_cache_memory_bytes=32 << 20)


def test_the_file_sets_the_default_sampling_params(llm: LLM) -> None:
    sp = llm.get_default_sampling_params()
    assert (sp.temperature, sp.top_p, sp.top_k, sp.repetition_penalty, sp.max_tokens) == (
        0.0,
        0.9,
        -1,
        1.0,
        5,
    )
    out = llm.generate(PROMPT, use_tqdm=False)[0].outputs[0]
    explicit = llm.generate(PROMPT, SamplingParams(temperature=0.0, top_p=0.9, max_tokens=5), use_tqdm=False)
    assert len(out.token_ids) == 5 and out.token_ids == explicit[0].outputs[0].token_ids
    # Params given by the caller are used as given.
    assert (
        len(llm.generate(PROMPT, SamplingParams(max_tokens=2), use_tqdm=False)[0].outputs[0].token_ids) == 2
    )


def test_vllm_and_overrides(default_model_path: str, gen_dir: str) -> None:
    plain = LLM(default_model_path, generation_config="vllm", kv_cache_memory_bytes=16 << 20)
    assert plain.config.sampling_defaults == {}
    assert plain.get_default_sampling_params().max_tokens == SamplingParams().max_tokens
    over = LLM(
        default_model_path,
        generation_config=gen_dir,
        override_generation_config='{"max_new_tokens": 3, "temperature": 0.5}',
        kv_cache_memory_bytes=16 << 20,
    )
    sp = over.get_default_sampling_params()
    assert (sp.max_tokens, sp.temperature, sp.top_p) == (3, 0.5, 0.9)


def test_auto_reads_the_model_folder(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG))
    args = EngineArgs(model=str(tmp_path))
    assert args.sampling_defaults(str(tmp_path)) == {
        "temperature": 0.0,
        "top_k": -1,
        "top_p": 0.9,
        "repetition_penalty": 1.0,
        "max_tokens": 5,
    }
    assert EngineArgs(generation_config="vllm").sampling_defaults(str(tmp_path)) == {}
    # A GGUF file has no generation config beside it to read.
    assert args.sampling_defaults(str(tmp_path / "model.gguf")) == {}
    # A model file's odd values are skipped, and a file that is no JSON is ignored: neither is fatal.
    odd = '{"temperature": "hot", "top_p": 0.5, "top_k": -7, "repetition_penalty": 0}'
    (tmp_path / "generation_config.json").write_text(odd)
    assert args.sampling_defaults(str(tmp_path)) == {"top_p": 0.5}
    (tmp_path / "generation_config.json").write_text("{not json")
    assert args.sampling_defaults(str(tmp_path)) == {}
    with pytest.raises(ValueError, match="not a readable generation config"):
        EngineArgs(generation_config=str(tmp_path)).sampling_defaults("model.gguf")


def test_auto_reads_a_gguf_files_sampling_keys(tmp_path: Path, default_model_path: str) -> None:
    """A GGUF file's general.sampling.* keys (llama.cpp's converter writes them from the model's
    generation_config.json) are its defaults under "auto"; "vllm" ignores them, overrides win."""
    import gguf

    path = tmp_path / "sampling.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_sampling_temp(0.7)
    w.add_sampling_top_p(0.8)
    w.add_sampling_top_k(20)
    w.add_sampling_min_p(0.05)
    w.add_sampling_penalty_repeat(1.1)
    w.add_sampling_xtc_probability(0.5)  # no SamplingParams field: skipped
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    defaults = EngineArgs().sampling_defaults(str(path))
    assert defaults == pytest.approx(
        {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1}
    )
    assert isinstance(defaults["top_k"], int)
    assert EngineArgs(generation_config="vllm").sampling_defaults(str(path)) == {}
    over = EngineArgs(override_generation_config={"temperature": 0.0}).sampling_defaults(str(path))
    assert over["temperature"] == 0.0 and over["top_k"] == 20
    # The default model's file has none: vLLM's neutral defaults.
    assert EngineArgs().sampling_defaults(default_model_path) == {}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"generation_config": "/no/such/folder"}, "is not 'auto', 'vllm' or a folder"),
        ({"generation_config": ""}, "must be 'auto', 'vllm' or a folder"),
        ({"override_generation_config": {"temprature": 0.5}}, "'temprature' is not a sampling field"),
        ({"override_generation_config": {"top_k": 2.5}}, "top_k must be an integer"),
        ({"override_generation_config": {"temperature": -1}}, "override_generation_config: "),
        ({"override_generation_config": "{not json"}, "is not valid JSON"),
    ],
)
def test_bad_options_are_named(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        EngineArgs(**kwargs).validate()


def test_a_folder_without_the_file_is_an_error(default_model_path: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="has no generation_config.json"):
        LLM(default_model_path, generation_config=str(tmp_path), kv_cache_memory_bytes=16 << 20)


@pytest.fixture(scope="module")
def server(default_model_path: str, gen_dir: str) -> Iterator[ServerThread]:
    from ossa.async_engine import AsyncEngine
    from ossa.server.app import create_app

    engine = AsyncEngine.from_model(
        default_model_path, generation_config=gen_dir, kv_cache_memory_bytes=32 << 20
    )
    with ServerThread(create_app(engine, served_model_name="smol")) as s:
        yield s


def post(server: ServerThread, path: str, **body: Any) -> dict[str, Any]:
    r = httpx.post(server.url + path, json={"model": "smol", **body}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def test_server_requests_take_the_defaults_they_leave_unset(server: ServerThread) -> None:
    msgs = [{"role": "user", "content": "Name a city."}]
    chat = post(server, "/v1/chat/completions", messages=msgs)
    greedy = post(server, "/v1/chat/completions", messages=msgs, temperature=0.0, max_tokens=5)
    assert chat["usage"]["completion_tokens"] == 5
    assert chat["choices"][0]["message"] == greedy["choices"][0]["message"]
    assert (
        post(server, "/v1/chat/completions", messages=msgs, max_tokens=2)["usage"]["completion_tokens"] == 2
    )
    # /v1/completions: the model's max_new_tokens instead of OpenAI's 16 when max_tokens is unset.
    assert post(server, "/v1/completions", prompt=PROMPT)["usage"]["completion_tokens"] == 5
    assert post(server, "/v1/completions", prompt=PROMPT, max_tokens=7)["usage"]["completion_tokens"] <= 7
