"""helpers.lessons.profiler_basics (notebook 01_profiler_basics): the step it builds, the readings of its profile on
a CPU (and their GPU branches on made-up phase tables), the panel's validator and experiment."""
import math

import pandas as pd
import pytest
import torch

from helpers.lessons import profiler_basics as pb
from helpers.measure import profiling, training
from helpers.measure.validate import InvalidValue
from helpers.notebook.results import Results

MODEL = dict(image_size=16, width=4, blocks=2)
ACTIVE = 2


def plt_close(fig):
    import matplotlib.pyplot as plt

    plt.close(fig)


@pytest.fixture(scope="module")
def cpu_profile():
    _, step = pb.build("cpu", 4, **MODEL)
    prof = profiling.profile_steps(step, wait=0, warmup=1, active=ACTIVE, device="cpu", sync=False)
    return prof, profiling.events_frame(prof), profiling.phase_times(prof, [*training.PHASES, "ProfilerStep*"]), \
        profiling.step_times(prof)


def test_build_gives_a_labelled_step_that_trains():
    model, step = pb.build("cpu", 4, **MODEL)
    assert pb.count_parameters(model) == sum(p.numel() for p in model.parameters()) > 0
    before = [p.detach().clone() for p in model.parameters()]
    loss = step()
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters())), "the optimizer stepped"
    # the same seed gives the same model and batch
    assert torch.equal(pb.build("cpu", 4, **MODEL)[1](), pb.build("cpu", 4, **MODEL)[1]())


def test_is_label():
    assert all(pb.is_label(p) for p in training.PHASES)
    assert pb.is_label("ProfilerStep#3") and pb.is_label("ProfilerStep*")
    assert not pb.is_label("aten::conv2d") and not pb.is_label("forward_pre")


def test_phase_view_sentence_and_chart_on_a_cpu(cpu_profile):
    _, _, pt, _ = cpu_profile
    view = pb.phase_view(pt, False)
    assert list(view.columns) == ["label", "calls", "cpu_per_call_ms"]
    assert list(view["label"]) == [*training.PHASES, "ProfilerStep*"] and (view["calls"] == ACTIVE).all()
    text = pb.phase_sentence(pt, False)
    assert "CPU: no GPU timeline" in text and f"{pt.loc['forward', 'cpu_ms_per_call']:.2f} ms" in text
    fig = pb.phase_chart(pt, False, ACTIVE, "t")
    bars = fig.axes[0].containers
    assert len(bars) == 1 and [round(b.get_width(), 6) for b in bars[0]] == \
        [round(pt.loc[p, "cpu_ms"] / ACTIVE, 6) for p in training.PHASES]
    assert "whiskers" not in fig.axes[0].get_xlabel()
    plt_close(fig)
    calls = pb.phase_calls(cpu_profile[0], False)      # each phase per recorded step: the whiskers
    assert {p: len(v) for p, v in calls.items()} == {p: ACTIVE for p in training.PHASES}
    assert sum(map(sum, calls.values())) == pytest.approx(pt.loc[list(training.PHASES), "cpu_ms"].sum())
    fig = pb.phase_chart(pt, False, ACTIVE, "t", calls)
    from matplotlib.container import ErrorbarContainer

    whiskers = next(c for c in fig.axes[0].containers if isinstance(c, ErrorbarContainer))
    lo, hi = whiskers.lines[2][0].get_segments()[0][:, 0]      # the first phase's whisker
    assert lo == pytest.approx(min(calls["forward"])) and hi == pytest.approx(max(calls["forward"]))
    assert "whiskers" in fig.axes[0].get_xlabel()
    plt_close(fig)
    plt_close(fig)


def test_chain_nests_and_top_op_on_a_cpu(cpu_profile):
    _, ev, pt, steps = cpu_profile
    df, ok = pb.chain_table(ev, False)
    assert ok and list(df["name"]) == list(pb.CHAIN) and (df["calls"] == 2 * ACTIVE).all()  # two convolutions
    name, share = pb.top_op(ev, False)
    assert not pb.is_label(name) and 0 < share <= 1
    m = pb.profiled_step_metrics(pt, steps, on_gpu=False, active=ACTIVE, coverage=0.97, top=(name, share),
                                 self_total_ms=12.0, busy_ms=float("nan"))
    assert m["profiled_step_ms_mean"] == m["step_ms_mean"] == round(steps["cpu_ms"].mean(), 3)
    assert m["gpu_busy_ms"] is None
    assert m["step_ms_median"] == round(steps["cpu_ms"].median(), 3) and m["steps_timed"] == ACTIVE
    assert {f"{p}_ms_per_step" for p in training.PHASES} <= set(m) and not any("_cpu_ms_per_step" in k for k in m)
    assert m["top_op"] == name and m["label_coverage"] == 0.97


def test_chain_table_says_when_a_row_is_missing_or_totals_do_not_nest():
    rows = [(n, False, 3, 1.0, t, 0.0, d) for n, t, d in zip(pb.CHAIN, (3.0, 2.0, 1.0), (5.0, 5.0, 5.0))]
    ev = pd.DataFrame(rows, columns=["name", "on_device", "calls", "self_cpu_ms", "cpu_total_ms", "self_device_ms",
                                     "device_total_ms"])
    assert pb.chain_table(ev, False)[1] and pb.chain_table(ev, True)[1]
    assert not pb.chain_table(ev.iloc[:2], False)[1]                          # a row missing
    bad = ev.assign(device_total_ms=[1.0, 2.0, 3.0])                          # device totals do not nest
    assert pb.chain_table(bad, False)[1] and not pb.chain_table(bad, True)[1]
    assert list(pb.chain_table(ev, True)[0].columns)[-2:] == ["self_device_ms", "device_total_ms"]


def _gpu_phase_table():
    """phase_times as a GPU run gives it: the GPU runs each phase longer than the CPU took to queue it."""
    labels = [*training.PHASES, "ProfilerStep*"]
    cpu, gpu, busy = [1.0, 0.5, 0.2, 2.0], [4.0, 8.0, 1.0, 14.0], [3.0, 7.0, 0.5, 11.0]
    pt = pd.DataFrame({"label": labels, "calls": [2] * 4, "cpu_ms": cpu, "gpu_ms": gpu, "gpu_busy_ms": busy,
                       "cpu_ms_per_call": [c / 2 for c in cpu], "gpu_ms_per_call": [g / 2 for g in gpu]})
    pt = pt.set_index("label")
    pt.attrs["gpu_source"] = "launches"
    return pt


def test_gpu_branches_read_gpu_time():
    pt = _gpu_phase_table()
    view = pb.phase_view(pt, True)
    assert list(view.columns)[-2:] == ["gpu_per_call_ms", "gpu_busy_share"]
    assert view.set_index("label").loc["backward", "gpu_busy_share"] == 0.875
    text = pb.phase_sentence(pt, True)
    assert "**2.00 ms** on the GPU" in text and "(4.0×)" in text and "(79% busy)" in text and "launches" in text
    assert "One profiled step: 7.00 ms GPU" in text
    steps = pd.DataFrame({"step": ["a", "b"], "cpu_ms": [1.0, 1.0], "gpu_ms": [7.0, 7.0], "gpu_busy_ms": [5.0, 6.0]})
    m = pb.profiled_step_metrics(pt, steps, on_gpu=True, active=2, coverage=0.93, top=("k", 0.5),
                                 self_total_ms=3.0, busy_ms=11.5)
    assert m["profiled_step_ms_mean"] == m["step_ms_mean"] == 7.0 and m["steps_timed"] == 2
    assert m["forward_ms_per_step"] == 2.0 and m["forward_cpu_ms_per_step"] == 0.5
    assert m["gpu_busy_ms"] == 11.5
    fig = pb.phase_chart(pt, True, 2, "t")
    gpu_bars, cpu_bars = fig.axes[0].containers
    assert [b.get_width() for b in gpu_bars] == [2.0, 4.0, 0.5] and [b.get_width() for b in cpu_bars] == [0.5, 0.25, 0.1]
    assert fig.axes[0].get_xlabel().startswith("GPU")
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_top_op_on_a_gpu_shares_kernel_time():
    ev = pd.DataFrame({"name": ["forward", "aten::conv2d", "sgemm_kernel", "relu_kernel"],
                       "on_device": [False, False, True, True], "self_cpu_ms": [9.0, 1.0, 0.0, 0.0],
                       "self_device_ms": [0.0, 0.0, 3.0, 1.0]})
    assert pb.top_op(ev, True) == ("sgemm_kernel", 0.75)
    assert pb.top_op(ev, False) == ("aten::conv2d", 1.0)   # labels are not operators


def test_ops_per_step_shows_the_first_step_differs():
    _, step = pb.build("cpu", 2, **MODEL)
    ops = pb.ops_per_step(step, 3, "cpu")
    assert len(ops) == 3 and ops[0] - ops[1] and ops[1] == ops[2]


@pytest.mark.parametrize("values,message", [
    ({"batch_size": 0}, "at least 1"),
    ({"batch_size": "32"}, "whole number"),
    ({"batch_size": 5000}, "limit"),
    ({"precision": "fp64"}, "unknown precision"),
    ({"precision": "fp16"}, "GPU"),
    ({"deterministic": "abc"}, "True or False"),
    ({"deterministic": "False"}, "True or False"),
    ({"deterministic": 1}, "True or False"),
    ({"deterministic": None}, "True or False"),
])
def test_validate_panel_refuses_with_one_line(values, message):
    full = {"batch_size": 8, "precision": "fp32", "deterministic": False} | values
    with pytest.raises(InvalidValue, match=message) as exc:
        pb.validate_panel(full, torch.device("cpu"))
    assert "\n" not in str(exc.value)


def test_validate_panel_accepts_good_values():
    ok = {"batch_size": 8, "precision": "bf16", "deterministic": True}
    assert pb.validate_panel(ok, "cpu") == ok
    assert pb.validate_panel(ok | {"precision": "fp16"}, torch.device("cuda"))["precision"] == "fp16"


def test_run_profiled_step_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("PERF_RUNS_DIR", str(tmp_path / "runs"))
    res = Results("01_profiler_basics", "smoke", root=tmp_path / "results")
    kw = dict(steps=2, warmup=1, **MODEL)
    row = pb.run_profiled_step(res, torch.device("cpu"), 4, **kw)
    assert row["status"] == "ok" and row["name"] == "step bs=4 fp32", row["error"]
    assert row["config"] == {"batch_size": 4, "precision": "fp32", "deterministic": False}
    m = row["metrics"]
    assert m["steps_timed"] == 2 and m["step_ms_median"] > 0 and not pb.is_label(m["top_op"])
    assert list((tmp_path / "runs" / "01_profiler_basics").glob("step_bs_4_fp32-*"))   # logged for TensorBoard
    for bad, name in (({"batch_size": 0}, "step bs=0 fp32"), ({"precision": "fp64"}, "step bs=4 fp64"),
                      ({"deterministic": "abc"}, "step bs=4 fp32 det='abc'")):
        args = {"batch_size": 4} | bad
        row = pb.run_profiled_step(res, "cpu", args.pop("batch_size"), **args, **kw)
        assert row["status"] == "failed" and row["name"] == name
        assert row["error"].startswith("InvalidValue: ") and "\n" not in row["error"]
    assert res.get("step bs=4 fp32 det='abc'")["config"]["deterministic"] == "abc"   # recorded as given, not True
    view, caption = pb.results_view(res)
    assert list(view["experiment"]) == ["step bs=4 fp32", "step bs=0 fp32", "step bs=4 fp64",
                                        "step bs=4 fp32 det='abc'"]
    assert {"step_ms_mean", "step_ms_median", "top_op", "top_op_share", "status", "error"} <= set(view.columns)
    assert 0 < view["top_op_share"].iloc[0] <= 1 and not math.isnan(view["step_ms_mean"].iloc[0])
    assert "peak_mem_mb" not in view.columns          # None on a CPU in every row: no column


# --- tables that fit, and the three orders --------------------------------------------------------------------------
def test_fits_ignores_trailing_spaces():
    assert pb.fits("a" * 120 + "   \n" + "b" * 10) and not pb.fits("a" * 121)
    assert pb.fits("") and pb.fits("x" * 130, width=130)


def test_show_table_prints_a_cpu_table_that_fits_and_a_dataframe_otherwise(cpu_profile, capsys, monkeypatch):
    prof = cpu_profile[0]
    shown = []
    monkeypatch.setattr("helpers.lessons.profiler_basics.tables.show", lambda df, **kw: shown.append(df))
    pb.show_table(profiling.host_averages(prof), "self_cpu_time_total", 5)
    out = capsys.readouterr().out
    assert "Self CPU %" in out and "# of Calls" in out and not shown        # the text table, as key_averages prints it
    assert all(len(line) <= pb.WIDTH for line in out.splitlines())
    with torch.profiler.profile(activities=profiling.activities("cpu"), profile_memory=True) as mem:
        pb.build("cpu", 2, **MODEL)[1]()
    pb.show_table(profiling.host_averages(mem), "self_cpu_memory_usage", 4, columns="memory")
    out = capsys.readouterr().out
    assert "would be 148 characters wide" in out and "Self CPU" not in out and len(shown) == 1
    assert list(shown[0].columns) == ["name", "calls", "self_cpu_ms", "cpu_mem_mb", "self_cpu_mem_mb"]
    assert len(shown[0]) == 4 and shown[0]["self_cpu_mem_mb"].is_monotonic_decreasing


def test_averages_frame_matches_the_table_rows(cpu_profile):
    avgs = profiling.host_averages(cpu_profile[0])
    df = pb.averages_frame(avgs, "self_cpu_time_total", 5)
    assert list(df.columns) == ["name", "calls", "self_cpu_share", "self_cpu_ms", "cpu_total_ms", "cpu_avg_ms"]
    top = sorted(avgs, key=lambda e: e.self_cpu_time_total, reverse=True)[:5]
    assert list(df["name"]) == [e.key for e in top]
    total_self = sum(e.self_cpu_time_total for e in avgs)
    assert df["self_cpu_share"].iloc[0] == pytest.approx(top[0].self_cpu_time_total / total_self)
    assert (df["cpu_avg_ms"] * df["calls"]).round(6).tolist() == df["cpu_total_ms"].round(6).tolist()
    shapes = pb.averages_frame(profiling.host_averages(cpu_profile[0], group_by_input_shape=True), "cpu_time_total",
                               3, columns="shapes")
    assert list(shapes.columns) == ["name", "input_shapes", "calls", "self_cpu_ms", "cpu_total_ms"]


def _avg(key, device_type="CPU", **kw):
    from types import SimpleNamespace

    base = dict(key=key, count=2, device_type=device_type, input_shapes=[], self_cpu_time_total=0.0,
                cpu_time_total=0.0, self_device_time_total=0.0, device_time_total=0.0, cpu_memory_usage=0,
                self_cpu_memory_usage=0, device_memory_usage=0, self_device_memory_usage=0)
    return SimpleNamespace(**(base | kw))


def test_averages_frame_on_a_gpu_profile_reads_device_time():
    avgs = [_avg("aten::mm", self_cpu_time_total=100.0, cpu_time_total=150.0, self_device_time_total=3000.0,
                 device_time_total=3000.0, self_device_memory_usage=2**20, device_memory_usage=2**21),
            _avg("forward", self_cpu_time_total=20.0, cpu_time_total=300.0, device_time_total=4000.0),
            _avg("sgemm", device_type="DeviceType.CUDA", self_device_time_total=3000.0, device_time_total=3000.0),
            _avg("relu_kernel", device_type="DeviceType.CUDA", self_device_time_total=1000.0,
                 device_time_total=1000.0),
            _avg("forward", device_type="DeviceType.CUDA", is_user_annotation=True, self_device_time_total=900.0)]
    df = pb.averages_frame(avgs, "self_cuda_time_total", 2, on_gpu=True)   # "cuda" keys read as "device"
    assert list(df.columns) == ["name", "calls", "self_cpu_ms", "cpu_total_ms", "self_device_share", "self_device_ms",
                                "device_total_ms", "device_avg_ms"]
    assert list(df["name"]) == ["aten::mm", "sgemm"] and df["self_device_share"].tolist() == [0.75, 0.75]
    assert df["device_avg_ms"].iloc[0] == 1.5
    mem = pb.averages_frame(avgs, "self_device_memory_usage", 1, columns="memory", on_gpu=True)
    assert list(mem.columns)[-2:] == ["device_mem_mb", "self_device_mem_mb"] and mem["self_device_mem_mb"][0] == 1.0


def test_three_orders_on_a_cpu_profile(cpu_profile):
    prof = cpu_profile[0]
    keys = profiling.sort_keys([torch.profiler.ProfilerActivity.CPU])
    table, facts = pb.three_orders(prof, keys, ACTIVE)
    assert list(table["order"]) == ["self"] * 3 + ["total"] * 3 + ["per call"] * 3
    assert list(table.columns) == ["order", "rank", "name", "level", "calls_per_step", "self_ms", "total_ms",
                                   "per_call_ms"]
    for order, col in (("self", "self_ms"), ("total", "total_ms"), ("per call", "per_call_ms")):
        assert table.loc[table["order"] == order, col].is_monotonic_decreasing
    levels = pb.call_levels(prof)
    assert levels["ProfilerStep*"] == 0 and {levels[p] for p in training.PHASES} == {1}
    assert levels["aten::conv2d"] >= 2
    assert facts["tops"]["total"] == facts["tops"]["per call"] == "ProfilerStep*"   # contains all, once per step
    assert facts["top_levels"]["total"] == 0 and facts["total_contains"] and facts["every_step"]
    # Which row leads by self time is a timing: on an idle machine an operator (level >= 2); under a loaded test run
    # a label's own time (a descheduled process inside `backward`) can lead. The claim and the sentence follow it.
    label_on_top = pb.is_label(facts["tops"]["self"])
    name, by_total, per_call, calls = facts["sink"]
    assert per_call >= by_total
    assert pb.orders_claims(facts) == {"self": not label_on_top and facts["top_levels"]["self"] >= 2, "total": True,
                                       "per call": True}
    text = pb.orders_sentence(facts)
    assert ("is not an operator in this run" in text) == label_on_top
    assert "`ProfilerStep*` is on top again" in text and "at least once per recorded step" in text


def _facts(**kw):
    base = {"tops": {"self": "aten::mm", "total": "ProfilerStep*", "per call": "ProfilerStep*"}, "self_share": 0.9,
            "top_levels": {"self": 3, "total": 0, "per call": 0}, "total_contains": True, "every_step": True,
            "sink": ("aten::add_", 4, 30, 25.0), "levels": {"self": [3, 4], "total": [0, 1], "per call": [0, 1]},
            "top_calls_per_step": {"self": 3.0, "total": 1.0, "per call": 1.0}}
    return base | kw


def test_orders_sentence_says_what_this_run_shows():
    text = pb.orders_sentence(_facts())
    assert "levels 3–4" in text and "90%" in text
    assert "`aten::add_` is 4th by total (25 calls per step) but 30th" in text
    three = _facts(tops={"self": "aten::mm", "total": "ProfilerStep*", "per call": "Optimizer.step"})
    assert "three different rows on top" in pb.orders_sentence(three)
    assert "part further down" not in pb.orders_sentence(_facts(sink=("x", 3, 3, 1.0)))
    assert "at least once" not in pb.orders_sentence(_facts(every_step=False))
    label = pb.orders_sentence(_facts(tops={"self": "backward", "total": "ProfilerStep*", "per call": "ProfilerStep*"},
                                      top_levels={"self": 1, "total": 0, "per call": 0}))
    assert "`backward` is one of our labels (level 1)" in label and "top rows are operators" not in label
    bad = pb.orders_claims(_facts(tops={"self": "forward", "total": "forward", "per call": "aten::mm"},
                                  top_levels={"self": 1, "total": 1, "per call": 2},
                                  top_calls_per_step={"self": 1.0, "total": 1.0, "per call": 3.0}))
    assert bad == {"self": False, "total": False, "per call": False}
    assert [pb.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 112)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "112th"]


# --- what things cost, and one step's several figures -----------------------------------------------------------------
def test_overhead_rounds_alternate_and_time_every_step(monkeypatch):
    calls = []
    out = pb.overhead_rounds(lambda: calls.append(torch.profiler.profiler.kineto_available()), 3, 2, "cpu")
    assert set(out) == {"unprofiled", "profiled"} and [len(v) for v in out.values()] == [6, 6]
    assert len(calls) == 3 * 2 * 3 and all(t > 0 for v in out.values() for t in v)
    with pytest.raises(ValueError, match="at least 1"):
        pb.overhead_rounds(lambda: None, 1, 0, "cpu")
    assert pb.round_clock("cpu") == "cpu" and pb.round_clock(torch.device("cuda")) == "wall"
    ticks = iter(range(1000))       # the clock a CPU run reads: process CPU time, not wall time
    monkeypatch.setattr(pb.costs.time, "process_time", lambda: next(ticks) / 1000.0)
    out = pb.overhead_rounds(lambda: None, 1, 2, "cpu")
    assert out == {"unprofiled": [1.0, 1.0], "profiled": [1.0, 1.0]}


def test_timer_rounds_naive_misses_queued_work(monkeypatch):
    """A stand-in GPU on a stand-in clock: the call only queues 20 ms of work; synchronize() waits for it."""
    clock, queue = [100.0], []

    def synchronize(device=None):
        clock[0] += sum(queue)
        queue.clear()

    monkeypatch.setattr(pb.costs.dev, "synchronize", synchronize)
    monkeypatch.setattr(pb.costs.time, "time", lambda: clock[0])
    timers = pb.timer_rounds(lambda: queue.append(0.02), 4, "cuda")
    assert timers["naive"] == [0.0] * 4 and timers["synchronised"] == pytest.approx([20.0] * 4)
    m = pb.timer_metrics(timers)
    assert m["readings"] == 4 and m["naive_ms_mean"] == 0.0 and m["synchronised_ms_median"] == 20.0
    timers["naive"] = [0.5, 0.6, 0.4, 0.5]
    fig = pb.timer_chart(timers, "t")
    assert fig.axes[0].get_xscale() == "log" and "interquartile" in fig.axes[0].get_xlabel()
    plt_close(fig)


def _results_with_rounds(tmp_path, unprofiled, profiled, recorded=(6.0, 6.2, 6.1), timed=(5.0, 5.5, 6.0),
                         clock="cpu"):
    from helpers.measure.timing import StepTimes

    res = Results("01_profiler_basics", "smoke", root=tmp_path / "r")
    res.record("train_step", {"batch_size": 8, "precision": "fp32"}, lambda: StepTimes(list(timed)).metrics(8),
               verbose=False)
    res.record("async_timing", {"matmul_size": 8}, lambda: {"naive_ms_mean": 1.0}, verbose=False)
    res.record("profiled_step", {"batch_size": 8, "precision": "fp32", "profiled": True},
               lambda: {"step_ms_mean": sum(recorded) / 3, "step_ms_median": sorted(recorded)[1], "steps_timed": 3,
                        "top_op": "aten::mm", "top_op_share": 0.4}, verbose=False)
    for kind, t in (("unprofiled", unprofiled), ("profiled", profiled)):
        res.record(f"step (rounds, {kind})", {"batch_size": 8, "precision": "fp32", "profiled": kind == "profiled",
                                              "clock": clock},
                   lambda t=t: StepTimes(list(t)).metrics(8), verbose=False)
    return res, res.compare("unprofiled", "profiled", unprofiled, profiled)


def test_figures_table_and_sentence_reconcile_the_step_times(tmp_path):
    res, c = _results_with_rounds(tmp_path, [5.0, 5.1, 4.9, 5.0] * 5, [5.5, 5.6, 5.4, 5.5] * 5)
    assert c["verdict"] == "slower"
    table = pb.figures_table(res, 20.0)
    assert list(table["figure"]) == ["first step (cold)", "timed steps", "rounds, unprofiled", "rounds, profiled",
                                     "recorded steps"]
    assert table.set_index("figure").loc["recorded steps", "mean_ms"] == pytest.approx(6.1)
    assert list(table["clock"]) == ["wall", "wall", "cpu", "cpu", "wall"]
    text = pb.figures_sentence(table, c, on_gpu=False)
    assert "profiled is slower than unprofiled" in text and "+0.50 ms per step" in text
    assert "+10% and +11% from the rounds' means" in text and "(20.0 ms, 3.6×" in text
    assert "CPU time the process spent" in text and "GPU timeline" not in text and "waited while" in text
    quiet, _ = _results_with_rounds(tmp_path / "q", [5.0, 5.1, 4.9, 5.0] * 5, [5.5, 5.6, 5.4, 5.5] * 5,
                                    recorded=(5.5, 5.4, 5.6), timed=(5.0, 5.1, 4.9))
    assert "little else ran on the machine" in pb.figures_sentence(pb.figures_table(quiet, 20.0), c, on_gpu=False)
    res_gpu, c_gpu = _results_with_rounds(tmp_path / "g", [5.0, 5.1, 4.9, 5.0] * 5, [5.5, 5.6, 5.4, 5.5] * 5,
                                          clock="wall")
    text = pb.figures_sentence(pb.figures_table(res_gpu, 20.0), c_gpu, on_gpu=True)
    assert "GPU timeline" in text and "CPU time the process spent" not in text and "ran at other moments" in text
    res2, flat = _results_with_rounds(tmp_path / "b", [5.0, 5.2, 4.8] * 5, [5.2, 4.8, 5.0] * 5)
    text = pb.figures_sentence(pb.figures_table(res2, 20.0), flat, on_gpu=False)
    assert "does not resolve the profiler's cost" in text and "ms per step" not in text   # no derived figure


def test_results_view_keeps_the_columns_that_carry_information(tmp_path):
    from helpers.notebook.reference import Reference

    res, _ = _results_with_rounds(tmp_path, [5.0, 5.1], [5.5, 5.6])
    view, caption = pb.results_view(res)
    assert list(view["experiment"]) == ["train_step", "profiled_step"]    # the matmul and the rounds: own sections
    assert list(view.columns) == ["experiment", "profiled", "step_ms_mean", "step_ms_median", "top_op", "top_op_share"]
    assert list(view["profiled"]) == ["no", "yes"]
    assert caption == "Every row: batch size 8, fp32, not deterministic, status ok."
    res.record("step bs=16 bf16 det", {"batch_size": 16, "precision": "bf16", "deterministic": True},
               lambda: {"step_ms_mean": 9.0, "samples_per_s": 1777.8}, verbose=False)
    view, caption = pb.results_view(res)
    assert {"batch_size", "precision", "deterministic", "samples_per_s"} <= set(view.columns)
    assert list(view["deterministic"]) == [False] * 2 + [True] and caption == "Every row: status ok."
    ref = Reference("h100", tmp_path, {"env": {"device": "cuda"}, "experiments": [
        {"name": "train_step", "status": "ok", "metrics": {"step_ms_mean": 40.0}}]})
    view, _ = pb.results_view(res, ref)
    col = "reference (h100): step mean (ms)"
    assert list(view.columns).index(col) == list(view.columns).index("step_ms_mean") + 1
    assert view[col].iloc[0] == 40.0 and view[col].isna().iloc[1]


def test_async_reference_line(tmp_path):
    from helpers.notebook.reference import Reference

    assert pb.async_reference(None) == ""
    doc = {"env": {"device_name": "NVIDIA H100"}, "scale": "full", "experiments": [
        {"name": "async_timing", "status": "ok", "metrics": {"naive_ms_mean": 0.5, "synchronised_ms_mean": 1100.0}}],
        "comparisons": [{"a": "synchronised", "b": "naive", "metric": "ms_per_call_mean", "ratio": 2200.0,
                         "low": 2000.0, "high": 2400.0, "verdict": "faster"}]}
    line = pb.async_reference(Reference("h100", tmp_path, doc))
    assert line.startswith("**Reference, not this run:**") and "NVIDIA H100" in line and "1100.00 ms" in line
    assert "naive is faster than synchronised: 2200.00×" in line
    assert pb.async_reference(Reference("h100", tmp_path, {"experiments": []})) == ""


def test_phase_calls_on_a_gpu_follow_the_launches(monkeypatch):
    from types import SimpleNamespace

    def ev(name, a, b):
        return SimpleNamespace(name=name, time_range=SimpleNamespace(start=a, end=b), is_user_annotation=False,
                               device_type="DeviceType.CPU")

    prof = SimpleNamespace(events=lambda: [ev("forward", 0, 100), ev("backward", 100, 200),
                                           ev("optimizer_step", 200, 250), ev("forward", 300, 400)])
    launches = [(10, 50, 900), (20, 60, 1000), (150, 1000, 3000), (320, 3000, 3500)]   # (launch, start, end) µs
    monkeypatch.setattr(pb.readings.profiling, "device_launches", lambda p: launches)
    calls = pb.phase_calls(prof, True)
    assert calls["forward"] == [0.95, 0.5] and calls["backward"] == [2.0]
    assert math.isnan(calls["optimizer_step"][0])                            # launched nothing
    assert pb.phase_calls(prof, False)["forward"] == [0.1, 0.1]
