"""Notebook 05's lesson code. The planted bottlenecks: a small MLP training step with one bottleneck planted at a
time (``planted_step``), so the doctor's verdict can be checked against a known cause and against the step with
the plant removed; ``run_case`` plants, profiles and diagnoses one as a results row. Around them: the tables and the
chart the notebook shows (thresholds, verdicts, saved vs claimed), the panel's validator, the reference GPU traces
under ``data/reference/<gpu>/05_diagnose/`` and the bad inputs of its appendix, written from this run's own traces.
``diagnose_step`` and ``helpers.traces.diagnose`` themselves are taught in the notebook."""
from __future__ import annotations

import gzip
import math
import numbers
import re
from pathlib import Path
from typing import Any, Callable, Mapping

from ..measure.device import synchronize
from ..measure.diagnose import diagnose_step, training_step
from ..measure.profiling import activities, export_chrome_trace, trace_files
from ..measure.compare import describe, resolved
from ..measure.timing import interleaved_times, torch_threads
from ..measure.training import labelled_step
from ..measure.validate import InvalidValue, validate_choice, validate_positive
from ..traces import diagnosis as dg

PLANTED = ("none", "input", "launch/overhead", "compute", "host sync")
COUNTED = ("none", "launch/overhead", "compute")          # sizes that count something: whole numbers
SIZE_LIMITS = {"launch/overhead": (20_000, "more than 20,000 tiny ops would take minutes; choose fewer."),
               "compute": (16_384, "a matrix side above 16,384 would need gigabytes; choose a smaller one.")}


class SlowDataset:
    """Random samples, each costing ``ms`` of host time (a stand-in for decoding and augmenting)."""

    def __init__(self, n: int, features: int, ms: float):
        self.n, self.features, self.ms = n, features, ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import time

        import torch

        time.sleep(self.ms / 1000.0)
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.features, generator=g), int(i % 10)


def planted_step(kind: str, size: float, *, device=None, batch_size: int = 8, features: int = 64,
                 hidden: int = 64, threads: int | None = 1, overlap: int = 0, item: bool = True) -> Callable[[], Any]:
    """A small MLP training step with one bottleneck planted, ``size`` setting how strong it is:

    - ``"none"``: the plain step (the baseline; ``size`` is ignored);
    - ``"input"``: batches come from a DataLoader (``num_workers=0``) whose dataset spends ``size`` ms per sample;
    - ``"launch/overhead"``: the forward adds ``size`` tiny elementwise ops on a 16-element tensor;
    - ``"compute"``: the forward adds one ``size`` × ``size`` matrix product;
    - ``"host sync"``: ``loss.item()`` every step, then ``size`` ms of host work (as when a metric is logged)
      that, without the sync, would overlap with the GPU's work. Only meaningful on a GPU, and only with GPU work
      to overlap with: ``overlap`` adds an ``overlap`` × ``overlap`` matrix product to the forward (on a big GPU
      the small MLP alone takes microseconds, so removing the sync would save nothing). ``item=False`` is the fix:
      the same step and host work without the ``.item()``.

    On a CPU each call runs with ``threads`` intra-op threads (then restores the setting): on a busy shared
    machine, waking OpenMP workers stretches even a tiny op to a scheduler time slice (~16 ms), which would
    bury the planted effect under the machine's load. ``threads=None`` leaves the setting alone.
    """
    import torch

    validate_choice(kind, PLANTED, "planted bottleneck")
    validate_positive(size, "size")
    device = torch.device(device or "cpu")
    torch.manual_seed(0)
    if isinstance(overlap, bool) or not isinstance(overlap, int) or overlap < 0:
        raise ValueError(f"overlap must be a matrix side (an integer >= 0), not {overlap!r}.")
    extra = {"tiny": int(size) if kind == "launch/overhead" else 0,
             "mm": int(size) if kind == "compute" else (overlap if kind == "host sync" else 0)}

    class Planted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(),
                                           torch.nn.Linear(hidden, 10))
            if extra["mm"]:
                self.big = torch.nn.Parameter(torch.randn(extra["mm"], extra["mm"]) / extra["mm"] ** 0.5)
            self.tiny = torch.nn.Parameter(torch.ones(16))

        def forward(self, x):
            out = self.net(x)
            if extra["tiny"]:
                t = self.tiny
                for _ in range(extra["tiny"]):
                    t = t * 1.0001
                out = out + t.sum() * 0.0
            if extra["mm"]:
                out = out + (self.big @ self.big).mean() * 0.0
            return out

    model = Planted().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = labelled_step(model, opt, torch.nn.functional.cross_entropy)
    if kind == "input":
        loader = torch.utils.data.DataLoader(SlowDataset(10_000, features, float(size)), batch_size=batch_size,
                                             shuffle=False, num_workers=0)
        inner = training_step(model, opt, loader, device=device)
        return _with_threads(inner, threads) if device.type == "cpu" else inner
    x = torch.randn(batch_size, features, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)
    if kind == "host sync":
        import time

        def run():
            loss = step(x, y)
            if item:
                loss.item()                  # the planted sync: the host waits for the GPU here
            time.sleep(float(size) / 1000.0)  # host work that could have overlapped with the GPU
            return loss
        inner = run
    else:
        def inner():
            return step(x, y)
    return _with_threads(inner, threads) if device.type == "cpu" else inner


def _with_threads(fn: Callable[[], Any], threads: int | None) -> Callable[[], Any]:
    def run():
        with torch_threads(threads):
            return fn()
    return run


# --- one case, as a results row ---------------------------------------------------------------------------------
def validate_size(kind: str, size: Any) -> int | float:
    """A plant's size, refused with a one-line message unless it is a positive, finite number (a whole one where it
    counts ops or a matrix side) within ``SIZE_LIMITS``; returned as ``planted_step`` takes it."""
    validate_positive(size, "the size")
    if kind in COUNTED:
        if size != int(size):
            raise InvalidValue(f"the size of a {kind} plant counts ops or a matrix side: a whole number, not {size!r}.")
        limit, why = SIZE_LIMITS.get(kind, (math.inf, ""))
        if size > limit:
            raise InvalidValue(why)
        return int(size)
    return float(size)


def validate_panel(values: Mapping[str, Any], on_gpu: bool) -> dict[str, Any]:
    """The panel's values, checked before anything runs: a known plant, a size ``validate_size`` accepts, and no
    host-sync plant without a GPU (there is no device to wait for). Raises ``InvalidValue`` with the message."""
    kind = validate_choice(values["kind"], PLANTED, "planted bottleneck")
    size = validate_size(kind, values["size"])
    if kind == "host sync" and not on_gpu:
        raise InvalidValue("a host sync needs a GPU to wait for; on a CPU choose another bottleneck.")
    return {"kind": kind, "size": size}


def case_name(kind: Any, size: Any, item: bool = True) -> str:
    """A case's row name: ``planted compute (size 768)``; ``unknown bottleneck 'disk'`` for an unknown plant. Never
    raises, whatever the values (a row name must not be where bad input fails)."""
    if not isinstance(kind, str) or kind not in PLANTED:
        return f"unknown bottleneck {kind!r}"
    shown = f"{size:g}" if isinstance(size, numbers.Real) and not isinstance(size, bool) else repr(size)
    return f"planted {kind} (size {shown})" + ("" if item else " without .item()")


def causes_metrics(d) -> dict[str, Any]:
    """A diagnosis as a results row's metrics: the mean step, the top cause, each judged cause's ms and their sum
    (and the trace folder, when ``diagnose_step`` wrote one)."""
    judged = [c for c in d.causes if c["ms"] is not None]
    m = {"step_ms_mean": d.step_ms, "top_cause": d.top, **{f"{c['cause']}_ms": c["ms"] for c in judged},
         "causes_ms_sum": round(sum(c["ms"] for c in judged), 3)}
    return m | ({"trace_dir": str(d.trace_dir)} if d.trace_dir is not None else {})


def record_diagnosis(results, name: str, config: Mapping[str, Any], diagnosed: Callable[[], Any]):
    """Run ``diagnosed()`` (a diagnosis, from ``diagnose_step`` say) as the results row ``name``: its metrics are
    ``causes_metrics``; a failure is a failed row with a one-line message. Returns the diagnosis, None if it failed."""
    out = {}

    def experiment():
        out["d"] = diagnosed()
        return causes_metrics(out["d"])

    row = results.record(name, config, experiment)
    return out.get("d") if row["status"] == "ok" else None


def run_case(results, kind: Any = "input", size: Any = None, item: bool = True, *, sizes: Mapping[str, Any], device,
             batch_size: int, features: int, hidden: int, overlap: int, wait: int, warmup: int, active: int):
    """Plant one bottleneck (``sizes[kind]`` unless ``size`` is given), profile the step with ``diagnose_step`` and
    diagnose it, as a results row (``record_diagnosis``). The host-sync plant gets an ``overlap``-sided product as GPU
    work to overlap with; ``item=False`` is its fix. Bad input (an unknown plant, a size ``validate_size`` refuses)
    is a failed row with a one-line message, never an exception. Returns the diagnosis, or None."""
    import torch

    if size is None and isinstance(kind, str):
        size = sizes.get(kind)
    plant = {"overlap": overlap, "item": item} if kind == "host sync" else {}
    config = {"planted": kind, "size": size, "device": torch.device(device).type, **plant}

    def diagnosed():
        validate_choice(kind, PLANTED, "planted bottleneck")
        step = planted_step(kind, validate_size(kind, size), device=device, batch_size=batch_size, features=features,
                            hidden=hidden, **plant)
        return diagnose_step(step, wait=wait, warmup=warmup, active=active, device=device, name=f"05_diagnose/{kind}")

    return record_diagnosis(results, case_name(kind, size, item), config, diagnosed)


# --- what the notebook shows --------------------------------------------------------------------------------------
THRESHOLDS = (("MIN_FINDING_SHARE", "a cause below this share of the step is listed, not a finding"),
              ("TINY_OP_US", "CPU: an operator whose median call is shorter is overhead"),
              ("SHORT_KERNEL_US", "GPU: a kernel this short is comparable to its launch"),
              ("NEAR_CAPACITY", "GPU: peak reserved memory above this share of the device"))


def thresholds_table():
    """The doctor's thresholds (constants of ``helpers.traces.diagnosis``), their values and what each decides."""
    import pandas as pd

    return pd.DataFrame([{"constant": n, "value": getattr(dg, n), "meaning": m} for n, m in THRESHOLDS]
                        ).set_index("constant")


def verdicts_table(planted: Mapping[str, Any]):
    """One row per planted case that ran: its top cause, mean step, each cause's ms (None: cannot judge) and the
    causes' sum. Indexed by the planted kind."""
    import pandas as pd

    rows = [{"planted": kind, "top cause": d.top, "step (ms)": d.step_ms, **{c["cause"]: c["ms"] for c in d.causes},
             "causes sum (ms)": sum(c["ms"] or 0 for c in d.causes)} for kind, d in planted.items() if d is not None]
    return pd.DataFrame(rows, columns=None if rows else ["planted", "top cause", "step (ms)", "causes sum (ms)"]
                        ).set_index("planted")


CAUSE_COLORS = {"input": "#dd8452", "host sync": "#c44e52", "launch/overhead": "#8172b3", "compute": "#4c72b0",
                "memory": "#937860", "communication": "#55a868"}


def verdicts_chart(verdicts, xlabel: str):
    """Each planted step's time as one bar split into causes (``verdicts_table``); a cause that cannot be judged
    draws nothing. Returns the figure."""
    import matplotlib.pyplot as plt
    import pandas as pd

    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.6 * max(len(verdicts), 1)))
    left = pd.Series(0.0, index=verdicts.index)
    for cause in dg.CAUSES:
        if cause in verdicts:
            vals = pd.to_numeric(verdicts[cause], errors="coerce").fillna(0.0)   # None (cannot judge) -> 0
            if not (vals > 0).any():     # no bar of this cause: not in the legend either (host sync on a CPU)
                continue
            ax.barh(verdicts.index, vals, left=left, color=CAUSE_COLORS[cause], label=cause)
            left += vals
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title("Each planted step split into causes by the doctor")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside the bars, not over
    return fig


# --- fix and measure again: the planted step against its fix, in interleaved rounds -------------------------------
FIXED = "nothing planted"


def fix_name(kind: str, size: Any) -> str:
    """What a planted case is timed against: the step without the plant (``FIXED``); for the host sync, the same
    step without its ``.item()``."""
    return case_name(kind, size, item=False) if kind == "host sync" else FIXED


def measure_fixes(results, kinds, *, sizes: Mapping[str, Any], rounds: int, untimed: int, device, batch_size: int,
                  features: int, hidden: int, overlap: int, **_ignored) -> dict[str, dict[str, Any]]:
    """Time each planted step and its fix (``fix_name``) without the profiler, in ``rounds`` interleaved rounds
    (every step once per round, each first called ``untimed`` times), keep each as a row ``timed: <name>`` and compare
    each plant with its fix (``results.compare``: ratio planted / fixed, 95% interval, verdict). Returns the
    comparisons by kind; the samples are in ``times`` of each (ms per call, keyed by name)."""
    model = dict(device=device, batch_size=batch_size, features=features, hidden=hidden)
    steps = {}
    for kind in kinds:
        size = validate_size(kind, sizes[kind])
        plant = {"overlap": overlap} if kind == "host sync" else {}
        steps[case_name(kind, size)] = planted_step(kind, size, **model, **plant)
        if kind == "host sync":
            steps[fix_name(kind, size)] = planted_step(kind, size, item=False, **model, **plant)
        else:
            steps.setdefault(FIXED, planted_step("none", 1, **model))
    timed = interleaved_times(steps, rounds, device=device, warmup=untimed)
    for name, t in timed.items():
        results.add(f"timed: {name}", {"rounds": rounds, "profiled": False},
                    {"step_ms_mean": t.mean, "step_ms_median": t.median, "steps_timed": len(t.times_ms)})
    out = {}
    for kind in kinds:
        a, b = case_name(kind, sizes[kind]), fix_name(kind, sizes[kind])
        c = results.compare(a, b, timed[a].times_ms, timed[b].times_ms)
        out[kind] = {**c, "times": {a: timed[a].times_ms, b: timed[b].times_ms}}
    return out


def saved_interval(a_ms, b_ms, confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """``mean(a) - mean(b)`` (ms saved per step) and its ``confidence`` interval (``scipy.stats.bootstrap``, BCa,
    the two samples resampled independently; percentile where BCa is undefined)."""
    import warnings

    import numpy as np
    from scipy import stats

    x, y = np.asarray(list(a_ms), dtype=float), np.asarray(list(b_ms), dtype=float)
    d = float(x.mean() - y.mean())
    if len(x) < 2 or len(y) < 2 or not (np.ptp(x) > 0 or np.ptp(y) > 0):
        return d, d, d
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ci = stats.bootstrap((x, y), lambda u, v, axis=-1: u.mean(axis=axis) - v.mean(axis=axis), paired=False,
                                 vectorized=True, n_resamples=2000, confidence_level=confidence, method=method,
                                 random_state=seed).confidence_interval
        if np.isfinite(ci.low) and np.isfinite(ci.high):
            return d, float(ci.low), float(ci.high)
    return d, d, d


AGREE = 0.10   # a claim agrees with the saving when its share of the step is within 10 points of the saved share's interval


def saved_vs_claimed(planted: Mapping[str, Any], fixes: Mapping[str, Mapping[str, Any]]):
    """Per planted case whose diagnosis and timing both ran: what the doctor said fixing it could save (ms, and share
    of the profiled step) and, only where the comparison resolves a difference, what removing it saved without the
    profiler: ms with a 95% interval (``saved_interval``) and share of the planted step (1 − fixed / planted, its
    interval from the comparison's). The profiled and the timed steps ran at different moments of a shared machine,
    so their milliseconds may differ; the shares are compared: ``agrees`` when the claimed share is within ``AGREE``
    of the saved share's interval."""
    import pandas as pd

    rows = []
    for kind, d in planted.items():
        c = fixes.get(kind)
        if d is None or c is None:
            continue
        claim = d.ms(kind) or 0.0
        share = claim / d.step_ms if d.step_ms else 0.0
        row = {"planted": kind, "claimed (ms)": claim, "claimed share": share, "verdict": c["verdict"],
               "saved (ms)": None, "saved 95% (ms)": None, "saved share": None, "saved share 95%": None,
               "agrees": None}
        if resolved(c):
            saved, low, high = saved_interval(*c["times"].values())
            lo_s, hi_s = (1 - 1 / c["low"], 1 - 1 / c["high"]) if c["low"] > 0 else (float("nan"),) * 2
            row.update({"saved (ms)": saved, "saved 95% (ms)": f"{low:.2f}–{high:.2f}", "saved share": 1 - 1 / c["ratio"],
                        "saved share 95%": f"{lo_s:.1%}–{hi_s:.1%}", "agrees": lo_s - AGREE <= share <= hi_s + AGREE})
        rows.append(row)
    return pd.DataFrame(rows, columns=["planted", "claimed (ms)", "claimed share", "verdict", "saved (ms)",
                                       "saved 95% (ms)", "saved share", "saved share 95%", "agrees"])


def fix_sentences(fixes: Mapping[str, Mapping[str, Any]], saved) -> list[str]:
    """One line per case, from this run: the comparison in words and, only where it is resolved, the ms saved with
    its interval and its share of the step beside the doctor's claim; otherwise that this machine does not resolve
    the difference."""
    lines = []
    for _, r in saved.iterrows():
        c = fixes[r["planted"]]
        line = f"{r['planted']}: {describe(c)}."
        if resolved(c):
            line += (f" Removing it saved {r['saved (ms)']:.2f} ms per step (95% interval {r['saved 95% (ms)']}), "
                     f"{r['saved share']:.0%} of the planted step ({r['saved share 95%']}); the doctor claimed "
                     f"{r['claimed (ms)']:.2f} ms, {r['claimed share']:.0%} of the profiled step"
                     f"{'' if r['agrees'] else ', which does not match'}.")
        else:
            line += " This machine does not resolve the difference, so no saving is given."
        lines.append(line)
    return lines


def advice_named_for_device(d) -> bool:
    """Does the launch/overhead advice of diagnosis ``d`` fit its trace: CUDA graphs named on a GPU trace only, and
    on a CPU-only trace what helps there (torch.compile's CPU fusion)?"""
    see = next((c["see"] for c in d.causes if c["cause"] == "launch/overhead"), "")
    if d.on_gpu:
        return "CUDA graph" in see
    return "CUDA graph" not in see and "torch.compile" in see and "CPU" in see


RESULT_METRICS = ["step_ms_mean", "top_cause", *[f"{c}_ms" for c in dg.CAUSES], "causes_ms_sum"]


def results_view(results):
    """The results table with only informative columns: each row's name, mean step, top cause, ms per cause and
    status; configs (in the names) and errors (in the appendix's tables) are left out, and so is a column no row
    fills (host sync and memory on a CPU)."""
    t = results.table(RESULT_METRICS)
    t = t[[c for c in ["experiment", *RESULT_METRICS, "status"] if c in t.columns]]
    return t.dropna(axis="columns", how="all")


# --- reference GPU traces -------------------------------------------------------------------------------------
def reference_traces(root: Path | str) -> list[Path]:
    """The project's reference traces of this notebook: ``<root>/<gpu>/05_diagnose/*.json.gz`` and those of a packed
    run (``<root>/<gpu>/05_diagnose/traces/**``), sorted (none when the folder is missing). The GPU is the first
    part of the path under ``root``."""
    root = Path(root)
    packed = (p for p in root.glob("*/05_diagnose/traces/**/*") if p.name.endswith((".pt.trace.json", ".json.gz")))
    return sorted({*root.glob("*/05_diagnose/*.json.gz"), *packed})


def sync_found(d) -> bool:
    """Does this diagnosis find synchronisations with GPU idle time after them (host sync > 0 ms, from at least one
    synchronisation call)? False on a CPU-only trace, which cannot judge syncs."""
    c = next((c for c in d.causes if c["cause"] == "host sync"), None)
    return bool(c and c["ms"] and c["ms"] > 0 and re.match(r"[1-9]\d* synchronisation", c["evidence"]))


def gpu_idle_vs_hta(d, trace) -> dict[str, float]:
    """GPU idle % inside the profiled steps by the doctor (100 − the compute and communication shares: the GPU runs
    one or the other) beside Holistic Trace Analysis' temporal breakdown of the same trace (``Trace.gpu_breakdown``,
    which spans the GPU's whole profiled time)."""
    from ..traces.views import open_trace, quiet

    with quiet():
        hta = open_trace(Path(trace)).gpu_breakdown()
    busy = (d.ms("compute") or 0.0) + (d.ms("communication") or 0.0)
    return {"doctor": round(100 * (1 - busy / d.step_ms), 2), "hta": hta["idle_pct"]}


# --- bad input for the appendix -----------------------------------------------------------------------------------
def write_bad_inputs(folder: Path | str, trace_dir: Path | str | None = None) -> dict[str, Path]:
    """Write the appendix's bad inputs into ``folder`` and return them by what they are: a JSON file that is not a
    trace, a truncated ``.gz`` (the first half of the gzipped trace ``diagnose_step`` wrote into ``trace_dir``; of the
    notes when there is none) and an empty folder."""
    folder = Path(folder)
    (folder / "empty").mkdir(parents=True, exist_ok=True)
    notes = folder / "notes.json"
    notes.write_text("these are my notes, not a trace")
    files = trace_files(trace_dir) if trace_dir is not None else []
    whole = gzip.compress((files[-1] if files else notes).read_bytes())
    cut = folder / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    return {"not a trace": notes, "truncated gz": cut, "empty folder": folder / "empty"}


def trace_without_steps(path: Path | str, step_fn: Callable[[], Any], device=None, calls: int = 3) -> Path:
    """A Chrome trace with no ``ProfilerStep`` marks: ``calls`` calls of ``step_fn`` profiled with no schedule and no
    ``prof.step()``, as a quick ``with profile(): ...`` records them. Returns the path."""
    import torch

    with torch.profiler.profile(activities=activities(device)) as prof:
        for _ in range(calls):
            step_fn()
        synchronize(device)
    return export_chrome_trace(prof, path)
