"""What kind of bottleneck does a training step have? A verdict from a profiler trace.

Taught in ``05_diagnose``; used by ``python -m helpers.doctor``. The trace itself is read by ``load`` and its
events classified by ``events``; this module only *attributes* the time of the average profiled step to causes.

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
from typing import Any, Mapping

from . import events as ev
from . import intervals as iv
from .load import load_trace
from .syncs import sync_costs

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

MALLOC_APIS = ("cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync")


class DiagnosisError(ValueError):
    """A trace that cannot be diagnosed (the message names the file and what to do)."""


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


def _step_ranges(trace, events: list, name: str) -> tuple[list[tuple[float, float]], Any, list[str]]:
    """The steps to split (ProfilerStep ranges, or the whole trace as one step, with a note) and the main thread."""
    steps = ev.step_events(trace)
    notes = []
    if steps:
        return [ev.span(e) for e in steps], steps[0].get("tid"), notes
    spans = [ev.span(e) for e in events]
    if not spans:
        raise DiagnosisError(f"{name}: the trace holds no timed events; profile at least one step "
                             f"(torch.profiler with a schedule and prof.step()).")
    notes.append("no ProfilerStep in this trace: the whole trace was analysed as one step "
                 "(call prof.step() after each step to get per-step figures)")
    host = [e for e in events if ev.is_host(e)]
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
    """Split the average profiled step of ``trace`` (a Chrome-trace dict, or a path ``load_trace`` reads)
    into causes. ``capacity_bytes`` / ``alloc_retries`` (from ``torch.cuda``) add memory evidence the trace
    itself may lack (``diagnose_step`` passes them on a GPU). ``loop_syncs=True``: the profiling loop itself
    synchronised the device at the end of each step (``profiling.profile_steps(sync=True)``, so that a step's
    range covers its GPU work); that last device synchronisation of each step is not the step's own and is left
    out of the host-sync cause (its idle time stays with launch/overhead). ``loop_syncs=None`` (the default) reads
    it from the trace: ``profile_steps`` marks a trace whose loop synchronised (``events.LOOP_SYNC_METADATA``), so
    ``python -m helpers.doctor`` on a ``diagnose_step`` trace gives the same verdict as ``diagnose_step``."""
    source = None
    if not isinstance(trace, Mapping):
        source = str(trace)
        trace = load_trace(trace)
    if loop_syncs is None:
        loop_syncs = str(trace.get(ev.LOOP_SYNC_METADATA, "0")).strip('"') not in ("0", "", "False", "false")
    name = source or "trace"
    events = ev.complete(trace)
    steps, main_tid, notes = _step_ranges(trace, events, name)
    n = len(steps)
    step_us = sum(b - a for a, b in steps)
    step_ms = step_us / n / 1000.0
    S = iv.merge(steps)

    dl = iv.merge(ev.dataloader_ranges(trace))
    device_evs = ev.device_work(events)
    on_gpu = bool(device_evs)
    per = lambda us: us / n / 1000.0  # noqa: E731 - µs over all steps -> ms per step

    causes: list[dict[str, Any]] = []
    cannot: list[str] = []
    if on_gpu:
        busy = iv.merge(ev.span(e) for e in device_evs)
        kern_in_steps = [e for e in device_evs if ev.kind(e) == "kernel" and iv.clip(S, *ev.span(e))]
        in_steps_busy = iv.intersect(S, busy)
        idle = iv.subtract(S, busy)
        input_iv = iv.intersect(idle, dl)
        rem = iv.subtract(idle, dl)
        starts = [a for a, _ in busy]
        costs = sync_costs(trace)  # each synchronisation once
        rows = [(float(t), float(t) + float(h), float(g), str(k))
                for t, h, g, k in zip(costs["ts_us"], costs["host_us"], costs["gpu_idle_us"], costs["kind"])
                if iv.clip(S, t, t + h)]
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
            for s, e in iv.clip(rem, a, end):
                if budget <= 0:
                    break
                taken.append((s, min(e, s + budget)))
                budget -= min(e, s + budget) - s
        strict_idle = sum(g for _, _, g in syncs)
        sync_iv = iv.intersect(rem, iv.merge(taken))
        rem = iv.subtract(rem, iv.merge(taken))
        mallocs = iv.merge(ev.span(e) for e in events if ev.is_launch(e)
                           and ev.api_name(str(e.get("name", ""))) in MALLOC_APIS)
        mem_iv = iv.intersect(rem, mallocs)
        launch_iv = iv.subtract(rem, mallocs)

        kdur = [float(e.get("dur", 0) or 0) for e in kern_in_steps]
        med_k = statistics.median(kdur) if kdur else 0.0
        short = sum(d < SHORT_KERNEL_US for d in kdur)
        copies = iv.length(iv.intersect(S, iv.merge(ev.span(e) for e in device_evs if ev.kind(e) != "kernel")))
        causes.append(_cause("compute", per(iv.length(in_steps_busy)), step_ms,
                             f"GPU busy {iv.length(in_steps_busy) / step_us:.0%} of the step "
                             f"({per(copies):.2f} ms/step of it in copies/memsets); "
                             f"{len(kdur) / n:.0f} kernels per step, median {med_k:.1f} µs."))
        causes.append(_cause("input", per(iv.length(input_iv)), step_ms,
                             f"GPU idle while the host waits in DataLoader __next__ "
                             f"({per(iv.length(iv.intersect(S, dl))):.2f} ms/step in __next__ in all)."
                             if dl else "no DataLoader __next__ in the profiled steps."))
        causes.append(_cause("host sync", per(iv.length(sync_iv)), step_ms,
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
        mem_ev = (f"GPU idle during cudaMalloc/cudaFree: {per(iv.length(mem_iv)):.2f} ms/step"
                  + (f"; peak reserved {peak / 2**30:.1f} of {cap / 2**30:.1f} GiB ({peak / cap:.0%})"
                     if peak and cap else "; no memory events in the trace (profile_memory=True records them)")
                  + retries + ".")
        mem_ms = per(iv.length(mem_iv))
        causes.append(_cause("memory", mem_ms, step_ms, mem_ev,
                             finding=near or bool(alloc_retries) or mem_ms / step_ms >= MIN_FINDING_SHARE))
        causes.append(_cause("launch/overhead", per(iv.length(launch_iv)), step_ms,
                             f"GPU idle with the host busy elsewhere (launching, Python): "
                             f"{short / max(len(kdur), 1):.0%} of kernels shorter than {SHORT_KERNEL_US:.0f} µs, "
                             f"{len(kdur) / n:.0f} kernels per step."))
    else:
        cannot = ["host sync", "GPU idle", "memory (device capacity)"]
        input_iv = iv.intersect(S, dl)
        rest = iv.subtract(S, dl)
        ops = [(*ev.span(e), str(e.get("name"))) for e in events
               if ev.kind(e) == "op" and e.get("tid") == main_tid and iv.clip(S, *ev.span(e))]
        top = _top_level(ops)
        top_in = [o for o in top if not iv.clip(dl, o[0], o[1])]
        # an operator is large when its *median* call takes TINY_OP_US or more: one call stretched by the OS
        # scheduler (a busy machine) does not turn a tiny op into compute
        calls: dict[str, list[float]] = {}
        for a, b, nm in top_in:
            calls.setdefault(nm, []).append(b - a)
        large_names = {nm for nm, d in calls.items() if statistics.median(d) >= TINY_OP_US}
        large = iv.merge((a, b) for a, b, nm in top_in if nm in large_names)
        comp_iv = iv.intersect(rest, large)
        over_iv = iv.subtract(rest, large)
        tiny = [o for o in top_in if o[2] not in large_names]
        big_names: dict[str, float] = {}
        for a, b, nm in top_in:
            if nm in large_names:
                big_names[nm] = big_names.get(nm, 0.0) + (b - a)
        lead = sorted(big_names.items(), key=lambda kv: -kv[1])[:3]
        lead_s = ", ".join(f"{k} {per(v):.2f} ms" for k, v in lead) or "none"
        gaps = iv.length(iv.subtract(rest, iv.merge((a, b) for a, b, _ in top_in)))
        med_op = statistics.median([b - a for a, b, _ in top_in]) if top_in else 0.0
        causes.append(_cause("input", per(iv.length(input_iv)), step_ms,
                             f"host in DataLoader __next__ {iv.length(input_iv) / step_us:.0%} of the step."
                             if dl else "no DataLoader __next__ in the profiled steps."))
        causes.append(_cause("compute", per(iv.length(comp_iv)), step_ms,
                             f"{(len(top_in) - len(tiny)) / n:.0f} top-level op call(s) per step of ops whose median "
                             f"call takes {TINY_OP_US:.0f} µs or more; largest: {lead_s} per step."))
        causes.append(_cause("launch/overhead", per(iv.length(over_iv)), step_ms,
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
