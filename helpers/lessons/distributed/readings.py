"""Reading the job (notebook 06): the ranks' step times, their traces, and what the doctor says about them.

- ``all_reduces``: the all-reduces each rank ran per profiled step, counted from its trace (ProcessGroup's host
  labels ``gloo:all_reduce`` / ``nccl:all_reduce``, one per call, inside the ``ProfilerStep`` windows; a GPU trace's
  device-side copy of the label, ``gpu_user_annotation``, is not counted again);
- ``comm_split``: a folder of ranks read by the doctor (``helpers.traces.diagnose_job``): step time, exposed and
  overlapped communication and the rest (compute, its launch overhead, input), per step, mean over the ranks;
- ``overhead_table``: what DDP adds over the single process's step divided by the ranks, split into compute,
  exposed communication and (beside it) overlapped communication;
- ``bucket_table``: the bucket-size sweep, all-reduces per step and the share of communication that overlaps;
- ``hta_overlap``: Holistic Trace Analysis' communication/computation overlap, where it has GPU kernels to read.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import statistics
import warnings
from pathlib import Path
from typing import Any

from ...traces import events as ev
from ...traces import load
from ...traces.job import diagnose_job
from ...traces.files import find_workers

ALL_REDUCE = ("gloo:all_reduce", "nccl:all_reduce")


def step_times(out: Path | str) -> dict[str, list[float]]:
    """Rank 0's step times per variant (ms): it waits for the others in every all-reduce, so its step is the job's."""
    return json.loads((Path(out) / "rank0.json").read_text())["times_ms"]


def all_reduces(folder: Path | str) -> dict[int, float]:
    """``{rank: all-reduces per profiled step}`` from each rank's trace in ``folder``."""
    workers, _ = find_workers(folder)
    out = {}
    for i, (rank, _, f) in enumerate(workers):
        doc = load.load_trace(f)
        evs = ev.complete(doc)
        steps = [(a, b) for _, a, b in ev.step_ranges(doc)]
        n = sum(1 for e in evs if ev.is_host(e) and str(e.get("name", "")).startswith(ALL_REDUCE)
                and any(a <= float(e["ts"]) < b for a, b in steps))   # host labels: one per call
        out[rank if rank is not None else i] = n / max(len(steps), 1)
    return out


def comm_split(folder: Path | str) -> dict[str, Any]:
    """The doctor's reading of a folder of ranks: ``step_ms``, ``exposed_ms``, ``overlapped_ms``, ``other_ms``
    (the step less exposed communication), ``overlap_share`` (overlapped / all communication), and the job."""
    job = diagnose_job(folder, views=False)
    comm = next((c for c in job["diagnosis"] if c["cause"] == "communication"), {})
    ex, ov = comm.get("exposed_ms", 0.0), comm.get("overlapped_ms", 0.0)
    return {"step_ms": job["step_ms"], "exposed_ms": ex, "overlapped_ms": ov,
            "other_ms": round(job["step_ms"] - ex, 3),
            "overlap_share": round(ov / (ex + ov), 4) if ex + ov > 0 else None, "job": job}


def overhead_table(single: dict[str, Any], ddp: dict[str, Any], world: int):
    """Per step, from the traces: the single process, its ideal share per rank (its step / ranks), DDP, and what
    DDP adds over that share: extra compute (its non-communication time less the share) and exposed communication;
    the overlapped communication beside it (hidden behind the backward: no wall time, but on a CPU it takes cores)."""
    import pandas as pd

    ideal = single["step_ms"] / world
    rows = [{"what": "single process step", "ms": single["step_ms"]},
            {"what": f"ideal DDP step (single / {world} ranks)", "ms": ideal},
            {"what": "DDP step (mean over ranks)", "ms": ddp["step_ms"]},
            {"what": "  DDP adds: compute and the rest", "ms": ddp["other_ms"] - ideal},
            {"what": "  DDP adds: exposed communication", "ms": ddp["exposed_ms"]},
            {"what": "  overlapped communication (no wall time)", "ms": ddp["overlapped_ms"]}]
    df = pd.DataFrame(rows)
    df["share of DDP step"] = df["ms"] / ddp["step_ms"]
    return df.set_index("what")


def bucket_table(out: Path | str, caps: list[float]):
    """One row per ``bucket_cap_mb``: all-reduces per step (rank 0), step ms, exposed and overlapped ms, overlap."""
    import pandas as pd

    rows = []
    for cap in caps:
        folder = Path(out) / "traces" / f"bucket {cap:g}"
        s = comm_split(folder)
        rows.append({"bucket_cap_mb": cap, "all-reduces per step": all_reduces(folder)[0], "step ms": s["step_ms"],
                     "exposed comm ms": s["exposed_ms"], "overlapped comm ms": s["overlapped_ms"],
                     "overlap share": s["overlap_share"]})
    return pd.DataFrame(rows).set_index("bucket_cap_mb")


def hta_overlap(folder: Path | str) -> tuple[Any, str]:
    """``(DataFrame or None, note)``: HTA's ``get_comm_comp_overlap`` (per rank, % of communication time that
    overlaps GPU compute). HTA reads GPU kernels only: on CPU traces its figure is undefined, and the note says so."""
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError as exc:
        return None, f"HTA is not installed ({exc})"
    buf = io.StringIO()
    logging.getLogger("hta").setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            warnings.simplefilter("ignore")
            df = TraceAnalysis(trace_dir=str(folder)).get_comm_comp_overlap(visualize=False)
    except Exception as exc:  # noqa: BLE001 - HTA's failures on traces it cannot read become a note
        return None, f"HTA could not read these traces: {type(exc).__name__}: {str(exc)[:200]}"
    if df is None or df.empty or df["comp_comm_overlap_pctg"].isna().all():
        return df, ("HTA's overlap is undefined on these traces (NaN): it measures NCCL kernels against GPU compute "
                    "kernels, and a gloo job on a CPU has neither")
    mean = statistics.fmean(float(x) for x in df["comp_comm_overlap_pctg"].dropna())
    return df, f"HTA: {mean:.0f}% of communication kernel time overlaps compute kernels (mean over ranks)"


def waits_table(before: dict[str, Any], after: dict[str, Any]):
    """Per rank, two jobs read by the doctor side by side (``diagnose_job`` reports, e.g. without and with a
    straggler): step ms, top cause and ms per step waiting in collectives for later ranks."""
    import pandas as pd

    rows = []
    for label, job in (("no straggler", before), ("straggler", after)):
        for r in job.get("ranks") or []:
            if "error" not in r:
                rows.append({"rank": r["rank"], "job": label, "step ms": r["step_ms"], "top cause": r["top_cause"],
                             "waits ms": r["waits_ms"]})
    return pd.DataFrame(rows).sort_values(["rank", "job"], ascending=[True, False])


def timelines(folder: Path | str, steps: int = 1) -> list[tuple[int, Any]]:
    """``[(rank, figure)]``: each rank's first ``steps`` profiled steps drawn as a timeline (``Trace.timeline``)."""
    from ...traces.views import open_trace

    out = []
    for i, (rank, _, f) in enumerate(find_workers(folder)[0]):
        r = rank if rank is not None else i
        fig = open_trace(f).timeline(steps=steps)
        fig.axes[0].set_title(f"rank {r}: timeline of {steps} profiled step(s)")
        out.append((r, fig))
    return out
