"""perf_doctor.backward: the trace readings notebook 03 relies on (two clocks, forward origin)."""
import pandas as pd
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import perf_doctor as trace
from helpers.lessons.backward_hooks import patch_dropout as pdm
from perf_doctor import backward as bl
from perf_doctor import events as ev
from tests import fake_trace as ft
from tests.shared_data import gpu_trace

NO_SYNCS = pd.DataFrame(columns=["ts_us", "name", "kind", "host_us", "gpu_idle_us"])


def _gpu_backward():
    """One step of a GPU backward: a matrix product's node launches a long kernel; the gather's node launches a
    tiny kernel and a device-to-host copy, then waits for it (cudaStreamSynchronize) while the GPU idles."""
    node = bl.BWD_PREFIX
    return {"traceEvents": [
        ft.label("ProfilerStep#1", 0, 2000),
        ft.op(node + "MmBackward0", 100, 20),
        ft.runtime("cudaLaunchKernel", 105, 5, corr=1),
        ft.kernel("ampere_sgemm_128x64_nn", 130, 500, corr=1, tid=7),
        ft.op(node + "GatherBackward0", 200, 1000),
        ft.runtime("cudaLaunchKernel", 210, 5, corr=2),
        ft.kernel("scatter_add_kernel", 640, 5, corr=2, tid=7),
        ft.runtime("cudaMemcpyAsync", 220, 5, corr=3),
        ft.ev("Memcpy DtoH (Device -> Pageable)", 650, 2, "gpu_memcpy", corr=3, tid=7),
        ft.runtime("cudaStreamSynchronize", 230, 960),
        ft.kernel("ampere_sgemm_128x64_nn", 1250, 300, corr=4, tid=7),   # launched outside any node
    ]}


def test_two_clocks_rank_a_synchronising_node_differently():
    doc = _gpu_backward()
    costs = pd.DataFrame([{"ts_us": 230.0, "name": "cudaStreamSynchronize", "kind": "stream_sync",
                           "host_us": 960.0, "gpu_idle_us": 598.0}])
    ops = bl.backward_ops(doc, costs=costs).set_index("op")
    # device time: the matrix product's kernel dominates; the gather's node hardly uses the GPU ...
    assert ops.loc["MmBackward0", "rank_by_device"] == 1 and ops.loc["GatherBackward0", "rank_by_device"] == 2
    assert ops.loc["MmBackward0", "device_ms"] == pytest.approx(0.5)
    assert ops.loc["GatherBackward0", "device_ms"] == pytest.approx(0.007)   # its kernel and its copy
    # ... but it holds the host for a millisecond and leaves the GPU idle: read the host clock and the idle time
    assert ops.loc["GatherBackward0", "rank_by_host"] == 1
    assert ops.loc["GatherBackward0", "syncs"] == 1 and ops.loc["MmBackward0", "syncs"] == 0
    assert ops.loc["GatherBackward0", "gpu_idle_ms"] == pytest.approx(0.598)
    assert list(ops.columns) == bl.OPS_COLUMNS[1:]


def test_two_clocks_on_a_cpu_trace_and_per_step():
    doc = _gpu_backward()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["cat"] in ("cpu_op", "user_annotation")]
    doc["traceEvents"].append(ft.label("ProfilerStep#2", 2000, 2000))
    ops = bl.backward_ops(doc, costs=NO_SYNCS).set_index("op")
    assert (ops["device_ms"] == 0).all() and (ops["syncs"] == 0).all()
    assert ops.loc["GatherBackward0", "host_ms"] == pytest.approx(0.5)      # 1 ms over two profiled steps
    assert ops.loc["GatherBackward0", "calls"] == 0.5


def test_two_clocks_on_a_real_a100_trace():
    doc = trace.load_trace(gpu_trace("hta_control.json.gz"))   # ../shared/gpu-traces/
    ops = bl.backward_ops(doc, costs=NO_SYNCS)
    steps = len(ev.step_events(doc))
    assert steps == 6
    nodes = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"
             and e["name"].startswith(bl.BWD_PREFIX)]
    assert ops["calls"].sum() * steps == pytest.approx(len(nodes))
    kernels_ms = sum(e["dur"] for e in doc["traceEvents"] if e.get("ph") == "X"
                     and ev.is_device_work(e)) / 1000.0 / steps
    # each kernel is attributed to at most one node, and the matrix products' backward does run kernels
    assert 0 < ops["device_ms"].sum() <= kernels_ms
    addmm = ops.set_index("op").loc["AddmmBackward0"]
    assert addmm["device_ms"] > 0 and addmm["host_ms"] > 0
    origin = bl.forward_origin(doc, "AddmmBackward0")
    assert origin["forward_op"] == "aten::addmm" and origin["stack"] == []   # recorded without with_stack


def _vit_trace(tmp_path, method):
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(img_size=32, patch_size=16, embed_dim=32, depth=1, num_heads=2, num_classes=4,
                              patch_drop_rate=0.5)
    pdm.set_patch_dropout(model, method).train()
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        model(torch.randn(2, 3, 32, 32)).sum().backward()
    path = tmp_path / f"{method}.json"
    prof.export_chrome_trace(str(path))
    return trace.load_trace(path)


def test_forward_origin_points_at_timms_gather(tmp_path):
    doc = _vit_trace(tmp_path, "gather")
    o = bl.forward_origin(doc, "GatherBackward0")
    assert o["forward_op"] == "aten::gather"
    assert o["call_from"].startswith("timm/layers/patch_dropout.py:")
    assert any("patch_dropout_forward" in f for f in o["stack"])
    # without the flow events, the sequence number alone finds the same op
    for e in doc["traceEvents"]:
        if e.get("cat") == "fwdbwd":
            e["cat"] = "removed"
    assert bl.forward_origin(doc, "GatherBackward0")["forward_op"] == "aten::gather"
    assert bl.forward_origin(doc, "NoSuchBackward0") is None


def test_forward_origin_of_the_fix(tmp_path):
    doc = _vit_trace(tmp_path, "indexing")
    assert bl.forward_origin(doc, "GatherBackward0") is None
    o = bl.forward_origin(doc, "IndexBackward0")
    assert o["forward_op"] == "aten::index" and "patch_dropout.py" in o["call_from"]


def test_two_clocks_with_the_trace_modules_sync_costs():
    """The default ``costs`` are ``syncs.sync_costs(doc)``: the gather's sync and the idle it caused land on it."""
    ops = bl.backward_ops(_gpu_backward()).set_index("op")
    assert ops.loc["GatherBackward0", "syncs"] == 1 and ops.loc["MmBackward0", "syncs"] == 0
    assert 0 < ops.loc["GatherBackward0", "gpu_idle_ms"] <= 0.96          # at most the host call's wait
    assert ops.loc["GatherBackward0", "rank_by_host"] == 1 and ops.loc["GatherBackward0", "rank_by_device"] == 2


def test_forward_origin_without_callfrom_still_names_the_file(tmp_path):
    """Traces whose Python frames carry no ``CallFrom`` argument (releases before it was added): the origin
    still names timm's patch_dropout.py, from the innermost Python function's own frame."""
    doc = _vit_trace(tmp_path, "gather")
    for e in doc["traceEvents"]:
        (e.get("args") or {}).pop("CallFrom", None)
    o = bl.forward_origin(doc, "GatherBackward0")
    assert o["forward_op"] == "aten::gather"
    assert o["call_from"].startswith("timm/layers/patch_dropout.py:") and o["call_from"].endswith("(function start)")


def test_two_clocks_when_the_launch_thread_id_is_not_the_nodes():
    """Kernels launched from autograd's device thread are found by the launch call's thread; when the trace
    gives the launch calls a thread id that no backward node has (Kineto writes an unmapped thread as a
    truncated pthread id, as in hta_control.json.gz's tid -1029147072), they are still attributed, by time."""
    doc = _gpu_backward()
    for e in doc["traceEvents"]:
        if e["cat"] == "cuda_runtime":
            e["tid"] = -1029147072
    ops = bl.backward_ops(doc, costs=NO_SYNCS).set_index("op")
    assert ops.loc["MmBackward0", "device_ms"] == pytest.approx(0.5)
    assert ops.loc["GatherBackward0", "device_ms"] == pytest.approx(0.007)
    # the kernel launched outside any node stays unattributed
    assert ops["device_ms"].sum() == pytest.approx(0.507)
