"""Notebook 05's tables and chart: the planted cases' verdicts, the same as bars split into causes, the results."""

from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from perf_doctor.diagnosis import CAUSES

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

    ms = verdicts.reindex(columns=list(CAUSES)).apply(pd.to_numeric, errors="coerce").fillna(0.0)
    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.6 * max(len(verdicts), 1)))
    drawn = ms.loc[:, ms.gt(0).any()]
    if not drawn.empty:
        drawn.plot.barh(stacked=True, ax=ax, xlabel=xlabel, title="causes per step")
        ax.invert_yaxis()
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def results_view(results, ref=None):
    """The results table's informative columns: name, mean step, top cause, ms per cause, status; with ``ref``, the
    reference's mean step beside each row (``reference.add_column``)."""
    from ...notebook import reference

    t = results.table(METRICS)
    t = t[[c for c in ["experiment", *METRICS, "status"] if c in t.columns]].dropna(
        axis="columns", how="all"
    )
    return reference.add_column(t, ref, "step_ms_mean") if ref is not None else t


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


def _number(x) -> bool:
    """A number, not None or NaN."""
    return isinstance(x, (int, float)) and x == x


def _records(records, mixed: bool) -> tuple[str | None, str]:
    """``saved_vs_claimed`` records as one cell: the mixed plant's split, or how many savings matched the claim; each
    with the rule it was judged by (the found share within 10 points of the planted share's 95% interval)."""
    if not records:
        return None, ""
    ok = "yes" if all(r.get("agrees") is True for r in records) else "no"
    if not mixed:
        n = sum(r.get("agrees") is True for r in records)
        return f"{n} of {len(records)} claims within 10 points of the saving's 95% interval", ok

    def one(r):
        if not _number(r.get("saved share")):
            return f"{r['planted']} found {r['claimed share']:.0%}, planted: not resolved"
        band = f"; must lie in {r['rule']}" if r.get("rule") else ""
        return (
            f"{r['planted']} found {r['claimed share']:.0%}, planted {r['saved share']:.0%} "
            f"(95% {r['saved share low']:.0%}–{r['saved share high']:.0%}{band})"
        )

    return "; ".join(one(r) for r in records), ok


FULL_SIZES = {
    "input": "input_ms",
    "launch/overhead": "tiny_ops",
    "compute": "matmul",
    "host sync": "sync_ms",
}


def planted_table(
    metric, ref, sizes_here: dict, sizes_full: dict | None = None, *, saved=None, mixed=None
):
    """What was planted against what the doctor found (``reference.article_table``): the reference's full-scale rows
    (``sizes_full``: the full scale's, by default) beside this run's (a CPU-only run cannot judge syncs)."""
    from ...notebook import reference as rf
    from ...notebook.sizes import DIAGNOSE
    from .experiment import PLANTED, case_name

    full = sizes_full or {k: DIAGNOSE["full"][v] for k, v in FULL_SIZES.items()}
    ref_metric = ref.metric if ref is not None else (lambda *_: None)
    notes = (ref.doc.get("notes") or {}) if ref is not None else {}
    rows = [
        dict(
            effect=f"planted {k}",
            article="a host-sync finding beside the product it waits for"
            if k == "host sync"
            else f"{k}: the top cause",
            reference=_found(ref_metric, case_name(k, full.get(k)), k),
            this_run=_found(metric, case_name(k, sizes_here[k]), k) if k in sizes_here else None,
            why=""
            if k in sizes_here or k != "host sync"
            else "a CPU-only trace cannot judge syncs",
        )
        for k in PLANTED[1:]  # every plant but "none"
    ]
    rows.append(
        dict(
            effect="mixed plant: input + compute in one step",
            article="each found share within 10 points of its planted share's 95% interval",
            reference=_records(notes.get("mixed_split"), True),
            this_run=_records(mixed, True),
            why="" if notes.get("mixed_split") else "the reference run predates the mixed plant",
        )
    )
    rows.append(
        dict(
            effect="each saving matches the doctor's claim",
            article="removing a plant saves its claimed share of the step",
            reference=_records(notes.get("claimed_vs_measured_saving"), False),
            this_run=_records(saved, False),
        )
    )
    return rf.article_table(rows)


def shares_view(saved, found: str = "claimed", planted: str = "saved"):
    """``saved_vs_claimed`` as read: each share, the saving's 95% interval and the band the check requires."""

    def pct(x):
        return f"{x:.0%}" if _number(x) else "–"

    out = pd.DataFrame(
        {
            "cause": saved["planted"],
            f"{found} share": [pct(x) for x in saved["claimed share"]],
            f"{planted} share": [pct(x) for x in saved["saved share"]],
            f"{planted} 95%": [
                f"{lo:.0%}–{hi:.0%}" if _number(lo) and _number(hi) else "not resolved"
                for lo, hi in zip(saved["saved share low"], saved["saved share high"])
            ],
            f"{found} must lie in": saved["rule"].fillna("–"),
            "agrees": saved["agrees"],
        }
    )
    return out


def bound_table(diagnoses: Mapping[Any, Any]):
    """GPU traces' steps: the bound label from GPU idle time beside the CPU and device spans, which it ignores."""
    rows = [
        {
            "trace": Path(path).parts[-3],
            "top cause": d.top,
            "step (ms)": d.step_ms,
            "GPU idle": f"{d.gpu_idle_share:.0%}",
            "bound (GPU idle)": d.bound,
            "CPU span (ms)": d.host_ms,
            "device span (ms)": d.device_ms,
        }
        for path, d in diagnoses.items()
        if d.gpu_idle_share is not None
    ]
    return pd.DataFrame(rows)
