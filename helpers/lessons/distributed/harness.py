"""The notebook's experiments (06): one launch of the ranks runs them all; its rows, comparisons and checks.

``run_job(name, plan, world, out, results)`` starts the ranks (``launch``), waits with a timeout and records one row
per rank (``failed`` with the reason when a rank died or the job ran out of time) and, when every rank finished, the
job's step times. ``record_findings`` turns a finished job into the notebook's comparisons (interleaved rounds, ratio
with a 95% interval and a verdict) and its checks from the traces. ``validate_config`` is the panel's validator.
"""
from __future__ import annotations

import shutil
import statistics
from pathlib import Path
from typing import Any

from ...measure import compare as cmp
from ...measure.validate import InvalidValue, validate_bool, validate_positive
from . import launch, readings

PIDS_NOTE = "rank_pids"


def run_job(name: str, plan: dict, world: int, out: Path | str, results, *, timeout_s: float = 240.0,
            port: int = launch.DEFAULT_PORT) -> dict[str, Any]:
    """Launch ``world`` ranks with ``plan`` into ``out`` and wait; ``{"ok", "rows", "port_note", "out", "times"}``.
    Every rank's pid is added to the results' ``rank_pids`` note (a test checks none is left running)."""
    out = Path(out)
    port, note = launch.pick_port(port)
    for attempt in (1, 2):
        if out.exists():   # a folder of ranks holds this job's traces only
            shutil.rmtree(out)
        procs = launch.start(out, world, plan, port)
        results.note(PIDS_NOTE, (results.notes.get(PIDS_NOTE) or []) + [p.pid for p in procs])
        rows = launch.wait(procs, out, timeout_s)
        if attempt == 2 or not launch.port_taken(out, world):
            break
        # another program bound the port between our check and rank 0's rendezvous: once more on a fresh one
        old, port = port, launch.free_port()
        note += f"; port {old} was taken before rank 0 could bind it: started again on port {port}"
    for r in rows:
        results.add(f"{name}: rank {r['rank']}", {"world": world, "rank": r["rank"], "port": port},
                    {"returncode": r["returncode"]}, status=r["status"], error=r["error"])
    ok = all(r["status"] == "ok" for r in rows)
    times = readings.step_times(out) if ok and plan.get("rounds") else {}
    return {"ok": ok, "rows": rows, "port_note": note, "out": out, "times": times, "world": world, "plan": plan}


def times_table(times: dict[str, list[float]]):
    """Each variant's step (rank 0, ms): mean, median, interquartile range, rounds."""
    import numpy as np
    import pandas as pd

    return pd.DataFrame([{"variant": k, "mean ms": statistics.fmean(v), "median ms": statistics.median(v),
                          "p25 ms": float(np.percentile(v, 25)), "p75 ms": float(np.percentile(v, 75)),
                          "rounds": len(v)} for k, v in times.items()]).set_index("variant")


def compare_variants(results, times: dict[str, list[float]], world: int) -> dict[str, dict]:
    """The three comparisons of the lesson, recorded in results.json's ``comparisons``."""
    pairs = {"ddp": ("single", "ddp", "single process", f"DDP {world} ranks"),
             "straggler": ("ddp", "straggler", f"DDP {world} ranks", "DDP with a straggler"),
             "no_sync": ("accum sync", "accum no_sync", "accumulation, every backward syncs",
                         "accumulation under no_sync")}
    return {k: results.compare(la, lb, times[a], times[b], metric="step_ms_mean")
            for k, (a, b, la, lb) in pairs.items()}


def describe(c: dict) -> str:
    """``b`` against ``a`` in words: the ratio of mean steps, its interval, the verdict."""
    return (f"{c['b']} against {c['a']}: {c['ratio']:.2f}× ({c['low']:.2f}–{c['high']:.2f}, 95%): "
            f"**{c['verdict']}**" + ("" if cmp.resolved(c) else " — this machine does not resolve a difference"))


def saved_ms(c: dict, times: dict[str, list[float]], a: str, b: str) -> str:
    """The ms per step ``b`` saves over ``a``, printed only when the comparison resolves a difference."""
    if not cmp.resolved(c):
        return "this machine does not resolve the difference, so no time saved is given"
    d = statistics.fmean(times[a]) - statistics.fmean(times[b])
    return f"{abs(d):.1f} ms per optimizer step {'saved' if d > 0 else 'lost'}"


def accumulation_counts(out: Path | str):
    """All-reduces per optimizer step on every rank, with and without ``no_sync``: a DataFrame, one row per rank."""
    import pandas as pd

    counts = {k: readings.all_reduces(Path(out) / "traces" / k) for k in ("accum sync", "accum no_sync")}
    return pd.DataFrame(counts).rename_axis("rank").reset_index()


def rows_of(results, prefix: str):
    """The results rows whose name starts with ``prefix``: experiment, rank, port, status, error."""
    t = results.table()
    t = t[t["experiment"].str.startswith(prefix)]
    return t[[c for c in ("experiment", "rank", "port", "returncode", "status", "error") if c in t.columns]]


def validate_config(values: dict[str, Any], cores: int | None = None, gpus: int = 0) -> dict[str, Any]:
    """The panel's values, checked: ranks (``launch.check_ranks``), bucket size in MB (> 0), accumulation steps (a
    whole number 1..64), no_sync (True/False), straggler delay in ms (0..2000)."""
    v = dict(values)
    v["ranks"] = launch.check_ranks(v.get("ranks"), cores=cores, gpus=gpus)
    v["bucket_cap_mb"] = float(validate_positive(v.get("bucket_cap_mb"), "bucket size (MB)"))
    acc = v.get("accum")
    if isinstance(acc, bool) or not isinstance(acc, int) or not 1 <= acc <= 64:
        raise InvalidValue(f"accumulation steps must be a whole number from 1 to 64, not {acc!r}.")
    v["no_sync"] = validate_bool(v.get("no_sync"), "no_sync")
    d = v.get("straggler_ms")
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d <= 2000:
        raise InvalidValue(f"straggler delay must be 0 to 2000 ms, not {d!r}.")
    v["straggler_ms"] = float(d)
    return v


def try_config(results, base: dict, out: Path | str, *, ranks: int, bucket_cap_mb: float, accum: int,
               no_sync: bool, straggler_ms: float, timeout_s: float = 240.0):
    """The panel's run: the ranks with the reader's values, timed in a few rounds (no profiles); one ``panel`` row
    with the DDP step, the straggler's step and the accumulation step chosen (mean ms, rank 0). Returns the rows."""
    plan = dict(base, bucket_cap_mb=bucket_cap_mb, accum=accum, straggler_ms=straggler_ms, rounds=4, warmup=1,
                profile=False)
    job = run_job(f"panel {ranks} ranks", plan, ranks, out, results, timeout_s=timeout_s)
    cfg = {"ranks": ranks, "bucket_cap_mb": bucket_cap_mb, "accum": accum, "no_sync": no_sync,
           "straggler_ms": straggler_ms}
    if job["ok"]:
        t = job["times"]
        acc = "accum no_sync" if no_sync else "accum sync"
        results.add("panel", cfg, {"ddp_step_ms": statistics.fmean(t["ddp"]), "straggler_step_ms": statistics.fmean(
            t["straggler"]), "accum_step_ms": statistics.fmean(t[acc])})
    else:
        results.add("panel", cfg, status="failed", error=next(r["error"] for r in job["rows"] if r["error"]))
    t = results.table()
    return t[t["experiment"] == "panel"].dropna(axis=1, how="all")


def comparisons_chart(cmps: dict[str, dict], title: str):
    """The comparisons as bars: ratio of mean steps a/b with its 95% interval as error bars, 1 marked."""
    import matplotlib.pyplot as plt

    cs = list(cmps.values())
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.7 * len(cs)))
    y = range(len(cs))
    ax.barh(y, [c["ratio"] for c in cs], color=["#4c72b0" if c["verdict"] == "faster" else "#c44e52" if
                                                  c["verdict"] == "slower" else "#999999" for c in cs])
    ax.errorbar([c["ratio"] for c in cs], y, xerr=[[c["ratio"] - c["low"] for c in cs],
                                                   [c["high"] - c["ratio"] for c in cs]], fmt="none", color="k",
                capsize=4)
    ax.axvline(1.0, color="k", lw=0.8, ls="--")
    ax.set_yticks(list(y), [f"{c['b']}\nvs {c['a']} ({c['verdict']})" for c in cs], fontsize=8)
    ax.set_xlabel("ratio of mean step times a / b (above 1: b is faster), 95% interval")
    ax.set_title(title)
    fig.tight_layout()
    return fig
