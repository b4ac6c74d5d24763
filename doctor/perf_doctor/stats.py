"""The statistics of a timing comparison: ``compare_times``, a ratio with a bootstrap interval, a noise floor
measured on its own samples (``noise_floor``) and a verdict, worded by ``describe``. The doctor's ``compare`` judges
two traces' steps with them; the lab's notebooks judge their interleaved rounds with the same
(``helpers.measure.compare`` imports them from here)."""

from __future__ import annotations

import warnings
from typing import Any, Mapping

import numpy as np

VERDICTS = ("faster", "slower", "faster, small", "slower, small", "no difference")
# A resolved change smaller than this is named "small" ("faster, small"): a real effect, but one a reader should not
# build on without more rounds. It is a size, not a noise floor: the floor comes from each comparison's own samples.
SMALL = 0.035
# Roles decide the wording (``describe``): "change" (b is a changed version of a: a fix, a plant, compile, more
# workers), "timer" (b is another reading of the same work as a: a timer that reads low or high).
ROLES = ("change", "timer")


def noise_floor(*samples, min_n: int = 4) -> tuple[float | None, str]:
    """A comparison's noise floor from its own samples: the largest A/A difference (even against odd rounds) over the
    sides. ``(floor, floor_from)``; ``(None, why)`` under ``min_n`` samples."""
    diffs = []
    for x in samples:
        x = np.asarray(list(x), dtype=float)
        if len(x) >= min_n and x[0::2].mean() > 0 and x[1::2].mean() > 0:
            r = float(x[0::2].mean() / x[1::2].mean())
            diffs.append(max(r, 1 / r) - 1)
    if not diffs:
        return None, f"not measured: fewer than {min_n} samples on each side"
    return float(max(diffs)), "A/A split of each side's samples (even vs odd rounds)"


def compare_times(
    a_ms,
    b_ms,
    *,
    a: str = "a",
    b: str = "b",
    metric: str = "step_ms_mean",
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
    statistic=None,
    floor: float | None = None,
    role: str = "change",
) -> dict:
    """Is ``b`` faster than ``a``? ``ratio`` = statistic(a) / statistic(b) (mean unless ``statistic``: 04 passes the
    median for rounds that compile graphs), a BCa bootstrap ``[low, high]``, and a verdict:
    "faster" when the interval is above 1 and the ratio beyond the floor (measured by ``noise_floor`` unless given;
    ``SMALL`` without enough samples), "slower" likewise, else "no difference"; under ``SMALL`` ", small". Returns
    results.json's comparison entry with ``role``, ``n_a``, ``n_b``, ``confidence``, ``floor``, ``floor_from``,
    ``samples``. Under 2 samples or none varying: interval = ratio."""
    from scipy import stats

    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, not {role!r}")
    stat = statistic or np.mean
    x = np.asarray(list(a_ms), dtype=float)
    y = np.asarray(list(b_ms), dtype=float)
    if (
        not len(x)
        or not len(y)
        or not np.isfinite(x).all()
        or not np.isfinite(y).all()
        or stat(y) <= 0
    ):
        raise ValueError(
            f"compare_times needs finite, positive samples on both sides ({a}: {len(x)}, {b}: {len(y)})"
        )
    ratio = float(stat(x) / stat(y))
    low = high = ratio
    if len(x) >= 2 and len(y) >= 2 and (np.ptp(x) > 0 or np.ptp(y) > 0):

        def r(u, v, axis=-1):
            return stat(u, axis=axis) / stat(v, axis=axis)

        for method in (
            "BCa",
            "percentile",
        ):  # BCa is undefined on some degenerate resamples: fall back
            with warnings.catch_warnings():
                warnings.simplefilter(
                    "ignore"
                )  # scipy's degenerate-data warnings: the fallback handles them
                ci = stats.bootstrap(
                    (x, y),
                    r,
                    vectorized=True,
                    paired=False,
                    n_resamples=n_resamples,
                    confidence_level=confidence,
                    method=method,
                    random_state=seed,
                ).confidence_interval
            if np.isfinite(ci.low) and np.isfinite(ci.high):
                low, high = float(ci.low), float(ci.high)
                break
    if floor is None:
        floor, floor_from = noise_floor(x, y)
        if (
            floor is None
        ):  # too few samples to measure a floor (and to trust a bootstrap): the small-change size
            floor, floor_from = SMALL, f"assumed {100 * SMALL:g}%: {floor_from}"
    else:
        floor_from = "given"
    if not 0 <= floor:
        raise ValueError(f"floor must be a fraction >= 0, not {floor!r}")
    verdict = (
        "faster"
        if low > 1.0 and ratio >= 1.0 + floor
        else "slower"
        if high < 1.0 and ratio <= 1.0 / (1.0 + floor)
        else "no difference"
    )
    if verdict != "no difference" and max(ratio, 1 / ratio) < 1 + SMALL:
        verdict += ", small"
    return {
        "a": a,
        "b": b,
        "metric": metric,
        "ratio": round(ratio, 4),
        "low": round(low, 4),
        "high": round(high, 4),
        "verdict": verdict,
        "role": role,
        "n_a": int(len(x)),
        "n_b": int(len(y)),
        "confidence": confidence,
        "floor": round(floor, 4),
        "floor_from": floor_from,
        "samples": {"a": [round(float(v), 4) for v in x], "b": [round(float(v), 4) for v in y]},
    }


def direction(comparison: Mapping[str, Any]) -> str | None:
    """``"faster"``, ``"slower"`` (small or not), or None for no difference."""
    v = comparison.get("verdict", "").split(",")[0]
    return v if v in ("faster", "slower") else None


def resolved(comparison: Mapping[str, Any]) -> bool:
    """Whether a comparison's interval excludes "no difference": only then may a figure derived from it (a
    break-even, ms saved, a ratio to a ceiling) be printed; otherwise say this machine does not resolve it."""
    return direction(comparison) is not None


def _n(r: float) -> str:
    return (
        f"{r:.0f}"
        if r >= 100
        else f"{r:.1f}"
        if r >= 10
        else f"{r:.2f}"
        if r >= 0.1
        else f"{r:.2g}"
    )


def _x(r: float) -> str:
    return f"{_n(r)}×"


def describe(comparison: Mapping[str, Any]) -> str:
    """One line for a reader in the one ratio convention, b's time as a multiple of a's ("compiled takes 0.51× the
    time of eager (95% interval 0.49–0.53): faster"; "... : no difference beyond this run's noise"); a timer's second
    reading as how low or high it reads ("naive reads 1040× low against synchronised ..."); a resolved change under
    3.5% says so."""
    c = comparison
    pct = int(round(100 * c.get("confidence", 0.95)))
    r, lo, hi, d = c["ratio"], c["low"], c["high"], direction(c)
    small = "; a small change, under 3.5%" if c["verdict"].endswith("small") else ""
    if d is not None and c.get("role") == "timer":
        if d == "faster":
            return f"{c['b']} reads {_x(r)} low against {c['a']} ({pct}% interval {_x(lo)}–{_x(hi)}{small})"
        return f"{c['b']} reads {_x(1 / r)} high against {c['a']} ({pct}% interval {_x(1 / hi)}–{_x(1 / lo)}{small})"
    takes = f"{c['b']} takes {_x(1 / r)} the time of {c['a']} ({pct}% interval {_n(1 / hi)}–{_n(1 / lo)})"
    if d is None:
        floor = f" (noise floor ±{100 * c['floor']:.1f}%)" if c.get("floor") else ""
        return f"{takes}: no difference beyond this run's noise{floor}"
    return f"{takes}: {d}{small}"
