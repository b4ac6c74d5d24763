"""The doctor reads memory (issue 34 item 5): a trace recorded with ``profile_memory=True`` gives the steps' peak
allocated per device and the operators that allocated the most, in the report and ``--json``."""
import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule

from perf_doctor import cli as doctor, load, memory
from tests.shared_data import other_trace

MB = 2**20


def write_memory_trace(path, steps=3):
    """Steps that each allocate one 8 MiB tensor (torch.ones) and free it, profiled with profile_memory=True."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                 schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(steps + 1):
            a = torch.ones(2 * MB)   # 2 Mi floats: 8 MiB
            del a
            prof.step()
    return path


def test_a_known_allocation_is_the_peak_and_its_operator_tops_the_list(tmp_path):
    rep = memory.memory_report(load.load_trace(write_memory_trace(tmp_path / "m.json")))
    cpu = next(d for d in rep["devices"] if d["device"] == "cpu")
    assert cpu["peak_mb"] == pytest.approx(8.0, rel=0.05) and cpu["absolute"] is False
    top = rep["top_ops"][0]
    assert top["op"] in ("aten::empty", "aten::ones") and top["mb_per_step"] == pytest.approx(8.0, rel=0.05)
    assert rep["steps"] == 3 and top["allocs_per_step"] == pytest.approx(1.0)


def test_the_command_line_reports_it_in_text_and_json(tmp_path, capsys):
    path = write_memory_trace(tmp_path / "m.json")
    assert doctor.main([str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["memory"]["devices"][0]["peak_mb"] == pytest.approx(8.0, rel=0.05)
    assert doctor.main([str(path)]) == 0
    text = capsys.readouterr().out.splitlines()
    line = next(i for i, t in enumerate(text) if t.startswith("Memory (profile_memory=True)"))
    assert "cpu 8.0 MB" in text[line] and text[line + 1].split()[0] in ("aten::empty", "aten::ones")
    assert max(len(t) for t in text) <= 120


def test_a_trace_without_memory_events_has_none(tmp_path):
    path = tmp_path / "plain.json"
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.ones(16).sum()
    prof.export_chrome_trace(str(path))
    assert memory.memory_report(load.load_trace(path)) is None
    rep = doctor.report(path, views=False)
    assert rep["memory"] is None and "Memory (" not in doctor.text_report(rep)


def test_an_old_schema_gpu_trace_sums_its_allocations():
    """Kineto's 2021 ResNet-50 sample: no Total Allocated, string thread ids on operators, int on memory events."""
    path = other_trace("kineto_resnet50_nw0")
    rep = memory.memory_report(load.trim(load.load_trace(path))[0])
    gpu = next(d for d in rep["devices"] if d["device"] == "cuda:0")
    assert gpu["peak_mb"] > 100 and gpu["absolute"] is False
    assert rep["top_ops"][0]["op"].startswith("aten::") and rep["top_ops"][0]["op"] != "no operator"
