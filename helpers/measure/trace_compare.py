"""``compare(before, after)``: did a change make the step faster, slower, or no different beyond the noise, and
which cause moved? ``python -m helpers.doctor compare BEFORE AFTER [--json] [--fail-if-slower PCT]``.

Both sides are diagnosed by the trace toolkit (a trace, or a folder of ranks: the ranks' steps pooled), and each
gives one sample per profiled step: the step's time and each cause's milliseconds in it (``Diagnosis.per_step``).

The step: the notebooks' one comparison, ``compare.compare_times(before, after, role="change")``: the ratio of mean
steps before / after (above 1: after is faster), its 95% BCa bootstrap interval, the noise floor measured on the
samples (an A/A split of each side's even and odd steps; from 4 steps a side), and the notebooks' verdicts
("faster", "slower", "faster, small", "slower, small", "no difference"), worded by ``compare.describe``. The two
sides ran at different times, not in interleaved rounds: what changed on the machine between them is in the ratio.
**cannot tell** when a side has fewer than two steps (no interval; ``--fail-if-slower`` then fails: a gate that
cannot see does not pass). Under 4 steps a side no floor is measured and the bootstrap interval is too narrow (3
steps resample into 10 distinct means): a note says so.

Each cause: the change in ms per step with Welch's t interval (the two sides' variation not assumed alike), not a
ratio, since a fix can remove a cause entirely (0 ms after). The cause named is the one whose change is largest in
the verdict's direction.

Returned dict (the ``--json``)::

    {"before": PATH, "after": PATH, "steps": [n_before, n_after], "verdict": str, "cause": str | null,
     "ratio", "low", "high", "floor", "floor_from",         # the step's comparison (low/high/floor null: cannot tell)
     "comparison": compare_times' entry (samples included) | null,
     "step": {"before_ms", "after_ms", "change_ms", "low_ms", "high_ms", "change_pct"},   # low/high_ms: the
     "causes": [{"cause", "before_ms", "after_ms", "change_ms", "low_ms", "high_ms"}],     # ratio's interval in ms
     "summary": str, "notes": [...]}                                                       # of BEFORE's step
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from ..traces.job import diagnose_job
from . import compare as cmp_

CONFIDENCE = 0.95


def interval(before: list[float], after: list[float], confidence: float = CONFIDENCE
             ) -> tuple[float, float | None, float | None]:
    """``(change, low, high)`` of mean(after) - mean(before): Welch's t interval; ``low``/``high`` None with fewer
    than two samples on a side."""
    from scipy import stats

    change = statistics.fmean(after) - statistics.fmean(before)
    if len(before) < 2 or len(after) < 2:
        return change, None, None
    va, vb = statistics.variance(before) / len(before), statistics.variance(after) / len(after)
    se = math.sqrt(va + vb)
    if se == 0:
        return change, change, change
    df = (va + vb) ** 2 / (va ** 2 / (len(before) - 1) + vb ** 2 / (len(after) - 1))
    t = float(stats.t.ppf(0.5 + confidence / 2, df))
    return change, change - t * se, change + t * se


def samples(path: Path | str) -> tuple[dict[str, Any], list[float], dict[str, list[float]]]:
    """A side's report, its step times (ms) and each cause's ms per step (the ranks of a job pooled)."""
    rep = diagnose_job(path, views=False)
    ds = rep.get("_diagnoses") or [rep["_diagnosis"]]
    times = [t for d in ds for t in d.step_times]
    causes = sorted({c for d in ds for c in d.per_step})
    per = {c: [x for d in ds for x in (d.per_step.get(c) or [0.0] * len(d.step_times))] for c in causes}
    return rep, times, per


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def compare(before: Path | str, after: Path | str) -> dict[str, Any]:
    """The comparison (module docstring); ``traces.report.DoctorError`` for bad input on either side."""
    rep_a, ta, ca = samples(before)
    rep_b, tb, cb = samples(after)
    mean_a, mean_b = statistics.fmean(ta), statistics.fmean(tb)
    c = None
    if len(ta) >= 2 and len(tb) >= 2:
        c = cmp_.compare_times(ta, tb, a="before", b="after", metric="step_ms_mean", confidence=CONFIDENCE,
                               role="change")
    verdict = c["verdict"] if c else "cannot tell"
    rows = []
    for cause in sorted(set(ca) | set(cb)):
        xa = ca.get(cause) or [0.0] * len(ta)
        xb = cb.get(cause) or [0.0] * len(tb)
        d, lo, hi = interval(xa, xb)
        rows.append({"cause": cause, "before_ms": _r(statistics.fmean(xa)), "after_ms": _r(statistics.fmean(xb)),
                     "change_ms": _r(d), "low_ms": _r(lo), "high_ms": _r(hi)})
    cause = None
    way = cmp_.direction(c) if c else None
    if way and rows:
        sign = -1 if way == "faster" else 1
        best = max(rows, key=lambda r: sign * r["change_ms"])
        cause = best["cause"] if sign * best["change_ms"] > 0 else None
    change = mean_b - mean_a
    pct = 100.0 * change / mean_a if mean_a else None
    # the ratio's interval as a change of BEFORE's mean step: after = before / ratio
    low_ms, high_ms = (mean_a / c["high"] - mean_a, mean_a / c["low"] - mean_a) if c else (None, None)
    notes = []
    if rep_a["_on_gpu"] != rep_b["_on_gpu"]:
        notes.append("one side is a GPU trace and the other a CPU-only trace: their causes are not split alike")
    if c is None:
        notes.append(f"fewer than 2 profiled steps on a side ({len(ta)} before, {len(tb)} after): no interval; "
                     f"profile more steps")
    elif c["floor_from"].startswith("assumed"):
        notes.append("fewer than 4 steps a side: no noise floor measured (3.5% assumed), and a bootstrap interval over "
                     "so few steps is narrower than their variation warrants; profile more steps")
    said = cmp_.describe(c) if c else f"after vs before: cannot tell ({len(ta)} and {len(tb)} steps)"
    summary = (f"{said}; {mean_a:.2f} -> {mean_b:.2f} ms per step ({change:+.2f} ms, {pct:+.1f}%; {len(ta)} and "
               f"{len(tb)} steps)" + (f"; the cause that moved most: {cause}" if cause else ""))
    return {"before": str(before), "after": str(after), "steps": [len(ta), len(tb)], "verdict": verdict,
            "cause": cause, "ratio": c["ratio"] if c else round(mean_a / mean_b, 4), "low": c and c["low"],
            "high": c and c["high"], "floor": c and c["floor"], "floor_from": c and c["floor_from"],
            "comparison": c,
            "step": {"before_ms": _r(mean_a), "after_ms": _r(mean_b), "change_ms": _r(change), "low_ms": _r(low_ms),
                     "high_ms": _r(high_ms), "change_pct": _r(pct)},
            "causes": rows, "summary": summary, "notes": notes}


def compare_text(cmp: dict[str, Any]) -> str:
    """The text report of a comparison."""
    out = [f"before: {cmp['before']}", f"after:  {cmp['after']}", "", f"verdict: {cmp['verdict']}", cmp["summary"]]
    if cmp["floor_from"]:
        measured = not cmp["floor_from"].startswith("not measured")
        out.append(f"noise floor ±{100 * cmp['floor']:.1f}%: {cmp['floor_from']}" if measured
                   else f"noise floor: {cmp['floor_from']}")
    out += ["", f"Per cause (ms per step; after - before, {CONFIDENCE:.0%} Welch interval from the step-to-step "
                "variation):"]
    for r in sorted(cmp["causes"], key=lambda r: r["change_ms"]):
        ci = f"[{r['low_ms']:+.2f}, {r['high_ms']:+.2f}]" if r["low_ms"] is not None else "(no interval)"
        out.append(f"  {r['cause']:<16} {r['before_ms']:9.2f} -> {r['after_ms']:9.2f}  {r['change_ms']:+9.2f} {ci}")
    out += [f"  note: {n}" for n in cmp["notes"]]
    return "\n".join(out)
