"""Issue rates of the AVX2 instructions the integer and f32 kernels are made of, alone and in pairs.

The kernels' speed on a CPU without VNNI is set by how many of these instructions retire per cycle
and which of them compete for the same execution pipes. This compiles a small C++ program (the
system's c++ with -mavx2 -mfma), runs a loop of 12 of each instruction (or of two instructions
alternating), and prints instructions per ns and
the rate relative to VFMADD231PS. Two instructions that share pipes run, together, at the rate of
one of them alone; two that do not, at close to the sum.

    python benchmarks/isa_ports.py [--iters 50000000]

On the AVX2-only AMD Zen 3 VM (docs/performance-kquant.md, thirteenth pass) VPMADDWD, VPMADDUBSW,
VPADDSW, VPSHUFB and VCVTDQ2PS issue at 2 per cycle and VPADDW / VPADDD at 4; VPMADDWD shares its
pipes with VPMADDUBSW and with VFMADD231PS. Hence the kernels add their int16 sums with VPADDW, and
the exact default's two int16 pieces (2 VPMADDWD + 2 VPADDD per 16 products) cannot outrun an f32
GEMM (2 FMAs per 16 products) on such a CPU.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# name -> the two instructions that alternate over the 12 chains (the same one twice: alone)
MIXES: dict[str, tuple[str, str]] = {
    "vfmadd231ps": ("vfmadd231ps", "vfmadd231ps"),
    "vpmaddwd": ("vpmaddwd", "vpmaddwd"),
    "vpmaddubsw": ("vpmaddubsw", "vpmaddubsw"),
    "vpaddw": ("vpaddw", "vpaddw"),
    "vpaddsw": ("vpaddsw", "vpaddsw"),
    "vpaddd": ("vpaddd", "vpaddd"),
    "vpshufb": ("vpshufb", "vpshufb"),
    "vcvtdq2ps": ("vcvtdq2ps", "vcvtdq2ps"),
    "vpmaddwd + vfmadd231ps": ("vpmaddwd", "vfmadd231ps"),
    "vpmaddubsw + vpmaddwd": ("vpmaddubsw", "vpmaddwd"),
    "vpmaddubsw + vpaddsw": ("vpmaddubsw", "vpaddsw"),
    "vpmaddubsw + vpaddw": ("vpmaddubsw", "vpaddw"),
    "vpmaddwd + vpaddd": ("vpmaddwd", "vpaddd"),
    "vfmadd231ps + vpaddd": ("vfmadd231ps", "vpaddd"),
}
UNARY = {"vcvtdq2ps"}


def asm_body(a: str, b: str) -> str:
    """12 instructions, none reading another's result (VFMADD231PS also reads its destination:
    12 chains of one FMA each per iteration, 4 cycles apart, still above 2 per cycle)."""
    lines = []
    for i in range(12):
        op = a if i % 2 == 0 else b
        lines.append(f"{op} %%ymm12, %%ymm{i}" if op in UNARY else f"{op} %%ymm12, %%ymm13, %%ymm{i}")
    return "\\n".join(lines) + "\\n"


def program(iters: int) -> str:
    clobbers = ", ".join(f'"xmm{i}"' for i in range(14))
    out = [
        "#include <chrono>",
        "#include <cstdio>",
        "int main() {",
        f"  const long n = {iters};",
        '  __asm__ volatile("vpxor %%ymm12, %%ymm12, %%ymm12\\n"',
        '                   "vpxor %%ymm13, %%ymm13, %%ymm13" ::: "xmm12", "xmm13");',
    ]
    for name, (a, b) in MIXES.items():
        out += [
            "  {",
            "    const auto t0 = std::chrono::steady_clock::now();",
            f'    for (long i = 0; i < n; ++i) __asm__ volatile("{asm_body(a, b)}" ::: {clobbers});',
            "    const std::chrono::duration<double> s = std::chrono::steady_clock::now() - t0;",
            f'    std::printf("%s\\t%.4f\\n", "{name}", n * 12.0 / s.count() / 1e9);',
            "  }",
        ]
    out.append("}")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=50_000_000, help="loop iterations (12 instructions each)")
    args = ap.parse_args()
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        print("isa_ports: no C++ compiler found", file=sys.stderr)
        return 1
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if " avx2" not in flags or " fma" not in flags:
        print("isa_ports: this CPU has no AVX2 + FMA", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "isa_ports.cpp", Path(tmp) / "isa_ports"
        src.write_text(program(args.iters))
        subprocess.run([cxx, "-O2", "-mavx2", "-mfma", "-o", str(exe), str(src)], check=True)
        res = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    rates = {name: float(v) for name, v in (line.split("\t") for line in res.strip().splitlines())}
    fma = rates["vfmadd231ps"]
    names = [ln.split(":", 1)[1].strip() for ln in flags.splitlines() if ln.startswith("model name")]
    model = names[0] if names else "?"
    print(f"CPU: {model}; {args.iters:,} iterations of 12 independent instructions")
    print(f"{'instructions':<26} {'per ns':>8} {'x FMA':>7}")
    for name, r in rates.items():
        print(f"{name:<26} {r:8.2f} {r / fma:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
