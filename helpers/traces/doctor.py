"""``python -m helpers.doctor PATH``: what kind of bottleneck does this profiler trace show?

PATH is a ``.json`` / ``.json.gz`` Chrome trace or a ``tensorboard_trace_handler`` folder, from any job (also
installed as ``perf-doctor``). It prints the trace-quality checks (``quality``), the Overview (time per step by
category), the GPU's temporal breakdown, the top operators and kernels, and the diagnosis (``diagnosis``). A folder
of ranks (the workers of a distributed job, or files named by rank) is diagnosed rank by rank: one row per rank,
the straggler, one verdict for the job (``job``).

``--json`` prints one object instead, always strict JSON (a NaN or infinite number is null). One trace::

    {"trace": PATH, "steps": int, "step_ms": float,            # the mean profiled step
     "quality": [{"check", "message"}],                         # what to trust before the diagnosis
     "overview": {category: ms per step},                       # adds up to step_ms
     "gpu": {"idle_pct", "compute_pct", "non_compute_pct", "source"} | null,   # HTA's (or the doctor's own)
     "gpu_doctor": {... , "communication_pct"} | null,          # the doctor's own, same definitions as HTA's
     "diagnosis": [{"cause", "ms", "share", "finding", "evidence", "see"}],   # communication: + exposed_ms,
     "top_cause": str, "cannot_judge": [...], "notes": [...],                 #   overlapped_ms
     "ranks": null, "straggler": null}

A folder of ranks: the same keys for the job (``diagnosis``: each cause's mean over the ranks) with ``ranks`` (one
entry per rank: rank, steps, step_ms, top_cause, causes, diagnosis, waits_ms, last_in, gpu, quality),
``straggler`` (``{"rank", "ms", ...}`` or null) and ``verdict``.

``python -m helpers.doctor compare BEFORE AFTER`` is the command's other half, which times one trace against another
with the notebooks' comparison: ``helpers.doctor`` and ``helpers.measure.trace_compare`` (the trace toolkit needs
nothing from ``measure``).

Bad input (not a trace, a truncated ``.gz``, an unreadable or empty folder, a file over the reading limit, another
tool's trace...) gets one line naming the file and what to do, and exit status 2. Taught in ``05_diagnose``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from .job import diagnose_job, job_text
from .quality import finite
from .report import DoctorError, trace_text

EXIT_BAD_INPUT = 2
__all__ = ["DoctorError", "EXIT_BAD_INPUT", "emit", "json_report", "main", "pct_arg", "report", "text_report"]


def report(path: Path | str, *, views: bool = True) -> dict[str, Any]:
    """Everything the command prints, as one JSON-ready dict (raises ``DoctorError`` on bad input): a trace's
    report, or a folder of ranks' job report. ``views=False`` skips the Overview and HTA (the slow part)."""
    return diagnose_job(path, views=views)


def json_report(rep: dict[str, Any]) -> str:
    """Strict JSON: private keys left out, NaN and infinities as null (``allow_nan=False`` proves it)."""
    return json.dumps(finite({k: v for k, v in rep.items() if not k.startswith("_")}), indent=1, allow_nan=False)


def text_report(rep: dict[str, Any], top: int = 10) -> str:
    return job_text(rep) if rep.get("ranks") else trace_text(rep, top=top)


def pct_arg(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= x < 1e6:
        raise argparse.ArgumentTypeError(f"a percentage from 0 up, not {text!r}")
    return x


def emit(text: str) -> None:
    """Print, quietly stopping when the reader has gone (``| head``)."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m helpers.doctor", description=__doc__.splitlines()[0],
                                 epilog="python -m helpers.doctor compare BEFORE AFTER [--json] [--fail-if-slower PCT]"
                                        ": did a change help? (--help after compare for more)")
    ap.add_argument("path", help="a .json / .json.gz profiler trace or a tensorboard_trace_handler folder")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--top", type=int, default=10, help="rows of the operator and kernel tables (default 10)")
    ap.add_argument("--max-mb", type=pct_arg, help="the reading limit in MiB (default $PERF_TRACE_MAX_MB or 512)")
    args = ap.parse_args(argv)
    if args.max_mb:
        os.environ["PERF_TRACE_MAX_MB"] = str(args.max_mb)
    try:
        rep = report(args.path)
    except DoctorError as exc:
        print(f"doctor: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    emit(json_report(rep) if args.json else text_report(rep, top=args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
