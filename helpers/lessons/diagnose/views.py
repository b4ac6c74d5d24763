"""Notebook 05's tables and chart: the planted cases' verdicts, the same as bars split into causes, the results."""

from typing import Any, Mapping

import pandas as pd

from perf_doctor.diagnosis import CAUSES

COLORS = {
    "input": "#dd8452",
    "host sync": "#c44e52",
    "launch/overhead": "#8172b3",
    "compute": "#4c72b0",
    "memory": "#937860",
    "communication": "#55a868",
}
METRICS = ["step_ms_mean", "top_cause", *[f"{c}_ms" for c in CAUSES], "causes_ms_sum"]


def verdicts_table(planted: Mapping[str, Any]):
    """A row per planted case that ran (index: the plant): top cause, mean step, ms per cause (None: not judged), sum"""
    rows = [
        {
            "planted": kind,
            "top cause": d.top,
            "step (ms)": d.step_ms,
            **{c["cause"]: c["ms"] for c in d.causes},
            "causes sum (ms)": sum(c["ms"] or 0 for c in d.causes),
        }
        for kind, d in planted.items()
        if d is not None
    ]
    return pd.DataFrame(
        rows, columns=None if rows else ["planted", "top cause", "step (ms)", "causes sum (ms)"]
    ).set_index("planted")


def verdicts_chart(verdicts, xlabel: str):
    """Each planted step as one bar split into causes (one not judged: no bar, no legend entry); the figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.6 * max(len(verdicts), 1)))
    left = pd.Series(0.0, index=verdicts.index)
    for cause in CAUSES:
        vals = pd.to_numeric(verdicts.get(cause, pd.Series(dtype=float)), errors="coerce").fillna(
            0.0
        )
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
    return t[[c for c in ["experiment", *METRICS, "status"] if c in t.columns]].dropna(
        axis="columns", how="all"
    )


def _found(metric, name: str, kind: str) -> tuple[str | None, str]:
    """A plant's row read back: its text and whether the doctor found the plant (top cause; host sync: a finding)."""
    from perf_doctor.diagnosis import MIN_FINDING_SHARE

    top, step, ms = (
        metric(name, "top_cause"),
        metric(name, "step_ms_mean"),
        metric(name, f"{kind}_ms"),
    )
    if top is None or not step or ms is None:
        return None, ""
    found = ms / step >= MIN_FINDING_SHARE if kind == "host sync" else top == kind
    return f"top {top}; {kind} {ms / step:.0%} of the step", "yes" if found else "no"


def _records(records, mixed: bool) -> tuple[str | None, str]:
    """``saved_vs_claimed`` records as one cell: the mixed plant's split, or how many savings matched the claim."""
    if not records:
        return None, ""
    ok = "yes" if all(r.get("agrees") is True for r in records) else "no"
    if not mixed:
        n = sum(r.get("agrees") is True for r in records)
        return f"{n} of {len(records)} savings within 10 points of the claim", ok
    num = lambda x: isinstance(x, (int, float)) and x == x  # noqa: E731 - a number, not None or NaN
    return "; ".join(
        f"{r['planted']} found {r['claimed share']:.0%}, planted "
        + (f"{r['saved share']:.0%}" if num(r.get("saved share")) else "not resolved")
        for r in records
    ), ok


def planted_table(
    metric, ref, sizes_here: dict, sizes_full: dict, *, saved=None, mixed=None, why_here=None
):
    """What was planted against what the doctor found (``reference.article_table``): the reference's full-scale rows
    beside this run's; ``why_here``: {kind: why this run has no such row}."""
    from ...notebook import reference as rf
    from .experiment import PLANTED, case_name

    ref_metric = ref.metric if ref is not None else (lambda *_: None)
    notes, why_here = ((ref.doc.get("notes") or {}) if ref is not None else {}), why_here or {}
    rows = [
        dict(
            effect=f"planted {k}",
            article=f"{k}: the top cause"
            if k != "host sync"
            else "a host-sync finding beside the product it waits for",
            reference=_found(ref_metric, case_name(k, sizes_full.get(k)), k),
            this_run=_found(metric, case_name(k, sizes_here[k]), k) if k in sizes_here else None,
            why=why_here.get(k, ""),
        )
        for k in PLANTED[1:]
    ]  # every plant but "none"
    return rf.article_table(
        rows
        + [
            dict(
                effect="mixed plant: input + compute in one step",
                article="each cause found at its planted share (±10 points)",
                reference=_records(notes.get("mixed_split"), True),
                this_run=_records(mixed, True),
                why=""
                if notes.get("mixed_split")
                else "the reference run predates the mixed plant",
            ),
            dict(
                effect="each saving matches the doctor's claim",
                article="removing a plant saves its claimed share of the step",
                reference=_records(notes.get("claimed_vs_measured_saving"), False),
                this_run=_records(saved, False),
            ),
        ]
    )
