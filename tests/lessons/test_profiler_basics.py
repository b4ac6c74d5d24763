"""helpers.lessons.profiler_basics (notebook 01_profiler_basics): the model, the runs timed in alternation, the
panel's validator and experiment, and the tables and charts (on a CPU profile, and their GPU branches on made-up
data)."""
import math

import pandas as pd
import pytest
import torch
from torch import nn

from helpers.lessons import profiler_basics as pb
from helpers.measure import profiling, training
from helpers.measure.validate import InvalidValue
from helpers.notebook.results import Results

MODEL = dict(width=4, blocks=2)
IMAGE = 16
ACTIVE = 2


def plt_close(fig):
    import matplotlib.pyplot as plt

    plt.close(fig)


def make_step(batch_size=4, precision="fp32", device="cpu"):
    """The labelled step the notebook writes in its cells, here from ``training.make_train_step``."""
    torch.manual_seed(0)
    model = pb.SmallCNN(**MODEL).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(batch_size, 3, IMAGE, IMAGE, device=device), torch.randint(0, 10, (batch_size,), device=device)
    return training.make_train_step(model, opt, nn.CrossEntropyLoss(), x, y, precision=precision)


@pytest.fixture(scope="module")
def cpu_profile():
    prof = profiling.profile_steps(make_step(), wait=0, warmup=1, active=ACTIVE, device="cpu", sync=False)
    return prof, profiling.events_frame(prof), profiling.phase_times(prof, [*training.PHASES, "ProfilerStep*"])


def test_small_cnn_trains():
    model = pb.SmallCNN(**MODEL)
    assert model(torch.randn(2, 3, IMAGE, IMAGE)).shape == (2, 10)
    assert len(model.features) == 4 * MODEL["blocks"]
    assert torch.isfinite(make_step()()) and torch.equal(make_step()(), make_step()())   # one seed, one loss


def test_is_label():
    assert all(pb.is_label(p) for p in training.PHASES)
    assert pb.is_label("ProfilerStep#3") and pb.is_label("ProfilerStep*")
    assert not pb.is_label("aten::conv2d") and not pb.is_label("forward_pre")


def test_top_op_on_a_cpu(cpu_profile):
    name, share = pb.top_op(cpu_profile[1], False)
    assert not pb.is_label(name) and 0 < share <= 1


def test_phase_chart_on_a_cpu(cpu_profile):
    prof, _, pt = cpu_profile
    fig = pb.phase_chart(pt, False, ACTIVE, "t")
    bars = fig.axes[0].containers
    assert len(bars) == 1 and [round(b.get_width(), 6) for b in bars[0]] == \
        [round(pt.loc[p, "cpu_ms"] / ACTIVE, 6) for p in training.PHASES]
    assert "whiskers" not in fig.axes[0].get_xlabel()
    plt_close(fig)
    calls = pb.phase_calls(prof, False)      # each phase per recorded step: the whiskers
    assert {p: len(v) for p, v in calls.items()} == {p: ACTIVE for p in training.PHASES}
    assert sum(map(sum, calls.values())) == pytest.approx(pt.loc[list(training.PHASES), "cpu_ms"].sum())
    fig = pb.phase_chart(pt, False, ACTIVE, "t", calls)
    from matplotlib.container import ErrorbarContainer

    whiskers = next(c for c in fig.axes[0].containers if isinstance(c, ErrorbarContainer))
    lo, hi = whiskers.lines[2][0].get_segments()[0][:, 0]      # the first phase's whisker
    assert lo == pytest.approx(min(calls["forward"])) and hi == pytest.approx(max(calls["forward"]))
    assert "whiskers" in fig.axes[0].get_xlabel()
    plt_close(fig)


def test_phase_chart_on_a_gpu_reads_gpu_time():
    labels = [*training.PHASES, "ProfilerStep*"]
    pt = pd.DataFrame({"label": labels, "cpu_ms": [1.0, 0.5, 0.2, 2.0], "gpu_ms": [4.0, 8.0, 1.0, 14.0]})
    pt = pt.set_index("label")
    fig = pb.phase_chart(pt, True, 2, "t", {p: [1.0, 3.0] for p in training.PHASES} | {"optimizer_step": [math.nan]})
    gpu_bars, cpu_bars = [c for c in fig.axes[0].containers if hasattr(c, "patches")]
    assert [b.get_width() for b in gpu_bars] == [2.0, 4.0, 0.5] and [b.get_width() for b in cpu_bars] == [0.5, 0.25, 0.1]
    assert fig.axes[0].get_xlabel().startswith("GPU")
    plt_close(fig)


def test_top_op_on_a_gpu_shares_kernel_time():
    ev = pd.DataFrame({"name": ["forward", "aten::conv2d", "sgemm_kernel", "relu_kernel"],
                       "on_device": [False, False, True, True], "self_cpu_ms": [9.0, 1.0, 0.0, 0.0],
                       "self_device_ms": [0.0, 0.0, 3.0, 1.0]})
    assert pb.top_op(ev, True) == ("sgemm_kernel", 0.75)
    assert pb.top_op(ev, False) == ("aten::conv2d", 1.0)   # labels are not operators


@pytest.mark.parametrize("values,message", [
    ({"batch_size": 0}, "at least 1"),
    ({"batch_size": "32"}, "whole number"),
    ({"batch_size": 5000}, "limit of 4096"),
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
    built = []

    def build(bs, precision):
        built.append((bs, precision))
        return make_step(bs, precision)

    kw = dict(steps=2, warmup=1)
    row = pb.run_profiled_step(res, torch.device("cpu"), build, 4, **kw)
    assert row["status"] == "ok" and row["name"] == "step bs=4 fp32", row["error"]
    assert row["config"] == {"batch_size": 4, "precision": "fp32", "deterministic": False} and built == [(4, "fp32")]
    m = row["metrics"]
    assert m["steps_timed"] == 2 and m["step_ms_median"] > 0 and not pb.is_label(m["top_op"])
    assert list((tmp_path / "runs" / "01_profiler_basics").glob("step_bs_4_fp32-*"))   # logged for TensorBoard
    for bad, name in (({"batch_size": 0}, "step bs=0 fp32"), ({"precision": "fp64"}, "step bs=4 fp64"),
                      ({"deterministic": "abc"}, "step bs=4 fp32 det='abc'")):
        args = {"batch_size": 4} | bad
        row = pb.run_profiled_step(res, "cpu", build, args.pop("batch_size"), **args, **kw)
        assert row["status"] == "failed" and row["name"] == name
        assert row["error"].startswith("InvalidValue: ") and "\n" not in row["error"]
    assert len(built) == 1, "bad input is refused before the step is built"
    assert res.get("step bs=4 fp32 det='abc'")["config"]["deterministic"] == "abc"   # recorded as given, not True
    view, caption = pb.results_view(res)
    assert list(view["experiment"]) == ["step bs=4 fp32", "step bs=0 fp32", "step bs=4 fp64",
                                        "step bs=4 fp32 det='abc'"]
    assert {"step_ms_mean", "step_ms_median", "top_op", "top_op_share", "status"} <= set(view.columns)
    assert "error" not in view.columns and caption.count("failed, step bs=") == 3   # the reasons, under it
    assert 0 < view["top_op_share"].iloc[0] <= 1 and not math.isnan(view["step_ms_mean"].iloc[0])
    assert "peak_mem_mb" not in view.columns          # None on a CPU in every row: no column


def test_results_view_keeps_the_columns_that_carry_information(tmp_path):
    from helpers.measure.timing import StepTimes
    from helpers.notebook.reference import NOT_RUN, Reference

    res = Results("01_profiler_basics", "smoke", root=tmp_path / "r")
    res.record("train_step", {"batch_size": 8, "precision": "fp32", "profiled": False, "clock": "wall"},
               lambda: StepTimes([5.0, 5.5, 6.0]).metrics(8), verbose=False)
    res.record("async_timing", {"matmul_size": 8}, lambda: {"naive_ms_mean": 1.0}, verbose=False)
    res.record("profiled_step", {"batch_size": 8, "precision": "fp32", "profiled": True},
               lambda: {"step_ms_mean": 6.1, "step_ms_median": 6.1, "top_op": "aten::mm", "top_op_share": 0.4},
               verbose=False)
    res.record("step (rounds, profiled)", {"batch_size": 8, "profiled": True, "clock": "cpu"},
               lambda: StepTimes([5.0, 5.1]).metrics(8), verbose=False)
    view, caption = pb.results_view(res)
    assert list(view["experiment"]) == ["train_step", "profiled_step"]    # the matmul and the rounds: own sections
    assert list(view.columns) == ["experiment", "profiled", "step_ms_mean", "step_ms_median", "top_op", "top_op_share"]
    assert list(view["profiled"]) == [False, True]
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
    assert view[col].iloc[0] == 40.0 and view[col].iloc[1] == NOT_RUN   # a row the reference did not run: no NaN


def test_orders_table_on_a_cpu_profile(cpu_profile):
    prof = cpu_profile[0]
    keys = {"self": "self_cpu_time_total", "total": "cpu_time_total", "per call": "cpu_time"}   # as the notebook's
    table = pb.orders_table(prof, keys, ACTIVE)
    assert list(table["order"]) == ["self"] * 3 + ["total"] * 3 + ["per call"] * 3
    assert list(table.columns) == ["order", "rank", "name", "level", "calls_per_step", "self_ms", "total_ms",
                                   "per_call_ms"]
    for order, col in (("self", "self_ms"), ("total", "total_ms"), ("per call", "per_call_ms")):
        assert table.loc[table["order"] == order, col].is_monotonic_decreasing
    levels = pb.call_levels(prof)
    assert levels["ProfilerStep*"] == 0 and {levels[p] for p in training.PHASES} == {1}
    assert levels["aten::conv2d"] >= 2
    top = table[table["rank"] == 1].set_index("order")
    # the step's own row contains every other row and runs once per step: it tops total and per call alike
    assert top.loc["total", "name"] == top.loc["per call", "name"] == "ProfilerStep*"
    assert top.loc["total", "level"] == 0 and top.loc["per call", "calls_per_step"] == 1
    assert top.loc["total", "self_ms"] < top.loc["total", "total_ms"]
    # which row leads by self time is a timing (under a loaded test run a label's own time can lead): not asserted
    assert top.loc["self", "name"] in set(e.key for e in prof.key_averages())


def test_overhead_rounds_alternate_and_time_every_step(monkeypatch):
    calls = []
    out = pb.overhead_rounds(lambda: calls.append(torch.profiler.profiler.kineto_available()), 3, 2, "cpu")
    assert set(out) == {"unprofiled", "profiled"} and [len(v) for v in out.values()] == [6, 6]
    assert len(calls) == 3 * 2 * 3 and all(t > 0 for v in out.values() for t in v)
    with pytest.raises(ValueError, match="at least 1"):
        pb.overhead_rounds(lambda: None, 1, 0, "cpu")
    ticks = iter(range(1000))       # the clock a CPU run reads: process CPU time, not wall time
    monkeypatch.setattr(pb.experiment.time, "process_time", lambda: next(ticks) / 1000.0)
    out = pb.overhead_rounds(lambda: None, 1, 2, "cpu")
    assert out == {"unprofiled": [1.0, 1.0], "profiled": [1.0, 1.0]}


def test_timer_rounds_alternate_the_timers_on_an_idle_device(monkeypatch):
    """A stand-in GPU: the call only queues 20 ms of work; synchronize() waits for it. The notebook's two timers."""
    clock, queue, order = [100.0], [], []

    def synchronize(device=None):
        clock[0] += sum(queue)
        queue.clear()

    def naive(fn):
        order.append("naive")
        t0 = clock[0]
        fn()
        return (clock[0] - t0) * 1000

    def synchronised(fn):
        order.append("synchronised")
        t0 = clock[0]
        fn()
        synchronize()
        return (clock[0] - t0) * 1000

    monkeypatch.setattr(pb.experiment.dev, "synchronize", synchronize)
    timers = pb.timer_rounds(lambda: queue.append(0.02), {"naive": naive, "synchronised": synchronised}, 4, "cuda")
    assert timers["naive"] == [0.0] * 4 and timers["synchronised"] == pytest.approx([20.0] * 4)
    assert order == ["naive", "synchronised", "synchronised", "naive"] * 2 and not queue


def test_fits_ignores_trailing_spaces():
    assert pb.fits("a" * 120 + "   \n" + "b" * 10) and not pb.fits("a" * 121)
    assert pb.fits("") and pb.fits("x" * 130, width=130)


def test_show_table_prints_a_cpu_table_that_fits_and_a_dataframe_otherwise(cpu_profile, capsys, monkeypatch):
    prof = cpu_profile[0]
    shown = []
    monkeypatch.setattr("helpers.lessons.profiler_basics.views.show", lambda df, **kw: shown.append(df))
    pb.show_table(profiling.host_averages(prof), "self_cpu_time_total", 5)
    out = capsys.readouterr().out
    assert "Self CPU %" in out and "# of Calls" in out and not shown        # the text table, as key_averages prints it
    assert all(len(line) <= pb.WIDTH for line in out.splitlines())
    with torch.profiler.profile(activities=profiling.activities("cpu"), profile_memory=True) as mem:
        make_step(2)()
    pb.show_table(profiling.host_averages(mem), "self_cpu_memory_usage", 4, columns="memory")
    out = capsys.readouterr().out
    assert "148 characters wide" in out and "Self CPU" not in out and len(shown) == 1
    assert list(shown[0].columns) == ["name", "calls", "self_cpu_mem_mb", "cpu_mem_mb"]
    assert len(shown[0]) == 4 and shown[0]["self_cpu_mem_mb"].is_monotonic_decreasing


def test_averages_frame_matches_the_table_rows(cpu_profile):
    avgs = profiling.host_averages(cpu_profile[0])
    df = pb.averages_frame(avgs, "self_cpu_time_total", 5)
    assert list(df.columns) == ["name", "calls", "self_cpu_ms", "cpu_total_ms", "self_cpu_share"]
    top = sorted(avgs, key=lambda e: e.self_cpu_time_total, reverse=True)[:5]
    assert list(df["name"]) == [e.key for e in top]
    total_self = sum(e.self_cpu_time_total for e in avgs)
    assert df["self_cpu_share"].iloc[0] == pytest.approx(top[0].self_cpu_time_total / total_self)
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
    assert list(df.columns) == ["name", "calls", "self_cpu_ms", "self_device_ms", "device_total_ms",
                                "self_device_share"]
    # the share is of the kernels' time (the label's GPU copy left out), as the footer's Self CUDA time total
    assert list(df["name"]) == ["aten::mm", "sgemm"] and df["self_device_share"].tolist() == [0.75, 0.75]
    assert df["device_total_ms"].iloc[0] == 3.0 and df["self_cpu_ms"].iloc[0] == 0.1
    mem = pb.averages_frame(avgs, "self_device_memory_usage", 1, columns="memory", on_gpu=True)
    assert list(mem.columns)[-2:] == ["self_device_mem_mb", "device_mem_mb"] and mem["self_device_mem_mb"][0] == 1.0


def test_phase_calls_on_a_gpu_follow_the_launches(monkeypatch):
    from types import SimpleNamespace

    def ev(name, a, b):
        return SimpleNamespace(name=name, time_range=SimpleNamespace(start=a, end=b), is_user_annotation=False,
                               device_type="DeviceType.CPU")

    prof = SimpleNamespace(events=lambda: [ev("forward", 0, 100), ev("backward", 100, 200),
                                           ev("optimizer_step", 200, 250), ev("forward", 300, 400)])
    launches = [(10, 50, 900), (20, 60, 1000), (150, 1000, 3000), (320, 3000, 3500)]   # (launch, start, end) µs
    monkeypatch.setattr(pb.views.profiling, "device_launches", lambda p: launches)
    calls = pb.phase_calls(prof, True)
    assert calls["forward"] == [0.95, 0.5] and calls["backward"] == [2.0]
    assert math.isnan(calls["optimizer_step"][0])                            # launched nothing
    assert pb.phase_calls(prof, False)["forward"] == [0.1, 0.1]


def test_the_panel_under_a_spent_budget_skips_good_values_and_refuses_bad_ones():
    """With the notebook's time budget spent, a good configuration is a skipped row (OverBudget), while bad values
    are refused for what they are (InvalidValue): validation rows are never skipped for time."""
    from helpers.notebook.budget import Budget

    spent = Budget(1.0, start=-1e9)
    results = Results(pb.NOTEBOOK, "smoke", autosave=False)
    kw = dict(steps=1, warmup=0, budget=spent)
    good = pb.run_profiled_step(results, "cpu", lambda bs, p: make_step(bs, p), 2, **kw)
    bad = pb.run_profiled_step(results, "cpu", lambda bs, p: make_step(bs, p), 0, **kw)
    assert good["status"] == "failed" and good["error"].startswith("OverBudget: skipped"), good
    assert bad["status"] == "failed" and bad["error"].startswith("InvalidValue"), bad


def test_averages_frame_shortens_kernel_names():
    """A GPU's kernel rows carry ~250-character C++ signatures; the DataFrame shows them short."""
    from types import SimpleNamespace

    long = ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, float, float, float, "
            "cudnnTensorStruct, float const*, cudnnTensorStruct, float const*, cudnnTensorStruct, float*)")
    e = SimpleNamespace(key=long, count=2, device_type="CUDA", is_user_annotation=False, self_cpu_time_total=0.0,
                        cpu_time_total=0.0, self_device_time_total=2000.0, device_time_total=2000.0)
    df = pb.averages_frame([e], "self_device_time_total", on_gpu=True)
    assert list(df["name"]) == ["cudnn::bn_bw_1C11_kernel_new"]


def test_validate_panel_refuses_an_unknown_setting():
    with pytest.raises(InvalidValue, match="unknown setting 'workers'"):
        pb.validate_panel({"batch_size": 8, "workers": 2}, "cpu")


def test_a_comparison_reads_in_the_one_convention(tmp_path):
    from helpers.measure import compare

    res = Results(pb.NOTEBOOK, "smoke", root=tmp_path)
    c = res.compare_times("fp32", "bf16", [10.0, 10.2, 9.9, 10.1] * 3, [5.0, 5.1, 4.9, 5.0] * 3)
    assert compare.takes_line(c).startswith("bf16 takes 0.50× the time of fp32 (95% interval ")
    assert compare.takes_line(c).endswith(": faster")
    assert res.comparisons_table()["b / a"].iloc[0] == pytest.approx(0.5, abs=0.01)


def test_the_lessons_claims_hold_on_a_cpu_run_and_fail_on_missing_figures():
    from helpers.lessons.profiler_basics import checks as lesson
    from helpers.notebook import checks

    rows = {r["id"]: r for r in checks.judge({"env": {"device": "cpu"}, "experiments": []}, lesson.CLAIMS)}
    assert rows["naive_timer_reads_low"]["holds"] is None  # a GPU's claim on a CPU run
    assert rows["phases_add_up_to_the_step"]["holds"] is False
    assert "not measured" in rows["bad_settings_are_failed_rows"]["why"]
