"""helpers.trace: reading profiler traces (sync counts and costs, DataLoader wait share)."""
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from helpers import trace

GPU_TRACES = Path(__file__).resolve().parents[1] / "data" / "gpu-traces"
CONTROL = GPU_TRACES / "hta_control.json.gz"
ALEXNET = GPU_TRACES / "hta_alexnet.json.gz"


def _ev(name, ts, dur=1.0, cat="cuda_runtime", corr=None):
    e = {"ph": "X", "name": name, "ts": ts, "dur": dur, "cat": cat, "args": {}}
    if corr is not None:
        e["args"]["correlation"] = corr
    return e


def test_sync_counter_on_a_synthetic_trace():
    doc = {"traceEvents": [
        _ev("forward", 0, 100, "user_annotation"),
        _ev("cudaStreamSynchronize", 50),                       # in the forward: not counted
        _ev("backward", 200, 100, "user_annotation"),
        _ev("cudaMemcpyAsync", 210, corr=7),
        _ev("Memcpy DtoH (Device -> Pinned)", 400, 2, "gpu_memcpy", corr=7),  # runs later, launched inside
        _ev("Memcpy HtoD (Pageable -> Device)", 220, 2, "gpu_memcpy", corr=8),
        _ev("cudaStreamSynchronize", 215),
        _ev("cudaDeviceSynchronize", 290),
        _ev("backward", 500, 100, "user_annotation"),
        _ev("backward", 600, 300, "gpu_user_annotation"),      # the GPU-timeline copy of the label: not a range
        _ev("cudaStreamSynchronize", 700),                      # after the host-side backward: not counted
        _ev("cudaStreamSynchronize", 550),
        {"ph": "i", "name": "cudaStreamSynchronize", "ts": 560},  # not a complete event
    ]}
    c = trace.count_syncs(doc)
    # the DtoH copy goes into pinned memory: launched in the phase, but no sync
    assert (c["stream_sync"], c["device_sync"], c["event_sync"], c["dtoh_copies"]) == (2, 1, 0, 1)
    assert c["total"] == 3 and c["phases"] == 2 and c["per_step"] == 1.5
    assert c["by_kind"] == {"stream_sync": 2, "device_sync": 1, "event_sync": 0, "blocking_copy": 0}
    assert trace.count_syncs(doc, phase=None)["stream_sync"] == 4
    assert trace.count_syncs({"traceEvents": []})["per_step"] == 0.0
    # CUPTI's raw names carry a version / per-thread-stream suffix; they are the same calls
    doc["traceEvents"] += [_ev("cudaStreamSynchronize_v3020", 520), _ev("cudaDeviceSynchronize_ptsz", 530)]
    c = trace.count_syncs(doc)
    assert (c["stream_sync"], c["device_sync"]) == (3, 2)
    assert trace.api_name("cudaMemcpyAsync_ptsz_v7000") == "cudaMemcpyAsync" and trace.api_name("x_v") == "x_v"


def test_sync_counter_on_a_real_cpu_trace(tmp_path):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with torch.profiler.record_function("backward"):
            model(torch.randn(2, 4)).sum().backward()
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    doc = trace.load_trace(path)
    c = trace.count_syncs(doc)
    assert c["phases"] == 1 and c["total"] == 0
    costs = trace.sync_costs(doc)
    assert costs.empty and list(costs.columns) == ["ts_us", "name", "kind", "host_us", "gpu_idle_us"]


def _copy(api, gpu_name, ts, corr, cat="cuda_runtime"):
    """A copy call and its GPU record (which runs a little later)."""
    return [_ev(api, ts, 2, cat, corr), _ev(gpu_name, ts + 5, 1, "gpu_memcpy", corr)]


# each case: (events, expected total, what the code before issue 11 counted)
SYNC_CASES = {
    ".item(): DtoH copy to pageable memory, then its stream sync = one sync": (
        _copy("cudaMemcpyAsync", "Memcpy DtoH (Device -> Pageable)", 10, 1) + [_ev("cudaStreamSynchronize", 13, corr=2)],
        1, 2),
    "an error check between the copy and its sync does not split the pair": (
        _copy("cudaMemcpyAsync", "Memcpy DtoH (Device -> Pageable)", 10, 1)
        + [_ev("cudaPeekAtLastError", 12.5, 0.1, corr=3), _ev("cudaStreamSynchronize_v3020", 13, corr=2)], 1, 2),
    "non-blocking copy into pinned memory is no sync": (
        _copy("cudaMemcpyAsync", "Memcpy DtoH (Device -> Pinned)", 10, 1), 0, 1),
    "driver-API syncs": (
        [_ev("cuStreamSynchronize", 10, cat="cuda_driver"), _ev("cuCtxSynchronize", 20, cat="cuda_driver"),
         _ev("cuEventSynchronize", 30, cat="cuda_driver")], 3, 0),
    "blocking cudaMemcpy (either direction; device-to-device does not block)": (
        _copy("cudaMemcpy", "Memcpy HtoD (Pageable -> Device)", 10, 1) + _copy("cudaMemcpy", "Memcpy DtoH (Device -> Pageable)", 20, 2)
        + _copy("cudaMemcpy", "Memcpy DtoD (Device -> Device)", 30, 3) + _copy("cuMemcpyDtoH_v2", "Memcpy DtoH (Device -> Pageable)", 40, 4, "cuda_driver"),
        3, 2),
    "async DtoH copy to pageable memory with no sync after it blocks by itself": (
        _copy("cudaMemcpyAsync", "Memcpy DtoH (Device -> Pageable)", 10, 1) + [_ev("cudaLaunchKernel", 20, corr=5)], 1, 1),
    "Kineto's cuda_sync record duplicates its host call; Stream Wait Event is no host sync": (
        [_ev("cudaStreamSynchronize", 10, corr=9),
         {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "ts": 11, "dur": 1, "args": {"correlation": 9, "cuda_sync_kind": "Stream Sync"}},
         {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "ts": 15, "dur": 1, "args": {"correlation": 10, "cuda_sync_kind": "Stream Wait Event"}},
         {"ph": "X", "cat": "cuda_sync", "name": "Context Sync", "ts": 20, "dur": 1, "args": {"correlation": 11, "cuda_sync_kind": "Context Sync"}}],
        2, 1),
}


@pytest.mark.parametrize("case", list(SYNC_CASES))
def test_each_synchronisation_counted_once(case):
    events, expected, _before = SYNC_CASES[case]
    doc = {"traceEvents": [_ev("backward", 0, 100, "user_annotation")] + events}
    c = trace.count_syncs(doc)
    assert c["total"] == expected and sum(c["by_kind"].values()) == expected and c["per_step"] == expected
    assert trace.count_syncs(doc, phase=None)["total"] == expected
    on_gpu = any(e.get("cat") in trace.GPU_CATS for e in events)  # without a GPU timeline there is no cost
    assert len(trace.sync_costs(doc)) == (expected if on_gpu else 0)
    # the same events on a separate host thread each: a copy's pair is per thread
    assert trace.count_syncs({"traceEvents": [dict(e, tid=7) for e in events]}, phase=None)["total"] == expected


def test_sync_cost_is_waiting_measured_on_the_gpu_timeline():
    doc = {"traceEvents": [
        _ev("cudaLaunchKernel", 0, 2, corr=1), _ev("kernel_a", 10, 100, "kernel", corr=1),        # GPU idle at launch: 10 us latency
        _ev("cudaStreamSynchronize", 20, 95, corr=2),                                            # waits for kernel_a (ends 110)
        _ev("cudaLaunchKernel", 116, 2, corr=3), _ev("kernel_b", 126, 74, "kernel", corr=3),      # launched right after the sync
        _ev("cudaDeviceSynchronize", 300, 5, corr=4),                                            # GPU already idle
        _ev("cudaLaunchKernel", 1000, 2, corr=5), _ev("kernel_c", 1010, 10, "kernel", corr=5),    # CPU busy elsewhere before this
    ]}
    assert trace.launch_latency_us(doc) == 10.0
    costs = trace.sync_costs(doc)
    assert list(costs.columns) == ["ts_us", "name", "kind", "host_us", "gpu_idle_us"]
    assert costs["kind"].tolist() == ["stream_sync", "device_sync"] and costs["host_us"].tolist() == [95.0, 5.0]
    # first: idle from the kernel's end (110) until the next kernel (126), clipped at host end 115 + 10 us launch
    # second: idle from the call (300) to its end plus launch (315): the 700 us after that are the CPU's doing
    assert costs["gpu_idle_us"].tolist() == [15.0, 15.0]
    assert len(trace.sync_costs({"traceEvents": doc["traceEvents"] + [_ev("backward", 250, 100, "user_annotation")]},
                                phase="backward")) == 1


def test_syncs_in_the_real_training_trace():
    """hta_control: 60 cudaStreamSynchronize, each right after a cudaMemcpyAsync DtoH to pageable memory
    (10 per ProfilerStep), and one cudaDeviceSynchronize after the last step (read from the trace, see
    data/gpu-traces/README.md). Before issue 11 the copies were counted as well: 121."""
    doc = trace.load_trace(CONTROL)
    c = trace.count_syncs(doc, phase=None)
    assert c["total"] == 61 and c["by_kind"] == {"stream_sync": 60, "device_sync": 1, "event_sync": 0, "blocking_copy": 0}
    assert c["dtoh_copies"] == 60
    s = trace.count_syncs(doc, phase="ProfilerStep")
    assert s["phases"] == 6 and s["total"] == 60 and s["per_step"] == 10.0
    costs = trace.sync_costs(doc)
    assert len(costs) == 61 and (costs["gpu_idle_us"] >= 0).all()
    host = sorted(float(e["dur"]) for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"
                  and e.get("name") in ("cudaStreamSynchronize", "cudaDeviceSynchronize"))
    assert sorted(costs["host_us"]) == host
    # a sync's idle window is at most its host call plus one launch latency
    assert (costs["gpu_idle_us"] <= costs["host_us"] + trace.launch_latency_us(doc) + 1e-9).all()
    assert len(trace.sync_costs(doc, phase="ProfilerStep")) == 60


def test_syncs_in_the_real_alexnet_trace():
    """hta_alexnet: 16 cudaStreamSynchronize + 5 cudaDeviceSynchronize; Kineto also recorded each as a
    cuda_sync event (16 "Stream Sync", 5 "Context Sync") and 20 "Stream Wait Event": still 21 syncs."""
    doc = trace.load_trace(ALEXNET)
    c = trace.count_syncs(doc, phase=None)
    assert c["total"] == 21 and c["stream_sync"] == 16 and c["device_sync"] == 5
    assert c["phases"] == 1 and trace.count_syncs(doc)["phases"] == 0  # no "backward" label in it
    costs = trace.sync_costs(doc)
    assert len(costs) == 21 and costs["gpu_idle_us"].sum() > 0


def test_wait_share_from_a_trace():
    doc = {"traceEvents": [
        {"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": 100},
        {"ph": "X", "name": "ProfilerStep#2", "ts": 100, "dur": 100},
        {"ph": "X", "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "ts": 10, "dur": 30},
        {"ph": "X", "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "ts": 190, "dur": 50},
    ]}
    w = trace.dataloader_wait_share(doc)
    assert w["step_ms"] == pytest.approx(0.2) and w["next_ms"] == pytest.approx(0.04) and w["share"] == pytest.approx(0.2)
    # a CUDA trace also has each step label's copy on the GPU timeline: it must not count as a step
    doc["traceEvents"] += [
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "ts": 20, "dur": 150},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#2", "ts": 170, "dur": 100},
    ]
    assert trace.dataloader_wait_share(doc) == w
