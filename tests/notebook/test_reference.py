"""helpers.notebook.reference against a reference made here by a smoke run (never committed as reference data):
a small notebook with notebook 01's experiment runs through the runner, its pack is unpacked under a temporary
data/reference/<gpu>/, and the column, the figures and the trace are read back from it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from helpers.notebook import reference
from labtools import pack
from helpers.notebook.results import Results
from tests.once import built_once

ROOT = Path(__file__).resolve().parents[2]
NB = "01_fixture"
SMOKE_RUN = """
import matplotlib.pyplot as plt
import torch
from torch import nn
from helpers.lessons.profiler_basics import SmallCNN
from helpers.measure import profiling, timing, training
from helpers.notebook import env, results as results_mod, sizes

P = env.params(sizes.PROFILER_BASICS)
DEVICE = env.get_device()
R = results_mod.Results("01_fixture", P["scale"], env.env_info(DEVICE))
env.seed_everything(0)
model = SmallCNN(width=P["width"], blocks=P["blocks"]).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(P["batch_size"], 3, P["image_size"], P["image_size"], device=DEVICE)
y = torch.randint(0, 10, (P["batch_size"],), device=DEVICE)
step = training.make_train_step(model, opt, nn.CrossEntropyLoss(), x, y)
times = timing.time_steps(step, steps=P["steps"], warmup=P["warmup"], device=DEVICE)
R.record("train_step", {"batch_size": P["batch_size"]}, lambda: times.metrics(P["batch_size"]))
R.record("broken", {}, lambda: 1 / 0)
tdir = profiling.fresh_trace_dir("01_fixture/train_step")
profiling.profile_steps(step, wait=P["wait"], warmup=P["warmup_steps"], active=P["active"], device=DEVICE,
                        trace_dir=tdir)
fig, ax = plt.subplots()
ax.plot(times.times_ms)
R.savefig(fig, "step_times")
R.check("step_timed", R.metric("train_step", "step_ms_mean") is not None)
"""


@pytest.fixture(scope="module")
def ref_root(tmp_path_factory):
    """data/reference/smoke-cpu/01_fixture/ from the runner's pack of a smoke run (one run for the session's
    workers: tests/once.py)."""
    return built_once(tmp_path_factory, "reference-01-fixture", _smoke_reference) / "data" / "reference"


def _smoke_reference(tmp: Path) -> None:
    nb = {"cells": [{"cell_type": "code", "id": "c0", "execution_count": None, "metadata": {}, "outputs": [],
                     "source": [SMOKE_RUN]}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (tmp / f"{NB}.ipynb").write_text(json.dumps(nb))
    e = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PERF_RESULTS_DIR", "PERF_RUNS_DIR")}
    p = subprocess.run([sys.executable, "-m", "labtools.runner", "--scale", "smoke", "--out", str(tmp / "out"),
                        str(tmp / f"{NB}.ipynb")], cwd=ROOT, env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    pack.unpack(tmp / "out" / f"{NB}.tar.gz", tmp / "data" / "reference" / "smoke-cpu")


def mine():
    r = Results(NB, "smoke", {"python": "3", "torch": "t", "device": "cpu", "cpu_count": 2}, autosave=False)
    r.add("train_step", {"batch_size": 32}, {"step_ms_mean": 1.0, "samples_per_s": 10.0})
    r.add("broken", {}, {"step_ms_mean": 2.0})
    r.add("only mine", {}, {"step_ms_mean": 3.0})
    return r.table()


def test_the_reference_column_holds_the_reference_runs_values(ref_root, capsys):
    ref = reference.note(NB, root=ref_root)
    line = capsys.readouterr().out
    assert ref is not None and ref.gpu == "smoke-cpu" and "Reference run beside yours: smoke-cpu" in line
    assert "smoke scale" in line and "torch" in line
    df = reference.add_column(mine(), ref, "step_ms_mean")
    col = "reference (smoke-cpu): step mean (ms)"
    assert list(df.columns).index(col) == list(df.columns).index("step_ms_mean") + 1
    by_name = dict(zip(df["experiment"], df[col]))
    assert by_name["train_step"] == ref.metric("train_step", "step_ms_mean") > 0
    assert by_name["broken"] == reference.NOT_RUN  # failed in the reference run: no value, and never NaN
    assert by_name["only mine"] == reference.NOT_RUN
    assert df["step_ms_mean"].tolist() == [1.0, 2.0, 3.0]  # the reader's own numbers untouched


def test_figures_and_trace_are_shown_labelled(ref_root, monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *objs, **kw: shown.extend(objs))
    ref = reference.lookup(NB, root=ref_root)[0]
    figs = reference.show_figures(ref, ["step_times"])
    assert [f.name for f in figs] == ["step_times.png"]
    captions = [o.data for o in shown if type(o).__name__ == "Markdown"]
    assert captions and captions[0].startswith("**Reference figure, not this run's:** `step_times.png` from smoke-cpu")
    assert any(type(o).__name__ == "Image" for o in shown)
    seen = {}
    import importlib

    show_module = importlib.import_module("perf_doctor.show")  # the package re-exports show(): the module itself
    monkeypatch.setattr(show_module, "show", lambda path, **kw: seen.setdefault("path", path))
    path = reference.show_trace(ref, "train_step")
    assert path is not None and path == seen["path"] and path.name.endswith(".pt.trace.json.gz")
    captions = [o.data for o in shown if type(o).__name__ == "Markdown"]
    assert any(c.startswith("**Reference trace, recorded on smoke-cpu") for c in captions), captions


def test_without_a_reference_a_line_says_so_and_nothing_is_added(tmp_path, capsys):
    assert reference.note(NB, root=tmp_path / "none") is None
    assert "No reference run for 01_fixture" in capsys.readouterr().out
    df = mine()
    assert reference.add_column(df, None, "step_ms_mean") is df
    assert reference.show_figures(None) == [] and reference.show_trace(None) is None
    assert capsys.readouterr().out.count("No reference") == 2


def test_a_damaged_reference_is_one_line(tmp_path):
    bad = tmp_path / "h100" / NB
    bad.mkdir(parents=True)
    (bad / "results.json").write_text("{not json")
    ref, line = reference.lookup(NB, root=tmp_path)
    assert ref is None and "could not be read" in line and "\n" not in line


def test_the_gpu_is_chosen_by_name_or_environment(ref_root, monkeypatch):
    assert reference.lookup(NB, gpu="h100", root=ref_root)[0] is None
    monkeypatch.setenv(reference.GPU_ENV, "smoke-cpu")
    assert reference.lookup(NB, root=ref_root)[0].gpu == "smoke-cpu"
    monkeypatch.setenv(reference.ROOT_ENV, str(ref_root))
    assert reference.reference_root() == ref_root and reference.lookup(NB)[0].gpu == "smoke-cpu"


def test_make_tests_smoke_results_work_as_a_reference(tmp_path):
    """The notebooks' own smoke results from this `make test` (when it ran them), packed and read back."""
    results = Path(os.environ.get("PERF_RESULTS_DIR", "")) / "01_profiler_basics"
    if not os.environ.get("PERF_RESULTS_DIR") or not (results / "results.json").is_file():
        pytest.skip("no smoke results of notebook 01 from this run (`make test` executes the notebooks first)")
    runs = Path(os.environ.get("PERF_RUNS_DIR", ""))
    pack.pack(results, tmp_path / "01.tar.gz", pack.new_traces(runs, 0), runs / "traces")
    pack.unpack(tmp_path / "01.tar.gz", tmp_path / "ref" / "cpu")
    ref = reference.lookup("01_profiler_basics", root=tmp_path / "ref")[0]
    doc = json.loads((results / "results.json").read_text())
    ok = [e for e in doc["experiments"] if e["status"] == "ok" and "step_ms_median" in e["metrics"]]
    assert ok, "notebook 01 recorded no timed row"
    df = pd.DataFrame({"experiment": [e["name"] for e in ok], "step_ms_median": 0.0})
    got = reference.add_column(df, ref, "step_ms_median")["reference (cpu): step median (ms)"].tolist()
    assert got == [e["metrics"]["step_ms_median"] for e in ok]


def _c(ratio, low, high, verdict="faster"):
    return {"a": "a", "b": "b", "ratio": ratio, "low": low, "high": high, "verdict": verdict}


@pytest.mark.parametrize("article,entry,expected", [
    (1.41, _c(1.45, 1.40, 1.52), "yes"),
    (1.41, _c(1.97, 1.87, 2.04), "yes, larger"),
    (1.50, _c(1.05, 1.02, 1.08), "yes, smaller"),
    (1.00, _c(1.64, 1.37, 1.91), "no (article: no effect)"),
    (1.02, _c(1.02, 1.02, 1.03, "faster, small"), "yes"),           # the article's "~2% faster", resolved small
    (1.02, _c(0.99, 0.92, 1.05, "no difference"), "not resolved"),
    (1.01, _c(0.98, 0.97, 0.98, "slower, small"), "no, reversed"),
    (0.90, _c(1.64, 1.37, 1.91), "no, reversed"),
    (1.41, _c(1.02, 0.95, 1.10, "no difference"), "not resolved"),
    (1.00, _c(1.01, 0.98, 1.04, "no difference"), "yes (no effect either)"),
    (1.41, None, reference.NOT_RUN),
    (1.41, {"ratio": float("nan")}, reference.NOT_RUN),
    (None, _c(1.2, 1.1, 1.3), "no article figure"),
])
def test_agreement_with_an_articles_figure(article, entry, expected):
    assert reference.agreement(article, entry) == expected


def test_the_article_table_never_shows_nan_and_explains_only_disagreement():
    df = reference.article_table([
        dict(effect="compiled vs eager", article="1.41x", article_ratio=1.41, reference=_c(1.45, 1.40, 1.52),
             this_run=_c(1.40, 1.30, 1.55), why="not shown: both reproduce"),
        dict(effect="Swin-T", article="0.90x", article_ratio=0.90, reference=_c(1.64, 1.37, 1.91), this_run=None,
             why="host-bound at batch 64"),
        dict(effect="memory", article="-10%", reference="-10.7% allocated", this_run=None, agrees="yes"),
    ])
    assert list(df.columns) == reference.ARTICLE_COLUMNS
    assert df["why"].tolist() == ["", "host-bound at batch 64", ""]
    assert df.loc[1, "this run"] == reference.NOT_MEASURED and df.loc[1, "H100 reproduces?"] == "no, reversed"
    assert df.loc[0, "H100 reference"] == "0.69× the time [0.66, 0.71]: faster"
    assert "nan" not in df.to_string().lower()


def test_a_comparison_recorded_the_other_way_round_is_turned(tmp_path):
    folder = tmp_path / "gpu" / NB
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"experiments": [], "comparisons": [_c(2.0, 1.6, 2.5)]}))
    ref = reference.lookup(NB, gpu="gpu", root=tmp_path)[0]
    assert ref.comparison("a", "b")["ratio"] == 2.0
    turned = ref.comparison("b", "a")
    assert (turned["a"], turned["ratio"], turned["low"], turned["high"]) == ("b", 0.5, 0.4, 0.625)
    assert ref.comparison("a", "c") is None
