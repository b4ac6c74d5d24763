"""The doctor on bad input: one line and exit status 2, or a ``quality`` entry; its ``--json`` is strict JSON.
And the trace-quality checks (``perf_doctor.quality``) on traces made to fail each one."""
import errno
import gzip
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from perf_doctor import cli as doctor, quality

from tests import fake_trace as ft

ROOT = Path(__file__).resolve().parents[2]


def strict(text):
    """``json.loads`` that refuses NaN and Infinity (what a strict parser does)."""
    def refuse(c):
        raise ValueError(f"not JSON: {c}")
    return json.loads(text, parse_constant=refuse)


def run(capsys, *args):
    """``python -m perf_doctor ARGS`` in this process: (exit status, stdout, stderr)."""
    code = doctor.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line(code, out, err, *words):
    assert code == doctor.EXIT_BAD_INPUT and out == "", (code, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), err
    return err


def steps_trace(n=4, step=1000, pid=1, first=None):
    """``n`` CPU steps of ``step`` µs, each with one large op (the first step ``first`` µs long, if given)."""
    evs, t = [], 0
    for k in range(n):
        d = first if (k == 0 and first) else step
        evs += [ft.label(f"ProfilerStep#{k}", t, d, pid=pid),
                ft.op("aten::mm", t + 10, d - 100, pid=pid)]
        t += d
    return {"traceEvents": evs}


def write(path, doc):
    path.write_text(json.dumps(doc))
    return path


def checks(rep):
    return [q["check"] for q in rep["quality"]]


# --- bad input: one line, exit 2 ------------------------------------------------------------------------------
def test_nan_and_infinity_give_strict_json_and_a_quality_entry(tmp_path, capsys):
    doc = steps_trace()
    doc["traceEvents"] += [ft.op("aten::add", float("nan"), 5), ft.op("aten::add", 20, float("inf"))]
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(doc))  # Python writes NaN / Infinity: not JSON, but what a broken exporter writes
    assert "NaN" in path.read_text()
    code, out, err = run(capsys, path, "--json")
    assert code == 0, err
    rep = strict(out)
    assert rep["step_ms"] == pytest.approx(1.0) and "impossible_values" in checks(rep)
    assert "2 event(s)" in next(q["message"] for q in rep["quality"] if q["check"] == "impossible_values")


def test_every_time_impossible_is_one_line(tmp_path, capsys):
    doc = {"traceEvents": [ft.label("ProfilerStep#0", 0, float("nan")),
                           ft.op("aten::mm", 0, -5), ft.op("aten::mm", 10, None)]}
    one_line(*run(capsys, write(tmp_path / "bad.json", doc)), "bad.json", "no event has a valid time")


def test_negative_and_missing_durations_are_left_out_and_said(tmp_path, capsys):
    doc = steps_trace()
    doc["traceEvents"] += [ft.op("aten::mm", 50, -30), ft.op("aten::mm", 60, None),
                           ft.label("ProfilerStep#9", 9000, -1000),
                           ft.op("aten::mm", 1e300, 1e300), ft.op("aten::mm", "70", "5")]
    code, out, err = run(capsys, write(tmp_path / "neg.json", doc), "--json")
    rep = strict(out)
    assert code == 0 and rep["steps"] == 4 and rep["step_ms"] == pytest.approx(1.0)
    assert "impossible_values" in checks(rep) and "5 event(s)" in rep["quality"][0]["message"]


def test_events_not_shaped_as_pytorchs_are_one_line_or_ignored(tmp_path, capsys):
    doc = steps_trace()
    doc["traceEvents"] += [{"ph": "X", "ts": 1, "dur": 3, "cat": "kernel", "name": "k", "args": "oops"},
                           {"ph": "X", "ts": 1, "dur": 3, "cat": "cuda_runtime", "name": 7, "args": [1]}]
    code, out, err = run(capsys, write(tmp_path / "odd.json", doc), "--json")   # odd args: read as no args
    assert code == 0 and strict(out)["steps"] == 4, err
    doc["traceEvents"] += [1, "x", None]                                          # not events at all
    one_line(*run(capsys, write(tmp_path / "odd.json", doc)), "odd.json", "not Chrome-trace events")


def test_another_tools_chrome_trace_is_one_line(tmp_path, capsys):
    """A browser's performance trace is a Chrome trace too, but not PyTorch's."""
    doc = {"traceEvents": [{"ph": "X", "cat": "devtools.timeline", "name": "RunTask", "ts": 1, "dur": 50,
                            "pid": 1, "tid": 1},
                           {"ph": "X", "cat": "v8", "name": "V8.Execute", "ts": 10, "dur": 20, "pid": 1, "tid": 1},
                           {"ph": "X", "cat": "blink,devtools.timeline", "name": "Paint", "ts": 60, "dur": 5}]}
    one_line(*run(capsys, write(tmp_path / "chrome.json", doc)), "chrome.json", "not a PyTorch profiler trace",
             "devtools.timeline")


def test_foreign_events_in_a_pytorch_trace_are_a_quality_entry(tmp_path, capsys):
    doc = steps_trace()
    doc["traceEvents"].append({"ph": "X", "cat": "v8", "name": "V8.Execute", "ts": 10, "dur": 20, "pid": 9, "tid": 9})
    code, out, _ = run(capsys, write(tmp_path / "mixed.json", doc), "--json")
    assert code == 0 and "not_pytorch" in checks(strict(out))


def test_a_gzip_bomb_is_refused_in_bounded_memory(tmp_path):
    """1 GiB of zeros, gzipped to a few MB; and a valid-looking start followed by 96 MiB of spaces, over a 64 MiB
    limit. Under a 1 GiB address-space limit the command still answers in one line (it used to end in a
    MemoryError traceback after taking 2.1 GB)."""
    zeros = tmp_path / "bomb.json.gz"
    with gzip.open(zeros, "wb", compresslevel=1) as f:
        block = bytes(1 << 24)
        for _ in range(64):
            f.write(block)
    assert zeros.stat().st_size < 8 << 20
    spaces = tmp_path / "spaces.json.gz"
    with gzip.open(spaces, "wb", compresslevel=1) as f:
        f.write(b'{"traceEvents": [')
        for _ in range(6):
            f.write(b" " * (1 << 24))
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PERF_TRACE_MAX_MB": "64"}
    for path, words in ((zeros, ("not a complete JSON profiler trace",)),
                        (spaces, ("decompresses to more than 64 MiB", "PERF_TRACE_MAX_MB"))):
        p = subprocess.run([sys.executable, "-m", "perf_doctor", str(path), "--json"], capture_output=True,
                           text=True, env=env, cwd=ROOT, timeout=300, preexec_fn=limit)
        one_line(p.returncode, p.stdout, p.stderr, path.name, *words)


def _deny(monkeypatch, locked: Path):
    """Make the OS refuse ``locked`` and everything under it, as ``chmod 000`` does for a user that is not root
    (the tests run as root in CI, and root reads every folder)."""
    real_listdir, real_scandir, real_stat = os.listdir, os.scandir, os.stat

    def refuse(path):
        p = Path(os.fsdecode(path)) if not isinstance(path, int) else None
        if p is not None and (p == locked or locked in p.parents):
            raise PermissionError(errno.EACCES, "Permission denied", str(p))

    def listdir(path="."):
        refuse(path)
        return real_listdir(path)

    def scandir(path="."):
        refuse(path)
        return real_scandir(path)

    def stat(path, *a, **k):
        if not isinstance(path, int):
            p = Path(os.fsdecode(path))
            if locked in p.parents:
                refuse(path)
        return real_stat(path, *a, **k)

    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "stat", stat)


def test_unreadable_files_and_folders(tmp_path, capsys, monkeypatch):
    runs = tmp_path / "runs"
    (runs / "locked").mkdir(parents=True)
    write(runs / "w.1.pt.trace.json", steps_trace())
    write(runs / "locked" / "w.2.pt.trace.json", steps_trace())
    alone = tmp_path / "alone"
    alone.mkdir()
    write(alone / "x.pt.trace.json", steps_trace())
    _deny(monkeypatch, runs / "locked")
    # a file inside an unreadable folder: one line (was a PermissionError traceback)
    one_line(*run(capsys, runs / "locked" / "w.2.pt.trace.json"), "w.2.pt.trace.json", "Permission denied")
    # an unreadable subfolder: the rest is read, and the report says what was skipped (was silent)
    code, out, err = run(capsys, runs, "--json")
    rep = strict(out)
    assert code == 0 and rep["steps"] == 4 and "unreadable" in checks(rep)
    assert any("could not be read" in n and "locked" in n for n in rep["notes"])
    # an unreadable folder: one line saying so (was "holds no trace file")
    _deny(monkeypatch, alone)
    err = one_line(*run(capsys, alone), "alone", "cannot read the folder", "Permission denied")
    assert "holds no trace file" not in err


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads every folder, whatever its mode")
def test_unreadable_folder_for_real(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    write(locked / "x.pt.trace.json", steps_trace())
    locked.chmod(0)
    try:
        one_line(*run(capsys, locked / "x.pt.trace.json"), "Permission denied")
        one_line(*run(capsys, locked), "cannot read the folder")
    finally:
        locked.chmod(0o755)


# --- the quality checks ---------------------------------------------------------------------------------------
def test_a_clean_trace_has_no_entry():
    assert quality.assess(steps_trace()) == [] and quality.warmup([10.0, 10.2, 9.9, 10.1]) == []


def test_few_steps_and_no_profiler_step():
    assert [q["check"] for q in quality.assess(steps_trace(n=2))] == ["few_steps"]
    doc = steps_trace()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not e["name"].startswith("ProfilerStep")]
    assert [q["check"] for q in quality.assess(doc)] == ["no_profiler_step"]


def test_warmup_in_the_window(tmp_path, capsys):
    code, out, _ = run(capsys, write(tmp_path / "warm.json", steps_trace(n=5, first=4000)), "--json")
    rep = strict(out)
    assert code == 0 and checks(rep) == ["warmup_in_window"]
    assert "4.0x the median" in rep["quality"][0]["message"]


def test_ranks_mixed_in_one_file():
    a, b = steps_trace(pid=1), steps_trace(pid=2)
    assert "mixed_ranks" in [q["check"] for q in quality.assess({"traceEvents": a["traceEvents"] + b["traceEvents"]})]


def test_gpu_operators_with_no_kernels_recorded():
    doc = steps_trace()
    doc["traceEvents"] += [ft.runtime("cudaLaunchKernel", 100 + 1000 * k, 5, correlation=k) for k in range(4)]
    entry = next(q for q in quality.assess(doc) if q["check"] == "ops_without_kernels")
    assert "4 of 4 launches" in entry["message"] and "no device work at all" in entry["message"]
    doc["traceEvents"] += [ft.kernel("k", 110 + 1000 * k, 50, tid=7, correlation=k) for k in range(4)]
    assert "ops_without_kernels" not in [q["check"] for q in quality.assess(doc)]
    cpu_only_on_a_gpu_machine = {**steps_trace(), "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}
    assert "NVIDIA H100" in quality.assess(cpu_only_on_a_gpu_machine)[0]["message"]


def test_untimed_kernels_are_left_out_and_said(tmp_path, capsys):
    """Kernels at time 0 for 0 µs (the H100 reference's 01 Chrome trace: all 816 of its kernels and memsets) are no
    GPU work: before, the doctor read them as a GPU idle for the whole step, found no quality problem, and its text
    report failed on HTA's empty breakdown (a TypeError)."""
    doc = steps_trace()
    doc["traceEvents"] += [ft.runtime("cudaLaunchKernel", 100 + 1000 * k, 5, correlation=k) for k in range(4)]
    doc["traceEvents"] += [ft.kernel("k", 0, 0, tid=7, correlation=k) for k in range(4)]
    checks = {q["check"]: q["message"] for q in quality.assess(doc)}
    assert "4 kernel(s), copies or memsets have no time" in checks["untimed_device_work"]
    assert "impossible_values" not in checks and "untimed_device_work above" in checks["ops_without_kernels"]
    doc["traceEvents"][-1] = ft.kernel("k", 3110, 50, tid=7, correlation=3)   # one timed: the others still said
    checks = {q["check"]: q["message"] for q in quality.assess(doc)}
    assert checks["untimed_device_work"].startswith("3 kernel(s)")
    code, out, err = run(capsys, write(tmp_path / "untimed.json", doc))
    assert code == 0 and "untimed_device_work" in out and "Traceback" not in err, err


def test_a_cpu_job_on_a_gpu_machine_gets_no_accelerator_warning():
    """06-1: notebook 06 runs its ranks on the CPU (gloo) on purpose on a one-GPU machine; its traces list the H100 in
    deviceProperties, but the job said where it ran (gloo's distributedInfo, or the job's own metadata), so the doctor
    does not warn about missing device activity."""
    h100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]
    gloo = {**steps_trace(), "deviceProperties": h100, "distributedInfo": {"backend": "gloo", "rank": 0,
                                                                           "world_size": 2}}
    said = {**steps_trace(), "deviceProperties": h100, quality.JOB_DEVICE_METADATA: '"cpu"'}
    for doc in (gloo, said):
        assert "ops_without_kernels" not in [q["check"] for q in quality.assess(doc)]
    nccl = {**gloo, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2}}
    assert "ops_without_kernels" in [q["check"] for q in quality.assess(nccl)]
    said_cuda = {**said, quality.JOB_DEVICE_METADATA: '"cuda"'}
    assert "ops_without_kernels" in [q["check"] for q in quality.assess(said_cuda)]


def test_finite_makes_strict_json():
    x = {"a": float("nan"), "b": [1.0, float("inf"), {"c": -float("inf")}], "d": "NaN"}
    assert quality.finite(x) == {"a": None, "b": [1.0, None, {"c": None}], "d": "NaN"}
    json.dumps(quality.finite(x), allow_nan=False)


def test_a_trace_without_profiler_step_is_one_window_in_the_text_report(tmp_path, capsys):
    """The doctor's header says the whole trace is one window, not "1 step(s), N ms per step"."""
    doc = {"traceEvents": [ft.op("aten::mm", 0, 5000), ft.op("aten::add", 6000, 4000)]}
    code, out, err = run(capsys, write(tmp_path / "nostep.json", doc))
    assert code == 0, err
    assert "no ProfilerStep marks: the whole trace (10.00 ms) is one window, not a training step" in out
    assert "step(s)" not in out.splitlines()[1]
    code, out, err = run(capsys, write(tmp_path / "steps.json", steps_trace()))
    assert code == 0 and "Step: 1.00 ms (mean of 4)" in out.splitlines()[1], out
