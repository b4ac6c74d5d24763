"""Replay: notebook 03's analyses on the H100 reference run (data/reference/h100/03_backward_hooks): the with_stack
line, the deterministic-mode diff, the kernel view's tensor-core column and the article table's verdicts."""
from __future__ import annotations

import functools

import pytest

import perf_doctor as tr
from helpers.lessons import backward_hooks as hooks
from helpers.lessons.backward_hooks import views
from helpers.measure import compare
from helpers.notebook import reference

from .conftest import h100, h100_trace

NB = "03_backward_hooks"


@functools.cache
def doc(contains: str):
    return tr.load_trace(h100_trace(NB, contains))


def test_with_stack_line_follows_what_the_trace_holds():
    """The H100's with_stack trace has no ``CallFrom``: line 7 is ``patch_dropout_forward``'s def, not the gather
    line, and the lesson must say so (the notebook names the gather line only when ``exact``)."""
    origin = tr.forward_origin(doc("with_stack"), "GatherBackward0")
    line = hooks.stack_line(origin)
    assert line == {"file": "timm/layers/patch_dropout.py", "line": 7, "exact": False}
    assert "patch_dropout_forward" in " ".join(origin["stack"])
    exact = hooks.stack_line({"call_from": "timm/layers/patch_dropout.py:45", "stack": []})
    assert exact["exact"] and exact["line"] == 45 and hooks.stack_line(None) is None


@pytest.fixture(scope="module")
def gather_diff():
    return hooks.trace_diff(doc("nondet_gather"), doc("det_gather"), top=10)


def test_det_mode_diff_surfaces_the_mechanism(gather_diff):
    """Deterministic mode's element-wise ``index_put_`` (one ``indexing_backward_kernel_stride_1`` per step, ~3.2 ms)
    and its memory fills (283 vs 6 fill kernels per step, all dtypes; 747 vs 18 float fills in 3 steps) are in the
    diff's top rows, with their counts."""
    d = gather_diff.set_index("name")
    assert len(gather_diff) <= 10 and max(map(len, gather_diff["name"])) <= 70
    put = d.loc["aten::index_put_"]
    assert put["calls_default"] == 0 and put["calls_deterministic"] == 1 and put["ms_deterministic"] > 4
    k = gather_diff[gather_diff["name"].str.contains("indexing_backward_kernel")].iloc[0]
    assert k["kind"] == "kernel" and (k["calls_default"], k["calls_deterministic"]) == (0, 1)
    assert 3.0 < k["ms_deterministic"] < 3.4
    fills = gather_diff[(gather_diff["kind"] == "kernel") & gather_diff["name"].str.contains("Fill")].iloc[0]
    assert (fills["calls_default"], fills["calls_deterministic"]) == (6, 283) and fills["delta_ms"] > 1.5
    node = d.loc["GatherBackward0"]
    assert node["ms_deterministic"] > 5.0 and node["ms_default"] < 0.1


def test_fix_diff_is_the_fills_only():
    """The fix's backward does not change with deterministic mode: its diff leads with the fills."""
    d = hooks.trace_diff(doc("nondet_indexing"), doc("det_indexing"), top=5)
    assert "index_put_" not in " ".join(d["name"]) and d["name"].str.contains("fill|Fill").iloc[:2].all()


def test_kernel_view_does_not_count_ffma_gemms_as_tensor_cores():
    """03 shows the det gather trace's Kernels view (``traces.show``): the FP32 FFMA ``sm80_xmma_gemm_f32f32_…_ffma``
    kernels (TF32 off) must not be marked as using tensor cores, nor counted in the tensor-core share."""
    t = tr.open_trace(h100_trace(NB, "_det_gather/"))
    k = t.kernels()
    ffma = k[k["name"].str.contains("_ffma_")]
    assert len(ffma) and not ffma["tensor_cores"].isin([True, "yes"]).any()
    assert t.tensor_core_split() is None or t.tensor_core_split()["yes"] < 0.1


def test_article_table_shows_the_resolved_small_fix():
    """The H100's det indexing vs det gather (1.02x, 1.02-1.03), recorded as "no difference" under the old fixed
    3.5% floor, reads as resolved and small; its reversal (det indexing vs nondet gather) as reversed."""
    ref = h100(NB)
    fix = views.reread(ref.comparison("det gather", "det indexing"))
    assert fix["verdict"] == "faster, small" and compare.resolved(fix)
    beats = views.reread(ref.comparison("nondet gather", "det indexing"))
    assert beats["verdict"] == "slower, small"
    table = reference.article_table([
        dict(effect="fix", article="~2% faster", article_ratio=1.02, reference=fix, this_run=None),
        dict(effect="beats", article="faster", article_ratio=1.01, reference=beats, this_run=None)])
    assert table["H100 reference"].tolist() == ["0.98× the time [0.97, 0.98]: faster, small",
                                                "1.02× the time [1.02, 1.03]: slower, small"]


def test_article_agreement_of_small_effects():
    ref = h100(NB)
    assert reference.agreement(1.02, views.reread(ref.comparison("det gather", "det indexing"))) == "yes"
    assert reference.agreement(1.01, views.reread(ref.comparison("nondet gather", "det indexing"))) == "no, reversed"


def test_sync_counts_leave_out_the_profiling_loops_own_syncs():
    """The timeline's sync bars are the profiling loop's ``torch.cuda.synchronize()`` after each step, outside the
    ``backward`` label: 03's counts (inside it) stay 0 on the H100, while the whole trace holds one per step."""
    d = doc("_det_gather/")
    m = hooks.trace_metrics(d, "gather")
    assert m["syncs_per_step"] == 0 and m["backward_phases"] == 3
    whole = tr.count_syncs(d, phase=None)
    assert whole["total"] >= 3
