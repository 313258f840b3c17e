"""Each engine's own process environment for the peer benchmarks, and running one engine in a child.

Every engine runs in its own process with its own best settings, and nothing set for one reaches
another: each child starts from this process's environment with every OpenMP, ossa and vLLM variable
removed, then gets its own:

- ossa: `OMP_WAIT_POLICY=passive` (ossa's own recommendation on a shared machine: libgomp's spinning
  barriers made its forward 30x slower at load 6) unless OSSA_OMP_WAIT_POLICY says otherwise, plus
  OSSA_CORE_DIR / PYTHONPATH for the build under test;
- llama.cpp: nothing (its default OpenMP policy, threads given as n_threads);
- HF transformers: nothing (torch.set_num_threads in the worker);
- vLLM-CPU: its documented CPU settings, single process: VLLM_CPU_OMP_THREADS_BIND (cores 0-1),
  VLLM_CPU_KVCACHE_SPACE (4 GiB), VLLM_CPU_NUM_OF_RESERVED_CPU=0, VLLM_ENABLE_V1_MULTIPROCESSING=0,
  its default OpenMP policy; PYTHONPATH=benchmarks/vllm_site, whose sitecustomize hides the venv's
  broken torchvision/torchaudio builds (text models do not use them).

`describe` gives the line printed for each engine (every OMP_/KMP_/OSSA_/VLLM_ variable it sees).
`server_process` runs one HTTP server (``ossa serve``, a peer's) for the serving benchmarks: started in
its own session, waited for, stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = "/root/vllm-venv/bin/python"
_PREFIXES = ("OMP_", "KMP_", "GOMP_", "OSSA_", "VLLM_")
ENGINES = ("ossa", "llama", "hf", "vllm")


def _clean_base() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_PREFIXES)}
    env.pop("PYTHONPATH", None)
    if "OSSA_HOME" in os.environ:  # where the models are cached: a location, not a setting
        env["OSSA_HOME"] = os.environ["OSSA_HOME"]
    return env


def engine_env(engine: str, threads: int = 2) -> dict[str, str]:
    """The full environment of `engine`'s process."""
    env = _clean_base()
    if engine == "ossa":
        env["OMP_WAIT_POLICY"] = os.environ.get("OSSA_OMP_WAIT_POLICY", "passive")
        if "OSSA_CORE_DIR" in os.environ:
            env["OSSA_CORE_DIR"] = os.environ["OSSA_CORE_DIR"]
        for key in ("OSSA_AMX", "OSSA_PROFILE"):
            if key in os.environ:
                env[key] = os.environ[key]
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "benchmarks")])
    elif engine in ("llama", "hf"):
        env["PYTHONPATH"] = str(ROOT / "benchmarks")
    elif engine == "vllm":
        # vllm_site/sitecustomize.py hides the venv's broken torchvision/torchaudio builds (it says why).
        env["PYTHONPATH"] = str(ROOT / "benchmarks" / "vllm_site")
        env.update(
            VLLM_ENABLE_V1_MULTIPROCESSING="0",
            VLLM_CPU_OMP_THREADS_BIND=f"0-{threads - 1}",
            VLLM_CPU_NUM_OF_RESERVED_CPU="0",
            VLLM_CPU_KVCACHE_SPACE="4",
        )
    else:
        raise ValueError(f"unknown engine {engine!r}")
    return env


def describe(env: dict[str, str]) -> str:
    shown = sorted(k for k in env if k.startswith(_PREFIXES))
    return " ".join(f"{k}={env[k]}" for k in shown) or "(no OpenMP/ossa/vLLM variables: defaults)"


def _die_with_parent() -> None:
    """In a worker, before exec (Linux): SIGKILL when the benchmark that started it dies, so a killed
    run leaves no peer computing under the next measurement."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


def run_child(engine: str, job: dict[str, Any], threads: int, timeout_s: float = 1800) -> dict[str, Any]:
    """Runs `python peers.py --worker ENGINE job result` in `engine`'s environment; returns its JSON."""
    python = VLLM_PYTHON if engine == "vllm" else sys.executable
    with tempfile.TemporaryDirectory() as td:
        job_path, res_path = Path(td) / "job.json", Path(td) / "result.json"
        job_path.write_text(json.dumps(job))
        script = str(ROOT / "benchmarks" / "peers.py")
        cmd = [python, script, "--worker", engine, str(job_path), str(res_path)]
        proc = subprocess.run(
            cmd,
            env=engine_env(engine, threads),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            preexec_fn=_die_with_parent,
        )
        if proc.returncode != 0 or not res_path.exists():
            tail = (proc.stderr or proc.stdout)[-3000:]
            raise RuntimeError(f"{engine} worker failed (exit {proc.returncode}):\n{tail}")
        return json.loads(res_path.read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(
    url: str, proc: subprocess.Popen | None = None, timeout_s: float = 300, path: str = "/v1/models"
) -> None:
    """Polls ``url + path`` until it answers 200; RuntimeError if ``proc`` exits or time runs out."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} did not become ready in {timeout_s:g} s")


def ossa_serve_cmd(model: str | None, port: int, *flags: str) -> list[str]:
    """``ossa serve`` on a loopback port, from this checkout (run it with ``engine_env("ossa")``)."""
    return [
        sys.executable,
        "-m",
        "ossa.cli",
        "serve",
        *([model] if model else []),
        "--port",
        str(port),
        *flags,
    ]


@contextlib.contextmanager
def server_process(
    cmd: list[str],
    env: dict[str, str],
    url: str,
    log_path: str,
    startup_s: float = 300,
    ready_path: str = "/v1/models",
) -> Iterator[subprocess.Popen]:
    """Runs a server until the block ends: in its own session (its own process group and, where the
    kernel groups CPU time by session, its own share, as a server started from a shell has), its output
    in ``log_path``; waits until ``url + ready_path`` answers. At the end, if still running: SIGTERM,
    then SIGKILL to its group after 30 s."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_ready(url, proc, startup_s, ready_path)
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
