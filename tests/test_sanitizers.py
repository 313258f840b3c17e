"""The C++ core under AddressSanitizer and UndefinedBehaviorSanitizer.

The perfgate driver (tools/perfgate/perfgate_main.cpp) is built natively with -DOSSA_SANITIZE=ON into
build/asan-ci and runs its workloads outside valgrind: a 1 MB tokenizer encode, a batch-64 sampler step,
a 256-request scheduler step, and a 128-token prefill plus a decode step of the default model (through
the AMX kernels where the CPU has them, else the f32 kernels), as loaded by default and with dtype
"bfloat16". Any sanitizer report, or any exit other
than 0, fails the test. About 4 minutes of build on 2 cores the first time; skipped where cmake is
missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "asan-ci"
COMPONENTS = "util;model;kernels;tokenizer;sampling;cache;scheduler;engine"
WORKLOADS = ["encode_1mb", "sampler_b64", "scheduler_256", "prefill_128", "decode_1", "bf16_model"]


@pytest.fixture(scope="module")
def driver() -> Path:
    if shutil.which("cmake") is None:
        pytest.skip("cmake is needed to build the sanitizer driver")
    generator = ["-G", "Ninja"] if shutil.which("ninja") and not (BUILD / "Makefile").exists() else []
    configure = [
        "cmake", "-S", str(ROOT), "-B", str(BUILD), *generator, "-DCMAKE_BUILD_TYPE=Release",
        "-DOSSA_SANITIZE=ON", "-DOSSA_BUILD_PYTHON=OFF", "-DOSSA_BUILD_PERFGATE=ON",
        f"-DOSSA_COMPONENTS={COMPONENTS}",
    ]  # fmt: skip
    jobs = str(max(1, min(4, os.cpu_count() or 1)))
    for cmd in (configure, ["cmake", "--build", str(BUILD), "--target", "ossa_perfgate", "-j", jobs]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    path = BUILD / "csrc" / "ossa_perfgate"
    assert path.exists()
    return path


def test_core_workloads_are_clean_under_asan_and_ubsan(driver: Path, default_model_path: str) -> None:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "2",
        # Leak checking needs ptrace, which containers often forbid; addressing errors are the target.
        "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    }
    r = subprocess.run(
        [str(driver), default_model_path, *WORKLOADS], capture_output=True, text=True, env=env, timeout=1200
    )
    report = (r.stdout + r.stderr)[-6000:]
    assert r.returncode == 0, f"driver exited {r.returncode}:\n{report}"
    for marker in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer"):
        assert marker not in r.stderr, report
