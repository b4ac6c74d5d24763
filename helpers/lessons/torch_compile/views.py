"""Notebook 04's tables and charts, built from its ``Results`` rows: the matrix (one row per cell, its comparison
with eager, parity, compile time, break-even, memory), rows of one kind as a table, the cold and warm starts, the
article's figures (a named source) beside this run's comparisons, and the speed-up chart."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

# the source article's figures (V100 16 GB, PyTorch 2.0 nightly, AMP = fp16 autocast with a GradScaler): each cell's
# whole run against the article's own eager run; where it gave only words, so does the table
ARTICLE_SOURCE = "article (V100, PyTorch 2.0 nightly, fp16 AMP)"
ARTICLE = {("swin_b", "fp16"): ("whole run 19:33 eager, 13:49 compiled", round((19 * 60 + 33) / (13 * 60 + 49), 2)),
           ("swin_t", "fp16"): ("compiled slower than eager end to end", None),
           ("convnext_large", "fp16"): ("about 6% faster; memory unchanged", 1.06)}
COLUMNS = ("model", "precision", "mode", "status", "step_ms", "speedup", "95% interval", "verdict", "loss_match",
           "max_rel_loss_diff", "compile_s", "first_steps_s", "break_even_steps", "steady_peak_mem_mb",
           "steady_peak_reserved_mb", "graphs", "graph_breaks", "scaler_skipped_steps", "error")


def _interval(m: Mapping[str, Any]) -> str | None:
    return f"{m['speedup_low']:.2f}–{m['speedup_high']:.2f}" if m.get("speedup_low") is not None else None


def matrix_table(results, names: Sequence[str]):
    """One row per cell of ``names``: the step time the comparisons used (interleaved mean when measured), the
    comparison with eager (ratio, interval, verdict), parity, compile and first steps, break-even, the steady
    steps' peak memory (GPU), graphs and breaks; the columns that hold a value somewhere."""
    import pandas as pd

    rows = []
    for n in names:
        r = results.get(n)
        m = r["metrics"]
        rows.append({**{k: r["config"][k] for k in ("model", "precision", "mode")}, "status": r["status"],
                     "step_ms": m.get("interleaved_ms_mean", m.get("step_ms_mean")), **m, "95% interval": _interval(m),
                     "error": r["error"]})
    df = pd.DataFrame(rows)
    return df[[c for c in COLUMNS if c in df.columns and df[c].notna().any()]]


def rows_table(results, prefix: str, keys: Sequence[str]):
    """The rows whose name starts with ``prefix`` (``"explain "``, ``"profiled "``): their ``keys`` metrics."""
    import pandas as pd

    return pd.DataFrame([{"row": e["name"][len(prefix):], "status": e["status"],
                          **{k: e["metrics"].get(k) for k in keys}} for e in results.experiments
                         if e["name"].startswith(prefix)])


def starts_table(m: Mapping[str, Any]):
    """The fresh-process starts' metrics (``dynamo.cold_warm_start``) as a table, cold beside warm."""
    import pandas as pd

    keys = sorted({k.rsplit("_", 1)[0] for k in m})
    return pd.DataFrame({"metric": keys, **{w: [m.get(f"{k}_{w}") for k in keys] for w in ("cold", "warm")}})


def article_table(results, names: Sequence[str], ref=None, device: str = "cpu"):
    """Speed-ups over each one's own eager baseline: the article's whole runs (its figures, named as its source),
    this run's compiled cells among ``names`` (steady steps: the comparison's ratio, interval, verdict) and, with
    ``ref`` (``notebook.reference``), a reference GPU run's. Never empty: the article's rows are there at any scale."""
    import pandas as pd

    rows = [{"source": ARTICLE_SOURCE, "cell": f"{mo} {p}", "speedup": x, "95% interval": None, "verdict": words}
            for (mo, p), (words, x) in ARTICLE.items()]
    found = [(f"this run ({device})", results.get(n)) for n in names]
    found += [(ref.label, e) for e in (ref.doc.get("experiments", []) if ref is not None else [])]
    for source, e in found:
        if e and e["status"] == "ok" and e["metrics"].get("speedup") is not None and "what" not in e["config"]:
            c, m = e["config"], e["metrics"]
            rows.append({"source": source, "cell": f"{c['model']} {c['precision']} {c['mode']}",
                         "speedup": m["speedup"], "95% interval": _interval(m), "verdict": m.get("verdict")})
    return pd.DataFrame(rows)


def speedup_chart(side):
    """Horizontal bars: each row of ``article_table`` with a number, the intervals as error bars (the article's
    whole runs in grey, this run's in blue, a reference run's in green)."""
    import matplotlib.pyplot as plt
    import numpy as np

    rows = side[side.speedup.notna()].reset_index(drop=True)
    x = rows.speedup.astype(float).to_numpy()
    iv = [tuple(map(float, s.split("–"))) if isinstance(s, str) else (v, v) for s, v in zip(rows["95% interval"], x)]
    err = np.array([[v - lo for (lo, _), v in zip(iv, x)], [hi - v for (_, hi), v in zip(iv, x)]])
    colors = ["#999" if s.startswith("article") else "#4c72b0" if s.startswith("this run") else "#55a868"
              for s in rows.source]
    fig, ax = plt.subplots(figsize=(7.5, 0.6 + 0.45 * len(rows)))
    ax.barh(np.arange(len(rows)), x, color=colors, xerr=err, capsize=3)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_yticks(np.arange(len(rows)), [f"{c}\n({s.split(' (')[0]})" for c, s in zip(rows.cell, rows.source)],
                  fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("speed-up over its own eager run (article: whole run; this run: steady steps, 95% interval)")
    fig.tight_layout()
    return fig
