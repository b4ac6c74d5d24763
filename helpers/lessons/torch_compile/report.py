"""The tables of ``04_torch_compile``, built from its ``Results`` rows: per-cell speed-up, parity and break-even
(stored back into the rows), compile time against the first steps and an article-length run, peak memory (GPU),
the graph-break cells, ``explain`` on the article's models, the fresh-process starts, the profiled pair, the article
beside this run, and the final table. Each returns a DataFrame (or a sentence computed from one); the notebook shows
them (``notebook.display.show``). The charts are in ``charts``.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ...measure.compare import describe, resolved
from .cells import cell_name
from .tables import speedup_table, whole_run_s

# per-cell numbers derived from the measured ones, stored in results.json beside them
DERIVED = ("speedup", "speedup_low", "speedup_high", "verdict", "break_even_steps", "break_even_basis", "loss_match", "max_rel_loss_diff")

# figures from the source article (V100 16 GB, PyTorch 2.0 nightly, AMP = fp16 autocast + GradScaler), each a ratio to
# the article's own eager run of the same cell; where it gave only words, so does the table
ARTICLE_SOURCE = "article (V100, PyTorch 2.0 nightly, fp16 AMP)"
ARTICLE = {
    ("swin_b", "fp16"): {"article": "whole run 19:33 eager, 13:49 compiled",
                         "article_speedup": round((19 * 60 + 33) / (13 * 60 + 49), 2)},
    ("swin_t", "fp16"): {"article": "compiled slower than eager end to end", "article_speedup": None},
    ("convnext_large", "fp16"): {"article": "about 6% faster; memory unchanged", "article_speedup": 1.06},
}


def speedup_comparison(results, name: str) -> dict[str, Any] | None:
    """The comparison of the compiled row ``name`` with its eager cell: the interleaved one (``harness.interleave``)
    when it ran, else one recorded now from the two rows' sequential step times (metric
    ``step_ms_median_sequential``: a GPU at full scale times each cell in its own stretch). None for an eager or failed
    row, or one without an eager cell."""
    r = results.get(name)
    if r is None or r["status"] != "ok" or r["config"]["mode"] == "eager" or (e := _eager_of(results, r)) is None:
        return None
    c = results.comparison(e["name"], name, "step_ms_median") or results.comparison(e["name"], name, "step_ms_mean")
    if c is None:
        c = results.comparison(e["name"], name, "step_ms_median_sequential")
    if c is None and e["metrics"].get("step_times_ms") and r["metrics"].get("step_times_ms"):
        c = results.compare(e["name"], name, e["metrics"]["step_times_ms"], r["metrics"]["step_times_ms"],
                            metric="step_ms_median_sequential", statistic=np.median)
    return c


def summary_frame(results, names: Sequence[str], rtol: Mapping[str, float]):
    """``tables.speedup_table`` of the rows ``names``, with ``loss_match``: the largest relative loss difference
    against eager within ``rtol[precision]``; each compiled row's speed-up is its comparison with eager
    (``speedup_comparison``: ratio of median step times, ``speedup_low``/``speedup_high`` its 95% interval,
    ``verdict``), and its break-even is computed only when the comparison resolves a difference ("not resolved"
    otherwise). The derived numbers (``DERIVED``) are stored in the rows and saved."""
    import pandas as pd

    out = []
    for s in speedup_table([results.get(n) for n in names], rtol=0.0):
        if s["status"] == "ok" and "max_rel_loss_diff" in s:
            s["loss_match"] = s["max_rel_loss_diff"] is not None and s["max_rel_loss_diff"] <= rtol[s["precision"]]
        if (c := speedup_comparison(results, s["cell"])) is not None:
            s.update(speedup=c["ratio"], speedup_low=c["low"], speedup_high=c["high"], verdict=c["verdict"])
            if not resolved(c):
                s["break_even_steps"] = "not resolved"
        row = results.get(s["cell"])
        row["metrics"].update({k: s[k] for k in DERIVED if k in s})
        out.append(s)
    results.save()
    return pd.DataFrame(out)


def _with_interval(df):
    """``speedup_low`` and ``speedup_high`` as one narrow text column, "95% interval" ("1.27–1.58"; None where
    there is no comparison), in ``speedup_low``'s place: tables that fit the output area."""
    if "speedup_low" not in df.columns:
        return df
    df = df.copy()
    iv = [f"{lo:.2f}–{hi:.2f}" if lo == lo and hi == hi and lo is not None else None
          for lo, hi in zip(df.speedup_low, df.speedup_high)]
    df.insert(list(df.columns).index("speedup_low"), "95% interval", iv)
    return df.drop(columns=["speedup_low", "speedup_high"])


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
    cols = ["model", "precision", "mode", "status", t, tiqr, "speedup", "speedup_low", "speedup_high", "verdict",
            "loss_match", "max_rel_loss_diff", "scaler_skipped_steps", "compile_s", "break_even_steps", "error"]
    view = summary[[c for c in cols if c in summary.columns and (c != "error" or summary[c].astype(bool).any())]]
    return _with_interval(view).rename(columns={t: "step_ms_median", tiqr: "step_iqr_ms",
                                                "speedup": "speedup (medians)"})


def compiled_cells(summary, models: Sequence[str] | None = None):
    """The successful compiled rows of ``summary`` (of ``models`` only, when given)."""
    keep = (summary.status == "ok") & (summary["mode"] != "eager")
    if models is not None:
        keep &= summary.model.isin(set(models))
    return summary[keep]


def _break_even_words(v) -> str:
    import pandas as pd

    if isinstance(v, str):
        return {"never": "never", "not resolved": "not computed: this machine does not resolve the difference"}.get(v, v)
    return "not computed" if pd.isna(v) else f"after {int(v)} steps"


def best_cell_line(summary, t: str, t_word: str) -> str | None:
    """The fastest compiled cell against its eager cell: its comparison (ratio of medians, 95% interval, verdict), its
    break-even only when the comparison resolves a difference, and parity, in one sentence (None when no compiled
    cell ran)."""
    ok = summary[summary.status == "ok"]
    compiled = compiled_cells(summary)
    if not len(compiled):
        return None
    best = compiled.sort_values("speedup", ascending=False).iloc[0]
    eager = ok[(ok.model == best.model) & (ok.precision == best.precision) & (ok["mode"] == "eager")].iloc[0]
    head = f"best compiled cell: {best.cell}: {best[t]:.1f} ms vs eager {eager[t]:.1f} ms ({t_word} medians); "
    if "verdict" in best and isinstance(best.verdict, str):
        c = {"a": "eager", "b": "compiled", "ratio": best.speedup, "low": best.speedup_low,
             "high": best.speedup_high, "verdict": best.verdict}
        head += f"{describe(c)} (ratio of median step times); "
    else:
        head += f"{best.speedup:.2f}x (no interval: no comparison recorded); "
    return (head + f"break-even {_break_even_words(best.break_even_steps)}; loss parity "
            f"{'holds' if best.loss_match else 'FAILS'} (max rel. diff {best.max_rel_loss_diff:.1e})")


def _eager_of(results, row) -> dict[str, Any] | None:
    c = row["config"]
    e = results.get(cell_name(c["model"], c["precision"], "eager", c["batch_size"]))
    return e if e is not None and e["status"] == "ok" else None


def compile_time_frame(results, names: Sequence[str], compile_steps: int, article_eager_run_s: float):
    """Per compiled cell: Dynamo's compile timer, the first steps' wall time (compiled and eager), what they cost
    beyond as many steady steps, the steady speed-up, the break-even, and the whole-run speed-up of a run as long as
    ``article_eager_run_s`` at the cell's eager step time (stored in the row: ``whole_run_speedup_article_length``,
    ``article_length_run_steps``; None where the steady comparison does not resolve a difference). Mean step times
    from the interleaved window when the cell has one."""
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
        c = speedup_comparison(results, n)
        # derived figures only where the steady comparison resolves a difference
        whole = (round(whole_run_s(em["first_steps_ms"], e_ms, n_run) / whole_run_s(m["first_steps_ms"], c_ms, n_run), 3)
                 if c is not None and resolved(c) else None)
        rows.append({"cell": n, "compile_s": m["compile_s"], "first_steps_s": m["first_steps_s"],
                     "eager_first_steps_s": em["first_steps_s"], "first_steps_excess_s": m["first_steps_excess_s"],
                     "steady_speedup": round(e_ms / c_ms, 3), "verdict": c["verdict"] if c else None,
                     "break_even_steps": m.get("break_even_steps"),
                     "article_length_run_steps": n_run, "whole_run_speedup": whole})
        m.update(whole_run_speedup_article_length=whole, article_length_run_steps=n_run)
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
    """The article's memory finding beside this run's allocated change per cell."""
    return ("the article: memory was not lower across the board; ConvNeXt-L with AMP used the same memory compiled "
            "as eager. This run's allocated change per cell: "
            + ", ".join(f"{r.model} {r.precision} {r['mode']} {r.alloc_change_pct:+.1f}%" for _, r in memory.iterrows()))


def graph_break_frame(results, names: Sequence[str], rtol: Mapping[str, float], t: str = "step_ms"):
    """The graph-break cells (``summary_frame``, stored) with each row's graphs, breaks and logged recompiles; the
    step median of timing ``t`` where every row has it, else the sequential one."""
    s = summary_frame(results, names, rtol)
    for k in ("graphs", "graph_breaks", "logged_recompiles"):
        s[k] = [results.get(n)["metrics"].get(k) for n in s.cell]
    t = t if t in s.columns and s[t].notna().all() else "step_ms"
    cols = ["model", "mode", "status", t, "speedup", "speedup_low", "speedup_high", "verdict", "compile_s", "graphs",
            "graph_breaks", "logged_recompiles"]
    return _with_interval(s[[c for c in cols if c in s.columns]]).rename(columns={t: "step_ms_median",
                                                                                  "speedup": "vs eager"})


def graph_break_lines(results, batch_size: int) -> list[str] | None:
    """The graph-break comparisons in words (``compare.describe``): each compiled variant against its eager cell, and
    the fixed compiled variant against the broken one; a ms-per-step figure only where the interval resolves the
    difference, else that this machine does not. None when either compiled variant failed."""
    names = {n: cell_name(n, "fp32", "default", batch_size) for n in ("mlp_break", "mlp_fixed")}
    rows = {n: results.get(v) for n, v in names.items()}
    if not all(r and r["status"] == "ok" for r in rows.values()):
        return None
    lines = []
    pairs = [(cell_name(n, "fp32", "eager", batch_size), names[n]) for n in names] + [(names["mlp_break"],
                                                                                        names["mlp_fixed"])]
    for a, b in pairs:
        c = results.comparison(a, b)
        if c is None:
            lines.append(f"{b} vs {a}: not compared (no interleaved rounds ran)")
            continue
        ra, rb = results.get(a)["metrics"], results.get(b)["metrics"]
        stat = "median" if c["metric"].endswith("median") else "mean"
        ka = (f"interleaved_ms_{stat}" if f"interleaved_ms_{stat}" in ra and f"interleaved_ms_{stat}" in rb
              else f"step_ms_{stat}")
        tail = (f"; {ra[ka] - rb[ka]:+.2f} ms per step" if resolved(c) else
                "; this machine does not resolve the difference, so no per-step figure")
        lines.append(describe(c) + tail)
    return lines


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


def profiled_line(profiled: Mapping[str, Mapping[str, Any]], results, compiled_name: str) -> str:
    """The profiled eager/compiled ratio beside the unprofiled comparison of the same cells, and why the profiled
    one is not a speed-up (the profiler's cost per recorded call; eager records more calls; profiled steps are not
    interleaved), with each profiled step's multiple of its unprofiled median."""
    e, c = profiled["eager"], profiled["default"]
    pe, pc = e["trace_step_ms_mean"], c["trace_step_ms_mean"]
    text = f"Profiled steps: eager {pe:.1f} ms, compiled {pc:.1f} ms, a ratio of {pe / pc:.2f}x. "
    cmp_ = speedup_comparison(results, compiled_name)
    m = results.get(compiled_name)["metrics"] if results.get(compiled_name) else {}
    if cmp_ is None or "interleaved_ms_median" not in m:
        return text + "No unprofiled comparison of these cells ran, so the ratio is not put beside one."
    ue, uc = m["interleaved_eager_ms_median"], m["interleaved_ms_median"]
    return text + (f"Unprofiled, in interleaved rounds: eager {ue:.1f} ms, compiled {uc:.1f} ms: {describe(cmp_)}. "
                   f"The profiled ratio is not a speed-up: the profiler adds a cost to every operator call it records, "
                   f"and the eager step records {e['op_calls_per_step']:.0f} calls against "
                   f"{c['op_calls_per_step']:.0f} compiled (the fused forward and backward are one call each; the "
                   f"eager optimizer's calls remain); and the profiled steps ran once each, at another moment than the "
                   f"interleaved rounds, on a machine shared with other work. Here they took {pe / ue:.1f}x (eager) and "
                   f"{pc / uc:.1f}x (compiled) their unprofiled medians. Read speed-ups from the comparison, and the "
                   f"profile for what runs.")


def article_side_table(results, names: Sequence[str], article: Mapping = ARTICLE, ref=None, device: str = "cpu"):
    """The article's figures (a named source) and this run's compiled cells among ``names`` (and a reference run's,
    when ``ref`` is given), each as a speed-up over its own eager baseline: the article's whole runs, this run's
    comparison of steady steps (ratio of medians, 95% interval, verdict). Never empty: the article's rows are there at
    any scale."""
    import pandas as pd

    rows = [{"source": ARTICLE_SOURCE, "cell": f"{model} {prec}", "speedup": a["article_speedup"], "95% interval": None,
             "verdict or words": a["article"], "basis": "whole run"} for (model, prec), a in article.items()]
    for n in names:
        if (c := speedup_comparison(results, n)) is None:
            continue
        cfg, m = results.get(n)["config"], results.get(n)["metrics"]
        whole = m.get("whole_run_speedup_article_length")
        rows.append({"source": f"this run ({device})", "cell": f"{cfg['model']} {cfg['precision']} {cfg['mode']}",
                     "speedup": c["ratio"], "95% interval": f"{c['low']:.2f}–{c['high']:.2f}",
                     "verdict or words": c["verdict"] + (f"; an article-length run {whole:.2f}x" if whole else ""),
                     "basis": "steady steps" + ("" if c["metric"].endswith("sequential") else ", interleaved")})
    if ref is not None:
        for e in ref.doc.get("experiments", []):
            cfg, m = e.get("config", {}), e.get("metrics", {})
            if e.get("status") == "ok" and cfg.get("mode") not in (None, "eager") and m.get("speedup") is not None \
                    and "what" not in cfg:
                rows.append({"source": ref.label, "cell": f"{cfg['model']} {cfg['precision']} {cfg['mode']}",
                             "speedup": m["speedup"], "95% interval": (f"{m['speedup_low']:.2f}–{m['speedup_high']:.2f}"
                                                                       if m.get("speedup_low") is not None else None),
                             "verdict or words": m.get("verdict"), "basis": "steady steps"})
    return pd.DataFrame(rows)


FINAL_COLUMNS = ("model", "precision", "mode", "status", "step_ms", "iqr_ms", "interleaved_ms", "interleaved_iqr_ms",
                 "speedup", "speedup_low", "speedup_high", "verdict", "compile_s", "first_steps_s", "break_even_steps", "loss_match", "max_rel_loss_diff",
                 "peak_mem_mb", "peak_reserved_mb", "error")


def final_view(final):
    """Every cell in one table: the columns of ``FINAL_COLUMNS`` that hold a value in some row (``error`` always);
    where every successful row was timed in interleaved rounds, the sequential medians are left out (the speed-ups
    use the interleaved ones)."""
    drop = set()
    ok = final[final.status == "ok"]
    if "interleaved_ms" in final.columns and len(ok) and ok.interleaved_ms.notna().all():
        drop = {"step_ms", "iqr_ms"}
    cols = [c for c in FINAL_COLUMNS if c in final.columns and c not in drop
            and (c == "error" or final[c].notna().any())]
    return _with_interval(final[cols]).rename(columns={"speedup": "speedup (medians)"})
