"""A job of several ranks: every rank diagnosed, the straggler named, one verdict for the job.

``diagnose_job(folder)`` reads a folder of ranks (the rank from each file's ``distributedInfo``, or its name:
``worker3``, ``rank-3``; workers that name no rank are separate runs: the newest is read). Each rank is diagnosed
as one trace is (``report.trace_report``), then put beside the others::

    job = diagnose_job("runs/ddp")           # or perf-doctor runs/ddp [--json]
    job["ranks"]        # one entry per rank: rank, worker, trace, steps, step_ms, top_cause, causes {cause: ms},
                        #   waits_ms (per step, waiting in collectives for later ranks), last_in (collectives it was
                        #   the last to reach), gpu_doctor, quality
    job["straggler"]    # {"rank", "ms", "last_in", "of", "top_cause", "cause", "extra_ms", "explains"}: the rank
                        #   the others wait for, the ms per step their wait costs them (the mean over the other ranks); None when none stands out
    job["diagnosis"], job["top_cause"], job["verdict"]    # the job's causes (mean over ranks) and one verdict

The straggler, without trusting the ranks' clocks to agree: every rank runs the same collectives in the same
order, and a collective ends on all ranks when the last has joined it, so the k-th collective of a kind is shortest
on the rank that joined last; each rank's wait is its duration minus the shortest. The rank last most costs the
others the most: the straggler when that cost is ``STRAGGLER_SHARE`` of the mean step or more and it is last in
``STRAGGLER_LAST`` of the collectives (NCCL/RCCL kernels on a GPU, ProcessGroup labels on a CPU).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from . import diagnosis as dg
from . import events as ev
from . import gaps
from .cluster import process_ranks
from .files import TraceError, find_workers
from .report import (
    DoctorError,
    fit,
    library_note,
    quality_lines,
    see_text,
    shown_path,
    trace_report,
)

RANK_VIEWS_MAX = (
    8  # above this many ranks, each rank's library views (HTA, TensorBoard's Overview) are left out
)
STRAGGLER_SHARE = (
    0.05  # its cost to the others, as a share of the mean step (the doctor's finding threshold)
)
STRAGGLER_LAST = 0.5  # the share of the matched collectives it reaches last
HOST_COLLECTIVE = ("gloo:", "nccl:", "mpi:", "ucc:", "xccl:", "hccl:")


def collectives(doc, on_gpu: bool) -> dict[str, list[float]]:
    """``{name: [duration_us, ...]}`` in time order: collective kernels (GPU) or ProcessGroup labels (CPU)."""
    evs = ev.complete(doc)
    if on_gpu:
        picked = [e for e in ev.device_work(evs) if ev.is_collective(e)]
    else:
        picked = sorted(
            (
                e
                for e in evs
                if ev.is_host(e) and str(e.get("name", "")).startswith(HOST_COLLECTIVE)
            ),
            key=lambda e: float(e["ts"]),
        )
    out: dict[str, list[float]] = defaultdict(list)
    for e in picked:
        out[str(e.get("name", ""))].append(float(e["dur"]))
    return dict(out)


def waits(per_rank: dict[int, dict[str, list[float]]]) -> dict[str, dict[int, float]]:
    """``{"waited": {rank: µs}, "cost": {rank: µs}, "last": {rank: n}, "matched": n}`` (the module docstring)."""
    waited, cost, last = (
        defaultdict(float),
        defaultdict(float),
        defaultdict(int),
    )  # rank -> µs, µs, times
    matched = 0
    kinds = set().union(*(set(c) for c in per_rank.values())) if per_rank else set()
    for kind in sorted(kinds):
        having = {r: c[kind] for r, c in per_rank.items() if kind in c}
        if len(having) < 2:
            continue
        for k in range(min(len(d) for d in having.values())):
            durs = {r: d[k] for r, d in having.items()}
            late = min(durs, key=lambda r: (durs[r], r))
            matched += 1
            last[late] += 1
            for r, x in durs.items():
                waited[r] += x - durs[late]
            cost[late] += sum(x - durs[late] for r, x in durs.items() if r != late) / (
                len(durs) - 1
            )
    return {"waited": dict(waited), "cost": dict(cost), "last": dict(last), "matched": matched}


def _rank_row(rank: int, worker: str, rep: dict[str, Any]) -> dict[str, Any]:
    return {
        "rank": rank,
        "worker": worker,
        "trace": rep["trace"],
        "steps": rep["steps"],
        "step_ms": rep["step_ms"],
        "top_cause": rep["top_cause"],
        "causes": {c["cause"]: c["ms"] for c in rep["diagnosis"]},
        "diagnosis": rep["diagnosis"],
        "gpu": rep["gpu"],
        "gpu_doctor": rep["gpu_doctor"],
        "quality": rep["quality"],
    }


def _job_causes(reps: list[dict[str, Any]], step_ms: float) -> list[dict[str, Any]]:
    """The job's causes: each one's mean ms per step over the ranks that judge it, with its range."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rep in reps:
        for c in rep["diagnosis"]:
            if c["ms"] is not None:
                by[c["cause"]].append(c)
    out = []
    for cause, cs in by.items():
        ms = [c["ms"] for c in cs]
        mean = statistics.fmean(ms)
        share = mean / step_ms if step_ms else 0.0
        extra = {
            k: round(statistics.fmean(c[k] for c in cs), 3)
            for k in ("exposed_ms", "overlapped_ms")
            if all(k in c for c in cs)
        }
        out.append(
            {
                "cause": cause,
                "ms": round(mean, 3),
                "share": round(share, 4),
                "finding": share >= dg.MIN_FINDING_SHARE,
                "see": cs[0]["see"],
                "evidence": f"mean over {len(ms)} rank(s), {min(ms):.2f} to {max(ms):.2f} ms per step",
                **extra,
            }
        )
    return sorted(out, key=lambda c: -c["ms"])


# A straggler's named cause explains the others' wait when it spends at least this share of that wait more than the
# other ranks' median (issue 44's probe: 0.02 ms of host sync named for a 4.06 ms wait): otherwise the report says
# the cause is not in the trace.
EXPLAINS = 0.5


def straggler_cause(
    row: dict[str, Any], others: list[dict[str, Any]]
) -> tuple[str | None, float | None]:
    """``(cause, extra ms)``: the straggler's cause furthest above the others' median (else its top cause, None)."""
    extra = {
        c: ms - statistics.median(theirs)
        for c, ms in row["causes"].items()
        if c != "communication"
        and ms is not None
        and (theirs := [o["causes"].get(c) for o in others if o["causes"].get(c) is not None])
    }
    if not extra or max(extra.values()) <= 0:
        return row["top_cause"], None
    cause = max(extra, key=extra.get)
    return cause, round(extra[cause], 3)


def _one_rank(job: tuple) -> tuple:
    """One rank read and diagnosed: ``(rank, worker, file, report or the error's line, collectives)``."""
    rank, worker, f, views, idle = job
    try:
        rep = trace_report(f, views=views, idle=idle)
    except DoctorError as exc:  # a rank that cannot be read is a failed row; the others go on
        return rank, worker, f, str(exc), None
    comms = collectives(rep.pop("_trace").doc, rep["_diagnosis"].on_gpu)
    ev.forget()  # what the memo computed from this rank's events, too
    return rank, worker, f, rep, comms


def _each_rank(jobs: list[tuple], workers: int, rank_map=None):
    """``_one_rank`` for every rank: in this process, or handed to an engine, ``rank_map(_one_rank, jobs)``: ``workers``
    processes (``cluster.process_ranks``: forked, each rank's trace in one), or a Dask cluster's (``cluster``). A rank
    the engine lost (its process or worker died) comes back as its error's line."""
    if rank_map is None and (workers <= 1 or len(jobs) < 3):
        return map(_one_rank, jobs)
    done = (rank_map or process_ranks(workers))(_one_rank, jobs)
    return [(*j[:3], r, None) if isinstance(r, str) else r for j, r in zip(jobs, done)]


@ev.memoizing
def diagnose_job(
    path: Path | str, *, views: bool = True, workers: int = 1, rank_map=None
) -> dict[str, Any]:
    """The job report of a folder of ranks (the module docstring; one worker or a file: that trace's report); ranks read
    by ``workers`` processes or by ``rank_map`` (``cluster.dask_ranks``: a Dask cluster's); above ``RANK_VIEWS_MAX``
    ranks each rank's library views are left out (a note says so)."""
    try:
        found, notes = find_workers(path)
    except TraceError as exc:
        raise DoctorError(str(exc).splitlines()[0]) from None
    if len(found) < 2 or all(r is None for r, _, _ in found):
        # one worker (its newest run), or workers that name no rank at all: separate runs, not a job's ranks
        rep = trace_report(path, views=views)
        if len(found) > 1:
            rep["notes"].append(
                f"{path}: {len(found)} workers, none naming its rank (distributedInfo, or rank/"
                f"worker and a number in its name): read as separate runs, the newest shown"
            )
        return rep
    unknown = [w for r, w, _ in found if r is None]
    ranks = [(r if r is not None else i, w, f) for i, (r, w, f) in enumerate(found)]
    if unknown:
        notes.append(
            f"{path}: {len(unknown)} worker(s) name no rank (distributedInfo or name); numbered by name order"
        )
    rank_views = views and len(ranks) <= RANK_VIEWS_MAX
    if views and not rank_views:
        notes.append(
            f"{path}: {len(ranks)} ranks: each rank's HTA and TensorBoard views left out (above "
            f"{RANK_VIEWS_MAX} ranks); the doctor's own breakdown and idle causes are shown"
        )
    reps, rows, comms, failed = [], [], {}, []
    for rank, worker, f, rep, comm in _each_rank(
        [(r, w, f, rank_views, views) for r, w, f in ranks], workers, rank_map
    ):
        if isinstance(rep, str):
            failed.append(
                {
                    "rank": rank,
                    "worker": worker,
                    "trace": str(f),
                    "error": rep,
                    "steps": None,
                    "step_ms": None,
                    "top_cause": None,
                    "causes": {},
                    "diagnosis": [],
                    "gpu": None,
                    "gpu_doctor": None,
                    "quality": [],
                    "waits_ms": None,
                    "last_in": None,
                }
            )
            continue
        reps.append(rep)
        rows.append(_rank_row(rank, worker, rep))
        comms[rank] = comm
    if not rows:
        raise DoctorError(
            f"{path}: none of its {len(failed)} ranks' traces can be read ({failed[0]['error']})"
        )
    if rank_views and (lib := library_note(str(path), any(r["_on_gpu"] for r in reps))):
        notes.append(lib)
    w = waits(comms)
    step_ms = statistics.fmean(r["step_ms"] for r in rows)
    counts = {r["steps"] for r in rows}
    steps = (
        counts.pop() if len(counts) == 1 else round(statistics.fmean(r["steps"] for r in rows), 2)
    )
    for row in rows:
        row["waits_ms"] = round(
            w["waited"].get(row["rank"], 0.0) / 1000.0 / max(row["steps"], 1), 3
        )
        row["last_in"] = w["last"].get(row["rank"], 0)
    straggler = None
    if w["matched"]:
        late = max(w["cost"], key=lambda r: w["cost"][r])
        ms = w["cost"][late] / 1000.0 / steps
        if ms >= STRAGGLER_SHARE * step_ms and w["last"][late] >= STRAGGLER_LAST * w["matched"]:
            row = next(r for r in rows if r["rank"] == late)
            cause, extra = straggler_cause(row, [r for r in rows if r["rank"] != late])
            straggler = {
                "rank": late,
                "ms": round(ms, 3),
                "last_in": w["last"][late],
                "of": w["matched"],
                "top_cause": row["top_cause"],
                "cause": cause,
                "extra_ms": extra,
                # its cause explains the wait when it spends at least EXPLAINS of it above the others' median
                "explains": bool(extra is not None and extra >= EXPLAINS * ms),
            }
    causes = _job_causes(reps, step_ms)
    entries = [
        {"check": e["check"], "message": f"rank {row['rank']}: {e['message']}", "rank": row["rank"]}
        for row in rows
        for e in row["quality"]
    ]
    entries += [
        {"check": "unreadable", "message": f"rank {x['rank']}: {x['error']}", "rank": x["rank"]}
        for x in failed
    ]
    overviews = [r["overview"] for r in reps if r["overview"]]
    overview = (
        {
            k: round(statistics.fmean((o.get(k) or 0.0) for o in overviews), 3)
            for k in dict.fromkeys(k for o in overviews for k in o)
        }
        if overviews
        else None
    )
    top = causes[0]["cause"] if causes else None
    idle = job_idle([r.get("idle_causes") for r in reps])
    return {
        "idle_causes": idle,
        "trace": str(path),
        "steps": steps,
        "step_ms": round(step_ms, 3),
        "quality": entries,
        "overview": overview,
        "gpu": None,
        "gpu_doctor": None,
        "diagnosis": causes,
        "top_cause": top,
        "cannot_judge": sorted({c for r in reps for c in r["cannot_judge"]}),
        "notes": notes,
        "ranks": sorted(rows + failed, key=lambda r: r["rank"]),
        "straggler": straggler,
        "verdict": verdict(rows, causes, straggler, step_ms),
        "_diagnoses": [r["_diagnosis"] for r in reps],
        "_signatures": [r["_signature"] for r in reps],
        "_on_gpu": any(r["_on_gpu"] for r in reps),
    }


def job_idle(per_rank: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The job's GPU idle by cause: each one's mean over the ranks with ``gaps.idle_causes`` (+ ``ranks``), or None."""
    got = [x for x in per_rank if x]
    if not got:
        return None
    idle = statistics.fmean(x["idle_ms"] for x in got)
    causes = []
    for c in got[0]["causes"]:
        ms = statistics.fmean(
            next((y["ms"] for y in x["causes"] if y["cause"] == c["cause"]), 0.0) for x in got
        )
        causes.append(
            {"cause": c["cause"], "ms": round(ms, 3), "share": round(ms / idle, 4) if idle else 0.0}
        )
    by: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for x in got:
        for r in x["sync_by"]:
            by[r["op"]][0] += r["ms"] / len(got)
            by[r["op"]][1] += r["calls"]
    return {
        "idle_ms": round(idle, 3),
        "step_ms": round(statistics.fmean(x["step_ms"] for x in got), 3),
        "steps": got[0]["steps"],
        "ranks": len(got),
        "causes": causes,
        "sync_by": sorted(
            ({"op": k, "ms": round(v[0], 3), "calls": v[1]} for k, v in by.items()),
            key=lambda r: -r["ms"],
        ),
    }


def verdict(
    rows: list[dict[str, Any]], causes: list[dict[str, Any]], straggler: dict | None, step_ms: float
) -> str:
    """One sentence for the job (``rows``: the ranks that could be read)."""
    slow = max(rows, key=lambda r: r["step_ms"])
    text = (
        f"{len(rows)} ranks, {step_ms:.2f} ms per step on average (slowest: rank {slow['rank']}, "
        f"{slow['step_ms']:.2f} ms). Top cause over the ranks: {causes[0]['cause']} "
        f"({causes[0]['ms']:.2f} ms, {causes[0]['share']:.0%})."
        if causes
        else f"{len(rows)} ranks."
    )
    if straggler:
        text += (
            f" Straggler: rank {straggler['rank']}, last to {straggler['last_in']} of {straggler['of']} "
            f"collectives; the others wait {straggler['ms']:.2f} ms per step for it. "
            + (
                f"Its cause: {straggler['cause']}, {straggler['extra_ms']:.2f} ms per step more than the other "
                f"ranks' median: fix that first."
                if straggler.get("explains")
                else f"Its cause is not in the trace: no cause of its own is above the other ranks' median by "
                f"half the wait ({straggler['cause'] or 'none'}: {straggler['extra_ms'] or 0:.2f} ms per step); "
                f"look outside the profiled steps (a slower device or host, its data, work before the step)."
            )
        )
    else:
        text += " No straggler stands out."
    return text


SHORT = {"launch/overhead": "launch", "communication": "comm", "host sync": "sync"}


def job_text(job: dict[str, Any]) -> str:
    """The text report of a job, answer first (the straggler and what to do about it when there is one, the verdict, what
    to do), then the ranks, causes and GPU idle."""
    import pandas as pd

    out = [f"job: {shown_path(job['trace'], 100)} ({len(job['ranks'])} ranks)"]
    judged = [c for c in job["diagnosis"] if c["ms"] is not None]
    if s := job[
        "straggler"
    ]:  # the straggler first: the other ranks' top cause is mostly waiting for it
        share = s["ms"] / job["step_ms"] if job["step_ms"] else 0.0
        see = next((c["see"] for c in judged if c["cause"] == s["cause"]), None)
        out.append(
            f"Straggler: rank {s['rank']}: the others wait {s['ms']:.2f} ms per step for it ({share:.0%} of "
            f"the step) in collectives (it is the last to {s['last_in']} of {s['of']}); "
            + (
                f"its cause: {s['cause']} (+{s['extra_ms']:.2f} ms per step over the other ranks' median)"
                if s.get("explains")
                else "its cause is not in the trace (the most above the others' median: "
                f"{s.get('cause') or 'none'}, +{s.get('extra_ms') or 0:.2f} ms per step, under half the wait)"
            )
        )
        out.append(
            f"What to do (straggler: rank {s['rank']}, {share:.0%} of the step): "
            + (
                f"fix its {s['cause']} first: {see_text(see)}"
                if s.get("explains") and see
                else "look outside its profiled steps (a slower device or host, its data, work before the "
                "step)"
            )
        )
    out.append(f"Verdict: {job['verdict']}")
    if not s:
        out.append("Straggler: none stands out")
    if judged:
        then = "Then" if s else "What to do"
        out.append(f"{then} ({judged[0]['cause']}): {see_text(judged[0]['see'])}")
    out.append("")
    out += quality_lines(job["quality"])
    cols = [c["cause"] for c in job["diagnosis"]]
    table = pd.DataFrame(
        [
            {
                "rank": r["rank"],
                "steps": r["steps"],
                "step ms": r["step_ms"],
                "top cause": SHORT.get(r["top_cause"], r["top_cause"]),
                **{SHORT.get(c, c): r["causes"].get(c) for c in cols},
                "waits": r["waits_ms"],
                "last in": r["last_in"],
            }
            for r in job["ranks"]
            if "error" not in r
        ]
    )
    out += [
        "Ranks (ms per step; waits: in collectives, waiting for later ranks; "
        + ", ".join(f"{v}: {k}" for k, v in SHORT.items() if k in cols)
        + "):",
        *table.round(2)
        .to_string(index=False, formatters={"rank": lambda r: f"{r:<4}"})
        .splitlines(),
        "",
    ]
    out.append(
        f"Job diagnosis (mean over the ranks; * = a finding, >= {dg.MIN_FINDING_SHARE:.0%} of the step):"
    )
    for c in job["diagnosis"]:
        out.append(
            f" {'*' if c['finding'] else ' '}- {c['cause']}: {c['ms']:.2f} ms ({c['share']:.0%}), "
            f"{c['evidence']}."
        )
        out.append(f"     what to do: {see_text(c['see'])}")
    out.append("")
    if idle := job.get("idle_causes"):
        out += [f"(mean over {idle['ranks']} rank(s))"] + gaps.idle_lines(idle)
    out += [f"  note: {n}" for n in job["notes"]]
    return "\n".join(fit(out))
