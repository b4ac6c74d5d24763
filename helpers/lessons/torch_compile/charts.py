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
    axes[0].bar(range(len(okf)), speedups, color=["#999" if m == "eager" else "#4c72b0" for m in okf["mode"]])
    axes[0].axhline(1.0, color="k", lw=0.8)
    axes[0].set_xticks(range(len(okf)), labels, rotation=60, ha="right", fontsize=7)
    for i, v in enumerate(speedups):
        axes[0].text(i, v, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
    axes[0].set_title(f"steady-state speed-up over eager ({t_word} medians)")
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
    """The article's whole-run speed-ups beside this run's steady and article-length ones, for the article's cells
    that this run has (``report.article_side_table``); None when it has none of them."""
    import matplotlib.pyplot as plt

    both = side[side.article_speedup.notna() & side.this_run_steady_speedup.notna()]
    if not len(both):
        return None
    fig, ax = plt.subplots(figsize=(6.5, 3))
    xs = range(len(both))
    ax.bar([x - 0.27 for x in xs], both.article_speedup, width=0.27, label="article (V100, whole run)", color="#999")
    ax.bar(list(xs), both.this_run_steady_speedup.astype(float), width=0.27, label="this run, steady state",
           color="#4c72b0")
    ax.bar([x + 0.27 for x in xs], both.this_run_whole_run_speedup.astype(float), width=0.27,
           label="this run, article-length run", color="#55a868")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(list(xs), [f"{r.model} {r.precision}" for _, r in both.iterrows()])
    ax.set_ylabel("speed-up over own eager")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
