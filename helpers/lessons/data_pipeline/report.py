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

TRAIN_COLS = ["step_ms_mean", "samples_per_s", "x_ceiling", "step_ms_median", "step_ms_p25", "step_ms_p75",
              "first_step_ms", "data_wait_share", "peak_mem_mb"]
PANEL_COLS = ["step_ms_mean", "samples_per_s", "x_ceiling", "step_ms_median"]


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
    def sweep_table(self, rows: Mapping[int, str], t_batch_ms: float):
        """``{num_workers: row}`` -> measured samples/s beside ``batch x min(N / T_batch, 1 / T_step)``."""
        import pandas as pd

        ceiling, ns = self.ceiling_ms(), list(rows)
        return pd.DataFrame({"num_workers": ns,
                             "samples_per_s": [self.ms(rows[n], "samples_per_s") for n in ns],
                             "predicted_samples_per_s": [loop.predicted_samples_per_s(n, t_batch_ms, ceiling,
                                                                                      self.batch_size) for n in ns]})

    def plot_sweep(self, sweep, rows: Mapping[int, str]) -> None:
        """Left: each sweep point's per-step times (warm-up shaded), the sawtooth. Right: measured and predicted
        samples/s against the workers, the ceiling and the core count."""
        import matplotlib.pyplot as plt

        ceiling = self.ceiling_ms()
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 3.6))
        for n, name in rows.items():
            row = self.results.get(name)
            m = row["metrics"] if row else {}
            if n == 0 or "times_ms" not in m:
                continue
            t = m["warmup_ms"] + m["times_ms"]
            ax1.plot(range(len(t)), t, marker=".", label=f"{n} worker(s)")
            ax1.axvspan(-0.5, len(m["warmup_ms"]) - 0.5, color="#eee", zorder=0)
        ax1.axhline(ceiling, color="k", ls="--", label=f"ceiling {ceiling:.0f} ms")
        ax1.set_yscale("log")
        ax1.set_xlabel("step (grey: warm-up, reported apart)")
        ax1.set_ylabel("step time (ms)")
        ax1.set_title("Baseline per-step times: the sawtooth")
        ax1.legend(fontsize=8)
        ax2.plot(sweep["num_workers"], sweep["samples_per_s"], "o-", label="measured")
        ax2.plot(sweep["num_workers"], sweep["predicted_samples_per_s"], "s--", label="predicted min(N/T_batch, 1/T_step)")
        ax2.axhline(self.batch_size * 1000 / ceiling, color="k", ls="--", label="ceiling")
        ax2.axvline(self.cores, color="#c44", ls=":", label=f"{self.cores} CPU cores")
        ax2.set_xlabel("num_workers")
        ax2.set_ylabel("samples/s")
        ax2.set_title(f"Worker sweep ({'stand-in device' if self.stand_in else self.device.type})")
        ax2.legend(fontsize=8)
        _show(fig, self.results, "sawtooth_and_sweep")

    # -- the re-profiles ---------------------------------------------------------------------------
    def stages_table(self):
        """Per-sample ms of each stage (columns) for each re-profiled variant (rows, in order); empty stages left out."""
        import pandas as pd

        df = pd.DataFrame(self.stages).T.loc[list(self.stages)]
        return df.loc[:, df.sum() > 0]

    def plot_stages(self) -> None:
        """The stacked bar of where a sample's time goes, variant by variant (from each single-process profile)."""
        import matplotlib.pyplot as plt
        import numpy as np

        df = self.stages_table()
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
        """Each variant's ``T_batch`` (its pipeline alone), mean step, samples/s measured and predicted, x ceiling.
        ``gpu_decode`` gets no prediction: its decode runs in the main process, not in the workers."""
        import pandas as pd

        def predicted(v):
            if v == "gpu_decode":
                return float("nan")
            return loop.predicted_samples_per_s(self.num_workers, t_batch[v], self.ceiling_ms(), self.batch_size)

        return pd.DataFrame([{"variant": v, "T_batch_ms": t_batch[v], "step_ms_mean": self.ms(v),
                              "samples_per_s": self.ms(v, "samples_per_s"), "predicted_samples_per_s": predicted(v),
                              "x_ceiling": self.ms(v, "x_ceiling")} for v in variants]).set_index("variant")

    def options_table(self, variant: str):
        """The variant's row beside its rows with DataLoader options (``<variant> <option>``, those that ran)."""
        import pandas as pd

        names = [variant] + [r["name"] for r in self.results.experiments
                             if r["name"].startswith(f"{variant} ") and r["status"] == "ok"]
        return pd.DataFrame([{"experiment": n, "step_ms_mean": self.ms(n), "first_step_ms": self.ms(n, "first_step_ms"),
                              "samples_per_s": self.ms(n, "samples_per_s")} for n in names]).set_index("experiment")

    def idle_table(self, idle: Mapping[str, Mapping[str, Any]]):
        """The trace's wait share beside the timed loop's, and HTA's GPU idle share (NaN without a GPU)."""
        import pandas as pd

        return pd.DataFrame({v: {"trace_wait_share": d["share"], "timed_wait_share": self.ms(v, "data_wait_share"),
                                 "gpu_idle_share (HTA)": d.get("gpu_idle_share", float("nan"))}
                             for v, d in idle.items()}).T

    def summary(self, planned: Iterable[str]):
        """Every training-loop row that ran (the re-measured ceiling aside): the ceiling and ``planned`` first, in
        that order, then the others; ``TRAIN_COLS`` with the workers and which device step."""
        import pandas as pd

        tab = self.results.table(TRAIN_COLS)
        if tab.empty or "model" not in tab:
            return pd.DataFrame(columns=["num_workers", "stand_in", *TRAIN_COLS]).rename_axis("experiment")
        tab = tab[tab["model"].eq(True) & tab["status"].eq("ok") & tab["experiment"].ne("ceiling (re-measured)")]
        order = ["ceiling", *planned]
        tab = pd.concat([tab.set_index("experiment").loc[[e for e in order if e in set(tab["experiment"])]].reset_index(),
                         tab[~tab["experiment"].isin(order)]])
        return tab[["experiment", "num_workers", "stand_in", *[c for c in TRAIN_COLS if c in tab]]].set_index("experiment")

    def plot_variants(self, summary, planned: Iterable[str]) -> None:
        """samples/s of the ceiling and each planned variant, each labelled with its x ceiling."""
        import matplotlib.pyplot as plt

        chart = summary.loc[[e for e in ["ceiling", *planned] if e in summary.index]]
        fig, ax = plt.subplots(figsize=(7, 3.2))
        ax.barh(chart.index, chart["samples_per_s"], color=["#999" if e == "ceiling" else "#4c72b0" for e in chart.index])
        for y, (v, x) in enumerate(zip(chart["samples_per_s"], chart["x_ceiling"])):
            ax.text(v, y, f" {x:.2f}× ceiling", va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"samples/s (mean over whole worker cycles), {self.num_workers} workers, batch {self.batch_size}")
        ax.set_title(f"Pipeline variants vs the ceiling ({self._device_words()})")
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
