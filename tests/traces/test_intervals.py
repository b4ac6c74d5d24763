"""perf_doctor.intervals: the interval arithmetic every trace reader uses."""
from perf_doctor import intervals as iv


def test_interval_arithmetic():
    a = iv.merge([(0, 10), (5, 12), (20, 30)])
    assert a == [(0, 12), (20, 30)]
    b = [(8, 22)]
    assert iv.intersect(a, b) == [(8, 12), (20, 22)]
    assert iv.subtract(a, b) == [(0, 8), (22, 30)]
    assert iv.clip(a, 10, 25) == [(10, 12), (20, 25)]
    assert iv.length(a) == 22


def test_covered_and_contains():
    a = iv.merge([(0, 10), (20, 30)])
    assert iv.covered(a, 5, 25) == 10 and iv.covered(a, 12, 18) == 0 and iv.covered(a, 5, 5) == 0
    assert iv.contains(a, 10) and iv.contains(a, 20) and not iv.contains(a, 15) and not iv.contains([], 1)
