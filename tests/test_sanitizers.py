"""The C++ core under AddressSanitizer and UndefinedBehaviorSanitizer.

The perfgate driver (tools/perfgate/perfgate_main.cpp) is built natively with -DOSSA_SANITIZE=ON into
build/asan-ci and runs its workloads outside valgrind: a 1 MB tokenizer encode, a batch-64 sampler step,
a 256-request scheduler step, and a 128-token prefill plus a decode step of the default model (through
the AMX kernels where the CPU has them, else the f32 kernels), as loaded by default and with dtype
"bfloat16". Any sanitizer report, or any exit other
than 0, fails the test. The same build holds the Python module, and tests/test_llm_threads.py runs on it
(the sanitizer runtimes preloaded into Python): many threads sharing one LLM, with aborts and
exceptions, one round each. The sanitizer build is -O1 (CMakeLists.txt says why) and goes through
ccache where it is installed: about 10 minutes of build the first time on 2 busy shared cores (at -O3
it took ~2.6x the compile CPU and ran past the build's 30-minute timeout there); skipped where cmake
is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "asan-ci"
WORKLOADS = ["encode_1mb", "sampler_b64", "scheduler_256", "prefill_128", "decode_1", "bf16_model"]


@pytest.fixture(scope="module")
def driver() -> Path:
    if shutil.which("cmake") is None:
        pytest.skip("cmake is needed to build the sanitizer driver")
    generator = ["-G", "Ninja"] if shutil.which("ninja") and not (BUILD / "Makefile").exists() else []
    configure = [
        "cmake", "-S", str(ROOT), "-B", str(BUILD), *generator, "-DCMAKE_BUILD_TYPE=Release",
        "-DOSSA_SANITIZE=ON", "-DOSSA_BUILD_PYTHON=ON", f"-DPython_EXECUTABLE={sys.executable}",
        "-DOSSA_BUILD_PERFGATE=ON",
    ]  # fmt: skip
    if shutil.which("ccache"):  # the same objects, from the cache when this tree was built before
        configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
    jobs = str(max(1, min(4, os.cpu_count() or 1)))
    build = ["cmake", "--build", str(BUILD), "--target", "ossa_perfgate", "_core", "-j", jobs]
    for cmd in (configure, build):
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


def test_llm_threads_under_asan_and_ubsan(driver: Path) -> None:
    def runtime(lib: str) -> str:
        r = subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True, text=True)
        return r.stdout.strip()

    runtimes = [runtime("libasan.so"), runtime("libubsan.so")]
    if not all(os.path.isabs(r) for r in runtimes):
        pytest.skip("gcc does not say where its sanitizer runtimes are")
    env = {
        **os.environ,
        "LD_PRELOAD": ":".join(runtimes),
        "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
        "OSSA_CORE_DIR": str(driver.parent),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
        "OSSA_THREAD_ROUNDS": "1",
        "OMP_NUM_THREADS": "2",
    }
    # The Python side must be this tree's, which the ASan core was built from: an editable install
    # of another checkout puts its import hook ahead of PYTHONPATH.
    probe = [sys.executable, "-c", "import ossa; print(ossa.__file__)"]
    where = subprocess.run(probe, capture_output=True, text=True, env=env, cwd=ROOT).stdout.strip()
    if not where.startswith(str(ROOT / "src")):
        pytest.skip(f"ossa imports from {where or '?'} here, not from this tree's src/")
    test = str(ROOT / "tests" / "test_llm_threads.py")
    cmd = [sys.executable, "-m", "pytest", test, "-q", "-x", "-p", "no:cacheprovider", "-k", "not twin"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1200)
    report = (r.stdout + r.stderr)[-6000:]
    assert r.returncode == 0, f"pytest exited {r.returncode}:\n{report}"
    for marker in ("ERROR: AddressSanitizer", "runtime error:"):
        assert marker not in r.stdout + r.stderr, report
