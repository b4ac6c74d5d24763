"""Notebook 05's tables and chart: the planted cases' verdicts, the same as bars split into causes, the results."""
from __future__ import annotations

from typing import Any, Mapping

from ...traces.diagnosis import CAUSES

COLORS = {"input": "#dd8452", "host sync": "#c44e52", "launch/overhead": "#8172b3", "compute": "#4c72b0",
          "memory": "#937860", "communication": "#55a868"}
METRICS = ["step_ms_mean", "top_cause", *[f"{c}_ms" for c in CAUSES], "causes_ms_sum"]


def verdicts_table(planted: Mapping[str, Any]):
    """One row per planted case that ran (indexed by the plant): top cause, mean step, ms per cause (None: cannot
    judge) and the causes' sum."""
    import pandas as pd

    rows = [{"planted": kind, "top cause": d.top, "step (ms)": d.step_ms, **{c["cause"]: c["ms"] for c in d.causes},
             "causes sum (ms)": sum(c["ms"] or 0 for c in d.causes)} for kind, d in planted.items() if d is not None]
    return pd.DataFrame(rows, columns=None if rows else ["planted", "top cause", "step (ms)", "causes sum (ms)"]
                        ).set_index("planted")


def verdicts_chart(verdicts, xlabel: str):
    """Each planted step as one bar split into causes; a cause that cannot be judged draws nothing (and has no
    legend entry). Returns the figure."""
    import matplotlib.pyplot as plt
    import pandas as pd

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
    """The results table with its informative columns only: name, mean step, top cause, ms per cause, status (no
    configs, no errors, no column that no row fills)."""
    t = results.table(METRICS)
    return t[[c for c in ["experiment", *METRICS, "status"] if c in t.columns]].dropna(axis="columns", how="all")
