"""Comparing two implementations: first are they the same (``compare``), then is one faster (``compare_times``).

``compare``: check equivalence before timing (pytorch/tutorials' ``recipes/benchmark.py``; nn-zero-to-hero's
``cmp()``), for tensors, arrays, number sequences and dicts of them. Used by every notebook that times a rewrite
against the original: 02's two dilations (exact) and its GPU decode against the CPU decode (within a few levels), 03's
loss and gradients of the two patch selections (close), 04's compiled loss curve against eager's.

``compare_times``: one way every notebook compares timings, measured in interleaved rounds: a ratio with a 95%
bootstrap interval and a verdict (faster, slower, no difference). A derived figure is printed only when the
comparison is ``resolved``.
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping

import numpy as np


def _array(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, on any device, any dtype
        x = x.detach().cpu()
        return x.numpy() if str(x.dtype) == "torch.bool" else x.double().numpy()
    return np.asarray(x)


def compare(a: Any, b: Any, *, rtol: float = 0.0, atol: float = 0.0) -> dict[str, Any]:
    """Compare ``b`` against the reference ``a`` element by element.

    ``a`` and ``b``: tensors, arrays or sequences of numbers, or dicts of them with the same keys (every entry is
    compared; the figures are over all of them). Returns ``{"exact", "close", "max_abs_diff", "max_rel_diff",
    "mean_abs_diff", "p99_abs_diff", "n", "why"}``: ``exact`` when every element is equal; ``close`` when every
    ``|a - b| <= atol + rtol * |a|`` and ``b`` is finite; the relative difference divides by ``|a|`` (by 1 where
    ``a`` is 0); ``p99_abs_diff`` is the 99th percentile of ``|a - b|``. Different keys or shapes are neither
    exact nor close, and ``why`` says so (the figures are then None).
    """
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        if not (isinstance(a, Mapping) and isinstance(b, Mapping)) or set(a) != set(b):
            return _differ("the two hold different entries")
        pairs = [(k, _array(a[k]), _array(b[k])) for k in a]
    else:
        pairs = [("", _array(a), _array(b))]
    for k, x, y in pairs:
        if x.shape != y.shape:
            where = f" of {k!r}" if k else ""
            return _differ(f"shapes{where} differ: {tuple(x.shape)} vs {tuple(y.shape)}")
    exact = all(np.array_equal(x, y) for _, x, y in pairs)
    if not pairs or sum(x.size for _, x, _ in pairs) == 0:
        return {"exact": exact, "close": exact, "max_abs_diff": 0.0, "max_rel_diff": 0.0, "mean_abs_diff": 0.0,
                "p99_abs_diff": 0.0, "n": 0, "why": ""}
    x = np.concatenate([p[1].astype(np.float64).ravel() for p in pairs])
    y = np.concatenate([p[2].astype(np.float64).ravel() for p in pairs])
    d = np.abs(x - y)
    ref = np.abs(x)
    rel = np.where(ref > 0, d / np.where(ref > 0, ref, 1.0), d)
    close = bool(np.isfinite(y).all() and (d <= atol + rtol * ref).all())
    k = max(1, int(0.99 * d.size))
    return {"exact": bool(exact), "close": close, "max_abs_diff": float(d.max()), "max_rel_diff": float(rel.max()),
            "mean_abs_diff": float(d.mean()), "p99_abs_diff": float(np.partition(d, k - 1)[k - 1]), "n": int(d.size),
            "why": ""}


def _differ(why: str) -> dict[str, Any]:
    return {"exact": False, "close": False, "max_abs_diff": None, "max_rel_diff": None, "mean_abs_diff": None,
            "p99_abs_diff": None, "n": 0, "why": why}


# --- timing two implementations: a ratio with an interval and a verdict -----------------------------------------
VERDICTS = ("faster", "slower", "no difference")


# The smallest change a verdict names: a ratio within 3.5% of 1 is "no difference" even when its interval excludes 1.
# On a shared 2-core machine comparisons whose true difference is nil (notebook 03's deterministic gather vs
# indexing on a CPU, 02's persistent_workers within one epoch) read 0.97-1.04 across smoke runs, and once an interval
# excluded 1 there (0.97 [0.95, 1.00]); the smallest real effect these notebooks show on that machine (the profiler's
# overhead in 01) reads 0.90-0.95. Differences this small are not findings here; on a GPU they rarely matter.
NOISE_FLOOR = 0.035


def compare_times(a_ms, b_ms, *, a: str = "a", b: str = "b", metric: str = "step_ms_mean",
                  confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0, statistic=None,
                  floor: float = NOISE_FLOOR) -> dict[str, Any]:
    """Is ``b`` faster than ``a``? Their samples (step times in ms, or round means, measured in interleaved rounds)
    give ``ratio`` = statistic(a) / statistic(b) (above 1: ``b`` is faster), a ``confidence`` interval
    ``[low, high]`` from ``scipy.stats.bootstrap`` (BCa, the two samples resampled independently), and a verdict:
    ``"faster"`` when the whole interval is above 1 and the ratio at least ``1 + floor``, ``"slower"`` when the whole
    interval is below 1 and the ratio at most ``1 / (1 + floor)``, else ``"no difference"`` (this machine does not
    resolve one, or it is smaller than the noise floor: ``NOISE_FLOOR``, recorded as ``floor``). ``statistic`` defaults to the mean (``metric`` names it in results.json).

    Returns the ``comparisons`` entry of results.json: ``{"a", "b", "metric", "ratio", "low", "high", "verdict"}``
    plus ``n_a``, ``n_b`` and ``confidence``. Fewer than 2 samples on a side, or samples that do not vary at all,
    give an interval equal to the ratio (which then decides alone: equal samples are "no difference").
    """
    from scipy import stats

    stat = statistic or np.mean
    x = np.asarray(list(a_ms), dtype=float)
    y = np.asarray(list(b_ms), dtype=float)
    if not len(x) or not len(y) or not np.isfinite(x).all() or not np.isfinite(y).all() or stat(y) <= 0:
        raise ValueError(f"compare_times needs finite, positive samples on both sides ({a}: {len(x)}, {b}: {len(y)})")
    ratio = float(stat(x) / stat(y))
    low = high = ratio
    if len(x) >= 2 and len(y) >= 2 and (np.ptp(x) > 0 or np.ptp(y) > 0):
        def r(u, v, axis=-1):
            return stat(u, axis=axis) / stat(v, axis=axis)

        for method in ("BCa", "percentile"):  # BCa is undefined on some degenerate resamples: fall back
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # scipy's degenerate-data warnings: the fallback handles them
                ci = stats.bootstrap((x, y), r, vectorized=True, paired=False, n_resamples=n_resamples,
                                     confidence_level=confidence, method=method,
                                     random_state=seed).confidence_interval
            if np.isfinite(ci.low) and np.isfinite(ci.high):
                low, high = float(ci.low), float(ci.high)
                break
    if not 0 <= floor < 1:
        raise ValueError(f"floor must be a fraction in [0, 1), not {floor!r}")
    verdict = ("faster" if low > 1.0 and ratio >= 1.0 + floor else
               "slower" if high < 1.0 and ratio <= 1.0 / (1.0 + floor) else "no difference")
    return {"a": a, "b": b, "metric": metric, "ratio": round(ratio, 4), "low": round(low, 4), "high": round(high, 4),
            "verdict": verdict, "n_a": int(len(x)), "n_b": int(len(y)), "confidence": confidence, "floor": floor}


def resolved(comparison: Mapping[str, Any]) -> bool:
    """Whether a comparison's interval excludes "no difference": only then may a figure derived from it (a
    break-even, ms saved, a ratio to a ceiling) be printed; otherwise say this machine does not resolve it."""
    return comparison.get("verdict") in ("faster", "slower")


def describe(comparison: Mapping[str, Any], unit: str = "×") -> str:
    """One line for a reader: ``b`` vs ``a``: the ratio, its interval and the verdict."""
    c = comparison
    pct = int(round(100 * c.get("confidence", 0.95)))
    what = {"faster": f"{c['b']} is faster than {c['a']}", "slower": f"{c['b']} is slower than {c['a']}",
            "no difference": f"no difference between {c['b']} and {c['a']} beyond this machine's noise"}[c["verdict"]]
    if c["verdict"] == "no difference" and (c["low"] > 1 or c["high"] < 1) and c.get("floor"):
        what += f" (its interval excludes 1, but the change is within the noise floor of ±{100 * c['floor']:g}%)"
    return f"{what}: {c['ratio']:.2f}{unit} ({pct}% interval {c['low']:.2f}–{c['high']:.2f})"
