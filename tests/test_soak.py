"""A short replay of the reliability probe (issue 18), against one in-process server: 256 concurrent
streams of which about 40% hang up early, a schema fuzz of every documented operation (schemathesis,
a bounded number of examples), and the hand-made bad inputs. No answer may be a 5xx (except the
documented ones: none here), every stream that is read to its end ends with [DONE], and the engine is
idle with an empty KV cache afterwards. ``benchmarks/soak.py`` is the long version.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from server_thread import ServerThread, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

MODEL = "smol"
KEY = "sk-soak"
AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_LEN = 96


@pytest.fixture(scope="module")
def server(default_model_path: str) -> Iterator[ServerThread]:
    from ossa.async_engine import AsyncEngine
    from ossa.server.app import create_app
    from ossa.server.chat_templates import TemplateSandbox

    engine = AsyncEngine.from_model(
        default_model_path,
        kv_cache_memory_bytes=24 << 20,
        max_num_seqs=64,
        max_model_len=MAX_LEN,
        max_num_batched_tokens=512,
    )
    app = create_app(
        engine,
        served_model_name=MODEL,
        api_key=KEY,
        max_body_bytes=1 << 16,
        trust_request_chat_template=True,
        template_sandbox=TemplateSandbox(timeout_s=2.0),
    )
    with ServerThread(app) as s:
        yield s


def test_256_streams_with_disconnects(server: ServerThread) -> None:
    rng = random.Random(18)
    leave_after = [rng.choice([None, None, None, 1, 2]) for _ in range(256)]  # ~40% hang up

    async def one(client: httpx.AsyncClient, i: int) -> tuple[bool, list[str]]:
        chat = i % 2 == 1
        body: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 8,
            "temperature": 0.7,
            "seed": i,
            "stream": True,
        }
        if chat:
            body["messages"] = [{"role": "user", "content": f"Tell me about the number {i}."}]
        else:
            body["prompt"] = f"Item {i}: the"
        path = "/v1/chat/completions" if chat else "/v1/completions"
        events: list[str] = []
        async with client.stream("POST", server.url + path, json=body, headers=AUTH) as r:
            assert r.status_code == 200, await r.aread()
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    if leave_after[i] is not None and len(events) >= leave_after[i]:
                        return False, events  # hang up mid-stream
        return True, events

    async def run() -> list[tuple[bool, list[str]]]:
        limits = httpx.Limits(max_connections=300)
        async with httpx.AsyncClient(timeout=300, limits=limits) as client:
            return await asyncio.gather(*[one(client, i) for i in range(256)])

    results = asyncio.run(run())
    finished = [events for read_all, events in results if read_all]
    assert len(finished) >= 128
    for events in finished:
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert all("error" not in c for c in chunks), chunks
        assert chunks[-1]["choices"][0]["finish_reason"] in ("length", "stop")
    m = wait_idle(server)
    assert m["ossa:kv_cache_usage_perc"] == 0.0


def test_schema_fuzz(server: ServerThread) -> None:
    """schemathesis, from the served OpenAPI schema: every operation, positive and negative examples."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error

    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    failures: list[str] = []
    n_cases = 0

    def fuzz(operation: Any) -> None:
        @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        @given(case=operation.as_strategy())
        def check(case: Any) -> None:
            nonlocal n_cases
            n_cases += 1
            case.headers = {**(case.headers or {}), **AUTH}
            response = case.call(base_url=server.url, timeout=120)
            try:
                case.validate_response(response, checks=[not_a_server_error])
            except Exception as e:  # collected: one report for all operations
                failures.append(f"{operation.label}: {e}")

        check()

    for result in schema.get_all_operations():
        fuzz(result.ok())
    assert n_cases >= 50
    assert not failures, "\n\n".join(failures[:5])
    wait_idle(server)


BAD = [
    # (path, raw JSON body): what the probe sent by hand
    ("/v1/completions", '{"model": "\\ud800", "prompt": "x"}'),
    ("/v1/completions", '{"prompt": "x", "stop": ["\\ud800"]}'),
    ("/v1/completions", '{"prompt": "a\\udfffb"}'),
    ("/v1/completions", '{"prompt": "x", "top_k": 1180591620717411303424}'),
    ("/v1/completions", '{"prompt": "x", "priority": 1180591620717411303424}'),
    ("/v1/completions", '{"prompt": "x", "min_tokens": 1180591620717411303424}'),
    ("/v1/completions", '{"prompt": "x", "seed": 1180591620717411303424}'),
    ("/v1/completions", '{"prompt": "x", "max_tokens": 1180591620717411303424}'),
    ("/v1/completions", '{"prompt": "x", "max_tokens": 1000}'),
    ("/v1/completions", '{"prompt": "x", "temperature": NaN}'),
    ("/v1/completions", '{"prompt": "x", "temperature": Infinity}'),
    ("/v1/completions", '{"prompt": "x", "top_p": -Infinity}'),
    ("/v1/completions", '{"prompt": "x", "logit_bias": {"abc": 1}}'),
    ("/v1/completions", '{"prompt": "x", "logit_bias": {"1180591620717411303424": 1}}'),
    ("/v1/completions", '{"prompt": "x", "stop_token_ids": [1180591620717411303424]}'),
    ("/v1/completions", '{"prompt": "x", "n": 1000}'),
    ("/v1/completions", '{"prompt": [[]]}'),
    ("/v1/completions", '{"prompt": []}'),
    ("/v1/completions", '{"prompt": [-1]}'),
    ("/v1/completions", '{"prompt": "x", "logprobs": 99}'),
    ("/v1/completions", '{"prompt": "x", "stream_options": "yes"}'),
    ("/v1/completions", '{"prompt": "x", "suffix": "y"}'),
    ("/v1/completions", "[1, 2, 3]"),
    ("/v1/completions", "null"),
    ("/v1/completions", '{"prompt": "x"'),
    ("/v1/chat/completions", '{"messages": []}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "\\ud800"}]}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], '
     '"chat_template": "{{ x.y.z }}"}'),
    ("/v1/chat/completions", '{"messages": [{"role": "u", "content": "hi"}], '
     '"chat_template": "{{ raise_exception(\'\\ud800\') }}"}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], '
     '"chat_template": "{% for i in range(99999) %}{% for j in range(99999) %}'
     '{% endfor %}{% endfor %}"}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], '
     '"chat_template": "{{ \'x\' * 500000000 }}"}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], '
     '"chat_template_kwargs": {"messages": 1}}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], '
     '"max_completion_tokens": 100000}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 3}'),
    ("/tokenize", '{"prompt": "\\ud800"}'),
    ("/tokenize", '{"prompt": "x", "messages": []}'),
    ("/detokenize", '{"tokens": [1180591620717411303424]}'),
    ("/detokenize", '{"tokens": [-5]}'),
]  # fmt: skip


@pytest.mark.parametrize("path,body", BAD, ids=[f"{i}" for i in range(len(BAD))])
def test_bad_inputs_are_4xx(server: ServerThread, path: str, body: str) -> None:
    r = httpx.post(
        server.url + path,
        content=body.encode(),
        headers={**AUTH, "content-type": "application/json"},
        timeout=120,
    )
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_other_methods_and_headers(server: ServerThread) -> None:
    r = httpx.get(server.url + "/v1/chat/completions", headers=AUTH)
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    r = httpx.options(
        server.url + "/v1/completions",
        headers={"Origin": "https://x.example", "Access-Control-Request-Method": "POST"},
    )
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    r = httpx.post(server.url + "/v1/completions", content=b"x" * (1 << 17), headers=AUTH)
    assert r.status_code == 413
    assert httpx.get(server.url + "/health").headers["content-type"] == "application/json"
    m = wait_idle(server)
    assert m["ossa:kv_cache_usage_perc"] == 0.0
