"""helpers.lessons.torch_compile's harness, report and charts: the matrix under its time budget, interleaved
re-timing, explain, the profiled pair, the starts row, TensorBoard logging, and the tables and figures built from the
rows (tiny MLP cells with the aot_eager backend, or synthetic rows: structure, never timings)."""
import pytest
import torch

from helpers.lessons import torch_compile as cl
from helpers.lessons.torch_compile import harness, report
from helpers.notebook.budget import Budget
from helpers.notebook.results import Results

TINY = dict(image_size=8, hidden=16, n_batches=2, compile_steps=1)
RTOL = {"fp32": 1e-3, "bf16": 5e-2, "fp16": 5e-2}


@pytest.fixture
def res(tmp_path):
    return Results("04_test", "smoke", {}, root=tmp_path)


def _cell(res, model, mode, metrics, precision="fp32", batch_size=4, status="ok"):
    cfg = {"model": model, "precision": precision, "mode": mode, "batch_size": batch_size}
    return res.add(cl.cell_name(model, precision, mode, batch_size), cfg, metrics, status=status,
                   error=None if status == "ok" else "boom")


def _timed(median, **extra):
    """A row's timing metrics: a median with its quartiles around it, the first steps, a loss curve."""
    return {"step_ms_median": median, "step_ms_p25": median - 1, "step_ms_p75": median + 1, "losses": [2.0, 1.0],
            "first_steps_ms": [median * 10], "first_steps_s": median / 100, "first_steps_excess_s": 0.0, **extra}


# -- harness -------------------------------------------------------------------------------------------------------
def test_matrix_time_guard_skips_the_cells_after_the_matrix_share(res, capsys, monkeypatch):
    state = {"t": 0.0}  # notebook time, advanced 15 s by each cell that runs
    budget = Budget(100.0, start=0.0, clock=lambda: state["t"])
    run = harness.record_cell

    def timed(*a, **k):
        row = run(*a, **k)
        state["t"] += 15.0
        return row

    monkeypatch.setattr(harness, "record_cell", timed)
    cells = [("mlp", "fp32", "eager"), ("mlp", "fp32", "default"), ("mlp_fixed", "fp32", "eager")]
    names, steps = cl.run_matrix(res, cells, 4, 2, budget=budget, matrix_s=10.0, keep_steps=True,
                                 extra_config={"matmul_precision": "highest"}, **TINY)
    assert names == [cl.cell_name(*c, 4) for c in cells]
    rows = [res.get(n) for n in names]
    assert rows[0]["status"] == "ok" and rows[0]["config"]["matmul_precision"] == "highest"
    for r in rows[1:]:  # after the matrix's 10 s of notebook time: skipped rows, so "every matrix cell ran" is false
        assert r["status"] == "failed"
        assert r["error"] == "OverBudget: skipped: the matrix's share of the time budget (10 s of notebook time) was spent"
    assert list(steps) == [names[0]]
    assert "skipped (budget)" in capsys.readouterr().out
    with pytest.raises(ValueError, match="budget"):
        cl.run_matrix(res, cells, 4, 2, matrix_s=1.0)


def test_matrix_time_guard_stops_the_cell_already_running(res, monkeypatch):
    """A real clock and a tiny share: the running cell (a compile that would take 30 s) is stopped at the end of the
    matrix's share, the next is skipped, the whole budget's own guard skips what comes after."""
    import time as _time

    from helpers.lessons.torch_compile import cells as cells_mod

    def slow(*a, **k):
        _time.sleep(30)
        return {}

    monkeypatch.setattr(cells_mod, "run_cell", slow)
    budget = Budget(2.0)
    t0 = _time.monotonic()
    cells = [("mlp", "fp32", "eager"), ("mlp", "fp32", "default")]
    names, steps = cl.run_matrix(res, cells, 4, 2, budget=budget, matrix_s=0.5, **TINY)
    assert _time.monotonic() - t0 < 10, "the running cell was not stopped"
    first, second = (res.get(n) for n in names)
    assert first["status"] == "failed" and first["error"].startswith("OverBudget: stopped: over the time budget")
    assert second["status"] == "failed" and second["error"].startswith("OverBudget: skipped:")
    _time.sleep(max(0.0, 2.1 - budget.elapsed()))
    row = harness.record_explains(res, ["swin_mini"], 64, budget=budget)[0]
    assert row["status"] == "failed" and row["error"].startswith("OverBudget: skipped: the notebook's time budget")


def test_matrix_without_budget_keeps_only_the_successful_cells_steps(res, monkeypatch):
    """A compiled cell that fails at its first step (after its parity setting was kept) is a failed row and keeps
    no step; the cells after it run."""
    def broken_compile(model, **kw):
        def run(*a, **k):
            raise RuntimeError("lowering exploded")
        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    cells = [("mlp", "fp32", "default"), ("mlp", "fp32", "eager")]
    names, steps = cl.run_matrix(res, cells, 4, 2, keep_steps=True, **TINY)
    bad, ok = (res.get(n) for n in names)
    assert bad["status"] == "failed" and "failed at step 1" in bad["error"] and ok["status"] == "ok"
    assert list(steps) == [ok["name"]] and callable(steps[ok["name"]])
    _, none_kept = cl.run_matrix(res, cells[1:], 4, 2, **TINY)
    assert none_kept == {}


def test_interleave_stores_each_rows_window_and_the_eager_median_beside_the_compiled(res, capsys):
    cells = [("mlp", "fp32", "eager"), ("mlp", "fp32", "default"), ("mlp_fixed", "fp32", "eager")]
    names, steps = cl.run_matrix(res, cells, 4, 2, keep_steps=True, backend="aot_eager", **TINY)
    recompiles, table = cl.interleave(res, steps, 3)
    assert recompiles == 0  # the kept compiled step runs its graph again, no new one
    assert list(table.cell) == names and {"sequential_ms_median", "interleaved_ms_median", "interleaved_iqr_ms"} <= set(table)
    eager, comp, other = (res.get(n)["metrics"] for n in names)
    for m in (eager, comp, other):
        assert m["interleaved_ms_p25"] <= m["interleaved_ms_median"] <= m["interleaved_ms_p75"]
    assert comp["interleaved_eager_ms_median"] == eager["interleaved_ms_median"]  # same model, precision, batch
    assert "interleaved_eager_ms_median" not in eager and "interleaved_eager_ms_median" not in other
    assert comp["interleaved_eager_ms_mean"] == eager["interleaved_ms_mean"]
    # each compiled cell against its eager cell, in results.json's comparisons (ratio of medians, interval, verdict)
    c = res.comparison(names[0], names[1], "step_ms_median")  # medians by default
    assert c is not None and c["n_a"] == c["n_b"] == 3 and c["verdict"] in ("faster", "slower", "no difference")
    # the stored medians are rounded to the µs; the ratio is of the unrounded ones
    assert c["ratio"] == pytest.approx(eager["interleaved_ms_median"] / comp["interleaved_ms_median"], rel=2e-3, abs=1e-3)
    assert len(res.comparisons) == 1  # mlp_fixed eager has no compiled cell
    assert "3 rounds; graphs compiled during the interleaved timing: 0" in capsys.readouterr().out
    cl.interleave(res, steps, 3, pairs=[(names[1], names[2]), (names[1], "not a row")])
    assert res.comparison(names[1], names[2]) is not None and len(res.comparisons) == 2
    cl.interleave(res, steps, 3, statistic="mean")  # means: a metric of their own
    assert res.comparison(names[0], names[1], "step_ms_mean") is not None and len(res.comparisons) == 3
    with pytest.raises(ValueError, match="statistic"):
        cl.interleave(res, steps, 3, statistic="mode")
    assert cl.interleave(res, steps, 0) == (0, None) and cl.interleave(res, {names[0]: steps[names[0]]}, 3) == (0, None)


def test_explain_rows_and_their_tables(res):
    rows = cl.record_explains(res, ["mlp_break", "mlp_fixed", "resnet9000"], 8)
    assert [r["status"] for r in rows] == ["ok", "ok", "failed"]
    m = res.get("explain mlp_break")["metrics"]
    assert m["graph_breaks"] >= 1 and m["graphs"] >= 2 and m["reasons"] and " at " in m["reasons"][0]
    assert res.get("explain mlp_fixed")["metrics"]["graph_breaks"] == 0
    frame = cl.explain_frame(res, ["mlp_break", "mlp_fixed", "resnet9000"])
    assert list(frame.model) == ["mlp_break", "mlp_fixed"] and "reasons" not in frame
    reasons = cl.explain_reasons(res, ["mlp_break", "mlp_fixed", "resnet9000"])
    assert reasons and all(r.startswith("mlp_break: ") for r in reasons)


def test_profile_pair_rows_and_frame(res):
    profiled = cl.profile_pair(res, "mlp", "fp32", 4, active=2, backend="aot_eager", **TINY)
    assert set(profiled) == {"eager", "default"}
    for mode, m in profiled.items():
        row = res.get(f"profiled mlp fp32 {mode}")
        assert row["config"] == {"what": "profile", "model": "mlp", "precision": "fp32", "mode": mode, "batch_size": 4}
        assert m["steps_recorded"] == 2 and m["op_calls_per_step"] > 0 and m["kernel_calls_per_step"] is None
    frame = cl.profiled_frame(profiled)
    assert list(frame["mode"]) == ["eager", "default"] and "trace_dir" not in frame
    failed = cl.profile_pair(res, "resnet9000", "fp32", 4, **TINY)
    assert failed == {} and res.get("profiled resnet9000 fp32 eager")["status"] == "failed"


def test_starts_row_table_and_line(res, monkeypatch, tmp_path):
    seen = {}

    def fake(cache_dir, **kw):
        seen.update(cache_dir=cache_dir, **kw)
        one = dict(process_s=9.0, compile_s=4.0, first_steps_s=4.5, fx_graph_cache_hits=0, fx_graph_cache_misses=3,
                   step_ms_median=1.0)
        return {"cold": one, "warm": {**one, "process_s": 6.0, "compile_s": 1.0, "fx_graph_cache_hits": 3,
                                      "fx_graph_cache_misses": 0}}

    monkeypatch.setattr(harness, "cold_warm_start", fake)
    row = cl.record_starts(res, tmp_path / "c", torch.device("cpu"), model_name="mlp_fixed", steps=2)
    assert seen == {"cache_dir": tmp_path / "c", "device": "cpu", "model_name": "mlp_fixed", "steps": 2}
    assert row["name"] == "fresh-process start: cold vs warm cache" and row["config"]["what"] == "start"
    m = row["metrics"]
    assert m["fx_graph_cache_hits_warm"] == 3 and m["compile_s_cold"] == 4.0
    frame = cl.starts_frame(m)
    assert list(frame.start) == ["cold", "warm"] and list(frame.compile_s) == [4.0, 1.0]
    assert "compile 1.0 s against 4.0 s (4.0x less)" in cl.starts_line(m)


def test_log_to_tensorboard_logs_the_training_rows_only(res, tmp_path):
    _cell(res, "mlp", "eager", _timed(10.0, step_times_ms=[10.0, 11.0]))
    _cell(res, "mlp", "default", {}, status="failed")
    res.add("explain mlp", {"what": "explain"}, {"graphs": 1})
    logged = cl.log_to_tensorboard(res, "04_test", root=tmp_path / "runs")
    assert logged == ["mlp fp32 eager bs=4"] and len(list((tmp_path / "runs").iterdir())) == 1


# -- report ------------------------------------------------------------------------------------------------------
def test_summary_frame_stores_the_derived_numbers_and_judges_parity_per_precision(res):
    _cell(res, "mlp", "eager", _timed(100.0))
    _cell(res, "mlp", "default", _timed(80.0, losses=[2.0, 1.01], compile_s=0.5))  # 1% off: fails fp32's 1e-3
    _cell(res, "mlp", "eager", _timed(100.0), precision="bf16")
    _cell(res, "mlp", "default", _timed(125.0, losses=[2.0, 1.01], compile_s=0.5), precision="bf16")
    _cell(res, "mlp", "reduce-overhead", {}, status="failed")
    names = [e["name"] for e in res.experiments]
    s = cl.summary_frame(res, names, RTOL).set_index("cell")
    assert not s.loc[names[1], "loss_match"] and s.loc[names[3], "loss_match"]  # bf16 allows 5e-2
    m = res.get(names[1])["metrics"]
    assert m["speedup"] == 1.25 and m["loss_match"] is False and m["break_even_basis"] == "whole run"
    assert res.get(names[3])["metrics"]["break_even_steps"] == "never"
    assert res.get(names[4])["metrics"] == {} and s.loc[names[4], "error"] == "boom"
    assert cl.timing_basis(s) == ("step_ms", "iqr_ms", "sequential")
    view = cl.matrix_view(s.reset_index(), "step_ms", "iqr_ms")
    assert {"step_ms_median", "step_iqr_ms", "speedup (medians)", "loss_match"} <= set(view) and "step_ms" not in view
    assert cl.best_cell_line(s.reset_index(), "step_ms", "sequential").startswith(
        f"best compiled cell: {names[1]}: 80.0 ms vs eager 100.0 ms (sequential medians); 1.25x (no interval")
    assert len(cl.compiled_cells(s.reset_index(), ["mlp"])) == 2 and not len(cl.compiled_cells(s.reset_index(), ["x"]))


def test_summary_frame_uses_interleaved_medians_when_every_cell_has_them(res):
    _cell(res, "mlp", "eager", _timed(100.0, interleaved_ms_median=50.0, interleaved_ms_p25=49.0,
                                      interleaved_ms_p75=51.0))
    _cell(res, "mlp", "default", _timed(10.0, interleaved_ms_median=40.0, interleaved_ms_p25=39.0,
                                        interleaved_ms_p75=41.0, interleaved_eager_ms_median=50.0, compile_s=0.1))
    s = cl.summary_frame(res, [e["name"] for e in res.experiments], RTOL)
    assert cl.timing_basis(s) == ("interleaved_ms", "interleaved_iqr_ms", "interleaved")
    assert s.speedup.tolist() == [1.0, 1.25]


def test_compile_time_frame_and_the_article_length_run(res):
    _cell(res, "mlp", "eager", _timed(100.0, step_times_ms=[99.0, 100.0, 101.0]))
    _cell(res, "mlp", "default", _timed(50.0, compile_s=0.2, first_steps_ms=[5100.0], first_steps_s=5.1,
                                        break_even_steps=101, step_times_ms=[49.0, 50.0, 51.0]))
    _cell(res, "mlp_fixed", "default", _timed(50.0, compile_s=0.2))  # no eager cell: no row
    names = [e["name"] for e in res.experiments]
    f = cl.compile_time_frame(res, names, 1, article_eager_run_s=100.0)
    assert list(f.cell) == [names[1]]
    r = f.iloc[0]
    # 1000 steps of 100 ms eager; compiled: 5.1 s of first step, then 999 steps of 50 ms
    assert r.article_length_run_steps == 1000 and r.steady_speedup == 2.0
    assert r.whole_run_speedup == round((1.0 + 999 * 0.1) / (5.1 + 999 * 0.05), 3)
    assert res.get(names[1])["metrics"]["whole_run_speedup_article_length"] == r.whole_run_speedup
    assert r.verdict == "faster" and res.comparison(names[0], names[1])["metric"] == "step_ms_median_sequential"


def test_derived_figures_only_where_the_comparison_resolves(res):
    _cell(res, "mlp", "eager", _timed(100.0, step_ms_mean=100.0, step_times_ms=[60.0, 100.0, 140.0]))
    _cell(res, "mlp", "default", _timed(99.0, step_ms_mean=99.0, compile_s=0.2, first_steps_ms=[500.0],
                                        step_times_ms=[59.0, 99.0, 139.0]))
    names = [e["name"] for e in res.experiments]
    s = cl.summary_frame(res, names, RTOL).set_index("cell")
    assert s.loc[names[1], "verdict"] == "no difference" and s.loc[names[1], "break_even_steps"] == "not resolved"
    assert s.loc[names[1], "speedup_low"] < 1 < s.loc[names[1], "speedup_high"]
    assert "does not resolve" in cl.best_cell_line(s.reset_index(), "step_ms", "sequential")
    view = cl.matrix_view(s.reset_index(), "step_ms", "iqr_ms")  # the interval as one narrow column
    lo, hi = s.loc[names[1], "speedup_low"], s.loc[names[1], "speedup_high"]
    assert list(view["95% interval"]) == [None, f"{lo:.2f}–{hi:.2f}"] and "speedup_low" not in view
    f = cl.compile_time_frame(res, names, 1, article_eager_run_s=100.0)
    assert f.iloc[0].whole_run_speedup is None and f.iloc[0].verdict == "no difference"


def test_memory_frame_is_empty_on_a_cpu_and_compares_steady_peaks_on_a_gpu(res):
    _cell(res, "mlp", "eager", _timed(10.0, peak_mem_mb=None))
    _cell(res, "mlp", "default", _timed(10.0, peak_mem_mb=None, compile_s=0.1))
    assert not len(cl.memory_frame(res, [e["name"] for e in res.experiments]))
    gpu = Results("04_gpu", "full", {}, root=res.dir)
    peaks = dict(peak_mem_mb=900.0, peak_reserved_mb=1200.0, first_steps_peak_mem_mb=900.0)
    _cell(gpu, "swin_t", "eager", _timed(10.0, **peaks, steady_peak_mem_mb=400.0, steady_peak_reserved_mb=1000.0))
    _cell(gpu, "swin_t", "reduce-overhead", _timed(5.0, **peaks, steady_peak_mem_mb=360.0,
                                                   steady_peak_reserved_mb=1100.0, compile_s=1.0))
    mem = cl.memory_frame(gpu, [e["name"] for e in gpu.experiments])
    r = mem.iloc[0]
    assert len(mem) == 1 and r["mode"] == "reduce-overhead" and r.eager_peak_alloc_mb == 400.0
    assert r.alloc_change_pct == -10.0 and r.reserved_change_pct == 10.0 and r.compiled_first_steps_peak_alloc_mb == 900.0
    assert cl.memory_line(mem).endswith("swin_t fp32 reduce-overhead -10.0%")


def test_graph_break_frame_and_comparisons(res):
    for model, graphs, breaks, ms in (("mlp_break", 3, 1, 20.0), ("mlp_fixed", 1, 0, 10.0)):
        _cell(res, model, "eager", _timed(30.0), batch_size=64)
        _cell(res, model, "default", _timed(ms, compile_s=0.1, graphs=graphs, graph_breaks=breaks,
                                            logged_recompiles=0), batch_size=64)
    names = [e["name"] for e in res.experiments]
    f = cl.graph_break_frame(res, names, RTOL, "interleaved_ms")
    assert list(f.graph_breaks.fillna(-1)) == [-1, 1, -1, 0] and "step_ms_median" in f  # sequential: no interleaving
    lines = cl.graph_break_lines(res, 64)
    assert len(lines) == 3 and all(line.endswith("(no interleaved rounds ran)") for line in lines)
    for m, ms in zip(("mlp_break", "mlp_fixed"), (20.0, 10.0)):
        res.get(cl.cell_name(m, "fp32", "default", 64))["metrics"].update(interleaved_ms_median=ms)
    res.compare(names[1], names[3], [20.0, 20.5, 19.5], [10.0, 10.5, 9.5], metric="step_ms_median")  # a figure
    res.compare(names[0], names[1], [30.0, 10.0, 50.0], [29.0, 11.0, 49.0], metric="step_ms_median")  # none
    lines = cl.graph_break_lines(res, 64)
    assert lines[2].startswith("mlp_fixed fp32 default bs=64 is faster than mlp_break fp32 default bs=64")
    assert lines[2].endswith("; +10.00 ms per step")
    assert lines[0].startswith("no difference") and lines[0].endswith("so no per-step figure")
    assert cl.graph_break_lines(res, 16) is None


def test_article_side_table_and_chart(res):
    side = cl.article_side_table(res, [])
    assert list(side.source) == [report.ARTICLE_SOURCE] * 3  # never empty: the article's figures, named
    assert side.set_index("cell").loc["swin_b fp16", "speedup"] == 1.41
    assert "memory unchanged" in side.set_index("cell").loc["convnext_large fp16", "verdict or words"]
    _cell(res, "gated_mlp", "eager", _timed(10.0, step_times_ms=[9.9, 10.0, 10.1]))
    _cell(res, "gated_mlp", "default", _timed(5.0, step_times_ms=[4.9, 5.0, 5.1], compile_s=0.1))
    _cell(res, "swin_t", "default", {}, precision="fp16", status="failed")
    names = [e["name"] for e in res.experiments]
    side = cl.article_side_table(res, names, device="cpu")
    mine = side[side.source == "this run (cpu)"].iloc[0]
    assert len(side) == 4 and mine.cell == "gated_mlp fp32 default" and mine["verdict or words"] == "faster"
    assert mine.speedup == res.comparison(names[0], names[1])["ratio"] and "–" in mine["95% interval"]

    class Ref:  # a reference run's rows, as notebook.reference.Reference holds them
        label = "reference (h100)"
        doc = {"experiments": [{"status": "ok", "config": {"model": "swin_b", "precision": "fp16", "mode": "default"},
                                "metrics": {"speedup": 1.5, "speedup_low": 1.4, "speedup_high": 1.6,
                                            "verdict": "faster"}}]}

    side = cl.article_side_table(res, names, ref=Ref(), device="cpu")
    assert list(side.source)[-1] == "reference (h100)" and list(side["95% interval"])[-1] == "1.40–1.60"
    fig = cl.article_chart(side)
    assert len(fig.axes[0].patches) == 4  # swin_t's article row has only words: no bar
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_profiled_line_puts_the_profiled_ratio_beside_the_comparison(res):
    _cell(res, "gated_mlp", "eager", _timed(10.0))
    _cell(res, "gated_mlp", "default", _timed(5.0, interleaved_ms_median=5.0, interleaved_eager_ms_median=10.0))
    names = [e["name"] for e in res.experiments]
    prof = {"eager": {"trace_step_ms_mean": 30.0, "op_calls_per_step": 400.0},
            "default": {"trace_step_ms_mean": 6.0, "op_calls_per_step": 20.0}}
    assert cl.profiled_line(prof, res, names[1]).endswith("so the ratio is not put beside one.")
    res.compare(names[0], names[1], [9.9, 10.0, 10.1], [4.9, 5.0, 5.1])
    line = cl.profiled_line(prof, res, names[1])
    assert "a ratio of 5.00x" in line and "is not a speed-up" in line and "400 calls against 20" in line
    assert "3.0x (eager) and 1.2x (compiled) their unprofiled medians" in line


def test_final_view_and_matrix_chart(res):
    _cell(res, "mlp", "eager", _timed(100.0))
    _cell(res, "mlp", "default", _timed(80.0, compile_s=0.5))
    _cell(res, "mlp", "max-autotune", {}, status="failed")
    _cell(res, "mlp_break", "eager", _timed(10.0))
    final = cl.summary_frame(res, [e["name"] for e in res.experiments], RTOL)
    view = cl.final_view(final)
    assert "peak_mem_mb" not in view and "interleaved_ms" not in view and "error" in view  # empty columns dropped
    fig = cl.matrix_chart(final, res, ["mlp"], "sequential", 1)
    speed, comp, loss = fig.axes[:3]
    assert len(speed.patches) == 2 and len(comp.patches) == 2 and len(loss.lines) == 2  # mlp's ok cells only
    import matplotlib.pyplot as plt

    plt.close(fig)
