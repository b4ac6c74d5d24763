"""Replay: the shared trace views (``perf_doctor``: kernels, tables, timeline) on the recorded H100 traces of
notebooks 01, 03 and 05 (issue 31). Each trace is read once per module; the torch-tb-profiler parse only on the two
small traces (01's step, 05's compute plant)."""
from __future__ import annotations

import gzip
import importlib
import json
import re
from functools import cache

import pytest

from perf_doctor import events as ev
from perf_doctor.kernels import short_name, uses_tensor_cores
from perf_doctor.load import load_trace
from perf_doctor.views import open_trace

from .conftest import h100, h100_trace

WIDTH = 60
TRACED = ("01_profiler_basics", "03_backward_hooks", "05_diagnose")
KERNEL_NAME = re.compile(r'"cat":\s*"kernel",\s*"name":\s*"((?:[^"\\]|\\.)*)"')


@cache
def kernel_names() -> frozenset[str]:
    """Every kernel name in the H100 traces of 01, 03 and 05."""
    names = set()
    for nb in TRACED:
        for path in h100(nb).traces(""):
            with gzip.open(path, "rt") as f:   # read as text, not parsed: the kernels' names only (a third the time)
                names.update(json.loads(f'"{m}"') for m in KERNEL_NAME.findall(f.read()))
    return frozenset(names)


@cache
def view(nb: str, contains: str):
    """The trace's ``Trace``, its kernel and operator tables parsed once (torch-tb-profiler)."""
    t = open_trace(h100_trace(nb, contains))
    return t, t.kernels(), t.operators()


@cache
def det_gather():
    return load_trace(h100_trace("03_backward_hooks", "03_backward_hooks_det_gather/"))


# ---- the kernel classifier -------------------------------------------------------------------------------------
def test_every_h100_kernel_is_classified_and_the_known_ones_right():
    names = kernel_names()
    assert len(names) > 80
    got = {n: uses_tensor_cores(n) for n in names}
    assert all(v in (True, False, None) for v in got.values())
    ffma = [n for n in names if "_ffma_" in n]
    tf32_sm90 = [n for n in names if n.startswith("sm90_xmma_fprop") and "tf32" in n]
    s1688 = [n for n in names if "tensorop_s1688" in n]
    simt = [n for n in names if "simt_sgemm" in n]
    assert ffma and tf32_sm90 and s1688 and simt
    assert not any(got[n] for n in ffma + simt), "an FP32 FFMA/SIMT GEMM classified as tensor-core"
    assert all(got[n] is True for n in tf32_sm90 + s1688), "a TF32 tensor-op kernel classified as not"
    assert all(got[n] is True for n in names if "tensor16x8x8" in n)
    # non-GEMM kernels: element-wise, reductions, normalisation, copies, the libraries' helpers
    for n in names:
        if any(w in n for w in ("elementwise", "reduce_kernel", "bn_fw", "bn_bw", "layer_norm", "softmax",
                                "splitKreduce", "nchwToNhwc", "init_device_workspace", "radixSort")):
            assert got[n] is False, n
    assert None not in got.values(), [n for n, v in got.items() if v is None]   # every H100 kernel is known


def test_short_names_fit_are_stable_and_keep_what_tells_kernels_apart():
    for n in kernel_names():
        s = short_name(n, WIDTH)
        assert len(s) <= WIDTH and short_name(s, WIDTH) == s, (n, s)
        assert not s.startswith("void ") and "(" not in s
    assert short_name("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, float, "
                      "cudnnTensorStruct, float const*)") == "cudnn::bn_bw_1C11_kernel_new"
    assert short_name("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>"
                      "(cutlass_80_simt_sgemm_256x128_8x4_nn_align1::Params)") == \
        "cutlass_80_simt_sgemm_256x128_8x4_nn_align1"
    assert "ffma" in short_name("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_"
                                "aligna4_alignc4_execute_kernel__5x_cublas")
    for plain in ("aten::addmm", "ProfilerStep#5", "autograd::engine::evaluate_function: GatherBackward0",
                  "torch/nn/modules/module.py(1736): _call_impl"):
        assert short_name(plain) == plain


# ---- the views' tables -------------------------------------------------------------------------------------------
def test_kernel_tables_classify_tensor_cores_from_names_not_the_plugins_list():
    """01's step (sm90 TF32 convolutions beside FP32 FFMA ones) and 05's compute plant (FP32 FFMA GEMMs only):
    torch-tb-profiler marked the FFMA GEMMs as tensor-core and the TF32 convolutions as not."""
    _, k01, _ = view("01_profiler_basics", "train_step/2")
    by = dict(zip(k01["name"], k01["tensor_cores"]))
    assert [by[n] for n in by if n.startswith("sm90_xmma_fprop") and "tf32" in n] == ["yes", "yes"]
    assert {by[n] for n in by if "_ffma_" in n} == {"no"}
    t05, k05, _ = view("05_diagnose", "compute")
    assert all(v == "no" for n, v in zip(k05["name"], k05["tensor_cores"]) if "gemm" in n.lower())
    assert t05.tensor_core_split()["yes"] == pytest.approx(0.0)
    split = view("01_profiler_basics", "train_step/2")[0].tensor_core_split()
    assert 0 < split["yes"] < 1 and sum(split.values()) == pytest.approx(1.0)


def test_shown_tables_hold_no_name_longer_than_the_width(capsys, monkeypatch):
    """The views print (plain ``Table``) kernels' and operators' names at most ``WIDTH`` characters long; the
    data keeps the full names. (Holistic Trace Analysis' views and the timeline are left out here: time.)"""
    from perf_doctor.load import TraceError

    show_mod = importlib.import_module("perf_doctor.show")
    t, k, ops = view("01_profiler_basics", "train_step/2")

    def skipped(*a, **kw):
        raise TraceError("left out in this test")

    for name in ("gpu_breakdown", "idle_breakdown", "launch_summary", "timeline"):
        monkeypatch.setattr(t, name, skipped)
    assert k["name"].str.len().max() > 200   # the data keeps the full names
    shown = []
    orig = show_mod.Table
    try:
        show_mod.render_with(lambda df, precision=2: shown.append(df) or df, show_mod.say)
        show_mod.show(t, steps=1)
    finally:
        show_mod.render_with(orig, show_mod.say)
    named = [df for df in shown if "name" in df.columns]
    assert len(named) == 2
    assert all(df["name"].str.len().max() <= WIDTH for df in named)
    assert all("tc_eligible" not in df.columns for df in named)   # an eligibility mark, not use: not shown
    assert "classified from kernel names" in capsys.readouterr().out


# ---- the timeline's syncs ------------------------------------------------------------------------------------------
def test_the_profiling_loops_own_syncs_are_labelled_and_not_counted_as_the_models():
    """03's deterministic-gather trace: each ProfilerStep ends in the loop's ``cudaDeviceSynchronize`` (112-136 ms
    of a 171 ms step). The timeline draws them as the profiling loop's own, apart from the step's syncs; the
    count the views give agrees with the notebook's table (0 syncs in the model's step)."""
    from perf_doctor import timeline

    doc = det_gather()
    fig = timeline.draw_timeline(doc, steps=3)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("profiling loop's own sync" in s for s in legend), legend
    assert not any(s.startswith("sync") and "loop" not in s for s in legend), legend
    own, loop = timeline.sync_split(doc)
    assert len(loop) == len(ev.step_ranges(doc)) + 1 and not own   # one per step, and the one after the last
    assert all(e["name"] == "cudaDeviceSynchronize" for e in loop)
