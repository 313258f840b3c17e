"""Forward-pass speed: ossa vs llama.cpp (llama-cpp-python) on the same GGUF files, same thread count.

Single-sequence prefill (128 and 512 tokens) and decode steps (after a 128-token prompt) on the
default model (SmolLM2-135M-Instruct Q4_1) and on Q8_0 / BF16 files made from its weights (cached
under $OSSA_HOME/bench), or with --shape 1b|1.5b|3b on scripts/make_bench_models.py's random-weight
models of real shapes (Q4_K_M, Q6_K, Q8_0). Prints tok/s, the ratio ossa / llama.cpp, and decode as a
fraction of the bandwidth ceiling: measured read bandwidth / bytes of weights read per token (every
matrix once; of the token embedding only when it is also the output matrix).

    OSSA_CORE_DIR=build/forward2/csrc PYTHONPATH=src python benchmarks/forward.py [--threads 2] [--shape 1b]

Each engine runs in its own process with its own settings (benchmarks/peer_env.py; printed), the two
take turns --repeats times per file and the best of all runs is kept (prefill: 2, decode: 3 runs of
--decode-steps steps at the same positions each time), because the machine may be shared; check the
load printed and compare --threads 1 too.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from make_bench_models import bench_dir, copy_gguf_metadata, write_gguf  # noqa: E402


def requantize(src: str, dst: Path, type_name: str) -> str:
    """Write src's tensors as `type_name` (1-D tensors stay F32), metadata copied."""
    if dst.exists():
        return str(dst)
    import gguf
    from gguf.quants import dequantize, quantize

    reader = gguf.GGUFReader(src)
    arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    tmp = dst.with_suffix(".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch)
    copy_gguf_metadata(
        reader,
        writer,
        lambda name: (
            not name.startswith("GGUF.") and name not in ("general.architecture", "general.file_type")
        ),
    )
    target = gguf.GGMLQuantizationType[type_name]
    for t in reader.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(x) for x in t.shape[::-1]])
        if w.ndim == 1 or w.shape[0] == 1:
            writer.add_tensor(t.name, w.reshape(-1))
        else:
            q = quantize(w, target)
            writer.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=target)
    return write_gguf(writer, tmp, dst)


def read_bandwidth(threads: int) -> float:
    """Bytes/s summing a 512 MiB array split over `threads` threads (numpy releases the GIL)."""
    a = np.ones(512 * 1024 * 1024 // 8, dtype=np.float64)
    parts = np.array_split(a, threads)
    best = 0.0
    for _ in range(3):
        ts = [threading.Thread(target=np.sum, args=(p,)) for p in parts]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        best = max(best, a.nbytes / (time.perf_counter() - t0))
    return best


def prompt_and_step(
    model: Any, n: int, n_decode: int, max_tokens: int = 0
) -> tuple[list[int], Callable[[list[int], int], np.ndarray]]:
    """A random n-token prompt and step(tokens, start): one sequence's forward over tokens at positions
    start.. through a ModelRunner sized for the prompt plus n_decode tokens (last row's logits)."""
    from ossa._native import core

    block = 16
    ids = np.random.default_rng(n).integers(100, 40000, n).tolist()
    nb = (n + n_decode + block - 1) // block
    runner = core.ModelRunner(model, nb, block, max_tokens or n)
    table = list(range(nb))

    def step(tokens: list[int], start: int) -> np.ndarray:
        k = len(tokens)
        pos = list(range(start, start + k))
        slots = [table[p // block] * block + p % block for p in pos]
        return runner.forward(tokens, pos, slots, [0, k], [start + k], [0, nb], table, [k - 1])

    return ids, step


def ossa_speed(
    path: str,
    threads: int,
    n_decode: int,
    quantized_activations: bool = False,
    contexts: tuple[int, ...] = (),
) -> dict[str, float]:
    """prefill 128 / 512 and decode after a 128-token prompt; with ``contexts``, also "decode @N": decode
    after an N-token prompt (prefilled in chunks of 512)."""
    from ossa._native import core

    core.set_num_threads(threads)
    model = core.load_model(path, quantized_activations=quantized_activations)
    out = {}
    for n in contexts:
        ids, step = prompt_and_step(model, n, n_decode, max_tokens=512)
        for start in range(0, n, 512):
            logits = step(ids[start : start + 512], start)
        best = 1e9
        for _ in range(2):
            tok = int(np.argmax(logits[0]))
            t0 = time.perf_counter()
            for i in range(n_decode):
                tok = int(np.argmax(step([tok], n + i)[0]))
            best = min(best, time.perf_counter() - t0)
        out[f"decode @{n}"] = n_decode / best
    for n in (128, 512):
        ids, step = prompt_and_step(model, n, n_decode)
        best = 1e9
        for _ in range(2):
            t0 = time.perf_counter()
            logits = step(ids, 0)
            best = min(best, time.perf_counter() - t0)
        out[f"prefill {n}"] = n / best
        if n == 128:
            # Best of 3 runs over the same positions (the machine may be shared).
            best = 1e9
            for _ in range(3):
                tok = int(np.argmax(logits[0]))
                t0 = time.perf_counter()
                for i in range(n_decode):
                    tok = int(np.argmax(step([tok], n + i)[0]))
                best = min(best, time.perf_counter() - t0)
            out["decode"] = n_decode / best
    return out


# Architectures whose llama.cpp memory cannot go back (a recurrent state): decode goes on instead.
RECURRENT_ARCHS = (
    "qwen35",
    "qwen35moe",
    "qwen3next",
    "lfm2",
    "lfm2moe",
    "granitehybrid",
    "nemotron_h",
    "nemotron_h_moe",
    "mamba",
    "mamba2",
    "jamba",
    "falcon-h1",
)


def llama_speed(path: str, threads: int, n_decode: int, contexts: tuple[int, ...] = ()) -> dict[str, float]:
    from llama_cpp import Llama

    n_ctx = max([1024, *[n + 3 * n_decode + 16 for n in contexts]])
    llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx, n_batch=512,
                verbose=False)  # fmt: skip
    out = {}
    recurrent = llm.metadata.get("general.architecture") in RECURRENT_ARCHS
    for n in contexts:  # (as ossa_speed: decode after an n-token prompt)
        llm.reset()
        llm.eval(np.random.default_rng(n).integers(100, 40000, n).tolist())
        best = 1e9
        for _ in range(2):
            if not recurrent:  # (a recurrent model decodes on instead)
                llm.n_tokens = n
            t0 = time.perf_counter()
            for i in range(n_decode):
                llm.eval([int(100 + i)])
            best = min(best, time.perf_counter() - t0)
        out[f"decode @{n}"] = n_decode / best
    for n in (128, 512):
        ids = np.random.default_rng(n).integers(100, 40000, n).tolist()
        best = 1e9
        for _ in range(2):
            llm.reset()
            t0 = time.perf_counter()
            llm.eval(ids)
            best = min(best, time.perf_counter() - t0)
        out[f"prefill {n}"] = n / best
        if n == 128:
            best = 1e9
            # A model with recurrent layers (Qwen3.5) cannot go back: it decodes on from where it is.
            recurrent = llm.metadata.get("general.architecture") in RECURRENT_ARCHS
            for _ in range(3):
                if not recurrent:
                    llm.n_tokens = n  # rewind to the end of the prompt: decode the same positions again
                t0 = time.perf_counter()
                for i in range(n_decode):
                    llm.eval([int(100 + i)])
                best = min(best, time.perf_counter() - t0)
            out["decode"] = n_decode / best
    return out


def speed_isolated(
    engine: str, path: str, threads: int, n_decode: int, quant_act: bool, contexts: tuple[int, ...] = ()
) -> dict[str, float]:
    """ossa_speed or llama_speed in a child process with the engine's own environment, so a crash is
    reported, not fatal, and no setting of one engine reaches the other; {} on failure."""
    import json
    import subprocess
    import sys

    from peer_env import engine_env

    call = f"{path!r}, {threads}, {n_decode}"
    if engine == "ossa":  # (quantized_activations: a load option of the model)
        call = f"ossa_speed({call}, quantized_activations={quant_act}, contexts={tuple(contexts)!r})"
    else:
        call = f"llama_speed({call}, contexts={tuple(contexts)!r})"
    code = f"import json, forward; print(json.dumps(forward.{call}))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=engine_env(engine))
    if r.returncode != 0:
        print(f"{engine} failed on {os.path.basename(path)} (exit {r.returncode}): {r.stderr[-500:]}")
        return {}
    return json.loads(r.stdout.strip().splitlines()[-1])


def kernels_label(core: Any) -> str:
    """Which kernels a repacked (default) load runs on this build's CPU."""
    if core.amx_default():
        return "AMX"
    if not core.repack_default():
        return "f32"
    if core.i8_vnni_available():
        return (
            "VNNI int8 (Q4_0, Q4_1, Q4_K, Q6_K, Q8_0, Q5_0, Q5_1, IQ4_NL, Q5_K, IQ4_XS, MXFP4, Q2_K, "
            "Q3_K) + f32"
        )
    return "AVX2 int8 / int16 (every quantized type) + f32"


def weight_bytes_per_token(path: str) -> int:
    """Bytes of the tensors one decode step reads: all but the token embedding, which is read whole
    only when there is no separate output matrix (tied embeddings)."""
    import gguf

    tensors = gguf.GGUFReader(path).tensors
    names = {t.name for t in tensors}
    tied = "output.weight" not in names
    return sum(int(t.n_bytes) for t in tensors if t.name != "token_embd.weight" or tied)


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from peer_env import describe, engine_env

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode-steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2, help="turns of ossa and llama.cpp per file; best kept")
    ap.add_argument("--shape", default=None, help="scripts/make_bench_models.py shape: 1b, 1.5b, 3b")
    ap.add_argument("--types", default="Q4_K_M,Q6_K,Q8_0", help="with --shape: the GGUF types")
    ap.add_argument("--no-llama", action="store_true", help="ossa only")
    ap.add_argument("--quantized-activations", action="store_true", help="ossa: 8-bit VNNI activations")
    args = ap.parse_args()
    if args.shape:
        import make_bench_models

        types = tuple(t.strip() for t in args.types.split(","))
        files = {t: p for t, p in make_bench_models.make(args.shape, types, hf=False).items() if t in types}
    else:
        from ossa import models

        default = models.resolve("smollm2-135m")
        files = {
            "Q4_1": default,
            "Q8_0": requantize(default, bench_dir() / "smollm2-135m-Q8_0.gguf", "Q8_0"),
            "BF16": requantize(default, bench_dir() / "smollm2-135m-BF16.gguf", "BF16"),
        }
    bw = read_bandwidth(args.threads)
    print(f"read bandwidth ({args.threads} threads): {bw / 1e9:.1f} GB/s; threads={args.threads}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
    for e in ("ossa", "llama"):
        print(f"env {e}: {describe(engine_env(e))}")
    from ossa._native import core

    print(f"ossa kernels: {kernels_label(core)}")
    if args.quantized_activations:
        print("ossa kernels: 8-bit activations")
    print(f"{'model':7} {'phase':12} {'ossa tok/s':>11} {'llama.cpp':>10} {'ratio':>6} {'ceiling':>8} "
          f"{'ossa %':>7} {'llama %':>7}")  # fmt: skip
    for name, path in files.items():
        o: dict[str, float] = {}
        ll: dict[str, float] = {}
        for _ in range(args.repeats):
            for eng, best in (("ossa", o), ("llama", ll)):
                if eng == "llama" and args.no_llama:
                    continue
                r = speed_isolated(eng, path, args.threads, args.decode_steps, args.quantized_activations)
                for k, v in r.items():
                    best[k] = max(best.get(k, 0.0), v)
        ceiling = bw / weight_bytes_per_token(path)
        for phase in ("prefill 128", "prefill 512", "decode"):
            ov, peer = o.get(phase, float("nan")), ll.get(phase, float("nan"))
            if phase == "decode":
                tail = f"{ceiling:8.1f} {100 * ov / ceiling:6.0f}% {100 * peer / ceiling:6.0f}%"
            else:
                tail = ""
            print(f"{name:7} {phase:12} {ov:11.1f} {peer:10.1f} {ov / peer:6.2f} {tail}", flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
