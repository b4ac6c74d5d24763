"""``compare_traces(before, after)``: did a change make the step faster, slower, or no different beyond the noise, and
which cause moved? ``perf-doctor compare BEFORE AFTER [--json] [--fail-if-slower PCT]``.

Each side (a trace or a folder of ranks) is diagnosed, one sample per profiled step (``Diagnosis.per_step``); the
step compared by ``stats.compare_times(before, after, role="change")`` (the sides ran at different times, not
interleaved), each cause by Welch's t interval, after ``comparability`` (docs/doctor.md, ``compare``).

Returned dict (the ``--json``)::

    {"before": PATH, "after": PATH, "steps": [n_before, n_after], "verdict": str, "cause": str | null,
     "ratio", "low", "high", "floor", "floor_from",         # the step's comparison (low/high/floor null: cannot tell)
     "comparison": compare_times' entry (samples included) | null,
     "step": {"before_ms", "after_ms", "change_ms", "low_ms", "high_ms", "change_pct"},   # low/high_ms: the
     "causes": [{"cause", "before_ms", "after_ms", "change_ms", "low_ms", "high_ms"}],     # ratio's interval in ms
     "summary": str, "notes": [...],                                                       # of BEFORE's step
     "comparability": {"verdict", "reasons", "ops_jaccard", "calls_jaccard", "kernels_jaccard", "shapes_jaccard",
                       "devices", "steps"}}                    # calls_jaccard: CPU sides only (CALLS_SIMILAR)"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from .job import diagnose_job
from .report import shown_path
from .stats import compare_times, describe, direction

CONFIDENCE = 0.95
# Comparability (issue 32): two traces of different models time different work. The op signature is the set of
# operator names; on the H100 reference two runs of one model share 0.73-0.99 of them, notebook 01's CNN and 05's
# linear step 0.53, 01's CNN and 04's gated MLP 0.39. Kernel names split models further (0.61-1.0 within a model's
# changes there, 0.19 across models). A rewrite of the step (torch.compile) changes them too: --force compares anyway.
OPS_SIMILAR = 0.5
KERNELS_SIMILAR = 0.3
SHAPES_SIMILAR = 0.5
MIN_STEPS = 3  # fewer steps a side: no steady state to compare (quality.MIN_STEPS)
# A CPU trace has no kernel names to tell two models apart, and two models that share a loss and an optimizer share
# 51-73% of their operator names (issue 44's probe: "slower by 310.2%"). What a step of one model runs is the same
# from run to run: each operator's calls per step (the optimizer's per-parameter ops follow the parameter count, the
# layers' ops the depth). Their weighted Jaccard (sum of the smaller counts over the sum of the larger) under this,
# or module names (with_stack's ``nn.Module: ...``) mostly not shared, is another model.
CALLS_SIMILAR = 0.5
MODULES_SIMILAR = 0.5


def weighted_jaccard(a: dict[str, float], b: dict[str, float]) -> float:
    """sum(min) / sum(max) of two name -> count maps (1.0 when both are empty)."""
    keys = set(a) | set(b)
    top = sum(max(a.get(k, 0.0), b.get(k, 0.0)) for k in keys)
    return sum(min(a.get(k, 0.0), b.get(k, 0.0)) for k in keys) / top if top else 1.0


def jaccard(a, b) -> float:
    """|a ∩ b| / |a ∪ b| of two sets (1.0 when both are empty)."""
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a | b else 1.0


def _sig(rep: dict[str, Any]) -> dict[str, Any]:
    """One side's signature (``report.signature``), the ranks of a job merged."""
    sigs = rep.get("_signatures") or [rep["_signature"]]
    merged = {
        k: set().union(*(x.get(k, ()) for x in sigs))
        for k in ("ops", "kernels", "shapes", "modules")
    }
    calls: dict[str, float] = {}
    for x in sigs:
        for k, v in x["ops"].items():
            calls[k] = calls.get(k, 0.0) + v / len(sigs)
    return merged | {
        "calls": calls,
        "devices": next((x["devices"] for x in sigs if x["devices"]), []),
        "schema": {x["schema"] for x in sigs},
    }


def comparability(rep_a: dict[str, Any], rep_b: dict[str, Any], na: int, nb: int) -> dict[str, Any]:
    """``{verdict, reasons, ops_jaccard, kernels_jaccard, shapes_jaccard, devices, steps}``: not comparable for an empty
    capture, other devices or op sets; inconclusive under ``MIN_STEPS`` steps, other shapes or trace schemas."""
    a, b = _sig(rep_a), _sig(rep_b)
    ops, kern = jaccard(a["ops"], b["ops"]), jaccard(a["kernels"], b["kernels"])
    common = a["ops"] & b["ops"]
    sa, sb = {x for x in a["shapes"] if x[0] in common}, {x for x in b["shapes"] if x[0] in common}
    shapes = jaccard(sa, sb) if sa and sb else None
    no, unsure = [], []
    calls = None
    for side, x, y in (("before", a, b), ("after", b, a)):
        if (not x["ops"] and y["ops"]) or not (x["ops"] or x["kernels"]):
            no.append(
                f"the {side} trace recorded no operator: an empty capture is not an improvement"
            )
    if rep_a["_on_gpu"] != rep_b["_on_gpu"]:
        no.append(
            f"one side ran on a device and the other did not ({'before' if rep_a['_on_gpu'] else 'after'} "
            f"has device work): an empty capture is not an improvement"
        )
    if a["devices"] and b["devices"] and sorted(a["devices"]) != sorted(b["devices"]):
        no.append(
            f"different devices: {len(a['devices'])} x {a['devices'][0]} before, {len(b['devices'])} x "
            f"{b['devices'][0]} after"
        )
    if a["ops"] and b["ops"] and ops < OPS_SIMILAR:
        no.append(
            f"different operators: {ops:.0%} of the operator names are shared (Jaccard, under "
            f"{OPS_SIMILAR:.0%}): different models, or a rewrite of the step such as torch.compile"
        )
    elif not rep_a["_on_gpu"] and not rep_b["_on_gpu"] and a["ops"] and b["ops"]:
        calls = weighted_jaccard(a["calls"], b["calls"])
        mods = jaccard(a["modules"], b["modules"]) if a["modules"] and b["modules"] else None
        if calls < CALLS_SIMILAR:
            no.append(
                f"different work per step: the operators' calls per step match {calls:.0%} (weighted Jaccard, "
                f"under {CALLS_SIMILAR:.0%}); a CPU trace has no kernel names, and this says different models "
                f"(other layers or parameter counts), whatever operator names they share ({ops:.0%})"
            )
        elif mods is not None and mods < MODULES_SIMILAR:
            no.append(
                f"different modules: {mods:.0%} of the module names are shared (Jaccard, under "
                f"{MODULES_SIMILAR:.0%}): different models"
            )
    elif rep_a["_on_gpu"] and rep_b["_on_gpu"] and kern < KERNELS_SIMILAR:
        no.append(
            f"different kernels: {kern:.0%} of the kernel names are shared (Jaccard, under "
            f"{KERNELS_SIMILAR:.0%}): different models, or a rewrite of the step such as torch.compile"
        )
    if min(na, nb) < MIN_STEPS:
        unsure.append(
            f"{na} and {nb} profiled steps: fewer than {MIN_STEPS} a side is no steady state"
        )
    if shapes is not None and shapes < SHAPES_SIMILAR:
        unsure.append(
            f"different input shapes: {shapes:.0%} of the shared operators' input shapes match (batch or "
            f"input size changed: time per sample, not per step, compares them)"
        )
    if len(a["schema"] | b["schema"]) > 1:
        unsure.append(
            "different trace schemas (torch <= 1.9 against a newer one): the profilers count differently"
        )
    verdict = "not comparable" if no else "inconclusive" if unsure else "comparable"
    return {
        "verdict": verdict,
        "reasons": no + unsure,
        "ops_jaccard": round(ops, 3),
        "calls_jaccard": None if calls is None else round(calls, 3),
        "kernels_jaccard": round(kern, 3) if rep_a["_on_gpu"] and rep_b["_on_gpu"] else None,
        "shapes_jaccard": None if shapes is None else round(shapes, 3),
        "devices": [a["devices"], b["devices"]],
        "steps": [na, nb],
    }


def interval(before: list[float], after: list[float]) -> tuple[float, float | None, float | None]:
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
    df = (va + vb) ** 2 / (va**2 / (len(before) - 1) + vb**2 / (len(after) - 1))
    t = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df))
    return change, change - t * se, change + t * se


def samples(path: Path | str) -> tuple[dict[str, Any], list[float], dict[str, list[float]]]:
    """A side's report, its step times (ms) and each cause's ms per step (the ranks of a job pooled)."""
    rep = diagnose_job(path, views=False)
    ds = rep.get("_diagnoses") or [rep["_diagnosis"]]
    times = [t for d in ds for t in d.step_times]
    causes = sorted({c for d in ds for c in d.per_step})
    per = {
        c: [x for d in ds for x in (d.per_step.get(c) or [0.0] * len(d.step_times))] for c in causes
    }
    return rep, times, per


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def compare_traces(before: Path | str, after: Path | str, *, force: bool = False) -> dict[str, Any]:
    """The comparison (module docstring); ``report.DoctorError`` for bad input on either side. Unless
    ``force``, a side that cannot be compared (``comparability``) makes the verdict "not comparable" or
    "inconclusive", with its reasons, in place of the step's."""
    rep_a, ta, ca = samples(before)
    rep_b, tb, cb = samples(after)
    able = comparability(rep_a, rep_b, len(ta), len(tb))
    mean_a, mean_b = statistics.fmean(ta), statistics.fmean(tb)
    c = (
        compare_times(ta, tb, a="before", b="after", confidence=CONFIDENCE, role="change")
        if len(ta) >= 2 and len(tb) >= 2
        else None
    )
    verdict = c["verdict"] if c else "cannot tell"
    rows = []
    for cause in sorted(set(ca) | set(cb)):
        xa = ca.get(cause) or [0.0] * len(ta)
        xb = cb.get(cause) or [0.0] * len(tb)
        d, lo, hi = interval(xa, xb)
        rows.append(
            {
                "cause": cause,
                "before_ms": _r(statistics.fmean(xa)),
                "after_ms": _r(statistics.fmean(xb)),
                "change_ms": _r(d),
                "low_ms": _r(lo),
                "high_ms": _r(hi),
            }
        )
    cause = None
    way = direction(c) if c else None
    if way and rows:
        sign = -1 if way == "faster" else 1
        best = max(rows, key=lambda r: sign * r["change_ms"])
        cause = best["cause"] if sign * best["change_ms"] > 0 else None
    change = mean_b - mean_a
    pct = 100.0 * change / mean_a if mean_a else None
    # the ratio's interval as a change of BEFORE's mean step: after = before / ratio
    low_ms, high_ms = (
        (mean_a / c["high"] - mean_a, mean_a / c["low"] - mean_a) if c else (None, None)
    )
    notes = []
    if rep_a["_on_gpu"] != rep_b["_on_gpu"]:
        notes.append(
            "one side is a GPU trace and the other a CPU-only trace: their causes are not split alike"
        )
    if c is None:
        notes.append(
            f"fewer than 2 profiled steps on a side ({len(ta)} before, {len(tb)} after): no interval; "
            f"profile more steps"
        )
    elif c["floor_from"].startswith("assumed"):
        notes.append(
            "fewer than 4 steps a side: no noise floor measured (3.5% assumed), and a bootstrap interval over "
            "so few steps is narrower than their variation warrants; profile more steps"
        )
    said = describe(c) if c else f"after vs before: cannot tell ({len(ta)} and {len(tb)} steps)"
    if able["verdict"] != "comparable":
        if force:
            notes.append(
                f"compared anyway (--force), though {able['verdict']}: "
                + "; ".join(able["reasons"])
            )
        else:
            verdict, cause = able["verdict"], None
            said = (
                f"after vs before: {able['verdict']} ("
                + "; ".join(able["reasons"])
                + "; --force compares anyway)"
            )
    summary = (
        f"{said}; {mean_a:.2f} -> {mean_b:.2f} ms per step ({change:+.2f} ms, {pct:+.1f}%; {len(ta)} and "
        f"{len(tb)} steps)" + (f"; the cause that moved most: {cause}" if cause else "")
    )
    return {
        "before": str(before),
        "after": str(after),
        "steps": [len(ta), len(tb)],
        "verdict": verdict,
        "cause": cause,
        "ratio": c["ratio"] if c else round(mean_a / mean_b, 4),
        "low": c and c["low"],
        "high": c and c["high"],
        "floor": c and c["floor"],
        "floor_from": c and c["floor_from"],
        "comparison": c,
        "step": {
            "before_ms": _r(mean_a),
            "after_ms": _r(mean_b),
            "change_ms": _r(change),
            "low_ms": _r(low_ms),
            "high_ms": _r(high_ms),
            "change_pct": _r(pct),
        },
        "causes": rows,
        "summary": summary,
        "notes": notes,
        "comparability": able,
    }


def compare_text(cmp: dict[str, Any]) -> str:
    """The text report of a comparison."""
    out = [
        f"before: {shown_path(cmp['before'])}",
        f"after:  {shown_path(cmp['after'])}",
        "",
        f"verdict: {cmp['verdict']}",
        cmp["summary"],
    ]
    a = cmp.get("comparability")
    if a:
        kern = f", kernels {a['kernels_jaccard']:.0%}" if a["kernels_jaccard"] is not None else ""
        out.append(
            f"comparability: {a['verdict']} (shared names: operators {a['ops_jaccard']:.0%}{kern}; steps "
            f"{a['steps'][0]} and {a['steps'][1]})"
        )
    if cmp["floor_from"]:
        measured = not cmp["floor_from"].startswith("not measured")
        out.append(
            f"noise floor ±{100 * cmp['floor']:.1f}%: {cmp['floor_from']}"
            if measured
            else f"noise floor: {cmp['floor_from']}"
        )
    out += [
        "",
        f"Per cause (ms per step; after - before, {CONFIDENCE:.0%} Welch interval from the step-to-step "
        "variation):",
    ]
    for r in sorted(cmp["causes"], key=lambda r: r["change_ms"]):
        ci = (
            f"[{r['low_ms']:+.2f}, {r['high_ms']:+.2f}]"
            if r["low_ms"] is not None
            else "(no interval)"
        )
        out.append(
            f"  {r['cause']:<16} {r['before_ms']:9.2f} -> {r['after_ms']:9.2f}  {r['change_ms']:+9.2f} {ci}"
        )
    out += [f"  note: {n}" for n in cmp["notes"]]
    return "\n".join(out)
