"""What notebook 01's measurements cost and how its step times fit together: the profiler's overhead measured in
alternation with unprofiled steps (``overhead_rounds``), the naive and the synchronised timer in alternation
(``timer_rounds``, the asynchronous-timing lesson; its chart), and the table and sentence that put every step time
the notebook shows side by side (``figures_table``, ``figures_sentence``)."""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Mapping

from ...measure import compare as cmp
from ...measure import device as dev
from ...measure import profiling, timing
from ...notebook import env


def round_clock(device) -> str:
    """The clock ``overhead_rounds`` times steps with: ``"wall"`` on a GPU (the step's time includes the device's
    work), ``"cpu"`` on a CPU (the CPU time the process spent, to which other processes' work does not add)."""
    return "wall" if dev.is_cuda(device) else "cpu"


def overhead_rounds(step: Callable[[], Any], rounds: int, steps: int, device, **profile_kw) -> dict[str, list[float]]:
    """The profiler's cost on ``step``: ``rounds`` rounds, each timing ``steps`` steps unprofiled and ``steps`` steps
    under a fresh ``torch.profiler.profile`` (this machine's activities, ``profile_kw``), which first in each round
    alternating (``timing.rotation``), so that the machine's other work falls on both alike. Each block first runs
    one untimed step (under the profiler, its start-up, as a schedule's warm-up). The clock is ``round_clock``: on a
    GPU wall time around the step and a device synchronisation; on a CPU the process's CPU time
    (``time.process_time``), which what else runs on the machine does not stretch, while the profiler's own work,
    on any thread of the process, counts. Python's garbage collector is paused for the rounds
    (``timing.gc_paused``, as ``timeit`` does). Returns ``{"unprofiled": [ms, ...], "profiled": [ms, ...]}``."""
    import torch

    if steps < 1:
        raise ValueError("steps must be at least 1")
    env.quiet_profiler_warning()
    clock = time.perf_counter if round_clock(device) == "wall" else time.process_time
    out: dict[str, list[float]] = {"unprofiled": [], "profiled": []}

    def block() -> list[float]:
        step()
        dev.synchronize(device)
        times = []
        for _ in range(steps):
            t0 = clock()
            step()
            dev.synchronize(device)
            times.append((clock() - t0) * 1000.0)
        return times

    with timing.gc_paused():   # a collection of the objects a profile leaves would land in whichever step ran then
        for _, name in timing.rotation(list(out), rounds):
            if name == "profiled":
                with torch.profiler.profile(activities=profiling.activities(device), **profile_kw):
                    out[name] += block()
            else:
                out[name] += block()
    return out


def timer_rounds(fn: Callable[[], Any], rounds: int, device) -> dict[str, list[float]]:
    """The two timers of the asynchronous-timing lesson on ``fn``, one reading each per round, which first
    alternating: ``"naive"`` is ``time.time()`` around the call alone (``timing.wallclock_unsynchronised``; on a GPU
    the time to *queue* its work),
    ``"synchronised"`` waits for the device before reading the clock. The device is idle before every reading
    (synchronised, untimed). Returns ``{"naive": [ms, ...], "synchronised": [ms, ...]}``."""
    out: dict[str, list[float]] = {"naive": [], "synchronised": []}
    for _, name in timing.rotation(list(out), rounds):
        dev.synchronize(device)
        if name == "naive":
            out[name].append(timing.wallclock_unsynchronised(fn, steps=1))
            continue
        t0 = time.time()
        fn()
        dev.synchronize(device)
        out[name].append((time.time() - t0) * 1000.0)
    dev.synchronize(device)
    return out


def timer_metrics(timers: Mapping[str, list[float]]) -> dict[str, float]:
    """The ``async_timing`` row: each timer's mean and median reading (ms) and how many."""
    m: dict[str, float] = {}
    for name, ms in timers.items():
        m |= {f"{name}_ms_mean": round(statistics.fmean(ms), 3), f"{name}_ms_median": round(statistics.median(ms), 3)}
    return m | {"readings": min(len(v) for v in timers.values())}


def timer_chart(timers: Mapping[str, list[float]], title: str):
    """The two timers' readings: median bars with the interquartile range as error bars, on a log scale (the naive
    reading can be a thousand times shorter)."""
    import matplotlib.pyplot as plt

    names = list(timers)
    med = [statistics.median(timers[n]) for n in names]
    err = [[m - timing.percentile(timers[n], 25) for n, m in zip(names, med)],
           [timing.percentile(timers[n], 75) - m for n, m in zip(names, med)]]
    fig, ax = plt.subplots(figsize=(6, 2.2))
    ax.barh(names, med, xerr=err, capsize=3, color=["#dd8452", "#4c72b0"])
    ax.set_xscale("log")
    ax.set_xlabel("ms per call (median, whiskers: interquartile range)")
    ax.set_title(title)
    return fig


def async_reference(ref) -> str:
    """One line (markdown) with a reference GPU run's two timers and their comparison, or '' without one."""
    if ref is None or ref.metric("async_timing", "naive_ms_mean") is None:
        return ""
    naive, synced = ref.metric("async_timing", "naive_ms_mean"), ref.metric("async_timing", "synchronised_ms_mean")
    line = (f"**Reference, not this run:** on {ref.source()} the naive timer read {naive:.2f} ms per call, the "
            f"synchronised one {synced:.2f} ms")
    found = [c for c in ref.doc.get("comparisons", []) if c.get("a") == "synchronised" and c.get("b") == "naive"]
    return line + (f" ({cmp.describe(found[-1])})." if found else ".")


# --- one step, several figures ---------------------------------------------------------------------------------------
QUIET = 0.05   # wall-clock means within 5% of the rounds' CPU-time means: the machine was quiet then
FIGURES = (  # (results row, what it is, where the notebook shows it, profiled)
    ("train_step", "timed steps", "Baseline (time_steps); results row train_step", "no"),
    ("step (rounds, unprofiled)", "rounds, unprofiled", "this section", "no"),
    ("step (rounds, profiled)", "rounds, profiled", "this section", "yes"),
    ("profiled_step", "recorded steps", "the tables, phase chart, trace view; results row profiled_step", "yes"),
)


def figures_table(results, cold_ms: float):
    """Every step time the notebook shows up to here, one row each: what it is, where it appears, whether the
    profiler ran, the clock (the rounds' is in their row's configuration), how many steps, their mean and median
    (ms); the cold first step first."""
    import pandas as pd

    rows = [{"figure": "first step (cold)", "where": "Baseline (time.time())", "profiled": "no", "clock": "wall",
             "steps": 1, "mean_ms": cold_ms, "median_ms": cold_ms}]
    for name, what, where, profiled in FIGURES:
        row = results.get(name) or {"config": {}, "metrics": {}}
        m = row["metrics"]
        rows.append({"figure": what, "where": where, "profiled": profiled, "clock": row["config"].get("clock", "wall"),
                     "steps": m.get("steps_timed"), "mean_ms": m.get("step_ms_mean"),
                     "median_ms": m.get("step_ms_median")})
    return pd.DataFrame(rows)


def figures_sentence(table, overhead: Mapping[str, Any], on_gpu: bool) -> str:
    """Why the figures of ``figures_table`` differ (markdown), from their numbers and the overhead comparison."""
    f = table.set_index("figure")
    mean = f["mean_ms"]
    if cmp.resolved(overhead):
        cost = (f"The profiler's cost is the rounds' ratio: {cmp.describe(overhead)}, about "
                f"{mean['rounds, profiled'] - mean['rounds, unprofiled']:+.2f} ms per step. ")
    else:
        cost = f"This machine does not resolve the profiler's cost on this step: {cmp.describe(overhead)}. "
    gaps = (mean["timed steps"] / mean["rounds, unprofiled"] - 1, mean["recorded steps"] / mean["rounds, profiled"] - 1)
    above = f"{gaps[0]:+.0%} and {gaps[1]:+.0%}"
    if f.loc["rounds, unprofiled", "clock"] == "cpu":
        why = ("little else ran on the machine at those moments" if max(map(abs, gaps)) <= QUIET else
               "the time the step waited while other work ran, and whatever changed between those moments")
        drift = (f"The rounds count the CPU time the process spent on each step, to which the machine's other work "
                 f"does not add; the baseline's timed steps ({mean['timed steps']:.2f} ms, unprofiled) and the "
                 f"recorded steps ({mean['recorded steps']:.2f} ms, profiled) are wall-clock times, {above} from the "
                 f"rounds' means: {why}. Compare only what ran in alternation, on one clock. ")
    else:
        drift = (f"The baseline's timed steps ({mean['timed steps']:.2f} ms, unprofiled) and the recorded steps "
                 f"({mean['recorded steps']:.2f} ms, profiled) ran at other moments: {above} from the rounds' means "
                 "is what changed between those moments (compare only what ran in alternation). ")
    if on_gpu:
        drift += ("The recorded steps are spans on the GPU timeline of a loop that does not synchronise; the rounds "
                  "synchronise after each step. ")
    spread = (f"Each figure is a mean (throughput and comparisons use means); the medians, less moved by the slowest "
              f"steps, are beside them. The cold first step ({mean['first step (cold)']:.1f} ms, "
              f"{mean['first step (cold)'] / mean['timed steps']:.1f}× the timed mean) is warm-up, left out of "
              "every other figure.")
    return cost + drift + spread
