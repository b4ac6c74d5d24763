"""``show(path_or_dir)``: a trace's offline views in a notebook, no server and no network (beside ``%tensorboard``
in notebooks 01-04, and in ``05_diagnose``). The views themselves are computed in ``views.py``.

The trace is named once (its file; the folder in the first line only); each table keeps the columns that carry
something on this trace (a CPU-only trace has no device columns). Tables and lines go through ``Table`` and ``say``:
plain here, replaced by ``render_with`` (the lab's ``helpers.notebook.display`` installs its own when imported),
so the trace toolkit needs nothing from the notebook layer."""

from __future__ import annotations

from pathlib import Path

from . import events as ev
from .kernels import short_name
from .load import TraceError
from .files import shown_path
from .timeline import sync_split
from .views import Trace, open_trace


def Table(df, precision: int = 2):  # noqa: N802 - stands in for a renderer class (``render_with``)
    """A view's table, plain: the DataFrame itself."""
    return df


def say(text: str, small: bool = False) -> None:
    """A line about the trace, plain: printed (``**bold**`` marks dropped)."""
    print(str(text).replace("**", ""))


def render_with(table, say_line) -> None:
    """Render the views' tables with ``table(df, precision=...)`` and their lines with ``say_line(text, small=...)``."""
    global Table, say
    Table, say = table, say_line


# columns that only a GPU fills: left out of the views of a CPU-only trace (the Overview's device categories, the
# Operators' device times)
DEVICE_OVERVIEW = ("kernel_ms", "memcpy_ms", "memset_ms", "communication_ms", "runtime_ms")
DEVICE_OPERATORS = ("device_self_ms", "device_total_ms")
# never shown: torch-tb-profiler's tensor-core *eligibility* of an operator reads as use beside the kernels' own
# classification (the Kernels view's ``tensor_cores``)
HIDDEN_OPERATORS = ("tc_eligible",)
NAME_WIDTH = 60  # a kernel's or operator's name in a table: ``kernels.short_name`` (the full name stays in the data)


def short_names(df, width: int = NAME_WIDTH):
    """``df`` with its ``name`` column as a table shows it: each name ``kernels.short_name``'d to ``width``."""
    if "name" not in df.columns:
        return df
    return df.assign(
        name=df["name"].map(lambda n: short_name(n, width) if isinstance(n, str) else n)
    )


def shown_columns(df, has_gpu: bool, device_cols=(), precision: int = 2):
    """``df`` as shown: on a CPU-only trace without ``device_cols`` and numeric columns under ``10**-precision``."""
    import pandas as pd

    if has_gpu:
        return df
    drop = [
        c
        for c in df.columns
        if c in device_cols
        or (
            pd.api.types.is_numeric_dtype(df[c])
            and not pd.api.types.is_bool_dtype(df[c])
            and (df[c].fillna(0).abs() < 10**-precision).all()
        )
    ]
    return df.drop(columns=drop)


def _short(msg: str, t: Trace) -> str:
    """A message about the trace without its full path (said once, in the first line): the file name instead."""
    name = Path(t.label).name if t.path is not None else t.label
    return str(msg).replace(f"{t.label}: ", "").replace(t.label, name)


@ev.memoizing
def show(path_or_dir, steps: int = 3, top: int = 10, title: str | None = None) -> None:
    """Show a trace's offline views: a summary line, the Overview, GPU time (HTA), Operators, Kernels, Memory (``top``
    rows) and a timeline of ``steps`` steps; a view that fails, or bad input, is one line, never a traceback."""
    from IPython.display import display

    try:
        t = open_trace(path_or_dir)
    except TraceError as exc:
        say(f"trace: {exc}")
        return
    ranges = ev.step_windows(t.doc)  # the steps as the Overview (and the doctor) count them
    mean_ms = sum(b - a for _, a, b in ranges) / len(ranges) / 1000.0 if ranges else None
    name = Path(t.label).name if t.path is not None else t.label
    where = f" (in {shown_path(str(Path(t.label).parent))})" if t.path is not None else ""
    say(
        f"**{title + ': ' if title else ''}{name}**{where}: {len(ranges)} ProfilerStep(s)"
        + (f", {mean_ms:.2f} ms per step on average" if ranges else "")
        + (
            "; GPU activity recorded"
            if t.has_gpu
            else "; CPU only, so the GPU views and device columns are left out"
        )
    )
    for note in t.notes:
        say(f"note: {_short(note, t)}", small=True)

    def view(heading, fn):
        say(f"**{heading}**")
        try:
            out = fn()
        except TraceError as exc:
            say(f"  {_short(exc, t)}", small=True)
        except Exception as exc:  # noqa: BLE001 - one view failing must not hide the others
            why = (str(exc).strip().splitlines() or [""])[0][:120]
            say(
                f"  {heading} could not be computed on {name}: {type(exc).__name__}: {why}",
                small=True,
            )
        else:
            if out is not None:
                display(out)

    def overview_view():
        try:
            return Table(
                shown_columns(t.overview().round(3).reset_index(), t.has_gpu, DEVICE_OVERVIEW)
            )
        except TraceError as exc:
            say(f"  {_short(exc, t)}; the step times from the trace:", small=True)
            return Table(t.step_times())

    view("Overview: step time by category (ms; torch-tb-profiler)", overview_view)
    if t.has_gpu:
        import pandas as pd

        view(
            "GPU time (%; Holistic Trace Analysis' temporal breakdown)",
            lambda: Table(pd.DataFrame([t.gpu_breakdown()])),
        )
        view(
            "GPU idle time by cause (Holistic Trace Analysis)",
            lambda: Table(t.idle_breakdown().round(3)),
        )
        view(
            "Kernel launches (Holistic Trace Analysis; medians)",
            lambda: Table(pd.DataFrame([t.launch_summary()]).round(3)),
        )

    def operators_view():
        if note := t.operators_note():
            say(f"  {_short(note, t)}", small=True)
        ops = t.operators().head(top).round(3).drop(columns=list(HIDDEN_OPERATORS), errors="ignore")
        return Table(
            short_names(shown_columns(ops, t.has_gpu, DEVICE_OPERATORS, precision=3)), precision=3
        )

    view("Operators (by device self time on a GPU, else host self time)", operators_view)

    def kernels_view():
        k = t.kernels()
        tc = t.tensor_core_split()
        say(
            f"  {len(k)} kernels, {k['total_ms'].sum():.2f} ms in all"
            + (
                f"; {tc['yes']:.0%} of kernel time in kernels using tensor cores (classified from kernel names"
                + (
                    f"; {tc['unknown']:.0%} in matrix kernels whose name does not say"
                    if tc["unknown"]
                    else ""
                )
                + ")"
                if tc is not None
                else ""
            ),
            small=True,
        )
        return Table(short_names(k.head(top).round(3)))

    if t.has_gpu:
        view("Kernels", kernels_view)
    view("Memory", lambda: Table(t.memory().round(1)))

    def timeline_view():
        own, loop = sync_split(t.doc)
        if loop:  # the loop's own syncs are drawn apart: the count said beside them is the step's
            say(
                f"  host-device syncs: {len(own)} in the steps, and {len(loop)} of the profiling loop's own "
                "(one ends each step: it waits for the step's GPU work; drawn grey, not counted as the step's)",
                small=True,
            )
        return t.timeline(steps, title=title)

    drawn = len(
        ev.step_ranges(t.doc)[: max(1, int(steps))]
    )  # the steps the figure draws (timeline._window)
    view(
        f"Timeline of the first {drawn} step(s)" if drawn else "Timeline of the trace",
        timeline_view,
    )
