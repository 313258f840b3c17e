"""The OpenAI-compatible server against the official ``openai`` client (and httpx for raw SSE).

One server per module: uvicorn in a background thread on a free loopback port, the default model,
a small KV cache. Outputs are checked against each other (stream == non-stream, concurrent == solo,
seed == seed) and against the engine's own counters in /metrics.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from server_thread import ServerThread, concurrent_streams, metrics, wait_idle

pytestmark = pytest.mark.timeout(300)

MODEL = "smol"


@pytest.fixture(scope="module")
def server(default_model_path: str) -> Iterator[ServerThread]:
    from ossa.async_engine import AsyncEngine
    from ossa.server.app import create_app

    engine = AsyncEngine.from_model(
        default_model_path, kv_cache_memory_bytes=32 << 20, max_num_seqs=64, max_num_batched_tokens=512
    )
    with ServerThread(create_app(engine, served_model_name=MODEL)) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: ServerThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120
    ) as c:  # (closed: no socket left for the GC)
        yield c


def test_models_health_version_tokenize(server: ServerThread, client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    assert httpx.get(server.url + "/health").status_code == 200
    from ossa import __version__

    assert httpx.get(server.url + "/version").json() == {"version": __version__}
    tok = httpx.post(server.url + "/tokenize", json={"prompt": "Hello world"}).json()
    assert tok["count"] == len(tok["tokens"]) > 0
    detok = httpx.post(server.url + "/detokenize", json={"tokens": tok["tokens"]}).json()
    assert detok["prompt"].endswith("Hello world")


def test_completion_stream_equals_non_stream(server: ServerThread, client: openai.OpenAI) -> None:
    kw: dict[str, Any] = dict(
        model=MODEL, prompt="The capital of France is", max_tokens=12, temperature=0.8, seed=7
    )
    full = client.completions.create(**kw)
    text = full.choices[0].text
    assert text and full.choices[0].finish_reason in ("length", "stop")
    chunks = list(client.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump() == full.usage.model_dump()
    # usage is exact: the prompt's token count as /tokenize sees it, and one count per generated token
    n_prompt = httpx.post(server.url + "/tokenize", json={"prompt": kw["prompt"]}).json()["count"]
    assert full.usage.prompt_tokens == n_prompt
    if full.choices[0].finish_reason == "length":
        assert full.usage.completion_tokens == 12
    assert full.usage.total_tokens == n_prompt + full.usage.completion_tokens
    # the same seed reproduces the text
    assert client.completions.create(**kw).choices[0].text == text


def test_chat_stream_equals_non_stream(client: openai.OpenAI) -> None:
    kw: dict[str, Any] = dict(
        model=MODEL,
        messages=[{"role": "user", "content": "Name a color."}],
        max_tokens=10,
        temperature=0.7,
        seed=3,
    )
    full = client.chat.completions.create(**kw)
    msg = full.choices[0].message
    assert msg.role == "assistant" and msg.content
    chunks = list(client.chat.completions.create(**kw, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == msg.content
    assert chunks[-1].choices[0].finish_reason == full.choices[0].finish_reason
    assert full.usage.completion_tokens <= 10
    # max_completion_tokens is the newer name of max_tokens
    again = client.chat.completions.create(
        model=MODEL, messages=kw["messages"], max_completion_tokens=10, temperature=0.7, seed=3
    )
    assert again.choices[0].message.content == msg.content


def test_n_and_multiple_prompts(client: openai.OpenAI) -> None:
    r = client.completions.create(
        model=MODEL, prompt=["Once upon a time", "1, 2, 3,"], n=3, max_tokens=5, temperature=1.0, seed=11
    )
    assert [c.index for c in r.choices] == list(range(6))
    assert all(c.text for c in r.choices)
    if all(c.finish_reason == "length" for c in r.choices):
        assert r.usage.completion_tokens == 30
    assert r.usage.completion_tokens <= 30
    # streamed choices are told apart by index and match the non-streamed ones
    stream = list(
        client.completions.create(
            model=MODEL, prompt="Once upon a time", n=3, max_tokens=5, temperature=1.0, seed=11, stream=True
        )
    )
    texts = [
        "".join(c.choices[0].text for c in stream if c.choices and c.choices[0].index == i) for i in range(3)
    ]
    assert texts == [c.text for c in r.choices[:3]]
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], n=2, max_tokens=4, temperature=1.0, seed=5
    )
    assert [c.index for c in chat.choices] == [0, 1]


def test_logprobs(client: openai.OpenAI) -> None:
    r = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=6, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert lp is not None and len(lp.tokens) == len(lp.token_logprobs) == r.usage.completion_tokens
    assert "".join(lp.tokens) == r.choices[0].text
    for tok, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert value <= 0 and len(top) >= 1
        # greedy: the chosen token is the most likely one
        assert top[tok] == pytest.approx(max(top.values()))
        assert value == pytest.approx(top[tok])
    assert lp.text_offset[0] == 0
    c = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=4,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    content = c.choices[0].logprobs.content
    assert "".join(t.token for t in content) == c.choices[0].message.content
    assert all(
        len(t.top_logprobs) == 2 and t.top_logprobs[0].logprob == pytest.approx(t.logprob) for t in content
    )


def test_stop_strings(client: openai.OpenAI) -> None:
    kw: dict[str, Any] = dict(model=MODEL, prompt="Count: one, two, three,", max_tokens=12, temperature=0)
    base = client.completions.create(**kw).choices[0].text
    assert len(base) > 4
    stop = base[len(base) // 2 : len(base) // 2 + 2]
    cut = base[: base.index(stop)]
    r = client.completions.create(**kw, stop=[stop])
    assert r.choices[0].text == cut and r.choices[0].finish_reason == "stop"
    streamed = client.completions.create(**kw, stop=stop, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == cut


def test_streamed_text_offsets_survive_held_back_text(client: openai.OpenAI) -> None:
    """A stop string that the first token starts (but that never completes) holds that token's text
    back for a chunk; the streamed text_offset must still be the whole response's (each token's
    offset is the length of the token strings before it), and the text the same."""
    kw: dict[str, Any] = dict(
        model=MODEL, prompt="Count: one, two, three,", max_tokens=8, temperature=0, logprobs=1
    )
    base = client.completions.create(**kw).choices[0]
    assert base.logprobs is not None and base.logprobs.tokens[0]
    stop = base.logprobs.tokens[0] + "\u2603\u2603"  # never generated: only holds the first token back
    full = client.completions.create(**kw, stop=[stop]).choices[0]
    assert full.text == base.text and full.logprobs is not None
    offsets = [sum(map(len, full.logprobs.tokens[:i])) for i in range(len(full.logprobs.tokens))]
    assert full.logprobs.text_offset == offsets
    chunks = list(client.completions.create(**kw, stop=[stop], stream=True))
    assert "".join(c.choices[0].text for c in chunks) == full.text
    assert chunks[0].choices[0].text == "" and chunks[0].choices[0].logprobs is not None  # held back
    streamed = [v for c in chunks if c.choices[0].logprobs for v in c.choices[0].logprobs.text_offset]
    assert streamed == offsets


def test_raw_sse_format(server: ServerThread) -> None:
    body = {
        "model": MODEL,
        "prompt": "Hi",
        "max_tokens": 3,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    events = [e for e in raw.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    payloads = [json.loads(e[6:]) for e in events[:-1]]
    assert all(p["object"] == "text_completion" and "usage" in p for p in payloads)
    assert payloads[-1]["usage"]["completion_tokens"] == 3 and payloads[-1]["choices"] == []


def test_errors_are_openai_shaped(server: ServerThread, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="nope", prompt="x", max_tokens=1)
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="x", max_tokens=1, temperature=-1)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="x", max_tokens=1, top_p=0)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=[10**9], max_tokens=1)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="word " * 2000, max_tokens=1)
    assert "maximum context length" in e.value.message
    r = httpx.get(server.url + "/v1/nothing")
    assert r.status_code == 404 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    r = httpx.post(
        server.url + "/v1/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and "error" in r.json()
    # still serving
    assert client.completions.create(model=MODEL, prompt="ok", max_tokens=1).choices[0].text is not None


def test_64_concurrent_streams_equal_solo_runs(server: ServerThread, client: openai.OpenAI) -> None:
    prompts = [f"Item {i}: the" for i in range(64)]
    kw: dict[str, Any] = dict(model=MODEL, max_tokens=4, temperature=0.9)
    solo = [client.completions.create(prompt=p, seed=i, **kw).choices[0].text for i, p in enumerate(prompts)]
    assert concurrent_streams(server, prompts, **kw) == solo
    m = wait_idle(server)
    assert m["ossa:kv_cache_usage_perc"] == 0.0
    assert m["ossa:time_to_first_token_seconds_count"] >= 128


def test_disconnect_aborts_and_frees_blocks(server: ServerThread) -> None:
    before = metrics(server)["ossa:generation_tokens_total"]
    body = {
        "model": MODEL,
        "prompt": "Tell me a long story.",
        "max_tokens": 1000,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    for _ in range(3):
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    break  # one chunk, then drop the connection
    # a non-streaming client that gives up
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/completions", json={**body, "stream": False}, timeout=1.0)
    m = wait_idle(server)
    assert m["ossa:kv_cache_usage_perc"] == 0.0
    # aborted, not run to the end: 4 x 1000 tokens were asked for
    assert m["ossa:generation_tokens_total"] - before < 2000
    assert server.thread.is_alive()


def test_logit_bias_and_echo(server: ServerThread, client: openai.OpenAI) -> None:
    tok = httpx.post(server.url + "/tokenize", json={"prompt": " yes", "add_special_tokens": False}).json()
    assert tok["count"] == 1
    forced = tok["tokens"][0]
    r = client.completions.create(
        model=MODEL, prompt="Say no:", max_tokens=3, temperature=0, logit_bias={str(forced): 100}
    )
    assert r.choices[0].text == " yes" * 3
    r = client.completions.create(model=MODEL, prompt="Echo me", max_tokens=2, temperature=0, echo=True)
    assert r.choices[0].text.startswith("Echo me") and len(r.choices[0].text) > len("Echo me")
    streamed = client.completions.create(
        model=MODEL, prompt="Echo me", max_tokens=2, temperature=0, echo=True, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == r.choices[0].text


def test_echo_with_logprobs_scores_the_prompt(
    server: ServerThread, client: openai.OpenAI, default_model_path: str
) -> None:
    # What lm-evaluation-harness sends to score a prompt: echo + logprobs. The prompt's tokens lead
    # the logprobs (the first one without a logprob), then the generated tokens, whose entries equal
    # those of the same request without echo.
    import numpy as np

    import ossa

    prompt = "The capital of France is"
    ids = httpx.post(server.url + "/tokenize", json={"prompt": prompt}).json()["tokens"]
    kw: dict[str, Any] = dict(model=MODEL, prompt=prompt, max_tokens=3, temperature=0, logprobs=2)
    r = client.completions.create(echo=True, **kw)
    plain = client.completions.create(**kw)
    lp = r.choices[0].logprobs
    assert lp is not None and plain.choices[0].logprobs is not None
    n = len(ids)
    assert len(lp.tokens) == n + 3
    assert "".join(lp.tokens[:n]) == prompt
    assert r.choices[0].text == prompt + plain.choices[0].text
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.tokens[n:] == plain.choices[0].logprobs.tokens
    assert lp.token_logprobs[n:] == plain.choices[0].logprobs.token_logprobs
    assert lp.text_offset[n] == len(prompt) and lp.text_offset == sorted(lp.text_offset)
    assert all(len(t) <= 2 for t in lp.top_logprobs[1:])
    # The oracle: log-softmax of the model's own logits over the prompt (f32 K/V there, the server's
    # cache is float16: ~1e-3).
    logits = ossa.load_model(default_model_path).logits(ids).astype(np.float64)
    ref = (
        logits
        - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - logits.max(-1, keepdims=True)
    )
    want = [ref[i - 1, ids[i]] for i in range(1, n)]
    np.testing.assert_allclose(lp.token_logprobs[1:n], want, atol=5e-3)

    # Streaming: the echoed prompt with its logprobs comes first; everything concatenates to the above.
    chunks = list(client.completions.create(echo=True, stream=True, **kw))
    assert "".join(c.choices[0].text for c in chunks) == r.choices[0].text
    s_tokens = [t for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
    s_lps = [v for c in chunks if c.choices[0].logprobs for v in c.choices[0].logprobs.token_logprobs]
    s_offsets = [v for c in chunks if c.choices[0].logprobs for v in c.choices[0].logprobs.text_offset]
    assert s_tokens == lp.tokens and s_lps == lp.token_logprobs and s_offsets == lp.text_offset

    # vLLM's prompt_logprobs field: the same numbers, keyed by token id.
    v = httpx.post(
        server.url + "/v1/completions", json={**kw, "logprobs": None, "prompt_logprobs": 1}
    ).json()["choices"][0]["prompt_logprobs"]
    assert v[0] is None and len(v) == n
    assert [v[i][str(ids[i])]["logprob"] for i in range(1, n)] == lp.token_logprobs[1:n]
    assert all(len(d) <= 2 and min(e["rank"] for e in d.values()) >= 1 for d in v[1:])


def test_usage_reports_prefix_cached_tokens(client: openai.OpenAI) -> None:
    # A prompt of several KV blocks, new to this server: the first request computes it all, a repeat
    # finds its whole blocks in the prefix cache and says so (OpenAI's prompt_tokens_details).
    kw: dict[str, Any] = dict(
        model=MODEL, prompt="A unique preamble for the cache test. " * 12, max_tokens=2, temperature=0
    )
    first = client.completions.create(**kw).usage
    again = client.completions.create(**kw).usage
    chunks = list(client.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    streamed = chunks[-1].usage
    assert first.prompt_tokens_details.cached_tokens == 0
    cached = again.prompt_tokens_details.cached_tokens
    assert 0 < cached < again.prompt_tokens and cached % 16 == 0  # whole blocks of block_size 16
    assert streamed.prompt_tokens_details.cached_tokens == cached
