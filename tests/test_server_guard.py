"""Server edges: API key, body-size limit, schema fuzz (no 5xx), and graceful shutdown of ``ossa serve``.

The in-process server runs with a short context (max_model_len=48) so that every fuzzed request that
happens to be valid finishes in a few tokens.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.timeout(300)

MODEL = "smol"
KEY = "sk-test-key"
MAX_BODY = 4096


def wait_healthy(proc: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    """Waits (up to 120 s) for the child server's /health; fails with its log if it exits first."""
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, log_path.read_text()
        try:
            if httpx.get(url + "/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "server did not come up"
        time.sleep(0.1)


class ServedProcess:
    """`ossa serve` in a child process: the fuzzed requests meet a server whose process state no
    earlier test in this pytest process has touched."""

    def __init__(self, url: str) -> None:
        self.url = url


@pytest.fixture(scope="module")
def server(default_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedProcess]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_path = tmp_path_factory.mktemp("serve") / "serve.log"
    log = open(log_path, "wb")  # noqa: SIM115 (closed below)
    cmd = [sys.executable, "-m", "ossa.cli", "serve", default_model_path, "--port", str(port)]
    cmd += ["--served-model-name", MODEL, "--api-key", KEY, "--max-body-bytes", str(MAX_BODY)]
    cmd += ["--kv-cache-memory-bytes", str(16 << 20), "--max-model-len", "48", "--max-num-seqs", "8"]
    proc = subprocess.Popen(
        cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url, log_path)
        yield ServedProcess(url)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


AUTH = {"Authorization": f"Bearer {KEY}"}


def test_api_key(server: ServedProcess) -> None:
    with openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0) as good:
        assert good.completions.create(model=MODEL, prompt="Hi", max_tokens=2).usage.completion_tokens >= 1
    for key in ["wrong", KEY + "x", KEY[:-1], ""]:
        with (
            openai.OpenAI(base_url=server.url + "/v1", api_key=key or "-", max_retries=0) as bad,
            pytest.raises(openai.AuthenticationError) as e,
        ):
            bad.models.list()
        assert e.value.status_code == 401 and e.value.body["code"] == "invalid_api_key"
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "Hi"})  # no header at all
    assert r.status_code == 401 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert httpx.post(server.url + "/tokenize", json={"prompt": "Hi"}).status_code == 401
    # liveness and metrics stay open for probes and scrapers
    assert httpx.get(server.url + "/health").status_code == 200
    assert httpx.get(server.url + "/metrics").status_code == 200


def test_body_size_limit(server: ServedProcess) -> None:
    big = {"model": MODEL, "prompt": "x" * MAX_BODY, "max_tokens": 1}
    r = httpx.post(server.url + "/v1/completions", json=big, headers=AUTH)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
        data = json.dumps(big).encode()
        for i in range(0, len(data), 1000):
            yield data[i : i + 1000]

    r = httpx.post(
        server.url + "/v1/completions", content=chunks(), headers={**AUTH, "content-type": "application/json"}
    )
    assert r.status_code == 413
    small = {"model": MODEL, "prompt": "x " * 10, "max_tokens": 1}
    assert (
        httpx.post(server.url + "/v1/completions", json=small, headers=AUTH, timeout=120).status_code == 200
    )


def test_prompt_over_context_says_the_limits(server: ServedProcess) -> None:
    r = httpx.post(
        server.url + "/v1/completions", json={"model": MODEL, "prompt": "word " * 60}, headers=AUTH
    )
    assert r.status_code == 400
    msg = r.json()["error"]["message"]
    assert "48" in msg and "maximum context length" in msg


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
_fields = {
    "model": st.sampled_from([MODEL, "other", ""]) | _json,
    "prompt": st.text(max_size=20)
    | st.lists(st.integers(-5, 60000), max_size=5)
    | st.lists(st.text(max_size=5), max_size=3)
    | _json,
    "messages": st.lists(
        st.fixed_dictionaries(
            {
                "role": st.sampled_from(["user", "system", "assistant", "x"]),
                "content": st.text(max_size=10) | _json,
            }
        ),
        max_size=3,
    )
    | _json,
    "max_tokens": st.integers(-3, 6) | _json,
    "max_completion_tokens": st.integers(-3, 6),
    "temperature": st.floats(-1, 3) | _json,
    "top_p": st.floats(-0.5, 1.5),
    "top_k": st.integers(-3, 100),
    "min_p": st.floats(-0.5, 1.5),
    "n": st.integers(-1, 3),
    "stop": st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=3) | _json,
    "seed": st.integers(-(2**65), 2**65),
    "presence_penalty": st.floats(-3, 3),
    "frequency_penalty": st.floats(-3, 3),
    "repetition_penalty": st.floats(-1, 3),
    "logit_bias": st.dictionaries(st.text(max_size=6), st.floats(-200, 200), max_size=3) | _json,
    "logprobs": st.integers(-2, 25) | st.booleans(),
    "top_logprobs": st.integers(-2, 25),
    "echo": st.booleans(),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}) | _json,
    "min_tokens": st.integers(-2, 8),
    "ignore_eos": st.booleans() | _json,
    "stop_token_ids": st.lists(st.integers(-5, 70000), max_size=3) | _json,
    "user": st.text(max_size=5),
}
_bodies = st.fixed_dictionaries({}, optional=_fields) | _json


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(body=_bodies, chat=st.booleans())
def test_fuzz_no_5xx(server: ServedProcess, body: Any, chat: bool) -> None:
    path = "/v1/chat/completions" if chat else "/v1/completions"
    r = httpx.post(
        server.url + path,
        content=json.dumps(body, allow_nan=True),
        headers={**AUTH, "content-type": "application/json"},
        timeout=120,
    )
    assert r.status_code < 500, (r.status_code, r.text)
    if r.status_code != 200:
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    elif isinstance(body, dict) and body.get("stream") is True:
        assert r.text.rstrip().endswith("data: [DONE]") and '"error"' not in r.text


def test_fuzz_left_engine_clean(server: ServedProcess) -> None:
    deadline = time.monotonic() + 60
    while True:
        text = httpx.get(server.url + "/metrics").text
        values = {
            line.split("{")[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("ossa:") and "{" in line
        }
        if values["ossa:num_requests_running"] == 0 and values["ossa:kv_cache_usage_perc"] == 0:
            break
        assert time.monotonic() < deadline, values
        time.sleep(0.05)


def test_serve_cli_graceful_shutdown(default_model_path: str, tmp_path: Any) -> None:
    """`ossa serve` finishes an in-flight stream on SIGTERM, then exits 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 (closed in finally)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ossa.cli",
            "serve",
            default_model_path,
            "--port",
            str(port),
            "--served-model-name",
            MODEL,
            "--kv-cache-memory-bytes",
            str(16 << 20),
            "--max-model-len",
            "64",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url, tmp_path / "serve.log")
        body = {"model": MODEL, "prompt": "Hello", "max_tokens": 4, "ignore_eos": True, "stream": True}
        events = []
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data: ") and not events:
                    proc.send_signal(signal.SIGTERM)  # mid-stream
                if line.startswith("data: "):
                    events.append(line[6:])
        assert events[-1] == "[DONE]"
        finishes = [c["finish_reason"] for e in events[:-1] for c in json.loads(e)["choices"]]
        assert finishes[-1] == "length"
        assert proc.wait(60) == 0, (tmp_path / "serve.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
