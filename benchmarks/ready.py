"""Time to ready: ``import ossa``, ``LLM(model=...)`` and the first request's first token, each run
in a fresh process (cold Python, warm page cache), with the wall and CPU time of every stage.

    OSSA_CORE_DIR=build/dev/csrc PYTHONPATH=src python benchmarks/ready.py [MODEL] [--runs 3] [--stages]

MODEL defaults to the 1B Q4_K_M benchmark file (scripts/make_bench_models.py). Prints, per run,
the wall seconds of import / LLM() / first 1-token request and the process CPU seconds of LLM();
``--stages`` adds the wall, user and system CPU seconds and page faults of each part of
``LLM()``. The load average is printed too: on a busy machine the wall times are upper bounds of
a quiet one's; the CPU times move less.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

BENCH_1B = Path.home() / ".cache" / "ossa" / "bench" / "llama-1b-Q4_K_M.gguf"


def _usage() -> tuple[float, float, float, float]:
    """Wall, user CPU, system CPU seconds and minor page faults of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), r.ru_utime, r.ru_stime, float(r.ru_minflt)


def _child(model: str, stages: bool) -> None:
    t0, c0 = time.perf_counter(), time.process_time()
    import ossa

    llm_class, params_class = ossa.LLM, ossa.SamplingParams  # what `from ossa import LLM` imports
    t1, c1 = time.perf_counter(), time.process_time()
    timings: dict[str, list[float]] = {}
    u1 = _usage()
    if stages:
        from ossa import backend, config, llm, models

        def wrap(owner: object, name: str, label: str) -> None:
            fn = getattr(owner, name)

            def timed(*args: object, **kwargs: object) -> object:
                before = _usage()
                try:
                    return fn(*args, **kwargs)
                finally:
                    t = timings.setdefault(label, [0.0, 0.0, 0.0, 0.0])
                    for i, (a, b) in enumerate(zip(_usage(), before, strict=True)):
                        t[i] += a - b

            setattr(owner, name, timed)

        wrap(models, "load_model", "load_model")
        wrap(backend.CppBackend, "load_tokenizer", "load_tokenizer")
        wrap(config.EngineArgs, "create_config", "create_config")
        wrap(backend.CppBackend, "create_engine", "create_engine")
        wrap(llm, "InputProcessor", "input_processor")
    llm_obj = llm_class(model=model)
    t2, c2 = time.perf_counter(), time.process_time()
    timings["LLM() total"] = [a - b for a, b in zip(_usage(), u1, strict=True)]
    params = params_class(max_tokens=1, temperature=0.0)
    llm_obj.generate(["Hello, my name is"], params, use_tqdm=False)
    t3, c3 = time.perf_counter(), time.process_time()
    print(
        json.dumps(
            {
                "import": [t1 - t0, c1 - c0],
                "LLM": [t2 - t1, c2 - c1],
                "first_token": [t3 - t2, c3 - c2],
                "stages": timings,
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=str(BENCH_1B))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--stages", action="store_true", help="wall and CPU seconds of each part of LLM()")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.model, args.stages)
        return
    print(f"model: {args.model}  load average: {os.getloadavg()[0]:.2f}")
    print(f"{'run':>3s} {'import s':>9s} {'LLM() s':>8s} {'LLM() cpu':>10s} {'1st token s':>12s}")
    for i in range(args.runs):
        cmd = [sys.executable, __file__, args.model, "--child"] + (["--stages"] if args.stages else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        imp, ready, first = r["import"], r["LLM"], r["first_token"]
        print(f"{i + 1:3d} {imp[0]:9.3f} {ready[0]:8.3f} {ready[1]:10.3f} {first[0]:12.3f}")
        for name, (wall, user, system, faults) in r["stages"].items():
            print(
                f"      {name:16s} wall {wall:6.3f} s  user {user:6.3f} s  sys {system:6.3f} s  "
                f"minor faults {faults / 1e3:7.1f}k"
            )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
