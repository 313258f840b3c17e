"""Server edges found by a reliability probe: what a client sends must come back as a well-formed
answer, whatever it is (lone surrogates, integers past C++'s, hostile chat templates), browsers get
CORS, and the schema says what the server really answers.

Two in-process servers on one model: ``server`` (an API key, request templates trusted, a 2-second
template time limit) and ``plain`` (no key, request templates refused: the default).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from server_thread import ServerThread, wait_idle

pytestmark = pytest.mark.timeout(300)

MODEL = "smol"
KEY = "sk-edges"
AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_LEN = 256


def _engine(path: str) -> Any:
    from ossa.async_engine import AsyncEngine

    return AsyncEngine.from_model(
        path,
        kv_cache_memory_bytes=16 << 20,
        max_num_seqs=16,
        max_model_len=MAX_LEN,
        max_num_batched_tokens=256,
    )


@pytest.fixture(scope="module")
def server(default_model_path: str) -> Iterator[ServerThread]:
    from ossa.server.app import create_app
    from ossa.server.chat_templates import TemplateSandbox

    app = create_app(
        _engine(default_model_path),
        served_model_name=MODEL,
        api_key=KEY,
        trust_request_chat_template=True,
        template_sandbox=TemplateSandbox(workers=2, timeout_s=2.0, memory_bytes=1 << 30),
    )
    with ServerThread(app) as s:
        yield s


@pytest.fixture(scope="module")
def plain(default_model_path: str) -> Iterator[ServerThread]:
    from ossa.server.app import create_app

    with ServerThread(create_app(_engine(default_model_path), served_model_name=MODEL)) as s:
        yield s


def post(server: ServerThread, path: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    """Posts raw JSON (ASCII, so lone surrogates travel as \\ud800 escapes, as a client may send them)."""
    headers = {**AUTH, "content-type": "application/json", **(headers or {})}
    return httpx.post(server.url + path, content=json.dumps(body), headers=headers, timeout=120)


def error_of(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return dict(err)


def test_lone_surrogates_come_back_as_json(server: ServerThread) -> None:
    err = error_of(post(server, "/v1/completions", {"model": "\ud800", "prompt": "x"}), 404)
    assert "\ud800" in err["message"] and err["code"] == "model_not_found"
    err = error_of(post(server, "/v1/completions", {"prompt": "x", "stop": ["\ud800"]}), 400)
    assert "stop[0]" in err["message"]
    err = error_of(post(server, "/v1/completions", {"prompt": "a\udfffb", "max_tokens": 1}), 400)
    assert err["param"] == "prompt"
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    bad = {**chat, "chat_template": "{{ raise_exception('no \ud800 here') }}"}
    err = error_of(post(server, "/v1/chat/completions", bad), 400)
    assert "no \ud800 here" in err["message"]
    # and in a stream: the error event itself carries the surrogate
    r = post(server, "/v1/chat/completions", {**bad, "stream": True})
    assert r.status_code == 400


def test_integers_past_cpp_are_named_400s(server: ServerThread) -> None:
    base = {"prompt": "x", "max_tokens": 1}
    for field in ("top_k", "priority", "min_tokens", "seed", "n", "logprobs"):
        err = error_of(post(server, "/v1/completions", {**base, field: 2**70}), 400)
        assert field in err["message"] and "incompatible function arguments" not in err["message"]
    for field, value in (("stop_token_ids", [2**70]), ("logit_bias", {str(2**70): 1})):
        err = error_of(post(server, "/v1/completions", {**base, field: value}), 400)
        assert field in err["message"] and "incompatible" not in err["message"]


def test_max_tokens_past_the_context_is_a_400(server: ServerThread) -> None:
    n_prompt = post(server, "/tokenize", {"prompt": "Hello there"}).json()["count"]
    err = error_of(post(server, "/v1/completions", {"prompt": "Hello there", "max_tokens": MAX_LEN}), 400)
    assert err["param"] == "max_tokens" and f"{n_prompt + MAX_LEN} tokens" in err["message"]
    msgs = [{"role": "user", "content": "Hi"}]
    err = error_of(
        post(server, "/v1/chat/completions", {"messages": msgs, "max_completion_tokens": 10**6}), 400
    )
    assert "maximum context length is 256" in err["message"]
    # exactly filling the context is fine, and so is the default (cut to the room left)
    r = post(
        server, "/v1/completions", {"prompt": "Hello there", "max_tokens": MAX_LEN - n_prompt, "stop": "."}
    )
    assert r.status_code == 200
    assert post(server, "/v1/chat/completions", {"messages": msgs, "max_tokens": 2}).status_code == 200


def test_405_allow_health_and_openapi(server: ServerThread) -> None:
    r = httpx.get(server.url + "/v1/completions", headers=AUTH)
    assert error_of(r, 405)["code"] == "method_not_allowed" and r.headers["allow"] == "POST"
    r = httpx.get(server.url + "/health")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == {"status": "ok"}
    schema = httpx.get(server.url + "/openapi.json").json()
    for path in ("/v1/completions", "/v1/chat/completions", "/tokenize"):
        responses = schema["paths"][path]["post"]["responses"]
        assert "422" not in responses and "400" in responses
    assert "ErrorResponse" in schema["components"]["schemas"]
    # a malformed body really is a 400 with the OpenAI shape the schema promises
    error_of(post(server, "/v1/completions", {"prompt": 5.5}), 400)


def test_cors_preflight_needs_no_key(server: ServerThread) -> None:
    origin = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    r = httpx.options(
        server.url + "/v1/chat/completions",
        headers={**origin, "Access-Control-Request-Headers": "authorization,content-type"},
    )
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "*"
    assert "POST" in r.headers["access-control-allow-methods"]
    assert "authorization" in r.headers["access-control-allow-headers"].lower()
    # the real request still needs the key, and its answers (401 too) carry the CORS header
    r = httpx.post(
        server.url + "/v1/completions", json={"prompt": "x"}, headers={"Origin": "https://app.example"}
    )
    assert r.status_code == 401 and r.headers["access-control-allow-origin"] == "*"
    r = post(server, "/v1/completions", {"prompt": "x", "max_tokens": 1}, headers={"Origin": "https://a.b"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"


def test_request_templates_are_refused_by_default(plain: ServerThread) -> None:
    msgs = [{"role": "user", "content": "hi"}]
    for body in (
        {"messages": msgs, "chat_template": "{{ 'x' }}"},
        {"messages": msgs, "chat_template_kwargs": {"chat_template": "{{ 'x' }}"}},
    ):
        err = error_of(httpx.post(plain.url + "/v1/chat/completions", json=body), 400)
        assert "--trust-request-chat-template" in err["message"] and err["param"] == "chat_template"
    r = httpx.post(plain.url + "/tokenize", json={"messages": msgs, "chat_template": "{{ 'x' }}"})
    assert r.status_code == 400
    # template variables without a template are still fine
    body = {"messages": msgs, "max_tokens": 1, "chat_template_kwargs": {"enable_thinking": False}}
    assert httpx.post(plain.url + "/v1/chat/completions", json=body, timeout=120).status_code == 200


def test_a_trusted_request_template_renders_like_the_model_template(server: ServerThread) -> None:
    from ossa import Tokenizer

    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a fruit."}]
    own = post(server, "/tokenize", {"messages": msgs}).json()["tokens"]
    template = Tokenizer.from_file(server_model_path(server)).chat_template
    assert template
    sent = post(server, "/tokenize", {"messages": msgs, "chat_template": template}).json()["tokens"]
    assert sent == own
    body = {"messages": msgs, "max_tokens": 6, "temperature": 0}
    a = post(server, "/v1/chat/completions", body).json()["choices"][0]["message"]["content"]
    b = post(server, "/v1/chat/completions", {**body, "chat_template": template}).json()
    assert b["choices"][0]["message"]["content"] == a
    custom = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{{ bos_token }}"
    text = post(server, "/tokenize", {"messages": msgs, "chat_template": custom}).json()["tokens"]
    detok = post(server, "/detokenize", {"tokens": text}).json()["prompt"]
    assert detok.startswith("<system>Be brief.<user>Name a fruit.")


def server_model_path(server: ServerThread) -> str:
    return str(server.server.config.app.state.engine.llm.model_path)


HOSTILE = {
    "time": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "repeat": "{% set x = 'x' * 500000000 %}{{ x }}",
    "memory": "{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}{{ ns.s | length }}",
    "output": "{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}",
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "power": "{{ 10 ** 100000000 }}",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_templates_fail_alone(server: ServerThread, kind: str) -> None:
    """A hostile template is a 400; the server answers /health while it renders (the health answer
    comes back before the template's), and keeps generating afterwards."""
    body = {"messages": [{"role": "user", "content": "hi"}], "chat_template": HOSTILE[kind], "max_tokens": 1}
    result: dict[str, Any] = {}

    def send() -> None:
        result["r"] = post(server, "/v1/chat/completions", body)

    t = threading.Thread(target=send)
    t.start()
    threading.Event().wait(0.3)  # let the render start (not a timing assertion: see health_first)
    health = httpx.get(server.url + "/health", timeout=120)
    health_first = "r" not in result
    t.join()
    assert health.status_code == 200
    err = error_of(result["r"], 400)
    assert err["param"] == "chat_template" and "cannot apply the chat template" in err["message"]
    if kind == "time":
        assert "longer than 2 s" in err["message"] and health_first
    if kind == "memory":  # on a busy machine the time limit may come first (see the test below)
        assert any(w in err["message"] for w in ("memory", "resources", "longer than"))
    ok = post(server, "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
    assert ok.status_code == 200


def test_template_worker_memory_limit() -> None:
    """Without a time limit in the way, the address-space limit ends the doubling template."""
    from ossa.server.chat_templates import TemplateSandbox
    from ossa.server.serving import APIError

    async def run() -> str:
        sandbox = TemplateSandbox(workers=1, timeout_s=300, memory_bytes=768 << 20)
        try:
            await sandbox.render(HOSTILE["memory"], [], True, {})
        except APIError as e:
            return e.message
        finally:
            await sandbox.close()
        return "rendered"

    message = asyncio.run(run())
    assert "memory" in message or "resources" in message, message


def test_template_caches_are_bounded() -> None:
    from ossa.chat_template import TemplateCache, render
    from ossa.tokenizer import _TEMPLATES

    cache = TemplateCache(limited=True)
    for i in range(200):
        assert render(cache, f"{{{{ 'n{i}' }}}}" + " " * 10_000, [], True, {}).startswith(f"n{i}")
    assert len(cache) <= 16
    assert len(_TEMPLATES) <= 16


def test_client_aborts_are_counted(server: ServerThread) -> None:
    def aborts() -> float:
        text = httpx.get(server.url + "/metrics").text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("ossa:request_success_total{") and 'finished_reason="abort"' in line
        )

    before = aborts()
    body = {"prompt": "Tell me a long story.", "max_tokens": 200, "ignore_eos": True, "stream": True}
    for _ in range(2):
        with httpx.stream("POST", server.url + "/v1/completions", json=body, headers=AUTH, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    break
    wait_idle(server)
    deadline_polls = 200
    while aborts() < before + 2 and deadline_polls:
        deadline_polls -= 1
        threading.Event().wait(0.05)
    assert aborts() == before + 2


def test_chat_prompt_logprobs_are_the_completions_ones(server: ServerThread) -> None:
    msgs = [{"role": "user", "content": "Name a city."}]
    ids = post(server, "/tokenize", {"messages": msgs}).json()["tokens"]
    chat = post(
        server, "/v1/chat/completions", {"messages": msgs, "max_tokens": 1, "prompt_logprobs": 2}
    ).json()
    plain = post(server, "/v1/completions", {"prompt": ids, "max_tokens": 1, "prompt_logprobs": 2}).json()
    assert chat["prompt_logprobs"] == plain["choices"][0]["prompt_logprobs"]
    assert len(chat["prompt_logprobs"]) == len(ids) and chat["prompt_logprobs"][0] is None
    streamed = {"messages": msgs, "max_tokens": 1, "prompt_logprobs": 2, "stream": True}
    assert error_of(post(server, "/v1/chat/completions", streamed), 400)["param"] == "prompt_logprobs"


def test_bad_words_and_allowed_token_ids_are_honoured(server: ServerThread) -> None:
    base = {"prompt": "1, 2, 3, 4,", "max_tokens": 2, "temperature": 0}
    plain = post(server, "/v1/completions", base).json()["choices"][0]["text"]
    assert plain.startswith(" 5")  # what the ban below has to change
    banned = post(server, "/v1/completions", {**base, "bad_words": ["5"]}).json()["choices"][0]["text"]
    assert "5" not in banned
    err = error_of(post(server, "/v1/completions", {**base, "bad_words": [""]}), 400)
    assert "bad_words" in err["message"]
    body = {**base, "allowed_token_ids": [28, 29]}  # the default model's "," and "-"
    chat = post(server, "/v1/completions", body).json()["choices"][0]["text"]
    assert set(chat) <= {",", "-"}


def test_fields_the_server_cannot_honour_are_400s_not_ignored(server: ServerThread) -> None:
    base = {"prompt": "1, 2, 3, 4,", "max_tokens": 2, "temperature": 0}
    opts = {"include_usage": True, "continuous_usage_stats": True}
    err = error_of(post(server, "/v1/completions", {**base, "stream": True, "stream_options": opts}), 400)
    assert err["param"] == "stream_options" and "continuous_usage_stats" in err["message"]
    msgs = [{"role": "user", "content": "Hi"}]
    chat = {"messages": msgs, "max_tokens": 2, "stream": True, "stream_options": opts}
    assert error_of(post(server, "/v1/chat/completions", chat), 400)["param"] == "stream_options"
    # the values that ask for nothing are fine
    ok = {**base, "bad_words": [], "stream": True, "stream_options": {"include_usage": True}}
    assert post(server, "/v1/completions", ok).status_code == 200
