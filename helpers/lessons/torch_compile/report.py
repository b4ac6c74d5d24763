"""The tables of ``04_torch_compile``, built from its ``Results`` rows: per-cell speed-up, parity and break-even
(stored back into the rows), compile time against the first steps and an article-length run, peak memory (GPU),
the graph-break cells, ``explain`` on the article's models, the fresh-process starts, the profiled pair, the article
beside this run, and the final table. Each returns a DataFrame (or a sentence computed from one); the notebook shows
them (``notebook.display.show``). The charts are in ``charts``.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .cells import cell_name
from .tables import speedup_table, whole_run_s

# per-cell numbers derived from the measured ones, stored in results.json beside them
DERIVED = ("speedup", "break_even_steps", "break_even_basis", "loss_match", "max_rel_loss_diff")

# figures from the source article (V100 16 GB, PyTorch 2.0 nightly, AMP = fp16 autocast + GradScaler); where it gave
# only words, so does the table
ARTICLE = {
    ("swin_b", "fp16"): {"article": "19:33 -> 13:49 whole run", "article_speedup": round((19 * 60 + 33) / (13 * 60 + 49), 2)},
    ("swin_t", "fp16"): {"article": "compiled slower than eager end to end", "article_speedup": None},
    ("convnext_large", "fp16"): {"article": "about 6% faster", "article_speedup": 1.06},
}


def summary_frame(results, names: Sequence[str], rtol: Mapping[str, float]):
    """``tables.speedup_table`` of the rows ``names``, with ``loss_match``: the largest relative loss difference
    against eager within ``rtol[precision]``. The derived numbers (``DERIVED``) are stored in the rows and saved."""
    import pandas as pd

    out = []
    for s in speedup_table([results.get(n) for n in names], rtol=0.0):
        if s["status"] == "ok" and "max_rel_loss_diff" in s:
            s["loss_match"] = s["max_rel_loss_diff"] is not None and s["max_rel_loss_diff"] <= rtol[s["precision"]]
        row = results.get(s["cell"])
        row["metrics"].update({k: s[k] for k in DERIVED if k in s})
        out.append(s)
    results.save()
    return pd.DataFrame(out)


def timing_basis(summary) -> tuple[str, str, str]:
    """The timing the speed-ups used: ``("interleaved_ms", "interleaved_iqr_ms", "interleaved")`` when every
    successful cell has an interleaved median, else ``("step_ms", "iqr_ms", "sequential")``."""
    ok = summary[summary.status == "ok"]
    if "interleaved_ms" in ok.columns and ok.interleaved_ms.notna().all():
        return "interleaved_ms", "interleaved_iqr_ms", "interleaved"
    return "step_ms", "iqr_ms", "sequential"


def matrix_view(summary, t: str, tiqr: str):
    """The matrix for a person: the median and IQR of timing ``t`` (``timing_basis``), speed-up, parity, GradScaler's
    skipped steps (fp16), compile and first steps, break-even, the reason of a failed cell."""
    cols = ["model", "precision", "mode", "status", t, tiqr, "speedup", "loss_match", "max_rel_loss_diff",
            "scaler_skipped_steps", "compile_s", "first_steps_s", "break_even_steps", "error"]
    return summary[[c for c in cols if c in summary.columns]].rename(columns={t: "step_ms_median", tiqr: "step_iqr_ms"})


def compiled_cells(summary, models: Sequence[str] | None = None):
    """The successful compiled rows of ``summary`` (of ``models`` only, when given)."""
    keep = (summary.status == "ok") & (summary["mode"] != "eager")
    if models is not None:
        keep &= summary.model.isin(set(models))
    return summary[keep]


def _break_even_words(v) -> str:
    import pandas as pd

    return "never" if v == "never" else "not computed" if pd.isna(v) else f"after {int(v)} steps"


def best_cell_line(summary, t: str, t_word: str) -> str | None:
    """The fastest compiled cell against its eager cell, its break-even and parity, in one sentence (None when no
    compiled cell ran)."""
    ok = summary[summary.status == "ok"]
    compiled = compiled_cells(summary)
    if not len(compiled):
        return None
    best = compiled.sort_values("speedup", ascending=False).iloc[0]
    eager = ok[(ok.model == best.model) & (ok.precision == best.precision) & (ok["mode"] == "eager")].iloc[0]
    return (f"best compiled cell: {best.cell}: {best[t]:.1f} ms vs eager {eager[t]:.1f} ms ({t_word} medians) "
            f"= {best.speedup:.2f}x; break-even {_break_even_words(best.break_even_steps)}; loss parity "
            f"{'holds' if best.loss_match else 'FAILS'} (max rel. diff {best.max_rel_loss_diff:.1e})")


def _eager_of(results, row) -> dict[str, Any] | None:
    c = row["config"]
    e = results.get(cell_name(c["model"], c["precision"], "eager", c["batch_size"]))
    return e if e is not None and e["status"] == "ok" else None


def compile_time_frame(results, names: Sequence[str], compile_steps: int, article_eager_run_s: float):
    """Per compiled cell: Dynamo's compile timer, the first steps' wall time (compiled and eager), what they cost
    beyond as many steady steps, the steady speed-up, the break-even, and the whole-run speed-up of a run as long as
    ``article_eager_run_s`` at the cell's eager step time (stored in the row: ``whole_run_speedup_article_length``,
    ``article_length_run_steps``). Medians from the interleaved window when the cell has one."""
    import pandas as pd

    rows = []
    for n in names:
        r = results.get(n)
        if r["status"] != "ok" or r["config"]["mode"] == "eager" or (e := _eager_of(results, r)) is None:
            continue
        m, em = r["metrics"], e["metrics"]
        if "interleaved_eager_ms_median" in m:
            e_ms, c_ms = m["interleaved_eager_ms_median"], m["interleaved_ms_median"]
        else:
            e_ms, c_ms = em["step_ms_median"], m["step_ms_median"]
        n_run = max(compile_steps, round(article_eager_run_s * 1000 / e_ms))  # steps in an article-length eager run
        whole = whole_run_s(em["first_steps_ms"], e_ms, n_run) / whole_run_s(m["first_steps_ms"], c_ms, n_run)
        rows.append({"cell": n, "compile_s": m["compile_s"], "first_steps_s": m["first_steps_s"],
                     "eager_first_steps_s": em["first_steps_s"], "first_steps_excess_s": m["first_steps_excess_s"],
                     "steady_speedup": round(e_ms / c_ms, 3), "break_even_steps": m.get("break_even_steps"),
                     "article_length_run_steps": n_run, "whole_run_speedup": round(whole, 3)})
        m.update(whole_run_speedup_article_length=round(whole, 3), article_length_run_steps=n_run)
    results.save()
    return pd.DataFrame(rows)


def memory_frame(results, names: Sequence[str]):
    """Per compiled cell with a peak-memory counter (a GPU): eager's and the compiled cell's peak allocated and
    reserved memory of the steady steps (the whole run's where no steady peak was kept), their change in %, and
    the compiled first steps' peak apart (one-offs: kernel benchmarking, CUDA-graph recording). Empty on a CPU."""
    import pandas as pd

    rows = []
    for n in names:
        r = results.get(n)
        if r["status"] != "ok" or r["config"]["mode"] == "eager" or r["metrics"].get("peak_mem_mb") is None:
            continue
        if (e := _eager_of(results, r)) is None:
            continue
        c, m, em = r["config"], r["metrics"], e["metrics"]
        a, rs = (("steady_peak_mem_mb", "steady_peak_reserved_mb") if "steady_peak_mem_mb" in m
                 else ("peak_mem_mb", "peak_reserved_mb"))
        rows.append({"model": c["model"], "precision": c["precision"], "mode": c["mode"],
                     "eager_peak_alloc_mb": em[a], "compiled_peak_alloc_mb": m[a],
                     "alloc_change_pct": round(100 * (m[a] / em[a] - 1), 1),
                     "eager_peak_reserved_mb": em[rs], "compiled_peak_reserved_mb": m[rs],
                     "reserved_change_pct": round(100 * (m[rs] / em[rs] - 1), 1),
                     "compiled_first_steps_peak_alloc_mb": m.get("first_steps_peak_mem_mb")})
    return pd.DataFrame(rows)


def memory_line(memory) -> str:
    """The article's memory figure beside this run's allocated change per cell."""
    return ("the article: about 5-10% less VRAM compiled (-10 to -5 %); this run's allocated change per cell: "
            + ", ".join(f"{r.model} {r.precision} {r['mode']} {r.alloc_change_pct:+.1f}%" for _, r in memory.iterrows()))


def graph_break_frame(results, names: Sequence[str], rtol: Mapping[str, float], t: str = "step_ms"):
    """The graph-break cells (``summary_frame``, stored) with each row's graphs, breaks and logged recompiles; the
    step median of timing ``t`` where every row has it, else the sequential one."""
    s = summary_frame(results, names, rtol)
    for k in ("graphs", "graph_breaks", "logged_recompiles"):
        s[k] = [results.get(n)["metrics"].get(k) for n in s.cell]
    t = t if t in s.columns and s[t].notna().all() else "step_ms"
    cols = ["model", "mode", "status", t, "speedup", "compile_s", "graphs", "graph_breaks", "logged_recompiles"]
    return s[[c for c in cols if c in s.columns]].rename(columns={t: "step_ms_median"})


def graph_break_gap_line(results, batch_size: int) -> str | None:
    """Broken minus fixed compiled step (interleaved medians when both have them) against the larger IQR: a result,
    or "within the noise". None when either compiled variant failed."""
    brk, fix = (results.get(cell_name(n, "fp32", "default", batch_size)) for n in ("mlp_break", "mlp_fixed"))
    if not (brk and fix and brk["status"] == fix["status"] == "ok"):
        return None
    bm, fm = brk["metrics"], fix["metrics"]
    k = "interleaved_ms" if "interleaved_ms_median" in bm and "interleaved_ms_median" in fm else "step_ms"
    gap = bm[f"{k}_median"] - fm[f"{k}_median"]
    spread = max(bm[f"{k}_p75"] - bm[f"{k}_p25"], fm[f"{k}_p75"] - fm[f"{k}_p25"])
    return (f"broken - fixed: {gap:+.2f} ms/step; largest IQR {spread:.2f} ms -> "
            + ("within the noise" if abs(gap) <= spread else f"the {'fixed' if gap > 0 else 'broken'} variant is faster"))


def explain_frame(results, names: Sequence[str]):
    """The successful ``explain <name>`` rows: graphs, breaks, ops, logged records, time (the reasons apart:
    ``explain_reasons``)."""
    import pandas as pd

    rows = [results.get(f"explain {n}") for n in names]
    return pd.DataFrame([{"model": n, **{k: v for k, v in r["metrics"].items() if k != "reasons"}}
                         for n, r in zip(names, rows) if r is not None and r["status"] == "ok"])


def explain_reasons(results, names: Sequence[str]) -> list[str]:
    """Every graph break ``explain`` found on ``names``: ``<model>: <reason> at <file:line>``."""
    return [f"{n}: {reason}" for n in names if (r := results.get(f"explain {n}")) is not None and r["status"] == "ok"
            for reason in r["metrics"]["reasons"]]


START_COLUMNS = ("process_s", "compile_s", "first_steps_s", "fx_graph_cache_hits", "fx_graph_cache_misses",
                 "step_ms_median")


def starts_frame(metrics: Mapping[str, Any]):
    """The cold and warm fresh-process starts (``harness.record_starts``'s metrics) as two rows."""
    import pandas as pd

    return pd.DataFrame([{"start": which, **{k: metrics[f"{k}_{which}"] for k in START_COLUMNS}}
                         for which in ("cold", "warm")])


def starts_line(metrics: Mapping[str, Any]) -> str:
    """What the warm start saved: process and compile time against the cold start."""
    m = metrics
    return (f"warm start: the process took {m['process_s_warm']:.1f} s against {m['process_s_cold']:.1f} s cold; "
            f"compile {m['compile_s_warm']:.1f} s against {m['compile_s_cold']:.1f} s "
            f"({m['compile_s_cold'] / m['compile_s_warm']:.1f}x less)")


def profiled_frame(profiled: Mapping[str, Mapping[str, Any]]):
    """``harness.profile_pair``'s metrics per mode (the trace folder left out)."""
    import pandas as pd

    return pd.DataFrame([{"mode": k, **{f: v for f, v in m.items() if f != "trace_dir"}} for k, m in profiled.items()])


def article_side_table(results, batch_size: int, article: Mapping = ARTICLE):
    """The article's cells (``ARTICLE``), each beside this run's compiled (``default``) cell of the same model and
    precision: its steady and article-length whole-run speed-ups, or why there is none."""
    import pandas as pd

    side = []
    for (model, prec), a in article.items():
        row = {"model": model, "precision": prec, **a, "this_run_steady_speedup": None,
               "this_run_whole_run_speedup": None}
        r = results.get(cell_name(model, prec, "default", batch_size))
        if r is not None and r["status"] == "ok":
            row["this_run_steady_speedup"] = r["metrics"].get("speedup")
            row["this_run_whole_run_speedup"] = r["metrics"].get("whole_run_speedup_article_length")
        else:
            row["this_run"] = "not in this run's matrix" if r is None else f"failed: {r['error']}"
        side.append(row)
    return pd.DataFrame(side)


FINAL_COLUMNS = ("model", "precision", "mode", "status", "step_ms", "iqr_ms", "interleaved_ms", "interleaved_iqr_ms",
                 "speedup", "compile_s", "first_steps_s", "break_even_steps", "loss_match", "max_rel_loss_diff",
                 "peak_mem_mb", "peak_reserved_mb", "error")


def final_view(final):
    """Every cell in one table: the columns of ``FINAL_COLUMNS`` that hold a value in some row (``error`` always)."""
    return final[[c for c in FINAL_COLUMNS if c in final.columns and (c == "error" or final[c].notna().any())]]
