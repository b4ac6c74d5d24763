"""Notebook 03's tables and chart, built from its profiles, traces and results (figures only, no sentences)."""

import re
from typing import Any, Mapping

import pandas as pd

import perf_doctor as tr
from perf_doctor.kernels import short_name

from ...measure import profiling
from ...notebook import reference
from .experiment import MATRIX, matrix_name

PREFIX = "backward of "  # the hooks' range names: "backward of blocks.0.attn"
WRAPPER = "autograd::engine::evaluate_function: "  # the engine's range around each backward node


def module_table(prof, steps: int):
    """Per ``backward of <module>`` range, per step: depth, calls, host and device ms, share of ``backward``."""
    df = profiling.events_frame(prof)
    df = df[~df["on_device"]]
    bwd = df.loc[df["name"] == "backward", "cpu_total_ms"].sum() / steps
    out = df[df["name"].str.startswith(PREFIX)].copy()
    out["module"] = out["name"].str.slice(len(PREFIX))
    out["depth"] = [0 if m in ("model", "loss") else m.count(".") + 1 for m in out["module"]]
    out = out.assign(
        calls=out["calls"] / steps,
        backward_ms=out["cpu_total_ms"] / steps,
        device_ms=out["device_total_ms"] / steps,
    )
    out["share"] = out["backward_ms"] / bwd if bwd else float("nan")
    out = out.sort_values("backward_ms", ascending=False).reset_index(drop=True)
    return out[["module", "depth", "calls", "backward_ms", "device_ms", "share"]]


def two_clocks(doc: Mapping[str, Any]):
    """``traces.backward_ops(doc)`` with ``host_share``: host time over the mean ``backward`` label's."""
    ranges = tr.phase_ranges(doc, "backward")
    backward_ms = sum(b - a for a, b in ranges) / 1000.0 / max(len(ranges), 1)
    ops = tr.backward_ops(doc)
    ops["host_share"] = ops["host_ms"] / backward_ms if backward_ms else float("nan")
    return ops


def _per_step(doc: Mapping[str, Any]):
    """Calls and ms per profiled step of each op (device time launched inside it, on a CPU host time) and kernel,
    from torch-tb-profiler's Operator and Kernel views (``perf_doctor.Trace``)."""
    t, steps = tr.open_trace(doc), max(len(tr.step_ranges(doc)), 1)
    ops = t.operators()
    ops = ops[~ops["name"].str.startswith(WRAPPER)]
    ms = ops["device_total_ms"] if t.has_gpu else ops["host_total_ms"]
    frames = [pd.DataFrame({"name": ops["name"], "kind": "op", "calls": ops["calls"], "ms": ms})]
    if t.has_gpu:
        k = t.kernels()
        kernels = {"name": k["name"].map(short_name), "kind": "kernel", "calls": k["calls"]}
        frames.append(pd.DataFrame({**kernels, "ms": k["total_ms"]}))
    return pd.concat(frames).groupby(["name", "kind"]).sum() / steps


def trace_diff(a: Mapping[str, Any], b: Mapping[str, Any], top: int = 12):
    """The first ``top`` ops and kernels whose calls per step (on a GPU: or time, by > 0.01 ms) differ from trace ``a``
    (default mode) to ``b`` (deterministic), largest change first."""
    timed = tr.has_gpu(a) and tr.has_gpu(b)
    df = _per_step(a).join(_per_step(b), how="outer", lsuffix="_default", rsuffix="_deterministic")
    df = df.fillna(0.0).reset_index()
    df["delta_ms"] = df["ms_deterministic"] - df["ms_default"]
    df["_calls"] = (df["calls_deterministic"] - df["calls_default"]).abs()
    df["_ms"] = df["delta_ms"].abs()
    df = df[(df["_calls"] > 0) | (timed & (df["_ms"] > 0.01))]
    order = ["_ms", "_calls"] if timed else ["_calls", "_ms"]
    df = df.sort_values(order + ["name"], ascending=[False, False, True]).head(top)
    return df.drop(columns=["_calls", "_ms"]).reset_index(drop=True)


def ops_tree(prof, node: str = "GatherBackward0") -> list[tuple[int, str]]:
    """``(depth, name)`` of the ops under the first ``node`` event, in call order; [] without one."""
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
    ok, no_error = (df["status"] == "ok").all(), not df["error"].any()
    return df.drop(columns=[c for c, empty in (("status", ok), ("error", no_error)) if empty])


def matrix_table(results, on_gpu: bool, ref=None):
    """Per ``MATRIX`` configuration: interleaved step time and its profile's counts, ``ref``'s beside."""
    prof_cols = ["select_backward_host_ms", "gather_backward_calls", "index_backward_calls"]
    if on_gpu:
        prof_cols = ["syncs_per_step", "sync_gpu_idle_per_step_ms"] + prof_cols
    recs = []
    for d, m in MATRIX:
        name = matrix_name(d, m)
        rows = [results.get(f"interleaved {name}"), results.get(name)]
        ok = [r for r in rows if r is not None and r["status"] == "ok"]
        tm, pm = (r["metrics"] if r in ok else {} for r in rows)
        recs.append(
            {
                "experiment": f"interleaved {name}",
                "profile": name,
                "deterministic": d,
                "method": m,
                **{k: tm.get(k) for k in ("step_ms_mean", "step_ms_p25", "step_ms_p75")},
                **{k: pm.get(k) for k in prof_cols},
                "status": "ok" if len(ok) == 2 else "failed",
                "error": "; ".join(r["error"] for r in rows if r is not None and r["error"]),
            }
        )
    df = reference.add_column(pd.DataFrame(recs), ref, "step_ms_mean")
    df = reference.add_column(df, ref, "syncs_per_step", on="profile")
    return _tidy(df.drop(columns=["experiment", "profile"]))


def runs_table(results, on_gpu: bool):
    """The configurations timed one at a time: step mean and IQR, the selecting node's host time, syncs."""
    cols = ["step_ms_mean", "step_ms_p25", "step_ms_p75", "select_backward_host_ms"] + (
        ["syncs_per_step", "sync_gpu_idle_per_step_ms"] if on_gpu else []
    )
    df = results.table(cols)
    if df.empty or "method" not in df.columns:
        return df
    one_at_a_time = df["experiment"].str.contains("bs=") | df["experiment"].str.startswith(
        "baseline"
    )
    keep = df["method"].notna() & one_at_a_time
    return _tidy(df[keep].drop(columns=["timing"], errors="ignore").reset_index(drop=True))


def results_chart(times: Mapping[tuple[bool, str], Any], modules, title: str):
    """Left: the matrix's interleaved step times (IQR whiskers); right: depth 1-2 modules' shares of backward."""
    import matplotlib.pyplot as plt

    cells = list(times)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10.5, 3.4))
    mid = [times[c].mean for c in cells]
    err = [
        [max(0.0, m - times[c].p25) for m, c in zip(mid, cells)],
        [max(0.0, times[c].p75 - m) for m, c in zip(mid, cells)],
    ]
    ax1.bar([matrix_name(*c).replace(" ", "\n") for c in cells], mid, yerr=err, capsize=4)
    ax1.set(ylabel="step time, interleaved mean (ms)", title=title)
    top = modules[modules["depth"].between(1, 2)].head(8).iloc[::-1]
    ax2.barh(top["module"], top["share"] * 100)
    ax2.set(xlabel="share of backward time (%)", title="Backward time per module (hook ranges)")
    fig.tight_layout()
    return fig


_CALL = re.compile(r"^(?P<file>.+\.py):(?P<line>\d+)(?P<start> \(function start\))?$")


def stack_line(origin: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``file``, ``line``, ``exact`` (the calling line, not the function's def) of a ``forward_origin`` result."""
    m = _CALL.match(str((origin or {}).get("call_from") or ""))
    return m and {"file": m["file"], "line": int(m["line"]), "exact": m["start"] is None}


def reread(entry: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """An entry without ``floor_from``: its verdict re-read from its interval (floor 0), as ``measure.compare`` does."""
    if not entry or "floor_from" in entry or not isinstance(entry.get("ratio"), (int, float)):
        return dict(entry) if entry else None
    from ...measure.compare import SMALL

    r, lo, hi = entry["ratio"], entry.get("low", entry["ratio"]), entry.get("high", entry["ratio"])
    verdict = "faster" if lo > 1 else "slower" if hi < 1 else "no difference"
    if verdict != "no difference" and max(r, 1 / r) < 1 + SMALL:
        verdict += ", small"
    entry = {**entry, "floor": 0.0, "floor_from": "re-read from the recorded interval"}
    return {**entry, "verdict": verdict}


def matrix_counts(rows: Mapping[tuple[bool, str], Mapping[str, Any]], on_gpu: bool):
    """Per ``MATRIX`` profile: syncs per backward by kind (on a GPU also the GPU idle after them), the selecting
    node's host time and how often ``GatherBackward0`` and ``IndexBackward0`` ran."""
    kinds = [f"{k}_per_step" for k in tr.KINDS] + (["sync_gpu_idle_per_step_ms"] if on_gpu else [])
    calls = ["select_backward_host_ms", "gather_backward_calls", "index_backward_calls"]
    metrics = {matrix_name(*k): {**r["metrics"], "error": r["error"]} for k, r in rows.items()}
    df = pd.DataFrame(metrics).T
    errors = ["error"] if df["error"].any() else []
    return df.reindex(columns=["syncs_per_step", *kinds, *calls, *errors])


def ops_under(profs: Mapping[str, Any], node: str = "GatherBackward0") -> dict[str, list[str]]:
    """Each mode's ops under the gather model's ``node`` (``nondet gather``, ``det gather`` profiles), in call order,
    the memory fills (``aten::fill_``) set aside."""
    out = {}
    for mode, name in (("default", "nondet gather"), ("deterministic", "det gather")):
        tree = ops_tree(profs[name], node) if name in profs else []
        out[mode] = list(dict.fromkeys(n for _, n in tree if n != "aten::fill_"))
    return out


def _rank_text(n: Mapping[str, Any]) -> str:
    """A ``GatherBackward0`` two-clocks record (a reference's note or this run's row) in a few words."""
    text = f"{n['syncs']:g} syncs; #{int(n['rank_by_host'])} by host time ({n['host_share']:.1%})"
    if n["device_ms"]:
        text += f", #{int(n['rank_by_device'])} by device time ({n['device_ms']:.2f} ms)"
    return text


def article_rows(ref, results, ops, comparisons: list, on_gpu: bool) -> list[dict[str, Any]]:
    """The article's effects beside the reference's and this run's figures, for ``reference.article_table``."""
    from ...measure.compare import direction

    mine = {(c["a"], c["b"]): c for c in comparisons}

    def ref_cmp(a, b):
        return reread(ref.comparison(a, b)) if ref else None

    ref_g = ref.doc.get("notes", {}).get("gather_backward_two_clocks") if ref else None
    my_g = (
        ops.set_index("op").loc["GatherBackward0"] if "GatherBackward0" in set(ops["op"]) else None
    )

    def device_ms(get):
        v = [get(n) for n in ("det gather", "nondet gather")]
        return None if None in v else " vs ".join(f"{x:.2f}" for x in v) + " ms"

    def my_device_ms(n):
        return (results.get(n) or {}).get("metrics", {}).get("select_backward_device_ms")

    beats = ref_cmp("nondet gather", "det indexing")
    no_sync = (ref_g or {}).get("syncs", 0) == 0 and (my_g is None or my_g["syncs"] == 0)
    cpu = "" if on_gpu else "a CPU has no deterministic CUDA path to avoid"
    reversed_ = beats and direction(beats) == "slower"
    return [
        dict(
            effect="deterministic GatherBackward syncs and dominates the trace",
            article="dominant, with a sync",
            reference=_rank_text(ref_g) if ref_g else None,
            this_run=_rank_text(my_g) if my_g is not None else None,
            agrees="no: 0 syncs" if no_sync else "-",
            why=(
                "no sync on these releases: the deterministic path is slow, not synchronising"
                if no_sync
                else "a sync was counted: see the syncs table"
            ),
        ),
        dict(
            effect="GatherBackward0 device time, det vs nondet gather",
            reference=ref and device_ms(lambda n: ref.metric(n, "select_backward_device_ms")),
            this_run=device_ms(my_device_ms) if on_gpu else None,
            why="the article gives no figure; a CPU has no device clock",
        ),
        dict(
            effect="indexing fix in deterministic mode",
            article="~2% faster",
            article_ratio=1.02,
            reference=ref_cmp("det gather", "det indexing"),
            this_run=mine.get(("det gather", "det indexing")),
            why=cpu,
        ),
        dict(
            effect="det indexing beats nondet gather (direction only)",
            article="faster (no figure)",
            article_ratio=1.01,
            reference=beats,
            this_run=mine.get(("nondet gather", "det indexing")),
            why=(
                "reversed: deterministic mode's memory fills cost more than the fix saves; "
                if reversed_
                else ""
            )
            + ("" if on_gpu else "not timed on a CPU"),
        ),
    ]
