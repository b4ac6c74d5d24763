"""One trace's report: what ``python -m helpers.doctor TRACE`` prints, as a dict (``trace_report``) and as text
(``trace_text``). A folder of ranks is ``job``'s; the command line is ``doctor``'s.

The dict (its ``--json``; every number finite or null)::

    {"trace": PATH, "steps": int, "step_ms": float,     # the mean profiled step (events.step_windows)
     "quality": [{"check", "message"}],                 # quality.assess: what to trust before the diagnosis
     "overview": {category: ms per step} | null,        # torch-tb-profiler's Overview; adds up to step_ms
     "gpu": {"idle_pct", "compute_pct", "non_compute_pct", "source"} | null,   # HTA's temporal breakdown, or the
                                                        # doctor's own (gputime) where HTA fails; null CPU-only
     "gpu_doctor": {"idle_pct", "compute_pct", "non_compute_pct", "communication_pct"} | null,  # always the own
     "diagnosis": [{"cause", "ms", "share", "finding", "evidence", "see", ...}],
     "top_cause": str, "cannot_judge": [...], "notes": [...], "ranks": null, "straggler": null}
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from . import diagnosis as dg
from . import events as ev
from . import gputime, quality
from .files import TraceError
from .views import Trace, open_trace, quiet

HTA = "Holistic Trace Analysis"


class DoctorError(ValueError):
    """Bad input: the message is the one line the command prints."""


def _num(x) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return round(x, 3) if math.isfinite(x) else None


def view(t: Trace, name: str, *args) -> tuple[Any, str | None]:
    """``t.<name>()`` (a view of ``Trace``), or (None, its one-line reason) when it cannot be computed."""
    try:
        return getattr(t, name)(*args), None
    except TraceError as exc:
        return None, str(exc).splitlines()[0]
    except Exception as exc:  # noqa: BLE001 - one view failing must not stop the others
        msg = str(exc).splitlines()[0][:120] if str(exc) else ""
        return None, f"{t.label}: {name} could not be computed ({type(exc).__name__}: {msg})"


def overview_per_step(t: Trace) -> tuple[dict[str, float] | None, str | None]:
    """Category -> ms per step: the ``average`` row of the trace's overview (tb-profiler's categories)."""
    ov, why = view(t, "overview")
    if ov is None:
        return None, why
    row = ov.loc["average"] if "average" in ov.index else ov.select_dtypes("number").mean()
    return {str(k).removesuffix("_ms"): _num(v) for k, v in row.items() if k != "step_ms"}, None


def gpu_breakdown(t: Trace) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str | None]:
    """``(gpu, gpu_doctor, note)``: HTA's temporal breakdown (``source``: HTA), or where HTA fails the doctor's
    own (``gputime``, same definitions; ``source``: doctor) with HTA's reason in the note; and the doctor's own
    always. All None on a CPU-only trace, with the reason."""
    if not t.has_gpu:
        return None, None, f"{t.label}: a CPU-only trace has no GPU timeline, so no GPU breakdown (profile on a GPU)"
    own = gputime.breakdown(t.doc)
    own = {k: _num(v) for k, v in own.items()} if own else None
    g, why = view(t, "gpu_breakdown")
    if g is not None:
        return {**{k: _num(g.get(k)) for k in ("idle_pct", "compute_pct", "non_compute_pct")}, "source": HTA}, own, None
    if own is None:
        return None, None, why
    why = (why or "").split(": ", 1)[-1]
    return ({**{k: own[k] for k in ("idle_pct", "compute_pct", "non_compute_pct")}, "source": "doctor"}, own,
            f"{t.label}: {why}; the GPU figures are the doctor's own, with HTA's definitions (helpers.traces.gputime)")


def load(path: Path | str | Trace) -> Trace:
    """The trace at ``path`` (a file or a trace folder) as a ``Trace``; ``DoctorError`` (one line naming the file)
    for bad input: a missing or unreadable file, an empty folder, a truncated ``.gz``, over the reading limit,
    not a trace."""
    if isinstance(path, Trace):
        return path
    try:
        return open_trace(Path(path))
    except TraceError as exc:
        raise DoctorError(str(exc).splitlines()[0]) from None
    except (AttributeError, TypeError, KeyError, ValueError) as exc:  # JSON whose events are not trace events
        raise DoctorError(f"{path}: JSON, but its traceEvents are not Chrome-trace events ({type(exc).__name__}); "
                          f"give the file that prof.export_chrome_trace or tensorboard_trace_handler wrote") from None


@ev.memoizing
def trace_report(path: Path | str | Trace, *, views: bool = True) -> dict[str, Any]:
    """One trace's report (the dict in the module docstring); raises ``DoctorError`` on bad input. ``views=False``
    skips the Overview and HTA (the slow part on a large trace). Keys starting with ``_`` hold the ``Diagnosis``
    and the ``Trace`` for the text report; the JSON leaves them out."""
    t = load(path)
    try:
        entries = quality.assess(t.doc, t.label)
        d = dg.diagnose(t.doc)
    except TraceError as exc:
        raise DoctorError(str(exc).splitlines()[0]) from None
    except dg.DiagnosisError as exc:
        raise DoctorError(f"{t.label}: {str(exc).split(': ', 1)[-1]}") from None
    except (AttributeError, TypeError, KeyError, ValueError, IndexError) as exc:  # events not shaped as PyTorch's
        raise DoctorError(f"{t.label}: its events are not shaped as PyTorch profiler events ({type(exc).__name__}: "
                          f"{str(exc)[:80]}); give the file that torch.profiler wrote") from None
    entries += quality.warmup(d.step_times)
    entries += [{"check": "unreadable", "message": n} for n in t.notes if "could not be read" in n]
    notes = list(t.notes) if t.notes else list(d.notes)
    overview = gpu = own = None
    if views:
        with quiet():
            overview, why_ov = overview_per_step(t)
            gpu, own, why_gpu = gpu_breakdown(t)
        notes += [w for w in (why_ov, why_gpu) if w]
    elif t.has_gpu:
        own = gputime.breakdown(t.doc)
    return {"trace": t.label, "steps": d.steps, "step_ms": d.step_ms, "quality": entries, "overview": overview,
            "gpu": gpu, "gpu_doctor": own, "diagnosis": d.to_list(), "top_cause": d.top,
            "cannot_judge": d.cannot_judge, "notes": notes, "ranks": None, "straggler": None,
            "_diagnosis": d, "_trace": t, "_on_gpu": d.on_gpu}


def quality_lines(entries: list[dict[str, Any]]) -> list[str]:
    """The report's trace-quality block: one line per problem (in a job, one per problem with the ranks it is
    found on)."""
    if not entries:
        return ["Trace quality: no problem found (steps, warm-up, kernels, ranks, categories, times)", ""]
    lines: dict[tuple[str, str], list] = {}
    for e in entries:
        msg = e["message"].split(": ", 1)[1] if "rank" in e else e["message"]
        lines.setdefault((e["check"], msg), []).append(e.get("rank"))
    out = ["Trace quality (read the diagnosis with these in mind):"]
    for (check, msg), ranks in lines.items():
        on = [r for r in ranks if r is not None]
        out.append(f"  ! {check}: " + (f"rank{'s' if len(on) > 1 else ''} {', '.join(map(str, on))}: " if on else "")
                   + msg)
    return out + [""]


def trace_text(rep: dict[str, Any], top: int = 10) -> str:
    """The text report of one trace."""
    import pandas as pd

    whole = any(q.get("check") == "no_profiler_step" for q in rep.get("quality") or [])
    steps = (f"no ProfilerStep marks: the whole trace ({rep['step_ms']:.2f} ms) is one window, not a training step"
             if whole else f"{rep['steps']} step(s), {rep['step_ms']:.2f} ms per step on average")
    out = [f"trace: {rep['trace']}", steps, ""]
    out += quality_lines(rep["quality"])
    if rep["overview"]:
        total = sum(v for v in rep["overview"].values() if v is not None)
        out.append(f"Overview (ms per step; torch-tb-profiler's categories, {total:.2f} ms in all):")
        out += [f"  {k:<16} {v:10.3f}" for k, v in rep["overview"].items() if v is not None]
        out.append("")
    if rep["gpu"]:
        g = rep["gpu"]
        out.append(f"GPU ({g['source']} temporal breakdown): idle {g['idle_pct']}%, compute {g['compute_pct']}%, "
                   f"non-compute {g['non_compute_pct']}%"
                   + (f" (communication alone {rep['gpu_doctor']['communication_pct']}%)"
                      if rep.get("gpu_doctor") and rep["gpu_doctor"].get("communication_pct") else ""))
        out.append("")
    with pd.option_context("display.width", 160, "display.max_colwidth", 60):
        for name in ("operators", "kernels"):
            with quiet():
                df, why = view(rep["_trace"], name)
            if df is None:
                out.append(f"{name.capitalize()}: not shown ({why})")
            elif len(df):
                out.append(f"Top {name} ({min(top, len(df))} of {len(df)}):")
                out.append(df.head(top).to_string())
            else:
                out.append(f"{name.capitalize()}: none in this trace")
            out.append("")
    out.append(f"Diagnosis (* = a finding, >= {dg.MIN_FINDING_SHARE:.0%} of the step):")
    out.append(rep["_diagnosis"].summary().split("\n  note:")[0])
    out += [f"  note: {n}" for n in rep["notes"]]
    return "\n".join(out)
