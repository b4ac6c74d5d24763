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


def test_three_orders_on_a_cpu_profile(cpu_profile):
    prof = cpu_profile[0]
    keys = profiling.sort_keys([torch.profiler.ProfilerActivity.CPU])
    tops = pb.tops_by_order(profiling.host_averages(prof), keys)
    assert set(tops) == {"self", "total", "per call"}
    assert not pb.is_label(tops["self"].key)              # the op doing the work
    assert pb.is_label(tops["total"].key)                  # a container (a step or a phase)
    for order, key in keys.items():
        assert getattr(tops[order], key) == max(getattr(e, key) for e in profiling.host_averages(prof))


def test_phase_view_sentence_and_chart_on_a_cpu(cpu_profile):
    _, _, pt, _ = cpu_profile
    view = pb.phase_view(pt, False)
    assert list(view.columns) == ["label", "calls", "cpu per call (ms)"]
    assert list(view["label"]) == [*training.PHASES, "ProfilerStep*"] and (view["calls"] == ACTIVE).all()
    text = pb.phase_sentence(pt, False)
    assert "CPU: no GPU timeline" in text and f"{pt.loc['forward', 'cpu_ms_per_call']:.2f} ms" in text
    fig = pb.phase_chart(pt, False, ACTIVE, "t")
    bars = fig.axes[0].containers
    assert len(bars) == 1 and [round(b.get_width(), 6) for b in bars[0]] == \
        [round(pt.loc[p, "cpu_ms"] / ACTIVE, 6) for p in training.PHASES]
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_chain_nests_and_top_op_on_a_cpu(cpu_profile):
    _, ev, pt, steps = cpu_profile
    df, ok = pb.chain_table(ev, False)
    assert ok and list(df["name"]) == list(pb.CHAIN) and (df["calls"] == 2 * ACTIVE).all()  # two convolutions
    name, share = pb.top_op(ev, False)
    assert not pb.is_label(name) and 0 < share <= 1
    m = pb.profiled_step_metrics(pt, steps, on_gpu=False, active=ACTIVE, coverage=0.97, top=(name, share),
                                 self_total_ms=12.0, busy_ms=float("nan"))
    assert m["profiled_step_ms_mean"] == round(steps["cpu_ms"].mean(), 3) and m["gpu_busy_ms"] is None
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
    assert list(view.columns)[-2:] == ["gpu per call (ms)", "gpu busy (%)"]
    assert view.set_index("label").loc["backward", "gpu busy (%)"] == 87.5
    text = pb.phase_sentence(pt, True)
    assert "**2.00 ms** on the GPU" in text and "(4.0×)" in text and "(79% busy)" in text and "launches" in text
    steps = pd.DataFrame({"step": ["a", "b"], "cpu_ms": [1.0, 1.0], "gpu_ms": [7.0, 7.0], "gpu_busy_ms": [5.0, 6.0]})
    m = pb.profiled_step_metrics(pt, steps, on_gpu=True, active=2, coverage=0.93, top=("k", 0.5),
                                 self_total_ms=3.0, busy_ms=11.5)
    assert m["profiled_step_ms_mean"] == 7.0 and m["forward_ms_per_step"] == 2.0 and m["forward_cpu_ms_per_step"] == 0.5
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
    view = pb.results_view(res)
    assert list(view["experiment"])[-3:] == ["step bs=0 fp32", "step bs=4 fp64", "step bs=4 fp32 det='abc'"]
    assert "step median (ms)" in view.columns and "top op" in view.columns
    assert not any(math.isnan(v) for v in view["step median (ms)"].dropna())
