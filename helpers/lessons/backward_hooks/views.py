"""Notebook 03's tables and chart, built from its profiles, traces and results (figures only, no sentences)."""
from __future__ import annotations

from typing import Any, Mapping

from ... import traces as tr
from ...measure import profiling
from ...notebook import reference
from .experiment import MATRIX, matrix_name

PREFIX = "backward of "   # the hooks' range names: "backward of blocks.0.attn"


def module_table(prof, steps: int):
    """One row per ``backward of <module>`` range in ``prof`` (hooks that open a range before a module's backward
    and close it after): ``module``, ``depth`` (0 for a root, else dots + 1), ``calls``, ``backward_ms`` (host time
    between the hooks, inclusive of children) and ``device_ms`` (kernels launched inside) per step, ``share`` of
    the ``backward`` label. Longest first."""
    df = profiling.events_frame(prof)
    df = df[~df["on_device"]]
    bwd = df.loc[df["name"] == "backward", "cpu_total_ms"].sum() / steps
    out = df[df["name"].str.startswith(PREFIX)].copy()
    out["module"] = out["name"].str.slice(len(PREFIX))
    out["depth"] = [0 if m in ("model", "loss") else m.count(".") + 1 for m in out["module"]]
    out["calls"] = out["calls"] / steps
    out["backward_ms"] = out["cpu_total_ms"] / steps
    out["device_ms"] = out["device_total_ms"] / steps
    out["share"] = out["backward_ms"] / bwd if bwd else float("nan")
    cols = ["module", "depth", "calls", "backward_ms", "device_ms", "share"]
    return out.sort_values("backward_ms", ascending=False).reset_index(drop=True)[cols]


def two_clocks(doc: Mapping[str, Any]):
    """``traces.backward_ops(doc)`` (per backward node and step: host and device time, syncs, GPU idle, rank by each
    clock) with ``host_share``, the node's host time over the mean ``backward`` label's."""
    ranges = tr.phase_ranges(doc, "backward")
    backward_ms = sum(b - a for a, b in ranges) / 1000.0 / max(len(ranges), 1)
    ops = tr.backward_ops(doc)
    ops["host_share"] = ops["host_ms"] / backward_ms if backward_ms else float("nan")
    return ops


def op_diff(a, b, labels: tuple[str, str] = ("default", "deterministic"), time_col: str = "cpu_total_ms"):
    """Ops and kernels whose call counts differ between two profiles of the same steps (``a``, ``b``): calls and
    ``time_col`` of each, ``kind`` "kernel" for device rows, kernels first, then by the difference in calls."""
    la, lb = labels
    frames = []
    for prof, lab in ((a, la), (b, lb)):
        f = profiling.events_frame(prof).groupby("name").agg(
            calls=("calls", "sum"), ms=(time_col, "sum"), on_device=("on_device", "any"))
        frames.append(f.add_suffix(f"_{lab}"))
    df = frames[0].join(frames[1], how="outer")
    for c in df.columns:
        df[c] = df[c].eq(True) if c.startswith("on_device") else df[c].fillna(0)
    df = df[df[f"calls_{la}"] != df[f"calls_{lb}"]].reset_index()
    df["kind"] = ["kernel" if x or y else "op" for x, y in zip(df[f"on_device_{la}"], df[f"on_device_{lb}"])]
    df["_d"] = (df[f"calls_{lb}"] - df[f"calls_{la}"]).abs()
    df = df.sort_values(["kind", "_d", "name"], ascending=[True, False, True])
    return df[["name", "kind", f"calls_{la}", f"calls_{lb}", f"ms_{la}", f"ms_{lb}"]].reset_index(drop=True)


def ops_tree(prof, node: str = "GatherBackward0") -> list[tuple[int, str]]:
    """The ops under the first ``node`` event of a profile as ``(depth, name)`` in call order (depth 1: called by
    the node); [] without one."""
    out: list[tuple[int, str]] = []

    def walk(e, depth):
        for c in sorted(e.cpu_children, key=lambda c: c.time_range.start):
            out.append((depth, c.name))
            walk(c, depth + 1)

    for e in [e for e in prof.events() if e.name == node][:1]:
        walk(e, 1)
    return out


def _tidy(df):
    """Without ``status`` when every row is ok and ``error`` when it is empty."""
    drop = [c for c, empty in (("status", (df["status"] == "ok").all()), ("error", not df["error"].any())) if empty]
    return df.drop(columns=drop)


def matrix_table(results, on_gpu: bool, ref=None):
    """One row per ``MATRIX`` configuration: its interleaved step time (mean, interquartile range) and what its
    profile counted (syncs per step and GPU idle after them on a GPU; the patch-selecting node's host time, the
    gather and index backward calls), with ``ref``'s (``notebook.reference``) step mean and syncs beside them."""
    import pandas as pd

    prof_cols = (["syncs_per_step", "sync_gpu_idle_per_step_ms"] if on_gpu else []) + [
        "select_backward_host_ms", "gather_backward_calls", "index_backward_calls"]
    recs = []
    for d, m in MATRIX:
        name = matrix_name(d, m)
        rows = [results.get(f"interleaved {name}"), results.get(name)]
        ok = [r for r in rows if r is not None and r["status"] == "ok"]
        tm, pm = (r["metrics"] if r in ok else {} for r in rows)
        recs.append({"experiment": f"interleaved {name}", "profile": name, "deterministic": d, "method": m,
                     **{k: tm.get(k) for k in ("step_ms_mean", "step_ms_p25", "step_ms_p75")},
                     **{k: pm.get(k) for k in prof_cols}, "status": "ok" if len(ok) == 2 else "failed",
                     "error": "; ".join(r["error"] for r in rows if r is not None and r["error"])})
    df = reference.add_column(pd.DataFrame(recs), ref, "step_ms_mean")
    df = reference.add_column(df, ref, "syncs_per_step", on="profile")
    return _tidy(df.drop(columns=["experiment", "profile"]))


def runs_table(results, on_gpu: bool):
    """The configurations timed one at a time (the baseline, the panel's runs): step mean and interquartile range,
    the patch-selecting node's host time and, on a GPU, the syncs per step."""
    cols = ["step_ms_mean", "step_ms_p25", "step_ms_p75", "select_backward_host_ms"] + (
        ["syncs_per_step", "sync_gpu_idle_per_step_ms"] if on_gpu else [])
    df = results.table(cols)
    if df.empty or "method" not in df.columns:
        return df
    keep = df["method"].notna() & df["experiment"].map(lambda n: "bs=" in n or n.startswith("baseline"))
    return _tidy(df[keep].drop(columns=["timing"], errors="ignore").reset_index(drop=True))


def results_chart(times: Mapping[tuple[bool, str], Any], modules, title: str):
    """Left: the matrix's interleaved mean step times with their interquartile range. Right: the modules at depth
    1-2 with the largest share of the backward (hook ranges)."""
    import matplotlib.pyplot as plt

    cells = list(times)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.4))
    mid = [times[c].mean for c in cells]
    err = [[max(0.0, m - times[c].p25) for m, c in zip(mid, cells)], [max(0.0, times[c].p75 - m)
                                                                        for m, c in zip(mid, cells)]]
    ax1.bar([matrix_name(*c).replace(" ", "\n") for c in cells], mid, yerr=err, capsize=4,
            color=["#c44e52", "#8172b2", "#4c72b0", "#55a868"][:len(cells)])
    ax1.set_ylabel("step time, interleaved mean (ms)")
    ax1.set_title(title)
    top = modules[modules["depth"].between(1, 2)].head(8).iloc[::-1]
    ax2.barh(top["module"], top["share"] * 100, color="#dd8452")
    ax2.set_xlabel("share of backward time (%)")
    ax2.set_title("Backward time per module (hook ranges)")
    fig.tight_layout()
    return fig
