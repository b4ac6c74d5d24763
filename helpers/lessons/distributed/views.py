"""Notebook 06's readings of the ranks' traces, as tables and figures: all-reduces per step, the doctor's split of
communication (exposed, overlapped), DDP's overhead over the single process, the bucket sweep, the straggler's
waits, HTA's overlap, each rank's timeline."""
from __future__ import annotations

import contextlib
import io
import logging
import warnings
from pathlib import Path
from typing import Any

from ...traces import events as ev
from ...traces import load
from ...traces.files import find_workers
from ...traces.job import diagnose_job

ALL_REDUCE = ("gloo:all_reduce", "nccl:all_reduce")


def all_reduces(folder: Path | str) -> dict[int, float]:
    """``{rank: all-reduces per profiled step}``: ProcessGroup's host labels (one per call) inside the
    ``ProfilerStep`` windows of each rank's trace (a GPU trace's device-side copy of a label is not counted)."""
    out = {}
    for i, (rank, _, f) in enumerate(find_workers(folder)[0]):
        doc = load.load_trace(f)
        steps = [(a, b) for _, a, b in ev.step_ranges(doc)]
        n = sum(1 for e in ev.complete(doc) if ev.is_host(e) and str(e.get("name", "")).startswith(ALL_REDUCE)
                and any(a <= float(e["ts"]) < b for a, b in steps))
        out[rank if rank is not None else i] = n / max(len(steps), 1)
    return out


def comm_split(folder: Path | str) -> dict[str, Any]:
    """The doctor on a folder of ranks (``diagnose_job``): ``step_ms``, ``exposed_ms`` and ``overlapped_ms`` of its
    communication cause, ``other_ms`` (the step less exposed communication), ``overlap_share``, and the ``job``."""
    job = diagnose_job(folder, views=False)
    comm = next((c for c in job["diagnosis"] if c["cause"] == "communication"), {})
    ex, ov = comm.get("exposed_ms", 0.0), comm.get("overlapped_ms", 0.0)
    return {"step_ms": job["step_ms"], "exposed_ms": ex, "overlapped_ms": ov, "other_ms": job["step_ms"] - ex,
            "overlap_share": ov / (ex + ov) if ex + ov > 0 else None, "job": job}


def overhead_table(single: dict[str, Any], ddp: dict[str, Any], world: int):
    """ms per step: the single process, its share per rank (the ideal DDP step), DDP's step, what DDP adds beyond
    the ideal (compute and the rest; exposed communication: they sum to the DDP step) and, beside them, the
    overlapped communication (no wall time of its own)."""
    import pandas as pd

    ideal = single["step_ms"] / world
    ms = {"single process": single["step_ms"], f"ideal: single / {world}": ideal, "DDP": ddp["step_ms"],
          "DDP adds: compute, rest": ddp["other_ms"] - ideal, "DDP adds: exposed comm": ddp["exposed_ms"],
          "overlapped comm": ddp["overlapped_ms"]}
    return pd.DataFrame({"ms": ms, "share of DDP": {k: v / ddp["step_ms"] for k, v in ms.items()}})


def bucket_table(traces: Path | str, caps: list[float]):
    """One row per ``bucket_cap_mb`` (the profile in ``traces/bucket <cap>``): all-reduces per step on rank 0, the
    step, exposed and overlapped communication (ms), the overlapped share."""
    import pandas as pd

    rows = []
    for cap in caps:
        s = comm_split(Path(traces) / f"bucket {cap:g}")
        rows.append({"bucket_cap_mb": cap, "all-reduces/step": all_reduces(Path(traces) / f"bucket {cap:g}")[0],
                     "step ms": s["step_ms"], "exposed ms": s["exposed_ms"], "overlapped ms": s["overlapped_ms"],
                     "overlap share": s["overlap_share"]})
    return pd.DataFrame(rows).set_index("bucket_cap_mb")


def waits_table(before: dict[str, Any], after: dict[str, Any]):
    """Two ``diagnose_job`` reports side by side per rank (without, with a straggler): step ms, top cause, ms per
    step waiting in collectives for later ranks."""
    import pandas as pd

    rows = [{"rank": r["rank"], "job": label, "step ms": r["step_ms"], "top cause": r["top_cause"],
             "waits ms": r["waits_ms"]}
            for label, job in (("no straggler", before), ("straggler", after))
            for r in job.get("ranks") or [] if "error" not in r]
    return pd.DataFrame(rows).sort_values(["rank", "job"], ascending=[True, False])


def hta_overlap(folder: Path | str):
    """Holistic Trace Analysis' ``get_comm_comp_overlap`` (per rank, % of communication kernel time overlapping
    compute kernels), or None where HTA is missing or cannot read the traces. On gloo's CPU traces (no kernels)
    its column is NaN."""
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return None
    logging.getLogger("hta").setLevel(logging.ERROR)
    buf = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            warnings.simplefilter("ignore")
            return TraceAnalysis(trace_dir=str(folder)).get_comm_comp_overlap(visualize=False)
    except Exception:  # noqa: BLE001 - traces HTA cannot read: no figure
        return None


def timelines(folder: Path | str, steps: int = 1) -> list[tuple[int, Any]]:
    """``[(rank, figure)]``: each rank's first ``steps`` profiled steps as a timeline (``Trace.timeline``). The
    figures are closed to pyplot: show them with ``display(fig)``."""
    from ...traces.views import open_trace

    workers = [(rank if rank is not None else i, f) for i, (rank, _, f) in enumerate(find_workers(folder)[0])]
    return [(r, open_trace(f).timeline(steps=steps, title=f"rank {r}")) for r, f in workers]

