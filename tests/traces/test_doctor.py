"""``python -m helpers.doctor``: the JSON contract (run as a subprocess) and one-line messages for bad input."""
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.lessons.diagnose import planted_step
from helpers.measure.diagnose import diagnose_step
from helpers.traces import diagnosis as dg
from tests.shared_data import gpu_trace

ROOT = Path(__file__).resolve().parents[2]


def doctor(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "helpers.doctor", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300)


def check_contract(doc):
    assert {"steps", "step_ms", "overview", "gpu", "diagnosis"} <= set(doc)
    assert isinstance(doc["steps"], int) and doc["steps"] >= 1
    assert doc["step_ms"] > 0
    assert doc["overview"] is None or all(isinstance(v, (int, float)) or v is None for v in doc["overview"].values())
    assert doc["diagnosis"], "at least one cause"
    for c in doc["diagnosis"]:
        assert {"cause", "ms", "evidence", "see"} <= set(c)
        assert c["cause"] in dg.CAUSES and c["evidence"] and c["see"]
    judged = [c["ms"] for c in doc["diagnosis"] if c["ms"] is not None]
    assert all(m >= 0 for m in judged)
    assert sum(judged) <= doc["step_ms"] + 0.005, "each millisecond is counted once (rounded to the µs)"


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    r = diagnose_step(planted_step("input", 1), trace_root=tmp_path_factory.mktemp("t"), active=2)
    return r.trace_dir


def test_json_on_a_cpu_trace_folder(cpu_trace):
    p = doctor(cpu_trace, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    check_contract(doc)
    assert doc["gpu"] is None and doc["steps"] == 2
    sync = next(c for c in doc["diagnosis"] if c["cause"] == "host sync")
    assert sync["ms"] is None and "cannot be judged" in sync["evidence"]
    assert "host sync" in doc["cannot_judge"]
    assert doc["top_cause"] == "input"


def test_json_on_the_real_gpu_trace():
    p = doctor(gpu_trace("hta_control.json.gz"), "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    check_contract(doc)
    assert doc["steps"] == 6
    sync = next(c for c in doc["diagnosis"] if c["cause"] == "host sync")
    assert sync["ms"] > 0
    # HTA's own temporal breakdown of this trace (../shared/gpu-traces/README.md): idle 16.2 %, compute 61.23 %
    assert abs(doc["gpu"]["idle_pct"] - 16.2) <= 1 and abs(doc["gpu"]["compute_pct"] - 61.23) <= 1
    assert set(doc["overview"]) >= {"kernel", "memcpy", "dataloader", "cpu_exec", "other"}


def test_text_report_has_the_diagnosis(cpu_trace):
    p = doctor(cpu_trace)
    assert p.returncode == 0, p.stderr
    assert "Diagnosis" in p.stdout and "Top cause: input" in p.stdout


def _bad_inputs(tmp):
    (tmp / "empty").mkdir()
    (tmp / "notes.json").write_text("this is not json")
    (tmp / "list.json").write_text("[1, 2, 3]")
    whole = gzip.compress(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": i, "dur": 1} for i in range(5000)]}).encode())
    (tmp / "cut.json.gz").write_bytes(whole[: len(whole) // 2])
    return {"empty": ("empty folder", "holds no trace file"), "notes.json": ("JSON profiler trace",),
            "list.json": ("not a Chrome trace", "JSON profiler trace", "traceEvents", "no profiled events"),
            "cut.json.gz": ("truncated",), "missing.json": ("no such file",)}


def test_bad_inputs_one_line_exit_2(tmp_path):
    for name, expected in _bad_inputs(tmp_path).items():
        p = doctor(tmp_path / name, "--json")
        assert p.returncode == 2, (name, p.stdout, p.stderr)
        err = p.stderr.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert name in err and any(e in err for e in expected), err
        assert p.stdout == ""


def test_no_profiler_step_is_said(tmp_path):
    p = doctor(gpu_trace("hta_alexnet.json.gz"), "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    check_contract(doc)
    assert doc["steps"] == 1 and any("no ProfilerStep" in n for n in doc["notes"])
