"""``show(path_or_dir)``: a trace's offline views in a notebook, no server and no network (beside ``%tensorboard``
in notebooks 01-04, and in ``05_diagnose``). The views themselves are computed in ``views.py``."""
from __future__ import annotations

from ..notebook.display import readable
from . import events as ev
from .load import TraceError
from .views import open_trace


def show(path_or_dir, steps: int = 3, top: int = 10) -> None:
    """Show the offline views of a trace: a summary line, the Overview (step-time breakdown per step and on
    average), the GPU's time (HTA), Operators, Kernels, Memory and a timeline of the first ``steps`` steps; tables
    hold the ``top`` rows. A view that cannot be computed on this trace says so in one line and the others are
    still shown. Bad input (not a trace, damaged file, empty folder) is one line too, never a traceback."""
    from IPython.display import display

    try:
        t = open_trace(path_or_dir)
    except TraceError as exc:
        print(f"trace: {exc}")
        return
    ranges = ev.step_windows(t.doc)   # the steps as the Overview (and the doctor) count them
    mean_ms = sum(b - a for _, a, b in ranges) / len(ranges) / 1000.0 if ranges else None
    print(f"{t.label}: {len(ranges)} ProfilerStep(s)" + (f", {mean_ms:.2f} ms per step on average" if ranges else "")
          + ("; GPU activity recorded" if t.has_gpu else "; CPU only (no GPU views)"))
    for note in t.notes:
        print(f"note: {note}")

    def view(title, fn):
        print(f"\n{title}")
        try:
            out = fn()
        except TraceError as exc:
            print(f"  {exc}")
        except Exception as exc:  # noqa: BLE001 - one view failing must not hide the others
            why = (str(exc).strip().splitlines() or [""])[0][:120]
            print(f"  {title} could not be computed on {t.label}: {type(exc).__name__}: {why}")
        else:
            if out is not None:
                display(out)

    def overview_view():
        try:
            return readable(t.overview().round(3))
        except TraceError as exc:
            print(f"  {exc}; the step times from the trace:")
            return readable(t.step_times())

    view("Overview: step time by category (ms; torch-tb-profiler)", overview_view)
    if t.has_gpu:
        import pandas as pd

        view("GPU time (%; Holistic Trace Analysis' temporal breakdown)", lambda: pd.DataFrame([t.gpu_breakdown()]))
        view("GPU idle time by cause (Holistic Trace Analysis)", lambda: readable(t.idle_breakdown().round(3)))
        view("Kernel launches (Holistic Trace Analysis; medians)",
             lambda: readable(pd.DataFrame([t.launch_summary()]).round(3)))

    def operators_view():
        note = t.operators_note()
        if note:
            print(f"  {note}")
        return readable(t.operators().head(top).round(3))

    view("Operators (by device self time on a GPU, else host self time)", operators_view)

    def kernels_view():
        k = t.kernels()
        tc = t.tensor_core_share()
        print(f"  {len(k)} kernels, {k['total_ms'].sum():.2f} ms in all"
              + (f"; {tc:.0%} of kernel time in kernels using tensor cores" if tc is not None else ""))
        return readable(k.head(top).round(3))

    view("Kernels", kernels_view)
    view("Memory", lambda: readable(t.memory().round(1)))
    view(f"Timeline of the first {steps} step(s)", lambda: t.timeline(steps))
