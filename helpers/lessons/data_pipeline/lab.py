"""Notebook 02's harness: ``Lab`` holds the run's settings and its results, and measures every row the same way.

One object per notebook run: the settings of the parameters cell, the ``Results``, the stand-in's calibration
(``calibrate_stand_in``), the **one** ceiling per batch size every row is divided by (``ceiling_ms``), a row's plan
(``plan``: at least ``cycles`` full worker cycles, one cycle of warm-up), ``measure`` / ``measure_interleaved`` (a
row each, logged to TensorBoard), ``ms`` (a row's metric, NaN when it failed), the single-process re-profile of a
variant (``reprofile``), the GPU decode (checked first), the trace's idle shares, the decode bound, the ceiling
measured again, the bad-input rows and the "try it yourself" panel. Its tables and charts are ``report.Report``'s.

The time guard: every measurement runs under the notebook's ``budget`` (``helpers.notebook.budget.Budget``; None:
unlimited). Once it is spent, what is left becomes failed rows "OverBudget: skipped: ..."; a measurement still running
at the deadline is stopped ("OverBudget: stopped: ..."). A skipped row reads as NaN (``ms``), a skipped profile
leaves no ``stages`` entry (``stage`` reads NaN), so the results, checks and figures still run: a check about a
skipped row comes out false.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch

from ...measure import profiling
from ...measure import validate as vd
from ...measure.device import is_cuda
from ...notebook import env
from ...notebook.budget import Budget, OverBudget
from ...notebook import tensorboard as tb
from ...notebook.results import Results
from . import idle, loop
from .idle import failing
from .checks import SharedMemoryTooSmall, check_decode, check_shm, shm_needed_mb
from .data import VARIANTS, sample_paths
from .report import Report

NOTEBOOK = "02_data_pipeline"


class Lab(Report):
    """The settings of one run of notebook 02 and every measurement it makes (see the module's docstring).

    The keyword arguments are the parameters cell's (lower case). ``stand_in``: the device step is the stand-in
    (no accelerator); ``stand_in_ms`` its fixed time, or None to set it from a measurement (``calibrate_stand_in``).
    """

    def __init__(self, device, *, scale: str, crop: int, batch_size: int, num_workers: int, dataset_size: int,
                 steps: int, warmup: int, cycles: int, rounds: int, pipe_steps: int, ceiling_steps: int,
                 profile_steps: int, profile_cycles: int, profile_rounds: int = 1, stand_in: bool,
                 stand_in_ms: float | None = None, stand_in_ratio: float = 0.35, seed: int = 0,
                 notebook: str = NOTEBOOK, results: Results | None = None, paths: Iterable[Path] | None = None,
                 cores: int | None = None, budget: Budget | None = None):
        self.device = torch.device(device)
        self.on_gpu = is_cuda(self.device)
        self.scale, self.notebook, self.seed = scale, notebook, seed
        self.crop, self.batch_size, self.num_workers, self.dataset_size = crop, batch_size, num_workers, dataset_size
        self.steps, self.warmup, self.cycles, self.rounds = steps, warmup, cycles, rounds
        self.pipe_steps, self.ceiling_steps = pipe_steps, ceiling_steps
        self.profile_steps, self.profile_cycles, self.profile_rounds = profile_steps, profile_cycles, profile_rounds
        self.stand_in, self.stand_in_ratio = bool(stand_in), stand_in_ratio
        self.stand_in_ms = stand_in_ms if self.stand_in else None
        self.cores = cores or os.cpu_count() or 1
        self.results = results if results is not None else Results(notebook, scale, env.env_info(self.device))
        self.paths = list(paths) if paths is not None else sample_paths()  # a missing folder says how to regenerate it
        self.ceilings: dict[int, float] = {}          # batch size -> the ONE ceiling measurement every row divides by
        self.stages: dict[str, dict[str, float]] = {}  # variant -> per-sample ms of each stage (``reprofile``)
        self.budget = budget if budget is not None else Budget(None)   # the time guard of every measurement

    def record(self, name: str, config: Mapping[str, Any], fn: Callable[[], Mapping[str, Any]]) -> dict[str, Any]:
        """``results.record`` under the time budget: a skipped or stopped measurement is a failed row with the reason."""
        return self.budget.record(self.results, name, config, fn)

    def guarded(self, what: str, fn: Callable[[], Any], default: Any = float("nan")) -> Any:
        """``fn()`` under the time budget (a measurement that is no row of its own); ``default`` and a line saying so
        when the budget skips or stops it."""
        try:
            with self.budget.limit():
                return fn()
        except OverBudget as exc:
            print(f"[over budget] {what}: {exc}")
            return default

    # -- the device step ---------------------------------------------------------------------------
    def calibrate_stand_in(self) -> float | None:
        """Set the stand-in's step once, before anything is timed (where no ``stand_in_ms`` was given): a fixed
        fraction (``stand_in_ratio``) of what this machine's ``num_workers`` workers take per baseline batch (one
        process's fastest time per batch / the workers), so the baseline is input-bound on any CPU, as in the
        article. Records the row ``stand-in calibration``; a failed calibration stops the notebook (every later row
        needs the step). Returns the stand-in's ms (None: no stand-in)."""
        if not self.stand_in or self.stand_in_ms is not None:
            return self.stand_in_ms
        cfg = {"variant": "baseline", "num_workers": 0, "batch_size": self.batch_size, "crop": self.crop,
               "model": False, "stand_in_ratio": self.stand_in_ratio}
        calib = self.record("stand-in calibration", cfg, lambda: loop.run_variant(
            "baseline", 0, self.batch_size, self.pipe_steps, warmup=2, crop=self.crop, device=self.device,
            seed=self.seed, train=False))
        if calib["status"] != "ok" and calib["error"].startswith("OverBudget"):
            self.stand_in_ms = float("nan")   # the budget is spent: every later row is skipped too
            return self.stand_in_ms
        if calib["status"] != "ok":
            raise RuntimeError(f"the stand-in could not be calibrated: {calib['error']}")
        # the fastest batch: other programs on a shared machine only ever lengthen a batch, and a stand-in set while
        # they ran would leave the baseline barely input-bound once they stop
        fastest = min(calib["metrics"]["times_ms"])
        self.stand_in_ms = round(loop.stand_in_step_ms(fastest, self.num_workers, self.stand_in_ratio), 1)
        print(f"stand-in device step: {self.stand_in_ms:g} ms = {self.stand_in_ratio:g} x the baseline pipeline's "
              f"{fastest:.1f} ms per batch on this machine (one process, fastest of {len(calib['metrics']['times_ms'])})"
              f" / {self.num_workers} worker(s)")
        return self.stand_in_ms

    @property
    def step_kind(self) -> str:
        """Which device step the rows use, in words."""
        if self.stand_in:
            return f"stand-in device step: {self.stand_in_ms:g} ms, no CPU (not a GPU figure)"
        return f"toy CNN on {env.device_name(self.device)}"

    def _row_config(self, variant: str, **extra) -> dict[str, Any]:
        return {"variant": variant, "num_workers": self.num_workers, "batch_size": self.batch_size, "crop": self.crop,
                **extra, "stand_in": self.stand_in, "stand_in_ms": self.stand_in_ms}

    # -- the one ceiling ---------------------------------------------------------------------------
    def _ceiling_row(self, name: str, batch_size: int, x_ceiling: bool) -> dict[str, Any]:
        cfg = {"variant": "ceiling", "num_workers": 0, "batch_size": batch_size, "crop": self.crop, "model": True,
               "stand_in": self.stand_in, "stand_in_ms": self.stand_in_ms}

        def run():
            m = loop.ceiling(batch_size, self.crop, steps=self.ceiling_steps, warmup=2, device=self.device,
                             seed=self.seed, stand_in_ms=self.stand_in_ms)
            return {**m, "x_ceiling": 1.0} if x_ceiling else m
        return self.record(name, cfg, run)

    def ceiling_ms(self, batch_size: int | None = None) -> float:
        """The ceiling's mean step at this batch size: measured once (row ``ceiling``), never overwritten."""
        batch_size = self.batch_size if batch_size is None else batch_size
        if batch_size not in self.ceilings:
            name = "ceiling" if batch_size == self.batch_size else f"ceiling bs={batch_size}"
            row = self._ceiling_row(name, batch_size, x_ceiling=True)
            if row["status"] != "ok" and row["error"].startswith("OverBudget"):   # NaN: every x_ceiling reads NaN
                self.ceilings[batch_size] = float("nan")
            elif row["status"] != "ok":
                raise RuntimeError(f"the ceiling could not be measured: {row['error']}")
            else:
                self.ceilings[batch_size] = row["metrics"]["step_ms_mean"]
        return self.ceilings[batch_size]

    def remeasure_ceiling(self) -> float:
        """The ceiling measured again, as a separate row ``ceiling (re-measured)`` (every row keeps dividing by the
        first measurement). Returns its mean step (NaN if it failed)."""
        self._ceiling_row("ceiling (re-measured)", self.batch_size, x_ceiling=False)
        return self.ms("ceiling (re-measured)")

    # -- rows --------------------------------------------------------------------------------------
    def plan(self, variant: str, num_workers: Any = None, batch_size: Any = None, steps: int | None = None,
             train: bool = True, **options) -> tuple[dict[str, Any], dict[str, Any]]:
        """``run_variant``'s arguments and the row's config: at least ``cycles`` worker cycles, one cycle of warm-up.
        ``num_workers``, ``batch_size``, ``steps``: None for the lab's settings. Bad values pass through:
        ``run_variant`` refuses them with a message (a failed row)."""
        num_workers = self.num_workers if num_workers is None else num_workers
        batch_size = self.batch_size if batch_size is None else batch_size
        steps = self.steps if steps is None else steps
        ok = isinstance(num_workers, int) and not isinstance(num_workers, bool)
        # whole worker cycles; the pipeline alone in one process (no workers, no device step) has none to cover
        steps = loop.cycle_steps(num_workers, self.cycles, steps) if ok and (train or num_workers) else steps
        warmup = max(self.warmup, num_workers) if ok else self.warmup
        stand_in_ms = self.stand_in_ms if train else None
        dataset_size = options.pop("dataset_size", self.dataset_size)   # 0: exactly the batches the run takes
        kw = dict(variant=variant, num_workers=num_workers, batch_size=batch_size, steps=steps, warmup=warmup,
                  crop=self.crop, device=self.device, dataset_size=dataset_size, seed=self.seed, train=train,
                  stand_in_ms=stand_in_ms, **options)
        cfg = {"variant": variant, "num_workers": num_workers, "batch_size": batch_size, "crop": self.crop,
               "model": train, "stand_in": bool(self.stand_in and train), "stand_in_ms": stand_in_ms,
               "timed_steps": steps, "warmup_steps": warmup,
               **({"dataset_size": dataset_size} if dataset_size != self.dataset_size else {}),
               **{k: v for k, v in options.items() if k not in ("paths", "die_at")}}
        return kw, cfg

    def finish(self, name: str, cfg: Mapping[str, Any], m: dict[str, Any]) -> dict[str, Any]:
        """Divide by the one ceiling, log to TensorBoard, return the metrics."""
        if cfg["model"]:
            m["ceiling_ms"] = self.ceiling_ms(cfg["batch_size"])
            m["x_ceiling"] = round(m["step_ms_mean"] / m["ceiling_ms"], 3)
        tb.log_experiment(self.notebook, name, cfg, m, step_times_ms=m["times_ms"], batch_size=cfg["batch_size"])
        return m

    def measure(self, name: str, variant: str, **kw) -> dict[str, Any]:
        """Run one pipeline configuration (``run_variant``, arguments as ``plan``'s) and add it as a row."""
        args, cfg = self.plan(variant, **kw)
        return self.record(name, cfg, lambda: self.finish(name, cfg, loop.run_variant(**args)))

    def measure_interleaved(self, rows: Mapping[str, Mapping[str, Any]], rounds: int | None = None) -> None:
        """rows: ``{row name: plan() keyword arguments}``, measured in interleaved rounds (``run_interleaved``),
        each round a ``rounds``-th of the steps (at least ``cycles`` worker cycles); a row each."""
        rounds = self.rounds if rounds is None else rounds
        plans = {name: self.plan(**{**kw, "steps": max(1, kw.get("steps", self.steps) // rounds)})
                 for name, kw in rows.items()}
        out = loop.run_interleaved({name: args for name, (args, _) in plans.items()}, rounds, guard=self.budget.limit)

        def result(name):
            if isinstance(out[name], BaseException):
                raise out[name]
            return self.finish(name, plans[name][1], out[name])

        for name in rows:
            self.results.record(name, {**plans[name][1], "rounds": rounds}, lambda name=name: result(name))

    def compare(self, a: str, b: str) -> dict[str, Any] | None:
        """Rows ``a`` and ``b`` (measured in the same interleaved rounds) compared by the mean step of each full worker
        cycle of every round (``cycle_ms``, ``loop.cycle_means``; a row of one run: its steps): ``Results.compare``
        (ratio of the means a/b, 95% BCa interval, verdict) into results.json's ``comparisons``. The cycles' mean is
        the rows' mean step. None, and a line saying why, when either row has no timed steps (it failed)."""
        ta, tb = (self.results.metric(n, "cycle_ms") or self.results.metric(n, "times_ms") for n in (a, b))
        if not ta or not tb:
            print(f"no comparison of {b} with {a}: {a if not ta else b} has no timed steps (its row failed)")
            return None
        return self.results.compare(a, b, ta, tb, metric=loop.COMPARE)

    def ms(self, name: str, key: str = loop.COMPARE) -> float:
        """A row's mean step time (the comparison statistic) or another metric; NaN when the row failed."""
        return self.results.metric(name, key, float("nan"))

    def metrics(self, name: str, keys: Iterable[str]) -> dict[str, Any]:
        """A row's metrics; NaN for each of ``keys`` when the row failed (its message was printed)."""
        row = self.results.get(name)
        if row is None or row["status"] != "ok":
            return {k: float("nan") for k in keys}
        return row["metrics"]

    # -- shared memory -----------------------------------------------------------------------------
    def check_shared_memory(self, most_workers: int) -> str:
        """/dev/shm against the largest setting the notebook runs (``most_workers`` with prefetch 2, or
        ``prefetch_factor=4`` at ``num_workers``): the check's line, or why rows that do not fit will fail."""
        pinned = self.on_gpu   # pin_memory where there is a GPU (pinned batches leave /dev/shm at once)
        need = max(shm_needed_mb(most_workers, self.batch_size, self.crop, pinned=pinned),
                   shm_needed_mb(self.num_workers, self.batch_size, self.crop, prefetch_factor=4, pinned=pinned))
        where = f"the largest setting here ({most_workers} workers in the sweep)"
        try:
            return f"{where}: {check_shm(need)}"
        except SharedMemoryTooSmall as exc:
            return f"NOT ENOUGH SHARED MEMORY for {where}; rows that do not fit fail with this message, the others run: {exc}"

    # -- profiles ----------------------------------------------------------------------------------
    def reprofile(self, variant: str):
        """Profile the variant in one process; per-sample ms of each pipeline stage (``STAGES``) as a results row
        and in ``stages[variant]``. Returns the profile (None when the row failed: the time budget skipped it)."""
        tdir = profiling.fresh_trace_dir(f"{self.notebook}/{variant}_nw0")
        out = {}

        def run():
            out["prof"] = loop.profile_loop(variant, 0, self.batch_size, crop=self.crop, trace_dir=tdir,
                                            device=self.device, active=self.profile_steps, stand_in_ms=self.stand_in_ms)
            out["stages"] = loop.stage_ms(profiling.label_totals(out["prof"], list(loop.STAGES)),
                                          self.profile_steps * self.batch_size)
            return {**{f"{k.replace(' ', '_')}_ms_per_sample": round(v, 4) for k, v in out["stages"].items()},
                    "slowest_stage": max(out["stages"], key=out["stages"].get)}
        row = self.record(f"profile {variant} nw=0", {**self._row_config(variant), "num_workers": 0}, run)
        if row["status"] == "ok":
            self.stages[variant] = out["stages"]
        return out.get("prof") if row["status"] == "ok" else None

    def stage(self, variant: str, stage: str) -> float:
        """Per-sample ms of a stage in the variant's single-process profile; NaN when it has none (skipped)."""
        return self.stages.get(variant, {}).get(stage, float("nan"))

    def moved(self, before: str, after: str, stage: str) -> str:
        """One line: a stage's per-sample time before and after a fix (from the two re-profiles)."""
        return f"{stage}: {self.stages[before][stage]:.2f} → **{self.stages[after][stage]:.2f} ms** per sample"

    def profile_total(self, variant: str) -> float:
        """Per-sample ms of all the pipeline's stages in the variant's single-process profile."""
        return sum(self.stages[variant].values())

    def changed(self, before: str, after: str, stages: Iterable[str]) -> str:
        """The fix from ``before`` to ``after`` in the two single-process profiles: each of ``stages`` per sample, then
        the whole pipeline per sample with its change, so a stage that grew is read beside the total that fell (or
        the other way round). Only the profiles; the loop's verdict comes from the interleaved rounds later."""
        if not {before, after} <= set(self.stages):
            return f"No comparison of the profiles of {before} and {after}: a profile did not run (see its row)."
        a, b = self.profile_total(before), self.profile_total(after)
        parts = "; ".join(self.moved(before, after, st) for st in stages)
        return (f"Single-process profiles ({self.profile_steps} batches each), per sample: {parts}; the whole "
                f"pipeline {a:.2f} → **{b:.2f} ms** ({b / a - 1:+.0%}).")

    def fix_lines(self, planned: Iterable[str], t_batch_rows: Mapping[str, str], against: str = "baseline") -> str:
        """One bullet per fix (each planned variant against the one before it): the single-process profile's total per
        sample, ``T_batch`` (the pipeline alone, measured in the same rounds as the loop) and, in the loop, the
        comparison with ``against`` (``describe``; ms saved per step only when it is resolved). Where the profile and
        ``T_batch`` move in opposite directions the line says so: the profile is a few batches of one run."""
        from ...measure import compare as cmp

        planned, lines = list(planned), []
        for prev, v in zip(planned, planned[1:]):
            if not {prev, v} <= set(self.stages) & set(t_batch_rows):   # gpu_decode has no T_batch (main process)
                continue
            p0, p1 = self.profile_total(prev), self.profile_total(v)
            t0, t1 = self.ms(t_batch_rows[prev]), self.ms(t_batch_rows[v])
            text = (f"- **{v}** (after {prev}): profile {p0:.2f} → {p1:.2f} ms per sample ({p1 / p0 - 1:+.0%}); "
                    f"T_batch {t0:.0f} → {t1:.0f} ms per batch ({t1 / t0 - 1:+.0%})")
            if (p1 - p0) * (t1 - t0) < 0:
                text += (" — the two disagree in direction: this fix's effect on the pipeline is within this "
                         "machine's noise (the profile is one run of a few batches; T_batch is pooled over the rounds)")
            c = self.results.comparison(against, v)
            if c is not None:
                text += f". In the loop: {cmp.describe(c)}"
                if cmp.resolved(c):
                    d = self.ms(against) - self.ms(v)
                    text += f", {abs(d):.1f} ms per step {'saved' if d > 0 else 'lost'}"
                else:
                    text += "; this machine does not resolve a difference, so no ms saved is given"
            lines.append(text + ".")
        return "\n".join(lines)

    def gpu_decode(self) -> list[str]:
        """GPU only: the nvJPEG decode checked against the CPU decode (``check_decode``) before any timing, then
        re-profiled. Returns ``["gpu_decode"]`` to add to the planned variants, or ``[]`` after a failed row (a
        mismatch, or no nvJPEG) that says why. On a CPU: ``[]`` and says so."""
        if not self.on_gpu:
            print("gpu_decode: not run, this machine has no CUDA device (nvJPEG decodes on a GPU).")
            return []
        try:
            dec = check_decode(self.paths, self.device)     # the GPU's pixels against the CPU decode
            print(f"GPU decode matches the CPU decode: mean |diff| {dec['mean_abs']:.2f}, "
                  f"99th percentile {dec['p99_abs']:.0f} levels")
            self.reprofile("gpu_decode")
            return ["gpu_decode"]
        except Exception as exc:  # noqa: BLE001 - a mismatch (or no nvJPEG) is a failed row, with its message
            self.results.record("gpu_decode", {"variant": "gpu_decode", "num_workers": self.num_workers,
                                               "batch_size": self.batch_size, "crop": self.crop, "model": True,
                                               "stand_in": False}, failing(exc))
            return []

    def idle_shares(self, variants: Iterable[str]) -> dict[str, dict[str, Any]]:
        """How long each variant's loop waits for data, from profiles with its workers (``idle.idle_shares``: windows
        in turns, ``profile_rounds`` x ``profile_cycles`` cycles; on a GPU also HTA's idle share), a row each."""
        return idle.idle_shares(self, variants)

    # -- bounds ------------------------------------------------------------------------------------
    def decode_bound_row(self, best: str, decode_ms: float, bound_ms: float) -> dict[str, Any]:
        """Row ``decode bound``: the JPEG decode (``decode_ms`` per image) every CPU variant still does, its bound
        (``bound_ms`` = decode x batch / workers, a step no CPU pipeline with these workers can beat), and the best
        variant against it, against the ceiling, and against its own bound (``loop.bound_ms``)."""
        best_ms, ceiling = self.ms(best), self.ceiling_ms()
        return self.record(
            "decode bound", {"variant": "decode_bound", "num_workers": self.num_workers, "batch_size": self.batch_size,
                             "crop": self.crop},
            lambda: {"decode_ms_per_image": round(decode_ms, 3), "bound_step_ms": round(bound_ms, 3),
                     "best_variant": best, "best_over_bound": round(best_ms / bound_ms, 3),
                     "best_over_ceiling": round(best_ms / ceiling, 3),
                     "best_bound_ms": round(loop.bound_ms(best, ceiling, bound_ms), 3)})

    # -- bad input and the panel -------------------------------------------------------------------
    def bad_inputs(self, folder: Path | None = None) -> list[dict[str, Any]]:
        """Each bad input as an expected failure row (impossible settings, a corrupt and a missing image, a worker
        that dies, /dev/shm of 64 MiB at the article's size); the rest of the notebook goes on. Returns the rows."""
        tmp = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="nb02_"))
        corrupt = tmp / "corrupt.jpg"
        corrupt.write_bytes(self.paths[0].read_bytes()[:2000])       # a truncated JPEG
        bad = [("num_workers > cores", dict(num_workers=self.cores + 1)),
               ("num_workers < 0", dict(num_workers=-1)),
               ("batch size 0", dict(batch_size=0)),
               ("corrupt image", dict(num_workers=min(1, self.cores), paths=[corrupt])),
               ("missing image", dict(num_workers=0, paths=[tmp / "missing.jpg"])),
               ("a worker dies", dict(num_workers=min(1, self.cores), die_at=1))]
        for name, kw in bad:
            self.measure(f"expected failure: {name}", "crop_first", steps=1, **kw)
        self.results.record("expected failure: /dev/shm too small (64 MiB, the article's size)",
                            {"variant": "baseline", "num_workers": 4, "batch_size": 256, "crop": 256},
                            lambda: {"message": check_shm(shm_needed_mb(4, 256, 256), free_mb=64)})
        return [r for r in self.results.experiments if r["name"].startswith("expected failure")]

    def validate_panel(self, v: dict[str, Any]) -> dict[str, Any]:
        """The panel's values, refused with a message (``helpers.measure.validate``) before anything runs."""
        v["num_workers"] = vd.validate_num_workers(v["num_workers"], self.cores)
        v["batch_size"] = vd.validate_batch_size(v["batch_size"], maximum=1024)
        v["persistent_workers"] = vd.validate_bool(v.get("persistent_workers", False), "persistent_workers")
        vd.validate_choice(v["variant"], VARIANTS, "pipeline variant")
        if v["variant"] == "gpu_decode" and not self.on_gpu:
            raise vd.InvalidValue("gpu_decode needs a CUDA device; this run is on the CPU.")
        return v

    def panel_row(self, variant: str = "crop_first", num_workers: int | None = None, batch_size: int | None = None,
                  persistent_workers: bool = False):
        """What the panel runs: the same ``measure`` with the reader's values; returns the panel rows' table. Called
        directly with a bad value, it adds a failed row with the refusal's message (nothing is raised)."""
        nw = self.num_workers if num_workers is None else num_workers
        bs = self.batch_size if batch_size is None else batch_size
        name = f"panel {variant} nw={nw} bs={bs}" + (" persistent" if persistent_workers is True else "")
        try:
            self.validate_panel({"variant": variant, "num_workers": nw, "batch_size": bs,
                                 "persistent_workers": persistent_workers})
        except ValueError as exc:   # named by the values as given (repr), so each refusal is a row of its own
            name = f"panel {variant!r} nw={nw!r} bs={bs!r} persistent_workers={persistent_workers!r}"
            self.results.record(name, {"variant": str(variant), "num_workers": str(nw), "batch_size": str(bs),
                                       "model": True}, failing(exc))
            return self.panel_table()
        budget, self.budget = self.budget, Budget(None)   # the reader's own rows: not under the notebook's budget
        try:
            self.measure(name, variant, num_workers=nw, batch_size=bs, persistent_workers=persistent_workers)
        finally:
            self.budget = budget
        return self.panel_table()

    def panel(self):
        """The "try it yourself" panel (``helpers.notebook.panels.run_panel``) over ``panel_row``."""
        import ipywidgets as w

        from ...notebook.panels import run_panel

        return run_panel(
            self.panel_row,
            {"num_workers": w.BoundedIntText(value=self.num_workers, min=-1, max=64, description="num_workers"),
             "variant": w.Dropdown(options=list(VARIANTS), value="crop_first", description="variant"),
             "batch_size": w.BoundedIntText(value=self.batch_size, min=0, max=4096, description="batch size"),
             "persistent_workers": w.Checkbox(value=False, description="persistent_workers")},
            validate=self.validate_panel, title="Time a pipeline with your settings")
