"""ossa on Ray Serve, on a local three-node cluster: two replicas (one per node, one kernel thread
each) answer the official openai client (streaming, concurrent) with the texts a single in-process
engine gives; a killed replica fails only its own requests and is replaced; prefix-affinity routing
keeps a shared system prompt on one replica, whose prefix cache then serves it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import socket
import time
from typing import Any

import pytest

ENGINE = {"kv_cache_memory_bytes": 64 << 20, "max_model_len": 1024}
NAME = "smollm2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def serve_url(ray_cluster: Any) -> Any:
    from ray import serve

    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield f"http://127.0.0.1:{port}"
    serve.delete("ossa")


def _deploy(prefix_routing: bool, num_replicas: int = 2, fresh: bool = True) -> None:
    from ray import serve

    from ossa.ray.serve import build_app

    if fresh:
        serve.delete("ossa")  # each test deploys its own; the cluster has CPUs for two replicas at a time
    app = build_app(
        num_replicas=num_replicas,
        num_threads=1,
        served_model_name=NAME,
        prefix_routing=prefix_routing,
        **ENGINE,
    )
    serve.run(app, name="ossa")


def _replicas() -> dict[str, tuple[int, str]]:
    """Live OssaReplica actors: replica id -> (pid, node id), asked of each actor itself."""
    import ray

    out = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if "#OssaReplica#" not in entry["name"]:
            continue
        try:
            actor = ray.get_actor(entry["name"], namespace=entry["namespace"])
            where = actor.__ray_call__.remote(
                lambda self: (os.getpid(), ray.get_runtime_context().get_node_id())
            )
            out[entry["name"].rsplit("#", 1)[-1]] = ray.get(where, timeout=30)
        except (ValueError, ray.exceptions.RayError):
            continue  # gone (or going) meanwhile
    return out


@pytest.fixture(scope="module")
def solo() -> Any:
    """The reference: one engine in this process."""
    from ossa import LLM

    return LLM(num_threads=1, **ENGINE)


@pytest.mark.slow
def test_two_replicas_answer_the_openai_client(serve_url: str, solo: Any) -> None:
    import httpx
    import openai

    from ossa import SamplingParams

    _deploy(prefix_routing=False)
    replicas = _replicas()
    assert len(replicas) == 2 and len({node for _, node in replicas.values()}) == 2, replicas

    prompts = [f"Question {i}: what is {i} plus {i + 1}? Answer:" for i in range(8)]
    chats = [[{"role": "user", "content": f"Name a fruit that starts with {c}."}] for c in "ABCDEFGH"]

    async def run() -> tuple[list[str], list[str]]:
        client = openai.AsyncOpenAI(base_url=serve_url + "/v1", api_key="unused", max_retries=0, timeout=300)

        async def complete(i: int) -> str:
            stream = await client.completions.create(
                model=NAME, prompt=prompts[i], max_tokens=16, temperature=0.8, seed=i, stream=True
            )
            return "".join([c.choices[0].text async for c in stream])

        async def chat(i: int) -> str:
            stream = await client.chat.completions.create(
                model=NAME, messages=chats[i], max_tokens=16, temperature=0.8, seed=100 + i, stream=True
            )
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

        try:
            return await asyncio.gather(
                asyncio.gather(*[complete(i) for i in range(8)]), asyncio.gather(*[chat(i) for i in range(8)])
            )
        finally:
            await client.close()

    got_completions, got_chats = asyncio.run(run())
    want = solo.generate(
        prompts, [SamplingParams(max_tokens=16, temperature=0.8, seed=i) for i in range(8)], use_tqdm=False
    )
    assert got_completions == [o.outputs[0].text for o in want]
    generated = sum(len(o.outputs[0].token_ids) for o in want)
    want = solo.chat(
        chats,
        [SamplingParams(max_tokens=16, temperature=0.8, seed=100 + i) for i in range(8)],
        use_tqdm=False,
    )
    assert got_chats == [o.outputs[0].text for o in want]
    generated += sum(len(o.outputs[0].token_ids) for o in want)

    # Not streamed, the same app's answers and errors; every response names its replica.
    with openai.OpenAI(base_url=serve_url + "/v1", api_key="unused", max_retries=0) as client:
        r = client.completions.create(model=NAME, prompt=prompts[0], max_tokens=16, temperature=0.8, seed=0)
    assert r.choices[0].text == got_completions[0]
    bad = httpx.post(serve_url + "/v1/completions", json={"model": NAME, "prompt": "x", "max_tokens": 0})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "max_tokens"
    seen = {httpx.get(serve_url + "/health").headers["x-ossa-replica"] for _ in range(16)}
    assert seen <= set(replicas)
    generated += r.usage.completion_tokens
    # /metrics is the answering replica's own: the replicas' token counters add up to what was generated.
    counted: dict[str, float] = {}
    for _ in range(64):
        m = httpx.get(serve_url + "/metrics")
        tokens = [line for line in m.text.splitlines() if line.startswith("ossa:generation_tokens_total")]
        counted[m.headers["x-ossa-replica"]] = float(tokens[0].split()[-1])
        if len(counted) == 2:
            break
    assert set(counted) == set(replicas) and sum(counted.values()) == generated, (counted, generated)


async def _stream(client: Any, url: str, i: int, started: asyncio.Event, replica_of: dict[int, str]) -> str:
    """A streamed completion through httpx (its replica noted in replica_of); raises if it breaks."""
    import json

    body = {"model": NAME, "prompt": f"Story {i}: once upon a time", "max_tokens": 48, "temperature": 0.8}
    async with client.stream("POST", url + "/v1/completions", json={**body, "seed": i, "stream": True}) as r:
        assert r.status_code == 200
        replica_of[i] = r.headers["x-ossa-replica"]
        text, done = "", False
        async for line in r.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                text += json.loads(line[6:])["choices"][0]["text"]
                started.set()
        assert done, "the stream ended without [DONE]"
        return text


@pytest.mark.slow
def test_killed_replica_fails_only_its_requests_and_is_replaced(serve_url: str, solo: Any) -> None:
    import httpx

    from ossa import SamplingParams

    _deploy(prefix_routing=False)
    before = _replicas()
    n = 12

    replica_of: dict[int, str] = {}

    async def run() -> list[Any]:
        async with httpx.AsyncClient(timeout=300) as client:
            events = [asyncio.Event() for _ in range(n)]
            tasks = [
                asyncio.ensure_future(_stream(client, serve_url, i, events[i], replica_of)) for i in range(n)
            ]
            await asyncio.wait_for(asyncio.gather(*[e.wait() for e in events]), 120)  # all in flight
            victim = sorted(before)[0]
            os.kill(before[victim][0], signal.SIGKILL)
            results = await asyncio.gather(*tasks, return_exceptions=True)
            return [victim, results]

    victim, results = asyncio.run(run())
    want = solo.generate(
        [f"Story {i}: once upon a time" for i in range(n)],
        [SamplingParams(max_tokens=48, temperature=0.8, seed=i) for i in range(n)],
        use_tqdm=False,
    )
    assert set(replica_of.values()) == set(before), replica_of  # both replicas had streams in flight
    for i, result in enumerate(results):
        if replica_of[i] != victim:  # only the killed replica's requests may fail
            assert result == want[i].outputs[0].text, (i, result)

    # Serve replaces the dead replica; the service answers meanwhile and after.
    deadline = time.monotonic() + 180
    answered = 0
    while True:
        try:
            r = httpx.post(
                serve_url + "/v1/completions",
                json={"model": NAME, "prompt": "Hi", "max_tokens": 2},
                timeout=60,
            )
            answered += r.status_code == 200
        except httpx.HTTPError:
            pass
        now = _replicas()
        if len(now) == 2 and victim not in now and answered >= 3:
            break
        assert time.monotonic() < deadline, f"replica not replaced: {now}"
        time.sleep(0.5)


@pytest.mark.slow
def test_prefix_routing_keeps_a_system_prompt_on_one_replica(serve_url: str) -> None:
    import httpx

    _deploy(prefix_routing=True)
    systems = [
        f"You are assistant number {k}. " + "Answer briefly, politely and truthfully. " * 8 for k in range(4)
    ]
    by_group: dict[int, set[str]] = {k: set() for k in range(4)}
    cached, prompt = 0, 0
    for q in range(4):
        for k in range(4):
            messages = [
                {"role": "system", "content": systems[k]},
                {"role": "user", "content": f"Question {q}?"},
            ]
            r = httpx.post(
                serve_url + "/v1/chat/completions",
                json={"model": NAME, "messages": messages, "max_tokens": 2, "temperature": 0},
                timeout=120,
            )
            assert r.status_code == 200, r.text
            by_group[k].add(r.headers["x-ossa-replica"])
            usage = r.json()["usage"]
            if q > 0:
                cached += usage["prompt_tokens_details"]["cached_tokens"]
                prompt += usage["prompt_tokens"]
    # Each system prompt stays on one replica, and the groups spread over both.
    assert all(len(v) == 1 for v in by_group.values()), by_group
    assert len(set().union(*by_group.values())) == 2, by_group
    # After its first request, a group finds its system prompt (about 100 tokens of ~115) cached.
    assert cached / prompt > 0.7, (cached, prompt)


@pytest.mark.slow
def test_scale_down_drains_in_flight_streams(serve_url: str, solo: Any) -> None:
    import threading

    import httpx

    from ossa import SamplingParams

    _deploy(prefix_routing=False)
    n = 8
    replica_of: dict[int, str] = {}

    async def run() -> list[str]:
        async with httpx.AsyncClient(timeout=300) as client:
            events = [asyncio.Event() for _ in range(n)]
            tasks = [
                asyncio.ensure_future(_stream(client, serve_url, i, events[i], replica_of)) for i in range(n)
            ]
            await asyncio.wait_for(asyncio.gather(*[e.wait() for e in events]), 120)
            # Scale to one replica while every stream is in flight (an in-place update).
            scale = threading.Thread(target=_deploy, args=(False, 1, False))
            scale.start()
            try:
                return await asyncio.gather(*tasks)
            finally:
                await asyncio.to_thread(scale.join)

    texts = asyncio.run(run())
    assert len(set(replica_of.values())) == 2, replica_of  # both replicas had streams to drain
    want = solo.generate(
        [f"Story {i}: once upon a time" for i in range(n)],
        [SamplingParams(max_tokens=48, temperature=0.8, seed=i) for i in range(n)],
        use_tqdm=False,
    )
    assert texts == [o.outputs[0].text for o in want]
    assert len(_replicas()) == 1


@pytest.mark.slow
def test_serve_run_from_the_shell(ray_cluster: Any, serve_url: str) -> None:
    """`serve run ossa.ray.serve:build_app key=value ...` deploys on a running cluster (Serve hands the
    pairs to build_app as strings, converted through ServeArgs)."""
    import subprocess
    import sys
    from pathlib import Path

    import httpx
    from ray import serve

    serve.delete("ossa")  # CPUs for the shell's replica
    script = Path(sys.executable).with_name("serve")  # the `serve` command of this environment
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "ray.serve.scripts"]
    cmd = [*cli, "run", "--non-blocking", "--address", ray_cluster.address]
    cmd += ["--name", "ossa-shell", "--route-prefix", "/shell", "ossa.ray.serve:build_app"]
    cmd += ["num_replicas=1", "num_threads=1", "served_model_name=shell", "max_num_seqs=4"]
    cmd += [f"{k}={v}" for k, v in ENGINE.items()]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert httpx.get(serve_url + "/shell/v1/models").json()["data"][0]["id"] == "shell"
        out = httpx.post(
            serve_url + "/shell/v1/completions", json={"prompt": "Hello", "max_tokens": 4}, timeout=120
        ).json()
        assert out["usage"]["completion_tokens"] == 4
        assert serve.status().applications["ossa-shell"].deployments["OssaReplica"].status == "HEALTHY"
    finally:
        serve.delete("ossa-shell")


@pytest.mark.slow
def test_ossa_serve_ray_from_the_cli(ray_cluster: Any, serve_url: str, solo: Any) -> None:
    """`ossa serve MODEL --ray` on a running cluster (RAY_ADDRESS): it deploys, answers a chat
    completion and a stream with the single engine's texts, logs its speculative config, and on SIGINT
    takes down its application only (the cluster's Serve, which it did not start, keeps running)."""
    import subprocess
    import sys

    import openai
    from ray import serve

    from ossa import SamplingParams

    serve.delete("ossa")  # the command deploys its own "ossa" (and needs the CPUs)
    cmd = [sys.executable, "-m", "ossa.cli", "serve", solo.model_path, "--ray", "--num-replicas", "1"]
    cmd += ["--num-threads", "1", "--served-model-name", "cli", "--port", "1"]  # (Serve's port wins)
    cmd += ["--kv-cache-memory-bytes", str(ENGINE["kv_cache_memory_bytes"]), "--max-model-len", "1024"]
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.address, "PYTHONUNBUFFERED": "1"}
    # (SIGINT at its default in the command, as in a terminal: a test run started in the background by a
    # non-interactive shell inherits it ignored, and the command would never see the Ctrl-C sent below)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("ossa: serving on "):
                break
        assert lines and lines[-1].startswith(f"ossa: serving on {serve_url} "), "".join(lines[-30:])
        log = "".join(lines)
        assert "speculative_config" not in log and "1 replica(s) x 1 thread(s)" in log, log
        assert "--host/--port are not applied" in log

        client = openai.OpenAI(base_url=serve_url + "/v1", api_key="unused", max_retries=0, timeout=120)
        messages = [{"role": "user", "content": "Name a colour."}]
        want = solo.chat([messages], SamplingParams(max_tokens=12, temperature=0), use_tqdm=False)
        r = client.chat.completions.create(model="cli", messages=messages, max_tokens=12, temperature=0)
        assert r.choices[0].message.content == want[0].outputs[0].text
        greedy = SamplingParams(max_tokens=8, temperature=0)
        want_text = solo.generate(["1, 2, 3,"], greedy, use_tqdm=False)[0].outputs[0].text
        stream = client.completions.create(
            model="cli", prompt="1, 2, 3,", max_tokens=8, temperature=0, stream=True
        )
        assert "".join(c.choices[0].text for c in stream) == want_text
        client.close()
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, rest[-3000:]
        # Its application is gone and Serve's controller still answers (serve.status() raises when
        # Serve was shut down).
        assert "ossa" not in serve.status().applications
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_routing_text_reads_chat_and_responses_bodies_alike() -> None:
    from ossa.ray.serve import _routing_text

    chat = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}
    responses = {"instructions": "Be brief.", "input": "Hi"}
    items = {
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
    }
    text = _routing_text("/v1/chat/completions", json.dumps(chat).encode())
    assert text == "system:Be brief.\nuser:Hi\n"
    assert _routing_text("/v1/responses", json.dumps(responses).encode()) == text
    assert _routing_text("/v1/responses", json.dumps(items).encode()) == text
    assert _routing_text("/v1/completions", b'{"prompt": "abc"}') == "abc"
    assert _routing_text("/v1/models", b"") == "/v1/models"


def test_build_app_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    from ossa.cli import main
    from ossa.config import EngineArgs
    from ossa.ray.serve import _ENGINE_FIELDS, ServeArgs, build_app

    # `serve run ... key=value` hands over strings; they are converted and checked.
    args = ServeArgs.model_validate(
        {"num_replicas": "2", "autoscaling_config": None, "prefix_routing": "true"}
    )
    assert args.num_replicas == 2 and args.prefix_routing is True
    auto = ServeArgs.model_validate({"autoscaling_config": '{"min_replicas": 1, "max_replicas": 3}'})
    assert auto.autoscaling_config == {"min_replicas": 1, "max_replicas": 3}
    # The engine options are EngineArgs' own (all but model / num_threads / backend), given flat;
    # those left unset are not passed on (the replica's AsyncEngine gives a server's defaults).
    engine = ServeArgs.model_validate({"max_num_seqs": "8", "enable_prefix_caching": "false", "amx": "0"})
    kwargs = engine.engine_kwargs()
    assert (kwargs["max_num_seqs"], kwargs["enable_prefix_caching"], kwargs["amx"]) == (8, False, False)
    assert "max_num_batched_tokens" not in kwargs and "model" not in kwargs and "backend" not in kwargs
    names = {f.name for f in dataclasses.fields(EngineArgs)} - {"model", "num_threads", "backend"}
    assert set(_ENGINE_FIELDS) == names
    for bad in (
        {"num_replicas": 0},
        {"num_threads": 0},
        {"num_replicas": 2, "autoscaling_config": {}},
        {"x": 1},
        {"max_num_seqs": 0},
        {"dtype": "int3"},
        {"backend": "python"},
        {"engine": {"backend": "python"}},
    ):
        with pytest.raises(ValueError):
            build_app(bad)
    with pytest.raises(ValueError):
        build_app(num_replicas=2, autoscaling_config={"max_replicas": 2})
    assert main(["serve", "--num-replicas", "2"]) == 2
    assert "need --ray" in capsys.readouterr().err


def _batched_run(interval_s: float, app: Any) -> list[dict[str, Any]]:
    """The ASGI messages BatchedStream(app) sends for one HTTP request."""
    from ossa.ray.stream_batching import BatchedStream

    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(BatchedStream(app, interval_s)({"type": "http"}, receive, send))
    return sent


def _start() -> dict[str, Any]:
    return {"type": "http.response.start", "status": 200, "headers": []}


def test_batched_stream_joins_chunks_and_keeps_bytes() -> None:
    chunks = [f"data: {i}\n\n".encode() for i in range(10)]

    async def burst(scope: Any, receive: Any, send: Any) -> None:  # every chunk at once
        await send(_start())
        for c in chunks:
            await send({"type": "http.response.body", "body": c, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    # Within one (long) interval: the first chunk at once, the others with the last message.
    sent = _batched_run(3600.0, burst)
    assert [m["type"] for m in sent] == ["http.response.start"] + ["http.response.body"] * 2
    assert sent[1] == {"type": "http.response.body", "body": chunks[0], "more_body": True}
    assert sent[2] == {"type": "http.response.body", "body": b"".join(chunks[1:]), "more_body": False}
    # Interval 0 passes every message through as it is.
    assert len(_batched_run(0.0, burst)) == 12
    # Not streamed: untouched.
    whole = {"type": "http.response.body", "body": b"{}", "more_body": False}

    async def plain(scope: Any, receive: Any, send: Any) -> None:
        await send(_start())
        await send(whole)

    assert _batched_run(3600.0, plain)[1] == whole


def test_batched_stream_flushes_held_chunks_after_the_interval() -> None:
    """A chunk held back goes out when its interval ends, without waiting for the next one (the app
    here waits until it has been sent; a stream that stalled would hang, not pass)."""
    got: list[bytes] = []
    flushed = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(_start())
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await send({"type": "http.response.body", "body": b"b", "more_body": True})
        await send({"type": "http.response.body", "body": b"c", "more_body": True})
        await asyncio.wait_for(flushed.wait(), 60)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    from ossa.ray.stream_batching import BatchedStream

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            got.append(message["body"])
            if b"".join(got) == b"abc":
                flushed.set()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    asyncio.run(BatchedStream(app, 0.05)({"type": "http"}, receive, send))
    assert got[0] == b"a" and got[-1] == b"" and b"".join(got) == b"abc"  # (b"bc" held, unless slow)
