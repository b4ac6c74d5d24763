"""Comparing two implementations: first are they the same (``equal_outputs``), then is one faster (``compare_times``:
a ratio with a 95% bootstrap interval and a verdict, the statistics of ``perf_doctor.stats``, re-exported here)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from perf_doctor.stats import (
    ROLES,
    SMALL,
    VERDICTS,
    compare_times,
    describe,
    direction,  # noqa: F401
    noise_floor,
    resolved,
)


def _array(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, on any device, any dtype
        x = x.detach().cpu()
        return x.numpy() if str(x.dtype) == "torch.bool" else x.double().numpy()
    return np.asarray(x)


def equal_outputs(a: Any, b: Any, *, rtol: float = 0.0, atol: float = 0.0) -> dict[str, Any]:
    """``b`` against the reference ``a`` (tensors, arrays, number sequences, or dicts of them over all entries):
    ``{exact, close, max_abs_diff, max_rel_diff, mean_abs_diff, p99_abs_diff, n, why}``. ``close``: every ``|a - b| <=
    atol + rtol * |a|``, ``b`` finite; relative to ``|a|`` (1 where 0). Other keys or shapes: neither, ``why`` says."""
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        if not (isinstance(a, Mapping) and isinstance(b, Mapping)) or set(a) != set(b):
            return _differ("the two hold different entries")
        pairs = [(k, _array(a[k]), _array(b[k])) for k in a]
    else:
        pairs = [("", _array(a), _array(b))]
    for k, x, y in pairs:
        if x.shape != y.shape:
            return _differ(
                f"shapes{f' of {k!r}' if k else ''} differ: {tuple(x.shape)} vs {tuple(y.shape)}"
            )
    exact = all(np.array_equal(x, y) for _, x, y in pairs)
    if sum(x.size for _, x, _ in pairs) == 0:
        return {"exact": exact, "close": exact, **dict.fromkeys(_DIFFS, 0.0), "n": 0, "why": ""}
    x = np.concatenate([p[1].astype(np.float64).ravel() for p in pairs])
    y = np.concatenate([p[2].astype(np.float64).ravel() for p in pairs])
    d = np.abs(x - y)
    ref = np.abs(x)
    rel = np.where(ref > 0, d / np.where(ref > 0, ref, 1.0), d)
    close = bool(np.isfinite(y).all() and (d <= atol + rtol * ref).all())
    k = max(1, int(0.99 * d.size))
    return {
        "exact": bool(exact),
        "close": close,
        "max_abs_diff": float(d.max()),
        "max_rel_diff": float(rel.max()),
        "mean_abs_diff": float(d.mean()),
        "p99_abs_diff": float(np.partition(d, k - 1)[k - 1]),
        "n": int(d.size),
        "why": "",
    }


_DIFFS = ("max_abs_diff", "max_rel_diff", "mean_abs_diff", "p99_abs_diff")


def _differ(why: str) -> dict[str, Any]:
    return {"exact": False, "close": False, **dict.fromkeys(_DIFFS), "n": 0, "why": why}


def not_measured(what: str, why: str = "skipped for time") -> str:
    """The line for a figure this run did not measure: ``what: not measured (why)``."""
    return f"{what}: not measured ({why})"


def takes(comparison: Mapping[str, Any]) -> dict[str, Any]:
    """The one ratio convention of tables and prose: ``b`` takes ``time_ratio``× ``a``'s time (below 1: faster),
    with its 95% interval and the verdict (``compare_times`` keeps a/b; this is its inverse)."""
    c = comparison
    return {
        "time_ratio": round(1 / c["ratio"], 3),
        "interval": f"{1 / c['high']:.2f}–{1 / c['low']:.2f}",
        "verdict": c["verdict"],
    }


def takes_line(comparison: Mapping[str, Any]) -> str:
    """``takes`` as a sentence: "b takes 1.17× the time of a (95% interval 1.10–1.25): slower"."""
    c, t = comparison, takes(comparison)
    return f"{c['b']} takes {t['time_ratio']:.2f}× the time of {c['a']} (95% interval {t['interval']}): {t['verdict']}"
