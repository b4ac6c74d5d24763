"""``python -m helpers.doctor PATH``: what kind of bottleneck does this profiler trace show?

PATH is a ``.json`` / ``.json.gz`` Chrome trace or a ``tensorboard_trace_handler`` folder, from any job. Prints the
overview (time per step by category), the top operators and kernels, and the diagnosis (``diagnosis``).
``--json`` prints one JSON object instead::

    {"trace": PATH, "steps": int, "step_ms": float,            # mean of the profiled steps
     "overview": {category: ms per step},
     "gpu": {"idle_pct", "compute_pct", "non_compute_pct"} | null,   # HTA's temporal breakdown; null CPU-only
     "diagnosis": [{"cause", "ms", "evidence", "see", ...}], "cannot_judge": [...], "notes": [...]}

Bad input (not a trace, a truncated ``.gz``, an empty folder...) gets one line naming the file and what to do,
and exit status 2. Taught in ``05_diagnose``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from . import diagnosis as dg
from .load import TraceError
from .views import open_trace, quiet

EXIT_BAD_INPUT = 2


class DoctorError(ValueError):
    """Bad input: the message is the one line the command prints."""


def load(path: Path | str):
    """The trace at ``path`` (a file or a trace folder) as a ``helpers.traces.Trace``; ``DoctorError`` (one line
    naming the file) for bad input: a missing file, an empty folder, a truncated ``.gz``, not a trace."""
    try:
        return open_trace(Path(path))
    except TraceError as exc:
        raise DoctorError(str(exc).splitlines()[0]) from None
    except (AttributeError, TypeError, KeyError, ValueError) as exc:  # JSON whose events are not trace events
        raise DoctorError(f"{path}: JSON, but its traceEvents are not Chrome-trace events ({type(exc).__name__}); "
                          f"give the file that prof.export_chrome_trace or tensorboard_trace_handler wrote") from None


def _view(t, name: str, *args) -> tuple[Any, str | None]:
    """``t.<name>()`` (a view of ``Trace``), or (None, its one-line reason) when it cannot be computed."""
    try:
        return getattr(t, name)(*args), None
    except TraceError as exc:
        return None, str(exc).splitlines()[0]
    except Exception as exc:  # noqa: BLE001 - one view failing must not stop the others
        msg = str(exc).splitlines()[0][:120] if str(exc) else ""
        return None, f"{t.label}: {name} could not be computed ({type(exc).__name__}: {msg})"


def _num(x) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) or math.isinf(x) else round(x, 3)


def overview_per_step(t) -> tuple[dict[str, float] | None, str | None]:
    """Category -> ms per step: the ``average`` row of the trace's overview (tb-profiler's categories)."""
    ov, why = _view(t, "overview")
    if ov is None:
        return None, why
    row = ov.loc["average"] if "average" in ov.index else ov.select_dtypes("number").mean()
    return {str(k).removesuffix("_ms"): _num(v) for k, v in row.items() if k != "step_ms"}, None


def gpu_breakdown(t) -> tuple[dict[str, float] | None, str | None]:
    """``idle_pct``, ``compute_pct``, ``non_compute_pct``: HTA's temporal breakdown (``Trace.gpu_breakdown``); None for a
    CPU-only trace, with the reason."""
    if not t.has_gpu:
        return None, f"{t.label}: a CPU-only trace has no GPU timeline, so no GPU breakdown (profile on a GPU)"
    g, why = _view(t, "gpu_breakdown")
    if g is None:
        return None, why
    return {k: _num(g.get(k)) for k in ("idle_pct", "compute_pct", "non_compute_pct")}, None


def report(path: Path | str, *, views: bool = True) -> dict[str, Any]:
    """Everything the command prints, as one JSON-ready dict (raises ``DoctorError`` on bad input).
    ``views=False`` skips the overview and the GPU breakdown (the slow part on a large trace)."""
    t = load(path)
    try:
        d = dg.diagnose(t.doc)
    except dg.DiagnosisError as exc:
        raise DoctorError(f"{t.label}: {str(exc).split(': ', 1)[-1]}") from None
    notes = list(t.notes) if t.notes else list(d.notes)
    overview = gpu = None
    if views:
        with quiet():
            overview, why_ov = overview_per_step(t)
            gpu, why_gpu = gpu_breakdown(t)
        notes += [w for w in (why_ov, why_gpu) if w]
    return {"trace": t.label, "steps": d.steps, "step_ms": d.step_ms, "overview": overview, "gpu": gpu,
            "diagnosis": d.to_list(), "cannot_judge": d.cannot_judge, "notes": notes, "top_cause": d.top,
            "_diagnosis": d, "_trace": t}


def json_report(rep: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in rep.items() if not k.startswith("_")}, indent=1)


def text_report(rep: dict[str, Any], top: int = 10) -> str:
    import pandas as pd

    out = [f"trace: {rep['trace']}", f"{rep['steps']} step(s), {rep['step_ms']:.2f} ms per step on average", ""]
    if rep["overview"]:
        out.append("Overview (ms per step):")
        out += [f"  {k:<16} {v:10.3f}" for k, v in rep["overview"].items() if v is not None]
        out.append("")
    if rep["gpu"]:
        g = rep["gpu"]
        out.append(f"GPU (HTA temporal breakdown): idle {g['idle_pct']}%, compute {g['compute_pct']}%, "
                   f"non-compute {g['non_compute_pct']}%")
        out.append("")
    with pd.option_context("display.width", 160, "display.max_colwidth", 60):
        for view in ("operators", "kernels"):
            with quiet():
                df, why = _view(rep["_trace"], view)
            if df is None:
                out.append(f"{view.capitalize()}: not shown ({why})")
            elif len(df):
                out.append(f"Top {view} ({min(top, len(df))} of {len(df)}):")
                out.append(df.head(top).to_string())
            else:
                out.append(f"{view.capitalize()}: none in this trace")
            out.append("")
    out.append("Diagnosis (* = a finding, >= "
               f"{dg.MIN_FINDING_SHARE:.0%} of the step):")
    out.append(rep["_diagnosis"].summary().split("\n  note:")[0])
    out += [f"  note: {n}" for n in rep["notes"]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m helpers.doctor", description=__doc__.splitlines()[0])
    ap.add_argument("path", help="a .json / .json.gz profiler trace or a tensorboard_trace_handler folder")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--top", type=int, default=10, help="rows of the operator and kernel tables (default 10)")
    args = ap.parse_args(argv)
    try:
        rep = report(args.path)
    except DoctorError as exc:
        print(f"doctor: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json_report(rep) if args.json else text_report(rep, top=args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
