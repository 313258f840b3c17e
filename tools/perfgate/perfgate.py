"""The callgrind regression gate: instruction counts of fixed workloads against a committed baseline.

    python tools/perfgate/perfgate.py            # build, measure, compare; exit 1 on a regression
    python tools/perfgate/perfgate.py --update   # measure and rewrite the baseline (say why in the commit)

Wall-clock time on shared CI machines is noise and hardware counters are not available there, so the
gate counts instructions with valgrind's callgrind, which gives the same count for the same binary and
input. The workloads (run by the C++ driver tools/perfgate/perfgate_main.cpp, one thread, fixed inputs,
only the measured region counted):

    encode_1mb     tokenizer encode of 1 MB of text (default model's vocabulary)
    sampler_b64    one sampler step at batch 64 (top-k, top-p, min-p, penalties, draw)
    scheduler_256  one schedule() + update() step with 256 running requests
    prefill_128    a 128-token prefill of the default model
    decode_1       one decode step of the default model after that prefill
    decode_1b_q4km one decode step (after 8 tokens) of a 2-layer Llama-3.2-1B-shaped model of random
                   Q4_K / Q6_K blocks laid out as Q4_K_M, tied 49152 x 2048 output (the K-quant
                   single-row kernels; made by scripts/make_bench_models.py --perfgate, numpy only)
    engine_step_b16  one engine step decoding 16 requests (schedule, forward, sample, detokenize,
                   stop strings, outputs): the seam around the kernels

A workload more than --tolerance (5%) above its baseline fails, by name. The core is built portable
(-DOSSA_PORTABLE=ON, AVX2 at most) into build/perfgate, because valgrind 3.19 cannot decode AVX-512.
Counts depend on the compiler and the valgrind version, which the baseline records; a mismatch is
reported next to the table.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE = Path(__file__).resolve().parent / "baseline.json"
BUILD_DIR = ROOT / "build" / "perfgate"
WORKLOADS = (
    "encode_1mb",
    "sampler_b64",
    "scheduler_256",
    "prefill_128",
    "decode_1",
    "decode_1b_q4km",
    "engine_step_b16",
)
# One driver process per group, so a workload's count never depends on which others were asked for
# (they would share the heap's state). The model workloads share one process (the load and the
# prefill) and always run together. Groups run in parallel, the longest (the model) first.
GROUPS = (
    ("prefill_128", "decode_1"),
    ("decode_1b_q4km",),
    ("engine_step_b16",),
    ("encode_1mb",),
    ("sampler_b64",),
    ("scheduler_256",),
)
# Groups whose driver takes the K-quant model instead of the default one (kquant_model()).
KQUANT_GROUPS = (("decode_1b_q4km",),)
TOLERANCE = 0.05
# See no_fma.h: valgrind 3.19 emulates FMA instructions ~1000x slower than native, so the gate's build
# splits them into multiply + add, and libm's fma()/fmaf() take glibc's non-FMA variant.
NO_FMA_HEADER = Path(__file__).resolve().parent / "no_fma.h"
GLIBC_TUNABLES = "glibc.cpu.hwcaps=-FMA,-FMA4"


class GateError(RuntimeError):
    """The gate could not measure (missing tool, build failure, driver failure)."""


@dataclass
class Measurement:
    instructions: int
    result: str = ""  # the driver's result/checksum line for the workload


@dataclass
class Verdict:
    workload: str
    baseline: int | None
    measured: int | None
    ok: bool
    note: str = ""

    @property
    def change(self) -> float | None:
        if self.baseline is None or self.measured is None or self.baseline == 0:
            return None
        return self.measured / self.baseline - 1.0


def compare(
    measured: dict[str, Measurement], baseline: dict[str, dict[str, object]], tolerance: float = TOLERANCE
) -> list[Verdict]:
    """One verdict per workload of either side: more than tolerance above the baseline fails, and so
    does a workload missing on one side (a new workload needs --update, a lost one is a broken gate)."""
    verdicts = []
    for name in list(baseline) + [w for w in measured if w not in baseline]:
        base = baseline.get(name)
        m = measured.get(name)
        if base is None:
            count_now = m.instructions if m else None
            verdicts.append(Verdict(name, None, count_now, False, "no baseline (--update)"))
            continue
        count = int(base["instructions"])  # type: ignore[call-overload]
        if m is None:
            verdicts.append(Verdict(name, count, None, False, "not measured"))
            continue
        ok = m.instructions <= count * (1.0 + tolerance)
        note = "" if ok else f"REGRESSION: more than {tolerance:.0%} above the baseline"
        if ok and m.instructions < count * (1.0 - tolerance):
            note = "faster: consider --update"
        if base.get("result") not in (None, m.result):
            note = (note + "; " if note else "") + f"result changed ({base.get('result')} -> {m.result})"
        verdicts.append(Verdict(name, count, m.instructions, ok, note))
    return verdicts


def format_table(verdicts: list[Verdict]) -> str:
    header = f"{'workload':<15} {'baseline Ir':>15} {'measured Ir':>15} {'change':>8}  status"
    lines = [header, "-" * len(header)]
    for v in verdicts:
        base = f"{v.baseline:,}" if v.baseline is not None else "-"
        meas = f"{v.measured:,}" if v.measured is not None else "-"
        change = f"{v.change:+.2%}" if v.change is not None else "-"
        status = "ok" if v.ok else "FAIL"
        note = f"  {v.note}" if v.note else ""
        lines.append(f"{v.workload:<15} {base:>15} {meas:>15} {change:>8}  {status}{note}")
    return "\n".join(lines)


_TRIGGER = re.compile(r"^desc: Trigger: Client Request: (\S+)\s*$", re.M)
_TOTALS = re.compile(r"^totals:\s*(\d+)", re.M)
_SUMMARY = re.compile(r"^summary:\s*(\d+)", re.M)


def parse_dump(text: str) -> tuple[str, int] | None:
    """(workload, instructions) of one callgrind dump made by CALLGRIND_DUMP_STATS_AT, else None."""
    trigger = _TRIGGER.search(text)
    if trigger is None:
        return None
    count = _TOTALS.search(text) or _SUMMARY.search(text)
    if count is None:
        raise GateError(f"callgrind dump for {trigger.group(1)} has no totals line")
    return trigger.group(1), int(count.group(1))


def tool_version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise GateError(f"{cmd[0]} is needed by the gate: {e}") from e
    return out.strip().splitlines()[0] if out.strip() else ""


def build(build_dir: Path, quiet: bool) -> Path:
    """Configures (once) and builds the portable core and the driver; returns the driver's path."""
    if shutil.which("cmake") is None:
        raise GateError("cmake is needed to build the gate's driver")
    generator = ["-G", "Ninja"] if shutil.which("ninja") and not (build_dir / "Makefile").exists() else []
    configure = [
        "cmake", "-S", str(ROOT), "-B", str(build_dir), *generator, "-DCMAKE_BUILD_TYPE=Release",
        "-DOSSA_PORTABLE=ON", "-DOSSA_BUILD_PYTHON=OFF", "-DOSSA_BUILD_PERFGATE=ON",
        f"-DCMAKE_CXX_FLAGS=-mno-fma -include {NO_FMA_HEADER}",
    ]  # fmt: skip
    if shutil.which("ccache"):  # ccache hands back the objects the compiler would make: the same counts
        configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
    out = subprocess.DEVNULL if quiet else None
    for cmd in (configure, ["cmake", "--build", str(build_dir), "--target", "ossa_perfgate", "-j2"]):
        r = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise GateError(f"build failed: {' '.join(cmd)}\n{r.stderr[-4000:]}")
    driver = build_dir / "csrc" / "ossa_perfgate"
    if not driver.exists():
        raise GateError(f"the build made no driver at {driver}")
    return driver


def compiler_id(build_dir: Path) -> str:
    cache = build_dir / "CMakeCache.txt"
    text = cache.read_text() if cache.exists() else ""
    m = re.search(r"^CMAKE_CXX_COMPILER:\w+=(.+)$", text, re.M)
    return tool_version([m.group(1), "--version"]) if m else "unknown"


def run_group(
    driver: Path, model: str, workloads: tuple[str, ...], out_dir: Path, cpu: int
) -> dict[str, Measurement]:
    """Runs one driver process under callgrind, pinned to `cpu`, and reads the dump of each workload."""
    prefix = out_dir / ("callgrind." + "+".join(workloads))
    env = dict(
        os.environ,
        OMP_THREAD_LIMIT="1",
        OMP_NUM_THREADS="1",
        OMP_WAIT_POLICY="PASSIVE",
        GLIBC_TUNABLES=GLIBC_TUNABLES,
    )
    cmd = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={prefix}",
        str(driver), model, *workloads,
    ]  # fmt: skip
    # One CPU in the affinity mask: the forward sizes its pool by omp_get_num_procs(), which follows
    # the mask, so every parallel_for runs inline on the calling thread.
    r = subprocess.run(["taskset", "-c", str(cpu), *cmd], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise GateError(f"driver failed under valgrind ({' '.join(workloads)}):\n{r.stderr[-4000:]}")
    if "thread_limit=1 num_procs=1 client_requests=1" not in r.stdout:
        raise GateError(f"driver is not single-threaded with callgrind client requests:\n{r.stdout}")
    results = {}
    for line in r.stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "workload" in fields:
            name = fields.pop("workload")
            results[name] = " ".join(f"{k}={v}" for k, v in fields.items())
    measured = {}
    for dump in sorted(out_dir.glob(prefix.name + ".*")):
        parsed = parse_dump(dump.read_text(errors="replace"))
        if parsed is not None:
            measured[parsed[0]] = Measurement(parsed[1], results.get(parsed[0], ""))
    missing = [w for w in workloads if w not in measured]
    if missing:
        raise GateError(f"no callgrind dump for {', '.join(missing)}:\n{r.stderr[-2000:]}")
    return measured


def default_model() -> str:
    env = os.environ.get("OSSA_PERFGATE_MODEL")
    if env:
        return env
    sys.path.insert(0, str(ROOT / "src"))
    from ossa.models import resolve  # the default model, pulled into OSSA_HOME on first use

    return resolve("smollm2-135m")


def kquant_model() -> str:
    """The decode_1b_q4km model, written on first use (deterministic: seeded numpy, a few seconds)."""
    env = os.environ.get("OSSA_PERFGATE_KQUANT_MODEL")
    if env:
        return env
    sys.path.insert(0, str(ROOT / "scripts"))
    sys.path.insert(0, str(ROOT / "src"))
    from make_bench_models import perfgate_model

    return perfgate_model("1b", 2)


def measure(driver: Path, model: str, workloads: list[str], jobs: int) -> dict[str, Measurement]:
    if shutil.which("taskset") is None:
        raise GateError("taskset (util-linux) is needed to pin the driver to one CPU")
    groups = [g for g in GROUPS if any(w in workloads for w in g)]
    cpus = sorted(os.sched_getaffinity(0))
    jobs = max(1, min(jobs, len(cpus)))
    measured: dict[str, Measurement] = {}
    with tempfile.TemporaryDirectory(prefix="perfgate.") as tmp:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [
                pool.submit(
                    run_group,
                    driver,
                    kquant_model() if group in KQUANT_GROUPS else model,
                    group,
                    Path(tmp),
                    cpus[i % jobs],
                )  # fmt: skip
                for i, group in enumerate(groups)
            ]
            for future in futures:
                measured.update(future.result())
    return {w: m for w, m in measured.items() if w in workloads}


def load_baseline(path: Path) -> dict[str, object]:
    if not path.exists():
        return {"workloads": {}}
    return json.loads(path.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="rewrite the baseline with the measured counts")
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--build-dir", type=Path, default=BUILD_DIR)
    parser.add_argument("--model", help="GGUF file (default: $OSSA_PERFGATE_MODEL or the default model)")
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--tolerance", type=float, default=TOLERANCE)
    parser.add_argument("--jobs", type=int, default=2, help="driver processes run at once")
    parser.add_argument("--json-out", type=Path, help="also write the measured counts here")
    parser.add_argument(
        "--from-results", type=Path, help="compare counts saved by --json-out (no build, no run)"
    )
    args = parser.parse_args(argv)

    baseline = load_baseline(args.baseline)
    try:
        if args.from_results:
            saved = json.loads(args.from_results.read_text())
            measured = {k: Measurement(int(v["instructions"]), str(v.get("result", ""))) for k, v in
                        saved["workloads"].items()}  # fmt: skip
            env = dict(saved.get("environment", {}))
        else:
            valgrind = tool_version(["valgrind", "--version"])
            driver = build(args.build_dir, quiet=True)
            env = {"valgrind": valgrind, "compiler": compiler_id(args.build_dir)}
            measured = measure(driver, args.model or default_model(), args.workloads, args.jobs)
    except GateError as e:
        print(f"perfgate: {e}", file=sys.stderr)
        return 2
    record = {
        "environment": env,
        "workloads": {k: {"instructions": m.instructions, "result": m.result} for k, m in measured.items()},
    }
    if args.json_out:
        args.json_out.write_text(json.dumps(record, indent=2) + "\n")

    if args.update:
        workloads = dict(baseline.get("workloads", {}))  # type: ignore[call-overload]
        workloads.update(record["workloads"])
        args.baseline.write_text(json.dumps({"environment": env, "workloads": workloads}, indent=2) + "\n")
        print(f"perfgate: baseline {args.baseline} updated ({', '.join(measured)})")
        print(format_table(compare(measured, {k: workloads[k] for k in measured}, args.tolerance)))
        return 0

    base_workloads = {k: v for k, v in baseline.get("workloads", {}).items() if k in args.workloads}  # type: ignore[union-attr]
    verdicts = compare(measured, base_workloads, args.tolerance)
    print(f"perfgate: callgrind instruction counts, tolerance +{args.tolerance:.0%}")
    print(format_table(verdicts))
    base_env = baseline.get("environment", {})
    for key, value in env.items():
        if isinstance(base_env, dict) and base_env.get(key) not in (None, value):
            print(f"note: {key} differs from the baseline's ({base_env[key]!r}); counts may shift")
    failed = [v.workload for v in verdicts if not v.ok]
    if failed:
        print(f"perfgate: FAILED: {', '.join(failed)}")
        return 1
    print("perfgate: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
