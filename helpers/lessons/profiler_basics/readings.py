"""Readings of notebook 01's profile: which rows are labels, the phase table, sentence and chart (GPU time on a GPU,
with the spread over the recorded steps), the backward's wait chain, the top operator, the ``profiled_step`` row's
metrics, and the results table with the columns that carry information on this machine."""
from __future__ import annotations

import math
from typing import Any

from ...measure import profiling, training
from ...notebook import reference

PHASES = training.PHASES
CHAIN = ("autograd::engine::evaluate_function: ConvolutionBackward0", "ConvolutionBackward0",
         "aten::convolution_backward")
#: the results table's columns, when they carry information (constant configuration goes to its caption)
VIEW = ["experiment", "profiled", "batch_size", "precision", "deterministic", "step_ms_mean", "step_ms_median",
        "first_step_ms", "samples_per_s", "peak_mem_mb", "top_op", "top_op_share", "status", "error"]
DEFAULTS = {"profiled": False, "precision": "fp32", "deterministic": False}
#: rows shown in their own section (the matmul timing; the profiler-overhead rounds, timed on their own clock)
OWN_SECTION = ("async_timing", "step (rounds, unprofiled)", "step (rounds, profiled)")


def is_label(name: str) -> bool:
    """A ``record_function`` label of the step (a phase or ``ProfilerStep#N``), not an operator."""
    return name in PHASES or name.startswith("ProfilerStep")


def phase_view(pt, on_gpu: bool):
    """``profiling.phase_times`` as the table the notebook shows: calls and time per call (CPU; with a GPU also GPU
    time per call and the share of it the GPU was busy, a fraction)."""
    view = pt.assign(gpu_busy_share=pt["gpu_busy_ms"] / pt["gpu_ms"]).reset_index()
    view = view[["label", "calls", "cpu_ms_per_call"] + (["gpu_ms_per_call", "gpu_busy_share"] if on_gpu else [])]
    return view.rename(columns={"cpu_ms_per_call": "cpu_per_call_ms", "gpu_ms_per_call": "gpu_per_call_ms"}).round(4)


def phase_sentence(pt, on_gpu: bool) -> str:
    """One sentence (markdown) with this run's forward and step times: GPU and CPU time on a GPU."""
    f, s = pt.loc["forward"], pt.loc["ProfilerStep*"]
    if not on_gpu:
        return (f"One forward: **{f['cpu_ms_per_call']:.2f} ms** (CPU: no GPU timeline here). "
                f"One profiled step: {s['cpu_ms_per_call']:.2f} ms (the profiler's own cost is measured below).")
    return (f"One forward: **{f['gpu_ms_per_call']:.2f} ms** on the GPU, queued in {f['cpu_ms_per_call']:.2f} ms of "
            f"CPU time ({f['gpu_ms'] / f['cpu_ms']:.1f}×). One profiled step: {s['gpu_ms_per_call']:.2f} ms GPU "
            f"({s['gpu_busy_ms'] / s['gpu_ms']:.0%} busy), {s['cpu_ms_per_call']:.2f} ms CPU. "
            f"GPU times from {pt.attrs['gpu_source']}.")


def phase_calls(prof, on_gpu: bool) -> dict[str, list[float]]:
    """Each phase's time in ms per call, one value per recorded step: its CPU time; on a GPU the span of the device
    work launched while the label was open (on any thread, as ``profiling.phase_times`` attributes it; NaN for a
    call that launched nothing)."""
    ranges: dict[str, list[tuple[float, float]]] = {p: [] for p in PHASES}
    for e in prof.events():
        if e.name in ranges and not profiling.is_device_annotation(e):
            ranges[e.name].append((float(e.time_range.start), float(e.time_range.end)))
    if not on_gpu:
        return {p: [(b - a) / 1000.0 for a, b in r] for p, r in ranges.items()}
    launches = profiling.device_launches(prof)
    out = {}
    for p, r in ranges.items():
        spans = []
        for a, b in r:
            mine = [(s, t) for launch, s, t in launches if a <= launch <= b]
            spans.append((max(t for _, t in mine) - min(s for s, _ in mine)) / 1000.0 if mine else math.nan)
        out[p] = spans
    return out


def _xerr(values: list[float], calls: list[list[float]] | None):
    """Error bars from each bar's value to the lowest and highest call (the spread over the recorded steps)."""
    if calls is None:
        return None
    lo = [max(v - min(c), 0.0) if c else 0.0 for v, c in zip(values, calls)]
    hi = [max(max(c) - v, 0.0) if c else 0.0 for v, c in zip(values, calls)]
    return [lo, hi]


def phase_chart(pt, on_gpu: bool, active: int, title: str, calls: dict[str, list[float]] | None = None,
                cpu_calls: dict[str, list[float]] | None = None):
    """Where one step goes, per phase: GPU time (runs) beside CPU time (queues) on a GPU, CPU time on a CPU. With
    ``calls`` (``phase_calls``; ``cpu_calls`` for the CPU bars on a GPU) each bar gets an error bar from its
    fastest to its slowest recorded step."""
    import matplotlib.pyplot as plt
    import numpy as np

    def per(col, data):
        values = [pt.loc[p, col] / active for p in PHASES]
        return values, _xerr(values, [[x for x in data[p] if x == x] for p in PHASES] if data else None)

    fig, ax = plt.subplots(figsize=(6, 3))
    y = np.arange(len(PHASES))
    kw = dict(capsize=3, error_kw={"elinewidth": 1})
    if on_gpu:
        (gv, ge), (cv, ce) = per("gpu_ms", calls), per("cpu_ms", cpu_calls)
        ax.barh(y - 0.2, gv, 0.4, xerr=ge, label="GPU time (runs)", color="#4c72b0", **kw)
        ax.barh(y + 0.2, cv, 0.4, xerr=ce, label="CPU time (queues)", color="#dd8452", **kw)
        ax.legend()
    else:
        v, e = per("cpu_ms", calls)
        ax.barh(y, v, xerr=e, color=["#4c72b0", "#dd8452", "#55a868"], **kw)
    ax.set_yticks(y, PHASES)
    ax.invert_yaxis()
    ax.set_xlabel(f"{'GPU' if on_gpu else 'CPU'} time per step (ms; bars: mean"
                  + (", whiskers: fastest to slowest step)" if calls else ")"))
    ax.set_title(title)
    return fig


def chain_table(ev, on_gpu: bool):
    """The backward's wait chain (``CHAIN``) from ``profiling.events_frame``: ``(table, nests)``, ``nests`` True when
    all three rows are there and their total times nest (CPU; and device time on a GPU)."""
    cols = ["calls", "self_cpu_ms", "cpu_total_ms"] + (["self_device_ms", "device_total_ms"] if on_gpu else [])
    df = ev[~ev["on_device"]].set_index("name").reindex(list(CHAIN))[cols]

    def nests(col: str) -> bool:
        return bool(df[col].iloc[0] >= df[col].iloc[1] >= df[col].iloc[2])

    ok = bool(df["calls"].notna().all()) and nests("cpu_total_ms") and (not on_gpu or nests("device_total_ms"))
    return df.reset_index().round(3), ok


def top_op(ev, on_gpu: bool) -> tuple[str, float]:
    """The operator (not a label) with the most self time, device time on a GPU; and its share of all operators'
    (on a GPU: of the kernels' rows, which sum to the GPU's busy time)."""
    col = "self_device_ms" if on_gpu else "self_cpu_ms"
    ops = ev[~ev["name"].map(is_label)].sort_values(col, ascending=False, kind="stable")
    top = ops.iloc[0]
    return str(top["name"]), float(top[col] / ops.loc[ops["on_device"] == on_gpu, col].sum())


def profiled_step_metrics(pt, steps, *, on_gpu: bool, active: int, coverage: float, top: tuple[str, float],
                          self_total_ms: float, busy_ms: float) -> dict[str, Any]:
    """The ``profiled_step`` row's metrics: the recorded steps' mean and median (``step_ms_*``, as every step row;
    ``profiled_step_ms_mean`` the same mean), each phase per step (GPU time on a GPU, with the CPU's queueing time
    beside it), the labels' coverage, the top operator and the footer's totals."""
    time_col = "gpu_ms" if on_gpu else "cpu_ms"
    mean = round(steps[time_col].sum() / len(steps), 3)
    m = {"step_ms_mean": mean, "step_ms_median": round(float(steps[time_col].median()), 3),
         "steps_timed": len(steps), "profiled_step_ms_mean": mean,
         **{f"{p}_ms_per_step": round(pt.loc[p, time_col] / active, 3) for p in PHASES}}
    if on_gpu:
        m |= {f"{p}_cpu_ms_per_step": round(pt.loc[p, "cpu_ms"] / active, 3) for p in PHASES}
    return m | {"step_cpu_ms_mean": round(steps["cpu_ms"].mean(), 3), "label_coverage": round(coverage, 4),
                "top_op": top[0], "top_op_share": round(top[1], 4), "self_cpu_total_ms": round(self_total_ms, 3),
                "gpu_busy_ms": round(busy_ms, 3) if on_gpu else None}


def results_view(results, ref=None):
    """The step rows of the results (not ``OWN_SECTION``'s, shown in their own sections) with only the columns that
    carry information: columns empty in every row are left out, and configuration that is the same in every row (batch
    size, precision, status ...) goes to the caption, as does samples/s when every row has the same batch size (it
    is then batch size ÷ mean). With a reference run (``notebook.reference``) its step mean sits beside this run's.
    Returns ``(table, caption)``."""
    df = results.table()
    df = df[~df["experiment"].isin(OWN_SECTION)].reset_index(drop=True)
    for col, default in DEFAULTS.items():
        df[col] = [default if v is None or v != v else v for v in df[col]] if col in df.columns else default
    df = df[[c for c in VIEW if c in df.columns]].dropna(axis=1, how="all")
    if "error" in df.columns and not df["error"].fillna("").astype(str).str.strip().any():
        df = df.drop(columns="error")
    same = {c: df[c].iloc[0] for c in ("batch_size", "precision", "deterministic", "status")
            if c in df.columns and len(df) and df[c].nunique(dropna=False) == 1}
    if "batch_size" in same and "samples_per_s" in df.columns:
        df = df.drop(columns="samples_per_s")
    df = df.drop(columns=list(same)).assign(profiled=lambda d: d["profiled"].map({True: "yes", False: "no"}))
    df = reference.add_column(df, ref, "step_ms_mean")
    words = {"batch_size": lambda v: f"batch size {int(v)}", "precision": str,
             "deterministic": lambda v: "deterministic" if v is True else "not deterministic",
             "status": lambda v: f"status {v}"}
    caption = "Every row: " + ", ".join(words[c](v) for c, v in same.items()) + "." if same else ""
    return df, caption
