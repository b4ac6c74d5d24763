import json

import pytest
import torch
from torch.profiler import ProfilerActivity, record_function

from helpers import profiling, trace


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
        assert profiling.sort_key(acts) == "self_cpu_time_total"
    assert profiling.sort_key([ProfilerActivity.CPU, ProfilerActivity.CUDA]) == "self_device_time_total"


def test_cuda_activity_for_a_cuda_device_however_named(monkeypatch):
    monkeypatch.setattr(torch.profiler, "supported_activities", lambda: {ProfilerActivity.CPU, ProfilerActivity.CUDA})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for dev in ("cuda", "cuda:0", torch.device("cuda", 0)):
        assert ProfilerActivity.CUDA in profiling.activities(dev)
    assert ProfilerActivity.CUDA not in profiling.activities(torch.device("cpu"))


def test_schedule_records_only_active_steps_and_labels():
    prof = profiling.profile_steps(_step, wait=1, warmup=1, active=2)
    assert len(profiling.step_events_ms(prof)) == 2
    totals = profiling.label_totals(prof, ["phase_a", "phase_b", "absent"])
    assert totals["phase_a"] > 0 and totals["phase_b"] > 0 and totals["absent"] == 0.0
    df = profiling.events_frame(prof)
    assert int(df.set_index("name").loc["phase_a", "calls"]) == 2
    text = profiling.table(prof, row_limit=5)
    rows = profiling.table_rows(text)
    assert 1 <= len(rows) <= 5
    assert all(r in text for r in rows)


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
    assert profiling.step_events_ms(prof) == [0.5, 0.5]
    df = profiling.events_frame(prof)
    assert not df["name"].duplicated().any()
    fwd = df.set_index("name").loc["forward"]
    assert int(fwd["calls"]) == 2 and fwd["cpu_total_ms"] == pytest.approx(0.18)
    assert bool(df.set_index("name").loc["gemm_kernel", "on_device"]) is True
    assert profiling.label_totals(prof, ["forward"])["forward"] == pytest.approx(0.18)
    text = profiling.table(prof, row_limit=5)
    assert profiling.sort_key(prof.activities) == "self_device_time_total"
    assert profiling.table_rows(text)[0] in ("aten::mm", "gemm_kernel")
    assert "ProfilerStep" not in profiling.table_rows(text)[0]
