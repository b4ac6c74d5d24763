"""The step's period (issue 32): the longer of its CPU span and the span of the device work it launched; its label,
host-bound or device-bound, read from the GPU's idle time in the step, not from which span is longer; a window that adds up with or without ProfilerStep; damaged steps are a quality finding
and no cause is diagnosed from them."""
import json
from pathlib import Path

import pytest

from perf_doctor import diagnosis as dg
from perf_doctor import cli as doctor
from perf_doctor.report import trace_report
from tests import fake_trace as ft
from tests.shared_data import gpu_trace, other_trace

MS = 1000.0


def qwen_like():
    """TraceLens' H100 Qwen trace in outline: one ProfilerStep of 47.15 ms on the CPU; device work not linked to a
    launch in the step (a copy queued before it) ends at 11.97 ms; the step's kernels run from 14 ms to 47.0 ms
    (the GPU idles 14 ms waiting for the host). The doctor said 35.18 ms and 88.6% busy."""
    evs = [ft.step(6, 0, 47.15 * MS), ft.ev("Memcpy HtoD", 11.5 * MS, 0.47 * MS, "gpu_memcpy", corr=999, tid=7)]
    t, k = 14.0 * MS, 0
    while t < 47.0 * MS:
        launch = t - 2 * MS                               # each launch 2 ms before its kernel runs
        evs += [ft.op("aten::mm", launch - 5, 20), ft.runtime("cudaLaunchKernel", launch, 5, corr=k),
                ft.kernel("gemm", t, 1.1 * MS, corr=k)]
        t += 1.1 * MS
        k += 1
    return ft.doc(*evs)


def mi300_like():
    """TraceLens' MI300X trace in outline: CPU steps of ~16 ms back to back; the kernels each step launched span
    ~18.8 ms and run back to back (the GPU queue runs behind: step 0's kernels start 30 ms in, after earlier work)."""
    evs = [ft.ev("nccl_earlier", 0, 30 * MS, "kernel", tid=7)]    # the queue of earlier steps' work
    gpu = 30.0 * MS
    host = [16.8, 15.95, 15.9]
    t = 0.0
    for s, h in enumerate(host):
        evs.append(ft.step(15 + s, t, h * MS))
        for j in range(4):
            c = 100 * s + j
            evs += [ft.runtime("hipLaunchKernel", t + 1 * MS + j * 3 * MS, 10, corr=c),
                    ft.kernel("Cijk_gemm", gpu, 4.7 * MS, corr=c)]
            gpu += 4.7 * MS
        t += h * MS
    return ft.doc(*evs)


def test_a_step_longer_on_the_host_keeps_its_host_time():
    d = dg.diagnose(qwen_like())
    assert d.step_ms == pytest.approx(47.15, abs=0.01) and d.bound == "device-bound"
    assert d.host_ms == pytest.approx(47.15, abs=0.01) and 32 < d.device_ms < 34
    busy = d.ms("compute") / d.step_ms
    assert busy < 0.75, busy                           # the GPU idled the host's first 14 ms (said 88.6% before)
    assert d.gpu_idle_share == pytest.approx(1 - busy)
    # the GPU idles 30% of the step, under IDLE_BOUND: device-bound, though the CPU span is the longer
    assert "device-bound: the GPU idles 30% of the step" in d.summary().splitlines()[0]


def test_a_device_bound_step_is_the_span_of_its_kernels():
    d = dg.diagnose(mi300_like())
    assert d.steps == 3 and d.step_ms == pytest.approx(18.8, abs=0.01) and d.bound == "device-bound"
    assert d.host_ms == pytest.approx(16.22, abs=0.01) and d.device_ms == pytest.approx(18.8, abs=0.01)


def test_the_real_mi300x_trace_is_device_bound():
    """TraceLens' MI300X trace (../shared/traces): CPU steps 15.9-16.8 ms, the kernels each launched 18.6-19.0 ms:
    18.84 ms per step, device-bound (the period it had before)."""
    d = dg.diagnose(other_trace("tracelens_mi300_resnet_act_checkpoint.json.gz"))
    assert d.step_ms == pytest.approx(18.84, abs=0.01) and d.bound == "device-bound"
    assert 15.9 <= d.host_ms <= 16.8 and 18.5 <= d.device_ms <= 19.0


REFERENCE = Path(__file__).resolve().parents[2] / "data" / "reference" / "h100" / "05_diagnose" / "traces"


@pytest.mark.parametrize("plant,bound", [("compute", "device-bound"), ("input", "host-bound")])
def test_the_label_follows_gpu_idle_on_the_h100_reference(plant, bound):
    """05's H100 traces: a loop that synchronises every step makes the compute plant's CPU span (64.62 ms) cover
    its device work's (64.11 ms), yet its GPU is busy 99% of the step: device-bound (the spans said host-bound)."""
    d = dg.diagnose(next(REFERENCE.glob(f"05_diagnose_{plant}/*/*.json.gz")))
    assert d.bound == bound and (d.gpu_idle_share >= dg.IDLE_BOUND) == (bound == "host-bound")
    assert plant != "compute" or (d.host_ms > d.device_ms and d.gpu_idle_share < 0.02)


def test_the_label_follows_gpu_idle_on_a_real_a100_trace():
    """HTA's A100 trace (../shared/gpu-traces): CPU span 77.49 ms over the device's 77.00 ms, the GPU idle 16%."""
    d = dg.diagnose(gpu_trace("hta_control.json.gz"))
    assert d.host_ms > d.device_ms and 0.1 < d.gpu_idle_share < 0.25 and d.bound == "device-bound"


def test_json_has_the_bound(tmp_path, capsys):
    path = tmp_path / "qwen.json"
    path.write_text(json.dumps(qwen_like()))
    assert doctor.main([str(path), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["bound"] == "device-bound" and rep["step_ms"] == pytest.approx(47.15, abs=0.01)
    assert rep["host_ms"] == pytest.approx(47.15, abs=0.01) and rep["device_ms"] > 0
    assert doctor.main([str(path)]) == 0
    assert "Step: 47.15 ms (mean of 1), device-bound: the GPU idles 30% of it (CPU step 47.15 ms" in capsys.readouterr().out.splitlines()[1]


def damaged(dur):
    """Four CPU steps whose ProfilerSteps all have an impossible duration ``dur`` (None: missing), ops inside."""
    evs = []
    for k in range(4):
        evs += [ft.step(k, k * MS, dur), ft.op("aten::mm", k * MS + 10, 900)]
    return ft.doc(*evs)


@pytest.mark.parametrize("dur", [-1000.0, None])
def test_damaged_steps_are_a_finding_and_no_cause_is_diagnosed(tmp_path, dur):
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(damaged(dur)))
    rep = trace_report(path, views=False)
    checks = [q["check"] for q in rep["quality"]]
    assert "damaged_steps" in checks and "no_profiler_step" not in checks
    assert "4 of 4 ProfilerStep(s)" in next(q["message"] for q in rep["quality"] if q["check"] == "damaged_steps")
    assert rep["top_cause"] is None and all(c["ms"] is None for c in rep["diagnosis"])
    assert rep["bound"] is None
    text = doctor.text_report(trace_report(path))
    assert "no cause diagnosed" in text.splitlines()[1] and "0 top-level ops" not in text
    assert "launch/overhead: cannot judge" in text


def test_some_damaged_steps_are_left_out_and_the_others_diagnosed():
    doc = damaged(800.0)
    doc["traceEvents"][0]["dur"] = -5.0
    d = dg.diagnose(doc)
    rep_checks = [q["check"] for q in __import__("perf_doctor.quality", fromlist=["x"]).assess(doc)]
    assert d.steps == 3 and d.top is not None and not d.damaged and "damaged_steps" in rep_checks


def test_a_window_without_profiler_step_adds_up(tmp_path):
    """Without ProfilerStep the doctor's window is the trace, first event to last; torch-tb-profiler's step can be
    shorter (PARAM's RTX 2080 Ti ResNet trace: 14,526 of 16,172 ms): the Overview's rows add up to the window."""
    evs = [ft.ev("<built-in method time>", 0, 2 * MS, "python_function"), ft.op("aten::mm", 3 * MS, 5 * MS),
           ft.runtime("cudaLaunchKernel", 4 * MS, 10, corr=1), ft.kernel("gemm", 5 * MS, 3 * MS, corr=1, pid=0, device=0, stream=7),
           ft.op("aten::add", 9 * MS, 1 * MS)]
    path = tmp_path / "nostep.json"
    path.write_text(json.dumps(ft.doc(*evs)))
    rep = trace_report(path)
    assert rep["overview"], rep["notes"]
    assert sum(v for v in rep["overview"].values() if v is not None) == pytest.approx(rep["step_ms"], abs=0.002)


def test_the_answer_is_on_the_second_line_whatever_the_folders_depth(tmp_path, monkeypatch, capsys):
    """A checkout or a trace folder of any depth: the report's first line is the trace's path within 120 columns
    (relative to the current folder where it lies inside it, else shortened in the middle with its file name kept),
    so that the step is always the second line (it wrapped past 120 columns at a checkout path of ~45 characters)."""
    deep = tmp_path.joinpath(*[f"a-folder-of-the-users-own-{i:02d}" for i in range(8)])
    deep.mkdir(parents=True)
    path = deep / "qwen_step_trace.json"
    path.write_text(json.dumps(qwen_like()))
    assert len(str(path)) > 250
    for cwd, first in ((tmp_path.parent, None), (deep, "trace: qwen_step_trace.json")):
        monkeypatch.chdir(cwd)
        assert doctor.main([str(path)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines[0]) <= 120 and lines[0].startswith("trace: ") and lines[0].endswith("qwen_step_trace.json")
        assert first is None or lines[0] == first
        assert lines[1].startswith("Step: 47.15 ms (mean of 1), device-bound"), lines[:3]
        assert doctor.main([str(path), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["trace"] == str(path)  # --json keeps the path whole
