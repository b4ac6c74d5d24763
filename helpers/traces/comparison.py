"""``compare(before, after)``: did a change make the step faster, slower, or no different beyond the noise, and
which cause moved? ``python -m helpers.doctor compare BEFORE AFTER [--json] [--fail-if-slower PCT]``.

Both sides are diagnosed (a trace, or a folder of ranks: the ranks' steps pooled), and each gives one sample per
profiled step: the step's time and each cause's milliseconds in it (``Diagnosis.per_step``). The change per step
(after minus before) gets a 95% interval from the step-to-step variation of both sides (Welch's t interval: it
does not assume the two sides vary alike, and with few steps it is wide, as it should be). Verdict: **faster**
when the whole interval of the step's change is below 0, **slower** when above, else **no change** beyond noise;
**cannot tell** when a side has fewer than two steps. The cause named is the one whose change is largest in the
verdict's direction.

Returned dict (the ``--json``)::

    {"before": PATH, "after": PATH, "steps": [n_before, n_after], "verdict": str, "cause": str | null,
     "step": {"before_ms", "after_ms", "change_ms", "low_ms", "high_ms", "change_pct"},
     "causes": [{"cause", "before_ms", "after_ms", "change_ms", "low_ms", "high_ms"}], "summary": str, "notes": [...]}
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from .job import diagnose_job

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
    """The comparison (module docstring); ``report.DoctorError`` for bad input on either side."""
    rep_a, ta, ca = samples(before)
    rep_b, tb, cb = samples(after)
    change, low, high = interval(ta, tb)
    mean_a = statistics.fmean(ta)
    rows = []
    for cause in sorted(set(ca) | set(cb)):
        xa = ca.get(cause) or [0.0] * len(ta)
        xb = cb.get(cause) or [0.0] * len(tb)
        d, lo, hi = interval(xa, xb)
        rows.append({"cause": cause, "before_ms": _r(statistics.fmean(xa)), "after_ms": _r(statistics.fmean(xb)),
                     "change_ms": _r(d), "low_ms": _r(lo), "high_ms": _r(hi)})
    if low is None:
        verdict = "cannot tell"
    elif high < 0:
        verdict = "faster"
    elif low > 0:
        verdict = "slower"
    else:
        verdict = "no change"
    cause = None
    if verdict in ("faster", "slower") and rows:
        sign = -1 if verdict == "faster" else 1
        best = max(rows, key=lambda r: sign * r["change_ms"])
        cause = best["cause"] if sign * best["change_ms"] > 0 else None
    pct = 100.0 * change / mean_a if mean_a else None
    notes = []
    if rep_a["_on_gpu"] != rep_b["_on_gpu"]:
        notes.append("one side is a GPU trace and the other a CPU-only trace: their causes are not split alike")
    if verdict == "cannot tell":
        notes.append(f"fewer than 2 profiled steps on a side ({len(ta)} before, {len(tb)} after): no interval; "
                     f"profile more steps")
    ci = f"[{low:+.2f}, {high:+.2f}] ms" if low is not None else "no interval"
    summary = (f"{verdict.upper()}: {mean_a:.2f} -> {statistics.fmean(tb):.2f} ms per step ({change:+.2f} ms, "
               f"{pct:+.1f}%; {CONFIDENCE:.0%} interval {ci}, {len(ta)} and {len(tb)} steps)"
               + (f"; the cause that moved most: {cause}" if cause else ""))
    return {"before": str(before), "after": str(after), "steps": [len(ta), len(tb)], "verdict": verdict,
            "cause": cause, "step": {"before_ms": _r(mean_a), "after_ms": _r(statistics.fmean(tb)),
                                     "change_ms": _r(change), "low_ms": _r(low), "high_ms": _r(high),
                                     "change_pct": _r(pct)},
            "causes": rows, "summary": summary, "notes": notes}


def compare_text(cmp: dict[str, Any]) -> str:
    """The text report of a comparison."""
    out = [f"before: {cmp['before']}", f"after:  {cmp['after']}", "", cmp["summary"], "",
           f"Per cause (ms per step; after - before, {CONFIDENCE:.0%} interval from the step-to-step variation):"]
    for r in sorted(cmp["causes"], key=lambda r: r["change_ms"]):
        ci = f"[{r['low_ms']:+.2f}, {r['high_ms']:+.2f}]" if r["low_ms"] is not None else "(no interval)"
        out.append(f"  {r['cause']:<16} {r['before_ms']:9.2f} -> {r['after_ms']:9.2f}  {r['change_ms']:+9.2f} {ci}")
    out += [f"  note: {n}" for n in cmp["notes"]]
    return "\n".join(out)
