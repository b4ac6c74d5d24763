"""What a reader sees of a trace (``perf_doctor.show`` and the timeline): the path said once, no GPU-only
columns on a CPU-only trace (they stay on a GPU trace), a timeline whose legend lists what is drawn, host operators
in greys, readable labels and the experiment's title. The GPU half reads a recorded A100 trace from
../shared/gpu-traces (tests/shared_data.py) and skips where it is absent."""
from __future__ import annotations

import importlib

import pytest
import torch
from matplotlib.colors import to_hex
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

import perf_doctor as traces
from helpers.notebook import display
from perf_doctor import timeline as tl
from tests.shared_data import gpu_trace

show_mod = importlib.import_module("perf_doctor.show")  # the package re-exports show(): the module itself

CONTROL = "hta_control.json.gz"


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    """A real CPU-only trace with 3 ProfilerSteps, written to a long path (as a notebook's runs folder is)."""
    out = tmp_path_factory.mktemp("a_rather_long_folder_name") / "runs" / "traces"
    out.mkdir(parents=True)
    path = out / "notebook_experiment_train_step.pt.trace.json"
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(6):
            model(torch.randn(16, 32)).sum().backward()
            prof.step()
    return path


def _captured(monkeypatch):
    shown = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    monkeypatch.setattr(show_mod, "say", lambda text, small=False: shown.append(display.Text(text, small)))
    return shown


def _tables(shown):
    return [o.data for o in shown if isinstance(o, display.Table)]


def test_cpu_trace_views_have_no_device_columns_and_say_the_path_once(cpu_trace, monkeypatch):
    shown = _captured(monkeypatch)
    traces.show(cpu_trace, title="My experiment")
    text = "\n".join(str(o) for o in shown if isinstance(o, display.Text))
    from perf_doctor.files import shown_path

    # the folder once, in the first line, as the report shows a path (relative where it can be, never too long)
    assert text.count(shown_path(str(cpu_trace.parent))) == 1, text
    assert text.count(cpu_trace.name) == 1, text                 # the file name once too
    assert text.startswith("My experiment: ") and "CPU only" in text
    assert "Kernels" not in text and "GPU time" not in text       # no GPU views announced to be empty
    overview, operators = _tables(shown)[:2]
    for col in ("kernel (ms)", "memcpy (ms)", "memset (ms)", "communication (ms)", "runtime (ms)"):
        assert col not in overview.columns
    assert {"step", "step (ms)"} <= set(overview.columns)
    assert not (overview.select_dtypes("number") == 0).all().any()  # no all-zero column left
    assert list(operators.columns) == ["name", "calls", "host self (ms)", "host total (ms)"]
    # the views themselves keep every column (the doctor and the tests use them)
    t = traces.open_trace(cpu_trace)
    assert list(t.operators().columns) == traces.views.OPERATOR_COLUMNS
    figs = [o for o in shown if hasattr(o, "axes")]
    assert figs, text
    fig = figs[0]
    assert fig.axes[0].get_title().startswith("My experiment: timeline of 3 step(s)")


def test_gpu_trace_keeps_its_device_columns(monkeypatch):
    path = gpu_trace(CONTROL)
    shown = _captured(monkeypatch)
    traces.show(path, steps=2, top=5)
    tables = _tables(shown)
    overview, operators = tables[0], [t for t in tables if "name" in t.columns and "calls" in t.columns][0]
    assert {"kernel (ms)", "memcpy (ms)", "runtime (ms)"} <= set(overview.columns)
    assert {"device self (ms)", "device total (ms)"} <= set(operators.columns)
    assert "tc eligible" not in operators.columns   # torch-tb-profiler's eligibility mark reads as use: not shown
    text = "\n".join(str(o) for o in shown if isinstance(o, display.Text))
    assert "GPU time" in text and "Kernels" in text
    assert "tensor cores (classified from kernel names" in text


def _legend(fig):
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_cpu_timeline_legend_lists_what_is_drawn_and_host_ops_are_grey(cpu_trace):
    fig = traces.open_trace(cpu_trace).timeline(3)
    ax = fig.axes[0]
    legend = _legend(fig)
    assert legend and not {"kernel", "memcpy", "memset", "communication", "sync"} & set(legend), legend
    assert "ProfilerStep" in legend and any(lab.startswith("host operator") for lab in legend)
    colours = {to_hex(c) for coll in ax.collections for c in coll.get_facecolors()}
    assert colours <= {tl._STEP, tl._DATALOADER, *tl._HOST_GREYS}, colours
    assert ax.get_title() == "Profiled steps: timeline of 3 step(s)"   # not the file's name
    assert cpu_trace.name not in ax.get_title()
    for label in ax.texts:
        assert label.get_fontsize() * 100 / 72 >= 10    # ≥ 10 px at the notebook's 100 dpi
    assert fig.get_figwidth() * 100 <= 1000             # fits the output area unscaled


def test_gpu_timeline_legend_has_the_device_categories():
    fig = traces.open_trace(gpu_trace(CONTROL)).timeline(2, title="A100 control")
    legend = _legend(fig)
    assert {"kernel", "memcpy"} <= set(legend) and "ProfilerStep" in legend
    assert fig.axes[0].get_title().startswith("A100 control: timeline of 2 step(s)")


def test_fitted_label_is_whole_cut_or_absent():
    assert tl.fitted_label("forward", 500) == "forward"
    cut = tl.fitted_label("aten::convolution_backward", 80)
    assert cut.endswith("…") and len(cut) < len("aten::convolution_backward")
    assert tl.fitted_label("aten::add", 20) == ""


def test_show_without_the_notebook_layer_is_plain(cpu_trace):
    """The toolkit alone (``helpers.notebook`` never imported): the same views, as plain DataFrames and printed
    lines; the notebook layer's readable tables only once ``helpers.notebook.display`` hands them over."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, matplotlib; matplotlib.use('Agg'); import perf_doctor as traces; "
            f"traces.show({str(cpu_trace)!r}, steps=1, top=3); "
            "assert not any(m.startswith('helpers.notebook') for m in sys.modules), 'notebook layer imported'")
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-800:]
    assert "CPU only" in r.stdout and "Overview: step time by category" in r.stdout and "**" not in r.stdout
    assert show_mod.Table is display.Table and show_mod.say is display.say   # this process imported display


def test_cpu_views_drop_a_column_that_reads_zero_at_the_shown_precision():
    """Issue 33: 02's offline overview showed `cpu exec (ms)` at 0.00-0.01 on every row (values of 0.004-0.007 ms)."""
    import pandas as pd

    from perf_doctor.show import shown_columns

    df = pd.DataFrame({"step": ["#1", "#2"], "dataloader_ms": [4.9, 89.0], "cpu_exec_ms": [0.004, 0.007],
                       "other_ms": [20.7, 0.0]})
    assert list(shown_columns(df, False)) == ["step", "dataloader_ms", "other_ms"]
    assert "cpu_exec_ms" in shown_columns(df, False, precision=3)
    assert list(shown_columns(df, True)) == list(df)   # a GPU trace's view as it is


def test_timeline_heading_counts_the_steps_the_figure_draws(cpu_trace, monkeypatch):
    """Issue 33: 03 said "Timeline of the first 3 step(s)" over a figure of the trace's 2 steps."""
    shown = _captured(monkeypatch)
    traces.show(cpu_trace, steps=5)
    text = "\n".join(str(o) for o in shown if isinstance(o, display.Text))
    assert "Timeline of the first 3 step(s)" in text and "first 5" not in text, text
    fig = [o for o in shown if hasattr(o, "axes")][0]
    assert "timeline of 3 step(s)" in fig.axes[0].get_title()
