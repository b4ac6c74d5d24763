"""Interval arithmetic on time ranges (µs), for every trace reader: lists of ``(start, end)``; ``merge`` makes one
*merged* (sorted, disjoint, no empty intervals), as the other functions expect. Hand-written: a few sorted-list
functions on float tuples, where an interval library (portion, intervaltree) would be a dependency and an object each.
"""

from __future__ import annotations

import bisect
import math
from typing import Iterable


def merge(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, disjoint union of the intervals (empty ones dropped)."""
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def clip(ivs: list[tuple[float, float]], a: float, b: float) -> list[tuple[float, float]]:
    """The parts of merged ``ivs`` inside [a, b) (bisect: cheap on long lists)."""
    i = max(bisect.bisect_right(ivs, (a, math.inf)) - 1, 0)
    out = []
    for s, e in ivs[i:]:
        if s >= b:
            break
        if e > a:
            out.append((max(s, a), min(e, b)))
    return out


def intersect(
    x: list[tuple[float, float]], y: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Where two merged lists overlap."""
    i = j = 0
    out = []
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(
    x: list[tuple[float, float]], y: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """The parts of merged ``x`` outside merged ``y``."""
    out, j = [], 0
    for a, b in x:
        cur = a
        while j < len(y) and y[j][1] <= cur:
            j += 1
        k = j
        while k < len(y) and y[k][0] < b:
            if y[k][0] > cur:
                out.append((cur, y[k][0]))
            cur = max(cur, y[k][1])
            k += 1
        if cur < b:
            out.append((cur, b))
    return out


def length(ivs: Iterable[tuple[float, float]]) -> float:
    """Total length of (merged) intervals."""
    return sum(b - a for a, b in ivs)


def covered(ivs: list[tuple[float, float]], a: float, b: float) -> float:
    """How much of [a, b) merged ``ivs`` cover."""
    return length(clip(ivs, a, b)) if b > a else 0.0


def contains(ivs: list[tuple[float, float]], t: float) -> bool:
    """Whether time ``t`` lies in one of merged ``ivs`` (ends included)."""
    i = bisect.bisect_right(ivs, (t, math.inf)) - 1
    return i >= 0 and ivs[i][0] <= t <= ivs[i][1]
