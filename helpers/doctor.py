"""``python -m helpers.doctor PATH``: what kind of bottleneck does this profiler trace show?

PATH is a ``.json`` / ``.json.gz`` Chrome trace or a ``tensorboard_trace_handler`` folder, from any job. Prints the
overview (time per step by category), the top operators and kernels, and the diagnosis (``helpers.diagnosis``).
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
import contextlib
import io
import json
import math
import sys
from pathlib import Path
from typing import Any

from . import diagnosis as dg
from . import trace as tr

EXIT_BAD_INPUT = 2


class DoctorError(ValueError):
    """Bad input: the message is the one line the command prints."""


def load(path: Path | str) -> tuple[dict, Path]:
    """The trace at ``path`` (a file or a trace folder) and the file it came from; ``DoctorError`` otherwise."""
    p = Path(path)
    if not p.exists():
        raise DoctorError(f"{p}: no such file or folder; give a .json/.json.gz trace or a trace folder.")
    file = p
    if p.is_dir():
        files = sorted(list(p.glob("*.pt.trace.json")) + list(p.glob("*.pt.trace.json.gz"))
                       + list(p.glob("*.json")) + list(p.glob("*.json.gz")), key=lambda f: f.stat().st_mtime)
        if not files:
            raise DoctorError(f"{p}: an empty folder (no *.json or *.json.gz trace in it); point at the folder "
                              f"tensorboard_trace_handler wrote, or at one trace file.")
        file = files[-1]
    try:
        doc = tr.load_trace(p if p.is_dir() and _loads_folders() else file)
    except tr.TraceError as exc:
        raise DoctorError(str(exc).splitlines()[0]) from None
    except (EOFError, OSError) as exc:  # gzip: truncated / not gzip; unreadable file
        raise DoctorError(f"{file}: cannot be read as a (gzipped) trace ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else 'truncated'}); copy the file again "
                          f"or re-export it.") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise DoctorError(f"{file}: not a JSON profiler trace ({type(exc).__name__}); give the *.pt.trace.json "
                          f"that torch.profiler wrote.") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise DoctorError(f"{file}: JSON but not a Chrome trace (no traceEvents list); give the *.pt.trace.json "
                          f"that torch.profiler wrote.")
    return doc, file


def _loads_folders() -> bool:
    return "folder" in (tr.load_trace.__doc__ or "").lower()


def _quiet(fn, *args, **kwargs):
    """Call a library view with its chatter (HTA's logging, the plugin's prints) kept off the output."""
    import logging

    buf = io.StringIO()
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            return fn(*args, **kwargs)
    finally:
        logging.disable(logging.NOTSET)


def _view(name: str, *args, **kwargs) -> tuple[Any, str | None]:
    """``helpers.trace.<name>(...)``, or (None, why) when it fails or this install's trace module lacks it."""
    fn = getattr(tr, name, None)
    if fn is None:
        return None, f"helpers.trace.{name} is not available"
    try:
        return _quiet(fn, *args, **kwargs), None
    except Exception as exc:  # noqa: BLE001 - one view failing must not stop the others
        return None, f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _num(x) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) or math.isinf(x) else round(x, 3)


def overview_per_step(doc: dict) -> tuple[dict[str, float] | None, str | None]:
    """Category -> ms per step, from ``helpers.trace.overview`` (its average row / column)."""
    ov, why = _view("overview", doc)
    if ov is None:
        return None, why
    try:
        import pandas as pd

        if isinstance(ov, dict):
            return {str(k): _num(v) for k, v in ov.items()}, None
        if isinstance(ov, pd.DataFrame):
            for label in ("mean", "average", "avg"):
                if label in ov.index:
                    return {str(k): _num(v) for k, v in ov.loc[label].items() if _num(v) is not None}, None
            num = ov.select_dtypes("number")
            return {str(k): _num(v) for k, v in num.mean().items()}, None
        if isinstance(ov, pd.Series):
            return {str(k): _num(v) for k, v in ov.items()}, None
    except Exception as exc:  # noqa: BLE001
        return None, f"overview: {type(exc).__name__}: {exc}"
    return None, f"overview: unexpected result {type(ov).__name__}"


def gpu_breakdown(doc: dict, file: Path, on_gpu: bool) -> tuple[dict[str, float] | None, str | None]:
    """``idle_pct``, ``compute_pct``, ``non_compute_pct`` from HTA's temporal breakdown (``helpers.trace``);
    None for a CPU-only trace."""
    if not on_gpu:
        return None, "CPU-only trace: no GPU breakdown"
    g, why = _view("gpu_breakdown", file)
    if g is None:
        g, why2 = _view("gpu_breakdown", doc)
        if g is None:
            return None, why or why2
    if hasattr(g, "to_dict") and not isinstance(g, dict):
        g = g.iloc[0].to_dict() if hasattr(g, "iloc") else g.to_dict()
    keys = ("idle_pct", "compute_pct", "non_compute_pct")
    return {k: _num(g.get(k)) for k in keys}, None


def report(path: Path | str) -> dict[str, Any]:
    """Everything the command prints, as one JSON-ready dict (raises ``DoctorError`` on bad input)."""
    doc, file = load(path)
    try:
        d = dg.diagnose(doc)
    except dg.DiagnosisError as exc:
        raise DoctorError(f"{file}: {str(exc).split(': ', 1)[-1]}") from None
    overview, why_ov = overview_per_step(doc)
    gpu, why_gpu = gpu_breakdown(doc, file, d.on_gpu)
    notes = list(d.notes)
    for why in (why_ov, why_gpu if d.on_gpu else None):
        if why:
            notes.append(why)
    return {"trace": str(file), "steps": d.steps, "step_ms": d.step_ms, "overview": overview, "gpu": gpu,
            "diagnosis": d.to_list(), "cannot_judge": d.cannot_judge, "notes": notes, "top_cause": d.top,
            "_diagnosis": d, "_doc": doc}


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
            df, why = _view(view, rep["_doc"])
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
    out.append(rep["_diagnosis"].summary())
    for n in rep["notes"]:
        if n not in rep["_diagnosis"].notes:
            out.append(f"  note: {n}")
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
