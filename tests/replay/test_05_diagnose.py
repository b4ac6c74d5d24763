"""Replay: notebook 05's doctor on the H100 reference run's traces and results (the GPU branch of the diagnosis,
run on every commit without a GPU)."""
from __future__ import annotations

import functools

from helpers.lessons import diagnose as dx
from perf_doctor import diagnose, diagnosis as dg

from .conftest import h100, h100_trace

NB = "05_diagnose"


@functools.cache
def _compute():
    return diagnose(h100_trace(NB, "compute"))


def test_compute_advice_on_an_fp32_gemm_names_tf32_first():
    """05-1: the planted 8192² product runs as FP32 FFMA GEMMs (sm80_xmma_gemm_f32f32_…_ffma, cutlass simt sgemm):
    the cheapest fix on Hopper is TF32, one line, and the advice names it before bf16 autocast and compile."""
    d = _compute()
    comp = next(c for c in d.causes if c["cause"] == "compute")
    assert d.on_gpu and d.top == "compute"
    see = comp["see"]
    assert 'torch.set_float32_matmul_precision("high")' in see, see
    assert see.index("set_float32_matmul_precision") < see.index("bf16"), see
    assert comp["fp32_gemm_share"] > 0.9


def test_tf32_advice_only_where_the_gemms_are_fp32():
    """The SmallCNN's trace (cuDNN convolutions, some already tf32) and the MLP's baseline keep the plain advice
    unless FP32 GEMMs hold most of the kernel time."""
    d = diagnose(h100_trace(NB, "yours"))
    comp = next(c for c in d.causes if c["cause"] == "compute")
    assert ("set_float32_matmul_precision" in comp["see"]) == (comp.get("fp32_gemm_share", 0) >= dg.FP32_GEMM_SHARE)


def test_host_sync_plant_on_the_h100_is_a_finding_beside_compute():
    d = diagnose(h100_trace(NB, "host_sync"))
    assert d.top == "compute" and d.ms("host sync") > 0
    assert any(c["cause"] == "host sync" for c in d.findings)


def test_the_fp32_ffma_gemm_is_not_counted_as_tensor_core_work():
    """05-2: "52% of kernel time in kernels using tensor cores" counted the FFMA kernels. The share the notebook
    prints (``Trace.tensor_core_split``'s ``yes``) is 0 on the compute plant's trace: every GEMM there is FP32 FFMA/SIMT."""
    from perf_doctor.views import open_trace

    split = open_trace(h100_trace(NB, "compute")).tensor_core_split()
    assert split is None or split["yes"] < 0.01, split


def test_a_plant_reads_as_what_it_does_to_the_step():
    """05-4: "nothing planted is faster than planted input: 43.36×" reads backwards; the plant makes the step slower."""
    from helpers.measure import compare

    c = h100(NB).comparison("planted input (size 1)", "nothing planted")
    line = compare.describe(dx.as_slowdown(c))
    assert line.startswith("planted input (size 1) takes 43.4× the time of nothing planted"), line


def test_the_baseline_read_profiled_and_timed_says_which_was_faster():
    """05-5: the H100's baseline was faster under the profiler (1.30 ms) than in the timed rounds (1.74 ms mean,
    1.51 ms median): the readings come back as numbers, so the notebook says it with them."""
    r = dx.baseline_readings(h100(NB).metric)
    assert r["profiled_ms"] == 1.298 and round(r["timed_mean_ms"], 2) == 1.74
    assert round(r["timed_median_ms"], 2) == 1.51
    assert r["profiled_over_timed"] < 0.8


def test_the_planted_table_shows_the_h100_beside_this_run():
    from helpers.notebook import reference, sizes

    full = sizes.DIAGNOSE["full"]
    sizes_full = {"input": full["input_ms"], "launch/overhead": full["tiny_ops"], "compute": full["matmul"],
                  "host sync": full["sync_ms"]}
    t = dx.planted_table(lambda *_: None, h100(NB), {}, sizes_full)
    assert list(t.columns) == reference.ARTICLE_COLUMNS
    by = t.set_index("effect")
    assert by.loc["planted input", "H100 reference"] == "top input; input 96% of the step"
    assert by.loc["planted host sync", "H100 reproduces?"] == "yes"
    assert by.loc["planted compute", "this run"] == reference.NOT_MEASURED
    assert by.loc["mixed plant: input + compute in one step", "H100 reference"] == reference.NOT_RUN
    assert by.loc["each saving matches the doctor's claim", "H100 reference"].startswith("4 of 4")
    assert "nan" not in t.to_string().lower()
