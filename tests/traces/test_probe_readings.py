"""The probe's readings (issue 44 item 7): memory stays bounded whatever one JSON value holds (a trace padded with a
huge string, before its events or inside one), and a straggler whose named cause does not explain the others' wait
is said to have its cause outside the trace."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_trace import kernel, runtime, step
from perf_doctor import job
from perf_doctor.stream import BIG_CHARS, read_trimmed

ROOT = Path(__file__).resolve().parents[2]
PAD_MB = 256  # four times the size that starts the cutter (BIG_CHARS); by hand, 1 GiB: 432-455 MB, 19 s of CPU
MAX_RSS_MB = 1536


def _events() -> list:
    out = []
    for k in range(1, 5):
        t = k * 1000.0
        out += [step(k, t, 900), runtime("cudaLaunchKernel", t + 10, 5, corr=k), kernel("gemm", t + 20, 500, corr=k)]
    return out


def _padded(path: Path, where: str) -> Path:
    """A valid trace with one ``PAD_MB`` MiB string: a key before ``traceEvents`` ("first") or an event's arg."""
    chunk = "x" * (1 << 20)
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write('{"schemaVersion": 1, ')
        if where == "first":
            f.write('"pad": "')
            for _ in range(PAD_MB):
                f.write(chunk)
            f.write('", ')
        f.write('"traceEvents": [')
        evs = _events()
        for i, e in enumerate(evs):
            f.write((", " if i else "") + json.dumps(e))
            if where == "event" and i == 1:
                f.write(', {"ph": "i", "name": "pad", "ts": 1500, "args": {"s": "')
                for _ in range(PAD_MB):
                    f.write(chunk)
                f.write('"}}')
        f.write('], "deviceProperties": []}')
    return path


@pytest.mark.parametrize("where", ["first", "event"])
def test_one_huge_value_is_cut_and_memory_stays_bounded(tmp_path, where):
    assert PAD_MB << 20 > 2 * BIG_CHARS
    path = _padded(tmp_path / f"padded_{where}.json.gz", where)
    code = (
        "import json, resource, sys\n"
        "from perf_doctor.cli import report, json_report\n"
        f"rep = json.loads(json_report(report({str(path)!r}, views=False)))\n"
        "print(json.dumps({'steps': rep['steps'], 'notes': rep['notes'],\n"
        "                  'rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert out["steps"] >= 3, out
    assert any("were cut to 1 MiB" in n for n in out["notes"]), out["notes"]
    assert out["rss_mb"] <= MAX_RSS_MB, out


def test_the_cut_keeps_the_events_and_a_valid_document(tmp_path):
    doc, _, notes = read_trimmed(_padded(tmp_path / "p.json.gz", "event"), keep_mb=1)
    pad = next(e for e in doc["traceEvents"] if e.get("name") == "pad")
    assert len(pad["args"]["s"]) <= (1 << 20) + 8 and set(pad["args"]["s"]) == {"x"}
    assert sum(1 for e in doc["traceEvents"] if e.get("name") == "gemm") == 4 and notes


def test_a_straggler_whose_cause_does_not_explain_the_wait_says_so():
    rows = [{"rank": r, "step_ms": 10.0 + r, "top_cause": "compute"} for r in range(3)]
    causes = [{"cause": "compute", "ms": 8.0, "share": 0.8}]
    small = {"rank": 2, "ms": 4.06, "last_in": 9, "of": 10, "top_cause": "compute", "cause": "host sync",
             "extra_ms": 0.02, "explains": False}
    text = job.verdict(rows, causes, small, 11.0)
    assert "not in the trace" in text and "fix that first" not in text, text
    big = {**small, "cause": "input", "extra_ms": 3.9, "explains": True}
    text = job.verdict(rows, causes, big, 11.0)
    assert "Its cause: input" in text and "fix that first" in text, text
