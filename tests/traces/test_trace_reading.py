"""perf_doctor: reading profiler traces (loading, events, sync counts and costs, DataLoader wait share, views)."""
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

import perf_doctor as trace
from perf_doctor import events as ev
from perf_doctor import syncs
from perf_doctor import views as trace_views

from tests import fake_trace as ft
from tests.shared_data import gpu_trace

# others' data (../shared/gpu-traces/, see tests/shared_data.py): the tests that read them skip where it is absent
CONTROL, ALEXNET = "hta_control.json.gz", "hta_alexnet.json.gz"


def test_sync_counter_on_a_synthetic_trace():
    doc = {"traceEvents": [
        ft.label("forward", 0, 100),
        ft.runtime("cudaStreamSynchronize", 50),                                # in the forward: not counted
        ft.label("backward", 200, 100),
        ft.runtime("cudaMemcpyAsync", 210, corr=7),
        ft.ev("Memcpy DtoH (Device -> Pinned)", 400, 2, "gpu_memcpy", corr=7),  # runs later, launched inside
        ft.ev("Memcpy HtoD (Pageable -> Device)", 220, 2, "gpu_memcpy", corr=8),
        ft.runtime("cudaStreamSynchronize", 215),
        ft.runtime("cudaDeviceSynchronize", 290),
        ft.label("backward", 500, 100),
        ft.ev("backward", 600, 300, "gpu_user_annotation"),  # the GPU-timeline copy of the label: not a range
        ft.runtime("cudaStreamSynchronize", 700),            # after the host-side backward: not counted
        ft.runtime("cudaStreamSynchronize", 550),
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
    doc["traceEvents"] += [ft.runtime("cudaStreamSynchronize_v3020", 520),
                           ft.runtime("cudaDeviceSynchronize_ptsz", 530)]
    c = trace.count_syncs(doc)
    assert (c["stream_sync"], c["device_sync"]) == (3, 2)
    assert ev.api_name("cudaMemcpyAsync_ptsz_v7000") == "cudaMemcpyAsync" and ev.api_name("x_v") == "x_v"


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
    return [ft.ev(api, ts, 2, cat, corr), ft.ev(gpu_name, ts + 5, 1, "gpu_memcpy", corr)]


def _sync_record(kind, ts, corr):
    """Kineto's GPU-side record of a sync (``enable_cuda_sync_events``), as in hta_alexnet.json.gz."""
    return {"ph": "X", "cat": "cuda_sync", "name": kind, "ts": ts, "dur": 1,
            "args": {"correlation": corr, "cuda_sync_kind": kind}}


# each case: (events, expected total, what the code before issue 11 counted)
SYNC_CASES = {
    ".item(): DtoH copy to pageable memory, then its stream sync = one sync": (
        _copy("cudaMemcpyAsync", "Memcpy DtoH (Device -> Pageable)", 10, 1)
        + [ft.runtime("cudaStreamSynchronize", 13, corr=2)], 1, 2),
    "an error check between the copy and its sync does not split the pair": (
        _copy("cudaMemcpyAsync", "Memcpy DtoH (Device -> Pageable)", 10, 1)
        + [ft.runtime("cudaPeekAtLastError", 12.5, 0.1, corr=3),
           ft.runtime("cudaStreamSynchronize_v3020", 13, corr=2)], 1, 2),
    "non-blocking copy into pinned memory is no sync": (
        _copy("cudaMemcpyAsync", "Memcpy DtoH (Device -> Pinned)", 10, 1), 0, 1),
    "driver-API syncs": (
        [ft.ev("cuStreamSynchronize", 10, 1.0, "cuda_driver"), ft.ev("cuCtxSynchronize", 20, 1.0, "cuda_driver"),
         ft.ev("cuEventSynchronize", 30, 1.0, "cuda_driver")], 3, 0),
    "blocking cudaMemcpy (either direction; device-to-device does not block)": (
        _copy("cudaMemcpy", "Memcpy HtoD (Pageable -> Device)", 10, 1)
        + _copy("cudaMemcpy", "Memcpy DtoH (Device -> Pageable)", 20, 2)
        + _copy("cudaMemcpy", "Memcpy DtoD (Device -> Device)", 30, 3)
        + _copy("cuMemcpyDtoH_v2", "Memcpy DtoH (Device -> Pageable)", 40, 4, "cuda_driver"),
        3, 2),
    "async DtoH copy to pageable memory with no sync after it blocks by itself": (
        _copy("cudaMemcpyAsync", "Memcpy DtoH (Device -> Pageable)", 10, 1)
        + [ft.runtime("cudaLaunchKernel", 20, corr=5)], 1, 1),
    "ROCm (HIP, under the same categories): .item()'s copy and sync are one, hipMemcpyWithStream blocks": (
        _copy("hipMemcpyAsync", "Memcpy DtoH (Device -> Pageable)", 10, 1)
        + [ft.runtime("hipStreamSynchronize", 13, corr=2)]
        + _copy("hipMemcpyWithStream", "Memcpy DtoH (Device -> Pageable)", 20, 3)
        + [ft.runtime("hipDeviceSynchronize", 30, corr=4), ft.runtime("hipStreamGetCaptureInfo_v2", 31, corr=5)], 3, 0),
    "Kineto's cuda_sync record duplicates its host call; Stream Wait Event is no host sync": (
        [ft.runtime("cudaStreamSynchronize", 10, corr=9), _sync_record("Stream Sync", 11, 9),
         _sync_record("Stream Wait Event", 15, 10), _sync_record("Context Sync", 20, 11)],  # the last: no host call
        2, 1),
}


@pytest.mark.parametrize("case", list(SYNC_CASES))
def test_each_synchronisation_counted_once(case):
    events, expected, _before = SYNC_CASES[case]
    doc = {"traceEvents": [ft.label("backward", 0, 100)] + events}
    c = trace.count_syncs(doc)
    assert c["total"] == expected and sum(c["by_kind"].values()) == expected and c["per_step"] == expected
    assert trace.count_syncs(doc, phase=None)["total"] == expected
    on_gpu = any(ev.is_device_work(e) for e in events)  # without a GPU timeline there is no cost
    assert len(trace.sync_costs(doc)) == (expected if on_gpu else 0)
    # a copy pairs with the next sync call of its own host thread only
    assert trace.count_syncs({"traceEvents": [dict(e, tid=7) for e in events]}, phase=None)["total"] == expected


def test_a_copy_and_a_sync_on_different_threads_are_two_syncs():
    copy = _copy("cudaMemcpyAsync", "Memcpy DtoH (Device -> Pageable)", 10, 1)
    doc = {"traceEvents": [dict(e, tid=1) for e in copy] + [ft.runtime("cudaStreamSynchronize", 13, corr=2, tid=2)]}
    assert trace.count_syncs(doc, phase=None)["by_kind"] == {"stream_sync": 1, "device_sync": 0, "event_sync": 0,
                                                             "blocking_copy": 1}


def test_sync_cost_is_waiting_measured_on_the_gpu_timeline():
    doc = {"traceEvents": [
        # idle GPU: 10 us latency; the sync waits for kernel_a (to 110); kernel_b right after the sync; the device
        # sync finds the GPU already idle; the CPU is busy before kernel_c's launch
        ft.runtime("cudaLaunchKernel", 0, 2, corr=1), ft.ev("kernel_a", 10, 100, "kernel", corr=1),
        ft.runtime("cudaStreamSynchronize", 20, 95, corr=2),
        ft.runtime("cudaLaunchKernel", 116, 2, corr=3), ft.ev("kernel_b", 126, 74, "kernel", corr=3),
        ft.runtime("cudaDeviceSynchronize", 300, 5, corr=4),
        ft.runtime("cudaLaunchKernel", 1000, 2, corr=5), ft.ev("kernel_c", 1010, 10, "kernel", corr=5),
    ]}
    assert syncs.launch_latency_us(doc) == 10.0
    costs = trace.sync_costs(doc)
    assert list(costs.columns) == ["ts_us", "name", "kind", "host_us", "gpu_idle_us"]
    assert costs["kind"].tolist() == ["stream_sync", "device_sync"] and costs["host_us"].tolist() == [95.0, 5.0]
    # first: idle from the kernel's end (110) until the next kernel (126), clipped at host end 115 + 10 us launch
    # second: idle from the call (300) to its end plus launch (315): the 700 us after that are the CPU's doing
    assert costs["gpu_idle_us"].tolist() == [15.0, 15.0]
    assert len(trace.sync_costs({"traceEvents": doc["traceEvents"] + [ft.label("backward", 250, 100)]},
                                phase="backward")) == 1


def test_the_cost_of_item_starts_in_its_copy_call():
    """``.item()`` on CUDA: ``cudaMemcpyAsync`` into pageable memory returns only when the copy is done (the host
    waits there, the GPU drains its queue and goes idle), then ``cudaStreamSynchronize`` returns at once. One sync,
    whose wait and idle start in the copy call, not in the short sync call."""
    doc = {"traceEvents": [
        ft.runtime("cudaLaunchKernel", 0, 2, corr=1), ft.ev("kernel_a", 10, 100, "kernel", corr=1),  # latency 10 us
        ft.runtime("cudaMemcpyAsync", 20, 95, corr=2),                              # waits for kernel_a
        ft.ev("Memcpy DtoH (Device -> Pageable)", 110, 2, "gpu_memcpy", corr=2),    # GPU idle from 112
        ft.runtime("cudaStreamSynchronize", 116, 2, corr=3),                        # returns at once
        ft.runtime("cudaLaunchKernel", 119, 2, corr=4), ft.ev("kernel_b", 129, 10, "kernel", corr=4),
    ]}
    assert trace.count_syncs(doc, phase=None)["total"] == 1
    costs = trace.sync_costs(doc)
    assert costs["ts_us"].tolist() == [116.0] and costs["name"].tolist() == ["cudaStreamSynchronize"]
    assert costs["host_us"].tolist() == [98.0]          # 20 -> 118, not the sync call's 2 us
    # idle from the copy's end (112) to the next kernel (129), clipped at the pair's end 118 + 10 us launch
    assert costs["gpu_idle_us"].tolist() == [16.0]


def test_syncs_in_the_real_training_trace():
    """hta_control: 60 cudaStreamSynchronize, each right after a cudaMemcpyAsync DtoH to pageable memory
    (10 per ProfilerStep), and one cudaDeviceSynchronize after the last step (read from the trace, see
    ../shared/gpu-traces/README.md). Before issue 11 the copies were counted as well: 121."""
    doc = trace.load_trace(gpu_trace(CONTROL))
    c = trace.count_syncs(doc, phase=None)
    assert c["total"] == 61 and c["by_kind"] == {"stream_sync": 60, "device_sync": 1, "event_sync": 0, "blocking_copy": 0}
    assert c["dtoh_copies"] == 60
    s = trace.count_syncs(doc, phase="ProfilerStep")
    assert s["phases"] == 6 and s["total"] == 60 and s["per_step"] == 10.0
    costs = trace.sync_costs(doc)
    assert len(costs) == 61 and (costs["gpu_idle_us"] >= 0).all()
    # the host is held from each copy call's start to its sync's end (the wait is mostly inside the copy call);
    # the lone cudaDeviceSynchronize by its own call
    runtime = sorted((e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"
                      and e.get("tid") == 3113936), key=lambda e: e["ts"])
    host = []
    for i, e in enumerate(runtime):
        if e["name"] == "cudaStreamSynchronize":
            copy = runtime[i - 1]
            assert copy["name"] == "cudaMemcpyAsync"
            host.append(float(e["ts"] + e["dur"] - copy["ts"]))
        elif e["name"] == "cudaDeviceSynchronize":
            host.append(float(e["dur"]))
    assert sorted(costs["host_us"]) == sorted(host)
    assert costs["host_us"].sum() > 3 * sum(float(e["dur"]) for e in runtime if e["name"].endswith("Synchronize"))
    # a sync's idle window is at most its host call plus one launch latency
    assert (costs["gpu_idle_us"] <= costs["host_us"] + syncs.launch_latency_us(doc) + 1e-9).all()
    assert len(trace.sync_costs(doc, phase="ProfilerStep")) == 60


def test_syncs_in_the_real_alexnet_trace():
    """hta_alexnet: 16 cudaStreamSynchronize + 5 cudaDeviceSynchronize; Kineto also recorded each as a
    cuda_sync event (16 "Stream Sync", 5 "Context Sync") and 20 "Stream Wait Event": still 21 syncs."""
    doc = trace.load_trace(gpu_trace(ALEXNET))
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


# ---------------------------------------------------------------------------------------------------------------
# The offline views (issue 12, Build item 1)
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """A real CPU training trace from tensorboard_trace_handler: 3 ProfilerSteps, a DataLoader, memory records."""
    from torch.profiler import schedule, tensorboard_trace_handler
    from torch.utils.data import DataLoader, TensorDataset

    out = tmp_path_factory.mktemp("cpu_trace")
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dl = DataLoader(TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,))), batch_size=16)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3),
                 on_trace_ready=tensorboard_trace_handler(str(out)), profile_memory=True) as prof:
        for i, (x, y) in enumerate(dl):
            if i >= 5:
                break
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    return out, trace.open_trace(out)


@pytest.fixture(scope="module")
def control():
    return trace.open_trace(gpu_trace(CONTROL))


def _check_overview_adds_up(t):
    ov = t.overview()
    steps = ov.drop(index="average")
    cats = [f"{c}_ms" for c in trace_views.CATEGORIES]
    assert list(ov.columns) == cats + ["step_ms"]
    assert ((steps[cats].sum(axis=1) - steps["step_ms"]).abs() < 1e-6).all()
    assert abs(ov.loc["average", cats].sum() - ov.loc["average", "step_ms"]) < 1e-6
    # and each step's time is its window in the trace: the ProfilerStep's host range extended to the end of the
    # device work it launched (events.step_windows), the step the doctor splits too; on a CPU the host range itself
    durs = {n: (b - a) / 1000.0 for n, a, b in ev.step_windows(t.doc)}
    assert steps.index.tolist() == list(durs)
    assert steps["step_ms"].tolist() == pytest.approx(list(durs.values()), abs=1e-3)
    if not t.has_gpu:
        assert list(durs.values()) == [(b - a) / 1000.0 for _, a, b in trace.step_ranges(t.doc)]
    return ov


def test_overview_categories_add_up_to_the_step_time(request, cpu_run):
    _, t = cpu_run
    ov = _check_overview_adds_up(t)
    assert len(ov) == 4 and ov.loc["average", "kernel_ms"] == 0 and ov.loc["average", "cpu_exec_ms"] > 0
    control = request.getfixturevalue("control")  # the GPU half: skipped where ../shared is absent
    ov = _check_overview_adds_up(control)
    assert len(ov) == 7 and ov.loc["average", "kernel_ms"] > 0


def test_overview_dataloader_is_the_wait_at_next(cpu_run):
    """PyTorch records the DataLoader's __next__ as a user annotation, which torch-tb-profiler's parser skips
    (its DataLoader category would be 0); on a CPU trace nothing outranks it, so it equals the time at __next__."""
    _, t = cpu_run
    ov = t.overview()
    wait = trace.dataloader_wait_share(t.doc)
    assert wait["next_ms"] > 0
    assert ov.drop(index="average")["dataloader_ms"].sum() == pytest.approx(wait["next_ms"], rel=0.01)


def test_operator_and_kernel_tables_match_the_trace(request, cpu_run):
    _, t = cpu_run
    ops = t.operators()
    assert list(ops.columns) == ["name", "calls", "host_self_ms", "host_total_ms", "device_self_ms",
                                 "device_total_ms", "tc_eligible", "tflops", "peak_pct"]
    in_steps = [e for e in t.doc["traceEvents"] if e.get("name") == "aten::addmm"]
    assert int(ops.set_index("name").loc["aten::addmm", "calls"]) == len(in_steps) > 0
    assert (ops["host_total_ms"] >= ops["host_self_ms"] - 1e-9).all()
    assert ops["host_self_ms"].is_monotonic_decreasing
    assert t.operators_note() is None
    control = request.getfixturevalue("control")  # the GPU half: skipped where ../shared is absent
    k = control.kernels()
    assert int(k["calls"].sum()) == sum(1 for e in control.doc["traceEvents"] if e.get("cat") == "kernel")
    assert k["total_ms"].is_monotonic_decreasing
    # the trace's occupancy estimate where Kineto wrote one; "0" (no estimate: issue 44) is unknown, never 0%
    occ = {}
    for e in control.doc["traceEvents"]:
        if e.get("cat") == "kernel":
            occ.setdefault(e["name"], set()).add(e.get("args", {}).get("est. achieved occupancy %"))
    unknown = {n for n, v in occ.items() if not (v - {0, None})}
    assert k["occupancy_pct"].dropna().gt(0).all() and unknown
    assert set(k.loc[k["occupancy_pct"].isna(), "name"]) == unknown
    # this trace's ops carry no link to their kernels: the table says so instead of showing zeros silently
    assert control.operators_note() is not None


def test_memory_view_where_recorded(request, cpu_run):
    _, t = cpu_run
    mem = t.memory()
    assert list(mem.columns) == ["device", "peak_allocated_mb", "peak_reserved_mb", "samples"]
    assert mem.set_index("device").loc["CPU", "peak_allocated_mb"] > 0
    control = request.getfixturevalue("control")  # the GPU half: skipped where ../shared is absent
    with pytest.raises(trace.TraceError, match="profile_memory=True"):
        control.memory()


def test_gpu_breakdown_matches_hta(request, cpu_run, tmp_path):
    _, t = cpu_run
    assert trace.open_trace(t).gpu_breakdown() is None
    control = request.getfixturevalue("control")  # the GPU half: skipped where ../shared is absent
    # HTA's own figures for the control trace (../shared/gpu-traces/README.md, traceinsight 0.6.1)
    g = trace.open_trace(control).gpu_breakdown()  # the Trace opened from CONTROL (HTA's load is kept with it)
    assert g["idle_pct"] == pytest.approx(16.2, abs=1.0) and g["compute_pct"] == pytest.approx(61.23, abs=1.0)
    assert g["non_compute_pct"] == pytest.approx(22.57, abs=1.0)
    # the AlexNet trace: against HTA run the way its docs show, on a trace folder
    from hta.trace_analysis import TraceAnalysis

    (tmp_path / "alexnet").mkdir()
    (tmp_path / "alexnet" / ALEXNET).write_bytes(gpu_trace(ALEXNET).read_bytes())
    with trace_views.quiet("hta"):
        ref = TraceAnalysis(trace_dir=str(tmp_path / "alexnet")).get_temporal_breakdown(visualize=False).iloc[0]
    g = trace.open_trace(tmp_path / "alexnet").gpu_breakdown()
    assert g["idle_pct"] == pytest.approx(ref["idle_time_pctg"], abs=1.0)
    assert g["compute_pct"] == pytest.approx(ref["compute_time_pctg"], abs=1.0)


def test_timeline_lanes(request, cpu_run):
    _, t = cpu_run
    labels = [tk.get_text() for tk in t.timeline().axes[0].get_yticklabels()]
    assert labels and all(lab.startswith("host") for lab in labels)  # no GPU, no sync lane
    control = request.getfixturevalue("control")  # the GPU half: skipped where ../shared is absent
    fig = control.timeline(steps=2)
    labels = [tk.get_text() for tk in fig.axes[0].get_yticklabels()]
    assert labels[0].startswith("host thread 3113936")  # the thread that runs the steps comes first
    assert "syncs" in labels and sum(lab.startswith("GPU 3 stream") for lab in labels) == 4


def test_show_prints_every_view_and_no_library_noise(control, cpu_run, capsys, caplog):
    pytest.importorskip("IPython")
    trace.show(control, steps=2)  # a Trace: its parsed views are reused; a path works the same (below)
    trace.show(cpu_run[0])
    captured = capsys.readouterr()
    out = captured.out + captured.err + caplog.text
    for title in ("Overview", "GPU time", "Operators", "Kernels", "Memory", "Timeline"):
        assert title in out
    assert "CPU only, so the GPU views and device columns are left out" in out  # said once, no empty Kernels view
    assert "Traceback" not in out and "Parsed" not in out and "should not intersect" not in out


# ---------------------------------------------------------------------------------------------------------------
# Scale and bad input (issue 12)
# ---------------------------------------------------------------------------------------------------------------
def _one_line_naming(exc_info, path):
    msg = str(exc_info.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def _gz_trace(path, steps=50):
    """A small gzipped GPU trace of our own (ProfilerSteps, launches, kernels) written to ``path``."""
    import gzip
    import json

    evs = []
    for i in range(steps):
        t0 = i * 100
        evs += [ft.label(f"ProfilerStep#{i}", t0, 90), ft.runtime("cudaLaunchKernel", t0 + 5, 1, corr=i),
                ft.ev(f"kernel_{i}", t0 + 10, 50, "kernel", corr=i)]
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": evs}).encode()))
    return path


def test_bad_inputs_get_one_line_naming_the_file(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("this is not a trace\n")
    with pytest.raises(trace.TraceError) as e:
        trace.load_trace(text)
    assert "not a complete JSON profiler trace" in _one_line_naming(e, text)
    other_json = tmp_path / "config.json"
    other_json.write_text('{"lr": 0.1}')
    with pytest.raises(trace.TraceError) as e:
        trace.load_trace(other_json)
    assert "not a Chrome trace" in _one_line_naming(e, other_json)
    cut = tmp_path / "cut.json.gz"
    whole = _gz_trace(tmp_path / "whole.json.gz").read_bytes()
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(trace.TraceError) as e:
        trace.load_trace(cut)
    assert "truncated or damaged" in _one_line_naming(e, cut)
    nothing = tmp_path / "nothing.json"
    nothing.write_text('{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}]}')
    with pytest.raises(trace.TraceError) as e:
        trace.load_trace(nothing)
    assert "holds no profiled events" in _one_line_naming(e, nothing)
    # gzip is recognised by its bytes, not its name; a bare JSON array of events is a Chrome trace too
    renamed = tmp_path / "zipped.json"
    renamed.write_bytes(whole)
    assert len(trace.load_trace(renamed)["traceEvents"]) == 150
    bare = tmp_path / "bare.json"
    bare.write_text('[{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 5, "cat": "cpu_op", "pid": 1, "tid": 1}]')
    assert trace.load_trace(bare)["traceEvents"][0]["name"] == "aten::mm"
    empty = tmp_path / "empty_run"
    empty.mkdir()
    with pytest.raises(trace.TraceError) as e:
        trace.open_trace(empty)
    assert "holds no trace file" in _one_line_naming(e, empty)
    with pytest.raises(trace.TraceError) as e:
        trace.load_trace(tmp_path / "missing.json")
    assert "no such file" in _one_line_naming(e, tmp_path / "missing.json")
    with pytest.raises(trace.TraceError, match="no profiled events"):
        trace.open_trace({"traceEvents": []})
    # show() turns each into one printed line, no traceback
    for bad in (text, cut, empty):
        trace.show(bad)
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 3 and "Traceback" not in out


def test_cpu_only_trace_asked_for_gpu_views(cpu_run):
    path, t = cpu_run
    assert not t.has_gpu and trace.open_trace(t).gpu_breakdown() is None
    for view in (t.kernels, t.idle_breakdown, t.launch_stats, lambda: t.hta):
        with pytest.raises(trace.TraceError) as e:
            view()
        assert "CPU-only trace" in _one_line_naming(e, path)


def test_trace_without_profiler_step_is_analysed_whole_and_says_so(tmp_path):
    t = trace.open_trace(gpu_trace(ALEXNET))
    assert any("no ProfilerStep" in n and str(gpu_trace(ALEXNET)) in n for n in t.notes)
    ov = t.overview()
    assert len(ov) == 2 and abs(ov.drop(columns="step_ms").loc["average"].sum() - ov.loc["average", "step_ms"]) < 1e-6
    assert trace.count_syncs(t.doc, phase=None)["total"] == 21


def test_a_long_trace_is_trimmed_to_its_first_steps():
    doc = {"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]}
    for i in range(20):
        t0 = i * 100
        doc["traceEvents"] += [ft.label(f"ProfilerStep#{i}", t0, 90),
                               ft.runtime("cudaLaunchKernel", t0 + 80, 1, corr=i),
                               ft.ev("k", t0 + 105, 10, "kernel", corr=i)]
    small, note = trace.trim(doc, max_steps=5, max_events=None)
    assert [n for n, _, _ in trace.step_ranges(small)] == [f"ProfilerStep#{i}" for i in range(5)]
    assert "holds 20 ProfilerSteps" in note and "first 5" in note
    kernels = sorted(e["args"]["correlation"] for e in small["traceEvents"] if e.get("cat") == "kernel")
    assert kernels == [0, 1, 2, 3, 4]  # step 4's kernel runs after step 5 starts: kept with its launch
    assert sum(e.get("ph") == "M" for e in small["traceEvents"]) == 1
    # heavy steps: fewer of them (3 events a step here: 2 steps fit in 7 events), never none
    few, note = trace.trim(doc, max_steps=5, max_events=7)
    assert len(trace.step_ranges(few)) == 2 and len(few["traceEvents"]) == 1 + 2 * 3 and "first 2" in note
    assert len(trace.step_ranges(trace.trim(doc, max_steps=5, max_events=1)[0])) == 1
    assert trace.trim(doc, max_steps=None, max_events=None)[1] is None and trace.trim(doc, 50)[1] is None
    # the real trace: 3 of its 6 steps, the same syncs per step
    t = trace.open_trace(gpu_trace(CONTROL), max_steps=3)
    assert len(t.overview()) == 4 and any("first 3" in n for n in t.notes)
    assert trace.count_syncs(t.doc, phase="ProfilerStep")["per_step"] == 10.0


def test_launch_summary_from_hta(control):
    s = control.launch_summary()
    launches = sum(1 for e in control.doc["traceEvents"] if e.get("name") == "cudaLaunchKernel")
    assert 0 < s["launches"] <= launches and 0.0 <= s["short_kernel_share"] <= 1.0
    assert s["cpu_duration_us"] > 0 and s["launch_delay_us"] >= 0
    idle = control.idle_breakdown()
    assert set(idle["idle_category"]) == {"host_wait", "kernel_wait", "other"} and (idle["idle_ms"] >= 0).all()


def test_any_traces_module_imports_first():
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    for first in ("perf_doctor.views", "perf_doctor.events", "perf_doctor.timeline", "perf_doctor.show",
                  "perf_doctor.diagnosis", "perf_doctor.cli"):
        r = subprocess.run([sys.executable, "-c", f"import {first}; import perf_doctor as traces; traces.Trace, traces.show"],
                           cwd=root, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-500:]


def test_a_failing_library_view_says_so_in_one_line_and_the_rest_still_show(cpu_run, capsys, monkeypatch):
    from torch_tb_profiler.profiler.data import RunProfileData

    def broken(*a, **k):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(RunProfileData, "from_json", broken)
    path, _ = cpu_run
    trace.show(path)
    out = capsys.readouterr().out
    assert "torch-tb-profiler's parser failed on this trace (RuntimeError: boom" in out
    # the step-times table: "step_ms" as pandas prints it, "step (ms)" once helpers.notebook.display is imported
    assert ("step (ms)" in out or "step_ms" in out) and "Timeline" in out
    assert "Traceback" not in out and "second line" not in out
    t = trace.open_trace(path)
    for view in (t.overview, t.operators, t.memory):
        with pytest.raises(trace.TraceError, match="parser failed"):
            view()


def test_a_folder_with_several_traces_shows_the_newest_and_says_so(tmp_path):
    import os
    import shutil

    old, new = tmp_path / "w.1.pt.trace.json.gz", tmp_path / "w.2.pt.trace.json.gz"
    shutil.copy(gpu_trace(ALEXNET), old)
    shutil.copy(gpu_trace(CONTROL), new)
    os.utime(old, (1, 1))
    path, notes = trace.find_trace(tmp_path)
    assert path == new and "2 trace files" in notes[0] and new.name in notes[0]


def test_tb_profiler_intersect_complaint_is_kept_out_of_the_output(capsys, caplog):
    """torch-tb-profiler logs "ranges on the same thread should not intersect" on some newer traces."""
    doc = {"traceEvents": [ft.label("ProfilerStep#1", 0, 100), ft.op("aten::a", 10, 20), ft.op("aten::b", 20, 20)]}
    with caplog.at_level("DEBUG"):
        assert trace.open_trace(doc).overview().loc["average", "step_ms"] == pytest.approx(0.1)
    captured = capsys.readouterr()
    assert "intersect" not in captured.out + captured.err + caplog.text
