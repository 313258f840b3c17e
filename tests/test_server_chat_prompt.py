"""The chat prompt a request shapes: ``add_generation_prompt``, ``continue_final_message``, its own
``chat_template`` (rendered in the sandbox) with ``chat_template_kwargs`` and ``tools``, behaving as
with the server's template, and vLLM's 400 when both generation-prompt flags are set."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from server_thread import ServerThread, wait_idle

MODEL = "smol"
MSGS = [
    {"role": "user", "content": "Name a fruit."},
    {"role": "assistant", "content": "My favourite fruit is the"},
]


@pytest.fixture(scope="module")
def server(default_model_path: str) -> Iterator[ServerThread]:
    from ossa.async_engine import AsyncEngine
    from ossa.server.app import create_app

    engine = AsyncEngine.from_model(default_model_path, kv_cache_memory_bytes=16 << 20, max_num_seqs=8)
    with ServerThread(create_app(engine, served_model_name=MODEL, trust_request_chat_template=True)) as s:
        yield s


@pytest.fixture(scope="module")
def template(default_model_path: str) -> str:
    from ossa import Tokenizer

    t = Tokenizer.from_file(default_model_path).chat_template
    assert t
    return t


def post(server: ServerThread, path: str, **body: Any) -> httpx.Response:
    return httpx.post(server.url + path, json={"model": MODEL, **body}, timeout=120)


def test_continuing_with_a_request_template_equals_the_servers(
    server: ServerThread, template: str, default_model_path: str
) -> None:
    from ossa import Tokenizer

    want = Tokenizer.from_file(default_model_path).apply_chat_template(
        MSGS, add_generation_prompt=False, continue_final_message=True, tokenize=True
    )
    flags = {"add_generation_prompt": False, "continue_final_message": True}
    own = post(server, "/tokenize", messages=MSGS, **flags).json()["tokens"]
    sent = post(server, "/tokenize", messages=MSGS, chat_template=template, **flags).json()["tokens"]
    assert own == sent == want
    body = {"messages": MSGS, "max_tokens": 6, "temperature": 0, **flags}
    a = post(server, "/v1/chat/completions", **body).json()
    b = post(server, "/v1/chat/completions", chat_template=template, **body).json()
    assert a["choices"][0]["message"] == b["choices"][0]["message"]
    assert a["usage"]["prompt_tokens"] == b["usage"]["prompt_tokens"] == len(want)
    # Not continuing: a fresh assistant turn after the last message, with either template.
    opened = post(server, "/tokenize", messages=MSGS, chat_template=template).json()["tokens"]
    assert len(opened) > len(want) and opened[: len(want)] == want


@pytest.mark.parametrize("own_template", [False, True])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
def test_both_generation_prompt_flags_are_a_400(
    server: ServerThread, template: str, own_template: bool, path: str
) -> None:
    extra = {"chat_template": template} if own_template else {}
    for flags in (
        {"add_generation_prompt": True, "continue_final_message": True},
        {"continue_final_message": True},  # add_generation_prompt is true unless turned off
    ):
        r = post(server, path, messages=MSGS, max_tokens=2, **flags, **extra)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "continue_final_message" and "cannot both be set" in err["message"]
    assert wait_idle(server)["ossa:kv_cache_usage_perc"] == 0.0


def test_request_template_sees_kwargs_and_tools(server: ServerThread) -> None:
    custom = (
        "{{ greeting }}|"
        "{% if tools %}tools={{ tools | map(attribute='function.name') | join(',') }}|{% endif %}"
        "{% for m in messages %}{{ m.role }}:{{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    r = post(
        server,
        "/v1/chat/completions",
        messages=MSGS,
        chat_template=custom,
        chat_template_kwargs={"greeting": "HELLO"},
        tools=[tool],
        tool_choice="none",
        max_tokens=2,
        temperature=0,
    )
    assert r.status_code == 200, r.text
    ids = post(
        server, "/tokenize", messages=MSGS, chat_template=custom, chat_template_kwargs={"greeting": "HELLO"}
    ).json()["tokens"]
    text = httpx.post(server.url + "/detokenize", json={"tokens": ids}).json()["prompt"]
    assert text == "HELLO|user:Name a fruit.\nassistant:My favourite fruit is the\nassistant:"
    with_tools = "HELLO|tools=lookup|" + text.removeprefix("HELLO|")  # what the chat rendered
    tokens = post(server, "/tokenize", prompt=with_tools, add_special_tokens=False).json()["count"]
    assert r.json()["usage"]["prompt_tokens"] == tokens
    # The same template continuing the last message ends right after its text.
    ids = post(
        server,
        "/tokenize",
        messages=MSGS,
        chat_template=custom,
        chat_template_kwargs={"greeting": "HI"},
        add_generation_prompt=False,
        continue_final_message=True,
    ).json()["tokens"]
    text = httpx.post(server.url + "/detokenize", json={"tokens": ids}).json()["prompt"]
    assert text == "HI|user:Name a fruit.\nassistant:My favourite fruit is the"


def test_continuing_a_message_the_template_drops_is_a_400(server: ServerThread) -> None:
    drops = "{% for m in messages[:-1] %}{{ m.content }}{% endfor %}"
    r = post(
        server,
        "/v1/chat/completions",
        messages=MSGS,
        chat_template=drops,
        add_generation_prompt=False,
        continue_final_message=True,
        max_tokens=2,
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text
    assert "did not write the last message" in r.json()["error"]["message"]
