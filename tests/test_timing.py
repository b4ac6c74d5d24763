import time

import pytest

from helpers import timing


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
    assert timing.peak_memory_mb("cpu") is None


def test_interleaved_times_warm_up_then_rotate():
    calls = []
    t = timing.interleaved_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=2, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a"]  # warm-up a b, then a b / b a
    assert all(len(v.times_ms) == 2 for v in t.values())
