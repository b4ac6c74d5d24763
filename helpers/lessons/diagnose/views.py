"""Notebook 05's tables and chart: the planted cases' verdicts, the same as bars split into causes, the results."""
from __future__ import annotations

from typing import Any, Mapping

import pandas as pd

from ...traces.diagnosis import CAUSES

COLORS = {"input": "#dd8452", "host sync": "#c44e52", "launch/overhead": "#8172b3", "compute": "#4c72b0",
          "memory": "#937860", "communication": "#55a868"}
METRICS = ["step_ms_mean", "top_cause", *[f"{c}_ms" for c in CAUSES], "causes_ms_sum"]


def verdicts_table(planted: Mapping[str, Any]):
    """A row per planted case that ran (index: the plant): top cause, mean step, ms per cause (None: not judged), sum"""
    rows = [{"planted": kind, "top cause": d.top, "step (ms)": d.step_ms, **{c["cause"]: c["ms"] for c in d.causes},
             "causes sum (ms)": sum(c["ms"] or 0 for c in d.causes)} for kind, d in planted.items() if d is not None]
    return pd.DataFrame(rows, columns=None if rows else ["planted", "top cause", "step (ms)", "causes sum (ms)"]
                        ).set_index("planted")


def verdicts_chart(verdicts, xlabel: str):
    """Each planted step as one bar split into causes (one not judged: no bar, no legend entry); the figure."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.6 * max(len(verdicts), 1)))
    left = pd.Series(0.0, index=verdicts.index)
    for cause in CAUSES:
        vals = pd.to_numeric(verdicts.get(cause, pd.Series(dtype=float)), errors="coerce").fillna(0.0)
        if (vals > 0).any():
            ax.barh(verdicts.index, vals, left=left, color=COLORS[cause], label=cause)
            left += vals
    ax.invert_yaxis()
    ax.set(xlabel=xlabel, title="causes per step")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def results_view(results):
    """The results table's informative columns: name, mean step, top cause, ms per cause, status."""
    t = results.table(METRICS)
    return t[[c for c in ["experiment", *METRICS, "status"] if c in t.columns]].dropna(axis="columns", how="all")


KINDS = ("input", "launch/overhead", "compute", "host sync")


def _found(metric, name: str, kind: str) -> tuple[str | None, bool]:
    """A plant's row read back: its text and whether the doctor found the plant (top cause; host sync: a finding)."""
    from ...traces.diagnosis import MIN_FINDING_SHARE
    top, step, ms = metric(name, "top_cause"), metric(name, "step_ms_mean"), metric(name, f"{kind}_ms")
    if top is None or not step or ms is None:
        return None, False
    return f"top {top}; {kind} {ms / step:.0%} of the step", (
        ms / step >= MIN_FINDING_SHARE if kind == "host sync" else top == kind)


def _records(records, mixed: bool) -> tuple[str | None, bool]:
    """``saved_vs_claimed`` records as one cell: the mixed plant's split, or how many savings matched the claim."""
    if not records:
        return None, False
    ok = all(r.get("agrees") is True for r in records)
    if not mixed:
        n = sum(r.get("agrees") is True for r in records)
        return f"{n} of {len(records)} savings within 10 points of the claim", ok
    num = lambda x: isinstance(x, (int, float)) and x == x  # noqa: E731 - a number, not None or NaN
    return "; ".join(f"{r['planted']} found {r['claimed share']:.0%}, planted " + (
        f"{r['saved share']:.0%}" if num(r.get("saved share")) else "not resolved") for r in records), ok


def planted_table(metric, ref, sizes_here: dict, sizes_full: dict, *, saved=None, mixed=None, why_here=None):
    """What was planted against what the doctor found (``reference.article_table``'s columns): the reference's
    full-scale rows beside this run's; ``why_here``: {kind: why this run has no such row}."""
    from ...notebook import reference as rf
    from .experiment import case_name
    ref_metric = ref.metric if ref is not None else (lambda *_: None)
    notes, why_here, rows = ((ref.doc.get("notes") or {}) if ref is not None else {}), why_here or {}, []
    cells = [(f"planted {k}", "a host-sync finding beside the product it waits for" if k == "host sync" else
              f"{k}: the top cause", _found(ref_metric, case_name(k, sizes_full.get(k)), k),
              _found(metric, case_name(k, sizes_here[k]), k) if k in sizes_here else (None, False), why_here.get(k, ""))
             for k in KINDS]
    cells += [("mixed plant: input + compute in one step", "each cause found at its planted share (±10 points)",
               _records(notes.get("mixed_split"), True), _records(mixed, True),
               "" if notes.get("mixed_split") else "the reference run predates the mixed plant"),
              ("each saving matches the doctor's claim", "removing a plant saves its claimed share of the step",
               _records(notes.get("claimed_vs_measured_saving"), False), _records(saved, False), "")]
    for effect, article, (t, t_ok), (m, m_ok), why in cells:
        r = {"effect": effect, "article": article, "H100 reference": t or rf.NOT_RUN,
             "H100 reproduces?": rf.NOT_RUN if t is None else "yes" if t_ok else "no",
             "this run": m or rf.NOT_MEASURED, "this run reproduces?": rf.NOT_MEASURED if m is None else
             "yes" if m_ok else "no"}
        rows.append(r | {"why": "" if r["H100 reproduces?"] == r["this run reproduces?"] == "yes" else why})
    return pd.DataFrame(rows, columns=rf.ARTICLE_COLUMNS)
