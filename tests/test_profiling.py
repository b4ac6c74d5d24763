import json

import pytest
import torch
from torch.profiler import ProfilerActivity, record_function

from helpers import profiling


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
    doc = profiling.load_trace(files[0])
    assert any(e.get("name") == "phase_a" for e in doc["traceEvents"])
    with pytest.raises(ValueError, match="already written"):
        profiling.export_chrome_trace(prof, tmp_path / "t" / "again.json")
    plain = profiling.profile_steps(_step, wait=0, warmup=0, active=1)
    out = profiling.export_chrome_trace(plain, tmp_path / "t" / "chrome.json")
    assert json.loads(out.read_text())["traceEvents"]
