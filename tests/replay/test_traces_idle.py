"""GPU idle causes (``perf_doctor.gaps``) on the H100 reference traces of notebook 05's plants."""
import pytest

from perf_doctor.gaps import idle_causes
from .conftest import h100_trace


@pytest.fixture(scope="module")
def plants():
    return {k: idle_causes(str(h100_trace("05_diagnose", k))) for k in ("05_diagnose_input", "05_diagnose_host_sync")}


def _ms(r):
    return {c["cause"]: c["ms"] for c in r["causes"]}


def test_input_plant_idle_is_waiting_for_data(plants):
    r = plants["05_diagnose_input"]
    ms = _ms(r)
    assert max(ms, key=ms.get) == "waiting for data"
    assert ms["waiting for data"] > 0.8 * r["idle_ms"]
    assert sum(ms.values()) == pytest.approx(r["idle_ms"], abs=0.01)


def test_host_sync_plant_idle_is_a_sync_issued_by_item(plants):
    r = plants["05_diagnose_host_sync"]
    ms = _ms(r)
    assert max(ms, key=ms.get) == "host sync" and ms["host sync"] > 0.8 * r["idle_ms"]
    assert sum(ms.values()) == pytest.approx(r["idle_ms"], abs=0.01)
    top = r["sync_by"][0]
    assert "aten::item" in top["op"] and "_local_scalar_dense" in top["op"]
    assert top["ms"] > 0.8 * ms["host sync"]


def test_h100_compute_plant_kernels_are_fp32_but_no_shapes_recorded():
    """05's compute plant (an 8192² FP32 product, TF32 off): its GEMM kernels read as FP32 on CUDA cores; the trace
    was recorded without record_shapes, so no TFLOP/s can be computed from it (tests/traces/test_kernels.py plants
    the figure in a synthetic trace)."""
    from perf_doctor.kernels import kernel_dtype
    from perf_doctor.throughput import op_throughput
    from perf_doctor.load import load_trace

    d = load_trace(h100_trace("05_diagnose", "05_diagnose_compute"))
    gemms = {e["name"] for e in d["traceEvents"] if e.get("cat") == "kernel" and "gemm" in e["name"].lower()}
    assert gemms and {kernel_dtype(n) for n in gemms} == {"fp32"}
    assert op_throughput(d) == []
