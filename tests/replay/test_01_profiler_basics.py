"""Replay of notebook 01 (profiler basics) on the recorded H100 run: its checks, trace picking, verdict wording and
results table run on the GPU's numbers and traces. The sync before the recorded window is GPU-only runtime code:
tested here on a CPU with ``torch.cuda.synchronize`` and the CUDA flag replaced (the order of calls), for both the
helper ``profiling.profile_steps`` and the loop written in the notebook's own cell."""
from __future__ import annotations

import ast
import functools
import json
from contextlib import contextmanager
from pathlib import Path

import pytest

from helpers.lessons import profiler_basics as pb
from helpers.measure import compare, profiling
from helpers.notebook.display import short_names
from helpers.notebook.results import Results
from perf_doctor import load_trace

from .conftest import h100, h100_trace

NB = "01_profiler_basics"
NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / f"{NB}.ipynb"


@functools.cache
def _kernels(which: str) -> dict:
    path = h100_trace(NB, which)
    return pb.kernel_times(load_trace(path))


def test_h100_busy_beyond_the_span_fails_the_check():
    """The H100's profile without a sync counted the warm-up's kernels: 804.96 ms busy in a 504.07 ms window."""
    m = h100(NB).row("profiled_step")["metrics"]
    span = m["step_ms_mean"] * m["steps_timed"]
    assert round(span, 2) == 504.07 and m["gpu_busy_ms"] == pytest.approx(804.964)
    from helpers.lessons.profiler_basics import checks as lesson
    from helpers.notebook import checks

    rule = lesson.RULES["gpu_busy_within_span"]
    doc = {"env": {"device": "cuda"}, "experiments": [{"name": "profiled_step", "status": "ok", "config": {},
                                                        "error": None, "metrics": {"gpu_busy_share": 0.0}}]}
    for busy, holds in ((m["gpu_busy_ms"], False), (0.99 * span, True), (span, True)):
        doc["experiments"][0]["metrics"]["gpu_busy_share"] = busy / span
        assert rule(checks.Facts(doc)) is holds


def test_the_exported_chrome_trace_is_broken_and_the_handler_file_intact():
    chrome, handler = _kernels("chrome_trace"), _kernels(".pt.trace.json")
    assert chrome == {"kernels": 760, "zero_duration": 760}      # 8 steps x 95 kernels, every one at ts=0, dur=0
    assert handler == {"kernels": 475, "zero_duration": 0}      # 5 recorded steps x 95, all timed


def test_the_offline_views_read_the_handler_file():
    """The notebook opens the offline views on the TensorBoard handler's file, not on the Chrome export."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    src = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    shown = [line for line in src.splitlines() if line.startswith("tr.show(")]
    assert shown and all("chrome_path" not in line for line in shown), shown


def test_the_timer_comparison_reads_low_not_faster():
    gap = h100(NB).comparison("synchronised", "naive") | {"role": "timer"}
    line = compare.describe(gap)
    assert "naive reads 1040× low against synchronised" in line and "faster" not in line, line
    assert f"{100 / gap['ratio']:.2g}%" == "0.096%"   # the naive timer's share, as the notebook prints it


def test_results_view_shows_kernel_names_short():
    doc = h100(NB).doc
    results = Results(NB, doc["scale"], autosave=False)
    for e in doc["experiments"]:
        results.add(e["name"], e["config"], e["metrics"], e["status"], e["error"])
    view, _ = pb.results_view(results)
    tops = [v for v in short_names(view)["top_op"] if isinstance(v, str)]   # as nbd.show shows them
    assert "cudnn::bn_bw_1C11_kernel_new" in tops, tops
    assert max(map(len, tops)) <= pb.NAME_WIDTH + 24, tops


# ---- the sync before the recorded window (CPU, with CUDA faked) ------------------------------------------------
def _faked(monkeypatch, calls):
    """``torch.cuda.synchronize`` recorded in ``calls``, CUDA said to be there, and a profiler whose ``step()`` is
    recorded too (the real one's first start costs seconds; the order of calls is what is tested)."""
    import torch

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    class Prof:
        def step(self):
            calls.append("prof.step")

    @contextmanager
    def profile(**kw):
        yield Prof()

    return profile


def _order(calls):
    """The steps and syncs in order, and whether the sync came before the ``prof.step()`` that starts recording."""
    marks = [i for i, c in enumerate(calls) if c == "prof.step"]
    return [c for c in calls if c != "prof.step"], "sync" in calls and calls.index("sync") < marks[2]


def test_profile_steps_syncs_before_the_first_recorded_step(monkeypatch):
    import torch

    calls: list[str] = []
    monkeypatch.setattr(torch.profiler, "profile", _faked(monkeypatch, calls))
    monkeypatch.setattr(profiling, "is_cuda", lambda device: True)
    monkeypatch.setattr(profiling, "activities", lambda device=None: [])
    profiling.profile_steps(lambda: calls.append("step"), wait=1, warmup=2, active=2, device="cpu", sync=False)
    # the kernels of the wait and warm-up steps finish before the first recorded step starts; none inside it
    assert _order(calls) == (["step"] * 3 + ["sync"] + ["step"] * 2, True), calls


def _notebook_function(name: str) -> str:
    for cell in json.loads(NOTEBOOK.read_text())["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and f"def {name}(" in src:
            fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == name)
            return ast.get_source_segment(src, fn)
    raise AssertionError(f"no cell defines {name}")


def test_the_notebooks_loop_syncs_before_the_first_recorded_step(monkeypatch):
    import torch

    calls: list[str] = []
    ns = {"profile": _faked(monkeypatch, calls), "schedule": lambda **kw: None, "torch": torch, "ACTIVITIES": [],
          "ON_GPU": True, "WAIT": 1, "WARMUP_STEPS": 2, "ACTIVE": 2}
    exec(_notebook_function("profile_steps"), ns)
    ns["profile_steps"](lambda: calls.append("step"))
    assert _order(calls) == (["step"] * 3 + ["sync"] + ["step"] * 2, True), calls


def test_the_doctor_says_the_chrome_traces_kernels_are_untimed(capsys):
    """The H100's Chrome trace (``export_chrome_trace``) holds 760 kernels and 56 memsets, all at time 0 for 0 µs.
    The doctor's text report on it failed with a TypeError (HTA's breakdown all NaN) and its JSON said "GPU idle
    3.10 ms a step" and no quality problem; now both reports run and say the device view is missing."""
    from perf_doctor import cli as doctor

    path = h100_trace(NB, "chrome_trace")
    assert doctor.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "untimed_device_work: 816 kernel(s), copies or memsets have no time" in out
    assert "GPU idle" not in out and max(map(len, out.splitlines()[1:])) <= 120
    rep = doctor.report(path, views=False)
    assert [q["check"] for q in rep["quality"]][:2] == ["untimed_device_work", "ops_without_kernels"]


def test_the_article_table_reads_the_reference_and_a_cpu_run():
    """The source article's three points beside the H100 (its old check key for the chain, its fp32 row's top
    op, its timer comparison) and a CPU run that recorded none of them: nothing raises, a missing side says so."""
    from helpers.notebook.reference import NOT_MEASURED, lookup

    ref = lookup(NB)[0]
    arts = pb.article_table(Results(NB, "smoke", {"device": "cpu"}, autosave=False), ref)
    assert list(arts["H100 reproduces?"]) == ["yes", "no", "yes"]
    assert "cudnn_batch_norm_backward" in arts["H100 reference"][1]
    assert list(arts["this run"])[:2] == [NOT_MEASURED] * 2 and arts["this run"][2] == "no queue on a CPU"
