"""Notebook 04's tables and charts from its ``Results`` rows (or a reference run's)."""

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

# the source article's figures (V100 16 GB, PyTorch 2.0 nightly, AMP = fp16 autocast with a GradScaler): each
# (model, precision)'s whole training run, eager and compiled, in seconds
ARTICLE = {
    ("swin_b", "fp16"): {
        "label": "Swin-B AMP",
        "eager_s": 19 * 60 + 33,
        "compiled_s": 13 * 60 + 49,
    },
    ("swin_t", "fp16"): {
        "label": "Swin-T AMP",
        "eager_s": 11 * 60 + 46,
        "compiled_s": 12 * 60 + 17,
    },
    ("convnext_large", "fp16"): {
        "label": "ConvNeXt-L AMP",
        "eager_s": 16 * 60 + 57,
        "compiled_s": 15 * 60 + 56,
    },
}
# dense fp16/bf16 tensor-core peaks (TFLOP/s, the vendor's datasheets; SXM parts), by a part of the device's name;
# forward multiply-adds per 224x224 image (G), torchvision's weights metadata ("_ops", listed as GFLOPS)
PEAK_TFLOPS = {
    "H100": 989.0,
    "H200": 989.0,
    "A100": 312.0,
    "V100": 125.0,
    "A10G": 70.0,
    "L4": 121.0,
}
GMACS = {"swin_t": 4.491, "swin_b": 15.431, "convnext_large": 34.361}
COLUMNS = (
    "model",
    "precision",
    "mode",
    "status",
    "step_ms",
    "time vs eager",
    "95% interval",
    "verdict",
    "loss_match",
    "max_rel_loss_diff",
    "compile_s",
    "first_steps_s",
    "break_even_steps",
    "steady_peak_mem_mb",
    "steady_peak_reserved_mb",
    "graphs",
    "graph_breaks",
    "scaler_skipped_steps",
    "error",
)


def matrix_table(results, names: Sequence[str]):
    """One row per cell of ``names``: step time, comparison with eager (the cell's step time as a multiple of
    eager's, its 95% interval, the verdict: ``compare.takes``'s convention), parity, compile, memory, graphs."""
    rows = []
    for r in map(results.get, names):
        m = r["metrics"]
        vs_eager, interval = None, None
        if m.get("speedup_low") is not None:
            vs_eager = round(1 / m["speedup"], 3)
            interval = f"{1 / m['speedup_high']:.2f}–{1 / m['speedup_low']:.2f}"
        rows.append(
            {
                **{k: r["config"][k] for k in ("model", "precision", "mode")},
                "status": r["status"],
                "step_ms": m.get("interleaved_ms_mean", m.get("step_ms_mean")),
                **m,
                "time vs eager": vs_eager,
                "95% interval": interval,
                "error": r["error"],
            }
        )
    df = pd.DataFrame(rows)
    return df[[c for c in COLUMNS if c in df.columns and df[c].notna().any()]]


def rows_table(results, prefix: str, keys: Sequence[str]):
    """The rows whose name starts with ``prefix`` (``"explain "``, ``"profiled "``): their ``keys`` metrics."""
    return pd.DataFrame(
        [
            {
                "row": e["name"][len(prefix) :],
                "status": e["status"],
                **{k: e["metrics"].get(k) for k in keys},
            }
            for e in results.experiments
            if e["name"].startswith(prefix)
        ]
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
    """Per ``ARTICLE`` cell, for ``reference.article_table``: compiled vs eager over a whole run as long as the
    article's, reference and this run (``analogue`` stands in for the first where missing)."""
    from .experiment import cell_name, whole_run

    def entry(src, model, precision, bs, run_s):
        if src is None:
            return None
        names = [cell_name(model, precision, m, bs) for m in ("eager", "default")]
        rows, c = [_row_of(src, n) for n in names], src.comparison(*names)
        return (
            whole_run(rows[0]["metrics"], rows[1]["metrics"], c, run_s) if all(rows) and c else None
        )

    out = []
    for k, ((model, precision), a) in enumerate(ARTICLE.items()):
        mine, used = entry(results, model, precision, batch_size, a["eager_s"]), None
        if mine is None and k == 0 and analogue is not None:
            mine, used = entry(results, *analogue, batch_size, a["eager_s"]), tuple(analogue)
        out.append(
            {
                "effect": f"{a['label']}, compiled vs eager: a whole run as long as the article's",
                "article": " -> ".join(
                    f"{s // 60}:{s % 60:02d}" for s in (a["eager_s"], a["compiled_s"])
                )
                + f", {a['eager_s'] / a['compiled_s']:.2f}x",
                "article_ratio": round(a["eager_s"] / a["compiled_s"], 2),
                "model": model,
                "analogue": used,
                "reference": entry(ref, model, precision, ref_batch_size, a["eager_s"]),
                "this_run": mine,
            }
        )
    return out


def chart_data(rows: Sequence[Mapping[str, Any]]):
    """``speedup_chart``'s bars: per row the article's ratio, the reference's and this run's with intervals."""
    bars = []
    for r in (r for r in rows if r.get("article_ratio") is not None):
        bars.append(
            {
                "model": r["model"],
                "source": "article",
                "ratio": r["article_ratio"],
                "low": None,
                "high": None,
            }
        )
        for src, key in (("H100 reference", "reference"), ("this run", "this_run")):
            e = r.get(key)
            if isinstance(e, Mapping) and e.get("ratio") is not None:
                label = (
                    r["model"]
                    if key == "reference" or not r.get("analogue")
                    else " ".join(r["analogue"])
                )
                bars.append(
                    {
                        "model": label,
                        "source": src,
                        "ratio": e["ratio"],
                        "low": e.get("low"),
                        "high": e.get("high"),
                    }
                )
    return pd.DataFrame(bars, columns=["model", "source", "ratio", "low", "high"])


def speedup_chart(rows: Sequence[Mapping[str, Any]]):
    """Horizontal bars of ``chart_data`` (article grey, reference green, this run blue), intervals as error bars."""
    import matplotlib.pyplot as plt

    d = chart_data(rows)
    x = d.ratio.astype(float).to_numpy()
    lo, hi = d.low.fillna(d.ratio).astype(float), d.high.fillna(d.ratio).astype(float)
    colors = [{"article": "#999", "H100 reference": "#55a868"}.get(s, "#4c72b0") for s in d.source]
    fig, ax = plt.subplots(figsize=(7.5, 0.6 + 0.4 * len(d)))
    ax.barh(np.arange(len(d)), x, color=colors, xerr=[x - lo, hi - x], capsize=3)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_yticks(np.arange(len(d)), [f"{m} ({s})" for m, s in zip(d.model, d.source)], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("whole run as long as the article's: eager time / compiled time (95% interval)")
    fig.tight_layout()
    return fig


def memory_entry(src, eager: str, compiled: str) -> dict[str, Any] | None:
    """Compiled against eager steady peak allocated memory as an article-table entry; None without both."""
    rows = [_row_of(src, n) if src is not None else None for n in (eager, compiled)]
    e, c = (r["metrics"].get("steady_peak_mem_mb") if r else None for r in rows)
    if not e or c is None:
        return None
    pct = round(100.0 * (c - e) / e, 1)
    return {
        "ratio": round(c / e, 3),
        "pct": pct,
        "verdict": f"({pct:+.1f}% peak allocated, {e:.0f} -> {c:.0f} MB)",
    }


def compute_share(
    model: str, batch_size: int, step_ms: float, device_name: str
) -> dict[str, Any] | None:
    """The share of ``step_ms`` its arithmetic explains at the device's fp16 peak (``share`` and figures); or None."""
    peak, gmacs = (
        next((v for k, v in PEAK_TFLOPS.items() if k in (device_name or "")), None),
        GMACS.get(model),
    )
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


def full_batch_size() -> int:
    """The batch size of the full scale, which the H100 reference ran: its rows are named with it."""
    from ...notebook.sizes import TORCH_COMPILE

    return TORCH_COMPILE["full"]["batch_size"]


def swin_t_reversal(ref, results, batch_size: int, device_name: str = ""):
    """The share of each fp16 Swin step its arithmetic explains (``compute_share``), on the reference and (a GPU)
    this run: printed one line each; returns why the article's Swin-T reversed, in words."""
    from .experiment import cell_name

    ref_batch_size = full_batch_size()

    ref_gpu = ref.doc["env"].get("device_name", "") if ref is not None else ""
    shares = {}
    for who, src, bs, gpu in [
        ("H100 reference", ref, ref_batch_size, ref_gpu),
        ("this run", results, batch_size, device_name),
    ]:
        for model in ("swin_t", "swin_b"):
            for mode in ("eager", "default"):
                ms = (
                    src.metric(cell_name(model, "fp16", mode, bs), "step_ms_median")
                    if src
                    else None
                )
                s = compute_share(model, bs, ms, gpu) if ms else None
                if s:
                    shares[who, model, mode] = s
                    print(
                        f"{who}: {model} fp16 {mode}: {s['step_tflop']:.2f} TFLOP a step = "
                        f"{s['compute_ms']:.1f} ms at {s['peak_tflops']:.0f} TFLOP/s, {s['share']:.0%} of "
                        f"its {ms:.1f} ms step"
                    )
    st = shares.get(("H100 reference", "swin_t", "eager"))
    if st is None:
        return "No GPU step time here or in a reference: no share computed."
    if st["share"] < 0.3:
        return (
            f"H100 host-bound: the arithmetic is {st['share']:.0%} of the eager step; compile removes "
            "the rest's overhead (the V100 was another regime)"
        )
    return f"compute is {st['share']:.0%} of the H100's step"


def article_rows(
    results,
    ref,
    matrix: Mapping[str, Any],
    batch_size: int,
    analogue=None,
    why_swin_t: str = "",
) -> list[dict[str, Any]]:
    """The article table's rows (``reference.article_table``): the three whole runs (``whole_run_rows``, the first
    three, which ``speedup_chart`` plots), then memory, compile time, CUDA graphs and the fp32 cells, each with the
    reference's figure, this run's and why they differ where they do. ``matrix``: ``run_matrix``'s result."""
    from .experiment import cell_name

    ref_batch_size = full_batch_size()

    def rn(model, mode, bs=ref_batch_size):
        return cell_name(model, "fp16", mode, bs)

    def ro(src, bs):
        return (
            src.comparison(rn("swin_t", "default", bs), rn("swin_t", "reduce-overhead", bs))
            if src
            else None
        )

    whole = whole_run_rows(results, ref, batch_size, ref_batch_size, analogue=analogue)
    rb = whole[0]["reference"]
    rc = ref.comparison(rn("swin_b", "eager"), rn("swin_b", "default")) if ref is not None else None
    whole[0]["why"] = (
        f"H100: steady {rc['ratio']:.2f}x, a whole run {rb['ratio']:.2f}x (compile paid over "
        f"{rb['steps']} steps); another GPU and PyTorch"
        if rb and rc
        else "Swin-B is the panel's (time guard)"
    )
    if whole[0]["analogue"]:
        whole[0]["effect"] += f" (this run: {' '.join(whole[0]['analogue'])}, a smoke analogue)"
    whole[1]["why"] = why_swin_t
    whole[2]["why"] = "ConvNeXt-L is not in the matrix (time guard): the panel runs it"
    compile_s = [
        (results.get(n)["config"]["model"], results.metric(n, "compile_s"))
        for n in matrix["names"]
        if results.metric(n, "compile_s") is not None
    ]
    fp32 = [
        c for c in matrix["comparisons"] if results.get(c["a"])["config"]["precision"] == "fp32"
    ]
    ref_cs = ref.metric(rn("swin_b", "default"), "compile_s") if ref is not None else None
    no_counter = "a CPU keeps no peak-memory counter"
    return whole + [
        dict(
            effect="memory, Swin-B AMP: compiled / eager peak allocated",
            article="about -10%",
            article_ratio=0.9,
            reference=memory_entry(ref, rn("swin_b", "eager"), rn("swin_b", "default")),
            this_run=memory_entry(
                results, rn("swin_b", "eager", batch_size), rn("swin_b", "default", batch_size)
            ),
            why=f"Swin-B is the panel's (time guard); {no_counter}",
        ),
        dict(
            effect="memory, Swin-T AMP: compiled / eager peak allocated",
            article="no change",
            article_ratio=1.0,
            reference=memory_entry(ref, rn("swin_t", "eager"), rn("swin_t", "default")),
            this_run=memory_entry(
                results, rn("swin_t", "eager", batch_size), rn("swin_t", "default", batch_size)
            ),
            why=f"compiled code kept fewer activations for the backward on the H100; {no_counter}",
        ),
        dict(
            effect="Swin-B compile time (Dynamo)",
            article="about 129 s",
            agrees="–",
            reference=f"{ref_cs:.1f} s" if ref_cs else None,
            this_run=", ".join(f"{m} {s:.1f} s" for m, s in compile_s) or None,
            why="other machines and PyTorch versions",
        ),
        dict(
            effect="reduce-overhead vs default, Swin-T AMP step",
            article="time unchanged, memory up",
            article_ratio=1.0,
            reference=ro(ref, ref_batch_size),
            this_run=ro(results, batch_size),
            why="the reference's cell was stopped by its time guard; CUDA graphs need a GPU",
        ),
        dict(
            effect="fp32 cells, compiled vs eager steady step"
            + (" (this run: gated_mlp, smoke analogue)" if fp32 else ""),
            article="1.02x / 0.99x / 1.04x (Swin-B / T / ConvNeXt-L)",
            article_ratio=1.0,
            reference=None,
            this_run=fp32[0] if fp32 else None,
            why="fp32 is the panel's at full scale; smoke: the gated MLP, chosen so that CPU fusion pays",
        ),
    ]


def lever_summary(results, run: Mapping[str, Any], whole: str) -> str:
    """The next levers in words, computed: each variant's step time against the first's (the ratio convention of
    ``compare.takes``, the ms saved only where the interval resolves it), and the regional cold compile against
    ``whole``'s (the matrix's compiled cell of the same model)."""
    from ...measure.compare import resolved, takes

    lines, base = [], run["names"][0].removeprefix("lever: ")
    for c in run["comparisons"]:
        t, what = takes(c), c["b"].removeprefix("lever: ")
        line = f"{what} compiled: the step takes {t['time_ratio']:.2f}x [{t['interval']}] the time with the "
        line += f"{base} compiled: {t['verdict']}"
        if resolved(c):
            saved = float(np.mean(c["samples"]["a"]) - np.mean(c["samples"]["b"]))
            line += f", {abs(saved):.2f} ms a step {'saved' if saved > 0 else 'lost'}"
        lines.append(line)
    regional = [n for n in run["names"] if "block" in n]
    r_s = results.metric(regional[0], "compile_s") if regional else None
    w_s = results.metric(whole, "compile_s")
    if r_s is not None and w_s:
        lines.append(
            f"compile, cold: the repeated block {r_s:.1f} s, the whole model {w_s:.1f} s in the matrix "
            f"({r_s / w_s:.2f}x its time; one compile each)"
        )
    return "\n".join(lines) or "no lever ran (see the failed rows above)"


def profiled_vs_timed(profiled: Mapping[str, Any], timed: Mapping[str, Any] | None) -> str:
    """The profiled compiled step's time over the profiled eager step's beside the timed comparison's (``takes``),
    and which way the profiler moved it, in words computed from the two."""
    from ...measure.compare import takes

    e, c = (profiled[m]["trace_step_ms_mean"] for m in ("eager", "default"))
    text = f"profiled: the compiled step takes {c / e:.2f}x eager's time"
    if timed is None:
        return text + "; no timed comparison to set it beside"
    t, low, high = takes(timed), 1 / timed["high"], 1 / timed["low"]
    text += f"; timed: {t['time_ratio']:.2f}x [{t['interval']}]. "
    read = " A profiled ratio is no speed-up: read speed-ups from the timings, the profile for what runs."
    if c / e >= 1 > high:
        return text + "Under the profiler the compiled step even looks slower than eager." + read
    if c / e > high:
        return text + "Under the profiler compile looks smaller than it is." + read
    if c / e < low:
        return text + (
            "Under the profiler compile looks larger than it is: the profiler's cost per recorded call "
            "stretches eager's many calls more." + read
        )
    return text + "Here the profiled ratio lies within the timed interval." + read
