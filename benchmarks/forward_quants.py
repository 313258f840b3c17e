"""Forward-pass speed of the Q5_0/Q5_1/Q5_K/Q3_K/Q2_K/IQ4_NL/IQ4_XS types: ossa vs llama.cpp on the same
GGUF files (benchmarks/forward.py's measurements, same threads).

The files are made by llama.cpp itself: an F16 llama with SmolLM2's tokenizer and random weights,
shaped so that every row is whole 256-value blocks (n_embd 1024, n_ff 2816, 8 layers, 16 heads, 4 KV
heads, tied embeddings: ~140M parameters, the default model's size), is quantized with
``llama_cpp.llama_model_quantize`` into the mixes people download (Q5_K_M, Q3_K_M, Q2_K, IQ4_XS, ...:
llama.cpp picks each tensor's type) and cached under $OSSA_HOME/bench. Each row lists the file's
tensor types. Random weights change nothing in the speed of either engine (no sparsity shortcuts).

    OSSA_CORE_DIR=build/quants/csrc PYTHONPATH=src python benchmarks/forward_quants.py [--threads 2]
        [--types Q5_0,Q5_K_M] [--shape smollm2]

``--shape smollm2`` quantizes the default model's own weights (n_embd 576) instead: its rows are not
whole 256-value blocks, so llama.cpp's K mixes fall back to Q5_0/Q5_1/Q8_0/IQ4_NL for most tensors,
which is what a Q4_K_M or Q5_K_M download of a small model holds.

Each engine runs in its own process (OMP_WAIT_POLICY unset: libgomp's default, what llama.cpp runs best
with), one file after the other. Both the wall-clock rate and the rate per CPU second of the process
are printed (best of --repeats): on a shared machine the wall clock mostly measures the neighbours,
while CPU seconds at --threads 1 stay comparable (llama.cpp's OpenMP workers spin while waiting, so
at 2 threads its CPU rate understates it; compare wall clock there, on a quiet machine).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import forward  # noqa: E402
from make_bench_models import copy_gguf_metadata, write_gguf  # noqa: E402  (forward put scripts/ on the path)

FTYPES = ["Q5_0", "Q5_1", "IQ4_NL", "Q5_K_M", "Q5_K_S", "Q3_K_M", "Q2_K", "IQ4_XS"]
SHAPE = {"n_embd": 1024, "n_ff": 2816, "n_layer": 8, "n_head": 16, "n_head_kv": 4}


def random_f16_model(dst: Path, tokenizer_src: str) -> str:
    """The random llama of SHAPE in F16 (norms F32), with the tokenizer of `tokenizer_src`."""
    if dst.exists():
        return str(dst)
    import gguf

    reader = gguf.GGUFReader(tokenizer_src)
    tmp = dst.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), "llama")
    copy_gguf_metadata(reader, w, lambda name: name.startswith("tokenizer."))
    e, ff, n_layer, n_head, n_kv = (SHAPE[k] for k in ("n_embd", "n_ff", "n_layer", "n_head", "n_head_kv"))
    hd = e // n_head
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    w.add_context_length(2048)
    w.add_embedding_length(e)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(n_vocab)
    w.add_file_type(1)
    rng = np.random.default_rng(0)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (0.02 * rng.standard_normal((rows, cols), dtype=np.float32)).astype(np.float16)

    w.add_tensor("token_embd.weight", mat(n_vocab, e))
    w.add_tensor("output_norm.weight", np.ones(e, np.float32))
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(e, np.float32))
        w.add_tensor(p + "attn_q.weight", mat(e, e))
        w.add_tensor(p + "attn_k.weight", mat(n_kv * hd, e))
        w.add_tensor(p + "attn_v.weight", mat(n_kv * hd, e))
        w.add_tensor(p + "attn_output.weight", mat(e, e))
        w.add_tensor(p + "ffn_norm.weight", np.ones(e, np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(ff, e))
        w.add_tensor(p + "ffn_up.weight", mat(ff, e))
        w.add_tensor(p + "ffn_down.weight", mat(e, ff))
    return write_gguf(w, tmp, dst)


def llama_quantize(src: str, dst: Path, ftype: str, threads: int) -> str:
    """`src` quantized by llama.cpp into the mix `ftype` (e.g. "Q5_K_M"), cached."""
    if dst.exists():
        return str(dst)
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.nthread = threads
    tmp = dst.with_suffix(".tmp")
    rc = llama_cpp.llama_model_quantize(src.encode(), str(tmp).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize {ftype} failed ({rc})")
    tmp.rename(dst)
    return str(dst)


def tensor_types(path: str) -> str:
    import gguf

    counts = Counter(t.tensor_type.name for t in gguf.GGUFReader(path).tensors)
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


PHASES = ("prefill 128", "prefill 512", "decode")


def timed(fn) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(wall seconds, process CPU seconds) of fn()."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def measure(
    engine: str, path: str, threads: int, n_decode: int, repeats: int, quantized_activations: bool = False
) -> dict[str, list[float]]:
    """{phase: [wall tok/s, CPU tok/s]} for one engine (run in this process), best of `repeats`;
    `quantized_activations`: ossa with 8-bit activation blocks (llama.cpp's kind of rounding)."""
    best: dict[str, list[float]] = {p: [0.0, 0.0] for p in PHASES}

    def keep(phase: str, n: int, wall: float, cpu: float) -> None:
        best[phase] = [max(best[phase][0], n / wall), max(best[phase][1], n / cpu)]

    if engine == "ossa":
        from ossa._native import core

        core.set_num_threads(threads)
        model = core.load_model(path, quantized_activations=quantized_activations)
        for n in (128, 512):
            ids, step = forward.prompt_and_step(model, n, n_decode)

            def decode(step=step, n=n) -> None:  # noqa: ANN001
                for i in range(n_decode):
                    step([100 + i], n + i)

            for _ in range(repeats):
                keep(f"prefill {n}", n, *timed(lambda: step(ids, 0)))  # noqa: B023
                if n == 128:
                    keep("decode", n_decode, *timed(decode))
        return best
    from llama_cpp import Llama

    llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=1024, n_batch=512,
                verbose=False)  # fmt: skip
    for n in (128, 512):
        ids = np.random.default_rng(n).integers(100, 40000, n).tolist()
        for _ in range(repeats):
            llm.reset()
            keep(f"prefill {n}", n, *timed(lambda: llm.eval(ids)))  # noqa: B023
            if n == 128:
                llm.n_tokens = n  # decode the positions after the prompt

                def decode() -> None:
                    for i in range(n_decode):
                        llm.eval([100 + i])

                keep("decode", n_decode, *timed(decode))
    return best


def measure_isolated(engine: str, path: str, args: argparse.Namespace) -> dict[str, list[float]] | None:
    """measure() in a child process, so each engine has its own libraries and a crash is reported."""
    qa = args.quantized_activations and engine == "ossa"
    call = f"{engine!r}, {path!r}, {args.threads}, {args.decode_steps}, {args.repeats}, {qa}"
    code = f"import json, forward_quants as f; print(json.dumps(f.measure({call})))"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([here, env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        print(f"{engine} failed on {os.path.basename(path)} (exit {r.returncode}): {r.stderr.strip()[-300:]}")
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode-steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--types", default=",".join(FTYPES), help="llama.cpp file types (mixes), comma-separated")
    ap.add_argument("--shape", choices=["k", "smollm2"], default="k")
    ap.add_argument("--quantized-activations", action="store_true", help="ossa: 8-bit activation blocks")
    args = ap.parse_args()
    from ossa import models
    from ossa._native import core

    default = str(models.resolve("smollm2-135m"))
    d = forward.bench_dir()
    if args.shape == "k":
        base = random_f16_model(d / "rand-llama-1024-F16.gguf", default)
        stem = "rand-llama-1024"
    else:
        base = forward.requantize(default, d / "smollm2-135m-F16.gguf", "F16")
        stem = "smollm2-135m"
    kernels = forward.kernels_label(core)
    load = " ".join(f"{v:.1f}" for v in os.getloadavg())
    mode = "; 8-bit activations" if args.quantized_activations else ""
    base_name = os.path.basename(base)
    print(f"ossa kernels: {kernels}{mode}; threads={args.threads}; base {base_name}; load {load}")
    print("tok/s, best of --repeats: wall clock | per CPU second of the process")
    cols = f"{'ossa':>8} {'llama':>8} {'ratio':>6}"
    print(f"{'file':8} {'phase':12} {cols} | {cols}  tensor types")
    for ftype in args.types.split(","):
        path = llama_quantize(base, d / f"{stem}-{ftype}.gguf", ftype, args.threads)
        o = measure_isolated("ossa", path, args)
        ll = measure_isolated("llama.cpp", path, args)
        nan = [float("nan")] * 2
        for i, phase in enumerate(PHASES):
            a, b = (o or {}).get(phase, nan), (ll or {}).get(phase, nan)
            types = tensor_types(path) if i == 0 else ""
            print(
                f"{ftype:8} {phase:12} {a[0]:8.1f} {b[0]:8.1f} {a[0] / b[0]:6.2f} | "
                f"{a[1]:8.1f} {b[1]:8.1f} {a[1] / b[1]:6.2f}  {types}",
                flush=True,
            )


if __name__ == "__main__":
    main()
