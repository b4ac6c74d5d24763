"""torch.profiler with a schedule, a fresh trace directory per run, tables and exports.

Taught in ``01_profiler_basics``; used by every later notebook.
"""
from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path
from typing import Any, Callable, Iterable

from ..notebook.env import quiet_profiler_warning, runs_dir
from ..traces import events as ev
from ..traces import intervals as iv
from ..traces.events import LOOP_SYNC_METADATA
from ..traces.kernels import short_name
from .device import is_cuda

NAME_WIDTH = 60   # a kernel's or operator's name in a printed table (``table``)


def activities(device=None) -> list:
    """Profiler activities this install supports *and* this machine can use.

    ``torch.profiler.supported_activities()`` lists what the build supports (a CUDA
    build reports CUDA even on a machine with no GPU), so CUDA is kept only when a
    GPU is actually available.
    """
    import torch
    from torch.profiler import ProfilerActivity

    acts = []
    for a in torch.profiler.supported_activities():
        if a == ProfilerActivity.CPU:
            acts.append(a)
        elif a == ProfilerActivity.CUDA and torch.cuda.is_available():
            if device is None or is_cuda(device):
                acts.append(a)
    return acts


def has_device_activity(acts: Iterable) -> bool:
    from torch.profiler import ProfilerActivity

    return any(a != ProfilerActivity.CPU for a in acts)


def sort_key(acts: Iterable | None = None, self_time: bool = True) -> str:
    """Sort by device time where a device is profiled, by CPU time otherwise."""
    acts = list(acts) if acts is not None else activities()
    if has_device_activity(acts):
        return "self_device_time_total" if self_time else "device_time_total"
    return "self_cpu_time_total" if self_time else "cpu_time_total"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "run"


def fresh_trace_dir(name: str, root: Path | str | None = None) -> Path:
    """A new, empty directory ``runs/<name>/<timestamp>`` for one profiled run.

    Recording twice into one directory makes TensorBoard's profiler plugin show
    two "workers"; a fresh directory per run avoids that.
    """
    base = Path(root) if root is not None else runs_dir() / "traces"
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    path = base / _slug(name) / stamp
    path.mkdir(parents=True, exist_ok=False)
    return path


def profile_steps(
    step_fn: Callable[[], Any],
    *,
    wait: int = 1,
    warmup: int = 1,
    active: int = 3,
    repeat: int = 1,
    device=None,
    trace_dir: Path | str | None = None,
    record_shapes: bool = False,
    profile_memory: bool = False,
    with_stack: bool = False,
    sync: bool = True,
):
    """Run ``step_fn`` under ``torch.profiler.profile`` with ``schedule(wait, warmup, active)``.

    Each call of ``step_fn`` is one profiler step (``prof.step()`` is called after it).
    With ``sync`` (the default) a CUDA device is synchronised after each step so a
    step's CPU-side span covers its GPU work; ``sync=False`` leaves the CPU free to run
    ahead inside the recorded steps, so the step's CPU time is only the time spent queueing
    work. Either way a CUDA device is synchronised at the end of the last ``wait``/``warmup``
    step of each cycle, before the recording starts: else the GPU is still running the steps
    before it (queued ahead) and the profile counts their kernels (an H100 profile of 5 steps
    held the kernels of 8: GPU busy 805 ms in a 504 ms window).
    With ``trace_dir`` the trace is written there for TensorBoard's profiler plugin
    (``tensorboard_trace_handler``). Returns the finished profiler object.
    When the loop synchronises a CUDA device, the trace says so (top-level key ``LOOP_SYNC_METADATA``).
    With ``repeat > 1`` the returned profiler holds the last cycle's events only (each cycle's trace is written).
    """
    import torch
    from torch.profiler import profile, schedule, tensorboard_trace_handler

    for n, v in (("wait", wait), ("warmup", warmup), ("repeat", repeat)):
        if v < 0:
            raise ValueError(f"{n} cannot be negative")
    if active < 1:
        raise ValueError("active must be at least 1")
    quiet_profiler_warning()  # torch 2.10/2.11 warn about clearing events on every profile (see env)
    total = (wait + warmup + active) * max(repeat, 1)
    handler = tensorboard_trace_handler(str(trace_dir)) if trace_dir is not None else None
    with profile(
        activities=activities(device),
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=repeat),
        on_trace_ready=handler,
        record_shapes=record_shapes,
        profile_memory=profile_memory,
        with_stack=with_stack,
    ) as prof:
        if sync and is_cuda(device) and hasattr(prof, "preset_metadata_json"):
            prof.preset_metadata_json(LOOP_SYNC_METADATA, "1")
        cycle = wait + warmup + active
        for i in range(total):
            step_fn()
            if is_cuda(device) and (sync or i % cycle == wait + warmup - 1):   # sync: every step; else before recording
                torch.cuda.synchronize(device)
            prof.step()
    return prof


def is_device_annotation(event) -> bool:
    """True for the device-timeline copy of a ``record_function`` label (``gpu_user_annotation``).

    With CUDA profiled, every label (``forward``, ``ProfilerStep#N``...) that launched GPU work is
    also drawn on the GPU timeline; ``prof.events()`` and ``key_averages()`` then hold a second event
    (or row) of the same name, with no CPU time and the label's whole GPU span as its "self" device
    time. Host-side analysis must skip these copies.
    """
    if not getattr(event, "is_user_annotation", False):
        return False
    return not str(getattr(event, "device_type", "CPU")).endswith("CPU")


def host_averages(prof, group_by_input_shape: bool = False):
    """``prof.key_averages()`` without the device-side copies of the labels (see ``is_device_annotation``).

    Kernel rows (device events that are not labels) stay. Returns the same ``EventList``, filtered in place.
    """
    avgs = prof.key_averages(group_by_input_shape=group_by_input_shape)
    avgs[:] = [e for e in avgs if not is_device_annotation(e)]
    return avgs


def table(prof, *, sort_by: str | None = None, row_limit: int = 10, group_by_input_shape: bool = False,
          name_width: int = NAME_WIDTH) -> str:
    """``key_averages().table(...)`` sorted by device time where there is a device, else CPU time.

    The GPU-timeline copies of the ``record_function`` labels are left out: sorted by device time
    they would top the table (``ProfilerStep*`` with the whole step) and hide the ops. Kernel names (C++
    signatures of ~250 characters) are shown by their readable part (``traces.kernels.short_name``, at most
    ``name_width`` characters); ``events_frame`` keeps the full names.
    """
    acts = getattr(prof, "activities", None)
    key = sort_by or sort_key(acts)
    avgs = host_averages(prof, group_by_input_shape)   # a fresh EventList: its keys may be shortened
    for e in avgs:
        e.key = short_name(e.key, name_width)
    return avgs.table(sort_by=key, row_limit=row_limit, max_name_column_width=name_width + 4)


def events_frame(prof, group_by_input_shape: bool = False):
    """``key_averages()`` as a DataFrame (times in ms), one row per op or label (host side) or kernel. ``name`` is
    the full name (``helpers.notebook.display`` shows kernels' C++ signatures by their readable part).

    ``on_device`` is True for rows of device events (kernels, memcpy: their time is
    also counted in the ``self_device_ms`` of the op that launched them). The
    device-timeline copies of the labels are dropped, so each label has one row.
    """
    import pandas as pd

    rows = []
    for e in host_averages(prof, group_by_input_shape):
        row = {
            "name": e.key,
            "on_device": not str(getattr(e, "device_type", "CPU")).endswith("CPU"),
            "calls": e.count,
            "self_cpu_ms": e.self_cpu_time_total / 1000.0,
            "cpu_total_ms": e.cpu_time_total / 1000.0,
            "cpu_avg_ms": e.cpu_time_total / 1000.0 / max(e.count, 1),
            "self_device_ms": getattr(e, "self_device_time_total", 0.0) / 1000.0,
            "device_total_ms": getattr(e, "device_time_total", 0.0) / 1000.0,
        }
        if group_by_input_shape:
            row["input_shapes"] = str(e.input_shapes)
        if getattr(e, "cpu_memory_usage", 0) or getattr(e, "self_cpu_memory_usage", 0):
            row["self_cpu_mem_mb"] = e.self_cpu_memory_usage / 2**20
        rows.append(row)
    return pd.DataFrame(rows)


def label_totals(prof, labels: Iterable[str]) -> dict[str, float]:
    """Total CPU time in ms of each ``record_function`` label (0.0 when absent)."""
    df = events_frame(prof)
    df = df[~df["on_device"]]
    by_name = dict(zip(df["name"], df["cpu_total_ms"]))
    return {lab: float(by_name.get(lab, 0.0)) for lab in labels}


def step_events(prof) -> list:
    """The ``ProfilerStep#N`` (``ProfilerStep*`` in newer releases) events of the recorded (active) steps.

    Host-side events only: on CUDA each step label also has a GPU-timeline copy.
    """
    return [e for e in prof.events() if e.name.startswith("ProfilerStep") and not is_device_annotation(e)]


def step_events_ms(prof) -> list[float]:
    """CPU duration in ms of each recorded ``ProfilerStep#N``."""
    return [e.cpu_time_total / 1000.0 for e in step_events(prof)]


def export_chrome_trace(prof, path: Path | str) -> Path:
    """Write a Chrome trace (open it in https://ui.perfetto.dev or chrome://tracing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        prof.export_chrome_trace(str(path))
    except RuntimeError as exc:
        if "already saved" in str(exc):
            raise ValueError("this profile was already written by its trace handler (trace_dir=...); that "
                             "*.pt.trace.json file is itself a Chrome trace, open it directly") from None
        raise
    return path


def trace_files(trace_dir: Path | str) -> list[Path]:
    """The trace files a ``tensorboard_trace_handler`` wrote into ``trace_dir``."""
    d = Path(trace_dir)
    return sorted(list(d.glob("*.pt.trace.json")) + list(d.glob("*.pt.trace.json.gz")))


def sort_keys(acts: Iterable | None = None) -> dict[str, str]:
    """The three orders of a ``key_averages().table()`` taught in notebook 01, as ``sort_by`` values.

    ``self``: time in the op itself (finds the op doing the work); ``total``: with everything it called
    (finds the label or parent that contains it); ``per call``: total / # of Calls (finds the op that is
    expensive each time, however rarely it runs). Device time where a device is profiled, else CPU time.
    """
    acts = list(acts) if acts is not None else activities()
    if has_device_activity(acts):
        return {"self": "self_device_time_total", "total": "device_time_total", "per call": "device_time"}
    return {"self": "self_cpu_time_total", "total": "cpu_time_total", "per call": "cpu_time"}


def _union_ms(intervals: Iterable[tuple[float, float]]) -> float:
    """Length in ms of the union of (start_us, end_us) intervals (overlaps counted once)."""
    return iv.length(iv.merge(intervals)) / 1000.0


def _range(event) -> tuple[float, float]:
    return float(event.time_range.start), float(event.time_range.end)


def _matches(name: str, label: str) -> bool:
    return name.startswith("ProfilerStep") if label == "ProfilerStep*" else name == label


_RUNTIME_CALL = re.compile(r"^(cuda|cu[A-Z]|hip)")


def device_launches(prof) -> list[tuple[float, float, float]]:
    """``(launch_us, start_us, end_us)`` of every device event (kernel, memcpy, memset) of a profile.

    ``launch_us`` is when the CPU launched it, on whichever thread did (the autograd engine runs a GPU
    backward on its own thread): the start of the runtime call with the same correlation id
    (``cudaLaunchKernel``...; paired by ``traces.events.launches``, as in a trace file), or else of the CPU op its
    ``linked_correlation_id`` names. Empty for a CPU-only profile.
    """
    events = list(prof.events())
    host = [e for e in events if ev.is_host(e)]
    calls = ev.launches([{"ph": "X", "cat": "cuda_runtime", "ts": float(e.time_range.start),
                          "args": {"correlation": e.id}} for e in host if _RUNTIME_CALL.match(str(e.name))])
    op_start: dict[int, float] = {}
    for e in host:
        if not _RUNTIME_CALL.match(str(e.name)) and not getattr(e, "linked_correlation_id", 0):
            op_start.setdefault(e.id, float(e.time_range.start))
    out = []
    for e in events:
        if ev.is_host(e) or getattr(e, "is_user_annotation", False):
            continue
        linked = getattr(e, "linked_correlation_id", 0)
        if e.id in calls:
            out.append((calls[e.id]["ts"], *_range(e)))
        elif linked and linked in op_start:
            out.append((op_start[linked], *_range(e)))
    return sorted(out)


def _gpu_of_ranges(host_ranges, launches, dev_copies) -> tuple[float, float]:
    """GPU time (span) and GPU busy time in ms of some host ranges of one label.

    With launches known, each host range owns the device work launched inside it (any thread); its GPU
    span runs from that work's first start to its last end, and the label's GPU time is the union of its
    spans. Without them, the label's own device-timeline copies (``gpu_user_annotation``) are used.
    """
    if launches:
        spans, work = [], []
        for a, b in host_ranges:
            mine = [(s, t) for launch, s, t in launches if a <= launch <= b]
            if mine:
                spans.append((min(s for s, _ in mine), max(t for _, t in mine)))
                work += mine
        return _union_ms(spans), _union_ms(work)
    if dev_copies:
        return _union_ms(dev_copies), float("nan")
    return float("nan"), float("nan")


def phase_times(prof, labels: Iterable[str]):
    """CPU time and GPU time of each ``record_function`` label, in ms (a DataFrame indexed by label).

    ``cpu_ms`` sums the label's host ranges: on a GPU, with no synchronisation inside the label, that is
    how long the CPU took to *queue* the phase's work. ``gpu_ms`` is the label's time on the GPU
    timeline: from the first start to the last end of the device work launched while the label was open
    (summed over its calls, overlaps counted once); ``gpu_busy_ms`` is the part of it when that work was
    actually running (the rest: the GPU waiting for the CPU to launch more).

    Kineto also copies each label onto the GPU timeline (``gpu_user_annotation``), but only with the work
    launched from the label's own thread: the backward's kernels, launched by the autograd engine's
    thread, fall outside the ``backward`` copy (pytorch/kineto#1022, pytorch/pytorch#144778). So the work
    is attributed by its launch time, on any thread (``device_launches``); the copies are only a fallback
    for a profile whose device events cannot be linked to their launch (``gpu_busy_ms`` is then NaN).
    Both are NaN for a CPU-only profile. ``calls`` counts host ranges; the ``*_per_call`` columns divide by it.
    ``ProfilerStep*`` stands for every recorded ``ProfilerStep#N``.
    """
    import pandas as pd

    labels = list(labels)
    host: dict[str, list] = {lab: [] for lab in labels}
    dev: dict[str, list] = {lab: [] for lab in labels}
    for e in prof.events():
        for lab in labels:
            if _matches(str(e.name), lab):
                (dev if is_device_annotation(e) else host)[lab].append(_range(e))
    launches = device_launches(prof)
    rows = []
    for lab in labels:
        calls = len(host[lab])
        cpu = sum(b - a for a, b in host[lab]) / 1000.0
        gpu, busy = _gpu_of_ranges(host[lab], launches, dev[lab])
        rows.append({"label": lab, "calls": calls, "cpu_ms": cpu, "gpu_ms": gpu, "gpu_busy_ms": busy,
                     "cpu_ms_per_call": cpu / calls if calls else float("nan"),
                     "gpu_ms_per_call": gpu / calls if calls else float("nan")})
    out = pd.DataFrame(rows).set_index("label")
    out.attrs["gpu_source"] = "launches" if launches else ("annotations" if any(dev.values()) else None)
    return out


def step_times(prof):
    """One row per recorded ``ProfilerStep#N``: its CPU time, GPU time and GPU busy time in ms (NaN on a CPU).

    See ``phase_times`` for what each means; on a GPU run with ``sync=False`` the CPU time is the time
    to queue the step and the GPU time the span of the work it launched.
    """
    import pandas as pd

    def full_name(e) -> str:  # ``ProfilerStep#N``: newer releases shorten ``name`` to ``ProfilerStep*``
        return str(getattr(e, "trace_name", None) or e.name)

    host = [e for e in prof.events() if str(e.name).startswith("ProfilerStep") and not is_device_annotation(e)]
    dev: dict[str, list] = {}
    for e in prof.events():
        if str(e.name).startswith("ProfilerStep") and is_device_annotation(e):
            dev.setdefault(full_name(e), []).append(_range(e))
    launches = device_launches(prof)
    rows = []
    for e in sorted(host, key=lambda e: e.time_range.start):
        gpu, busy = _gpu_of_ranges([_range(e)], launches, dev.get(full_name(e), []))
        rows.append({"step": full_name(e), "cpu_ms": e.time_range.elapsed_us() / 1000.0, "gpu_ms": gpu,
                     "gpu_busy_ms": busy})
    return pd.DataFrame(rows, columns=["step", "cpu_ms", "gpu_ms", "gpu_busy_ms"])
