"""Notebook 03's readings: the tables and the chart built from its runs (``03_backward_hooks``).

``two_clocks`` (one row per backward node with its share of the backward's host time) and ``node_clocks`` (one node's
two clocks, as results.json notes them); ``label_pair_check`` (every module that ran forward gets a before/after pair,
in backward order) and ``top_modules`` (the longest child and leaf from the per-module table); ``matrix_frame`` and
``interleaved_frame`` (the determinism × method matrix) and ``compare_matrix`` (its comparisons, from interleaved
rounds only); ``describe_origin`` (a backward op's forward op and source line) and ``gather_from_timm`` (the lesson's
claim about it); ``results_table`` (one row per configuration, a reference run's figures beside this run's) and
``results_chart`` (the results section); ``runs_table`` (the configurations timed one at a time: the baseline, the
panel's runs); ``module_view`` and ``informative`` (tables as shown: without the columns that carry nothing).
"""
from __future__ import annotations

from typing import Any, Mapping

from ... import traces as tr
from ...notebook import reference
from .harness import MATRIX, matrix_name
from .labels import label_modules
from .markers import ROOT_NAME, remove
from .spans import forward_completion_order, label_order, label_pairs

DEVICE_ONLY_COLS = ["device_ms", "syncs", "gpu_idle_ms", "rank_by_device"]   # all 0 on a CPU: left out there
MATRIX_COLS = ["syncs_per_step", "sync_gpu_idle_per_step_ms", "select_backward_host_ms", "select_backward_device_ms",
               "gather_backward_calls", "index_backward_calls"]   # profiles only: the step times are interleaved
MATRIX_DEVICE_COLS = ["syncs_per_step", "sync_gpu_idle_per_step_ms", "select_backward_device_ms"]   # 0 on a CPU
KIND_COLS = [f"{k}_per_step" for k in tr.KINDS]
FIX_PAIR = ((True, "gather"), (True, "indexing"))   # the fix in the article's setting, deterministic mode
GPU_PAIRS = [((False, "gather"), (False, "indexing")),   # the fix without it: gather's backward an atomic scatter_add
             ((False, "gather"), (True, "indexing"))]    # the article's other claim
# On a CPU both methods run the same ops in either mode (memory fills aside), so the first GPU pair would repeat the
# fix's comparison and the second would time deterministic mode's fills only: they are compared on a GPU.
TIMM_PATCH_DROPOUT = "timm/layers/patch_dropout.py"   # the gather's file in every timm: in patch_dropout_forward
                                                      # (1.0.31) or, before that function existed, PatchDropout.forward


def two_clocks(doc: Mapping[str, Any]):
    """``traces.backward_ops(doc)`` (one row per autograd node per step: host and device time, syncs, GPU idle,
    rank by each clock) with ``host_share``: the node's host time over the mean ``backward`` label's."""
    ranges = tr.phase_ranges(doc, "backward")
    backward_host_ms = sum(b - a for a, b in ranges) / 1000.0 / max(len(ranges), 1)
    ops = tr.backward_ops(doc)
    ops["host_share"] = ops["host_ms"] / backward_host_ms if backward_host_ms else float("nan")
    return ops


def node_clocks(ops, node: str = "GatherBackward0") -> dict[str, Any] | None:
    """One node's row of ``two_clocks`` as a dict (None when the node is not in the trace)."""
    if node not in set(ops["op"]):
        return None
    g = ops.set_index("op").loc[node]
    return {"host_ms": round(float(g["host_ms"]), 4), "device_ms": round(float(g["device_ms"]), 4),
            "rank_by_host": int(g["rank_by_host"]), "rank_by_device": int(g["rank_by_device"]),
            "syncs": float(g["syncs"]), "gpu_idle_ms": round(float(g["gpu_idle_ms"]), 4),
            "host_share": round(float(g["host_share"]), 4)}


def label_pair_check(model, x, acts) -> dict[str, Any]:
    """Label every module of ``model``, run one plain forward and backward on ``x`` under the profiler
    (``acts``), remove the labels. Returns ``forward_order`` (modules in the order their forward completed),
    ``paired`` (modules with a before/after pair), ``before_order`` (the order of the "before" markers),
    ``missing`` (ran forward, no pair), ``unused`` (never called in forward) and ``ok``: no module missing and the
    backward order the reverse of the forward order."""
    from torch.profiler import profile

    fwd = forward_completion_order(model, x)
    labels = label_modules(model)
    try:
        with profile(activities=acts) as prof:
            model(x).sum().backward()
    finally:
        remove(labels)
        model.zero_grad(set_to_none=True)
    events = prof.events()
    paired = {s["module"] for s in label_pairs(events)}
    before = label_order(events, "before")
    missing = [n for n in fwd if n not in paired]
    unused = sorted({n or ROOT_NAME for n, _ in model.named_modules()} - set(fwd))
    return {"forward_order": fwd, "paired": paired, "before_order": before, "missing": missing, "unused": unused,
            "ok": not missing and before == fwd[::-1]}


def top_modules(table, model) -> dict[str, Any]:
    """From a per-module backward table (``backward_table``, longest first): the longest child of the model, the
    longest leaf module and ``patch_drop``'s share, as results.json notes them."""
    top = table[table["depth"] == 1].iloc[0]
    leaves = {n for n, m in model.named_modules() if next(m.children(), None) is None}
    leaf = table[table["module"].isin(leaves)].iloc[0]
    return {"top_module": top["module"], "top_module_backward_share": round(float(top["share"]), 4),
            "top_leaf_module": leaf["module"], "top_leaf_module_backward_share": round(float(leaf["share"]), 4),
            "patch_drop_backward_share": round(float(table.set_index("module").loc["patch_drop", "share"]), 4)}


def describe_origin(origin: Mapping[str, Any] | None, frames: int = 4) -> str:
    """``traces.forward_origin``'s answer in a few lines: the node, its forward op, the line, the Python frames."""
    if origin is None:
        return "No GatherBackward0 with a forward op in this trace."
    py = [f for f in origin["stack"] if ".py(" in f]
    return (f"backward node   {origin['node']} (sequence number {origin['sequence_nr']})\n"
            f"forward op      {origin['forward_op']}\ncalled from     {origin['call_from']}\nPython frames   "
            + "\n                ".join(py[:frames]))


def gather_from_timm(origin: Mapping[str, Any] | None) -> bool:
    """Does ``traces.forward_origin`` lead ``GatherBackward0`` to ``aten::gather`` called from timm's
    ``patch_dropout.py`` (``CallFrom`` "timm/layers/patch_dropout.py:<line>", or its function's first line on a trace
    without ``CallFrom``)? True with either timm layout (see ``patch_dropout.timm_selection_code``)."""
    return (origin is not None and origin.get("forward_op") == "aten::gather"
            and str(origin.get("call_from")).startswith(TIMM_PATCH_DROPOUT + ":"))


def module_view(table, hide=(), n: int | None = None):
    """A per-module backward table (``spans.backward_table``) as shown: its first ``n`` rows, without the ``hide``
    columns, ``share`` named ``backward_share`` (a fraction, which the display shows as a percentage)."""
    out = table.drop(columns=list(hide), errors="ignore").rename(columns={"share": "backward_share"})
    return out.head(n) if n else out


def informative(df):
    """``df`` without a ``status`` column whose rows are all ok and an ``error`` column that is all empty: columns
    that carry nothing on this run."""
    drop = []
    if "status" in df.columns and (df["status"] == "ok").all():
        drop.append("status")
    if "error" in df.columns and not df["error"].fillna("").astype(str).str.strip().any():
        drop.append("error")
    return df.drop(columns=drop)


def matrix_frame(rows: Mapping[tuple[bool, str], Mapping[str, Any]], cols: list[str]):
    """The matrix's results rows ({(deterministic, method): row}) as a table of ``cols``, with status and error
    where a row failed (``informative``)."""
    import pandas as pd

    return informative(pd.DataFrame([{"deterministic": d, "method": m, **{k: r["metrics"].get(k) for k in cols},
                                      "status": r["status"], "error": r["error"] or ""}
                                     for (d, m), r in rows.items()]))


def interleaved_frame(times: Mapping[tuple[bool, str], Any]):
    """Interleaved step times ({(deterministic, method): StepTimes}): mean (what the comparisons compare), median
    and interquartile range."""
    import pandas as pd

    return pd.DataFrame([{"deterministic": d, "method": m, "step_ms_mean": t.mean, "step_ms_median": t.median,
                          "step_ms_p25": t.p25, "step_ms_p75": t.p75} for (d, m), t in times.items()])


def compare_matrix(results, times: Mapping[tuple[bool, str], Any], on_gpu: bool) -> list[dict[str, Any]]:
    """The matrix's comparisons, from its interleaved step times, kept in results.json's ``comparisons``
    (``results.compare``: ratio with a 95% interval and a verdict): the fix in deterministic mode (``FIX_PAIR``) and,
    on a GPU, the fix without it and the article's other claim (``GPU_PAIRS``). Returns the entries (a pair with a
    side missing is left out)."""
    pairs = [FIX_PAIR] + (GPU_PAIRS if on_gpu else [])
    return [results.compare(matrix_name(*a), matrix_name(*b), times[a].times_ms, times[b].times_ms)
            for a, b in pairs if a in times and b in times]


def results_table(results, on_gpu: bool, ref=None):
    """One row per matrix configuration: its interleaved step time (mean and interquartile range) beside what its
    profile counted (syncs per step and their GPU idle time, on a GPU only: 0 on a CPU), with ``ref``'s (a
    ``notebook.reference.Reference``) step mean and syncs per step beside them; status and error where a row failed."""
    import pandas as pd

    recs = []
    for d, m in MATRIX:
        name = matrix_name(d, m)
        timed, prof = results.get(f"interleaved {name}"), results.get(name)
        ok = [r for r in (timed, prof) if r is not None and r["status"] == "ok"]
        tm, pm = (r["metrics"] if r in ok else {} for r in (timed, prof))
        rec = {"experiment": f"interleaved {name}", "profile": name, "deterministic": d, "method": m,
               **{k: tm.get(k) for k in ("step_ms_mean", "step_ms_p25", "step_ms_p75")}}
        if on_gpu:
            rec.update({k: pm.get(k) for k in ("syncs_per_step", "sync_gpu_idle_per_step_ms")})
        rec["status"] = "ok" if len(ok) == 2 else "failed"
        rec["error"] = "; ".join(r["error"] for r in (timed, prof) if r is not None and r["error"]) or (
            "" if len(ok) == 2 else "not run")
        recs.append(rec)
    df = reference.add_column(pd.DataFrame(recs), ref, "step_ms_mean")
    df = reference.add_column(df, ref, "syncs_per_step", on="profile")
    return informative(df.drop(columns=["experiment", "profile"]))


def runs_table(results, on_gpu: bool):
    """The configurations timed one at a time (the baseline and the panel's runs; not the matrix, whose profiles are
    untimed and whose step times are interleaved): step mean and interquartile range, the host time of the node that
    selects the patches and, on a GPU, the syncs per step; status and error where a row failed."""
    cols = ["step_ms_mean", "step_ms_p25", "step_ms_p75", "select_backward_host_ms"] + (
        ["syncs_per_step", "sync_gpu_idle_per_step_ms"] if on_gpu else [])
    df = results.table(cols)
    if df.empty or "method" not in df.columns:
        return df
    matrix = {matrix_name(d, m) for d, m in MATRIX}
    keep = df["method"].notna() & ~df["experiment"].isin(matrix) & ~df["experiment"].str.startswith("interleaved ")
    return informative(df[keep].drop(columns=["timing"], errors="ignore").reset_index(drop=True))


def results_chart(times: Mapping[tuple[bool, str], Any], rows: Mapping[tuple[bool, str], Mapping[str, Any]],
                  module_table, title: str):
    """Left: the matrix's interleaved median step times with their interquartile range, each bar marked with its
    syncs per step. Right: the modules at depth 1-2 with the largest share of the backward (hook labels)."""
    import matplotlib.pyplot as plt

    cells = list(times)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.4))
    meds = [times[c].median for c in cells]
    lo = [m - times[c].p25 for m, c in zip(meds, cells)]
    hi = [times[c].p75 - m for m, c in zip(meds, cells)]
    ax1.bar([f"{'det' if d else 'non-det'}\n{m}" for d, m in cells], meds, yerr=[lo, hi], capsize=4,
            color=["#c44e52", "#8172b2", "#4c72b0", "#55a868"][:len(cells)])
    ax1.set_ylabel("step time, interleaved median (ms)")
    ax1.set_title(title)
    for i, c in enumerate(cells):
        syncs = rows[c]["metrics"].get("syncs_per_step", float("nan")) if c in rows else float("nan")
        ax1.text(i + 0.22, meds[i] * 0.05, f"{syncs:g} syncs", ha="center", va="bottom", rotation=90,
                 color="white", fontsize=9)
    top = module_table[module_table["depth"].between(1, 2)].head(8).iloc[::-1]
    ax2.barh(top["module"], top["share"] * 100, color="#dd8452")
    ax2.set_xlabel("share of backward time (%)")
    ax2.set_title("Backward time per module (hook labels)")
    fig.tight_layout()
    return fig
