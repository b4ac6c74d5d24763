"""helpers.measure.compare: equivalence before timing, then a ratio with an interval and a verdict."""
import numpy as np
import pytest
import torch

from helpers.measure.compare import NOISE_FLOOR, compare, compare_times, describe, resolved


def test_compare_exact_close_and_different():
    m = np.array([[True, False], [False, True]])
    assert compare(m, m.copy())["exact"]
    c = compare(torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([1.0, 2.0 + 2e-7], dtype=torch.float64), rtol=1e-6)
    assert not c["exact"] and c["close"] and c["max_abs_diff"] == pytest.approx(2e-7, rel=1e-3)
    c = compare({"w": torch.ones(3), "b": torch.zeros(2)}, {"w": torch.ones(3), "b": torch.tensor([0.0, 0.5])},
                atol=0.1)
    assert not c["close"] and c["max_abs_diff"] == 0.5 and c["n"] == 5
    assert compare([1.0], [1.0, 2.0])["why"].startswith("shapes differ")
    assert compare({"a": 1}, {"b": 1})["why"] and not compare({"a": 1}, {"b": 1})["close"]
    assert not compare([1.0, 2.0], [1.0, float("nan")], atol=1.0)["close"]   # a non-finite result is never close


def test_compare_percentiles_like_a_decoder_check():
    ref = torch.zeros(1000, dtype=torch.uint8)
    other = ref.clone()
    other[:5] = 30                       # 0.5% of the pixels off by 30 levels
    c = compare(ref, other)
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
    assert describe(c).startswith("compiled is faster than eager: 1.2")
    assert compare_times([5, 5], [5, 5])["verdict"] == "no difference"     # no spread: the ratio alone decides
    with pytest.raises(ValueError):
        compare_times([], [1.0])


def test_a_resolved_change_within_the_noise_floor_is_no_difference():
    rng = np.random.default_rng(1)
    base = rng.normal(10.0, 0.05, 200)
    small = compare_times(base, base / 1.02, a="a", b="b")   # 2% faster, interval far from 1
    assert small["low"] > 1 and small["verdict"] == "no difference" and small["floor"] == NOISE_FLOOR
    assert not resolved(small) and "within the noise floor of ±3.5%" in describe(small)
    assert compare_times(base, base / 1.02, floor=0.0)["verdict"] == "faster"
    assert compare_times(base, base / 1.05)["verdict"] == "faster"        # beyond the floor
    assert compare_times(base / 1.05, base)["verdict"] == "slower"
    with pytest.raises(ValueError, match="floor"):
        compare_times(base, base, floor=1.5)


def test_compare_times_is_reproducible():
    rng = np.random.default_rng(1)
    a, b = rng.normal(10, 2, 15), rng.normal(9, 2, 15)
    assert compare_times(a, b) == compare_times(a, b)
