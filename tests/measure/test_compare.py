"""helpers.measure.compare: equivalence before timing, then a ratio with an interval and a verdict."""
import numpy as np
import pytest
import torch

from helpers.measure.compare import (compare_times, describe, direction, equal_outputs, noise_floor, not_measured,
                                     resolved)


def test_compare_exact_close_and_different():
    m = np.array([[True, False], [False, True]])
    assert equal_outputs(m, m.copy())["exact"]
    c = equal_outputs(torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([1.0, 2.0 + 2e-7], dtype=torch.float64), rtol=1e-6)
    assert not c["exact"] and c["close"] and c["max_abs_diff"] == pytest.approx(2e-7, rel=1e-3)
    c = equal_outputs({"w": torch.ones(3), "b": torch.zeros(2)}, {"w": torch.ones(3), "b": torch.tensor([0.0, 0.5])},
                atol=0.1)
    assert not c["close"] and c["max_abs_diff"] == 0.5 and c["n"] == 5
    assert equal_outputs([1.0], [1.0, 2.0])["why"].startswith("shapes differ")
    assert equal_outputs({"a": 1}, {"b": 1})["why"] and not equal_outputs({"a": 1}, {"b": 1})["close"]
    assert not equal_outputs([1.0, 2.0], [1.0, float("nan")], atol=1.0)["close"]   # a non-finite result is never close


def test_compare_percentiles_like_a_decoder_check():
    ref = torch.zeros(1000, dtype=torch.uint8)
    other = ref.clone()
    other[:5] = 30                       # 0.5% of the pixels off by 30 levels
    c = equal_outputs(ref, other)
    assert c["mean_abs_diff"] == pytest.approx(0.15) and c["p99_abs_diff"] == 0 and c["max_abs_diff"] == 30


def test_compare_times_verdicts():
    rng = np.random.default_rng(0)
    slow, fast = rng.normal(10, 0.5, 30), rng.normal(8, 0.5, 30)
    c = compare_times(slow, fast, a="eager", b="compiled")
    assert c["verdict"] == "faster" and c["low"] > 1 and c["low"] <= c["ratio"] <= c["high"] and resolved(c)
    assert compare_times(fast, slow)["verdict"] == "slower"
    same = compare_times(rng.normal(10, 1, 20), rng.normal(10, 1, 20))
    assert same["verdict"] == "no difference" and same["low"] < 1 < same["high"] and not resolved(same)
    assert set(c) >= {"a", "b", "metric", "ratio", "low", "high", "verdict"}
    assert describe(c).startswith("compiled takes 0.8") and describe(c).endswith(": faster")
    assert c["samples"]["a"][0] == round(float(slow[0]), 4) and len(c["samples"]["b"]) == 30
    assert compare_times([5, 5], [5, 5])["verdict"] == "no difference"     # no spread: the ratio alone decides
    with pytest.raises(ValueError):
        compare_times([], [1.0])


def test_the_noise_floor_is_measured_on_the_samples_and_small_changes_are_named():
    rng = np.random.default_rng(1)
    base = rng.normal(10.0, 0.05, 200)
    floor, frm = noise_floor(base)
    assert 0 < floor < 0.01 and "A/A" in frm
    small = compare_times(base, base / 1.02, a="a", b="b")   # 2% faster, interval far from 1, a floor well under 1%
    assert small["low"] > 1 and small["verdict"] == "faster, small" and small["floor"] < 0.01
    assert resolved(small) and direction(small) == "faster" and "small" in describe(small)
    assert small["floor_from"].startswith("A/A")
    assert compare_times(base, base / 1.05)["verdict"] == "faster"        # beyond the floor and not small
    assert compare_times(base / 1.05, base)["verdict"] == "slower"
    # a floor given: a 2% change within a 3.5% floor is no difference
    assert compare_times(base, base / 1.02, floor=0.035)["verdict"] == "no difference"
    # drifting samples: the even and odd rounds differ by ~10%, so a 5% change is within the measured floor
    drift = np.tile([10.0, 11.0], 10)
    assert compare_times(drift, drift / 1.05)["verdict"] == "no difference"
    assert noise_floor([1.0, 2.0])[0] is None            # too few samples to split
    few = compare_times([76.0, 76.3, 76.2], [78.7, 78.9, 78.8])   # 3 steps a side: no floor to measure
    assert few["floor"] == 0.035 and few["floor_from"].startswith("assumed") and few["verdict"] == "no difference"
    with pytest.raises(ValueError, match="floor"):
        compare_times(base, base, floor=-0.5)
    with pytest.raises(ValueError, match="role"):
        compare_times(base, base, role="winner")


def test_describe_words_each_role():
    rng = np.random.default_rng(2)
    truth, naive = rng.normal(100, 1, 10), rng.normal(0.1, 0.001, 10)
    t = compare_times(truth, naive, a="synchronised", b="naive", role="timer")
    assert describe(t).startswith("naive reads ") and " low against synchronised" in describe(t)
    plant = compare_times(rng.normal(1, 0.01, 10), rng.normal(43, 0.5, 10), a="nothing planted", b="planted input")
    assert describe(plant).startswith("planted input takes 43") and "the time of nothing planted" in describe(plant)
    same = compare_times(rng.normal(10, 1, 20), rng.normal(10, 1, 20), a="x", b="y")
    assert "no difference beyond this run's noise" in describe(same)
    assert not_measured("bf16 compiled") == "bf16 compiled: not measured (skipped for time)"


def test_compare_times_is_reproducible():
    rng = np.random.default_rng(1)
    a, b = rng.normal(10, 2, 15), rng.normal(9, 2, 15)
    assert compare_times(a, b) == compare_times(a, b)


def test_tables_say_how_many_times_the_baselines_time_a_variant_takes():
    from helpers.measure.compare import compare_times, takes

    c = compare_times([10.0, 10.1, 9.9, 10.0, 10.2, 9.8], [5.0, 5.1, 4.9, 5.0, 5.1, 4.9])
    t = takes(c)
    assert 0.45 < t["time_ratio"] < 0.55 and t["verdict"] == "faster"
    low, high = (float(x) for x in t["interval"].split("–"))
    assert low <= t["time_ratio"] <= high
