"""What kind of bottleneck does a training step have? A verdict from a profiler trace.

Taught in ``05_diagnose``; used by ``python -m helpers.doctor``. The trace itself is read by
``helpers.trace``; this module only *attributes* the time of the average profiled step to causes.

How a step's time is split (each microsecond of a ``ProfilerStep`` range goes to exactly one cause, so the
causes add up to the step and nothing is counted twice):

GPU trace (there are kernels), in this order of precedence:
  1. **compute** — the GPU is busy (kernels, copies, memsets on any stream);
  2. **input** — the GPU is idle while the host waits in the DataLoader's ``__next__``;
  3. **host sync** — the GPU is idle after a synchronisation (``.item()``, ``.cpu()``, ``print(tensor)``,
     ``torch.cuda.synchronize()``; the list, each sync once, is ``trace.sync_costs``): from the call until the
     next GPU work starts (or the trace ends), but no more than the host was blocked in the call. Removing a
     sync lets the host work after it start that much sooner, overlapped with the GPU's queued work, and no
     sooner: GPU idle beyond that (the host busy in Python with nothing queued) stays with launch/overhead.
     ``trace.sync_costs``' own ``gpu_idle_us`` (the strict figure in the evidence) also stops at the end of the
     host call plus one launch latency;
  4. **memory** — the GPU is idle while the host is in ``cudaMalloc`` / ``cudaFree`` (the caching allocator
     going back to the driver, typically after a retry near capacity);
  5. **launch/overhead** — the rest of the GPU's idle time: the host is busy launching (short kernels,
     Python, framework overhead) and the GPU waits for it.
CPU-only trace (no kernels): there is no device to wait for, so host sync, GPU idle and device memory cannot be
judged (the verdict says so). The host's own time is split instead:
  1. **input** — in the DataLoader's ``__next__``;
  2. **compute** — in *large* top-level operators (median call ``TINY_OP_US`` or longer): the arithmetic;
  3. **launch/overhead** — the rest: tiny operators (shorter than ``TINY_OP_US``, where the ~10 µs of
     dispatch per op dominates) and the Python between operators.

A cause's ``ms`` is its time per average step: the most that fixing it could save (for compute, the time a
cheaper model, lower precision or fusion could shrink). A cause below ``MIN_FINDING_SHARE`` of the step is
listed but is not a finding.
"""
from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from . import trace as tr

# --- thresholds (shown in notebook 05) -------------------------------------------------------------------------
# A cause worth a finding takes at least 5% of the step: torch-tb-profiler's own threshold for "DataLoader time
# is significant" (its performance recommendation), and nsys-ai's rule that tiny costs get no finding.
MIN_FINDING_SHARE = 0.05
# A CPU operator shorter than this is "tiny": eager PyTorch spends roughly 5-10 us per op in Python, the
# dispatcher and the profiler's own bookkeeping (Horace He, "Making Deep Learning Go Brrrr": overhead), so an op
# under ~50 us spends a large part of its time on overhead rather than arithmetic.
TINY_OP_US = 50.0
# A CUDA kernel shorter than this is short: comparable to the ~5-10 us it takes to launch one, so a stream of
# them leaves the GPU waiting for the host (the launch-bound regime).
SHORT_KERNEL_US = 10.0
# Memory is "near capacity" when the peak reserved by the caching allocator is above this share of the device.
NEAR_CAPACITY = 0.90

CAUSES = ("input", "host sync", "launch/overhead", "compute", "memory")
SEE = {
    "input": "02_data_pipeline: How many workers? A sweep from 0 to the core count (then Fix 1-3, DataLoader options)",
    "host sync": "03_backward_hooks: Measure again: determinism × method (syncs counted from the trace); "
                 "CUDA only: torch.cuda.set_sync_debug_mode",
    "launch/overhead": "04_torch_compile: compile mode 'reduce-overhead' (CUDA graphs) and fusion; "
                       "larger batches per step",
    "compute": "04_torch_compile: the model × precision × mode matrix (bf16 autocast, compile)",
    "memory": "04_torch_compile: peak GPU memory per cell; 01_profiler_basics: Memory and input shapes",
}

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
MALLOC_APIS = ("cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync")


class DiagnosisError(ValueError):
    """A trace that cannot be diagnosed (the message names the file and what to do)."""


# --- interval arithmetic on sorted, merged [start, end) lists (microseconds) --------------------------------
def merge(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def clip(ivs: list[tuple[float, float]], a: float, b: float) -> list[tuple[float, float]]:
    """The parts of merged ``ivs`` inside [a, b) (bisect: cheap on long lists)."""
    i = max(bisect.bisect_right(ivs, (a, math.inf)) - 1, 0)
    out = []
    for s, e in ivs[i:]:
        if s >= b:
            break
        if e > a:
            out.append((max(s, a), min(e, b)))
    return out


def intersect(x: list[tuple[float, float]], y: list[tuple[float, float]]) -> list[tuple[float, float]]:
    i = j = 0
    out = []
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(x: list[tuple[float, float]], y: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out = []
    j = 0
    for a, b in x:
        cur = a
        while j < len(y) and y[j][1] <= cur:
            j += 1
        k = j
        while k < len(y) and y[k][0] < b:
            if y[k][0] > cur:
                out.append((cur, y[k][0]))
            cur = max(cur, y[k][1])
            k += 1
        if cur < b:
            out.append((cur, b))
    return out


def length(ivs: Iterable[tuple[float, float]]) -> float:
    return sum(b - a for a, b in ivs)


# --- the diagnosis ------------------------------------------------------------------------------------------
@dataclass
class Diagnosis:
    """The causes of the average profiled step (see the module docstring for how time is split)."""

    steps: int
    step_ms: float
    on_gpu: bool
    causes: list[dict[str, Any]]                       # {cause, ms, share, finding, evidence, see}, largest first
    cannot_judge: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    source: str | None = None
    trace_dir: Path | None = None                      # set by diagnose_step: the folder its trace went to

    @property
    def top(self) -> str | None:
        """The cause with the most milliseconds (None when nothing was judged)."""
        judged = [c for c in self.causes if c["ms"] is not None]
        return judged[0]["cause"] if judged else None

    @property
    def findings(self) -> list[dict[str, Any]]:
        return [c for c in self.causes if c["finding"]]

    def ms(self, cause: str) -> float | None:
        return next((c["ms"] for c in self.causes if c["cause"] == cause), None)

    def to_list(self) -> list[dict[str, Any]]:
        """The ``diagnosis`` list of the doctor's JSON: ``{cause, ms, evidence, see}`` (+ share, finding)."""
        return [{k: c[k] for k in ("cause", "ms", "share", "finding", "evidence", "see")} for c in self.causes]

    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.to_list()).rename(columns={"ms": "ms_per_step"})

    def summary(self) -> str:
        """A few lines: the verdict, then one line per cause."""
        head = (f"{self.steps} step(s), {self.step_ms:.2f} ms per step ({'GPU' if self.on_gpu else 'CPU-only'} "
                f"trace). Top cause: {self.top or 'none'}.")
        lines = [head]
        for c in self.causes:
            if c["ms"] is None:
                lines.append(f"  - {c['cause']}: cannot judge. {c['evidence']}")
            else:
                mark = "*" if c["finding"] else " "
                lines.append(f" {mark}- {c['cause']}: {c['ms']:.2f} ms ({c['share']:.0%}). {c['evidence']} "
                             f"See {c['see']}.")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:  # pragma: no cover - convenience
        return self.summary()


def _host(e: Mapping[str, Any]) -> bool:
    cat = str(e.get("cat", ""))
    return not cat.startswith("gpu_") and cat not in DEVICE_CATS and cat != "cuda_sync"


def _span(e) -> tuple[float, float]:
    t = float(e["ts"])
    return t, t + float(e.get("dur", 0.0) or 0.0)


def _step_ranges(events: list, name: str) -> tuple[list[tuple[float, float]], Any, list[str]]:
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep") and _host(e)]
    notes = []
    if steps:
        steps.sort(key=lambda e: float(e["ts"]))
        return [_span(e) for e in steps], steps[0].get("tid"), notes
    spans = [_span(e) for e in events if "ts" in e]
    if not spans:
        raise DiagnosisError(f"{name}: the trace holds no timed events; profile at least one step "
                             f"(torch.profiler with a schedule and prof.step()).")
    notes.append("no ProfilerStep in this trace: the whole trace was analysed as one step "
                 "(call prof.step() after each step to get per-step figures)")
    host = [e for e in events if e.get("ph") == "X" and _host(e) and "ts" in e]
    tid = max(host, key=lambda e: float(e.get("dur", 0) or 0)).get("tid") if host else None
    return [(min(a for a, _ in spans), max(b for _, b in spans))], tid, notes


def _top_level(ops: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Outermost ops of one thread (an op nested in another is part of its parent's time)."""
    out = []
    end = -math.inf
    for a, b, n in sorted(ops, key=lambda o: (o[0], -o[1])):
        if a >= end:
            out.append((a, b, n))
            end = b
    return out


def _cause(name, ms, step_ms, evidence, finding=None):
    share = ms / step_ms if step_ms else 0.0
    return {"cause": name, "ms": round(ms, 3), "share": round(share, 4),
            "finding": bool(share >= MIN_FINDING_SHARE if finding is None else finding),
            "evidence": evidence, "see": SEE[name]}


def _cannot(name, why):
    return {"cause": name, "ms": None, "share": None, "finding": False, "evidence": why, "see": SEE[name]}


def diagnose(trace: Mapping[str, Any] | str | Path, *, capacity_bytes: float | None = None,
             alloc_retries: int | None = None, loop_syncs: bool | None = None) -> Diagnosis:
    """Split the average profiled step of ``trace`` (a Chrome-trace dict, or a path ``helpers.trace`` loads)
    into causes. ``capacity_bytes`` / ``alloc_retries`` (from ``torch.cuda``) add memory evidence the trace
    itself may lack (``diagnose_step`` passes them on a GPU). ``loop_syncs=True``: the profiling loop itself
    synchronised the device at the end of each step (``profiling.profile_steps(sync=True)``, so that a step's
    range covers its GPU work); that last device synchronisation of each step is not the step's own and is left
    out of the host-sync cause (its idle time stays with launch/overhead). ``loop_syncs=None`` (the default) reads
    it from the trace: ``profile_steps`` marks a trace whose loop synchronised (``profiling.LOOP_SYNC_METADATA``), so
    ``python -m helpers.doctor`` on a ``diagnose_step`` trace gives the same verdict as ``diagnose_step``."""
    source = None
    if not isinstance(trace, Mapping):
        source = str(trace)
        trace = tr.load_trace(trace)
    if loop_syncs is None:
        from .profiling import LOOP_SYNC_METADATA

        loop_syncs = str(trace.get(LOOP_SYNC_METADATA, "0")).strip('"') not in ("0", "", "False", "false")
    name = source or "trace"
    events = [e for e in trace.get("traceEvents", []) if isinstance(e, Mapping) and e.get("ph") == "X" and "ts" in e]
    steps, main_tid, notes = _step_ranges(events, name)
    n = len(steps)
    step_us = sum(b - a for a, b in steps)
    step_ms = step_us / n / 1000.0
    S = merge(steps)

    dl = merge(_span(e) for e in events if _host(e) and str(e.get("name", "")).startswith("enumerate(DataLoader)")
               and str(e.get("name", "")).endswith("__next__"))
    device_evs = [e for e in events if e.get("cat") in DEVICE_CATS]
    on_gpu = bool(device_evs)
    per = lambda us: us / n / 1000.0  # noqa: E731 - µs over all steps -> ms per step

    causes: list[dict[str, Any]] = []
    cannot: list[str] = []
    if on_gpu:
        busy = merge(_span(e) for e in device_evs)
        kern_in_steps = [e for e in device_evs if e.get("cat") == "kernel" and clip(S, *_span(e))]
        in_steps_busy = intersect(S, busy)
        idle = subtract(S, busy)
        input_iv = intersect(idle, dl)
        rem = subtract(idle, dl)
        starts = [a for a, _ in busy]
        costs = tr.sync_costs(trace)  # each synchronisation once (helpers.trace)
        rows = [(float(t), float(t) + float(h), float(g), str(k))
                for t, h, g, k in zip(costs["ts_us"], costs["host_us"], costs["gpu_idle_us"], costs["kind"])
                if clip(S, t, t + h)]
        loop_added = 0
        if loop_syncs:  # drop the last device_sync of each step: the profiling loop's, not the step's
            drop = set()
            for a, b in steps:
                last = [i for i, r in enumerate(rows) if r[3] == "device_sync" and a <= r[0] <= b]
                if last:
                    drop.add(max(last, key=lambda i: rows[i][0]))
            loop_added = len(drop)
            rows = [r for i, r in enumerate(rows) if i not in drop]
        syncs = [r[:3] for r in rows]
        taken = []
        for a, b, g in syncs:
            k = bisect.bisect_left(starts, b)
            end = starts[k] if k < len(starts) else math.inf  # idle to the next GPU work (or the trace's end)
            # the host's blocked time (or the strict figure, which adds one launch latency): without the sync, the
            # host work after it starts that much sooner, so no more of the idle after it is the sync's doing
            budget = max(b - a, g)
            for s, e in clip(rem, a, end):
                if budget <= 0:
                    break
                taken.append((s, min(e, s + budget)))
                budget -= min(e, s + budget) - s
        strict_idle = sum(g for _, _, g in syncs)
        sync_iv = intersect(rem, merge(taken))
        rem = subtract(rem, merge(taken))
        mallocs = merge(_span(e) for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                        and tr.api_name(str(e.get("name", ""))) in MALLOC_APIS)
        mem_iv = intersect(rem, mallocs)
        launch_iv = subtract(rem, mallocs)

        kdur = [float(e.get("dur", 0) or 0) for e in kern_in_steps]
        med_k = statistics.median(kdur) if kdur else 0.0
        short = sum(d < SHORT_KERNEL_US for d in kdur)
        copies = length(intersect(S, merge(_span(e) for e in device_evs if e.get("cat") != "kernel")))
        causes.append(_cause("compute", per(length(in_steps_busy)), step_ms,
                             f"GPU busy {length(in_steps_busy) / step_us:.0%} of the step "
                             f"({per(copies):.2f} ms/step of it in copies/memsets); "
                             f"{len(kdur) / n:.0f} kernels per step, median {med_k:.1f} µs."))
        causes.append(_cause("input", per(length(input_iv)), step_ms,
                             f"GPU idle while the host waits in DataLoader __next__ "
                             f"({per(length(intersect(S, dl))):.2f} ms/step in __next__ in all)."
                             if dl else "no DataLoader __next__ in the profiled steps."))
        causes.append(_cause("host sync", per(length(sync_iv)), step_ms,
                             f"{len(syncs)} synchronisation call(s) in {n} step(s) "
                             f"({len(syncs) / n:.1f} per step); GPU idle after them until the next GPU work, at most "
                             f"the time the host was blocked in them "
                             f"(of which {per(strict_idle):.2f} ms/step before the host could launch again: "
                             f"trace.sync_costs)"
                             + (f"; {loop_added} sync(s) added by the profiling loop left out." if loop_syncs
                                else ".")))
        retries = f"; allocator retries: {alloc_retries}" if alloc_retries is not None else ""
        peak, cap = _peak_reserved(trace), capacity_bytes or _capacity(trace)
        near = bool(peak and cap and peak / cap >= NEAR_CAPACITY)
        mem_ev = (f"GPU idle during cudaMalloc/cudaFree: {per(length(mem_iv)):.2f} ms/step"
                  + (f"; peak reserved {peak / 2**30:.1f} of {cap / 2**30:.1f} GiB ({peak / cap:.0%})"
                     if peak and cap else "; no memory events in the trace (profile_memory=True records them)")
                  + retries + ".")
        mem_ms = per(length(mem_iv))
        causes.append(_cause("memory", mem_ms, step_ms, mem_ev,
                             finding=near or bool(alloc_retries) or mem_ms / step_ms >= MIN_FINDING_SHARE))
        causes.append(_cause("launch/overhead", per(length(launch_iv)), step_ms,
                             f"GPU idle with the host busy elsewhere (launching, Python): "
                             f"{short / max(len(kdur), 1):.0%} of kernels shorter than {SHORT_KERNEL_US:.0f} µs, "
                             f"{len(kdur) / n:.0f} kernels per step."))
    else:
        cannot = ["host sync", "GPU idle", "memory (device capacity)"]
        input_iv = intersect(S, dl)
        rest = subtract(S, dl)
        ops = [(*_span(e), str(e.get("name"))) for e in events
               if e.get("cat") == "cpu_op" and e.get("tid") == main_tid and clip(S, *_span(e))]
        top = _top_level(ops)
        top_in = [o for o in top if not clip(dl, o[0], o[1])]
        # an operator is large when its *median* call takes TINY_OP_US or more: one call stretched by the OS
        # scheduler (a busy machine) does not turn a tiny op into compute
        calls: dict[str, list[float]] = {}
        for a, b, nm in top_in:
            calls.setdefault(nm, []).append(b - a)
        large_names = {nm for nm, d in calls.items() if statistics.median(d) >= TINY_OP_US}
        large = merge((a, b) for a, b, nm in top_in if nm in large_names)
        comp_iv = intersect(rest, large)
        over_iv = subtract(rest, large)
        tiny = [o for o in top_in if o[2] not in large_names]
        big_names: dict[str, float] = {}
        for a, b, nm in top_in:
            if nm in large_names:
                big_names[nm] = big_names.get(nm, 0.0) + (b - a)
        lead = sorted(big_names.items(), key=lambda kv: -kv[1])[:3]
        lead_s = ", ".join(f"{k} {per(v):.2f} ms" for k, v in lead) or "none"
        gaps = length(subtract(rest, merge((a, b) for a, b, _ in top_in)))
        med_op = statistics.median([b - a for a, b, _ in top_in]) if top_in else 0.0
        causes.append(_cause("input", per(length(input_iv)), step_ms,
                             f"host in DataLoader __next__ {length(input_iv) / step_us:.0%} of the step."
                             if dl else "no DataLoader __next__ in the profiled steps."))
        causes.append(_cause("compute", per(length(comp_iv)), step_ms,
                             f"{(len(top_in) - len(tiny)) / n:.0f} top-level op call(s) per step of ops whose median "
                             f"call takes {TINY_OP_US:.0f} µs or more; largest: {lead_s} per step."))
        causes.append(_cause("launch/overhead", per(length(over_iv)), step_ms,
                             f"{len(top_in) / n:.0f} top-level ops per step, {len(tiny) / n:.0f} of them shorter "
                             f"than {TINY_OP_US:.0f} µs (median op {med_op:.1f} µs); "
                             f"{per(gaps):.2f} ms/step of Python between ops."))
        causes.append(_cannot("host sync", "CPU-only trace: there is no device to wait for, so synchronisations "
                                           "cannot be judged (profile on a GPU)."))
        causes.append(_cannot("memory", "CPU-only trace: no device capacity or allocator retries to judge."))
    causes.sort(key=lambda c: -1.0 if c["ms"] is None else c["ms"], reverse=True)
    return Diagnosis(steps=n, step_ms=round(step_ms, 3), on_gpu=on_gpu, causes=causes, cannot_judge=cannot,
                     notes=notes, source=source)


def _capacity(trace: Mapping[str, Any]) -> float | None:
    props = trace.get("deviceProperties") or []
    caps = [p.get("totalGlobalMem") for p in props if isinstance(p, Mapping) and p.get("totalGlobalMem")]
    return float(caps[0]) if caps else None


def _peak_reserved(trace: Mapping[str, Any]) -> float | None:
    """Peak bytes the caching allocator reserved on a GPU, from ``[memory]`` events (``profile_memory=True``)."""
    peak = None
    for e in trace.get("traceEvents", []):
        if e.get("name") == "[memory]":
            a = e.get("args") or {}
            if a.get("Device Type") == 1 and a.get("Total Reserved") is not None:
                peak = max(peak or 0.0, float(a["Total Reserved"]))
    return peak


# --- profile a step in one call ---------------------------------------------------------------------------------
def diagnose_step(step_fn: Callable[[], Any], *, wait: int = 1, warmup: int = 1, active: int = 3, device=None,
                  name: str = "diagnose_step", trace_root: Path | str | None = None,
                  profile_memory: bool = False) -> Diagnosis:
    """Profile ``step_fn`` (one training step per call) with ``schedule(wait, warmup, active)``, write the trace to
    a fresh folder (``profiling.fresh_trace_dir(name)``) and diagnose it. The result's ``trace_dir`` says where.

    On a GPU the loop synchronises the device after each step (so a step's range covers its GPU work) and the
    diagnosis leaves those syncs out; on a CPU nothing is added.
    """
    import torch

    from . import profiling
    from .env import is_cuda

    trace_dir = profiling.fresh_trace_dir(name, root=trace_root)
    cuda = is_cuda(device) if device is not None else False
    if cuda:
        retries0 = torch.cuda.memory_stats(device).get("num_alloc_retries", 0)
    # on a GPU the loop synchronises after each step, so that a step's range covers its GPU work (a host that
    # runs ahead of a short profile would otherwise show steps as long as their launches); the diagnosis then
    # leaves those loop syncs out (loop_syncs)
    profiling.profile_steps(step_fn, wait=wait, warmup=warmup, active=active, device=device,
                            trace_dir=trace_dir, profile_memory=profile_memory, sync=cuda)
    files = profiling.trace_files(trace_dir)
    if not files:
        raise DiagnosisError(f"{trace_dir}: the profiler wrote no trace; is step_fn running (active={active})?")
    kw: dict[str, Any] = {"loop_syncs": cuda}
    if cuda:
        torch.cuda.synchronize(device)
        kw |= {"capacity_bytes": torch.cuda.get_device_properties(device).total_memory,
               "alloc_retries": torch.cuda.memory_stats(device).get("num_alloc_retries", 0) - retries0}
    result = diagnose(files[-1], **kw)
    result.trace_dir = trace_dir
    return result


def training_step(model, optimizer, loader, loss_fn=None, *, device=None) -> Callable[[], Any]:
    """A step for ``diagnose_step`` from your own parts: each call takes the next batch from ``loader`` (starting
    over when it runs out), moves it to ``device``, runs forward, backward and the optimizer step.

    A batch is ``(inputs, targets)``; ``loss_fn`` defaults to cross-entropy.
    """
    import torch

    from .training import labelled_step

    loss_fn = loss_fn or torch.nn.functional.cross_entropy
    step = labelled_step(model, optimizer, loss_fn)
    state = {"it": iter(loader)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(loader)
            return next(state["it"])

    def run():
        x, y = next_batch()
        if device is not None:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        return step(x, y)

    return run


# --- planted bottlenecks (notebook 05 and the tests) -------------------------------------------------------------
PLANTED = ("none", "input", "launch/overhead", "compute", "host sync")


class _SlowDataset:
    """Random samples, each costing ``ms`` of host time (a stand-in for decoding and augmenting)."""

    def __init__(self, n: int, features: int, ms: float):
        self.n, self.features, self.ms = n, features, ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import time

        import torch

        time.sleep(self.ms / 1000.0)
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.features, generator=g), int(i % 10)


def planted_step(kind: str, size: float, *, device=None, batch_size: int = 8, features: int = 64,
                 hidden: int = 64, threads: int | None = 1, overlap: int = 0, item: bool = True) -> Callable[[], Any]:
    """A small MLP training step with one bottleneck planted, ``size`` setting how strong it is:

    - ``"none"``: the plain step (the baseline; ``size`` is ignored);
    - ``"input"``: batches come from a DataLoader (``num_workers=0``) whose dataset spends ``size`` ms per sample;
    - ``"launch/overhead"``: the forward adds ``size`` tiny elementwise ops on a 16-element tensor;
    - ``"compute"``: the forward adds one ``size`` × ``size`` matrix product;
    - ``"host sync"``: ``loss.item()`` every step, then ``size`` ms of host work (as when a metric is logged)
      that, without the sync, would overlap with the GPU's work. Only meaningful on a GPU, and only with GPU work
      to overlap with: ``overlap`` adds an ``overlap`` × ``overlap`` matrix product to the forward (on a big GPU
      the small MLP alone takes microseconds, so removing the sync would save nothing). ``item=False`` is the fix:
      the same step and host work without the ``.item()``.

    On a CPU each call runs with ``threads`` intra-op threads (then restores the setting): on a busy shared
    machine, waking OpenMP workers stretches even a tiny op to a scheduler time slice (~16 ms), which would
    bury the planted effect under the machine's load. ``threads=None`` leaves the setting alone.
    """
    import torch

    from .training import labelled_step
    from .widgets import validate_choice

    validate_choice(kind, PLANTED, "planted bottleneck")
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not size > 0:
        raise ValueError(f"size must be a positive number, not {size!r}.")
    device = torch.device(device or "cpu")
    torch.manual_seed(0)
    if isinstance(overlap, bool) or not isinstance(overlap, int) or overlap < 0:
        raise ValueError(f"overlap must be a matrix side (an integer >= 0), not {overlap!r}.")
    extra = {"tiny": int(size) if kind == "launch/overhead" else 0,
             "mm": int(size) if kind == "compute" else (overlap if kind == "host sync" else 0)}

    class Planted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(),
                                           torch.nn.Linear(hidden, 10))
            if extra["mm"]:
                self.big = torch.nn.Parameter(torch.randn(extra["mm"], extra["mm"]) / extra["mm"] ** 0.5)
            self.tiny = torch.nn.Parameter(torch.ones(16))

        def forward(self, x):
            out = self.net(x)
            if extra["tiny"]:
                t = self.tiny
                for _ in range(extra["tiny"]):
                    t = t * 1.0001
                out = out + t.sum() * 0.0
            if extra["mm"]:
                out = out + (self.big @ self.big).mean() * 0.0
            return out

    model = Planted().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = labelled_step(model, opt, torch.nn.functional.cross_entropy)
    if kind == "input":
        loader = torch.utils.data.DataLoader(_SlowDataset(10_000, features, float(size)), batch_size=batch_size,
                                             shuffle=False, num_workers=0)
        inner = training_step(model, opt, loader, device=device)
        return _with_threads(inner, threads) if device.type == "cpu" else inner
    x = torch.randn(batch_size, features, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)
    if kind == "host sync":
        import time

        def run():
            loss = step(x, y)
            if item:
                loss.item()                  # the planted sync: the host waits for the GPU here
            time.sleep(float(size) / 1000.0)  # host work that could have overlapped with the GPU
            return loss
        inner = run
    else:
        def inner():
            return step(x, y)
    return _with_threads(inner, threads) if device.type == "cpu" else inner


def _with_threads(fn: Callable[[], Any], threads: int | None) -> Callable[[], Any]:
    if threads is None:
        return fn
    import torch

    def run():
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return fn()
        finally:
            torch.set_num_threads(before)
    return run
