"""Notebook 06's readings of the ranks' traces, as tables and figures."""

import statistics
from pathlib import Path
from typing import Any

import pandas as pd
import scipy.stats

from perf_doctor import events as ev
from perf_doctor import load
from perf_doctor.files import find_workers
from perf_doctor.job import collectives, diagnose_job
from perf_doctor.views import open_trace, quiet

from ...notebook import reference as rf

ALL_REDUCE = ("gloo:all_reduce", "nccl:all_reduce")


def all_reduces(folder: Path | str) -> dict[int, float]:
    """``{rank: all-reduces per profiled step}`` from host labels inside the ``ProfilerStep`` windows."""
    out = {}
    for i, (rank, _, f) in enumerate(find_workers(folder)[0]):
        doc = load.load_trace(f)
        steps = [(a, b) for _, a, b in ev.step_ranges(doc)]
        host = [e for e in ev.complete(doc) if ev.is_host(e)]
        starts = [float(e["ts"]) for e in host if str(e.get("name", "")).startswith(ALL_REDUCE)]
        n = sum(a <= t < b for t in starts for a, b in steps)
        out[rank if rank is not None else i] = n / max(len(steps), 1)
    return out


def lateness(folder: Path | str, rank: int) -> dict[str, Any]:
    """How late ``rank`` reached each collective: the others' duration of it minus its own (a collective ends on
    every rank when the last has joined), per collective in ms, with the mean's 95% t-interval (scipy)."""
    per = {}
    for i, (r, _, f) in enumerate(find_workers(folder)[0]):
        doc, _ = load.trim(load.load_trace(f))  # the steps the doctor reads (load.MAX_STEPS)
        on_gpu = bool(ev.device_work(ev.complete(doc)))
        per[r if r is not None else i] = collectives(doc, on_gpu)
    late = []
    for kind, durs in per.get(rank, {}).items():
        others = [c[kind] for r, c in per.items() if r != rank and kind in c] or [[]]
        for k in range(min(len(durs), *(len(o) for o in others))):
            late.append(statistics.fmean(o[k] for o in others) / 1000 - durs[k] / 1000)
    ci = scipy.stats.ttest_1samp(late, 0.0).confidence_interval() if len(late) > 1 else None
    figures = (statistics.fmean(late), *ci) if ci else (None, None, None)
    shown = [None if x is None else round(float(x), 3) for x in figures]
    return dict(zip(("collectives", "mean_ms", "low_ms", "high_ms"), (len(late), *shown)))


def comm_split(folder: Path | str) -> dict[str, Any]:
    """``diagnose_job`` on a folder of ranks: step, exposed and overlapped communication, their share, the job."""
    job = diagnose_job(folder, views=False)
    comm = next((c for c in job["diagnosis"] if c["cause"] == "communication"), {})
    ex, ov = comm.get("exposed_ms", 0.0), comm.get("overlapped_ms", 0.0)
    return {
        "step_ms": job["step_ms"],
        "exposed_ms": ex,
        "overlapped_ms": ov,
        "other_ms": job["step_ms"] - ex,
        "overlap_share": ov / (ex + ov) if ex + ov > 0 else None,
        "job": job,
    }


def overhead_table(single: dict[str, Any], ddp: dict[str, Any], world: int):
    """ms per step: single process, ideal, DDP, what DDP adds, and the overlapped communication."""
    ideal = single["step_ms"] / world
    ms = {
        "single process": single["step_ms"],
        f"ideal: single / {world}": ideal,
        "DDP": ddp["step_ms"],
        "DDP adds: compute, rest": ddp["other_ms"] - ideal,
        "DDP adds: exposed comm": ddp["exposed_ms"],
        "overlapped comm": ddp["overlapped_ms"],
    }
    share = {k: round(100 * v / ddp["step_ms"], 1) for k, v in ms.items()}
    return pd.DataFrame({"ms": ms, "% of the DDP step": share})


def bucket_table(traces: Path | str, caps: list[float]):
    """Per ``bucket_cap_mb``: rank 0's all-reduces per step, step, exposed and overlapped ms, share."""
    folders = {cap: Path(traces) / f"bucket {cap:g}" for cap in caps}
    t = pd.DataFrame({cap: comm_split(f) for cap, f in folders.items()}).T
    t = t.drop(columns=["job", "other_ms"]).astype(float)
    t.insert(0, "all-reduces/step", [all_reduces(f)[0] for f in folders.values()])
    t.columns = ["all-reduces/step", "step ms", "exposed ms", "overlapped ms", "overlap share"]
    return t.rename_axis("bucket_cap_mb")


def waits_table(before: dict[str, Any], after: dict[str, Any]):
    """Two ``diagnose_job`` reports per rank (without, with a straggler): step, top cause, waits ms."""
    jobs = {"no straggler": before, "straggler": after}
    rows = [
        dict(r, job=k)
        for k, job in jobs.items()
        for r in job.get("ranks") or []
        if "error" not in r
    ]
    t = pd.DataFrame(rows)[["rank", "job", "step_ms", "top_cause", "waits_ms"]]
    t.columns = ["rank", "job", "step ms", "top cause", "waits ms"]
    return t.sort_values(["rank", "job"], ascending=[True, False])


def hta_overlap(folder: Path | str):
    """HTA's ``get_comm_comp_overlap`` per rank, or None where HTA is missing or fails."""
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return None
    try:
        with quiet():  # its prints, logs and warnings
            return TraceAnalysis(trace_dir=str(folder)).get_comm_comp_overlap(visualize=False)
    except Exception:  # noqa: BLE001 - traces HTA cannot read: no figure
        return None


def timelines(folder: Path | str, steps: int = 1) -> list[tuple[int, Any]]:
    """``[(rank, figure)]`` of each rank's first ``steps`` profiled steps (closed: ``display(fig)``)."""
    workers = [
        (rank if rank is not None else i, f)
        for i, (rank, _, f) in enumerate(find_workers(folder)[0])
    ]
    return [(r, open_trace(f).timeline(steps=steps, title=f"rank {r}")) for r, f in workers]


def speedup(entry: dict[str, Any], ranks: int, slow: float = 1.25) -> dict[str, Any]:
    """DDP against the single process: ``mean_ratio``, ``super_linear`` (> ``ranks``), and from ``samples``
    ``median_ratio`` and ``slow_steps`` (over ``slow`` × median) of ``n``."""
    s = entry.get("samples") or {}
    a, b = s.get("a") or [], s.get("b") or []
    med = round(statistics.median(a) / statistics.median(b), 3) if a and b else None
    return {
        "mean_ratio": entry["ratio"],
        "super_linear": entry["ratio"] > ranks,
        "median_ratio": med,
        "slow_steps": sum(t > slow * statistics.median(a) for t in a) if a else None,
        "n": len(a) or None,
    }


def grad_mb(plan: dict[str, Any]) -> float:
    """The MLP's fp32 gradient MiB as ``bucket_cap_mb`` counts them."""
    d, n = plan["features"], 0
    for _ in range(plan["layers"]):
        n, d = n + d * plan["hidden"] + plan["hidden"], plan["hidden"]
    return 4 * (n + d * plan["classes"] + plan["classes"]) / 2**20


EFFECTS = {  # effect: (what it is, what data-parallel training should show: its "article")
    "ddp": ("DDP {ranks} ranks vs single process (same batch)", "{ranks}× at best ({ranks} ranks)"),
    "no_sync": ("accumulation under no_sync", "{accum} → 1 all-reduces per optimizer step; faster"),
    "buckets": ("overlapped all-reduce share, by bucket_cap_mb", "smaller buckets overlap more"),
    "straggler": ("one slow rank", "every rank waits for it; the doctor names it"),
}
NO_SYNC = "accumulation under no_sync"


def _effects(d: dict[str, Any], ranks: int, accum: int) -> dict[str, tuple]:
    """One run's side of ``effects_table``: effect -> (text or None, reproduces?)."""
    out = dict.fromkeys(EFFECTS, (None, ""))
    if c := d.get("ddp"):
        med = f"; medians {1 / d['median']:.2f}× the time" if d.get("median") else ""
        out["ddp"] = (rf.ratio_text(c) + med, rf.agreement(ranks, c))
    if ar := d.get("all_reduces"):
        ok = all(r["accum sync"] == accum * r["accum no_sync"] > 0 for r in ar)
        text = f"{ar[0]['accum sync']:g} → {ar[0]['accum no_sync']:g} all-reduces; "
        out["no_sync"] = (text + rf.ratio_text(d.get("no_sync")), "yes" if ok else "no")
    bs = d.get("bucket_sweep") or []
    share = [r.get("overlap share") for r in bs]
    if len(bs) > 1 and all(isinstance(x, float) for x in share):
        text = ", ".join(f"{r['bucket_cap_mb']:g} MB: {x:.0%}" for r, x in zip(bs, share))
        out["buckets"] = (text, "yes" if share[0] > share[-1] else "no")
    if st := d.get("straggler"):
        ok = st["verdict"].startswith("slower") and d.get("named") == d.get("straggler_rank")
        text = rf.ratio_text(st) + f"; the doctor names rank {d.get('named')}"
        out["straggler"] = (text, "yes" if ok else "no")
    return out


def effects_table(here: dict[str, Any], ref, ranks: int, accum: int):
    """06's effects in ``reference.article_table``, the H100 reference beside this run (``here``: its comparisons,
    notes' records and ``why``)."""
    theirs = {}
    if ref is not None:
        notes = ref.doc.get("notes") or {}
        old = ref.comparison("accumulation, every backward syncs", NO_SYNC)  # the H100's name
        planted = (ref.row("straggler doctor") or {}).get("config", {})
        theirs = {
            "ddp": ref.comparison("single process", f"DDP {ranks} ranks"),
            "no_sync": ref.comparison("synced accumulation", NO_SYNC) or old,
            "straggler": ref.comparison(f"DDP {ranks} ranks", "DDP with a straggler"),
            "all_reduces": notes.get("all_reduces_per_optimizer_step"),
            "bucket_sweep": notes.get("bucket_sweep"),
            "named": ref.metric("straggler doctor", "named_rank"),
            "straggler_rank": planted.get("planted_rank"),
        }
    t, m = _effects(theirs, ranks, accum), _effects(here, ranks, accum)
    return rf.article_table(
        {
            "effect": effect.format(ranks=ranks),
            "article": article.format(ranks=ranks, accum=accum),
            "reference": t[k],
            "this_run": m[k],
            "why": here.get("why", {}).get(k, ""),
        }
        for k, (effect, article) in EFFECTS.items()
    )


def clocks(rank0: dict, ddp_job: dict, times: dict[str, list[float]], folder: str) -> dict:
    """Rank 0's DDP step read four ways (ms): the trace's ProfilerStep spans (``ddp_job``, the profile in
    ``folder``), ``perf_counter`` around the same steps, back to back without the profiler, and the rounds."""
    walls = rank0.get("profiled_ms") or {}
    span = next((r["step_ms"] for r in ddp_job["ranks"] if r.get("rank") == 0), ddp_job["step_ms"])
    profiled, back = walls.get(folder, []), walls.get("ddp, back to back", [])
    return {
        "trace span": span,
        "profiled, perf_counter": statistics.fmean(profiled) if profiled else None,
        "back to back, no profiler": statistics.fmean(back) if back else None,
        "rounds, mean": statistics.fmean(times["ddp"]),
        "rounds, median": statistics.median(times["ddp"]),
    }
