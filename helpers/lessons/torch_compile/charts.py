"""The figures of ``04_torch_compile``: the matrix (speed-ups, compile timer against the first steps, loss curves)
and the article beside this run. Each returns a matplotlib figure (the notebook saves and shows it)."""
from __future__ import annotations

from typing import Sequence


def matrix_chart(final, results, models: Sequence[str], t_word: str, compile_steps: int):
    """Three panels over the successful cells of ``models`` in ``final`` (``report.summary_frame``): the steady
    speed-up over eager (``t_word`` medians), Dynamo's compile timer against the first ``compile_steps`` steps' wall
    time, and the loss curves of the first model's cells (from the rows of ``results``)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    okf = final[(final.status == "ok") & final.model.isin(set(models))]
    labels = [f"{r.model}\n{r.precision} {r['mode']}" for _, r in okf.iterrows()]
    speedups = okf.speedup.fillna(0) if "speedup" in okf.columns else [0.0] * len(okf)
    err = None
    if "speedup_low" in okf.columns:  # the comparisons' 95% intervals (none for eager: it is the baseline)
        low = okf.speedup_low.fillna(okf.speedup).fillna(0).to_numpy(float)
        high = okf.speedup_high.fillna(okf.speedup).fillna(0).to_numpy(float)
        sp = okf.speedup.fillna(0).to_numpy(float)
        err = [sp - low, high - sp]
    axes[0].bar(range(len(okf)), speedups, color=["#999" if m == "eager" else "#4c72b0" for m in okf["mode"]],
                yerr=err, capsize=3)
    axes[0].axhline(1.0, color="k", lw=0.8)
    axes[0].set_xticks(range(len(okf)), labels, rotation=60, ha="right", fontsize=7)
    for i, v in enumerate(speedups):
        axes[0].text(i, v, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
    axes[0].set_title(f"speed-up over eager ({t_word} medians, 95% interval)")
    comp = okf[okf.compile_s.notna()] if "compile_s" in okf.columns else okf.iloc[:0]
    ypos = range(len(comp))
    axes[1].barh([y + 0.2 for y in ypos], comp.first_steps_s, height=0.4, color="#dd8452",
                 label=f"first {compile_steps} steps (wall)")
    axes[1].barh([y - 0.2 for y in ypos], comp.compile_s, height=0.4, color="#55a868", label="Dynamo compile timer")
    axes[1].set_yticks(list(ypos), [c.replace(" bs=", "\nbs=") for c in comp.cell], fontsize=7)
    axes[1].set_xlabel("s")
    axes[1].legend(fontsize=7)
    axes[1].set_title("compile: the timer vs the first steps")
    first = okf[okf.model == models[0]]
    for _, r in first.iterrows():
        axes[2].plot(results.get(r.cell)["metrics"]["losses"], label=f"{r.precision} {r['mode']}",
                     ls="--" if r["mode"] != "eager" else "-")
    worst = first.max_rel_loss_diff.max() if "max_rel_loss_diff" in first.columns else float("nan")
    axes[2].set_title(f"loss curves, {models[0]} (max rel. diff {worst:.1e})")
    axes[2].set_xlabel("step")
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    return fig


def article_chart(side):
    """Speed-ups over each one's own eager baseline (``report.article_side_table``): the article's whole runs, this
    run's (and a reference's) steady steps with their 95% intervals as error bars; None when no row has a number."""
    import matplotlib.pyplot as plt
    import numpy as np

    rows = side[side.speedup.notna()].reset_index(drop=True)
    if not len(rows):
        return None
    ratio = rows.speedup.astype(float).to_numpy()
    lo, hi = ratio.copy(), ratio.copy()
    for i, iv in enumerate(rows["95% interval"]):
        if isinstance(iv, str) and "–" in iv:
            lo[i], hi[i] = (float(v) for v in iv.split("–"))
    colors = ["#999" if s.startswith("article") else "#4c72b0" if s.startswith("this run") else "#55a868"
              for s in rows.source]
    fig, ax = plt.subplots(figsize=(7.5, 0.5 + 0.45 * len(rows)))
    y = np.arange(len(rows))
    ax.barh(y, ratio, color=colors, xerr=np.vstack([ratio - lo, hi - ratio]), capsize=3)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_yticks(y, [f"{c}\n({s.split(' (')[0]})" for c, s in zip(rows.cell, rows.source)], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("speed-up over its own eager run (article: whole run; this run: steady steps, 95% interval)")
    ax.set_title("the article's figures beside this run's", fontsize=9)
    fig.tight_layout()
    return fig
