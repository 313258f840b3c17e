"""Writes (or, with --check, compares) src/ossa/_core.pyi from the built extension with nanobind's stubgen.

    python tools/stubgen.py --core-dir build/dev/csrc           # regenerate after a binding change
    python tools/stubgen.py --core-dir build/dev/csrc --check   # exit 1 if the committed stub is stale

Without --core-dir it stubs the installed ``ossa._core``. CI runs the check, so the stub in the
repository always describes the module that is built from it.
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STUB = ROOT / "src" / "ossa" / "_core.pyi"
HEADER = '''"""ossa's C++ core (private; use the ossa package).

Generated from the built extension by nanobind's stubgen: run `python tools/stubgen.py --core-dir
<build>/csrc` after changing the bindings (CI checks that this file matches the built module).
"""
'''


def generate(core_dir: str | None) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "_core.pyi"
        env = dict(os.environ)
        if core_dir:
            module = "_core"
            env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(core_dir), env.get("PYTHONPATH", "")])
        else:
            module = "ossa._core"
        subprocess.run(
            [sys.executable, "-m", "nanobind.stubgen", "-q", "-m", module, "-o", str(out)],
            check=True,
            env=env,
            cwd=tmp,
        )
        text = out.read_text()
    # stubgen opens with the module's one-line docstring; ours says how the file is made.
    first_end = text.index('"""', 3) + 3
    return HEADER + text[first_end:].lstrip("\n").join(["\n", ""])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--core-dir", default=os.environ.get("OSSA_CORE_DIR"), help="folder of the built _core*.so"
    )
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args()
    text = generate(args.core_dir)
    if not args.check:
        STUB.write_text(text)
        return 0
    committed = STUB.read_text()
    if committed == text:
        print("src/ossa/_core.pyi matches the built module")
        return 0
    sys.stdout.writelines(
        difflib.unified_diff(committed.splitlines(True), text.splitlines(True), "committed", "built")
    )
    print("src/ossa/_core.pyi is stale: run python tools/stubgen.py --core-dir <build>/csrc", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
