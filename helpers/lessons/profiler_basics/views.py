"""Notebook 01's tables and charts: non-wrapping ``key_averages()`` tables, the three orders, the phase chart, the
results and article tables."""

import math
import re

import numpy as np
import pandas as pd

from perf_doctor import events as trace_events
from perf_doctor.kernels import short_name

from ...measure import compare, profiling, training
from ...notebook import reference
from ...notebook.display import show, wrapped

WIDTH = 120  # characters of one line in a JupyterLab output area at 1400 px with the file browser open (~124)
NAME_WIDTH = 36  # ``max_name_column_width``: a CPU table (name + 6 columns of 14) within WIDTH
# the results table's columns, in order
VIEW = """experiment profiled batch_size precision deterministic step_ms_mean step_ms_median first_step_ms
samples_per_s peak_mem_mb top_op top_op_share status error""".split()
DEFAULTS = {"profiled": False, "precision": "fp32", "deterministic": False}
FP32 = re.compile(r"step bs=\d+ fp32")  # the panel's default row, at each run's own batch size
OWN_SECTION = ("async_timing", "step (rounds, unprofiled)", "step (rounds, profiled)")


def fits(text: str, width: int = WIDTH) -> bool:
    """Whether every line of a text table fits ``width`` characters (trailing spaces never wrap)."""
    return max((len(line.rstrip()) for line in text.splitlines()), default=0) <= width


def _key(attr: str) -> str:
    return attr.replace("cuda", "device")  # as ``table(sort_by=...)`` reads its key


def averages_frame(avgs, sort_by: str, row_limit=10, columns="time", on_gpu=False):
    """The rows ``avgs.table(sort_by, row_limit)`` prints as a DataFrame: times (ms) and the self-time share, memory
    (MB), or times by input shape (``columns``); on a GPU the device's figures."""
    t = "device" if on_gpu else "cpu"
    top = sorted(avgs, key=lambda e: getattr(e, _key(sort_by)), reverse=True)[:row_limit]
    df = pd.DataFrame({"name": [short_name(e.key) for e in top], "calls": [e.count for e in top]})
    if columns == "shapes":
        df.insert(1, "input_shapes", [str(e.input_shapes) for e in top])
    if columns == "memory":
        for k in (f"self_{t}", t):
            df[f"{k}_mem_mb"] = [getattr(e, f"{k}_memory_usage") / 2**20 for e in top]
        return df
    if on_gpu:  # the CPU's queueing time beside the GPU's
        df["self_cpu_ms"] = [e.self_cpu_time_total / 1e3 for e in top]
    df[f"self_{t}_ms"] = [getattr(e, f"self_{t}_time_total") / 1e3 for e in top]
    df[f"{t}_total_ms"] = [getattr(e, f"{t}_time_total") / 1e3 for e in top]
    if columns == "time":  # of the footer's total: host rows on a CPU, kernels on a GPU
        own = [e for e in avgs if trace_events.is_host(e) != on_gpu]
        own = [e for e in own if not profiling.is_device_annotation(e)]
        everything = sum(getattr(e, f"self_{t}_time_total") for e in own) / 1e3 or 1.0
        df[f"self_{t}_share"] = df[f"self_{t}_ms"] / everything
    return df


def show_table(avgs, sort_by: str, row_limit=10, columns="time", on_gpu=False) -> None:
    """Print ``avgs.table(...)`` where it fits ``WIDTH``; else its width and the rows as a DataFrame."""
    text = avgs.table(sort_by=sort_by, row_limit=row_limit, max_name_column_width=NAME_WIDTH)
    if fits(text):
        print("\n".join(line.rstrip() for line in text.splitlines()))
        return
    wide = max(len(line.rstrip()) for line in text.splitlines())
    print(f"key_averages().table() is {wide} characters wide (~{WIDTH} fit here); as a DataFrame:")
    show(averages_frame(avgs, sort_by, row_limit, columns, on_gpu), precision=3)


def call_levels(prof) -> dict[str, int]:
    """Each host row's smallest level in its thread's call tree (0: top level)."""
    out: dict[str, int] = {}
    for e in prof.events():
        if trace_events.is_host(e) and not profiling.is_device_annotation(e):
            depth, parent = 0, e.cpu_parent
            while parent is not None:
                depth, parent = depth + 1, parent.cpu_parent
            out[e.key] = min(out.get(e.key, depth), depth)
    return out


def orders_table(prof, keys, active: int, top: int = 3):
    """The host rows in the three orders of ``keys``: top rows, call level, calls per step, times (ms)."""
    rows = [e for e in profiling.host_averages(prof) if trace_events.is_host(e)]
    levels = call_levels(prof)
    cols = {o: f"{o}_ms".replace(" ", "_") for o in keys}  # "per call": per_call_ms
    df = pd.DataFrame({"name": [e.key for e in rows], "level": [levels.get(e.key) for e in rows]})
    df["calls_per_step"] = [e.count / active for e in rows]
    for o, k in keys.items():
        df[cols[o]] = [getattr(e, _key(k)) / 1e3 for e in rows]
    ranked = [df.nlargest(top, cols[o]).assign(order=o, rank=range(1, top + 1)) for o in keys]
    return pd.concat(ranked, ignore_index=True)[["order", "rank", *df.columns]]


def phase_calls(prof, on_gpu: bool) -> dict[str, list[float]]:
    """Each phase's ms per recorded step: CPU time, or on a GPU the span of the device work it launched."""
    ranges: dict[str, list[tuple[float, float]]] = {p: [] for p in training.PHASES}
    for e in prof.events():
        if e.name in ranges and not profiling.is_device_annotation(e):
            ranges[e.name].append((float(e.time_range.start), float(e.time_range.end)))
    if not on_gpu:
        return {p: [(b - a) / 1000.0 for a, b in r] for p, r in ranges.items()}
    launches = profiling.device_launches(prof)
    out = {}
    for p, r in ranges.items():
        spans = [[(s, t) for launch, s, t in launches if a <= launch <= b] for a, b in r]
        out[p] = [
            (max(t for _, t in m) - min(s for s, _ in m)) / 1e3 if m else math.nan for m in spans
        ]
    return out


def _whiskers(means, calls):
    """Each phase's fastest and slowest step as error bars about its mean (steps without a figure left out)."""
    steps = [[x for x in calls[p] if x == x] or [m] for p, m in zip(training.PHASES, means)]
    low = [m - min(s) for m, s in zip(means, steps)]
    return np.clip([low, [max(s) - m for m, s in zip(means, steps)]], 0.0, None)


def phase_chart(pt, on_gpu: bool, active: int, title: str, calls=None, cpu_calls=None):
    """Per phase: GPU beside CPU time on a GPU, CPU time on a CPU; whiskers from ``calls`` / ``cpu_calls``."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    y = np.arange(len(training.PHASES))
    bars = [
        ("gpu_ms", calls, "GPU time (runs)", -0.2),
        ("cpu_ms", cpu_calls, "CPU time (queues)", 0.2),
    ]
    for col, data, label, dy in bars if on_gpu else [("cpu_ms", calls, None, 0.0)]:
        v = [pt.loc[p, col] / active for p in training.PHASES]
        err = _whiskers(v, data) if data else None
        ax.barh(y + dy, v, 0.4 if on_gpu else 0.8, xerr=err, label=label, capsize=3)
    if on_gpu:
        ax.legend()
    ax.set_yticks(y, training.PHASES)
    ax.invert_yaxis()
    whiskers = " (whiskers: fastest to slowest)" if calls else ""
    ax.set(xlabel=f"{'GPU' if on_gpu else 'CPU'} ms per step{whiskers}", title=title)
    return fig


def results_view(results, ref=None):
    """The step rows; what every row shares and each failed row's reason as a caption: ``(table, caption)``."""
    df = results.table()
    df = df[~df["experiment"].isin(OWN_SECTION)].reset_index(drop=True)
    for col, default in DEFAULTS.items():
        df[col] = [default if pd.isna(v) else v for v in df[col]] if col in df.columns else default
    df = df[[c for c in VIEW if c in df.columns]].dropna(axis=1, how="all")
    shared = ("batch_size", "precision", "deterministic", "status")
    same = {
        c: df[c].iloc[0] for c in shared if c in df.columns and df[c].nunique(dropna=False) == 1
    }
    if "batch_size" in same:
        df = df.drop(columns="samples_per_s", errors="ignore")  # the step time says the same
    words = {
        "batch_size": lambda v: f"batch size {int(v)}",
        "precision": str,
        "deterministic": lambda v: "deterministic" if str(v) == "True" else "not deterministic",
        "status": lambda v: f"status {v}",
    }
    caption = [f"Every row: {', '.join(words[c](v) for c, v in same.items())}."] if same else []
    # a failed row's reason is a sentence: under the table, not in a column that widens it past the page
    caption += [f"failed, {e}: {err}" for e, err in zip(df["experiment"], df["error"]) if err]
    df = df.drop(columns=[*same, "error"])
    return reference.add_column(df, ref, "step_ms_mean"), wrapped("\n".join(caption))


def step_figures(results):
    """Every step time shown before the profiler's rounds: whether profiled, the clock, mean and median."""
    shown = ["train_step", "step (rounds, unprofiled)", "step (rounds, profiled)", "profiled_step"]
    df = results.table(["steps_timed", "step_ms_mean", "step_ms_median"]).set_index("experiment")
    cols = ["profiled", "clock", "steps_timed", "step_ms_mean", "step_ms_median"]
    return df.loc[[n for n in shown if n in df.index], cols].reset_index()


def reference_timers(ref) -> None:
    """The reference GPU's reading of the two timers, labelled as not this run's."""
    gap = ref and ref.comparison("synchronised", "naive")
    if gap:
        line = compare.describe(gap | {"role": "timer"})
        print(f"Reference, not this run ({ref.source()}): {line}")


def _fp32_row(rows):
    return next((r for r in rows if r.get("status") == "ok" and FP32.fullmatch(r["name"])), None)


def _top(row):
    m = row and row["metrics"]
    if not m:
        return None, None
    text = f"{short_name(m['top_op'])}: {m['top_op_share']:.1%} of self"
    return text, "yes" if "convolution_b" in m["top_op"] else "no"


def _timers(gap):
    text = gap and compare.describe(gap | {"role": "timer"})
    return text, "yes" if gap and gap["ratio"] > 2 else "no"


def _nests(value):
    return {True: "nests", False: "does not nest"}.get(value), value and "yes" or "no"


def article_table(results, ref):
    """The source article's three points beside the reference's figures and this run's."""
    on_gpu = str(results.env.get("device", "")).startswith("cuda")
    ref_nests = ref and next((v for k, v in ref.doc["checks"].items() if "chain nests" in k), None)
    gap = results.comparison("synchronised", "naive")
    return reference.article_table(
        [
            {
                "effect": "backward wait chain nests",
                "article": "the same CUDA total in 3 rows; Self CUDA 0 / 0 / 54%",
                "reference": _nests(ref_nests),
                "this_run": _nests(results.metric("profiled_step", "chain_nests")),
                "why": "" if on_gpu else "CPU times here, not CUDA ones",
            },
            {
                "effect": "top op by self time",
                "article": "convolution backward, 54% of Self CUDA",
                "reference": _top(ref and _fp32_row(ref.doc["experiments"])),
                "this_run": _top(_fp32_row(results.to_dict()["experiments"])),
                "why": "another model: on the H100 its batch-norm backward outweighs its convolutions'",
            },
            {
                "effect": "time.time() around GPU work",
                "article": "inaccurate (no figure)",
                "reference": _timers(ref and ref.comparison("synchronised", "naive")),
                "this_run": _timers(gap) if gap or on_gpu else ("no queue on a CPU", "no"),
                "why": "on a CPU each op returns when its work is done",
            },
        ]
    )
