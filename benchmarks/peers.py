"""Run one offline workload on ossa and on its peers: llama.cpp, vLLM-CPU, HF transformers.

Every runner takes the same prompts (lists of token ids) and generates exactly `output_len` tokens
per prompt, greedy, ignoring EOS, and returns a `Run` with the wall time of the generation and the
time from constructing the engine to ready. Used by benchmarks/throughput.py.

This file is also the worker: every engine runs in its own process, started by
`peer_env.run_child` as `peers.py --worker ENGINE job.json result.json` in that engine's own
environment (benchmarks/peer_env.py). vLLM lives in its own virtual environment (/root/vllm-venv),
whose python runs this file; the vLLM worker imports nothing from ossa.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Run:
    """One peer on one workload."""

    name: str
    wall_s: float  # generation only, engine already loaded
    output_tokens: int
    ready_s: float  # constructor -> ready to generate
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tok_s(self) -> float:
        return self.output_tokens / self.wall_s if self.wall_s > 0 else 0.0


def bench_dir() -> Path:
    home = Path(os.environ.get("OSSA_HOME", Path.home() / ".cache" / "ossa"))
    d = home / "bench"
    d.mkdir(parents=True, exist_ok=True)
    return d


def make_prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """n distinct random prompts of `length` ordinary token ids (no shared prefix to cache)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lo = min(1000, vocab // 4)  # skip the special and byte tokens at the start of the vocabulary
    return [[int(t) for t in rng.integers(lo, vocab, size=length)] for _ in range(n)]


# -- ossa ------------------------------------------------------------------------------------------


def run_ossa(
    model: str,
    batches: dict[str, list[list[int]]],
    output_len: int,
    threads: int,
    dtype: str = "auto",
    quantized_activations: bool = False,
) -> tuple[float, dict[str, Run], dict[str, Any]]:
    """Runs each named batch of prompts on one `ossa.LLM` (`dtype` "auto" or "bfloat16", vLLM-CPU's
    numerics; `quantized_activations`: 8-bit activation blocks); returns (ready_s, runs, profiles).
    Each batch's profile splits the wall time of `generate` into the engine's own timers, the
    rest of the C++ step calls, and Python (everything outside the step calls)."""
    from ossa import LLM, SamplingParams

    t0 = time.perf_counter()
    llm = LLM(
        model, num_threads=threads, max_num_seqs=64, dtype=dtype, quantized_activations=quantized_activations
    )
    ready = time.perf_counter() - t0
    sp = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)
    llm.generate([batches[next(iter(batches))][0][:16]], SamplingParams(max_tokens=4), use_tqdm=False)

    engine = llm.engine
    in_step = [0.0]

    class TimedEngine:  # times the C++ step calls (one or all steps a call); forwards everything else
        def __getattr__(self, name: str) -> Any:
            return getattr(engine, name)

        def step(self) -> Any:
            t = time.perf_counter()
            out = engine.step()
            in_step[0] += time.perf_counter() - t
            return out

        def run_to_completion(self) -> Any:
            t = time.perf_counter()
            out = engine.run_to_completion()
            in_step[0] += time.perf_counter() - t
            return out

    runs: dict[str, Run] = {}
    profile: dict[str, Any] = {}
    # The LLM's step driver holds the engine it steps (ossa.step_driver): time it there.
    driver = llm._driver
    driver.engine = TimedEngine()  # ~2 perf_counter calls per step: negligible against a step
    try:
        for name, prompts in batches.items():
            in_step[0] = 0.0
            before = dict(engine.stats())
            t = time.perf_counter()
            outs = llm.generate(prompts, sp, use_tqdm=False)
            wall = time.perf_counter() - t
            after = dict(engine.stats())
            n_out = sum(len(o.outputs[0].token_ids) for o in outs)
            runs[name] = Run("ossa", wall, n_out, ready)
            d = {k: after[k] - before[k] for k in after if k.startswith("time_") or k == "steps"}
            profile[name] = dict(wall=wall, in_step=in_step[0], **d)
    finally:
        driver.engine = engine
    return ready, runs, profile


# -- llama.cpp (llama-cpp-python, low-level batch API) ----------------------------------------------


def run_llama(
    model: str, prompts: list[list[int]], output_len: int, threads: int, modes: tuple[str, ...]
) -> Run:
    """llama.cpp on the same GGUF. "batched": all prompts as parallel sequences of one context, one
    llama_decode per step with a token per sequence (its continuous-batching mode); "sequential":
    one prompt after the other. Greedy argmax over the returned logits in numpy. Returns the best."""
    import ctypes

    import llama_cpp
    import numpy as np

    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=model, n_ctx=64, n_threads=threads, verbose=False)
    n_vocab = llm.n_vocab()
    n_seq = len(prompts) if "batched" in modes else 1
    per_seq = max(len(p) for p in prompts) + output_len
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx = n_seq * per_seq
    cp.n_batch = 512
    cp.n_ubatch = 512
    cp.n_seq_max = n_seq
    cp.kv_unified = True
    cp.n_threads = threads
    cp.n_threads_batch = threads
    cp.no_perf = True
    ctx = llama_cpp.llama_init_from_model(llm.model, cp)
    if not ctx:
        raise RuntimeError("llama_init_from_model failed")
    ready = time.perf_counter() - t0
    mem = llama_cpp.llama_get_memory(ctx)
    batch = llama_cpp.llama_batch_init(512, 0, 1)

    def decode(entries: list[tuple[int, int, int, bool]]) -> np.ndarray:
        """entries: (token, pos, seq, want_logits); returns logits of the flagged rows in order."""
        for i, (tok, pos, seq, want) in enumerate(entries):
            batch.token[i] = tok
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = want
        batch.n_tokens = len(entries)
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        n_rows = sum(1 for e in entries if e[3])
        ptr = llama_cpp.llama_get_logits(ctx)
        return np.ctypeslib.as_array(
            ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_rows, n_vocab)
        )

    def generate(group: list[list[int]]) -> int:
        """Prefills the group (chunks of <= 512 tokens), then decodes one token per sequence per step."""
        llama_cpp.llama_memory_clear(mem, True)
        last: list[int] = [0] * len(group)
        pending: list[tuple[int, int, int, bool]] = []
        owners: list[int] = []

        def flush() -> None:
            if pending:
                rows = decode(pending).argmax(axis=1)
                for seq, tok in zip(owners, rows, strict=True):
                    last[seq] = int(tok)
                pending.clear()
                owners.clear()

        for s, p in enumerate(group):
            for j, tok in enumerate(p):
                if len(pending) == 512:
                    flush()
                end = j == len(p) - 1
                pending.append((tok, j, s, end))
                if end:
                    owners.append(s)
        flush()
        n_out = len(group)  # the first output token came from the prefill
        for step in range(1, output_len):
            for lo in range(0, len(group), 512):
                seqs = range(lo, min(lo + 512, len(group)))
                rows = decode([(last[s], len(group[s]) + step - 1, s, True) for s in seqs]).argmax(axis=1)
                for s, tok in zip(seqs, rows, strict=True):
                    last[s] = int(tok)
            n_out += len(group)
        return n_out

    generate([prompts[0][:16]])  # warm up
    results = []
    for mode in modes:
        t = time.perf_counter()
        if mode == "batched":
            n_out = generate(prompts)
        else:
            n_out = sum(generate([p]) for p in prompts)
        results.append(Run("llama.cpp", time.perf_counter() - t, n_out, ready, note=mode))
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    llm.close()
    best = max(results, key=lambda r: r.tok_s)
    best.extra = {r.note: r.tok_s for r in results}
    return best


# -- HF folder (bf16) from the GGUF ----------------------------------------------------------------


def hf_folder(gguf_path: str) -> str:
    """The GGUF's weights dequantized to a bf16 Hugging Face folder, cached under $OSSA_HOME/bench.

    Weights come from `ossa.reference.loader.load_weights` (float32, dequantized by the NumPy twin
    of the GGUF reader), with llama.cpp's Q/K row permutation undone for Llama-style files; config
    and tokenizer come from transformers' own GGUF reader (`gguf_file=`). transformers 5 keeps GGUF
    weights quantized and refuses to `save_pretrained` them, hence the hand-built state dict."""
    src = Path(gguf_path)
    # A benchmark model of scripts/make_bench_models.py (llama-1b-Q4_K_M.gguf): its bf16 folder holds
    # the unquantized weights the GGUFs were quantized from.
    base = src.stem.rsplit("-", 1)[0]
    made = src.parent / f"{base}-bf16-hf"
    if (made / "config.json").exists():
        return str(made)
    dst = bench_dir() / f"{src.stem}-bf16-hf"
    if (dst / "config.json").exists():
        return str(dst)
    import shutil

    import numpy as np
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoTokenizer

    from ossa.reference.loader import load_weights

    cfg, w = load_weights(str(src))
    hf_layer = {
        "attn_norm": "input_layernorm", "wq": "self_attn.q_proj", "wk": "self_attn.k_proj",
        "wv": "self_attn.v_proj", "wo": "self_attn.o_proj", "bq": "self_attn.q_proj.bias",
        "bk": "self_attn.k_proj.bias", "bv": "self_attn.v_proj.bias", "q_norm": "self_attn.q_norm",
        "k_norm": "self_attn.k_norm", "ffn_norm": "post_attention_layernorm", "w_gate": "mlp.gate_proj",
        "w_up": "mlp.up_proj", "w_down": "mlp.down_proj",
    }  # fmt: skip

    def unpermute(m: np.ndarray, n_head: int) -> np.ndarray:
        # llama.cpp stores each head's rows as interleaved (x0, x1) pairs; HF as two halves.
        rows, cols = m.shape
        return m.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)

    state: dict[str, torch.Tensor] = {}
    for name, arr in w.items():
        if name == "rope_freqs":
            continue
        if name.startswith("layers."):
            _, i, field = name.split(".")
            if cfg["rope_style"] == "interleaved" and field in ("wq", "wk"):
                arr = unpermute(arr, cfg["n_head"] if field == "wq" else cfg["n_head_kv"])
            key = hf_layer[field]
            key = f"model.layers.{i}.{key}" + ("" if key.endswith(".bias") else ".weight")
        elif name == "output":
            if cfg["tied_embeddings"]:
                continue
            key = "lm_head.weight"
        else:
            key = {"tok_embd": "model.embed_tokens.weight", "output_norm": "model.norm.weight"}[name]
        state[key] = torch.from_numpy(np.ascontiguousarray(arr)).to(torch.bfloat16)
    hf_cfg = AutoConfig.from_pretrained(str(src.parent), gguf_file=src.name)
    hf_cfg.tie_word_embeddings = bool(cfg["tied_embeddings"])
    if not getattr(hf_cfg, "architectures", None):  # transformers' GGUF reader leaves it unset; vLLM needs it
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        hf_cfg.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[hf_cfg.model_type]]
    hf_cfg.dtype = torch.bfloat16
    tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    hf_cfg.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    tmp.rename(dst)
    return str(dst)


# -- HF transformers generate ----------------------------------------------------------------------


def run_hf(
    folder: str, batches: dict[str, list[list[int]]], output_len: int, threads: int, batch: int = 16
) -> dict[str, Run]:
    """transformers `generate`, bf16, greedy, `batch` prompts at a time (all prompts have one length,
    so no padding), min_new_tokens = max_new_tokens so EOS does not end a row early."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    model.eval()
    ready = time.perf_counter() - t0

    def gen(prompts: list[list[int]], n: int) -> int:
        ids = torch.tensor(prompts, dtype=torch.long)
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                do_sample=False, pad_token_id=0,
            )  # fmt: skip
        return int(out.shape[0] * (out.shape[1] - ids.shape[1]))

    first = next(iter(batches.values()))
    gen([first[0][:16]], 4)  # warm up
    runs = {}
    for name, prompts in batches.items():
        t = time.perf_counter()
        n_out = sum(gen(prompts[i : i + batch], output_len) for i in range(0, len(prompts), batch))
        runs[name] = Run(
            "transformers", time.perf_counter() - t, n_out, ready, note=f"batch {min(batch, len(prompts))}"
        )
    return runs


# -- vLLM-CPU (own venv) and the worker entry point ------------------------------------------------


def vllm_best_dtype() -> str:
    """vLLM-CPU's dtype on this CPU: bfloat16 where the CPU multiplies bf16 natively (AVX512-BF16 or
    AMX-BF16; what vLLM's CPU docs recommend), else float32: without those instructions vLLM's bf16
    linear layers fall back from oneDNN to emulated torch kernels ("Failed to create oneDNN linear")."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "bfloat16"
    return "bfloat16" if ("avx512_bf16" in flags or "amx_bf16" in flags) else "float32"


def _vllm_worker(job_path: str, result_path: str) -> None:
    from vllm import LLM, SamplingParams  # type: ignore[import-not-found]

    job = json.loads(Path(job_path).read_text())
    if job.get("workload") == "structured":
        _vllm_structured_worker(job, result_path)
        return
    t0 = time.perf_counter()
    dtype = job.get("vllm_dtype") or vllm_best_dtype()
    # The longest sequence of the workload (a 1B-shaped folder's config allows 131,072 tokens, whose
    # KV cache alone fills VLLM_CPU_KVCACHE_SPACE's 4 GiB and vLLM then refuses to start).
    longest = max(len(p) for b in job["batches"].values() for p in b) + job["output_len"] + 16
    llm = LLM(
        model=job["hf_folder"],
        dtype=dtype,
        enable_prefix_caching=False,
        max_num_seqs=64,
        max_model_len=longest,
    )
    ready = time.perf_counter() - t0
    sp = SamplingParams(temperature=0.0, max_tokens=job["output_len"], ignore_eos=True)
    first = next(iter(job["batches"].values()))
    llm.generate([{"prompt_token_ids": first[0][:16]}], SamplingParams(max_tokens=4), use_tqdm=False)
    runs = {}
    for name, prompts in job["batches"].items():
        t = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
        wall = time.perf_counter() - t
        n_out = sum(len(o.outputs[0].token_ids) for o in outs)
        runs[name] = dict(wall_s=wall, output_tokens=n_out, note=dtype, extra={}, ready_s=ready)
    Path(result_path).write_text(json.dumps(dict(ready_s=ready, runs=runs, profile={})))


def _vllm_structured_worker(job: dict[str, Any], result_path: str) -> None:
    """benchmarks/structured.py's workload on vLLM: the same prompt ids, ``concurrency`` seeded
    requests, plain (ignore_eos) and under the job's JSON schema (vLLM's structured outputs, its own
    backend choice), ``repeats`` runs each, interleaved; best wall time of each."""
    from vllm import LLM, SamplingParams  # type: ignore[import-not-found]
    from vllm.sampling_params import StructuredOutputsParams  # type: ignore[import-not-found]

    t0 = time.perf_counter()
    dtype = job.get("vllm_dtype") or vllm_best_dtype()
    llm = LLM(model=job["hf_folder"], dtype=dtype, enable_prefix_caching=False, max_num_seqs=64)
    ready = time.perf_counter() - t0
    n, common = job["concurrency"], {"max_tokens": job["max_tokens"], "temperature": job["temperature"]}
    so = {"json": job["schema"], "whitespace_pattern": job.get("whitespace_pattern")}
    plain = [SamplingParams(seed=i, ignore_eos=True, **common) for i in range(n)]
    prompts = [{"prompt_token_ids": job["prompt_token_ids"]}] * n

    def constrained() -> list[Any]:  # fresh params each run: vLLM records its backend choice in them
        made = [StructuredOutputsParams(**so) for _ in range(n)]
        return [SamplingParams(seed=i, structured_outputs=made[i], **common) for i in range(n)]

    # Warm up at the timed batch size, plain and constrained, so that no first-time work (graphs for a
    # new batch shape, the grammar) falls in a timed run.
    short = {**common, "max_tokens": 4}
    llm.generate(
        prompts, [SamplingParams(seed=i, ignore_eos=True, **short) for i in range(n)], use_tqdm=False
    )
    warm = [
        SamplingParams(seed=i, structured_outputs=StructuredOutputsParams(**so), **short) for i in range(n)
    ]
    llm.generate(prompts, warm, use_tqdm=False)
    backend = getattr(warm[0].structured_outputs, "_backend", None)
    runs: dict[str, Any] = {}
    for _ in range(job["repeats"]):
        for name in ("plain", "json"):
            t = time.perf_counter()
            outs = llm.generate(prompts, plain if name == "plain" else constrained(), use_tqdm=False)
            wall = time.perf_counter() - t
            tokens = sum(len(o.outputs[0].token_ids) for o in outs)
            texts = [o.outputs[0].text for o in outs]
            if name not in runs or tokens / wall > runs[name]["output_tokens"] / runs[name]["wall_s"]:
                runs[name] = dict(wall_s=wall, output_tokens=tokens, extra={"texts": texts}, ready_s=ready)
    profile = {"backend": backend, "dtype": dtype}
    Path(result_path).write_text(json.dumps(dict(ready_s=ready, runs=runs, profile=profile)))


def _run_json(r: Run) -> dict[str, Any]:
    return dict(wall_s=r.wall_s, output_tokens=r.output_tokens, note=r.note, extra=r.extra, ready_s=r.ready_s)


def worker(engine: str, job_path: str, result_path: str) -> None:
    """One engine on the job's workloads, in this (its own) process; writes
    {"ready_s", "runs": {name: {wall_s, output_tokens, note, extra}}, "profile"}."""
    if engine == "vllm":
        _vllm_worker(job_path, result_path)
        return
    job = json.loads(Path(job_path).read_text())
    batches, output_len, threads = job["batches"], job["output_len"], job["threads"]
    profile: dict[str, Any] = {}
    if engine == "ossa":
        ready, runs, profile = run_ossa(
            job["model"],
            batches,
            output_len,
            threads,
            job.get("dtype", "auto"),
            bool(job.get("quantized_activations", False)),
        )
    elif engine == "llama":
        modes = tuple(job.get("llama_modes", ("batched", "sequential")))
        runs = {"batched": run_llama(job["model"], batches["batched"], output_len, threads, modes)}
        if "single" in batches:
            runs["single"] = run_llama(job["model"], batches["single"], output_len, threads, ("sequential",))
        ready = runs["batched"].ready_s
    elif engine == "hf":
        runs = run_hf(job["hf_folder"], batches, output_len, threads, job.get("hf_batch", 16))
        ready = next(iter(runs.values())).ready_s
    else:
        raise SystemExit(f"unknown engine {engine!r}")
    out = dict(ready_s=ready, runs={k: _run_json(r) for k, r in runs.items()}, profile=profile)
    Path(result_path).write_text(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit("usage: peers.py --worker ENGINE JOB.json RESULT.json (started by peer_env.run_child)")
