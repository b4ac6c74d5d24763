"""helpers.lessons.diagnose around the plants (notebook 05_diagnose): the panel's validator, run_case as a results row
(bad input a failed row, never an exception), each plant against its fix, the tables and chart, the reference GPU
traces and the appendix's bad inputs written from this run's own traces. The plants are the notebook's; ``make_step``
(tests/planted.py) stands in for them."""
import gzip
import json
import math
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch

from helpers.lessons import diagnose as dx
from helpers.measure.compare import VERDICTS
from helpers.measure.validate import InvalidValue
from helpers.notebook.results import Results
from perf_doctor import diagnosis as dg
from perf_doctor import cli as doctor
from tests.fake_trace import doc, kernel, runtime, step
from tests.planted import make_step

ROOT = Path(__file__).resolve().parents[2]
SCHEDULE = dict(wait=0, warmup=1, active=2)


@pytest.mark.parametrize("kind,size,message", [
    ("compute", "abc", "positive, finite number"),
    ("compute", float("inf"), "positive, finite number"),
    ("input", float("nan"), "positive, finite number"),
    ("input", -1, "positive, finite number"),
    ("input", 0, "positive, finite number"),
    ("compute", True, "positive, finite number"),
    ("compute", None, "positive, finite number"),
    ("compute", 2.5, "whole number"),
    ("launch/overhead", 20_001, "20,000"),
    ("compute", 16_385, "16,384"),
    ("input", 3.6e6, "100 ms per sample"),      # issue 33: an hour per sample was accepted
    ("input", 1e300, "100 ms per sample"),      # issue 33: a failed row "OverflowError: timestamp out of range"
    ("host sync", 5_001, "5,000 ms per step"),
])
def test_validate_size_refuses_with_one_line(kind, size, message):
    with pytest.raises(InvalidValue, match=message) as exc:
        dx.validate_size(kind, size)
    assert "\n" not in str(exc.value)


def test_validate_size_gives_what_planted_step_takes():
    assert dx.validate_size("compute", 768.0) == 768 and isinstance(dx.validate_size("compute", 768.0), int)
    assert dx.validate_size("launch/overhead", 20_000) == 20_000
    assert dx.validate_size("input", 2) == 2.0 and isinstance(dx.validate_size("input", 2), float)
    assert dx.validate_size("host sync", 0.5) == 0.5


def test_validate_panel():
    assert dx.validate_panel({"kind": "compute", "size": 768.0}, False) == {"kind": "compute", "size": 768}
    with pytest.raises(InvalidValue, match="unknown planted bottleneck 'disk'"):
        dx.validate_panel({"kind": "disk", "size": 1}, False)
    with pytest.raises(InvalidValue, match="needs a GPU"):
        dx.validate_panel({"kind": "host sync", "size": 20.0}, False)
    assert dx.validate_panel({"kind": "host sync", "size": 20.0}, True) == {"kind": "host sync", "size": 20.0}
    for size in ("abc", float("inf")):   # a ValueError from a format string / an OverflowError before the fix
        with pytest.raises(InvalidValue):
            dx.validate_panel({"kind": "compute", "size": size}, False)


def test_case_name_never_raises():
    assert dx.case_name("compute", 768) == "planted compute (size 768)"
    assert dx.case_name("input", 2.0) == "planted input (size 2)"
    assert dx.case_name("host sync", 20.0, item=False) == "planted host sync (size 20) without .item()"
    assert dx.case_name("compute", "abc") == "planted compute (size 'abc')"
    assert dx.case_name("compute", float("inf")) == "planted compute (size inf)"
    assert dx.case_name("disk", 1) == "unknown bottleneck 'disk'"
    assert dx.case_name(["x"], object()) == "unknown bottleneck ['x']"


def _case_kw():
    return dict(device=torch.device("cpu"), **SCHEDULE)


def test_run_case_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("PERF_RUNS_DIR", str(tmp_path / "runs"))
    res = Results("05_diagnose", "smoke", root=tmp_path / "results")
    kw = _case_kw()
    d = dx.run_case(res, make_step, "compute", 64, **kw)
    row = res.get("planted compute (size 64)")
    assert d is not None and row["status"] == "ok" and row["config"] == {"planted": "compute", "size": 64,
                                                                          "device": "cpu"}
    m = row["metrics"]
    assert m["step_ms_mean"] == d.step_ms and m["top_cause"] == d.top and Path(m["trace_dir"]) == d.trace_dir
    assert m["causes_ms_sum"] <= m["step_ms_mean"] + 0.005 and "host sync_ms" not in m   # cannot judge: no metric
    assert dx.run_case(res, make_step, "host sync", 1.0, item=False, **kw) is not None   # the fix of the host sync
    assert res.get("planted host sync (size 1) without .item()")["config"]["item"] is False
    # bad input: failed rows with one line each, never an exception
    for args, name, message in ((("disk", 1), "unknown bottleneck 'disk'", "unknown planted bottleneck"),
                                (("compute", float("inf")), "planted compute (size inf)", "finite"),
                                (("compute", "abc"), "planted compute (size 'abc')", "finite"),
                                (("launch/overhead", None), "planted launch/overhead (size None)", "finite")):
        assert dx.run_case(res, make_step, *args, **kw) is None
        row = res.get(name)
        assert row["status"] == "failed" and message in row["error"] and "\n" not in row["error"], row


def test_record_diagnosis_keeps_a_failure_as_a_row(tmp_path):
    res = Results("05_diagnose", "smoke", root=tmp_path)

    def boom():
        raise RuntimeError("the loader died\nwith a long traceback")

    assert dx.record_diagnosis(res, "yours", {"model": "x"}, boom) is None
    row = res.get("yours")
    assert row["status"] == "failed" and "the loader died" in row["error"] and "\n" not in row["error"]


def _diagnosis(step_ms, causes, on_gpu=False):
    rows = [{"cause": c, "ms": ms, "share": None if ms is None else ms / step_ms, "finding": bool(ms),
             "evidence": "", "see": ""} for c, ms in causes.items()]
    rows.sort(key=lambda c: -1.0 if c["ms"] is None else c["ms"], reverse=True)
    return dg.Diagnosis(steps=3, step_ms=step_ms, on_gpu=on_gpu, causes=rows)


def test_verdicts_table_and_chart(recwarn):
    planted = {"input": _diagnosis(10.0, {"input": 8.0, "compute": 1.0, "launch/overhead": 0.5, "host sync": None}),
               "compute": _diagnosis(6.0, {"input": 0.0, "compute": 5.0, "launch/overhead": 1.0, "host sync": None}),
               "launch/overhead": None}   # a failed case is left out
    v = dx.verdicts_table(planted)
    assert list(v.index) == ["input", "compute"] and list(v["top cause"]) == ["input", "compute"]
    assert list(v["causes sum (ms)"]) == [9.5, 6.0] and v["host sync"].isna().all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no pandas FutureWarning from an all-None (cannot judge) column
        fig = dx.verdicts_chart(v, "ms per step (cpu)")
    ax = fig.axes[0]
    # the legend lists only what is drawn: host sync (cannot judge on a CPU) has no bar, so no entry
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["input", "launch/overhead", "compute"]
    assert sum(b.get_width() for c in ax.containers for b in c) == pytest.approx(15.5)
    import matplotlib.pyplot as plt
    plt.close(fig)
    empty = dx.verdicts_table({"input": None})
    assert len(empty) == 0 and bool((empty["causes sum (ms)"] <= empty["step (ms)"]).all())


def _fix(verdict, ratio, low, high, a, b):
    return {"verdict": verdict, "ratio": ratio, "low": low, "high": high, "a": "planted", "b": "fixed",
            "confidence": 0.95, "samples": {"a": a, "b": b}}


def test_saved_vs_claimed_only_where_resolved():
    planted = {"compute": _diagnosis(10.0, {"compute": 9.0}), "input": _diagnosis(5.0, {"input": 1.0}),
               "launch/overhead": None}   # a failed case is left out
    fixes = {"compute": _fix("faster", 10.0, 8.0, 12.0, [10.0, 10.5, 9.5, 10.0], [1.0, 1.1, 0.9, 1.0]),
             "input": _fix("no difference", 1.02, 0.95, 1.1, [5.0, 5.2], [5.1, 4.9]),
             "launch/overhead": _fix("faster", 2.0, 1.5, 2.5, [2.0], [1.0])}
    s = dx.saved_vs_claimed(planted, fixes).set_index("planted")
    assert list(s.index) == ["compute", "input"]
    c = s.loc["compute"]
    assert c["claimed (ms)"] == 9.0 and c["claimed share"] == pytest.approx(0.9)
    assert c["saved (ms)"] == pytest.approx(9.0) and c["saved share"] == pytest.approx(0.9)
    assert (c["saved share low"], c["saved share high"]) == (pytest.approx(0.875), pytest.approx(11 / 12))
    assert bool(c["agrees"])
    i = s.loc["input"]   # not resolved: no saving, no verdict on the claim
    assert i["verdict"] == "no difference" and pd.isna(i["saved (ms)"]) and pd.isna(i["agrees"])
    # a claim far from the saving's share does not agree
    wrong = dx.saved_vs_claimed({"compute": _diagnosis(10.0, {"compute": 2.0})}, fixes)
    assert not wrong["agrees"].iloc[0]


def test_measure_fixes_interleaved_rows_and_comparisons(tmp_path):
    res = Results("05_diagnose", "smoke", root=tmp_path)
    sizes = {"compute": 64, "launch/overhead": 50, "host sync": 0.5}
    fixes = dx.measure_fixes(res, make_step, sizes, rounds=3, untimed=1, device="cpu")
    assert set(fixes) == set(sizes)
    for kind, size in sizes.items():   # a = the plant, b = its fix: a ratio above 1 means the fix is faster
        c = res.comparison(dx.case_name(kind, size), dx.fix_name(kind, size))
        assert c is fixes[kind] and c["verdict"] in VERDICTS and c["n_a"] == c["n_b"] == 3
        assert len(c["samples"]["b"]) == 3 and c["role"] == "change"
    rows = {e["name"]: e for e in res.experiments}
    assert set(rows) == {"timed: planted compute (size 64)", "timed: planted launch/overhead (size 50)",
                         "timed: planted host sync (size 0.5)", "timed: planted host sync (size 0.5) without .item()",
                         f"timed: {dx.FIXED}"}   # the plain step is timed once, shared by the plants
    assert all(r["metrics"]["steps_timed"] == 3 and r["config"]["profiled"] is False for r in rows.values())
    assert dx.fix_name("host sync", 20.0) == "planted host sync (size 20) without .item()"


def test_a_spent_budget_skips_the_timing_and_the_profiled_case(tmp_path):
    from helpers.notebook.budget import Budget

    res = Results("05_diagnose", "smoke", root=tmp_path)
    spent = Budget(10, reserve_s=0, start=-1e9)
    assert dx.measure_fixes(res, make_step, {"compute": 64}, rounds=3, untimed=1, device="cpu", budget=spent) == {}
    assert dx.run_case(res, make_step, "compute", 64, device="cpu", budget=spent, **SCHEDULE) is None
    rows = {e["name"]: e for e in res.experiments}
    assert all(r["status"] == "failed" and "OverBudget: skipped" in r["error"] for r in rows.values())
    assert {"timed: planted compute (size 64)", f"timed: {dx.FIXED}", "planted compute (size 64)"} == set(rows)


def test_as_slowdown_reads_the_plant_as_what_it_does():
    from helpers.measure.compare import describe

    c = {"a": "planted input (size 1)", "b": "nothing planted", "ratio": 4.0, "low": 3.0, "high": 5.0,
         "verdict": "faster", "role": "change"}
    assert describe(dx.as_slowdown(c)) == ("planted input (size 1) takes 4.00× the time of nothing planted "
                                            "(95% interval 3.00–5.00): slower")


def test_results_view_only_informative_columns(tmp_path):
    res = Results("05_diagnose", "smoke", root=tmp_path)
    res.add("planted compute (size 64)", {"planted": "compute", "size": 64, "device": "cpu"},
            {"step_ms_mean": 2.0, "top_cause": "compute", "compute_ms": 1.5, "launch/overhead_ms": 0.5,
             "input_ms": 0.0, "causes_ms_sum": 2.0, "trace_dir": "/x"})
    res.add("expected failure: empty", {"path": "empty"}, status="failed", error="DoctorError: a long message")
    v = dx.results_view(res)
    assert list(v.columns) == ["experiment", "step_ms_mean", "top_cause", "input_ms", "launch/overhead_ms",
                               "compute_ms", "causes_ms_sum", "status"]   # no config, error, host sync, memory


def test_advice_depends_on_the_trace():
    """Launch/overhead: CUDA graphs only for a GPU trace; on a CPU-only trace what helps on a CPU."""
    cpu, gpu = dg.advice("launch/overhead", False), dg.advice("launch/overhead", True)
    assert "CUDA graph" in gpu and "CUDA graph" not in cpu
    assert "torch.compile" in cpu and "C++/OpenMP" in cpu and "fewer and larger ops" in cpu and "Python" in cpu
    assert all(dg.advice(c, True) == dg.SEE[c] for c in dg.CAUSES)


def test_advice_in_the_doctor_on_cpu_and_gpu_traces(tmp_path):
    """The doctor (and the lesson's check) on a CPU-only trace of a planted launch/overhead step, and on a GPU trace."""
    from helpers.measure.profiling import diagnose_step

    d = diagnose_step(make_step("launch/overhead", 300), trace_root=tmp_path, **SCHEDULE)
    see = next(c["see"] for c in d.causes if c["cause"] == "launch/overhead")
    assert not d.on_gpu and see == dg.SEE_CPU["launch/overhead"]
    rep = doctor.report(d.trace_dir, views=False)
    lo = next(c for c in rep["diagnosis"] if c["cause"] == "launch/overhead")
    assert "CUDA graph" not in lo["see"] and "torch.compile" in lo["see"]
    path = tmp_path / "gpu.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_gpu_trace(sync=False)).encode()))
    g = dg.diagnose(path)
    assert g.on_gpu and "CUDA graph" in g.causes[[c["cause"] for c in g.causes].index("launch/overhead")]["see"]
    rep = doctor.report(path, views=False)
    assert "CUDA graph" in next(c["see"] for c in rep["diagnosis"] if c["cause"] == "launch/overhead")


def test_advice_on_a_real_a100_trace():
    from tests.shared_data import gpu_trace

    d = dg.diagnose(gpu_trace("hta_control.json.gz"))
    assert d.on_gpu and "CUDA graph" in next(c["see"] for c in d.causes if c["cause"] == "launch/overhead")


def _gpu_trace(sync: bool):
    """Two 1000-µs steps of a GPU trace: a kernel 0-300, a sync 200-400 (when ``sync``), a kernel 900-950."""
    evs = []
    for k in range(2):
        o = k * 1000
        evs += [step(k, o, 1000), kernel("gemm", o, 300), kernel("relu", o + 900, 50)]
        if sync:
            evs.append(runtime("cudaStreamSynchronize", o + 200, 200))
    return doc(*evs)


def _sync_found(d):
    """Synchronisations with GPU idle time after them (None on a CPU-only trace: cannot judge)."""
    return (d.ms("host sync") or 0) > 0


def test_the_bound_label_and_its_table_follow_gpu_idle_time():
    """The H100 reference's compute plant: its CPU span covers its device work's (a loop synchronised every step),
    its GPU busy 99% of the step: device-bound in the row's metrics and in the table, beside both spans."""
    traces = ROOT / "data" / "reference" / "h100" / "05_diagnose" / "traces"
    paths = [next(traces.glob(f"05_diagnose_{k}/*/*.json.gz")) for k in ("compute", "input")]
    ds = {p: dg.diagnose(p) for p in paths}
    m = [dx.causes_metrics(d) for d in ds.values()]
    assert [r["bound"] for r in m] == ["device-bound", "host-bound"] and m[0]["gpu_idle_share"] < 0.02
    t = dx.bound_table(ds | {Path("cpu/a/b"): _diagnosis(5.0, {"compute": 4.0})})   # a CPU-only one: no row
    assert list(t["trace"]) == ["05_diagnose_compute", "05_diagnose_input"]
    assert list(t["bound (GPU idle)"]) == ["device-bound", "host-bound"]
    assert t["CPU span (ms)"].iloc[0] > t["device span (ms)"].iloc[0]


def test_reference_traces_and_the_sync_case(tmp_path):
    assert dx.reference_traces(tmp_path / "missing") == []
    for gpu, name, sync in (("h100", "host_sync.json.gz", True), ("h100", "compute.json.gz", False),
                            ("a100", "host_sync.json.gz", True)):
        d = tmp_path / gpu / "05_diagnose"
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(gzip.compress(json.dumps(_gpu_trace(sync)).encode()))
    (tmp_path / "h100" / "05_diagnose" / "notes.txt").write_text("not a trace")
    (tmp_path / "h100" / "02_data_pipeline").mkdir()
    (tmp_path / "h100" / "02_data_pipeline" / "x.json.gz").write_bytes(b"")   # another notebook's
    refs = dx.reference_traces(tmp_path)
    assert [(p.parent.parent.name, p.name) for p in refs] == [("a100", "host_sync.json.gz"), ("h100", "compute.json.gz"),
                                                             ("h100", "host_sync.json.gz")]
    found = {p.parent.parent.name + "/" + p.name: _sync_found(dg.diagnose(p)) for p in refs}
    assert found == {"a100/host_sync.json.gz": True, "h100/compute.json.gz": False, "h100/host_sync.json.gz": True}
    cpu = _diagnosis(5.0, {"compute": 4.0, "host sync": None})
    assert not _sync_found(cpu)   # a CPU-only trace cannot judge syncs
    m = dx.causes_metrics(dg.diagnose(refs[0]))
    assert m["host sync_ms"] > 0 and "trace_dir" not in m
    # a packed reference run (labtools.pack) keeps its traces under traces/: found too, results.json is not
    packed = tmp_path / "h200" / "05_diagnose" / "traces" / "05_diagnose_host sync" / "w.pt.trace.json.gz"
    packed.parent.mkdir(parents=True)
    packed.write_bytes(gzip.compress(json.dumps(_gpu_trace(True)).encode()))
    (tmp_path / "h200" / "05_diagnose" / "results.json").write_text("{}")
    assert dx.reference_traces(tmp_path)[-1] == packed and len(dx.reference_traces(tmp_path)) == 4
    assert packed.relative_to(tmp_path).parts[0] == "h200"   # the GPU, as the notebook names it


def test_gpu_idle_vs_hta(monkeypatch):
    from perf_doctor import views

    class Fake:
        def gpu_breakdown(self):
            return {"idle_pct": 16.2}

    monkeypatch.setattr(views, "open_trace", lambda path: Fake())
    d = _diagnosis(10.0, {"compute": 7.5, "host sync": 1.0}, on_gpu=True)
    assert dx.gpu_idle_vs_hta(d, "x.json.gz") == {"doctor": 25.0, "hta": 16.2}


def test_gpu_idle_vs_hta_on_a_real_a100_trace():
    """The HTA project's A100 trace (others' data, read from ../shared; skipped with the reason where absent)."""
    from tests.shared_data import gpu_trace

    path = gpu_trace("hta_control.json.gz")
    d = dg.diagnose(path)
    assert _sync_found(d)
    idle = dx.gpu_idle_vs_hta(d, path)
    assert 0 < idle["doctor"] < 100 and 0 < idle["hta"] < 100


def _baseline_trace_dir(tmp_path, monkeypatch):
    from helpers.measure.profiling import diagnose_step

    monkeypatch.setenv("PERF_RUNS_DIR", str(tmp_path / "runs"))
    return diagnose_step(make_step("none", 1), name="05_diagnose/none", **SCHEDULE).trace_dir


@pytest.mark.parametrize("with_trace", [True, False])
def test_bad_inputs_are_one_line_doctor_errors(tmp_path, monkeypatch, with_trace):
    trace_dir = _baseline_trace_dir(tmp_path, monkeypatch) if with_trace else None
    bad = dx.write_bad_inputs(tmp_path / "bad", trace_dir)
    assert set(bad) == {"not a trace", "truncated gz", "empty folder"}
    for what, path in bad.items():
        with pytest.raises(doctor.DoctorError) as exc:
            doctor.report(path)
        assert str(path) in str(exc.value) and "\n" not in str(exc.value), what
    assert "truncated" in str(pytest.raises(doctor.DoctorError, doctor.report, bad["truncated gz"]).value)
    if with_trace:   # the truncated .gz is half of the trace diagnose_step wrote
        whole = next(trace_dir.glob("*.pt.trace.json")).read_bytes()
        assert whole.startswith(gzip.GzipFile(bad["truncated gz"]).read1(64))


def test_trace_without_steps_is_analysed_whole(tmp_path):
    fn, path = make_step("none", 1), tmp_path / "no_steps.json"
    with torch.profiler.profile() as prof:   # as the notebook's appendix: no schedule, no prof.step()
        for _ in range(3):
            fn()
    prof.export_chrome_trace(str(path))
    rep = doctor.report(path, views=False)
    assert rep["steps"] == 1 and any("no ProfilerStep" in n for n in rep["notes"])
    d = dg.diagnose(path)   # the summary says what its one "step" is: the whole trace, not a training step
    assert d.whole_trace and d.summary().startswith("no ProfilerStep marks: the whole trace (")
    assert "not a training step" in d.summary().splitlines()[0] and "start-up" in d.notes[0]
    assert not any(e.get("name", "").startswith("ProfilerStep") for e in json.loads(path.read_text())["traceEvents"])


@pytest.mark.parametrize("kind,size", [("compute", "abc"), ("compute", float("inf")), ("disk", 1.0),
                                       ("host sync", 20.0)])
def test_the_panel_refuses_bad_values_before_running(kind, size):
    """Issue 20: the notebook's panel (run_panel with dx.validate_panel) refuses a text size, infinity, an unknown
    plant and, on a CPU, the host sync: one line, and the experiment never runs (no row marked Done)."""
    import ipywidgets as W

    from helpers.notebook import panels

    ran = []   # the size as the reader's code could pass it (a FloatText cannot hold "abc"): given to the validator
    panel = panels.run_panel(lambda **kw: ran.append(kw), {"kind": W.Text(value=kind), "size": W.FloatText()},
                             validate=lambda values: dx.validate_panel(values | {"size": size}, False))
    assert panel.click() is None and not ran
    assert panel.status.value.startswith("<b style='color:#b00'>Refused:</b>") and "\n" not in panel.status.value
