"""Notebook 02's tables and charts, read from its results rows: DataFrames from the ``*_table`` functions, the
``plot_*`` functions draw, save the figure next to results.json and show it."""
from __future__ import annotations

import math

import pandas as pd

from ...measure.compare import compare_times
from .experiment import predicted_samples_per_s

# the source article (A10G GPU, batch 256, 256x256 crops, 4 workers): step time in seconds, and this run's row
ARTICLE_STEP_S = {"baseline (4 workers)": 1.3, "8 workers": 1.17, "boolean dilation": 0.78, "crop first": 0.72,
                  "batch transforms in collate": 0.75}
ARTICLE_ROWS = {"baseline (4 workers)": "baseline", "boolean dilation": "bool_dilation", "crop first": "crop_first",
                "batch transforms in collate": "batch_collate"}
TRAIN_COLS = ["step_ms_mean", "samples_per_s", "step_ms_median", "step_ms_p25", "step_ms_p75", "first_step_ms",
              "data_wait_share", "peak_mem_mb"]


def _show(fig, results, name: str) -> None:
    import matplotlib.pyplot as plt
    results.savefig(fig, name), plt.show(), plt.close(fig)


def ms(results, name: str, key: str = "step_ms_mean") -> float:
    """A row's metric; NaN when the row failed or was skipped."""
    return results.metric(name, key, math.nan)


def one_run(results, name: str) -> tuple[list[float], list[float]]:
    """``(warm-up ms, timed ms)`` of ONE loader run of a row: the round whose mean is the median of its rounds."""
    m = results.metric(name, "round_means_ms") and results.get(name)["metrics"]
    if not m:
        return [], []
    k = sorted(range(len(m["round_means_ms"])), key=m["round_means_ms"].__getitem__)[len(m["round_means_ms"]) // 2]
    return m["round_warmup_ms"][k], m["round_times_ms"][k]


def sweep_table(results, rows, t_batch_row: str, ceiling_ms: float, batch_size: int):
    """``{num_workers: row}`` -> measured samples/s beside ``batch x min(N / T_batch, 1 / T_step)``, the prediction's
    range over T_batch's rounds (``predicted_low`` / ``_high``) and ``beats_prediction``: a point beats its prediction
    only above ``predicted_high`` AND beyond this run's noise (the step its prediction implies in each of T_batch's
    rounds against its round means: verdict "faster"). Either alone called points faster than their bound in runs
    here (the fastest round alone about one run in ten; the interval alone one run in four)."""
    ns, rounds = list(rows), results.metric(t_batch_row, "round_means_ms", [])

    def pred(n, t):
        return predicted_samples_per_s(n, t, ceiling_ms, batch_size) if t > 0 and ceiling_ms > 0 else math.nan

    def beats(n, measured, high):
        points = results.metric(rows[n], "round_means_ms", [])
        if not measured > high or len(rounds) < 2 or len(points) < 2:
            return bool(measured > high)
        implied = [1000.0 * batch_size / pred(n, t) for t in rounds]
        return compare_times(implied, points, a="prediction", b=rows[n])["verdict"] == "faster"

    df = pd.DataFrame({"num_workers": ns, "samples_per_s": [ms(results, rows[n], "samples_per_s") for n in ns],
                       "predicted_samples_per_s": [pred(n, ms(results, t_batch_row)) for n in ns],
                       "predicted_low": [pred(n, max(rounds, default=math.nan)) for n in ns],
                       "predicted_high": [pred(n, min(rounds, default=math.nan)) for n in ns]})
    df["beats_prediction"] = [beats(n, m, h) for n, m, h in zip(ns, df["samples_per_s"], df["predicted_high"])]
    df["measured_over_predicted"] = df["samples_per_s"] / df["predicted_samples_per_s"]
    return df


def plot_sweep(results, sweep, rows, ceiling_ms: float, batch_size: int, cores: int) -> None:
    """Left: ONE loader run per sweep point (warm-up shaded), the sawtooth. Right: measured against predicted."""
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 3.6))
    for n, name in rows.items():
        warm, t = one_run(results, name)
        if n and t:
            ax1.plot(range(len(warm) + len(t)), warm + t, marker=".", label=f"{n} worker(s), one run")
            ax1.axvspan(-0.5, len(warm) - 0.5, color="#eee", zorder=0)
    ax1.axhline(ceiling_ms, color="k", ls="--", label=f"ceiling {ceiling_ms:.0f} ms")
    ax1.set(yscale="log", xlabel="step (grey: warm-up, reported apart)", ylabel="step time (ms)",
            title="Baseline per-step times: the sawtooth")
    ax1.legend(fontsize=8)
    ax2.plot(sweep["num_workers"], sweep["samples_per_s"], "o-", label="measured")
    ax2.plot(sweep["num_workers"], sweep["predicted_samples_per_s"], "s--", label="predicted min(N/T_batch, 1/T_step)")
    ax2.fill_between(sweep["num_workers"], sweep["predicted_low"], sweep["predicted_high"], color="C1", alpha=0.15,
                     label="prediction over T_batch's rounds")
    ax2.axhline(batch_size * 1000 / ceiling_ms, color="k", ls="--", label="ceiling")
    ax2.axvline(cores, color="#c44", ls=":", label=f"{cores} CPU cores")
    ax2.set(xticks=list(sweep["num_workers"]), xlabel="num_workers", ylabel="samples/s", title="Worker sweep")
    ax2.legend(fontsize=7)
    _show(fig, results, "sawtooth_and_sweep")


def plot_stages(results, stages) -> None:
    """The stacked bar of where a sample's time goes (``stages``: variant x stage, ms per sample)."""
    import matplotlib.pyplot as plt
    if stages.empty:
        return
    fig, ax = plt.subplots(figsize=(8, 3.4))
    left = 0.0
    for col, colour in zip(stages.columns, plt.cm.tab10.colors):
        ax.barh(stages.index, stages[col], left=left, label=col, color=colour)
        left = left + stages[col].to_numpy()
    ax.invert_yaxis()
    ax.set(xlabel="ms per sample (single-process profile)", title="Where a sample's time goes, variant by variant")
    ax.legend(fontsize=8, ncol=2)
    _show(fig, results, "stages_per_variant")


def fixes_table(results, planned, t_batch_rows, num_workers: int, ceiling_ms: float, batch_size: int):
    """Each variant's ``T_batch``, mean step, samples/s measured and predicted (none without a ``T_batch``)."""
    t = [ms(results, t_batch_rows[v]) if v in t_batch_rows else math.nan for v in planned]
    df = pd.DataFrame({"variant": planned, "T_batch_ms": t, "step_ms_mean": [ms(results, v) for v in planned],
                       "samples_per_s": [ms(results, v, "samples_per_s") for v in planned],
                       "predicted_samples_per_s": [predicted_samples_per_s(num_workers, x, ceiling_ms, batch_size)
                                                   if x > 0 and ceiling_ms > 0 else math.nan for x in t]})
    df["measured_over_predicted"] = df["samples_per_s"] / df["predicted_samples_per_s"]
    return df


def summary(results):
    """Every training-loop row that ran, with the columns that have a value on this machine."""
    tab = results.table(TRAIN_COLS)
    tab = tab[tab["model"].eq(True) & tab["status"].eq("ok")] if "model" in tab else tab.iloc[:0]
    return tab[["experiment", "num_workers", *[c for c in TRAIN_COLS if c in tab]]].dropna(axis=1, how="all")


def plot_variants(results, planned, against: str = "baseline") -> None:
    """Each variant's speed-up over ``against``, its 95% interval as error bars and its verdict as the label."""
    import matplotlib.pyplot as plt
    comps = [(v, c) for v in planned if v != against and (c := results.comparison(against, v))]
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * max(len(comps), 1)))
    for y, (v, c) in enumerate(comps):
        colour = {"faster": "#4c72b0", "slower": "#c44"}.get(c["verdict"].split(",")[0], "#999")
        ax.barh(v, c["ratio"], xerr=[[c["ratio"] - c["low"]], [c["high"] - c["ratio"]]], color=colour, capsize=3)
        ax.text(c["high"], y, f"  {c['ratio']:.2f}× ({c['verdict']})", va="center", fontsize=8)
    if comps:
        ax.set_xlim(0, max(c["high"] for _, c in comps) * 1.35)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.invert_yaxis()
    ax.set(xlabel=f"samples/s ÷ {against}'s (interleaved rounds; bars: 95% interval)",
           title=f"Each variant's speed-up over the {against}")
    _show(fig, results, "variants")


def article_table(results, sweep_rows, num_workers: int):
    """The article's step times beside this run's, each as a ratio to its own baseline ("8 workers": the sweep at
    twice ``num_workers`` against its point at ``num_workers``), with the verdict of the same pair's comparison."""
    ours = {**ARTICLE_ROWS, "8 workers": sweep_rows.get(2 * num_workers)}
    base = {k: "baseline" for k in ARTICLE_STEP_S} | {"8 workers": sweep_rows.get(num_workers)}
    rows = []
    for k, s in ARTICLE_STEP_S.items():
        c = results.comparison(base[k], ours[k]) if ours[k] and base[k] and ours[k] != base[k] else None
        rows.append({"step": k, "article_step_s": s, "article_ratio": s / ARTICLE_STEP_S["baseline (4 workers)"],
                     "this_run_step_ms": ms(results, ours[k]) if ours[k] else math.nan,
                     "this_run_ratio": ms(results, ours[k]) / ms(results, base[k]) if ours[k] and base[k] else math.nan,
                     "this_run_verdict": c["verdict"] if c else None})
    return pd.DataFrame(rows)
