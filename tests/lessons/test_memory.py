"""Harness of notebook 07 (helpers.lessons.memory): the category sums, the profiler's peak, the bisection, the
snapshot reader's refusals, and the fake-tensor prediction against the profiler on a small real step."""
import pickle

import pytest
import torch
from torch import nn

from helpers.lessons import memory as mem


def _step(width=64, hidden=512, batch=64):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width), nn.GELU(), nn.Linear(width, 4))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, foreach=False)

    def step(mark=lambda p: None):
        x, y = torch.randn(batch, width), torch.randint(0, 4, (batch,))
        nn.functional.cross_entropy(net(x), y).backward()
        mark("backward")
        opt.step()
        opt.zero_grad(set_to_none=True)
    step.net, step.opt = net, opt
    return step


def _tracked_peak(step):
    from torch.distributed._tools.mem_tracker import MemTracker

    step()
    mt = MemTracker()
    mt.track_external(step.net, step.opt)
    with mt:
        step()
    return mem.by_category(mt.get_tracker_snapshot("peak")), mt


def test_by_category_sums_devices_and_names_categories():
    snap = {torch.device("cpu"): {"_MemRefType.PARAM": 2 * mem.MB, "_MemRefType.ACT": mem.MB, "Total": 3 * mem.MB},
            torch.device("meta"): {"_MemRefType.ACT": mem.MB, "Total": mem.MB}}
    out = mem.by_category(snap)
    assert out["PARAM"] == 2 and out["ACT"] == 2 and out["total"] == 4 and out["OPT"] == 0


def test_profiler_peak_reads_a_known_allocation():
    def step():
        a = torch.empty(4 * mem.MB, dtype=torch.uint8)
        b = torch.empty(2 * mem.MB, dtype=torch.uint8)
        del a, b
    assert mem.profiler_peak_mb(step) == pytest.approx(6.0, abs=0.1)


def test_fake_prediction_matches_the_profiler_within_10pct():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        predicted, _ = _tracked_peak(_step())
    real = _step()
    real()
    measured = mem.live_mb(real.net, real.opt) + mem.profiler_peak_mb(real)
    assert predicted["total"] > mem.live_mb(real.net, real.opt)  # activations counted, not only the state
    assert abs(mem.error_pct(predicted["total"], measured)) <= 10


def test_module_peaks_and_live_mb():
    step = _step()
    peak, mt = _tracked_peak(step)
    rows = mem.module_peaks(mt)
    assert {r["module"] for r in rows} >= {"Sequential", "Sequential.0"}
    assert all(r["peak_fw_mb"] is None or r["peak_fw_mb"] <= peak["total"] + 1e-6 for r in rows)
    params = sum(p.numel() * 4 for p in step.net.parameters()) / mem.MB
    assert mem.live_mb(step.net, step.opt) == pytest.approx(3 * params, rel=0.01)  # params + Adam's two states


def test_largest_batch_bisects_and_refuses_bad_bounds():
    calls = []
    assert mem.largest_batch(lambda b: calls.append(b) or b <= 700, 1, 4096) == 700
    assert len(calls) <= 14
    assert mem.largest_batch(lambda b: False, 8, 64) == 0
    with pytest.raises(mem.MemoryInputError):
        mem.largest_batch(lambda b: True, 0, 8)
    with pytest.raises(mem.MemoryInputError, match="within"):
        mem.largest_batch(lambda b: True, 8, 64, within=1.5)


def test_largest_batch_to_within_a_share_takes_fewer_steps():
    """07 at full scale searches [512, 524288] for a limit near 190k samples (an H100): each probe is a whole step."""
    for limit in (150_000, 190_000, 330_000):
        exact, close = [], []
        assert mem.largest_batch(lambda b: exact.append(b) or b <= limit, 512, 524_288) == limit
        found = mem.largest_batch(lambda b: close.append(b) or b <= limit, 512, 524_288, within=1 / 32)
        assert limit * (1 - 1 / 32) <= found <= limit and len(close) <= 8 < len(exact) == 20


def test_read_snapshot_refuses_missing_damaged_and_foreign_files_in_one_line(tmp_path):
    bad = {"missing": tmp_path / "none.pickle", "damaged": tmp_path / "d.pickle", "foreign": tmp_path / "f.pickle"}
    bad["damaged"].write_bytes(b"\x80\x04garbage")
    bad["foreign"].write_bytes(pickle.dumps([1, 2, 3]))
    for path in bad.values():
        with pytest.raises(mem.MemoryInputError) as exc:
            mem.read_snapshot(path)
        assert "\n" not in str(exc.value) and path.name in str(exc.value)


def test_snapshot_summary_counts_reserved_and_allocated(tmp_path):
    snap = {"segments": [{"total_size": 4 * mem.MB, "blocks": [{"size": mem.MB, "state": "active_allocated"},
                                                               {"size": 3 * mem.MB, "state": "inactive"}]}]}
    (tmp_path / "s.pickle").write_bytes(pickle.dumps(snap))
    out = mem.snapshot_summary(mem.read_snapshot(tmp_path / "s.pickle"))
    assert out == {"segments": 1, "reserved_mb": 4.0, "allocated_mb": 1.0, "unused_mb": 3.0}


def test_check_fits_refuses_before_allocating_and_advises_only_the_levers_left():
    mem.check_fits(10.0, 100.0, {"batch_size": 8})
    with pytest.raises(mem.MemoryInputError, match="batch 9000 needs about 1,000 MB") as exc:
        mem.check_fits(1000.0, 100.0, {"batch_size": 9000})
    assert "checkpointing" in str(exc.value) and "bf16" in str(exc.value)
    both = {"batch_size": 9000, "checkpointing": "blocks", "precision": "bf16", "in_backward": True}
    with pytest.raises(mem.MemoryInputError) as exc:
        mem.check_fits(1000.0, 100.0, both)
    assert str(exc.value).endswith("choose a smaller batch")  # not the levers it already has
    assert "whole-block" in " ".join(mem.levers_left({"checkpointing": "selective"}))
    with pytest.raises(mem.MemoryInputError):
        mem.error_pct(1.0, 0.0)


def test_a_cpus_capacity_counts_the_page_cache_the_kernel_can_drop(monkeypatch):
    """The panel once refused settings that fit: MemFree (9,086 MB) on a machine with 21.7 GB available."""
    import os
    from types import SimpleNamespace

    import psutil

    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=21_700 * mem.MB))
    monkeypatch.setattr(os, "sysconf", lambda name: 9_086 if name == "SC_AVPHYS_PAGES" else mem.MB)
    assert mem.capacity_mb(torch.device("cpu")) == pytest.approx(21_700)


def test_the_optimizer_step_in_backward_frees_each_gradient_mid_backward():
    """The tutorial's recipe (a hook per parameter, register_post_accumulate_grad_hook): after backward no gradient
    is left, the parameters moved, and live memory is parameters and Adam's state only."""
    step = _step()
    opts = {p: torch.optim.Adam([p], lr=1e-3, foreach=False) for p in step.net.parameters()}

    def optimizer_hook(param):
        opts[param].step()
        opts[param].zero_grad(set_to_none=True)

    for p in step.net.parameters():
        p.register_post_accumulate_grad_hook(optimizer_hook)
    before = [p.detach().clone() for p in step.net.parameters()]
    x, y = torch.randn(64, 64), torch.randint(0, 4, (64,))
    nn.functional.cross_entropy(step.net(x), y).backward()
    assert all(p.grad is None for p in step.net.parameters())
    assert all(not torch.equal(a, p) for a, p in zip(before, step.net.parameters()))
    params = sum(p.numel() * 4 for p in step.net.parameters()) / mem.MB
    assert mem.live_mb(step.net, *opts.values()) == pytest.approx(3 * params, rel=0.01)


def test_the_peak_only_tracker_keeps_memtrackers_total_peak():
    """PeakOnlyTracker skips MemTracker's per-module peaks (the notebook's Swin-B trace: 11 s against 64 s) and keeps
    the same peak snapshot, by category."""
    from torch.distributed._tools.mem_tracker import MemTracker

    peaks = []
    for tracker in (MemTracker, mem.PeakOnlyTracker):
        step = _step()
        step()
        mt = tracker()
        mt.track_external(step.net, step.opt)
        with mt:
            step()
        peaks.append(mem.by_category(mt.get_tracker_snapshot("peak")))
    assert peaks[0] == peaks[1] and peaks[0]["total"] > 0 and peaks[0]["ACT"] > 0
