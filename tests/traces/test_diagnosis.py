"""perf_doctor.diagnosis: the causes of a step, each millisecond counted once, on synthetic GPU traces and
the real A100 traces."""
import pytest

from perf_doctor import diagnosis as dg
from perf_doctor.events import LOOP_SYNC_METADATA
from tests import fake_trace as ft
from tests.shared_data import gpu_trace

def _sum_ms(r):
    return sum(c["ms"] for c in r.causes if c["ms"] is not None)


# --- synthetic GPU traces ---------------------------------------------------------------------------------


def synthetic_gpu(sync=True, dl=True):
    """Two 1000-µs steps: kernels 0-300, a sync at 200-400 (it waits for the kernel, then 100 µs more) then the
    host works (GPU idle) until 700, a DataLoader wait 700-900 (GPU idle), a kernel 900-950, idle 950-1000."""
    evs = []
    for k in range(2):
        o = k * 1000
        evs.append(ft.label(f"ProfilerStep#{k}", o, 1000))
        evs.append(ft.kernel("gemm", o, 300, tid=7))
        if sync:
            evs.append(ft.runtime("cudaStreamSynchronize", o + 200, 200))
        if dl:
            evs.append(ft.label("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", o + 700, 200))
        evs.append(ft.kernel("relu", o + 900, 50, tid=7))
    return {"traceEvents": evs}


def test_gpu_split_adds_up_and_each_cause_is_where_planted():
    r = dg.diagnose(synthetic_gpu())
    assert r.on_gpu and r.steps == 2 and r.step_ms == pytest.approx(1.0)
    assert r.ms("compute") == pytest.approx(0.35)
    assert r.ms("input") == pytest.approx(0.2)
    # GPU idle from 300 on, at most the 200 µs the host was blocked in the sync (300-500): without the sync the host
    # work would start 200 µs sooner; the idle after that (500-700, 950-1000) is the host's own
    assert r.ms("host sync") == pytest.approx(0.2)
    assert r.ms("launch/overhead") == pytest.approx(0.25)
    assert r.top == "compute"
    assert _sum_ms(r) == pytest.approx(r.step_ms)


def test_gpu_without_sync_the_idle_is_launch_overhead():
    r = dg.diagnose(synthetic_gpu(sync=False, dl=False))
    assert r.ms("host sync") == 0 and r.ms("input") == 0
    assert r.top == "launch/overhead" and r.ms("launch/overhead") == pytest.approx(0.65)
    assert not r.cannot_judge


def test_no_profiler_step_analyses_the_whole_trace_and_says_so():
    doc = synthetic_gpu()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not e["name"].startswith("ProfilerStep")]
    r = dg.diagnose(doc)
    assert r.steps == 1 and any("no ProfilerStep" in n for n in r.notes)
    assert _sum_ms(r) <= r.step_ms + 1e-6


def test_empty_trace_is_a_clear_error():
    with pytest.raises(dg.DiagnosisError, match="no timed events"):
        dg.diagnose({"traceEvents": []})


def test_memory_near_capacity_is_a_finding():
    doc = synthetic_gpu()
    doc["deviceProperties"] = [{"totalGlobalMem": 100}]
    doc["traceEvents"].append({"ph": "i", "name": "[memory]", "ts": 10, "args": {"Device Type": 1,
                                                                               "Total Reserved": 95}})
    r = dg.diagnose(doc)
    mem = next(c for c in r.causes if c["cause"] == "memory")
    assert mem["finding"] and "95%" in mem["evidence"]


# --- the real A100 traces ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["hta_control.json.gz", "hta_alexnet.json.gz"])
def test_real_gpu_traces_find_the_syncs(name):
    r = dg.diagnose(gpu_trace(name))
    assert r.on_gpu
    sync = next(c for c in r.causes if c["cause"] == "host sync")
    assert sync["ms"] > 0
    assert _sum_ms(r) <= r.step_ms + 0.005  # causes are rounded to the µs
    if name == "hta_control.json.gz":
        assert r.steps == 6 and "60 synchronisation call(s)" in sync["evidence"]


def test_real_gpu_idle_matches_hta_published_breakdown():
    """The GPU's idle share (every cause but compute and communication: the GPU runs neither) vs HTA's own
    temporal breakdown of hta_control (idle 16.2 %, README beside the traces): within 2 points (HTA counts the
    GPU's span, we the steps)."""
    r = dg.diagnose(gpu_trace("hta_control.json.gz"))
    idle = 1 - (r.ms("compute") + r.ms("communication")) / r.step_ms
    assert abs(idle * 100 - 16.2) < 2.0


def test_loop_syncs_are_left_out():
    """diagnose_step on a GPU synchronises after each step; that device sync is not the step's own."""
    evs = []
    for k in range(2):
        o = k * 1000
        evs.append(ft.label(f"ProfilerStep#{k}", o, 1000))
        evs.append(ft.runtime("cudaLaunchKernel", o + 10, 5, correlation=k + 1))
        evs.append(ft.kernel("gemm", o + 20, 600, tid=7, correlation=k + 1))
        evs.append(ft.runtime("cudaDeviceSynchronize", o + 100, 520))
    doc = {"traceEvents": evs}
    as_is = dg.diagnose(doc)
    assert as_is.ms("host sync") == pytest.approx(0.39)  # 620 -> 1020 (next kernel), 1620 -> end; over 2 steps
    r = dg.diagnose(doc, loop_syncs=True)
    assert r.ms("host sync") == 0 and "2 sync(s) added by the profiling loop left out" in \
        next(c["evidence"] for c in r.causes if c["cause"] == "host sync")
    assert r.ms("launch/overhead") == pytest.approx(as_is.ms("launch/overhead") + as_is.ms("host sync"))
    assert r.top == "compute"


def _item_then_host_work(gpu_us, host_us, steps=3):
    """A step as its trace would look: one kernel of ``gpu_us``, ``.item()`` (a DtoH copy and a stream sync: the
    host blocked until the kernel is done), ``host_us`` of host work with the GPU drained, the loop's device sync."""
    evs = []
    for k in range(steps):
        c = 10 * k
        step = 40 + gpu_us + host_us + 100
        o = k * step
        evs += [ft.label(f"ProfilerStep#{k}", o, step),
                ft.runtime("cudaLaunchKernel", o + 5, 5, correlation=c + 1),
                ft.kernel("gemm", o + 20, gpu_us, tid=7, correlation=c + 1),
                ft.runtime("cudaMemcpyAsync", o + 30, 5, correlation=c + 2),
                ft.ev("Memcpy DtoH (Device -> Pageable)", o + 21 + gpu_us, 2, "gpu_memcpy", tid=7, correlation=c + 2),
                ft.runtime("cudaStreamSynchronize", o + 40, gpu_us - 15, correlation=c + 3),
                ft.runtime("cudaDeviceSynchronize", o + step - 10, 5, correlation=c + 4)]
    return {"traceEvents": evs}


def test_item_every_step_costs_what_removing_it_saves():
    """``.item()`` after 2 ms of GPU work, then 1 ms of host work: removing the sync lets the host work overlap
    the kernel, saving 1 ms a step; the doctor says host sync, 1 ms (the GPU idle after the sync)."""
    r = dg.diagnose(_item_then_host_work(2000, 1000), loop_syncs=True)
    sync = next(c for c in r.causes if c["cause"] == "host sync")
    assert sync["evidence"].startswith("3 synchronisation call(s)") and sync["finding"]
    assert sync["ms"] == pytest.approx(1.0, abs=0.15)  # + the loop's own 0.13 ms between steps (GPU idle too)
    assert r.top == "compute" and _sum_ms(r) <= r.step_ms + 0.005


def test_item_then_host_work_with_little_gpu_work_is_not_claimed_as_sync():
    """The same with 200 µs of GPU work and 2.7 ms of host work (a small model on a big GPU): removing the sync
    saves at most the 185 µs the host was blocked (nothing else is queued to overlap with), so the doctor must
    not claim the 2.7 ms of host work as host sync: it is the host's own time (launch/overhead)."""
    r = dg.diagnose(_item_then_host_work(200, 2700), loop_syncs=True)
    assert r.ms("host sync") <= 0.2, r.summary()
    assert r.top == "launch/overhead"
    assert _sum_ms(r) <= r.step_ms + 0.005


def test_loop_syncs_read_from_the_trace_so_the_doctor_agrees():
    """A trace written by ``profile_steps`` on a GPU (loop syncs) says so; ``diagnose`` without ``loop_syncs``
    (what ``python -m perf_doctor`` calls) must then leave the loop's syncs out, as ``diagnose_step`` does."""
    evs = []
    for k in range(2):
        o = k * 1000
        evs += [ft.label(f"ProfilerStep#{k}", o, 1000),
                ft.runtime("cudaLaunchKernel", o + 10, 5, correlation=k + 1),
                ft.kernel("gemm", o + 20, 600, tid=7, correlation=k + 1),
                ft.runtime("cudaDeviceSynchronize", o + 100, 520)]
    marked = {"traceEvents": evs, LOOP_SYNC_METADATA: 1}
    r = dg.diagnose(marked)
    assert r.ms("host sync") == 0 and r.top == "compute"
    assert dg.diagnose(marked, loop_syncs=True).to_list() == r.to_list()
    assert dg.diagnose({"traceEvents": evs}).ms("host sync") > 0  # an unmarked trace: every sync is the step's


def test_fp32_gemm_kernels_are_told_from_tensor_core_ones():
    from perf_doctor.diagnosis import is_fp32_gemm

    assert is_fp32_gemm("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4")
    assert is_fp32_gemm("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>(...)")
    assert is_fp32_gemm("volta_sgemm_128x64_nn")
    assert not is_fp32_gemm("sm90_xmma_gemm_tf32f32_tf32f32_f32_tn_n_tilesize128x128x32")
    assert not is_fp32_gemm("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64")
    assert not is_fp32_gemm("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn")
    assert not is_fp32_gemm("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>")
