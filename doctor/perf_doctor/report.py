"""One trace's report: what ``perf-doctor TRACE`` prints, as a dict (``trace_report``) and as text (``trace_text``).
A folder of ranks is ``job``'s; the command line is ``cli``'s.

The dict (its ``--json``; every number finite or null)::

    {"trace": PATH, "steps": int, "step_ms": float,     # the mean profiled step (events.step_windows): its period,
     "bound": "host-bound" | "device-bound" | null,     # host-bound where the GPU idles half the step or more
     "host_ms": float | null, "device_ms": float | null,   # its CPU span, the span of the device work it launched
     "quality": [{"check", "message"}],                 # quality.assess: what to trust before the diagnosis
     "overview": {category: ms per step} | null,        # torch-tb-profiler's Overview; adds up to step_ms (the
                                                        # time outside the plugin's step, if any, is "outside")
     "gpu": {"idle_pct", "compute_pct", "non_compute_pct", "source"} | null,   # HTA's temporal breakdown, or the
                                                        # doctor's own (gputime) where HTA fails; null CPU-only
     "gpu_doctor": {"idle_pct", "compute_pct", "non_compute_pct", "communication_pct"} | null,  # always the own
     "diagnosis": [{"cause", "ms", "share", "finding", "evidence", "see", ...}],
     "top_cause": str, "cannot_judge": [...], "notes": [...], "ranks": null, "straggler": null,
     "idle_causes": {"idle_ms", "step_ms", "steps", "causes": [{"cause", "ms", "share"}],   # gaps.idle_causes:
                     "sync_by": [{"op", "ms", "calls"}]} | null,  # the GPU's idle ms per step by cause; null CPU-only
     "throughput": [{"name", "calls", "gflop", "device_ms", "tflops", "dtype", "peak_tflops", "peak_pct"}],
                                                        # throughput.op_throughput: matmul/conv ops with shapes
     "memory": {"devices": [{"device", "peak_mb", "absolute"}], "top_ops": [{"op", "mb_per_step", ...}], ...} | null}
                                                        # memory.memory_report (profile_memory=True)
"""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path
from typing import Any

from .files import shown_path  # noqa: F401 (the report's first lines; compare and job use it from here)
from .memory import memory_lines, memory_report
from . import diagnosis as dg
from . import events as ev
from . import gaps, gputime, quality
from .throughput import op_throughput, throughput_advice
from .files import TraceError
from .kernels import kernel_rows, short_name
from .views import FULL, Trace, missing_libraries, open_trace, quiet

HTA = "Holistic Trace Analysis"
# the --json contract: 2 (issue 32) added schema_version, verdict, bound, idle_causes, throughput; 3 (issue 34)
# memory; 4 (issue 44) gpu_time (the doctor's own full-precision figures), top_operators, top_kernels, tables
SCHEMA_VERSION = 4
WIDTH = 120  # every line of the text report fits a 120-column terminal
NAME_WIDTH = 48  # the most a table's name column takes (kernels.short_name)
UNKNOWN_COLUMNS = (
    "blocks_per_sm",
    "occupancy_pct",
)  # a value the trace does not record reads "unknown", never 0


def see_text(see: str) -> str:
    """Advice as the report prints it: each notebook it names as "notebook 04_torch_compile" (the one teaching it)."""
    return re.sub(r"(?<![Nn]otebook )\b(\d\d_[a-z]\w*)", r"notebook \1", see or "")


def fit(lines: list[str], width: int = WIDTH) -> list[str]:
    """Every line within ``width`` columns: a longer one wrapped at spaces, its continuation indented 4 more."""
    out = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        pad = " " * (len(line) - len(line.lstrip()))
        out += textwrap.wrap(
            line.strip(),
            width,
            initial_indent=pad,
            subsequent_indent=pad + "    ",
            break_on_hyphens=False,
        ) or [line[:width]]
    return out


def table(df, top: int, width: int = WIDTH) -> str:
    """A view's first ``top`` rows as text within ``width``: names ``short_name``d to the room left, floats rounded,
    empty columns left out (pandas' ``to_string()`` ignores ``max_colwidth``, so the table is laid out here)."""
    df = df.head(top)
    cols = [c for c in df.columns if df[c].notna().any() or c in UNKNOWN_COLUMNS]

    def cell(x, col: str) -> str:
        if x is None or isinstance(x, float):
            if x is None or not math.isfinite(x):
                return "unknown" if col in UNKNOWN_COLUMNS else ""
            return f"{x:.3f}" if abs(x) < 1 else f"{x:.2f}"
        return str(x)

    body = {c: [cell(x, c) for x in df[c]] for c in cols if c != "name"}
    wide = {c: max([len(c)] + [len(x) for x in v]) for c, v in body.items()}
    rest = sum(wide.values()) + len(wide)
    room = max(16, min(NAME_WIDTH, width - rest)) if "name" in cols else 0
    names = [short_name(str(n), room) for n in df["name"]] if "name" in cols else None

    def row(name, cells) -> str:
        head = [f"{name:<{room}}"] if names is not None else []
        return " ".join(head + [f"{x:>{wide[c]}}" for c, x in zip(body, cells)]).rstrip()

    lines = [row("name", list(body))]
    lines += [row(names[i] if names else "", [body[c][i] for c in body]) for i in range(len(df))]
    return "\n".join(lines)


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
    """Category -> ms per step: the Overview's ``average`` row, or (None, why)."""
    ov, why = view(t, "overview")
    if ov is None:
        return None, why
    row = ov.loc["average"] if "average" in ov.index else ov.select_dtypes("number").mean()
    return {str(k).removesuffix("_ms"): _num(v) for k, v in row.items() if k != "step_ms"}, None


def gpu_breakdown(t: Trace) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str | None]:
    """``(gpu, gpu_doctor, note)``: HTA's breakdown, or the doctor's own where HTA fails (the note says why)."""
    if not t.has_gpu:
        return (
            None,
            None,
            f"{t.label}: a CPU-only trace has no GPU timeline, so no GPU breakdown (profile on a GPU)",
        )
    own = gputime.breakdown(t.doc)
    own = {k: _num(v) for k, v in own.items()} if own else None
    g, why = view(t, "gpu_breakdown")
    hta = (
        None
        if g is None
        else {k: _num(g.get(k)) for k in ("idle_pct", "compute_pct", "non_compute_pct")}
    )
    if hta and None not in hta.values():
        return {**hta, "source": HTA}, own, None
    why = why or f"{t.label}: HTA's temporal breakdown has no figures for this trace"
    if own is None:
        return None, None, why
    why = why.split(": ", 1)[-1]
    return (
        {**{k: own[k] for k in ("idle_pct", "compute_pct", "non_compute_pct")}, "source": "doctor"},
        own,
        f"{t.label}: {why}; the GPU figures are the doctor's own, with HTA's definitions (perf_doctor.gputime)",
    )


def library_note(label: str, on_gpu: bool) -> str | None:
    """One note for the views the base install leaves out (``views.missing_libraries``), or None when none is missing:
    torch-tb-profiler's Overview and tables, and on a GPU trace HTA's cross-check of the doctor's own GPU figures."""
    missing = missing_libraries()
    parts = []
    if "torch-tb-profiler" in missing:
        parts.append("the Overview and the operator and kernel tables (torch-tb-profiler's)")
    if HTA in missing and on_gpu:
        parts.append("HTA's cross-check of the doctor's own GPU figures")
    return f"{label}: {' and '.join(parts)} need {FULL}" if parts else None


def load(path: Path | str | Trace) -> Trace:
    """The trace at ``path`` (a file or a trace folder) as a ``Trace``; bad input: a one-line ``DoctorError``."""
    if isinstance(path, Trace):
        return path
    try:
        return open_trace(Path(path))
    except TraceError as exc:
        raise DoctorError(str(exc).splitlines()[0]) from None
    except (
        AttributeError,
        TypeError,
        KeyError,
        ValueError,
    ) as exc:  # JSON whose events are not trace events
        raise DoctorError(
            f"{path}: JSON, but its traceEvents are not Chrome-trace events ({type(exc).__name__}); "
            f"give the file that prof.export_chrome_trace or tensorboard_trace_handler wrote"
        ) from None


@ev.memoizing
def trace_report(
    path: Path | str | Trace, *, views: bool = True, idle: bool | None = None
) -> dict[str, Any]:
    """One trace's report (the module docstring's dict; ``DoctorError`` on bad input). ``views=False`` skips Overview
    and HTA, and by default (``idle``) idle causes and throughput; ``_`` keys are for the text report, not the JSON."""
    t = load(path)
    try:
        entries = quality.assess(t.doc, t.label)
        d = dg.diagnose(t.doc)
    except TraceError as exc:
        raise DoctorError(str(exc).splitlines()[0]) from None
    except dg.DiagnosisError as exc:
        raise DoctorError(f"{t.label}: {str(exc).split(': ', 1)[-1]}") from None
    except (
        AttributeError,
        TypeError,
        KeyError,
        ValueError,
        IndexError,
    ) as exc:  # events not shaped as PyTorch's
        raise DoctorError(
            f"{t.label}: its events are not shaped as PyTorch profiler events ({type(exc).__name__}: "
            f"{str(exc)[:80]}); give the file that torch.profiler wrote"
        ) from None
    entries += quality.warmup(d.step_times)
    gtime = gputime.gpu_time(t.doc, d.split[0] if d.split else None) if d.on_gpu else None
    entries += gputime.gpu_time_quality(gtime, d)
    entries += [{"check": "unreadable", "message": n} for n in t.notes if "could not be read" in n]
    notes = list(t.notes) if t.notes else list(d.notes)
    overview = gpu = own = None
    if views:
        with quiet():
            overview, why_ov = overview_per_step(t)
            gpu, own, why_gpu = gpu_breakdown(t)
        lib = library_note(t.label, t.has_gpu)  # one line in place of each missing library's own
        notes += [w for w in (why_ov, why_gpu) if w and FULL not in w] + ([lib] if lib else [])
    elif t.has_gpu:
        own = gputime.breakdown(t.doc)
    overview, why_add = add_up(overview, d.step_ms)
    notes += [why_add] if why_add else []
    try:
        idle = views if idle is None else idle
        idle, tput = (
            (gaps.idle_causes(t.doc, split=d.split), op_throughput(t.doc))
            if d.on_gpu and idle
            else (None, [])
        )
    except (
        AttributeError,
        TypeError,
        KeyError,
        ValueError,
        IndexError,
    ) as exc:  # an odd trace: the rest stands
        idle, tput = None, []
        notes.append(
            f"{t.label}: GPU idle causes and operator throughput not computed ({type(exc).__name__})"
        )
    tops = top_tables(t, d, views)
    try:
        mem = memory_report(t.doc)
    except (AttributeError, TypeError, KeyError, ValueError, IndexError) as exc:
        mem = None
        notes.append(f"{t.label}: its memory events could not be read ({type(exc).__name__})")
    return {
        "trace": t.label,
        "steps": d.steps,
        "step_ms": d.step_ms,
        "bound": d.bound,
        "host_ms": d.host_ms,
        "device_ms": d.device_ms,
        "quality": entries,
        "overview": overview,
        "gpu": gpu,
        "gpu_doctor": own,
        "gpu_time": gtime,
        "compiled": d.compiled,  # gputime.compiled: the steps' compiled code, or null
        "diagnosis": d.to_list(),
        "top_cause": d.top,
        "cannot_judge": d.cannot_judge,
        "notes": notes,
        "ranks": None,
        "straggler": None,
        "idle_causes": idle,
        "throughput": tput,
        "memory": mem,
        **tops,
        "verdict": trace_verdict(d),
        "_diagnosis": d,
        "_trace": t,
        "_on_gpu": d.on_gpu,
        "_signature": signature(t.doc, d.steps),
    }


TOP_JSON = 20  # rows of --json's top_operators and top_kernels


def top_tables(t: Trace, d: dg.Diagnosis, views: bool) -> dict[str, Any]:
    """``top_operators`` (torch-tb-profiler's Operator view, totals over the whole trace; without it, calls and host
    time from the trace), ``top_kernels`` (``kernels.kernel_rows`` of the steps' own work: totals and per step) and
    ``tables`` (what each table counts), for ``--json``."""
    evs = ev.complete(t.doc)
    own = ev.own_work(evs)[0]
    graphs = ev.graph_replays(evs)
    kern = [e for e in own if ev.kind(e) == "kernel"]
    ops, why = (None, None)
    if views:
        with quiet():
            df, why = view(t, "operators")
        if df is not None:
            ops = [
                {
                    k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                    for k, v in r.items()
                }
                for r in df.head(TOP_JSON).to_dict("records")
            ]
    if ops is None:
        by: dict[str, list] = {}
        for e in evs:
            if ev.kind(e) == "op":
                by.setdefault(str(e.get("name", "")), []).append(float(e.get("dur", 0) or 0))
        ops = [
            {"name": n, "calls": len(x), "host_total_ms": round(sum(x) / 1000.0, 4)}
            for n, x in sorted(by.items(), key=lambda kv: -sum(kv[1]))[:TOP_JSON]
        ]
    src = "torch-tb-profiler" if views and why is None else "doctor"
    return {
        "top_operators": ops,
        "top_kernels": kernel_rows(kern, d.steps, set(graphs), TOP_JSON),
        "tables": {
            "operators": f"totals over the whole trace ({src}), not per step",
            "kernels": "the steps' own kernels: total_ms over the steps kept, ms_per_step per step; "
            "occupancy_pct and blocks_per_sm null where the trace records none",
        },
    }


def add_up(
    overview: dict[str, float] | None, step_ms: float
) -> tuple[dict[str, float] | None, str | None]:
    """The Overview made to add up to the doctor's step (``outside``: what the plugin's step leaves out), and a note."""
    if not overview:
        return overview, None
    total = sum(v for v in overview.values() if v is not None)
    gap = step_ms - total
    if abs(gap) <= max(0.001, 1e-4 * step_ms):
        return overview, None
    if gap > 0:
        return {**overview, "outside": round(gap, 3)}, (
            f"torch-tb-profiler's step covers {total:.2f} of the {step_ms:.2f} ms window; the other {gap:.2f} ms "
            f"are the Overview's 'outside' row"
        )
    return overview, (
        f"torch-tb-profiler's step ({total:.2f} ms) is longer than the doctor's ({step_ms:.2f} ms: "
        f"the longer of the CPU step and the span of its device work)"
    )


OLD_SCHEMA = {
    "operator",
    "runtime",
}  # torch <= 1.9's capitalised categories (normalised), its host side


def signature(doc: dict[str, Any], steps: int) -> dict[str, Any]:
    """What a trace ran, for ``compare``: ``ops`` (calls per step), ``kernels``, ``shapes``, ``modules`` (with_stack's
    ``nn.Module: ...``), ``devices``, ``schema``."""
    ops: dict[str, float] = {}
    kernels, shapes, modules = set(), set(), set()
    old = False
    for e in ev.complete(doc):
        k = ev.kind(e)
        if k == "op":
            name = str(e.get("name", ""))
            ops[name] = ops.get(name, 0.0) + 1.0 / max(steps, 1)
            if dims := ev.args(e).get("Input Dims", ev.args(e).get("Input dims")):
                shapes.add((name, repr(dims)))
            old = old or ev.category(e.get("cat", "")) in OLD_SCHEMA
        elif k == "kernel":
            kernels.add(str(e.get("name", "")))
        elif k == "python" and str(e.get("name", "")).startswith("nn.Module: "):
            modules.add(str(e["name"]))
    devices = [
        str(p.get("name", "?")) for p in doc.get("deviceProperties") or [] if ev.is_mapping(p)
    ]
    return {
        "ops": ops,
        "kernels": kernels,
        "shapes": shapes,
        "modules": modules,
        "devices": devices,
        "schema": "old" if old else "new",
    }


def quality_lines(entries: list[dict[str, Any]]) -> list[str]:
    """The report's trace-quality block: one line per problem (in a job, with the ranks it is found on)."""
    if not entries:
        return [
            "Trace quality: no problem found (steps, warm-up, kernels, ranks, categories, times)",
            "",
        ]
    lines: dict[tuple[str, str], list] = {}
    for e in entries:
        msg = e["message"].split(": ", 1)[1] if "rank" in e else e["message"]
        lines.setdefault((e["check"], msg), []).append(e.get("rank"))
    out = ["Trace quality (read the diagnosis with these in mind):"]
    for (check, msg), ranks in lines.items():
        on = [r for r in ranks if r is not None]
        out.append(
            f"  ! {check}: "
            + (f"rank{'s' if len(on) > 1 else ''} {', '.join(map(str, on))}: " if on else "")
            + msg
        )
    return out + [""]


def trace_verdict(d: dg.Diagnosis) -> str:
    """One sentence: the step period and what bounds it, the top cause and where its fix is taught."""
    if d.nothing:
        return (
            f"Nothing profiled: the trace ({d.step_ms:.2f} ms) holds no operator, launch or device work; no cause "
            f"is diagnosed (profile inside the schedule's active steps)."
        )
    if d.damaged:
        return (
            f"Damaged ProfilerSteps: the whole trace ({d.step_ms:.2f} ms) is one window; no cause is diagnosed "
            f"(export the trace again)."
        )
    step = (
        f"No ProfilerStep: the whole trace ({d.step_ms:.2f} ms) is one window, not a training step."
        if d.whole_trace
        else f"{d.step_ms:.2f} ms per step over {d.steps} step(s)"
        + (f", {d.bound} (the GPU idles {d.gpu_idle_share:.0%} of it)." if d.bound else ".")
    )
    top = next((c for c in d.causes if c["ms"] is not None and c["cause"] == d.top), None)
    if top is None:
        return step + " No cause could be judged."
    where = re.search(r"\b\d\d_[a-z]\w*", top["see"] or "")  # the first notebook its advice names
    where = f"notebook {where.group(0)}" if where else ""
    return step + (
        f" Top cause: {top['cause']}, {top['ms']:.2f} ms per step ({top['share']:.0%})"
        + (f"; its fix is taught in {where}." if where else ".")
    )


def headline(rep: dict[str, Any]) -> list[str]:
    """The report's first lines, the answer: step and bound, top cause, what to do, findings, GPU busy and idle."""
    d = rep["_diagnosis"]
    whole = any(q.get("check") == "no_profiler_step" for q in rep.get("quality") or [])
    if d.nothing:
        out = [
            f"Step: nothing was profiled: the trace ({rep['step_ms']:.2f} ms) holds only the profiler's spans"
        ]
    elif d.damaged:
        out = [
            f"Step: damaged ProfilerSteps: the whole trace ({rep['step_ms']:.2f} ms) is one window; no cause "
            f"diagnosed"
        ]
    elif whole or d.whole_trace:
        out = [
            f"Step: no ProfilerStep marks: the whole trace ({rep['step_ms']:.2f} ms) is one window, not a training "
            f"step"
        ]
    else:
        out = [
            f"Step: {rep['step_ms']:.2f} ms (mean of {rep['steps']})"
            + (
                f", {rep['bound']}: the GPU idles {d.gpu_idle_share:.0%} of it (CPU step "
                f"{rep['host_ms']:.2f} ms, device work it launched {rep['device_ms']:.2f} ms)"
                if rep.get("bound")
                else ""
            )
        ]
    judged = [c for c in rep["diagnosis"] if c["ms"] is not None]
    if d.nothing:
        out.append("Top cause: none (nothing was profiled: no operator, launch or device work)")
    elif judged and not d.damaged:
        top = judged[0]
        out.append(
            f"Top cause: {top['cause']}, {top['ms']:.2f} ms per step ({top['share']:.0%} of the step)"
        )
        out.append(f"What to do: {see_text(top['see'])}")
        out += gputime.unjudged_lines(rep["diagnosis"], rep["step_ms"], top["ms"])
        finds = [c for c in judged if c["finding"]]
        if len(finds) > 1:
            out.append(
                f"Findings (>= {dg.MIN_FINDING_SHARE:.0%} of the step): "
                + "; ".join(f"{c['cause']} {c['ms']:.2f} ms ({c['share']:.0%})" for c in finds)
            )
    elif not d.damaged and not d.nothing:
        out.append("Top cause: none could be judged")
    out += gputime.gpu_time_lines(rep.get("gpu_time"))
    if (
        not rep.get("gpu_time") and d.compiled
    ):  # a CPU trace: its compiled code, with no GPU line to carry it
        out.append(gputime.compiled_line(d.compiled, " per step").strip())
    if g := rep.get("gpu"):
        comm = (rep.get("gpu_doctor") or {}).get("communication_pct")
        out.append(
            f"  cross-check, {g['source']} ({'its definitions, ' if g['source'] != HTA else ''}whole µs, the "
            f"work launched before the last ProfilerStep): idle {g['idle_pct']:.1f}%, compute "
            f"{g['compute_pct']:.1f}%, non-compute {g['non_compute_pct']:.1f}%"
            + (f" (communication {comm:.1f}%)" if comm else "")
        )
    if (idle := rep.get("idle_causes")) and idle["idle_ms"] > 0:
        big = sorted((c for c in idle["causes"] if c["ms"] > 0), key=lambda c: -c["ms"])[:3]
        out.append(
            f"GPU idle {idle['idle_ms']:.2f} ms per step, mostly: "
            + "; ".join(f"{c['cause']} {c['ms']:.2f} ms ({c['share']:.0%})" for c in big)
        )
    return fit(out)


def diagnosis_lines(rep: dict[str, Any]) -> list[str]:
    """Every cause with its evidence and where its fix is taught, within ``WIDTH``."""
    d = rep["_diagnosis"]
    out = [f"Diagnosis (* = a finding, >= {dg.MIN_FINDING_SHARE:.0%} of the step):"]
    if d.damaged or d.whole_trace or d.nothing:
        out.append("  " + d.summary().splitlines()[0])
    for c in rep["diagnosis"]:
        if c["ms"] is None:
            out.append(f"  - {c['cause']}: cannot judge. {c['evidence']}")
            continue
        out.append(
            f" {'*' if c['finding'] else ' '}- {c['cause']}: {c['ms']:.2f} ms ({c['share']:.0%}). "
            f"{c['evidence']}"
        )
        out.append(f"     what to do: {see_text(c['see'])}")
    return out


def trace_text(rep: dict[str, Any], top: int = 10) -> str:
    """The text report of one trace, answer first (``headline``), then the details, within ``WIDTH`` columns."""
    shown = shown_path(rep["trace"])
    out = [f"trace: {shown}"] + headline(rep) + [""]
    out += quality_lines(rep["quality"])
    if rep["overview"]:
        total = sum(v for v in rep["overview"].values() if v is not None)
        out.append(
            f"Overview (ms per step; torch-tb-profiler's categories, {total:.2f} ms in all):"
        )
        out += [f"  {k:<16} {v:10.3f}" for k, v in rep["overview"].items() if v is not None]
        out += gputime.communication_lines(rep["overview"], rep["diagnosis"])
        out.append("")
    out += gaps.idle_lines(rep.get("idle_causes"))
    out += memory_lines(rep.get("memory"))
    for name in ("operators", "kernels"):
        with quiet():
            df, why = view(rep["_trace"], name)
        if df is None:
            out.append(f"{name.capitalize()}: not shown ({why})")
        elif len(df):
            out.append(
                f"Top {name} ({min(top, len(df))} of {len(df)}; totals over the whole trace, not per step):"
            )
            out += table(df, top).splitlines()
        else:
            out.append(f"{name.capitalize()}: none in this trace")
        if name == "operators" and rep.get("throughput"):
            out.append(
                "  achieved TFLOP/s (shapes recorded): "
                + "; ".join(
                    f"{r['name']} {r['tflops']:.1f} {r['dtype'] or '?'}"
                    + (
                        f" = {r['peak_pct']:.0f}% of {r['peak_tflops']:g}"
                        if r["peak_pct"] is not None
                        else ""
                    )
                    for r in [r for r in rep["throughput"] if r.get("outer", True)][:4]
                )
            )
            out += [f"  advice: {a}" for a in throughput_advice(rep["throughput"])]
        out.append("")
    out += diagnosis_lines(rep)
    out += [f"  note: {n}" for n in rep["notes"]]
    if shown != rep["trace"]:
        out = [line.replace(rep["trace"], shown) for line in out]
    return "\n".join(fit(out))
