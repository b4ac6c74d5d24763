"""The doctor's own GPU figures (issue 44): full precision over the steps' own work against TraceLens' published
``gpu_timeline.csv`` on every trace of ``../shared/traces/tracelens/``; graph replays read honestly (no idle or cause
inferred inside them, no "host sync 41%" from a 2 µs sync, no CUDA-graphs advice to a step that replays graphs);
compiled code named, its advice not "try torch.compile"; a trace where nothing was profiled gets no cause; a value
the trace does not record reads unknown, never 0."""
from __future__ import annotations

import csv
import json

import pytest

from tests.fake_trace import doc, ev, kernel, op, runtime, step
from tests.shared_data import shared_path
from perf_doctor import diagnose, gputime
from perf_doctor import events as evs
from perf_doctor.kernels import kernel_rows
from perf_doctor.report import headline, trace_report

POINTS = 3.0  # busy and idle agree with TraceLens within 3 points of its window


def tracelens_pairs() -> list:
    """``(trace, gpu_timeline.csv)`` for each trace of ``tracelens/`` (the csv in the folder beside it)."""
    root = shared_path("traces", "tracelens")
    pairs = []
    for c in sorted(root.rglob("gpu_timeline.csv")):
        traces = sorted(c.parent.parent.glob("*.json.gz"))
        stem = c.parent.name.removesuffix("_perf_report_csvs")
        pick = [t for t in traces if t.name.removesuffix(".json.gz") == stem] or traces
        assert len(pick) == 1, (c, traces)
        pairs.append((pick[0], c))
    assert len(pairs) >= 6, pairs
    return pairs


def timeline(path) -> dict[str, float]:
    with open(path) as f:
        return {r["type"]: float(r["percent"]) for r in csv.DictReader(f)}


def test_busy_and_idle_agree_with_tracelens_on_every_trace():
    rows = []
    for trace, c in tracelens_pairs():
        tl = timeline(c)
        rep = trace_report(trace, views=False)
        g = rep["gpu_time"]
        assert g is not None, trace
        # the same window (no ProfilerStep: the span of the device work the trace launched) -> its own figures;
        # another window (the steps') -> the report names it, and its TraceLens-window figures agree
        same = g["window"] == gputime.WINDOW_SPAN
        fig = g if same else g["span"]
        assert abs(fig["busy_pct"] - tl["busy_time"]) <= POINTS, (trace.name, fig, tl)
        assert abs(fig["idle_pct"] - tl["idle_time"]) <= POINTS, (trace.name, fig, tl)
        text = "\n".join(headline(rep))
        assert "window: " + g["window_text"].split(" (")[0] in text.replace("\n    ", " "), text
        if not same:
            assert "TraceLens' window" in text, text
        rows.append((trace.name, g["window"], g["busy_pct"], tl["busy_time"]))
    assert {r[1] for r in rows} == {gputime.WINDOW_SPAN, gputime.WINDOW_STEPS}, rows


def test_backlog_from_before_the_trace_is_named_and_left_out():
    trace = shared_path("traces", "tracelens", "h100", "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    rep = trace_report(trace, views=False)
    g = rep["gpu_time"]
    assert g["window"] == gputime.WINDOW_STEPS and g["backlog"]["events"] > 400
    # the step's own work keeps the GPU busy ~two thirds of its 47 ms CPU step (31.9 ms), not the 88.6% with backlog
    assert g["busy_ms"] == pytest.approx(31.9, abs=0.2) and 60 < g["busy_pct"] < 75, g
    assert any(q["check"] == "backlog" for q in rep["quality"])
    assert any("backlog from before the trace" in line for line in headline(rep))


def test_graph_replay_is_reported_not_read_as_idle_or_host_sync():
    trace = shared_path("traces", "tracelens", "inference", "vllm_decode_full", "graph_execution.json.gz")
    rep = trace_report(trace, views=False)
    gr = rep["gpu_time"]["graphs"]
    assert gr["replays"] == 1 and gr["events"] >= 400 and gr["share"] > 0.9, gr
    causes = {c["cause"]: c for c in rep["diagnosis"]}
    assert causes["host sync"]["ms"] < 0.5 and not causes["host sync"]["finding"], causes["host sync"]
    assert "reduce-overhead" not in causes["launch/overhead"]["see"]
    assert "already replays" in causes["launch/overhead"]["see"]
    assert any(q["check"] == "graph_replay" for q in rep["quality"])
    assert causes["compute"]["graph_replays"] == 1


def test_compiled_code_is_named_and_not_told_to_compile():
    trace = shared_path("traces", "tracelens", "torch_compile_triton", "trace.json.gz")
    rep = trace_report(trace, views=False)
    c = rep["gpu_time"]["compiled"]
    assert c["ranges"] >= 1 and c["triton_kernels"] >= 4 and c["share"] > 0.9, c
    causes = {x["cause"]: x for x in rep["diagnosis"]}
    for cause in ("compute", "launch/overhead"):
        assert "already compiled" in causes[cause]["see"], causes[cause]["see"]
    assert any("compiled code" in line for line in headline(rep))


def _graph_step(k: int, t: float, c: int) -> list:
    """A 1000 µs step: a 2 µs event sync, then one cudaGraphLaunch whose 10 kernels run with gaps between them."""
    out = [step(k, t, 1000), runtime("cudaEventSynchronize", t + 10, 2), runtime("cudaGraphLaunch", t + 20, 5,
                                                                                corr=c)]
    out += [kernel(f"gemm_{i}", t + 40 + 90 * i, 50, corr=c) for i in range(10)]
    return out


def test_a_synthetic_replay_gets_no_host_cause_from_its_gaps():
    d = diagnose(doc(*_graph_step(1, 0.0, 10), *_graph_step(2, 1000.0, 20), *_graph_step(3, 2000.0, 30)))
    compute = next(c for c in d.causes if c["cause"] == "compute")
    assert compute["graph_replays"] == 3 and compute["unattributed_idle_ms"] > 0.3, compute
    assert d.ms("host sync") < 0.05 and d.ms("launch/overhead") < 0.2
    assert "already replays" in next(c for c in d.causes if c["cause"] == "launch/overhead")["see"]


def test_nothing_profiled_gets_no_cause(tmp_path):
    only_profiler = doc(ev("PyTorch Profiler (0)", 0.0, 5000.0, cat="Trace"))
    d = diagnose(only_profiler)
    assert d.nothing and d.top is None and all(c["ms"] is None for c in d.causes)
    path = tmp_path / "late_export.pt.trace.json"
    path.write_text(json.dumps(only_profiler))
    rep = trace_report(path, views=False)
    assert rep["top_cause"] is None and rep["verdict"].startswith("Nothing profiled"), rep["verdict"]
    lines = headline(rep)
    assert "nothing was profiled" in lines[0] and not any("launch/overhead" in x for x in lines), lines


def test_an_occupancy_not_estimated_reads_unknown():
    ks = [kernel("cutlass_80_tensorop_s1688gemm", 0.0, 10.0, corr=1, **{"est. achieved occupancy %": 0,
                                                                         "blocks per SM": 1.0}),
          kernel("elementwise", 20.0, 10.0, corr=2, **{"est. achieved occupancy %": 50, "blocks per SM": 2.0}),
          kernel("rocm_kernel", 40.0, 10.0, corr=3)]
    rows = {r["name"]: r for r in kernel_rows(ks)}
    assert rows["cutlass_80_tensorop_s1688gemm"]["occupancy_pct"] is None
    assert rows["cutlass_80_tensorop_s1688gemm"]["blocks_per_sm"] == 1.0
    assert rows["elementwise"]["occupancy_pct"] == 50
    assert rows["rocm_kernel"]["occupancy_pct"] is None and rows["rocm_kernel"]["blocks_per_sm"] is None


def test_json_carries_top_kernels_and_operators_with_their_classes():
    trace = shared_path("traces", "tracelens", "mi210", "gpu_only_trace", "gpu_only_trace.json.gz")
    rep = trace_report(trace, views=False)
    k = rep["top_kernels"][0]
    assert {"name", "calls", "total_ms", "ms_per_step", "tensor_cores", "dtype", "occupancy_pct"} <= set(k)
    assert "per step" in rep["tables"]["operators"] and "per step" in rep["tables"]["kernels"]
    assert isinstance(rep["top_operators"], list)


def test_own_work_without_launches_counts_all():
    d = doc(op("aten::mm", 0.0, 10.0), kernel("k", 1.0, 5.0, corr=9))
    own, backlog, outside = evs.own_work(evs.complete(d))
    assert len(own) == 1 and not backlog and not outside


def test_a_compiled_cpu_step_is_not_told_to_compile():
    events = []
    for k in range(1, 4):
        t = k * 1000.0
        events += [step(k, t, 900), op("Torch-Compiled Region: 0/0", t + 10, 800),
                   op("CompiledFunction", t + 20, 700)]
        events += [op("cpp_fused_add_0", t + 30 + 60 * i, 20) for i in range(10)]
    d = diagnose(doc(*events))
    assert d.compiled["ranges"] == 3 and d.compiled["host_share"] > 0.8, d.compiled
    for c in d.causes:
        if c["cause"] in ("compute", "launch/overhead"):
            assert "already compiled" in c["see"] and "Inductor's CPU backend fuses" not in c["see"], c["see"]


def test_a_graph_capture_is_not_read_as_lost_launches():
    from perf_doctor.quality import assess

    events = []
    for k in range(1, 4):
        t = k * 1000.0
        events += [step(k, t, 900), runtime("cudaLaunchKernel", t + 10, 2, corr=k * 100),
                   kernel("gemm", t + 20, 100, corr=k * 100)]
    events += [runtime("cudaStreamBeginCapture", 1200.0, 2)]
    events += [runtime("cudaLaunchKernel", 1210.0 + 5 * i, 2, corr=900 + i) for i in range(20)]
    events += [runtime("cudaStreamEndCapture", 1400.0, 2)]
    checks = {e["check"] for e in assess(doc(*events))}
    assert "graph_capture" in checks and "ops_without_kernels" not in checks, checks


def test_idle_behind_queued_work_is_not_judged_a_host_sync():
    # SGLang's decode: kernels launched at 0.1-0.3 ms wait (hipStreamWaitEvent) until 463 ms while the host sits in a
    # blocking copy: the GPU waited on an event the trace does not record, not on the host
    trace = shared_path("traces", "tracelens", "inference", "sglang_decode", "sglang_Qwen3-8B_decode.json.gz")
    rep = trace_report(trace, views=False)
    causes = {c["cause"]: c for c in rep["diagnosis"]}
    assert rep["top_cause"] != "host sync" and causes["host sync"]["ms"] < 5, causes["host sync"]
    assert causes["compute"]["unattributed_idle_ms"] > 400
    assert any(line.startswith("Not judged: ") for line in headline(rep))
