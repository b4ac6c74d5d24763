"""Are two implementations the same? Check it before timing them (pytorch/tutorials' ``recipes/benchmark.py``;
nn-zero-to-hero's ``cmp()``): one comparison for tensors, arrays, number sequences and dicts of them.

Used by every notebook that times a rewrite against the original: 02's two dilations (exact) and its GPU decode
against the CPU decode (within a few levels), 03's loss and gradients of the two patch selections (close), 04's
compiled loss curve against eager's (relative tolerance per precision).
"""
from __future__ import annotations

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
