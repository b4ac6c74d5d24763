"""Notebook 02's tables and charts, read from its results rows: the sample before and after the transforms, the
sweep against its prediction and the sawtooth, the stages re-profiled after each fix, the fixes with their
``T_batch``, the DataLoader options, the idle shares, the variants against the ceiling, the source article's figures
beside this run's, the bad-input rows and the panel's rows.

``Report`` is a mixin of ``lab.Lab``: it reads the lab's settings (``batch_size``, ``num_workers``, ``crop``,
``cores``, ``stand_in``, ``device``, ``paths``, ``seed``), its ``results``, ``stages``, ``ms`` and ``ceiling_ms``.
Computing is apart from drawing: the ``*_table`` methods return DataFrames; the ``plot_*`` methods draw, save the
figure next to results.json and show it.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from ...notebook.display import readable
from . import loop

# the source article (A10G GPU, batch 256, 256x256 crops, 4 workers): step time in seconds, as it reports them
ARTICLE_STEP_S = {"baseline (4 workers)": 1.3, "8 workers": 1.17, "boolean dilation": 0.78, "crop first": 0.72,
                  "batch transforms in collate": 0.75}
ARTICLE_ROWS = {"baseline (4 workers)": "baseline", "boolean dilation": "bool_dilation", "crop first": "crop_first",
                "batch transforms in collate": "batch_collate"}   # "8 workers": the sweep's point at 2 x num_workers

TRAIN_COLS = ["step_ms_mean", "samples_per_s", "step_ms_median", "step_ms_p25", "step_ms_p75",
              "first_step_ms", "data_wait_share", "peak_mem_mb"]
PANEL_COLS = ["step_ms_mean", "samples_per_s", "step_ms_median"]


def _show(fig, results, name: str) -> None:
    import matplotlib.pyplot as plt

    results.savefig(fig, name)
    plt.show()
    plt.close(fig)


class Report:
    """Tables and charts of a ``Lab``'s rows (see the module's docstring)."""

    def _device_words(self) -> str:
        from ...notebook.env import device_name

        return "stand-in device step, not a GPU" if self.stand_in else device_name(self.device)

    # -- the data ----------------------------------------------------------------------------------
    def show_sample(self, index: int = 0) -> None:
        """A sample image beside what the baseline's transforms make of it (the Y channel of the crop)."""
        import matplotlib.pyplot as plt
        import torch

        from .data import build_transform, load_image

        path = self.paths[index]
        img = load_image(path)
        torch.manual_seed(self.seed)
        sample = build_transform("baseline", self.crop)(img)
        fig, axes = plt.subplots(1, 2, figsize=(8, 2.8))
        axes[0].imshow(img)
        axes[0].set_title(f"{path.name}: {img.width}x{img.height}")
        axes[1].imshow(sample[0].numpy(), cmap="gray")
        axes[1].set_title(f"after the transforms: Y channel, {self.crop}x{self.crop}")
        for a in axes:
            a.axis("off")
        plt.show()
        plt.close(fig)

    # -- the sweep ---------------------------------------------------------------------------------
    def sweep_table(self, rows: Mapping[int, str], t_batch_ms: float, t_batch_rounds: Iterable[float] = ()):
        """``{num_workers: row}`` -> measured samples/s beside ``batch x min(N / T_batch, 1 / T_step)``, and
        ``measured_over_predicted``. With ``t_batch_rounds`` (T_batch's round means, measured in the same rounds as
        the points) also the prediction's range over them (``predicted_low`` from the slowest round, ``_high`` from
        the fastest): how far the prediction itself moved while the points were measured; and ``beats_prediction``:
        whether the point beats its prediction both even at T_batch's fastest round (above ``predicted_high``) and
        beyond this run's noise (``compare.compare_times`` of the step the prediction implies in each of T_batch's
        rounds against the point's round means: verdict "faster"; a point without round means is judged by
        ``predicted_high`` alone). Each alone called a point faster than its bound in runs here: the fastest round
        alone in about one run in ten (a 1-worker point whose mean passed it on one lucky round), the interval alone
        in one run of four (a 0-worker point 1.05x its prediction, its interval just above 1, yet below the
        fastest round's prediction)."""
        import pandas as pd

        from ...measure.compare import compare_times

        ceiling, ns = self.ceiling_ms(), list(rows)
        pred = lambda n, t: loop.predicted_samples_per_s(n, t, ceiling, self.batch_size)  # noqa: E731
        df = pd.DataFrame({"num_workers": ns, "samples_per_s": [self.ms(rows[n], "samples_per_s") for n in ns],
                           "predicted_samples_per_s": [pred(n, t_batch_ms) for n in ns]})
        rounds = [float(t) for t in t_batch_rounds]
        if rounds:
            df["predicted_low"] = [pred(n, max(rounds)) for n in ns]
            df["predicted_high"] = [pred(n, min(rounds)) for n in ns]

            def beats(n: int, measured: float, high: float) -> bool:
                points = self.results.metric(rows[n], "round_means_ms", []) or []
                if not measured > high:
                    return False
                if len(rounds) >= 2 and len(points) >= 2:
                    implied = [1000.0 * self.batch_size / pred(n, t) for t in rounds]   # ms a step, per round
                    return compare_times(implied, points, a="prediction", b=rows[n])["verdict"] == "faster"
                return True

            df["beats_prediction"] = [beats(n, m, h) for n, m, h in
                                      zip(ns, df["samples_per_s"], df["predicted_high"])]
        df["measured_over_predicted"] = df["samples_per_s"] / df["predicted_samples_per_s"]
        return df

    @staticmethod
    def bound_sentence(sweep) -> str:
        """Whether each measured point respects its prediction (an upper bound: workers have overheads the pipeline
        alone has not, a batch through shared memory, and share the cores), computed from ``sweep_table``."""
        judged = "beats_prediction" in sweep   # T_batch's rounds were given: judged against the rounds' noise
        over = sweep[sweep["beats_prediction"].astype(bool) if judged else
                     sweep["samples_per_s"] > sweep["predicted_samples_per_s"]]
        ratios = ", ".join(f"{int(n)} worker(s) {r:.2f}" for n, r in
                           zip(sweep["num_workers"], sweep["measured_over_predicted"]))
        head = f"Measured ÷ predicted: {ratios}. "
        if over.empty:
            within = (", or above it only within T_batch's range or this run's noise (the point's rounds against "
                      "the prediction in T_batch's rounds, 95% interval)") if judged else ""
            return head + ("Every point is at or below its prediction" + within + ": the prediction is a bound this "
                           "run respects; where a point falls well below it, the workers lose time the pipeline "
                           "alone does not (sharing the cores, shipping each batch through shared memory).")
        names = ", ".join(str(int(n)) for n in over["num_workers"])
        return head + (f"The point(s) with {names} worker(s) beat the prediction "
                       + ("even at T_batch's fastest round and beyond this run's noise (95% interval over the rounds), "
                          if judged else "")
                       + "so in this run the prediction is not a bound there. T_batch was measured in the same "
                       "rounds, so this is not drift between the two; the pipeline alone runs in the main process and "
                       "the points in worker processes, and on a machine shared with other programs the two need not "
                       "get the same share of the cores. Read the prediction as a guide here, not a bound.")

    @staticmethod
    def _typical_round(m: Mapping[str, Any]) -> int:
        """The round whose mean is the median of the round means (one loader run, drawn alone)."""
        means = m.get("round_means_ms") or [0.0]
        order = sorted(range(len(means)), key=means.__getitem__)
        return order[len(order) // 2]

    def one_run(self, name: str) -> tuple[list[float], list[float]]:
        """``(warm-up ms, timed ms)`` of ONE loader run of row ``name`` (the typical round of an interleaved row)."""
        row = self.results.get(name)
        m = row["metrics"] if row and row["status"] == "ok" else {}
        if "round_times_ms" in m:
            k = self._typical_round(m)
            return m["round_warmup_ms"][k], m["round_times_ms"][k]
        return m.get("warmup_ms", []), m.get("times_ms", [])

    def waves_sentence(self, name: str, num_workers: int) -> str:
        """The sawtooth of one loader run in numbers: how many of its timed steps are long (above the midpoint of the
        shortest and longest), the mean and the median, and why they differ or not with this many workers."""
        import statistics

        _, t = self.one_run(name)
        if not t:
            return f"No timed steps for {name} (its row failed)."
        mid = (min(t) + max(t)) / 2
        long = sum(x > mid for x in t)
        mean, median = statistics.fmean(t), statistics.median(t)
        text = (f"One loader run of `{name}` ({len(t)} timed steps): **{long} long** step(s) (above {mid:.0f} ms), "
                f"{len(t) - long} short; mean **{mean:.1f} ms**, median **{median:.1f} ms**. ")
        if long * 2 < len(t):
            return text + ("Fewer than half the steps wait for a wave, so the median is a short step: it hides the "
                           f"stall that the mean ({mean / median:.2f}× the median) counts.")
        if num_workers == 2:
            return text + ("With 2 workers a wave is one long step and one short: half the steps are long, so the "
                           f"median falls between the two kinds (the mean is {mean / median:.2f}× it). With 3 or more "
                           "workers fewer than half the steps are long and the median becomes a short step that hides "
                           "the stall; the mean counts it whatever the worker count.")
        return text + ("Half or more of the steps are long here, so the median does not hide the stall in this run; "
                       "the mean still counts every step.")

    def plot_sweep(self, sweep, rows: Mapping[int, str]) -> None:
        """Left: ONE loader run per sweep point (its warm-up shaded), the sawtooth. Right: measured samples/s (error
        bars: the fastest and slowest round) and the prediction against the workers, the ceiling, the core count."""
        import matplotlib.pyplot as plt

        ceiling = self.ceiling_ms()
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 3.6))
        for n, name in rows.items():
            warm, t = self.one_run(name)
            if n == 0 or not t:
                continue
            ax1.plot(range(len(warm) + len(t)), warm + t, marker=".", label=f"{n} worker(s), one run")
            ax1.axvspan(-0.5, len(warm) - 0.5, color="#eee", zorder=0)
        ax1.axhline(ceiling, color="k", ls="--", label=f"ceiling {ceiling:.0f} ms")
        ax1.set_yscale("log")
        ax1.set_xlabel("step (grey: warm-up, reported apart)")
        ax1.set_ylabel("step time (ms)")
        ax1.set_title("Baseline per-step times: the sawtooth")
        ax1.legend(fontsize=8)
        y = sweep["samples_per_s"].to_numpy(dtype=float)
        means = [self.results.metric(rows[n], "round_means_ms") or [self.ms(rows[n])] for n in sweep["num_workers"]]
        lo = [min(y0, self.batch_size * 1000 / max(m)) for y0, m in zip(y, means)]
        hi = [max(y0, self.batch_size * 1000 / min(m)) for y0, m in zip(y, means)]
        ax2.errorbar(sweep["num_workers"], y, yerr=[y - lo, hi - y], fmt="o-", capsize=3,
                     label="measured (bars: slowest–fastest round)")
        ax2.plot(sweep["num_workers"], sweep["predicted_samples_per_s"], "s--", label="predicted min(N/T_batch, 1/T_step)")
        if "predicted_low" in sweep:
            ax2.fill_between(sweep["num_workers"], sweep["predicted_low"], sweep["predicted_high"], color="C1",
                             alpha=0.15, label="prediction over T_batch's rounds")
        ax2.axhline(self.batch_size * 1000 / ceiling, color="k", ls="--", label="ceiling")
        ax2.axvline(self.cores, color="#c44", ls=":", label=f"{self.cores} CPU cores")
        ax2.set_xticks(list(sweep["num_workers"]))
        ax2.set_xlabel("num_workers")
        ax2.set_ylabel("samples/s")
        ax2.set_title(f"Worker sweep ({'stand-in device' if self.stand_in else self.device.type})")
        ax2.legend(fontsize=7)
        _show(fig, self.results, "sawtooth_and_sweep")

    # -- the re-profiles ---------------------------------------------------------------------------
    def stages_table(self):
        """Per-sample ms of each stage (columns) for each re-profiled variant (rows, in order); empty stages left out."""
        import pandas as pd

        df = pd.DataFrame(self.stages).T.loc[list(self.stages)]
        if df.empty:
            return df
        return df.loc[:, df.sum() > 0]

    def plot_stages(self) -> None:
        """The stacked bar of where a sample's time goes, variant by variant (from each single-process profile)."""
        import matplotlib.pyplot as plt
        import numpy as np

        df = self.stages_table()
        if df.empty:
            print("no re-profiled variant (their rows failed): no chart of the stages")
            return
        fig, ax = plt.subplots(figsize=(8, 3.4))
        left = np.zeros(len(df))
        for col, colour in zip(df.columns, plt.cm.tab10.colors):
            ax.barh(df.index, df[col], left=left, label=col, color=colour)
            left += df[col].to_numpy()
        ax.invert_yaxis()
        ax.set_xlabel("ms per sample (single-process profile)")
        ax.legend(fontsize=8, ncol=2)
        ax.set_title("Where a sample's time goes, variant by variant")
        _show(fig, self.results, "stages_per_variant")

    def slowest_stages(self) -> dict[str, str]:
        """Each re-profiled variant's slowest stage (noted in results.json as ``slowest_stage_per_variant``)."""
        slowest = {v: max(s, key=s.get) for v, s in self.stages.items()}
        self.results.note("slowest_stage_per_variant", slowest)
        return slowest

    # -- the variants ------------------------------------------------------------------------------
    def fixes_table(self, variants: Iterable[str], t_batch: Mapping[str, float]):
        """Each variant's ``T_batch`` (its pipeline alone, measured in the same rounds), mean step, samples/s measured
        and predicted, and measured ÷ predicted.
        ``gpu_decode`` gets no prediction: its decode runs in the main process, not in the workers."""
        import pandas as pd

        def predicted(v):
            if v == "gpu_decode":
                return float("nan")
            return loop.predicted_samples_per_s(self.num_workers, t_batch[v], self.ceiling_ms(), self.batch_size)

        df = pd.DataFrame([{"variant": v, "T_batch_ms": t_batch[v], "step_ms_mean": self.ms(v),
                            "samples_per_s": self.ms(v, "samples_per_s"), "predicted_samples_per_s": predicted(v)}
                           for v in variants]).set_index("variant")
        df["measured_over_predicted"] = df["samples_per_s"] / df["predicted_samples_per_s"]
        return df

    def options_table(self, variant: str):
        """The rows ``<variant> ...`` that ran (the variant measured beside its DataLoader options, in the same
        rounds): mean step, first step (start-up) and samples/s."""
        import pandas as pd

        names = [r["name"] for r in self.results.experiments if r["name"].startswith(f"{variant} ") and r["status"] == "ok"]
        return pd.DataFrame([{"experiment": n, "step_ms_mean": self.ms(n), "first_step_ms": self.ms(n, "first_step_ms"),
                              "samples_per_s": self.ms(n, "samples_per_s")} for n in names],
                            columns=["experiment", "step_ms_mean", "first_step_ms", "samples_per_s"]).set_index("experiment")

    def idle_table(self, idle: Mapping[str, Mapping[str, Any]]):
        """The trace's wait share beside the timed loop's, in %, and HTA's GPU idle share where there is a GPU
        (the column is left out on a CPU: there is no GPU to be idle)."""
        import pandas as pd

        df = pd.DataFrame([{"variant": v, "trace_wait_pct": 100 * d["share"],
                            "timed_wait_pct": 100 * self.ms(v, "data_wait_share"),
                            "gpu_idle_hta_pct": 100 * d.get("gpu_idle_share", float("nan"))} for v, d in idle.items()],
                          columns=["variant", "trace_wait_pct", "timed_wait_pct", "gpu_idle_hta_pct"])
        return df if df["gpu_idle_hta_pct"].notna().any() else df.drop(columns="gpu_idle_hta_pct")

    def summary(self, planned: Iterable[str]):
        """Every training-loop row that ran (the re-measured ceiling aside): the ceiling and ``planned`` first, in
        that order, then the others; ``TRAIN_COLS`` with the workers, the columns with no value here left out (which
        device step every row used is said once, beside the table, not in a column)."""
        import pandas as pd

        tab = self.results.table(TRAIN_COLS)
        if tab.empty or "model" not in tab:
            return pd.DataFrame(columns=["num_workers", *TRAIN_COLS]).rename_axis("experiment")
        tab = tab[tab["model"].eq(True) & tab["status"].eq("ok") & tab["experiment"].ne("ceiling (re-measured)")]
        order = ["ceiling", *planned]
        tab = pd.concat([tab.set_index("experiment").loc[[e for e in order if e in set(tab["experiment"])]].reset_index(),
                         tab[~tab["experiment"].isin(order)]])
        tab = tab[["experiment", "num_workers", *[c for c in TRAIN_COLS if c in tab]]].set_index("experiment")
        if "data_wait_share" in tab:   # a share reads as a percentage
            tab.insert(list(tab.columns).index("data_wait_share"), "data_wait_pct", 100 * tab.pop("data_wait_share"))
        return tab.loc[:, tab.notna().any()]   # only columns with a value on this machine (no peak memory on a CPU)

    def plot_variants(self, planned: Iterable[str], against: str = "baseline") -> None:
        """Each planned variant's speed-up over ``against`` in samples/s (= the ratio of mean step times, from the
        comparison of their interleaved rounds), with its 95% interval as error bars and its verdict as the label."""
        import matplotlib.pyplot as plt

        comps = [(v, self.results.comparison(against, v)) for v in planned if v != against]
        comps = [(v, c) for v, c in comps if c is not None]
        fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * max(len(comps), 1)))
        if comps:
            names = [v for v, _ in comps]
            r = [c["ratio"] for _, c in comps]
            err = [[c["ratio"] - c["low"] for _, c in comps], [c["high"] - c["ratio"] for _, c in comps]]
            colours = ["#4c72b0" if c["verdict"] == "faster" else "#c44" if c["verdict"] == "slower" else "#999"
                       for _, c in comps]
            ax.barh(names, r, xerr=err, color=colours, capsize=3)
            for y, (_, c) in enumerate(comps):
                ax.text(c["high"], y, f"  {c['ratio']:.2f}× ({c['verdict']})", va="center", fontsize=8)
            ax.set_xlim(0, max(c["high"] for _, c in comps) * 1.35)
        ax.axvline(1.0, color="k", lw=0.8)
        ax.invert_yaxis()
        ax.set_xlabel(f"samples/s ÷ {against}'s (interleaved rounds; bars: 95% interval), "
                      f"{self.num_workers} workers, batch {self.batch_size}")
        ax.set_title(f"Each variant's speed-up over the {against} ({self._device_words()})")
        _show(fig, self.results, "variants")

    def article_table(self, sweep_rows: Mapping[int, str]):
        """The source article's step times (``ARTICLE_STEP_S``) beside this run's, each as a ratio to its own
        baseline. The article's "8 workers" is the sweep's point at 2 x ``num_workers``, against the sweep's own
        point at ``num_workers``; the fixes against the baseline they were measured with, in the same rounds."""
        import pandas as pd

        ours = {**ARTICLE_ROWS, "8 workers": sweep_rows.get(2 * self.num_workers)}   # None: NaN (ms of no row)
        base_of = {k: "baseline" for k in ARTICLE_STEP_S} | {"8 workers": sweep_rows.get(self.num_workers)}
        base = ARTICLE_STEP_S["baseline (4 workers)"]
        src = pd.DataFrame({"article_step_s": ARTICLE_STEP_S,
                            "article_ratio": {k: v / base for k, v in ARTICLE_STEP_S.items()},
                            "this_run_step_ms": {k: self.ms(ours[k]) for k in ARTICLE_STEP_S}})
        src["this_run_ratio"] = [src.loc[k, "this_run_step_ms"] / self.ms(base_of[k]) for k in src.index]
        # the verdict of the same pair's comparison (interleaved rounds), where this run made one: a ratio is a finding
        # only with it; None (shown as "–") where there is no such comparison
        verdicts = {}
        for k in src.index:
            c = self.results.comparison(base_of[k], ours[k]) if ours[k] and base_of[k] and k != "baseline (4 workers)" else None
            verdicts[k] = c["verdict"] if c else None
        src["this_run_verdict"] = pd.Series(verdicts)
        src.index.name = "step"
        return src

    # -- failures and the panel --------------------------------------------------------------------
    @staticmethod
    def rows_table(rows: Iterable[Mapping[str, Any]]):
        """Rows as name, status and error (the bad-input rows)."""
        import pandas as pd

        return pd.DataFrame([{"experiment": r["name"], "status": r["status"], "error": r["error"]} for r in rows],
                            columns=["experiment", "status", "error"]).set_index("experiment")

    def panel_table(self, last: int = 6):
        """The baseline and the panel's rows (its last ``last``), readable; the index is the row's number."""
        t = self.results.table(PANEL_COLS)
        t = t[t["experiment"].eq("baseline") | t["experiment"].str.startswith("panel ")]
        cols = ["experiment", "num_workers", "batch_size", "status", *[c for c in (*PANEL_COLS, "error") if c in t]]
        return readable(t[cols]).sort_index().tail(last)
