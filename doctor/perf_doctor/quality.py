"""Is this trace fit to be diagnosed? The checks the doctor runs before any diagnosis.

``assess(doc)`` returns one ``{"check", "message"}`` per problem found (the JSON's ``quality``), and raises
``TraceError`` for a trace that cannot be diagnosed at all (no PyTorch profiler event, or none with a valid time):

- ``no_profiler_step``  no ``ProfilerStep#N``: the whole trace is one step;
- ``few_steps``         fewer than ``MIN_STEPS`` steps: no average to speak of, no interval for ``compare``;
- ``warmup_in_window``  the first step is far slower than the others (``WARMUP_RATIO``): warm-up was profiled;
- ``ops_without_kernels``  launches with no device work recorded (``ProfilerActivity.CUDA`` missing, or buffers
                        overflowed); or an accelerator and no device activity unless the job ran on a CPU (``cpu_job``);
- ``mixed_ranks``       ``ProfilerStep``s of several processes in one file (ranks merged into one trace);
- ``not_pytorch``       events of categories PyTorch's profiler does not write (another tool's, merged in);
- ``damaged_steps``     ``ProfilerStep``s with an impossible time: left out; when all are, no cause is diagnosed;
- ``impossible_values`` events with NaN, Infinity, a negative or a missing time, left out of the diagnosis;
- ``untimed_device_work`` kernels, copies or memsets at time 0 for 0 µs (no device record came), left out too;
- ``unreadable``        (added by ``report``) subfolders or files of a trace folder that could not be read.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Any, Mapping

from . import events as ev
from . import intervals as iv
from .files import TraceError

MIN_STEPS = 3
# the first step is warm-up when it takes this many times the median of the others (the first call allocates
# memory, autotunes cuDNN, compiles; a steady step varies by a few percent)
WARMUP_RATIO = 1.5
# launches without device work: a few are normal (the last launches of the window run after it closes)
MISSING_KERNEL_SHARE = 0.10
# the categories Kineto writes (its ActivityType names) and torch-tb-profiler's "Trace" span
PYTORCH_CATEGORIES = set(ev.CATEGORY_KIND) | {
    "trace",
    "overhead",
    "cpu_instant_event",
    "external_correlation",
    "cuda_profiler_range",
    "glow_runtime",
    "mtia_insight",
    "cuda_event",
    "mtia_counters",
    "xpu_scope_profiler",
    "memory",
    "ac2g",
    "fwdbwd",
    "async",
    "flow",
}
LAUNCH_WORDS = ("launch", "memcpy", "memset")
# A job says where it ran with this top-level key (``prof.add_metadata_json(JOB_DEVICE_METADATA, '"cpu"')``); a
# gloo process group's ``distributedInfo`` says so too: such a trace lacks device activity on purpose.
JOB_DEVICE_METADATA = "perf_lab_device"


def cpu_job(doc: Mapping[str, Any]) -> bool:
    """The job ran on the CPU: its ``JOB_DEVICE_METADATA`` says ``cpu``, or else its process group is gloo."""
    said = doc.get(JOB_DEVICE_METADATA)
    if said is not None:
        return str(said).strip('"').lower() == "cpu"
    info = doc.get("distributedInfo")
    return isinstance(info, Mapping) and str(info.get("backend", "")).lower() == "gloo"


def _entry(check: str, message: str) -> dict[str, str]:
    return {"check": check, "message": message}


def assess(doc: Mapping[str, Any], label: str = "the trace") -> list[dict[str, str]]:
    """The quality entries of a loaded trace (the module docstring); ``TraceError`` when nothing can be diagnosed."""
    out: list[dict[str, str]] = []
    timed = [e for e in ev.events(doc) if ev.is_mapping(e) and e.get("ph") == "X"]
    cats = Counter(str(e.get("cat", "")) for e in timed)
    foreign = {c: n for c, n in cats.items() if ev.category(c) not in PYTORCH_CATEGORIES}
    if timed and sum(foreign.values()) == len(timed):
        shown = ", ".join(f"{c or '(none)'}" for c, _ in Counter(foreign).most_common(3))
        raise TraceError(
            f"{label}: not a PyTorch profiler trace (its events are of categories {shown}: another "
            f"tool's Chrome trace); give the file that torch.profiler wrote"
        )
    valid = [e for e in timed if ev.valid_time(e)]
    if not valid:
        raise TraceError(
            f"{label}: no event has a valid time (NaN, Infinity, negative, missing or absurd times); "
            f"the file is damaged: export the trace again"
        )
    untimed = sum(1 for e in timed if ev.untimed(e))
    if untimed:
        out.append(
            _entry(
                "untimed_device_work",
                f"{untimed} kernel(s), copies or memsets have no time (start and "
                f"duration 0: the profiler never got their device records); they "
                f"are left out, so the device view below is partial or empty: "
                f"profile again, with torch.cuda.synchronize() before the active "
                f"steps (notebook 01_profiler_basics)",
            )
        )
    if bad := len(timed) - len(valid) - untimed:
        out.append(
            _entry(
                "impossible_values",
                f"{bad} event(s) with an impossible time (NaN, Infinity, a negative, "
                f"missing or absurd duration) were left out of the diagnosis",
            )
        )
    if foreign:
        shown = ", ".join(f"{c or '(none)'} ({n})" for c, n in Counter(foreign).most_common(3))
        out.append(
            _entry(
                "not_pytorch",
                f"{sum(foreign.values())} event(s) are not PyTorch profiler events "
                f"(categories {shown}); they are not judged",
            )
        )
    steps = ev.step_events(valid)
    damaged = [
        e
        for e in timed
        if str(e.get("name", "")).startswith(ev.STEP_PREFIX)
        and ev.is_host(e)
        and not ev.valid_time(e)
    ]
    if damaged:
        out.append(
            _entry(
                "damaged_steps",
                f"{len(damaged)} of {len(damaged) + len(steps)} ProfilerStep(s) have an "
                f"impossible time (negative, missing, NaN): "
                + (
                    "they are left out and the others diagnosed"
                    if steps
                    else "no step can be measured, so no cause is diagnosed; export the trace again"
                ),
            )
        )
    if not steps and not damaged:
        out.append(
            _entry(
                "no_profiler_step",
                "no ProfilerStep in the trace: the whole trace is analysed as one step; "
                "profile with a schedule and call prof.step() after each step",
            )
        )
    else:
        pids = Counter(e.get("pid") for e in steps)
        names = Counter(str(e.get("name")) for e in steps)
        if len(pids) > 1:
            out.append(
                _entry(
                    "mixed_ranks",
                    f"ProfilerSteps of {len(pids)} processes in one file "
                    f"({max(names.values())} with the same step number): ranks or runs are "
                    f"mixed in one trace; give one trace per rank (a folder of them)",
                )
            )
        if len(steps) < MIN_STEPS:
            out.append(
                _entry(
                    "few_steps",
                    f"only {len(steps)} profiled step(s): an average of fewer than "
                    f"{MIN_STEPS} steps is no steady state, and compare has no interval; "
                    f"profile more (schedule(active={MIN_STEPS}) or more)",
                )
            )
    capture = _captures(
        valid
    )  # launches inside a graph capture queue nothing: they run when it replays
    launched = {
        ev.corr(e)
        for e in valid
        if ev.is_launch(e)
        and ev.corr(e) is not None
        and any(w in str(e.get("name", "")).lower() for w in LAUNCH_WORDS)
        and not iv.contains(capture.get(e.get("tid"), []), float(e["ts"]))
    }
    if captured := sum(
        1
        for e in valid
        if ev.is_launch(e) and iv.contains(capture.get(e.get("tid"), []), float(e["ts"]))
    ):
        out.append(
            _entry(
                "graph_capture",
                f"{captured} runtime call(s) inside a graph capture (cudaStreamBeginCapture...EndCapture): "
                f"captured work runs when the graph is replayed, so no device work is expected for them",
            )
        )
    if launched:
        seen = {ev.corr(e) for e in valid if ev.is_device_work(e)}
        missing = sum(1 for c in launched if c not in seen)
        if missing / len(launched) > MISSING_KERNEL_SHARE:
            what = (
                "no timed device work at all (their records never came: untimed_device_work above); the "
                "diagnosis reads the host only"
                if untimed and not seen
                else "no device work at all was recorded (profile with ProfilerActivity.CUDA, or the accelerator's "
                "activity); the diagnosis reads the host only"
                if not seen
                else "the device view is partial (the profiler's buffers may have overflowed: profile fewer steps)"
            )
            out.append(
                _entry(
                    "ops_without_kernels",
                    f"{missing} of {len(launched)} launches "
                    f"({missing / len(launched):.0%}) have no kernel, copy or memset "
                    f"recorded: {what}",
                )
            )
    devices = [p for p in doc.get("deviceProperties") or [] if isinstance(p, Mapping)]
    if (
        devices
        and not launched
        and not cpu_job(doc)
        and not any(ev.is_device_work(e) for e in valid)
    ):
        out.append(
            _entry(
                "ops_without_kernels",
                f"the machine had {len(devices)} accelerator(s) "
                f"({devices[0].get('name', '?')}) but the trace holds no device "
                f"activity: if the job ran on it, profile with ProfilerActivity.CUDA "
                f"(the diagnosis below reads the host only)",
            )
        )
    return out


def _captures(evs: list) -> dict:
    """Each thread's graph captures: ``{tid: merged (begin, end) ranges}`` from its ``...StreamBeginCapture`` and
    ``...StreamEndCapture`` calls (CUDA and HIP), in time order."""
    calls: dict = {}
    for e in evs:
        name = str(e.get("name", ""))
        if ev.is_launch(e) and ("BeginCapture" in name or "EndCapture" in name):
            calls.setdefault(e.get("tid"), []).append((float(e["ts"]), "Begin" in name))
    out = {}
    for tid, seq in calls.items():
        ranges, start = [], None
        for t, begin in sorted(seq):
            if begin:
                start = t if start is None else start
            elif start is not None:
                ranges.append((start, t))
                start = None
        out[tid] = iv.merge(ranges)
    return out


def warmup(step_times: list[float]) -> list[dict[str, str]]:
    """``warmup_in_window``: the first of ``MIN_STEPS``+ steps takes ``WARMUP_RATIO`` x the others' median or more."""
    if len(step_times) < MIN_STEPS:
        return []
    rest = statistics.median(step_times[1:])
    first = step_times[0]
    if rest > 0 and first >= WARMUP_RATIO * rest:
        return [
            _entry(
                "warmup_in_window",
                f"the first step takes {first:.2f} ms, {first / rest:.1f}x the median of "
                f"the others ({rest:.2f} ms): warm-up is in the window; profile with "
                f"schedule(wait=1, warmup=1, active=...)",
            )
        ]
    return []


def finite(x: Any) -> Any:
    """``x`` with every NaN or infinite float inside it (dicts, lists) replaced by None: strict JSON."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, Mapping):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x
