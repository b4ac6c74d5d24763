"""helpers.trace: reading profiler traces (sync counts, DataLoader wait share)."""
import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from helpers import trace


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
    assert (c["stream_sync"], c["device_sync"], c["event_sync"], c["dtoh_copies"]) == (2, 1, 0, 1)
    assert c["total"] == 4 and c["phases"] == 2 and c["per_step"] == 2.0
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
    c = trace.count_syncs(trace.load_trace(path))
    assert c["phases"] == 1 and c["total"] == 0


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
