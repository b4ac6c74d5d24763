"""Notebook 04's tables, charts and computed sentences from its ``Results`` rows (or a reference run's); the source
article's figures and the article table's texts are data beside them (``article.json``)."""

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from ...measure.compare import takes_line
from ...notebook.sizes import TORCH_COMPILE
from .experiment import cell_name, whole_run

FULL_BATCH = TORCH_COMPILE["full"]["batch_size"]  # the H100 reference's rows are named with it
DATA = json.loads((Path(__file__).with_name("article.json")).read_text())
COLUMNS = (  # matrix_table's columns, in order
    "model,precision,mode,status,step_ms,time vs eager,95% interval,verdict,loss_match,"
    "max_rel_loss_diff,compile_s,first_steps_s,break_even_steps,steady_peak_mem_mb,"
    "steady_peak_reserved_mb,graphs,graph_breaks,scaler_skipped_steps,error"
).split(",")


def matrix_table(results, names: Sequence[str]):
    """One row per cell of ``names``: step time, comparison with eager (the cell's step time as a multiple of
    eager's, its 95% interval, the verdict: ``compare.takes``'s convention), parity, compile, memory, graphs."""
    rows = []
    for r in map(results.get, names):
        m, vs = r["metrics"], {}
        if m.get("speedup_low") is not None:
            vs = {"time vs eager": round(1 / m["speedup"], 3)}
            vs["95% interval"] = f"{1 / m['speedup_high']:.2f}–{1 / m['speedup_low']:.2f}"
        step_ms = m.get("interleaved_ms_mean", m.get("step_ms_mean"))
        cfg = {k: r["config"][k] for k in ("model", "precision", "mode")}
        rows.append(
            {**cfg, "status": r["status"], "step_ms": step_ms, **m, **vs, "error": r["error"]}
        )
    df = pd.DataFrame(rows)
    return df[[c for c in COLUMNS if c in df.columns and df[c].notna().any()]]


def rows_table(results, prefix: str, keys: Sequence[str]):
    """The rows whose name starts with ``prefix`` (``"explain "``, ``"profiled "``): their ``keys`` metrics."""
    df = results.table(list(keys))
    df = df[df.experiment.str.startswith(prefix)]
    return df.assign(row=df.experiment.str.removeprefix(prefix)).reindex(
        columns=["row", "status", *keys]
    )


def starts_table(m: Mapping[str, Any]):
    """The fresh-process starts' metrics (``dynamo.cold_warm_start``) as a table, cold beside warm."""
    keys = sorted({k.rsplit("_", 1)[0] for k in m})
    return pd.DataFrame(
        {"metric": keys, **{w: [m.get(f"{k}_{w}") for k in keys] for w in ("cold", "warm")}}
    )


def _row_of(src, name: str):
    row = src.row(name) if hasattr(src, "row") else src.get(name)
    return row if row and row.get("status") == "ok" else None


def whole_run_rows(
    results, ref, batch_size: int, ref_batch_size: int, analogue=None
) -> list[dict[str, Any]]:
    """Per article run, for ``reference.article_table``: compiled vs eager over a whole run as long as the
    article's, reference and this run (``analogue`` stands in for the first where missing)."""

    def entry(src, model, precision, bs, run_s):
        if src is None:
            return None
        names = [cell_name(model, precision, m, bs) for m in ("eager", "default")]
        rows, c = [_row_of(src, n) for n in names], src.comparison(*names)
        return (
            whole_run(rows[0]["metrics"], rows[1]["metrics"], c, run_s) if all(rows) and c else None
        )

    out = []
    for k, a in enumerate(DATA["runs"]):
        mine, used = entry(results, a["model"], a["precision"], batch_size, a["eager_s"]), None
        if mine is None and k == 0 and analogue is not None:
            mine, used = entry(results, *analogue, batch_size, a["eager_s"]), tuple(analogue)
        times = " -> ".join(f"{s // 60}:{s % 60:02d}" for s in (a["eager_s"], a["compiled_s"]))
        ratio = a["eager_s"] / a["compiled_s"]
        out.append(
            {
                "effect": f"{a['label']}, compiled vs eager: a whole run as long as the article's",
                "article": f"{times}, {ratio:.2f}x",
                "article_ratio": round(ratio, 2),
                "analogue": used,
                "why": a["why"],
                "this_run": mine,
                "reference": entry(ref, a["model"], a["precision"], ref_batch_size, a["eager_s"]),
            }
        )
    return out


def memory_entry(src, eager: str, compiled: str) -> dict[str, Any] | None:
    """Compiled against eager steady peak allocated memory as an article-table entry; None without both."""
    rows = [_row_of(src, n) if src is not None else None for n in (eager, compiled)]
    e, c = (r["metrics"].get("steady_peak_mem_mb") if r else None for r in rows)
    if not e or c is None:
        return None
    pct = round(100.0 * (c - e) / e, 1)
    return {
        "ratio": round(c / e, 3),
        "of": "memory",
        "pct": pct,
        "verdict": f"({pct:+.1f}% peak allocated, {e:.0f} -> {c:.0f} MB)",
    }


def compute_share(
    model: str, batch_size: int, step_ms: float, device_name: str
) -> dict[str, Any] | None:
    """The share of ``step_ms`` its arithmetic explains at the device's fp16 peak (``share`` and figures); or None."""
    peak = next((v for k, v in DATA["peak_tflops"].items() if k in (device_name or "")), None)
    gmacs = DATA["gmacs"].get(model)
    if peak is None or gmacs is None or not step_ms:
        return None
    tflop = 6 * gmacs * batch_size / 1000.0
    compute_ms = 1000.0 * tflop / peak
    return {
        "step_tflop": round(tflop, 2),
        "peak_tflops": peak,
        "compute_ms": round(compute_ms, 2),
        "share": round(compute_ms / step_ms, 3),
    }


def swin_t_reversal(ref, results, batch_size: int, device_name: str = "") -> str:
    """Why the article's Swin-T reversed, in words: the share of the fp16 Swin-T eager step its arithmetic
    explains (``compute_share``), on the H100 reference and (a GPU) this run."""
    ref_gpu = ref.doc["env"].get("device_name", "") if ref is not None else ""
    lines = []
    for who, src, bs, gpu in [
        ("H100 reference", ref, FULL_BATCH, ref_gpu),
        ("this run", results, batch_size, device_name),
    ]:
        ms = src.metric(cell_name("swin_t", "fp16", "eager", bs), "step_ms_median") if src else None
        s = compute_share("swin_t", bs, ms, gpu) if ms else None
        if s:
            bound = "host-bound" if s["share"] < 0.3 else "compute-bound"
            lines.append(
                f"{who} {bound}: the arithmetic is {s['share']:.0%} of the eager step "
                f"({s['step_tflop']:.2f} TFLOP = {s['compute_ms']:.1f} ms at {s['peak_tflops']:.0f} "
                f"TFLOP/s, of {ms:.1f} ms)"
            )
    return "; ".join(lines) or "no GPU step time: no share computed"


def article_rows(
    results, ref, matrix, batch_size: int, analogue=None, why_swin_t: str = ""
) -> list[dict]:
    """The article table's rows (``reference.article_table``): the three whole runs first, then
    ``article.json``'s rows (memory, compile time, CUDA graphs, fp32), each with the reference's figure and
    this run's. ``matrix``: ``run_matrix``'s result."""
    rbs = FULL_BATCH
    whole = whole_run_rows(results, ref, batch_size, rbs, analogue=analogue)
    rb = whole[0]["reference"]
    names = [cell_name("swin_b", "fp16", m, rbs) for m in ("eager", "default")]
    rc = ref.comparison(*names) if ref else None
    if rb and rc:
        whole[0]["why"] = (
            f"H100: steady {rc['ratio']:.2f}x, a whole run {rb['ratio']:.2f}x (compile paid over "
            f"{rb['steps']} steps); another GPU and PyTorch"
        )
    if whole[0]["analogue"]:
        whole[0]["effect"] += f" (this run: {' '.join(whole[0]['analogue'])}, a smoke analogue)"
    whole[1]["why"] = why_swin_t

    def figure(src, kind, model, bs):
        names = [cell_name(model, "fp16", m, bs) for m in ("eager", "default", "reduce-overhead")]
        if src is None or kind == "fp32":
            return None
        if kind == "memory":
            return memory_entry(src, *names[:2])
        if kind == "reduce-overhead":
            return src.comparison(*names[1:])
        s = src.metric(names[1], "compile_s")
        return f"{s:.1f} s" if s else None

    fp32 = [
        c for c in matrix["comparisons"] if results.get(c["a"])["config"]["precision"] == "fp32"
    ]
    compile_s = [
        (results.get(n)["config"]["model"], results.metric(n, "compile_s")) for n in matrix["names"]
    ]
    out = []
    for row in DATA["rows"]:
        r = {k: v for k, v in row.items() if k not in ("kind", "model")}
        k, m = row["kind"], row.get("model")
        r["reference"], r["this_run"] = figure(ref, k, m, rbs), figure(results, k, m, batch_size)
        if k == "compile_s":
            r["this_run"] = (
                ", ".join(f"{m} {s:.1f} s" for m, s in compile_s if s is not None) or None
            )
        if k == "fp32" and fp32:
            r["effect"] += " (this run: gated_mlp, smoke analogue)"
            r["this_run"] = fp32[0]
        out.append(r)
    return whole + out


def profiled_vs_timed(profiled: Mapping[str, Any], comparisons, pair: Sequence[str]) -> str:
    """The profiled compiled step's time over the profiled eager step's, beside the timed comparison of ``pair``
    (eager, compiled) among ``comparisons``."""
    timed = next((c for c in comparisons if [c["a"], c["b"]] == list(pair)), None)
    p = profiled["default"]["trace_step_ms_mean"] / profiled["eager"]["trace_step_ms_mean"]
    line = f"profiled: the compiled step takes {p:.2f}x eager's time"
    return line if timed is None else f"{line}; timed: {takes_line(timed)}"
