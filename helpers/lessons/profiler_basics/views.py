"""Notebook 01's tables and charts: non-wrapping ``key_averages()`` tables, the three orders, the phase chart, the
results, comparisons and article tables."""

import math
import re
from typing import Any, Mapping

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


def averages_frame(
    avgs, sort_by: str, row_limit: int = 10, columns: str = "time", on_gpu: bool = False
):
    """The rows ``avgs.table(sort_by, row_limit)`` prints as a DataFrame of ``columns`` (time, memory or shapes)."""
    t = "device" if on_gpu else "cpu"
    everything = (
        sum(
            getattr(e, f"self_{t}_time_total")
            for e in avgs
            if not on_gpu
            or (not trace_events.is_host(e) and not getattr(e, "is_user_annotation", False))
        )
        or 1.0
    )
    out = []
    for e in sorted(avgs, key=lambda e: getattr(e, _key(sort_by)), reverse=True)[:row_limit]:
        r: dict[str, Any] = {
            "name": short_name(e.key),
            **({"input_shapes": str(e.input_shapes)} if columns == "shapes" else {}),
            "calls": e.count,
        }
        if columns == "time":
            r |= (
                {"self_cpu_ms": e.self_cpu_time_total / 1e3, "cpu_total_ms": e.cpu_time_total / 1e3}
                if on_gpu
                else {}
            )
            r[f"self_{t}_share"] = getattr(e, f"self_{t}_time_total") / everything
        r[f"self_{t}_ms"] = getattr(e, f"self_{t}_time_total") / 1e3
        if columns != "memory":
            r[f"{t}_total_ms"] = getattr(e, f"{t}_time_total") / 1e3
        if columns == "time":
            r[f"{t}_avg_ms"] = getattr(e, f"{t}_time_total") / 1e3 / max(e.count, 1)
        if columns == "memory":
            r |= {
                f"{k}_mem_mb": getattr(e, f"{k}_memory_usage") / 2**20
                for k in ("cpu", "self_cpu") + (("device", "self_device") if on_gpu else ())
            }
        out.append(r)
    return pd.DataFrame(out)


def show_table(
    avgs, sort_by: str, row_limit: int = 10, columns: str = "time", on_gpu: bool = False
) -> None:
    """Print ``avgs.table(...)`` where it fits ``WIDTH``; else its width and the rows as a DataFrame."""
    text = avgs.table(sort_by=sort_by, row_limit=row_limit, max_name_column_width=NAME_WIDTH)
    if fits(text):
        print("\n".join(line.rstrip() for line in text.splitlines()))
        return
    print(
        f"key_averages().table(): {max(len(line.rstrip()) for line in text.splitlines())} characters wide "
        f"(~{WIDTH} fit here), as a DataFrame:"
    )
    show(averages_frame(avgs, sort_by, row_limit, columns, on_gpu), precision=3)


def call_levels(prof) -> dict[str, int]:
    """Each host row's smallest level in its thread's call tree (0: top level)."""
    out: dict[str, int] = {}
    for e in (
        e
        for e in prof.events()
        if trace_events.is_host(e) and not profiling.is_device_annotation(e)
    ):
        depth, parent = 0, e.cpu_parent
        while parent is not None:
            depth, parent = depth + 1, parent.cpu_parent
        out[e.key] = min(out.get(e.key, depth), depth)
    return out


def orders_table(prof, keys: Mapping[str, str], active: int, top: int = 3):
    """The host rows in the three orders of ``keys``: top rows, call level, calls per step, times (ms)."""
    rows = [e for e in profiling.host_averages(prof) if trace_events.is_host(e)]
    levels = call_levels(prof)
    val = {o: (lambda e, k=k: getattr(e, _key(k)) / 1e3) for o, k in keys.items()}
    return pd.DataFrame(
        [
            {
                "order": o,
                "rank": i,
                "name": e.key,
                "level": levels.get(e.key),
                "calls_per_step": e.count / active,
                "self_ms": val["self"](e),
                "total_ms": val["total"](e),
                "per_call_ms": val["per call"](e),
            }
            for o in keys
            for i, e in enumerate(sorted(rows, key=val[o], reverse=True)[:top], 1)
        ]
    )


def phase_calls(prof, on_gpu: bool) -> dict[str, list[float]]:
    """Each phase's ms per recorded step: CPU time, or on a GPU the span of the device work it launched."""
    ranges: dict[str, list[tuple[float, float]]] = {p: [] for p in training.PHASES}
    for e in prof.events():
        if e.name in ranges and not profiling.is_device_annotation(e):
            ranges[e.name].append((float(e.time_range.start), float(e.time_range.end)))
    if not on_gpu:
        return {p: [(b - a) / 1000.0 for a, b in r] for p, r in ranges.items()}
    launches = profiling.device_launches(prof)
    mine = {
        p: [[(s, t) for launch, s, t in launches if a <= launch <= b] for a, b in r]
        for p, r in ranges.items()
    }
    return {
        p: [
            (max(t for _, t in m) - min(s for s, _ in m)) / 1000.0 if m else math.nan for m in spans
        ]
        for p, spans in mine.items()
    }


def phase_chart(
    pt,
    on_gpu: bool,
    active: int,
    title: str,
    calls: Mapping[str, list[float]] | None = None,
    cpu_calls: Mapping[str, list[float]] | None = None,
):
    """Per phase: GPU beside CPU time on a GPU, CPU time on a CPU; whiskers from ``calls`` / ``cpu_calls``."""
    import matplotlib.pyplot as plt

    def bars(col, data):
        v = [pt.loc[p, col] / active for p in training.PHASES]
        if not data:
            return v, None
        c = [[x for x in data[p] if x == x] or [m] for p, m in zip(training.PHASES, v)]
        return v, [
            [max(m - min(x), 0.0) for m, x in zip(v, c)],
            [max(max(x) - m, 0.0) for m, x in zip(v, c)],
        ]

    fig, ax = plt.subplots(figsize=(6, 3))
    y = np.arange(len(training.PHASES))
    kw = dict(capsize=3, error_kw={"elinewidth": 1})
    if on_gpu:
        (gv, ge), (cv, ce) = bars("gpu_ms", calls), bars("cpu_ms", cpu_calls)
        ax.barh(y - 0.2, gv, 0.4, xerr=ge, label="GPU time (runs)", color="#4c72b0", **kw)
        ax.barh(y + 0.2, cv, 0.4, xerr=ce, label="CPU time (queues)", color="#dd8452", **kw)
        ax.legend()
    else:
        v, e = bars("cpu_ms", calls)
        ax.barh(y, v, xerr=e, color=["#4c72b0", "#dd8452", "#55a868"], **kw)
    ax.set_yticks(y, training.PHASES)
    ax.invert_yaxis()
    ax.set(
        xlabel=f"{'GPU' if on_gpu else 'CPU'} ms per step"
        + (" (whiskers: fastest to slowest)" if calls else ""),
        title=title,
    )
    return fig


def results_view(results, ref=None):
    """The step rows' informative columns, what every row shares as a caption: ``(table, caption)``."""
    df = results.table()
    df = df[~df["experiment"].isin(OWN_SECTION)]
    df = pd.concat([df[df["status"] == "ok"], df[df["status"] != "ok"]], ignore_index=True)
    for col, default in DEFAULTS.items():
        df[col] = (
            [default if v is None or v != v else v for v in df[col]]
            if col in df.columns
            else default
        )
    df = df[[c for c in VIEW if c in df.columns]].assign(
        error=lambda d: d["error"].where(d["error"] != "")
    )
    if "top_op" in df.columns:
        df["top_op"] = [short_name(v) if isinstance(v, str) else v for v in df["top_op"]]
    df = df.dropna(axis=1, how="all")
    same = {
        c: df[c].iloc[0]
        for c in ("batch_size", "precision", "deterministic", "status")
        if c in df.columns and len(df) and df[c].nunique(dropna=False) == 1
    }
    if "batch_size" in same and "samples_per_s" in df.columns:
        df = df.drop(columns="samples_per_s")
    df = df.drop(columns=list(same)).assign(
        profiled=lambda d: d["profiled"].map({True: "yes", False: "no"})
    )
    words = {
        "batch_size": lambda v: f"batch size {int(v)}",
        "precision": str,
        "status": lambda v: f"status {v}",
        "deterministic": lambda v: "deterministic" if v is True else "not deterministic",
    }
    caption = "Every row: " + ", ".join(words[c](v) for c, v in same.items()) + "." if same else ""
    # a failed row's reason is a sentence: under the table, not in a column that widens it past the page
    if "error" in df.columns:
        failed = [
            f"{e}: {err}" for e, err in zip(df["experiment"], df["error"]) if isinstance(err, str)
        ]
        df = df.drop(columns="error")
        caption = "\n".join([caption, *(f"failed, {f}" for f in failed)]).strip()
    return reference.add_column(df, ref, "step_ms_mean"), wrapped(caption)


def comparisons_view(results):
    """The comparisons in the one convention: b takes ``time_ratio``× a's time, its 95% interval, the verdict."""
    rows = [
        {
            "b": c["b"],
            "a": c["a"],
            "metric": c["metric"],
            **compare.takes(c),
            "floor": c.get("floor"),
        }
        for c in results.comparisons
    ]
    return pd.DataFrame(
        rows, columns=["b", "a", "metric", "time_ratio", "interval", "verdict", "floor"]
    )


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
