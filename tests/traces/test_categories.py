"""perf_doctor.events: one category table for the old and new Kineto schemas and every accelerator Kineto
records (CUDA, ROCm, MTIA, XPU), and the steps as the TensorBoard plugin's Overview counts them; read on synthetic
traces and on others' real traces (../shared/traces/, skipped where absent)."""
import pytest

import perf_doctor as trace
from perf_doctor import diagnosis as dg
from perf_doctor import events as ev
from perf_doctor import views as trace_views
from tests import fake_trace as ft
from tests.shared_data import other_trace


@pytest.mark.parametrize("cat, kind", [
    ("Kernel", "kernel"), ("KERNEL", "kernel"), ("kernel", "kernel"), ("mtia_ccp_events", "kernel"),
    ("collective_comm", "kernel"), ("Memcpy", "memcpy"), ("gpu_memcpy", "memcpy"), ("GPU Memcpy", "memcpy"),
    ("Memset", "memset"), ("gpu-memset", "memset"), ("Runtime", "launch"), ("cuda_runtime", "launch"),
    ("cuda_driver", "launch"), ("hip_runtime", "launch"), ("mtia_runtime", "launch"), ("xpu_runtime", "launch"),
    ("xpu_driver", "launch"), ("privateuse1_runtime", "launch"), ("Operator", "op"), ("cpu_op", "op"),
    ("user_annotation", "annotation"), ("python_function", "python"), ("gpu_user_annotation", "device_annotation"),
    ("cuda_sync", "device_sync"), ("xpu_sync", "device_sync"), ("Trace", "host"), ("devtools.timeline", "host"),
])
def test_one_table_for_every_schema_and_accelerator(cat, kind):
    assert ev.kind({"cat": cat}) == kind
    assert ev.is_host({"cat": cat}) == (kind not in ev.DEVICE_SIDE)


def test_collectives_are_named_on_the_device_and_on_the_host():
    k = {"cat": "kernel"}
    assert ev.is_collective(k | {"name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long)"})
    assert ev.is_collective(k | {"name": "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"})  # ROCm's RCCL
    assert ev.is_collective({"cat": "collective_comm", "name": "allreduce"})                       # XPU
    assert not ev.is_collective(k | {"name": "volta_sgemm_128x32_nt"})
    assert ev.is_collective({"cat": "user_annotation", "name": "gloo:all_reduce"})
    assert ev.is_collective({"cat": "cpu_op", "name": "c10d::allreduce_"})
    assert not ev.is_collective({"cat": "cpu_op", "name": "aten::mm"})
    assert not ev.is_collective({"cat": "cuda_runtime", "name": "ncclKernel"})  # a launch is no collective


def mtia_trace(steps=3):
    """An MTIA-like trace: ``mtia_runtime`` launches and ``mtia_ccp_events`` kernels, each step 1 ms with 600 µs
    of device work launched at its start (a kernel 20-620 µs)."""
    evs = []
    for k in range(steps):
        o = k * 1000
        evs += [ft.label(f"ProfilerStep#{k}", o, 1000),
                ft.op("aten::mm", o + 5, 10, **{"External id": k + 1}),
                ft.ev("mtiaLaunchKernel", o + 6, 4, "mtia_runtime", correlation=k + 1, **{"External id": k + 1}),
                ft.ev("mm_kernel", o + 20, 600, "mtia_ccp_events", tid=7, pid=2, correlation=k + 1, device=0,
                      stream=7, **{"External id": k + 1})]
    return {"traceEvents": evs}


def test_mtia_kernels_are_device_work():
    doc = mtia_trace()
    assert ev.has_gpu(doc)
    r = dg.diagnose(doc)
    assert r.on_gpu and r.steps == 3 and r.ms("compute") == pytest.approx(0.6)
    assert r.top == "compute" and not r.cannot_judge
    t = trace.open_trace(doc)
    with trace_views.quiet():
        ov = t.overview()
        k = t.kernels()
    assert ov.loc["average", "kernel_ms"] == pytest.approx(0.6) and k["name"].tolist() == ["mm_kernel"]


def test_gpu_copies_of_profiler_steps_are_not_steps():
    """CUDA and ROCm traces draw each ProfilerStep on the device timeline too (``gpu_user_annotation``); the
    TensorBoard plugin's parser took them for more steps (twice as many, each half as long)."""
    doc = mtia_trace()
    doc["traceEvents"] += [ft.ev(f"ProfilerStep#{k}", k * 1000 + 20, 600, "gpu_user_annotation", tid=7, pid=2)
                           for k in range(3)]
    with trace_views.quiet():
        ov = trace.open_trace(doc).overview()
    assert len(ov) == 4 and ov.loc["average", "step_ms"] == pytest.approx(1.0)
    assert dg.diagnose(doc).steps == 3


def test_a_step_runs_to_the_end_of_the_device_work_it_launched():
    """The host ranges 0-1000 and 1000-2000; step 0's kernel ends at 1300: step 0 is 0-1300, step 1 starts
    there (no overlap) and runs to its own kernel's end; the device work of the trailing step that launched
    nothing is no step."""
    evs = [ft.label("ProfilerStep#0", 0, 1000), ft.label("ProfilerStep#1", 1000, 1000),
           ft.runtime("cudaLaunchKernel", 900, 5, correlation=1),
           ft.kernel("k0", 1000, 300, tid=7, correlation=1),
           ft.runtime("cudaLaunchKernel", 1500, 5, correlation=2),
           ft.kernel("k1", 1510, 600, tid=7, correlation=2)]
    doc = {"traceEvents": evs}
    assert ev.step_windows(doc) == [("ProfilerStep#0", 0, 1300), ("ProfilerStep#1", 1300, 2110)]
    r = dg.diagnose(doc)
    assert r.step_times == [1.3, 0.81] and r.step_ms == pytest.approx(1.055)
    assert sum(c["ms"] for c in r.causes) == pytest.approx(r.step_ms, abs=0.002)
    assert ev.step_windows({"traceEvents": evs[:2]}) == ev.step_ranges({"traceEvents": evs[:2]})  # no device work


# --- others' real traces ----------------------------------------------------------------------------------------
KINETO_ASSERTED_US = {  # the TensorBoard plugin's end-to-end test, for worker0.1623143089861 (README beside them)
    "kernel": 98589, "memcpy": 1915, "memset": 89, "runtime": 2908, "dataloader": 59262, "cpu_exec": 13674,
    "other": 1156, "step": 177592}


def test_old_schema_trace_is_a_gpu_trace_and_matches_the_plugins_own_figures():
    path = other_trace("kineto_resnet50_nw0") / "worker0.1623143089861.pt.trace.json.gz"
    t = trace.open_trace(path)
    assert t.has_gpu
    with trace_views.quiet():
        ov = t.overview()
        k = t.kernels()
    avg = ov.loc["average"]
    for cat, us in KINETO_ASSERTED_US.items():
        assert round(avg[f"{cat}_ms"] * 1000) == us, cat
    assert len(k) > 10 and k["total_ms"].sum() > 0
    r = dg.diagnose(t.doc)
    assert r.on_gpu and r.steps == 6 and r.step_ms == pytest.approx(177.592, abs=0.001)
    assert r.ms("compute") > 50 and r.ms("input") > 30 and "host sync" not in r.cannot_judge


def test_rocm_trace_steps_are_not_doubled():
    path = other_trace("tracelens_mi300_resnet_act_checkpoint.json.gz")
    t = trace.open_trace(path)
    with trace_views.quiet():
        ov = t.overview()
    r = dg.diagnose(t.doc)
    assert len(ov) == 4 and r.steps == 3 and r.on_gpu
    cats = ov.drop(columns="step_ms").loc["average"].sum()
    assert cats == pytest.approx(r.step_ms, rel=0.001)
    assert ov.loc["average", "step_ms"] == pytest.approx(r.step_ms, rel=0.001)
