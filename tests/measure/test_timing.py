import itertools
import time

import pytest

from helpers.measure import device, timing


def test_percentile_interpolates():
    assert timing.percentile([1, 2, 3, 4], 50) == 2.5
    assert timing.percentile([5], 25) == 5
    with pytest.raises(ValueError):
        timing.percentile([], 50)


def test_time_steps_counts_and_first_step_apart():
    calls = []

    def fn():
        calls.append(1)
        time.sleep(0.02 if len(calls) == 1 else 0.001)

    t = timing.time_steps(fn, steps=5, warmup=2)
    assert len(calls) == 7
    assert len(t.times_ms) == 5
    # the slow first call is reported apart and kept out of the median
    assert t.first_ms > max(t.times_ms)
    m = t.metrics(batch_size=10)
    assert {"step_ms_median", "step_ms_p25", "step_ms_p75", "samples_per_s", "first_step_ms"} <= set(m)
    assert m["step_ms_p25"] <= m["step_ms_median"] <= m["step_ms_p75"]


def test_time_steps_rejects_bad_counts():
    with pytest.raises(ValueError):
        timing.time_steps(lambda: None, steps=0)
    with pytest.raises(ValueError):
        timing.time_steps(lambda: None, warmup=-1)


def test_peak_memory_is_none_on_cpu():
    assert device.peak_memory_mb("cpu") is None


def test_interleaved_times_warm_up_then_rotate():
    calls = []
    t = timing.interleaved_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=2, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a"]  # warm-up a b, then a b / b a
    assert all(len(v.times_ms) == 2 for v in t.values())


def test_interleaved_times_read_cpu_time_only_where_asked_on_one_cpu_thread(monkeypatch):
    for name, tick in (("process_time", 1.0), ("perf_counter", 2.0)):   # each clock moves on 1 or 2 s a reading
        monkeypatch.setattr(time, name, itertools.count(0.0, tick).__next__)
    monkeypatch.setattr(timing, "synchronize", lambda device=None: None)   # "cuda" below without a GPU
    steps = {"a": lambda: None, "b": lambda: None}
    with timing.torch_threads(1):
        assert timing.interleaved_times(steps, 2, cpu_time=True)["a"].times_ms == [1000.0] * 2   # the CPU's time
        assert timing.interleaved_times(steps, 2)["a"].times_ms == [2000.0] * 2   # wall time unless asked
        assert timing.interleaved_times(steps, 2, "cuda", cpu_time=True)["b"].times_ms == [2000.0] * 2   # a GPU's work
    with timing.torch_threads(2):   # several threads' CPU time adds up: wall time
        assert timing.interleaved_times(steps, 2, cpu_time=True)["b"].times_ms == [2000.0] * 2


def test_step_times_mean_and_whole_window_throughput():
    t = timing.StepTimes(times_ms=[40.0, 1.0, 1.0, 1.0] * 3)   # waves: one long step, three short
    assert t.mean == 10.75 and t.median == 1.0
    m = t.metrics(batch_size=8)
    assert m["step_ms_mean"] == 10.75 and m["samples_per_s"] == round(8 * 12 / 0.129, 2)  # the window, not the median


def test_rotation_starts_each_round_at_the_next_name():
    assert [n for _, n in timing.rotation("abc", 3)] == list("abcbcacab")
    with pytest.raises(ValueError):
        list(timing.rotation("ab", 0))


def test_torch_threads_sets_and_restores():
    import torch

    before = torch.get_num_threads()
    with timing.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with timing.torch_threads(None):
        assert torch.get_num_threads() == before


def test_gc_paused_turns_the_collector_off_and_back_on():
    import gc

    from helpers.measure import timing

    assert gc.isenabled()
    with timing.gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with timing.gc_paused():
            pass
        assert not gc.isenabled()   # left as it was found
    finally:
        gc.enable()


def test_gc_paused_without_a_collection_first(monkeypatch):
    import gc

    from helpers.measure import timing

    calls = []
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(a) or 0)
    with timing.gc_paused(collect=False):
        assert not gc.isenabled()
    with timing.gc_paused():
        pass
    assert gc.isenabled() and len(calls) == 1   # only the default pause collected first
