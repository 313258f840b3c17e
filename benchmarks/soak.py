"""Soak: ``ossa serve`` under a mixed, partly hostile load for a while; prints requests, errors, latency
percentiles, the server's memory and /health's latency over time (the README's reliability table).

    python benchmarks/soak.py                       # 120 s, 32 clients, the default model
    python benchmarks/soak.py --duration 600 --concurrency 64

Each client loops over a mix: streamed completions (one in ten hangs up after two chunks), chat
(streamed or not), /tokenize, the probe's bad inputs (which must be 4xx) and hostile request chat
templates (nested loops: a 400 after the template time limit, while everything else keeps going).
An error is a 5xx, a transport failure, a stream read to its end without ``[DONE]``, or a bad input
not answered 4xx. At the end the server gets SIGTERM and must exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from peer_env import engine_env, free_port, ossa_serve_cmd, server_process  # noqa: E402

LOG = "/tmp/ossa-soak-serve.log"

BAD = [
    ("/v1/completions", '{"model": "\\ud800", "prompt": "x"}'),
    ("/v1/completions", '{"prompt": "x", "stop": ["\\ud800"]}'),
    ("/v1/completions", '{"prompt": "x", "top_k": 1180591620717411303424}'),
    ("/v1/completions", '{"prompt": "x", "priority": 1180591620717411303424}'),
    ("/v1/completions", '{"prompt": "x", "max_tokens": 100000}'),
    ("/v1/completions", '{"prompt": "x", "temperature": NaN}'),
    ("/v1/completions", '{"prompt": [-1]}'),
    ("/v1/chat/completions", '{"messages": []}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "\\ud800"}]}'),
    ("/detokenize", '{"tokens": [1180591620717411303424]}'),
]
HOSTILE = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


@dataclass
class Record:
    kind: str
    end: float
    latency: float
    error: str | None


@dataclass
class State:
    records: list[Record] = field(default_factory=list)
    rss: list[tuple[float, float]] = field(default_factory=list)  # (t, MiB, server + template workers)
    health: list[float] = field(default_factory=list)  # seconds


def rss_mib(pid: int) -> float:
    """Resident memory of the process and its children (template workers), MiB."""
    total = 0
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


async def one_request(client: httpx.AsyncClient, url: str, rng: random.Random) -> tuple[str, str | None]:
    """One request of the mix; (kind, error or None)."""
    r = rng.random()
    if r < 0.35:
        body = {"prompt": f"Note {rng.randrange(10**6)}: the", "max_tokens": 16, "stream": True}
        hang_up = rng.random() < 0.1
        return "stream", await stream(client, url + "/v1/completions", body, 2 if hang_up else None)
    if r < 0.50:
        msgs = [{"role": "user", "content": f"Name {rng.randrange(100)} things."}]
        return "chat-stream", await stream(
            client, url + "/v1/chat/completions", {"messages": msgs, "max_tokens": 16, "stream": True}, None
        )
    if r < 0.75:
        msgs = [{"role": "user", "content": f"Say {rng.randrange(100)} words."}]
        resp = await client.post(url + "/v1/chat/completions", json={"messages": msgs, "max_tokens": 16})
        return "chat", None if resp.status_code == 200 else f"chat {resp.status_code}"
    if r < 0.80:
        resp = await client.post(url + "/tokenize", json={"prompt": "hello " * rng.randrange(1, 50)})
        return "tokenize", None if resp.status_code == 200 else f"tokenize {resp.status_code}"
    if r < 0.97:
        path, raw = rng.choice(BAD)
        resp = await client.post(
            url + path, content=raw.encode(), headers={"content-type": "application/json"}
        )
        return "bad", None if 400 <= resp.status_code < 500 else f"bad input {path} -> {resp.status_code}"
    body = {"messages": [{"role": "user", "content": "hi"}], "chat_template": HOSTILE}
    resp = await client.post(url + "/v1/chat/completions", json=body)
    return "hostile", None if resp.status_code == 400 else f"hostile template -> {resp.status_code}"


async def stream(client: httpx.AsyncClient, url: str, body: dict, leave_after: int | None) -> str | None:
    n = 0
    last = ""
    async with client.stream("POST", url, json=body) as r:
        if r.status_code != 200:
            return f"stream {r.status_code}"
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                n += 1
                last = line[6:]
                if leave_after is not None and n >= leave_after:
                    return None
    return None if last == "[DONE]" else f"stream ended without [DONE]: {last[:80]}"


async def client_loop(url: str, seed: int, stop_at: float, st: State) -> None:
    rng = random.Random(seed)
    async with httpx.AsyncClient(timeout=300) as client:
        while time.monotonic() < stop_at:
            t0 = time.monotonic()
            try:
                kind, error = await one_request(client, url, rng)
            except httpx.HTTPError as e:
                kind, error = "transport", f"{type(e).__name__}: {e}"
            t1 = time.monotonic()
            st.records.append(Record(kind, t1, t1 - t0, error))


async def monitor(url: str, pid: int, stop_at: float, st: State, t_start: float) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        while time.monotonic() < stop_at:
            t0 = time.monotonic()
            await client.get(url + "/health")
            st.health.append(time.monotonic() - t0)
            st.rss.append((time.monotonic() - t_start, rss_mib(pid)))
            await asyncio.sleep(0.5)


async def health_during_hostile(url: str, hostile: int) -> list[float]:
    """/health latencies (s), polled every 20 ms while ``hostile`` nested-loop templates render (until
    they are answered; 3 s when none)."""
    async with httpx.AsyncClient(timeout=60) as client:
        body = {"messages": [{"role": "user", "content": "hi"}], "chat_template": HOSTILE}
        path = url + "/v1/chat/completions"
        renders = [asyncio.ensure_future(client.post(path, json=body)) for _ in range(hostile)]
        await asyncio.sleep(0.3)  # let them reach the workers
        lat: list[float] = []
        t_end = time.monotonic() + 3
        while not all(r.done() for r in renders) if renders else time.monotonic() < t_end:
            t0 = time.monotonic()
            await client.get(url + "/health")
            lat.append(time.monotonic() - t0)
            await asyncio.sleep(0.02)
        for r in renders:
            assert (await r).status_code == 400
        return lat


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def report(st: State, t_start: float, every: float, duration: float) -> None:
    head = ["t (s)", "requests", "errors", "p50 ms", "p99 ms", "RSS MiB", "health max ms"]
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (6, 9, 7, 8, 8, 8, 14), strict=True)))
    t = every
    while t <= duration + 1e-9:
        window = [r for r in st.records if t - every <= r.end - t_start < t]
        timed = [
            r.latency * 1e3 for r in window if r.kind in ("stream", "chat-stream", "chat") and not r.error
        ]
        rss = [m for (s, m) in st.rss if s < t]
        print(
            f"{t:6.0f} {len(window):9d} {sum(1 for r in window if r.error):7d} {pct(timed, 0.5):8.0f} "
            f"{pct(timed, 0.99):8.0f} {rss[-1] if rss else float('nan'):8.0f} "
            f"{max(st.health[: len(rss)] or [0]) * 1e3:14.0f}"
        )
        t += every


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--duration", type=float, default=120)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--report-every", type=float, default=15)
    ap.add_argument("--max-model-len", type=int, default=512)
    args = ap.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    flags = ["--max-model-len", str(args.max_model_len), "--kv-cache-memory-bytes", str(256 << 20)]
    flags += ["--trust-request-chat-template", "--shutdown-timeout", "5", "--max-num-seqs", "64"]
    with contextlib.ExitStack() as stack:
        try:
            cmd = ossa_serve_cmd(args.model, port, *flags)
            proc = stack.enter_context(server_process(cmd, engine_env("ossa"), url, LOG, 120, "/health"))
        except RuntimeError as e:
            print(f"server did not start ({e}); see {LOG}")
            return 1
        return soak(args, url, proc)


def soak(args: argparse.Namespace, url: str, proc: subprocess.Popen) -> int:
    load = os.getloadavg()
    print(
        f"ossa serve (pid {proc.pid}), {args.concurrency} clients for {args.duration:g} s; load {load[0]:.2f}"
    )
    for n in (0, 2):
        lat = [x * 1e3 for x in asyncio.run(health_during_hostile(url, n))]
        print(
            f"/health while {n} hostile templates render: {len(lat)} polls, p50 {pct(lat, 0.5):.1f} ms, "
            f"p99 {pct(lat, 0.99):.1f} ms, max {max(lat):.1f} ms"
        )
    st = State()
    t_start = time.monotonic()
    stop_at = t_start + args.duration

    async def run() -> None:
        tasks = [client_loop(url, i, stop_at, st) for i in range(args.concurrency)]
        await asyncio.gather(monitor(url, proc.pid, stop_at, st, t_start), *tasks)

    asyncio.run(run())
    report(st, t_start, args.report_every, args.duration)
    errors = [r for r in st.records if r.error]
    kinds: dict[str, int] = {}
    for r in st.records:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    print(f"requests {len(st.records)} ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})")
    print(f"errors {len(errors)}" + "".join(f"\n  {e.error}" for e in errors[:10]))
    timed = [
        r.latency * 1e3 for r in st.records if r.kind in ("stream", "chat-stream", "chat") and not r.error
    ]
    print(f"generation latency ms: p50 {pct(timed, 0.5):.0f}, p99 {pct(timed, 0.99):.0f}")
    health = [h * 1e3 for h in st.health]
    print(f"/health ms: p50 {pct(health, 0.5):.1f}, p99 {pct(health, 0.99):.1f}, max {max(health):.1f}")
    rss = [m for _, m in st.rss]
    print(f"RSS MiB (server + template workers): first {rss[0]:.0f}, last {rss[-1]:.0f}, max {max(rss):.0f}")
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(60)
    text = Path(LOG).read_text(errors="replace")
    print(f"SIGTERM: exit {code}; tracebacks in the log: {text.count('Traceback')}")
    return 0 if not errors and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
