"""torch.profiler with a schedule, a fresh trace directory per run, tables and exports (taught in 01); a step profiled
and diagnosed in one call, ``diagnose_step`` (taught in 05: the diagnosis itself is ``perf_doctor.diagnose``)."""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path
from typing import Any, Callable, Iterable

from perf_doctor import events as ev
from perf_doctor import intervals as iv
from perf_doctor.diagnosis import Diagnosis, DiagnosisError, diagnose
from perf_doctor.events import LOOP_SYNC_METADATA

from ..project import quiet_profiler_warning, runs_dir
from .device import is_cuda

_RUNTIME_CALL = re.compile(r"^(cuda|cu[A-Z]|hip)")  # a CUDA/HIP runtime call, launching device work


def activities(device=None) -> list:
    """Profiler activities this build supports and this machine can use (CUDA only with a GPU available)."""
    import torch
    from torch.profiler import ProfilerActivity

    cuda = torch.cuda.is_available() and (device is None or is_cuda(device))
    return [
        a
        for a in torch.profiler.supported_activities()
        if a == ProfilerActivity.CPU or (a == ProfilerActivity.CUDA and cuda)
    ]


def fresh_trace_dir(name: str, root: Path | str | None = None) -> Path:
    """A new, empty ``runs/<name>/<timestamp>`` (one directory per run: TensorBoard shows no second worker)."""
    base = Path(root) if root is not None else runs_dir() / "traces"
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    path = base / (re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "run") / stamp
    path.mkdir(parents=True, exist_ok=False)
    return path


def profile_steps(
    step_fn: Callable[[], Any],
    *,
    wait: int = 1,
    warmup: int = 1,
    active: int = 3,
    device=None,
    trace_dir: Path | str | None = None,
    profile_memory: bool = False,
    sync: bool = True,
):
    """Run ``step_fn`` under ``torch.profiler.profile`` with ``schedule(wait, warmup, active)``, one profiler step per
    call, into a TensorBoard trace in ``trace_dir``; returns the profiler. A CUDA device is synchronised before
    recording starts and, with ``sync``, after each step (the trace says so: ``LOOP_SYNC_METADATA``)."""
    import torch
    from torch.profiler import profile, schedule, tensorboard_trace_handler

    if wait < 0 or warmup < 0:
        raise ValueError("wait and warmup cannot be negative")
    if active < 1:
        raise ValueError("active must be at least 1")
    quiet_profiler_warning()  # torch 2.10/2.11 warn about clearing events on every profile (see env)
    handler = tensorboard_trace_handler(str(trace_dir)) if trace_dir is not None else None
    with profile(
        activities=activities(device),
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        on_trace_ready=handler,
        profile_memory=profile_memory,
    ) as prof:
        if sync and is_cuda(device) and hasattr(prof, "preset_metadata_json"):
            prof.preset_metadata_json(LOOP_SYNC_METADATA, "1")
        for i in range(wait + warmup + active):
            step_fn()
            if is_cuda(device) and (sync or i == wait + warmup - 1):
                torch.cuda.synchronize(device)
            prof.step()
    return prof


def is_device_annotation(event) -> bool:
    """True for the GPU-timeline copy of a ``record_function`` label (``gpu_user_annotation``): no CPU time, the label's
    whole GPU span as self time; host-side analysis skips it."""
    annotation = bool(getattr(event, "is_user_annotation", False))
    return annotation and not str(getattr(event, "device_type", "CPU")).endswith("CPU")


def host_averages(prof, group_by_input_shape: bool = False):
    """``prof.key_averages()`` without the labels' device-side copies (kernel rows stay)."""
    avgs = prof.key_averages(group_by_input_shape=group_by_input_shape)
    avgs[:] = [e for e in avgs if not is_device_annotation(e)]
    return avgs


def events_frame(prof, group_by_input_shape: bool = False):
    """``key_averages()`` as a DataFrame (ms), one row per op, label (host side) or kernel, full names; ``on_device``
    for device events (also counted in their op's ``self_device_ms``)."""
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
    """The host-side ``ProfilerStep#N`` events of the recorded steps."""
    return [
        e
        for e in prof.events()
        if e.name.startswith("ProfilerStep") and not is_device_annotation(e)
    ]


def export_chrome_trace(prof, path: Path | str) -> Path:
    """Write a Chrome trace (open it in https://ui.perfetto.dev or chrome://tracing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        prof.export_chrome_trace(str(path))
    except RuntimeError as exc:
        if "already saved" in str(exc):
            raise ValueError(
                "this profile was already written by its trace handler (trace_dir=...); that "
                "*.pt.trace.json file is itself a Chrome trace, open it directly"
            ) from None
        raise
    return path


def trace_files(trace_dir: Path | str) -> list[Path]:
    """The trace files a ``tensorboard_trace_handler`` wrote into ``trace_dir``."""
    d = Path(trace_dir)
    return sorted(list(d.glob("*.pt.trace.json")) + list(d.glob("*.pt.trace.json.gz")))


def sort_keys(acts: Iterable | None = None) -> dict[str, str]:
    """Notebook 01's three ``sort_by`` orders: ``self``, ``total``, ``per call`` (device time where profiled, else
    CPU)."""
    from torch.profiler import ProfilerActivity

    acts = list(acts) if acts is not None else activities()
    on = "device" if any(a != ProfilerActivity.CPU for a in acts) else "cpu"
    return {"self": f"self_{on}_time_total", "total": f"{on}_time_total", "per call": f"{on}_time"}


def _union_ms(intervals: Iterable[tuple[float, float]]) -> float:
    """Length in ms of the union of (start_us, end_us) intervals (overlaps counted once)."""
    return iv.length(iv.merge(intervals)) / 1000.0


def _range(event) -> tuple[float, float]:
    return float(event.time_range.start), float(event.time_range.end)


def _matches(name: str, label: str) -> bool:
    return name.startswith("ProfilerStep") if label == "ProfilerStep*" else name == label


def device_launches(prof) -> list[tuple[float, float, float]]:
    """``(launch_us, start_us, end_us)`` of every device event, launched by its runtime call (same correlation id) or
    the CPU op its ``linked_correlation_id`` names, on any thread; empty on a CPU."""
    events = list(prof.events())
    host = [e for e in events if ev.is_host(e)]
    calls = ev.launches(
        [
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "ts": float(e.time_range.start),
                "args": {"correlation": e.id},
            }
            for e in host
            if _RUNTIME_CALL.match(str(e.name))
        ]
    )
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
    """GPU span and busy ms of one label's host ranges: the device work launched inside each (any thread), else the
    label's device-timeline copies (busy NaN)."""
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
    """CPU and GPU time of each label in ms (DataFrame by label, with ``calls`` and per-call columns). ``cpu_ms``: its
    host ranges (on a GPU, the time to queue the work). ``gpu_ms``: first start to last end of the device work
    launched inside it, on any thread (Kineto's own copies miss the autograd thread's kernels: pytorch/kineto#1022),
    ``gpu_busy_ms`` the part running. NaN on a CPU. ``ProfilerStep*``: every recorded step."""
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
        rows.append(
            {
                "label": lab,
                "calls": calls,
                "cpu_ms": cpu,
                "gpu_ms": gpu,
                "gpu_busy_ms": busy,
                "cpu_ms_per_call": cpu / calls if calls else float("nan"),
                "gpu_ms_per_call": gpu / calls if calls else float("nan"),
            }
        )
    out = pd.DataFrame(rows).set_index("label")
    out.attrs["gpu_source"] = (
        "launches" if launches else ("annotations" if any(dev.values()) else None)
    )
    return out


def step_times(prof):
    """Per recorded ``ProfilerStep#N``: CPU, GPU and GPU busy ms (as ``phase_times``; NaN on a CPU)."""
    import pandas as pd

    def full_name(e) -> str:  # ``ProfilerStep#N``: newer releases shorten ``name``
        return str(getattr(e, "trace_name", None) or e.name)

    host = step_events(prof)
    dev: dict[str, list] = {}
    for e in prof.events():
        if str(e.name).startswith("ProfilerStep") and is_device_annotation(e):
            dev.setdefault(full_name(e), []).append(_range(e))
    launches = device_launches(prof)
    rows = []
    for e in sorted(host, key=lambda e: e.time_range.start):
        gpu, busy = _gpu_of_ranges([_range(e)], launches, dev.get(full_name(e), []))
        rows.append(
            {
                "step": full_name(e),
                "cpu_ms": e.time_range.elapsed_us() / 1000.0,
                "gpu_ms": gpu,
                "gpu_busy_ms": busy,
            }
        )
    return pd.DataFrame(rows, columns=["step", "cpu_ms", "gpu_ms", "gpu_busy_ms"])


def diagnose_step(
    step_fn: Callable[[], Any],
    *,
    wait: int = 1,
    warmup: int = 1,
    active: int = 3,
    device=None,
    name: str = "diagnose_step",
    trace_root: Path | str | None = None,
) -> Diagnosis:
    """Profile ``step_fn`` with ``schedule(wait, warmup, active)`` into ``fresh_trace_dir(name)`` and diagnose it. On a
    GPU the loop synchronises after each step, so that a step's range covers its GPU work, and the diagnosis leaves
    those syncs out (``loop_syncs``)."""
    import torch

    trace_dir = fresh_trace_dir(name, root=trace_root)
    cuda = is_cuda(device)
    if cuda:
        retries0 = torch.cuda.memory_stats(device).get("num_alloc_retries", 0)
    profile_steps(
        step_fn,
        wait=wait,
        warmup=warmup,
        active=active,
        device=device,
        trace_dir=trace_dir,
        sync=cuda,
    )
    files = trace_files(trace_dir)
    if not files:
        raise DiagnosisError(
            f"{trace_dir}: the profiler wrote no trace; is step_fn running (active={active})?"
        )
    kw: dict[str, Any] = {"loop_syncs": cuda}
    if cuda:
        torch.cuda.synchronize(device)
        kw |= {
            "capacity_bytes": torch.cuda.get_device_properties(device).total_memory,
            "alloc_retries": torch.cuda.memory_stats(device).get("num_alloc_retries", 0) - retries0,
        }
    result = diagnose(files[-1], **kw)
    result.trace_dir = trace_dir
    return result
