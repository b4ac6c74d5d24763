"""What a trace's events are: one category table, the host/device test, steps, phases, launches.

The one place that says what a Kineto event category (``cat``) means, for the old schema (torch <= 1.9:
``Operator``, ``Runtime``, ``Kernel`` ...) and the new one (``cpu_op``, ``cuda_runtime``, ``kernel`` ...), on CUDA,
ROCm, MTIA and XPU alike: every reader of traces in this package classifies events through it.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from . import intervals as iv

# kind of each category (normalised: lower case, spaces and hyphens as "_"; see ``category``): "kernel", "memcpy",
# "memset" (device work), "launch" (a host runtime/driver call that queues device work), "device_annotation" (a
# record_function label copied onto the device timeline), "device_sync" (the accelerator's own record of a
# synchronisation); on the host "op" (an ATen operator), "annotation" (a record_function label), "python" (a Python
# frame of a with_stack trace). Anything else is "host". Kineto's names (its ActivityType table) for CUDA, ROCm (which
# writes the CUDA names), MTIA, XPU and PrivateUse1 devices, and the capitalised names of torch <= 1.9 traces.
CATEGORY_KIND = {
    # host
    "cpu_op": "op",
    "operator": "op",
    "hpu_op": "op",
    "user_annotation": "annotation",
    "python_function": "python",
    "python": "python",
    # device work
    "kernel": "kernel",
    "concurrent_kernel": "kernel",
    "mtia_ccp_events": "kernel",
    "collective_comm": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "mtia_memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    # host calls that queue device work
    "cuda_runtime": "launch",
    "cuda_driver": "launch",
    "runtime": "launch",
    "driver": "launch",
    "hip_runtime": "launch",
    "hip_driver": "launch",
    "mtia_runtime": "launch",
    "xpu_runtime": "launch",
    "xpu_driver": "launch",
    "privateuse1_runtime": "launch",
    "privateuse1_driver": "launch",
    # device-side records
    "gpu_user_annotation": "device_annotation",
    "cuda_sync": "device_sync",
    "xpu_sync": "device_sync",
}
DEVICE_WORK = ("kernel", "memcpy", "memset")  # kinds that occupy the device
DEVICE_SIDE = DEVICE_WORK + ("device_annotation", "device_sync")
HOST_RANGES = ("op", "annotation", "python")  # what a host thread's lane of a timeline shows
STEP_PREFIX = "ProfilerStep#"
DATALOADER_PREFIX = "enumerate(DataLoader)#"
# Top-level key of a trace written by ``measure.profiling.profile_steps`` when its loop synchronised a CUDA device
# after each step: readers of the trace alone (``perf-doctor``) then know those syncs are the loop's.
LOOP_SYNC_METADATA = "perf_lab_loop_sync"
# Collectives. On the device: NCCL's kernels (``ncclKernel_AllReduce_...``, ``ncclDevKernel_Generic``), RCCL's (ROCm
# keeps NCCL's names), HCCL's, and XPU's ``collective_comm`` records (as Holistic Trace Analysis groups them). On the
# host: ProcessGroup's labels (``gloo:all_reduce``, ``nccl:all_reduce``, ``mpi:...``, ``ucc:...``) and its
# ``c10d::`` operators; on a CPU-only job (gloo) those are the communication.
COMM_KERNEL = re.compile(r"^(nccl|rccl|hccl)|nccl(dev)?kernel", re.IGNORECASE)
COMM_HOST = re.compile(r"^((gloo|nccl|mpi|ucc|xccl|hccl):|c10d::)", re.IGNORECASE)

_API_SUFFIX = re.compile(r"(_pt(sz|ds))?(_v\d+)?$")
_KIND_CACHE: dict = {}


def category(cat: Any) -> str:
    """A category's normalised spelling: lower case, spaces and hyphens as ``_`` (``GPU Memcpy`` is ``gpu_memcpy``)."""
    return re.sub(r"[\s\-]+", "_", str(cat).strip().lower())


def is_mapping(x: Any) -> bool:
    """A trace event or its ``args`` (a mapping): a dict is checked first, as the ``Mapping`` ABC's check is ~20x
    slower and ran on every event of every pass (a fifth of a diagnosis on a 700k-event trace)."""
    return type(x) is dict or isinstance(x, Mapping)


def kind(e: Mapping[str, Any]) -> str:
    """The kind of a trace event (see ``CATEGORY_KIND``); ``"host"`` for everything else."""
    cat = e.get("cat", "")
    try:
        return _KIND_CACHE[cat]
    except KeyError:
        return _KIND_CACHE.setdefault(cat, CATEGORY_KIND.get(category(cat), "host"))
    except TypeError:  # an unhashable category (a list ...): not PyTorch's
        return "host"


def is_host(e) -> bool:
    """A host-side event: by its category (not ``DEVICE_SIDE``), or a ``FunctionEvent`` by its device type."""
    if is_mapping(e):
        return kind(e) not in DEVICE_SIDE
    return str(getattr(e, "device_type", "CPU")).endswith("CPU")


def is_device_work(e: Mapping[str, Any]) -> bool:
    """A kernel, copy or memset on the device."""
    return kind(e) in DEVICE_WORK


def is_launch(e: Mapping[str, Any]) -> bool:
    """A host runtime or driver call (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ``hipLaunchKernel`` ...)."""
    return kind(e) == "launch"


def is_collective(e: Mapping[str, Any]) -> bool:
    """A collective: a communication kernel (``COMM_KERNEL``, XPU's ``collective_comm``) or a host ``COMM_HOST``."""
    k = kind(e)
    name = str(e.get("name", ""))
    if k == "kernel":
        return category(e.get("cat", "")) == "collective_comm" or bool(COMM_KERNEL.search(name))
    return k in ("op", "annotation") and bool(COMM_HOST.match(name))


def events(trace) -> list:
    """The trace's event list (a list of events is itself; [] for anything that is not a trace)."""
    if isinstance(trace, list):
        return trace
    return trace.get("traceEvents", []) if isinstance(trace, Mapping) else []


def loop_synced(trace) -> bool:
    """The trace says its profiling loop synchronised the device after each step (``LOOP_SYNC_METADATA``)."""
    return isinstance(trace, Mapping) and str(trace.get(LOOP_SYNC_METADATA, "0")).strip(
        '"'
    ) not in ("0", "", "False", "false")


MAX_DURATION_US = 86_400e6  # a day: no profiled event lasts longer
MAX_TIME_US = 1e18  # beyond any clock Kineto writes (epoch µs are ~1.7e15)


def valid_time(e: Mapping[str, Any]) -> bool:
    """A complete event with a finite start and a finite duration >= 0, and no ``untimed`` device work (others are
    left out; ``quality`` says so)."""
    ts, dur = e.get("ts"), e.get("dur")
    return (
        type(ts) in (int, float)
        and type(dur) in (int, float)
        and 0 <= dur <= MAX_DURATION_US
        and -MAX_TIME_US <= ts <= MAX_TIME_US
        and not (ts == 0 == dur and is_device_work(e))
    )


def untimed(e: Mapping[str, Any]) -> bool:
    """A kernel, copy or memset whose start and duration are both 0: the profiler never got the device's record of
    it (the H100 reference's 01 Chrome trace: all 760 of its kernels)."""
    return e.get("ts") == 0 == e.get("dur") and is_device_work(e)


_memo: dict | None = (
    None  # (reader, id(events list)) -> (the list, its length, the answer); only inside memoized()
)


@contextlib.contextmanager
def memoized():
    """Inside the block, ``complete`` and ``step_events`` of one events list are computed once (the doctor asked for
    them 11 and 18 times on a 6-step A100 trace, each a pass over all its events); each caller gets its own list."""
    global _memo
    outer = _memo
    if outer is None:
        _memo = {}
    try:
        yield
    finally:
        if outer is None:
            _memo = None


def forget() -> None:
    """Inside ``memoized()``, drop what it holds (a job's rank is freed before the next is read)."""
    if _memo is not None:
        _memo.clear()


def ops_by_thread(evs: Iterable) -> dict:
    """Each thread's operators, for ``around``: ``{(pid, str(tid)): (spans (start, end, name), starts, longest)}``."""
    ops: dict = {}
    for e in evs:
        if kind(e) == "op":
            ops.setdefault((e.get("pid"), str(e.get("tid"))), []).append(
                (*span(e), str(e.get("name", "")))
            )
    for k, seq in ops.items():
        seq.sort()
        ops[k] = (seq, [o[0] for o in seq], max(o[1] - o[0] for o in seq))
    return ops


def around(ops: dict, e: Mapping[str, Any], a: float, b: float) -> list:
    """The operators of ``ops_by_thread`` on ``e``'s thread that enclose ``[a, b]``, outermost first."""
    seq, starts, longest = ops.get((e.get("pid"), str(e.get("tid"))), ([], [], 0.0))
    lo, hi = bisect.bisect_left(starts, a - longest), bisect.bisect_right(starts, a)
    return sorted((o for o in seq[lo:hi] if o[1] >= b), key=lambda o: (o[0], -o[1]))


def memoizing(fn):
    """``fn`` run inside ``memoized()`` (the doctor's entry points: a report, a job, a diagnosis, the views)."""

    @functools.wraps(fn)
    def run(*a, **kw):
        with memoized():
            return fn(*a, **kw)

    return run


def _once(reader: str, evs: list, compute) -> list:
    if _memo is None:
        return compute()
    key = (reader, id(evs))
    hit = _memo.get(key)
    if (
        hit is None or hit[0] is not evs or hit[1] != len(evs)
    ):  # the list is held, so its id is not reused
        hit = _memo[key] = (evs, len(evs), compute())
    return list(hit[2])


def complete(trace) -> list:
    """Its complete events (``ph == "X"``) with a valid time (``valid_time``): the ones that take time."""
    evs = events(trace)
    return _once(
        "complete",
        evs,
        lambda: [e for e in evs if is_mapping(e) and e.get("ph") == "X" and valid_time(e)],
    )


def span(e: Mapping[str, Any]) -> tuple[float, float]:
    """``(start_us, end_us)`` of a complete event."""
    t = float(e["ts"])
    return t, t + float(e.get("dur", 0.0) or 0.0)


def args(e: Mapping[str, Any]) -> Mapping[str, Any]:
    """An event's ``args`` ({} when absent or not a mapping: another tool's trace, a damaged file)."""
    a = e.get("args")
    return a if is_mapping(a) else {}


def corr(e: Mapping[str, Any]):
    """The correlation id that links a launch call to its device work (None when absent)."""
    c = args(e).get("correlation")
    return c if isinstance(c, (int, str)) else None


def api_name(name: str) -> str:
    """A CUDA runtime call's base name, without CUPTI's version or per-thread-stream suffix (``_v3020``, ``_ptsz``)."""
    return _API_SUFFIX.sub("", name)


def has_gpu(trace) -> bool:
    """True when the trace holds device activity (kernels, copies, memsets), whatever the accelerator."""
    return any(is_mapping(e) and is_device_work(e) for e in events(trace))


def step_events(trace) -> list:
    """The host ``ProfilerStep#N`` events of a trace or event list, in time order (not their GPU-timeline copies)."""
    evs = events(trace)

    def compute():
        named = [e for e in evs if is_mapping(e) and str(e.get("name", "")).startswith(STEP_PREFIX)]
        return sorted(
            (e for e in complete(named) if is_host(e)), key=lambda e: float(e["ts"])
        )  # the name first

    return _once("step_events", evs, compute)


def step_ranges(trace) -> list[tuple[str, float, float]]:
    """``(name, start_us, end_us)`` of each ``ProfilerStep#N`` (host ranges, in time order)."""
    return [(str(e["name"]), *span(e)) for e in step_events(trace)]


def step_windows(trace, evs: list | None = None) -> list[tuple[str, float, float]]:
    """``(name, start_us, end_us)`` of each step as TensorBoard's Overview counts it: its host range extended to the end
    of the device work it launched, from the previous step's end; trailing steps that launched nothing left out."""
    evs = complete(trace) if evs is None else evs
    ranges = step_ranges(evs)
    calls = launches(evs)
    dev: dict = {}  # correlation id -> spans of the device work it launched
    loose = []  # device work whose launch is not in the trace
    for e in evs:
        if is_device_work(e):
            c = corr(e)
            if c is not None and c in calls:
                dev.setdefault(c, []).append(span(e))
            else:
                loose.append(span(e))
    if not ranges or not dev:
        return ranges
    per_step: list[list] = [[] for _ in ranges]  # device spans launched from inside each host step
    starts = [a for _, a, _ in ranges]
    matched = set()
    for c, spans in dev.items():
        a, b = span(calls[c])
        i = bisect.bisect_right(starts, a) - 1
        if i >= 0 and b <= ranges[i][2]:
            per_step[i] += spans
            matched.add(c)
    if not matched:
        return ranges
    prev = ranges[0][1]
    if per_step[0]:  # device work queued before the first step that ends before its own work starts
        first = min(s for s, _ in per_step[0])
        unmatched = loose + [x for c, sp in dev.items() if c not in matched for x in sp]
        prev = max([prev] + [e for _, e in unmatched if e < first])
    out = []
    for (name, a, b), spans in zip(ranges, per_step):
        start = max(prev, a)
        end = max(b, start) if not spans else max(b, max(e for _, e in spans), start)
        out.append((name, start, end))
        prev = end
    while (
        len(out) > 1 and not per_step[len(out) - 1]
    ):  # trailing steps that launched no device work
        out.pop()
    return out


def phase_ranges(trace, phase: str = "backward") -> list[tuple[float, float]]:
    """(start, end) µs of every host event named ``phase`` or ``phase#N`` (not the label's GPU-timeline copy)."""
    pre = phase + "#"
    return sorted(
        span(e)
        for e in complete(trace)
        if (e.get("name") == phase or str(e.get("name", "")).startswith(pre)) and is_host(e)
    )


def dataloader_ranges(trace) -> list[tuple[float, float]]:
    """Host ranges of the DataLoader's ``enumerate(DataLoader)#...__next__`` (the wait for the next batch)."""
    return sorted(
        span(e)
        for e in complete(trace)
        if is_host(e)
        and (n := str(e.get("name", ""))).startswith(DATALOADER_PREFIX)
        and n.endswith("__next__")
    )


def launches(trace_or_events) -> dict:
    """``{correlation id: launch call}``: a device event's launch is ``launches(trace).get(corr(event))``."""
    evs = trace_or_events if isinstance(trace_or_events, list) else complete(trace_or_events)
    out = {}
    for e in evs:
        if e.get("ph") == "X" and is_launch(e) and (c := corr(e)) is not None:
            out.setdefault(c, e)
    return out


def device_work(trace_or_events) -> list:
    """The device's kernels, copies and memsets (complete events), in time order."""
    evs = trace_or_events if isinstance(trace_or_events, list) else complete(trace_or_events)
    return sorted(
        (e for e in evs if e.get("ph") == "X" and "ts" in e and is_device_work(e)),
        key=lambda e: float(e["ts"]),
    )


def names(trace) -> dict:
    """Thread and process names from the metadata events: ``{(kind, pid, tid or None): name}``."""
    return {
        (e["name"], e.get("pid"), e.get("tid") if e["name"] == "thread_name" else None): str(
            args(e).get("name", "")
        )
        for e in events(trace)
        if is_mapping(e) and e.get("ph") == "M" and e.get("name") in ("thread_name", "process_name")
    }


def dataloader_wait_share(trace) -> dict[str, float]:
    """Time in DataLoader ``__next__`` within the ProfilerSteps: ``{"next_ms", "step_ms", "share"}``."""
    steps = [(a, b) for _, a, b in step_ranges(trace)]
    step_us = sum(b - a for a, b in steps)
    next_us = iv.length(iv.intersect(iv.merge(steps), iv.merge(dataloader_ranges(trace))))
    return {
        "next_ms": next_us / 1000.0,
        "step_ms": step_us / 1000.0,
        "share": next_us / step_us if step_us else float("nan"),
    }


# A graph replay (CUDA or HIP graphs, ``torch.compile(mode="reduce-overhead")``, vLLM, SGLang): its launch call
# (``cudaGraphLaunch``, ``hipGraphLaunch``), or, where the launch was not recorded, many device events under one
# correlation id (an eager launch queues one kernel, a copy or a memset: TraceLens' vLLM decode has 421 kernels
# under one id).
GRAPH_LAUNCH = re.compile(r"GraphLaunch", re.IGNORECASE)
GRAPH_MIN_EVENTS = 8


def graph_replays(evs: list) -> dict:
    """``{correlation id: its launch call or None}`` of the graph replays in ``evs`` (``GRAPH_LAUNCH``, or at least
    ``GRAPH_MIN_EVENTS`` device events under one correlation id)."""

    def compute():
        calls = launches(evs)
        count: dict = {}
        for e in evs:
            if is_device_work(e) and (c := corr(e)) is not None:
                count[c] = count.get(c, 0) + 1
        out = {c: calls.get(c) for c, n in count.items() if n >= GRAPH_MIN_EVENTS}
        for c, call in calls.items():
            if c in count and GRAPH_LAUNCH.search(str(call.get("name", ""))):
                out[c] = call
        return [out]

    return _once("graph_replays", evs, compute)[0]


def own_work(evs: list) -> tuple[list, list, list]:
    """``(own, backlog, outside)``: the device work the profiled steps launched (a launch call inside a
    ``ProfilerStep``'s host range; without ProfilerStep, every launch in the trace), the work whose launch is not in
    the trace (queued before the trace began: the previous step's backlog), and the rest (launched in the trace but
    outside the steps). Device work with no correlation id, or a trace that records no launch, counts as own."""

    def compute():
        calls = launches(evs)
        work = device_work(evs)
        if not calls:
            return [(work, [], [])]
        ranges = step_ranges(evs)
        starts = [a for _, a, _ in ranges]
        inside: dict = {}
        own, backlog, outside = [], [], []
        for e in work:
            c = corr(e)
            if c is None:
                own.append(e)
            elif c not in calls:
                backlog.append(e)
            else:
                if c not in inside:
                    a, b = span(calls[c])
                    i = bisect.bisect_right(starts, a) - 1
                    inside[c] = not ranges or (i >= 0 and b <= ranges[i][2])
                (own if inside[c] else outside).append(e)
        return [(own, backlog, outside)]

    return _once("own_work", evs, compute)[0]
