"""The callgrind regression gate (tools/perfgate): the comparison rules, the dump parser, and one real
run of every workload against the committed baseline.

The real run builds the portable core into build/perfgate and counts instructions under valgrind
(a few minutes of CPU for the six workloads; the 128-token prefill is most of it). Where valgrind,
cmake or taskset is missing it fails (it is part of CI), naming what to install.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "perfgate" / "perfgate.py"


def load_perfgate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("perfgate", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["perfgate"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


pg = load_perfgate()


def run_gate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=1200)


# ---- the rules, on made-up counts ----


def baseline_of(**counts: int) -> dict[str, dict[str, object]]:
    return {name: {"instructions": n, "result": "r"} for name, n in counts.items()}


def test_within_tolerance_passes() -> None:
    measured = {"a": pg.Measurement(1050, "r"), "b": pg.Measurement(900, "r")}
    verdicts = pg.compare(measured, baseline_of(a=1000, b=1000))
    assert [v.ok for v in verdicts] == [True, True]
    assert "consider --update" in verdicts[1].note  # 10% faster is worth recording


def test_more_than_five_percent_fails_naming_the_workload() -> None:
    measured = {"encode": pg.Measurement(1000, "r"), "decode": pg.Measurement(1051, "r")}
    verdicts = pg.compare(measured, baseline_of(encode=1000, decode=1000))
    assert [(v.workload, v.ok) for v in verdicts] == [("encode", True), ("decode", False)]
    table = pg.format_table(verdicts)
    assert "decode" in table and "FAIL" in table and "+5.10%" in table


def test_missing_workloads_fail() -> None:
    verdicts = pg.compare({"new": pg.Measurement(5, "r")}, baseline_of(old=5))
    assert {v.workload: (v.ok, v.note) for v in verdicts} == {
        "old": (False, "not measured"),
        "new": (False, "no baseline (--update)"),
    }


def test_changed_result_is_reported() -> None:
    verdicts = pg.compare({"a": pg.Measurement(1000, "x")}, baseline_of(a=1000))
    assert verdicts[0].ok and "result changed" in verdicts[0].note


def test_parse_dump() -> None:
    text = (
        "version: 1\ndesc: Trigger: Client Request: decode_1\n\nevents: Ir\nsummary: 42\n"
        "fn=(1) f\n0 42\ntotals: 42\n"
    )
    assert pg.parse_dump(text) == ("decode_1", 42)
    assert pg.parse_dump("desc: Trigger: Program termination\ntotals: 9\n") is None


# ---- the real gate ----


@pytest.fixture(scope="module")
def gate_run(default_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict]:
    # The gate is part of CI: a machine without its tools fails here rather than skipping it silently.
    missing = [tool for tool in ("valgrind", "cmake", "taskset") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"the performance gate needs {', '.join(missing)} (install valgrind, cmake, util-linux)")
    out = tmp_path_factory.mktemp("perfgate") / "counts.json"
    r = run_gate("--model", default_model_path, "--json-out", str(out))
    assert out.exists(), r.stdout + r.stderr
    return r.returncode, r.stdout + r.stderr, json.loads(out.read_text())


@pytest.mark.slow
def test_gate_passes_against_the_committed_baseline(gate_run: tuple[int, str, dict]) -> None:
    rc, output, counts = gate_run
    assert rc == 0, output
    assert set(counts["workloads"]) == set(pg.WORKLOADS)
    for name, entry in counts["workloads"].items():
        assert entry["instructions"] > 0, name
    # The work really happened: 1 MB of text is several hundred thousand tokens, the sampler and
    # scheduler produced one token per row.
    assert "result=64 " in counts["workloads"]["sampler_b64"]["result"]
    assert "result=256 " in counts["workloads"]["scheduler_256"]["result"]
    assert int(counts["workloads"]["encode_1mb"]["result"].split()[0].split("=")[1]) > 200_000
    # The engine step sampled one token for each of its 16 requests still running (a stop string may
    # have ended some in the steps before).
    assert 0 < int(counts["workloads"]["engine_step_b16"]["result"].split()[0].split("=")[1]) <= 16
    # A forward pass over 128 tokens is far more work than one decode step.
    w = counts["workloads"]
    assert w["prefill_128"]["instructions"] > 10 * w["decode_1"]["instructions"]
    # The K-quant decode step streams ~160 MB of Q4_K / Q6_K weights through the int8 kernels: well over
    # one instruction per 4 bytes (they run ~1 per byte; the default model's f32 Q4_1 step costs more
    # instructions per byte, so the two steps are not compared).
    assert w["decode_1b_q4km"]["instructions"] > 160e6 / 4
    assert w["decode_1b_q4km"]["result"].startswith("result=")


@pytest.mark.slow
def test_counts_repeat_exactly(
    gate_run: tuple[int, str, dict], default_model_path: str, tmp_path: Path
) -> None:
    _, _, first = gate_run
    out = tmp_path / "again.json"
    cheap = ["scheduler_256", "sampler_b64"]
    r = run_gate("--model", default_model_path, "--workloads", *cheap, "--json-out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    again = json.loads(out.read_text())["workloads"]
    for name in cheap:
        assert again[name] == first["workloads"][name], name


@pytest.mark.slow
def test_a_regression_fails_and_update_rewrites(gate_run: tuple[int, str, dict], tmp_path: Path) -> None:
    _, _, counts = gate_run
    saved = tmp_path / "counts.json"
    saved.write_text(json.dumps(counts))
    # A baseline 10% below today's decode count: today's decode is a 10% regression against it.
    workloads = json.loads(json.dumps(counts["workloads"]))
    workloads["decode_1"]["instructions"] = int(workloads["decode_1"]["instructions"] / 1.1)
    baseline = {"environment": counts["environment"], "workloads": workloads}
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(baseline))
    r = run_gate("--from-results", str(saved), "--baseline", str(path))
    assert r.returncode == 1
    assert "FAILED: decode_1" in r.stdout
    failing = [line for line in r.stdout.splitlines() if "FAIL" in line and not line.startswith("perfgate")]
    assert len(failing) == 1 and failing[0].startswith("decode_1"), r.stdout

    r = run_gate("--from-results", str(saved), "--baseline", str(path), "--update")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(path.read_text())["workloads"] == counts["workloads"]
    r = run_gate("--from-results", str(saved), "--baseline", str(path))
    assert r.returncode == 0 and "perfgate: ok" in r.stdout
