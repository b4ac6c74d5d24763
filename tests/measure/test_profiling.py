import json

import pytest
import torch
from torch.profiler import ProfilerActivity, record_function

import perf_doctor as trace
from helpers.measure import profiling
from perf_doctor.events import LOOP_SYNC_METADATA


def table_rows(table_text: str) -> list[str]:
    """The names in the first column of a ``key_averages().table()`` text (data rows only)."""
    lines = table_text.splitlines()
    seps = [i for i, ln in enumerate(lines) if ln.startswith("---")]
    if len(seps) < 3:
        return []
    header = lines[seps[0] + 1]
    width = header.index("Self CPU %") if "Self CPU %" in header else None
    return [name for ln in lines[seps[1] + 1:seps[2]] if (name := (ln[:width] if width else ln.split("  ")[0]).strip())]


def _step():
    with record_function("phase_a"):
        torch.randn(64, 64) @ torch.randn(64, 64)
    with record_function("phase_b"):
        torch.relu(torch.randn(64, 64))


def test_activities_only_usable_ones():
    acts = profiling.activities()
    assert ProfilerActivity.CPU in acts
    if not torch.cuda.is_available():
        assert ProfilerActivity.CUDA not in acts
        assert profiling.sort_keys(acts)["self"] == "self_cpu_time_total"
    assert profiling.sort_keys([ProfilerActivity.CPU, ProfilerActivity.CUDA])["self"] == "self_device_time_total"


def test_cuda_activity_for_a_cuda_device_however_named(monkeypatch):
    monkeypatch.setattr(torch.profiler, "supported_activities", lambda: {ProfilerActivity.CPU, ProfilerActivity.CUDA})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for dev in ("cuda", "cuda:0", torch.device("cuda", 0)):
        assert ProfilerActivity.CUDA in profiling.activities(dev)
    assert ProfilerActivity.CUDA not in profiling.activities(torch.device("cpu"))


def test_schedule_records_only_active_steps_and_labels():
    prof = profiling.profile_steps(_step, wait=1, warmup=1, active=2)
    assert len(profiling.step_events(prof)) == 2
    totals = profiling.label_totals(prof, ["phase_a", "phase_b", "absent"])
    assert totals["phase_a"] > 0 and totals["phase_b"] > 0 and totals["absent"] == 0.0
    df = profiling.events_frame(prof)
    assert int(df.set_index("name").loc["phase_a", "calls"]) == 2


def test_bad_schedule_rejected():
    with pytest.raises(ValueError):
        profiling.profile_steps(_step, active=0)
    with pytest.raises(ValueError):
        profiling.profile_steps(_step, wait=-1)


def test_fresh_trace_dirs_and_exports(tmp_path):
    d1 = profiling.fresh_trace_dir("x", root=tmp_path)
    d2 = profiling.fresh_trace_dir("x", root=tmp_path)
    assert d1 != d2 and d1.is_dir() and not any(d1.iterdir())
    prof = profiling.profile_steps(_step, wait=0, warmup=1, active=1, trace_dir=d1)
    files = profiling.trace_files(d1)
    assert len(files) == 1
    doc = trace.load_trace(files[0])
    assert any(e.get("name") == "phase_a" for e in doc["traceEvents"])
    with pytest.raises(ValueError, match="already written"):
        profiling.export_chrome_trace(prof, tmp_path / "t" / "again.json")
    plain = profiling.profile_steps(_step, wait=0, warmup=0, active=1)
    out = profiling.export_chrome_trace(plain, tmp_path / "t" / "chrome.json")
    assert json.loads(out.read_text())["traceEvents"]


class _FakeProf:
    """A profile as torch builds it with CUDA activity, from hand-made events (no GPU needed)."""

    def __init__(self, events):
        from torch.autograd.profiler_util import EventList

        self._events = EventList(events, use_device="cuda")
        self._events._build_tree()
        self.activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]

    def events(self):
        return self._events

    def key_averages(self, group_by_input_shape=False):
        return self._events.key_averages(group_by_input_shape)


def _cuda_like_profile():
    """Two labelled steps; each label also has its GPU-timeline copy (``gpu_user_annotation``), and the
    matmul's kernel is both attached to ``aten::mm`` and a device event of its own, as Kineto reports them."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    evs, i = [], 0

    def ev(name, t0, t1, device=False, annotation=False, thread=1):
        nonlocal i
        i += 1
        e = FunctionEvent(id=i, name=name, thread=thread if not device else 7, start_us=t0, end_us=t1,
                          use_device="cuda", device_type=DeviceType.CUDA if device else DeviceType.CPU,
                          is_user_annotation=annotation, stack=[], input_shapes=[])
        evs.append(e)
        return e

    for s in (0, 1000):
        ev(f"ProfilerStep#{s // 1000 + 1}", s, s + 500, annotation=True)
        ev("forward", s + 10, s + 100, annotation=True)
        mm = ev("aten::mm", s + 20, s + 40)
        mm.append_kernel("gemm_kernel", 0, 300)
        ev("ProfilerStep#%d" % (s // 1000 + 1), s + 30, s + 900, device=True, annotation=True)
        ev("forward", s + 30, s + 400, device=True, annotation=True)
        ev("gemm_kernel", s + 50, s + 350, device=True)
    return _FakeProf(evs)


def test_cuda_label_copies_are_left_out():
    prof = _cuda_like_profile()
    assert len([e for e in prof.events() if e.name.startswith("ProfilerStep")]) == 4  # host + device copies
    assert len(profiling.step_events(prof)) == 2
    assert [e.cpu_time_total / 1000.0 for e in profiling.step_events(prof)] == [0.5, 0.5]
    df = profiling.events_frame(prof)
    assert not df["name"].duplicated().any()
    fwd = df.set_index("name").loc["forward"]
    assert int(fwd["calls"]) == 2 and fwd["cpu_total_ms"] == pytest.approx(0.18)
    assert bool(df.set_index("name").loc["gemm_kernel", "on_device"]) is True
    assert profiling.label_totals(prof, ["forward"])["forward"] == pytest.approx(0.18)
    assert profiling.sort_keys(prof.activities)["self"] == "self_device_time_total"


def _gpu_phase_profile(step_name="ProfilerStep*"):
    """Two recorded steps as Kineto reports them on a GPU run without synchronisation: the CPU queues each
    phase in a few microseconds and races ahead; the GPU copies of the labels (``gpu_user_annotation``)
    span the kernels, which run much longer. Step 1's forward ran on two overlapping streams.
    Newer releases name the steps ``ProfilerStep*`` (``trace_name`` keeps ``ProfilerStep#N``)."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    evs, i = [], 0

    def ev(name, t0, t1, device=False, annotation=True, trace_name=None, stream=7):
        nonlocal i
        i += 1
        evs.append(FunctionEvent(id=i, name=name, trace_name=trace_name, thread=stream if device else 1,
                                 start_us=t0, end_us=t1, use_device="cuda",
                                 device_type=DeviceType.CUDA if device else DeviceType.CPU,
                                 is_user_annotation=annotation, stack=[], input_shapes=[]))

    # host (CPU) side: step k queues forward 10 us, backward 20 us, optimizer 5 us
    for k, s in enumerate((0, 100), start=1):
        ev(step_name, s, s + 40, trace_name=f"ProfilerStep#{k}")
        ev("forward", s + 1, s + 11)
        ev("aten::conv2d", s + 2, s + 10, annotation=False)
        ev("backward", s + 12, s + 32)
        ev("optimizer_step", s + 33, s + 38)
    # device side: the GPU is still busy with step 1 when the CPU has queued step 2
    for k, g in enumerate((20, 1020), start=1):
        ev(step_name, g, g + 1000, device=True, trace_name=f"ProfilerStep#{k}")
        ev("forward", g, g + 300, device=True)
        ev("backward", g + 300, g + 900, device=True)
        ev("optimizer_step", g + 900, g + 1000, device=True)
        ev("conv_kernel", g, g + 250, device=True, annotation=False)
    ev("forward", 120, 320, device=True, stream=8)  # step 1's forward also on stream 8, inside stream 7's range
    return _FakeProf(evs)


def test_phase_times_report_gpu_time_beside_cpu_time():
    """On a GPU the chart and the coverage check need each phase's GPU time: today's ``label_totals``
    (the notebook's only source) gives the CPU's queueing time, 30x too small here. (Events without
    ``linked_correlation_id``, as older releases report them: the labels' GPU copies are used.)"""
    prof = _gpu_phase_profile()
    pt = profiling.phase_times(prof, ["forward", "backward", "optimizer_step", "ProfilerStep*"])
    assert pt.attrs["gpu_source"] == "annotations"
    assert pt.loc["forward", "calls"] == 2
    assert pt.loc["forward", "cpu_ms"] == pytest.approx(0.020)
    assert pt.loc["forward", "gpu_ms"] == pytest.approx(0.600)  # stream 8's copy overlaps: counted once
    assert pt.loc["backward", "gpu_ms_per_call"] == pytest.approx(0.600)
    assert pt.loc["optimizer_step", "cpu_ms_per_call"] == pytest.approx(0.005)
    assert pt.loc["ProfilerStep*", "gpu_ms"] == pytest.approx(2.0)
    phases = pt.loc[["forward", "backward", "optimizer_step"]]
    assert phases["gpu_ms"].sum() / pt.loc["ProfilerStep*", "gpu_ms"] == pytest.approx(1.0)
    assert profiling.label_totals(prof, ["forward"])["forward"] == pytest.approx(pt.loc["forward", "cpu_ms"])


def test_step_times_pair_each_step_with_its_gpu_range():
    for name in ("ProfilerStep*", None):
        prof = _gpu_phase_profile(step_name=name) if name else _gpu_phase_profile_hash()
        st = profiling.step_times(prof)
        assert list(st["step"]) == ["ProfilerStep#1", "ProfilerStep#2"]
        assert list(st["cpu_ms"]) == pytest.approx([0.04, 0.04])
        assert list(st["gpu_ms"]) == pytest.approx([1.0, 1.0])


def _gpu_phase_profile_hash():
    """The same profile as older releases name it (``ProfilerStep#N`` in ``name``, no ``trace_name``)."""
    prof = _gpu_phase_profile()
    for e in prof.events():
        if e.name.startswith("ProfilerStep"):
            e.name, e.trace_name = e.trace_name, None
    return prof


def test_phase_times_on_a_cpu_profile_have_no_gpu_time():
    prof = profiling.profile_steps(_step, wait=0, warmup=1, active=2)
    pt = profiling.phase_times(prof, ["phase_a", "phase_b", "ProfilerStep*", "absent"])
    assert pt.loc["phase_a", "calls"] == 2 and pt.loc["absent", "calls"] == 0
    assert pt["gpu_ms"].isna().all()
    assert pt.loc["phase_a", "cpu_ms"] == pytest.approx(profiling.label_totals(prof, ["phase_a"])["phase_a"], rel=1e-6)
    assert pt.loc["phase_a", "cpu_ms"] + pt.loc["phase_b", "cpu_ms"] <= pt.loc["ProfilerStep*", "cpu_ms"]
    st = profiling.step_times(prof)
    assert len(st) == 2 and st["gpu_ms"].isna().all()
    assert st["cpu_ms"].sum() == pytest.approx(pt.loc["ProfilerStep*", "cpu_ms"])


def test_sort_keys_are_valid_table_orders():
    prof = profiling.profile_steps(_step, wait=0, warmup=1, active=1)
    keys = profiling.sort_keys([ProfilerActivity.CPU])
    assert keys == {"self": "self_cpu_time_total", "total": "cpu_time_total", "per call": "cpu_time"}
    assert profiling.sort_keys([ProfilerActivity.CPU, ProfilerActivity.CUDA])["per call"] == "device_time"
    avgs = profiling.host_averages(prof)
    for key in keys.values():
        rows = table_rows(avgs.table(sort_by=key, row_limit=3))
        values = [getattr(next(e for e in avgs if e.key.startswith(r.removesuffix("..."))), key) for r in rows]
        assert values == sorted(values, reverse=True)


def _gpu_backward_thread_profile(links=("runtime", "linked")):
    """Two recorded steps as a real GPU run reports them. Each kernel shares its correlation id with the
    runtime call that launched it (``cudaLaunchKernel``, on the launching thread) and, in recent releases,
    names the CPU op that launched it (``linked_correlation_id``). The backward's convolution runs on the
    autograd engine's thread (2), and Kineto's GPU copies of ``backward`` and ``ProfilerStep#N`` only
    cover the work launched from the main thread (pytorch/kineto#1022): 10 us of the backward's 600.
    ``links`` says which of the two links the profile has."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    evs = []
    ids = iter(range(1, 10_000))

    def ev(name, t0, t1, device=False, annotation=False, thread=1, linked=0, trace_name=None, id=None):
        i = id if id is not None else next(ids)
        evs.append(FunctionEvent(id=i, name=name, trace_name=trace_name, thread=7 if device else thread,
                                 start_us=t0, end_us=t1, use_device="cuda", linked_correlation_id=linked,
                                 device_type=DeviceType.CUDA if device else DeviceType.CPU,
                                 is_user_annotation=annotation, stack=[], input_shapes=[]))
        return i

    cupti = iter(range(1, 100))  # CUPTI's correlation ids: a counter of their own, overlapping the ops' ids

    def launch(op, t, thread, kernel, k0, k1):
        c = next(cupti)
        if "runtime" in links:
            ev("cudaLaunchKernel", t, t + 1, thread=thread, linked=op, id=c)
        ev(kernel, k0, k1, device=True, linked=op if "linked" in links else 0, id=c)

    for k, (s, g) in enumerate(((0, 20), (100, 1020)), start=1):
        ev("ProfilerStep*", s, s + 40, annotation=True, trace_name=f"ProfilerStep#{k}")
        ev("forward", s + 1, s + 11, annotation=True)
        conv = ev("aten::conv2d", s + 2, s + 10)
        ev("backward", s + 12, s + 32, annotation=True)
        ones = ev("aten::ones_like", s + 13, s + 14)
        conv_bw = ev("aten::convolution_backward", s + 15, s + 30, thread=2)  # autograd engine's thread
        ev("optimizer_step", s + 33, s + 38, annotation=True)
        sgd = ev("aten::_foreach_add_", s + 34, s + 37)
        launch(conv, s + 3, 1, "fwd_kernel", g, g + 300)
        launch(ones, s + 13, 1, "fill_kernel", g + 300, g + 310)
        launch(conv_bw, s + 16, 2, "bwd_kernel", g + 350, g + 900)  # 40 us idle before it
        launch(sgd, s + 35, 1, "sgd_kernel", g + 900, g + 1000)
        # Kineto's device copies of the labels: main-thread work only
        ev("ProfilerStep*", g, g + 310, device=True, annotation=True, trace_name=f"ProfilerStep#{k}")
        ev("forward", g, g + 300, device=True, annotation=True)
        ev("backward", g + 300, g + 310, device=True, annotation=True)
        ev("optimizer_step", g + 900, g + 1000, device=True, annotation=True)
    return _FakeProf(evs)


@pytest.mark.parametrize("links", [("runtime", "linked"), ("runtime",), ("linked",)])
def test_backward_gpu_time_includes_the_autograd_threads_kernels(links):
    """Reading Kineto's GPU copies of the labels would give the backward 0.01 ms per step instead of 0.6.
    Either link (runtime call, or ``linked_correlation_id`` of recent releases) is enough."""
    prof = _gpu_backward_thread_profile(links)
    assert len(profiling.device_launches(prof)) == 8
    pt = profiling.phase_times(prof, ["forward", "backward", "optimizer_step", "ProfilerStep*"])
    assert pt.attrs["gpu_source"] == "launches"
    assert pt.loc["backward", "gpu_ms_per_call"] == pytest.approx(0.600)
    assert pt.loc["backward", "gpu_busy_ms"] == pytest.approx(2 * 0.560)   # the 40 us gap is idle
    assert pt.loc["backward", "cpu_ms_per_call"] == pytest.approx(0.020)
    assert pt.loc["forward", "gpu_ms"] == pytest.approx(0.600)
    assert pt.loc["optimizer_step", "gpu_ms"] == pytest.approx(0.200)
    st = profiling.step_times(prof)
    assert list(st["step"]) == ["ProfilerStep#1", "ProfilerStep#2"]
    assert list(st["gpu_ms"]) == pytest.approx([1.0, 1.0])
    assert list(st["gpu_busy_ms"]) == pytest.approx([0.96, 0.96])
    phases = pt.loc[["forward", "backward", "optimizer_step"], "gpu_ms"].sum()
    assert phases / st["gpu_ms"].sum() == pytest.approx(1.0)


def test_without_launch_links_the_label_copies_are_used():
    prof = _gpu_backward_thread_profile(links=())
    assert profiling.device_launches(prof) == []
    pt = profiling.phase_times(prof, ["backward"])
    assert pt.attrs["gpu_source"] == "annotations"
    assert pt.loc["backward", "gpu_ms"] == pytest.approx(0.020) and pt["gpu_busy_ms"].isna().all()


class _TraceProf:
    """A recorded trace's events as ``prof.events()`` holds them (device work, runtime calls, labels)."""

    CATS = {"kernel": True, "gpu_memcpy": True, "gpu_memset": True, "cuda_runtime": False,
            "user_annotation": False, "gpu_user_annotation": True}

    def __init__(self, doc):
        from torch.autograd import DeviceType
        from torch.autograd.profiler_util import FunctionEvent

        self._events = []
        for i, e in enumerate(doc["traceEvents"]):
            cat = e.get("cat")
            if e.get("ph") != "X" or cat not in self.CATS:
                continue
            label = cat.endswith("user_annotation")
            corr = (e.get("args") or {}).get("correlation")
            t0 = float(e["ts"])
            self._events.append(FunctionEvent(
                id=10**9 + i if label else corr, name=e["name"], thread=e.get("tid", 0), start_us=t0,
                end_us=t0 + float(e.get("dur", 0)), use_device="cuda", is_user_annotation=label,
                device_type=DeviceType.CUDA if self.CATS[cat] else DeviceType.CPU, stack=[], input_shapes=[]))

    def events(self):
        return self._events


def test_real_gpu_trace_backward_kernels_come_from_another_thread():
    """An A100 training trace (Holistic Trace Analysis' test data): most of the backward's kernels are
    launched from a second thread (the autograd engine's). Attributed from the main thread only -- which
    is what Kineto's GPU copy of a label covers -- the backward would get 1% of its GPU time."""
    from tests.shared_data import gpu_trace

    doc = trace.load_trace(gpu_trace("hta_control.json.gz"))   # others' data: ../shared/gpu-traces/
    prof = _TraceProf(doc)
    launches = profiling.device_launches(prof)
    n_device = sum(1 for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert len(launches) == n_device                                 # every kernel found its launch
    assert all(launch <= start for launch, start, _ in launches)     # and was launched before it started
    phases = ["## forward ##", "## backward ##", "## optimizer ##"]
    pt = profiling.phase_times(prof, [*phases, "ProfilerStep*"])
    assert pt.attrs["gpu_source"] == "launches"
    assert (pt.loc[phases, "calls"] == 6).all()
    main_tid = next(e["tid"] for e in doc["traceEvents"] if e.get("name") == "## backward ##")
    main_only = _TraceProf({"traceEvents": [e for e in doc["traceEvents"]
                                            if not (e.get("cat") == "cuda_runtime" and e.get("tid") != main_tid)]})
    pm = profiling.phase_times(main_only, phases)
    assert pm.loc["## forward ##", "gpu_ms"] == pytest.approx(pt.loc["## forward ##", "gpu_ms"])
    assert pm.loc["## backward ##", "gpu_ms"] < 0.05 * pt.loc["## backward ##", "gpu_ms"]
    # the GPU ran the backward far longer than it ran the forward, and no phase's range overlaps another's
    assert pt.loc["## backward ##", "gpu_busy_ms"] > pt.loc["## forward ##", "gpu_busy_ms"]
    assert pt.loc[phases, "gpu_ms"].sum() <= pt.loc["ProfilerStep*", "gpu_ms"] * 1.001
    st = profiling.step_times(prof)
    assert len(st) == 6 and (st["gpu_busy_ms"] <= st["gpu_ms"]).all()
    assert st["gpu_ms"].sum() == pytest.approx(pt.loc["ProfilerStep*", "gpu_ms"], rel=1e-6)


def test_loop_sync_is_marked_in_the_trace(tmp_path, monkeypatch):
    """On a GPU ``profile_steps(sync=True)`` adds a device sync to every step; its trace says so (top-level key),
    so that a reader of the trace alone (the doctor) can leave those syncs out. Simulated: CUDA device, no-op sync."""
    synced = []
    monkeypatch.setattr(profiling, "is_cuda", lambda device: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    d = profiling.fresh_trace_dir("sync", root=tmp_path)
    profiling.profile_steps(_step, wait=0, warmup=1, active=1, device="cpu", trace_dir=d)
    assert len(synced) == 2
    doc = trace.load_trace(profiling.trace_files(d)[0])
    assert str(doc.get(LOOP_SYNC_METADATA)).strip('"') == "1"
    d2 = profiling.fresh_trace_dir("nosync", root=tmp_path)
    profiling.profile_steps(_step, wait=0, warmup=1, active=1, device="cpu", trace_dir=d2, sync=False)
    assert LOOP_SYNC_METADATA not in trace.load_trace(profiling.trace_files(d2)[0])
