"""What kind of bottleneck does a training step have? A verdict from a profiler trace.

Taught in ``05_diagnose``; used by ``perf-doctor``. This module *attributes* the time of the average
profiled step to causes (the interval work is in ``split``). A step is its ``ProfilerStep`` host range extended to
the end of the device work it launched (``events.step_windows``, as the TensorBoard plugin's Overview counts it).
Each microsecond of a step goes to exactly one cause, so the causes add up to the step:

GPU trace (there is device work: CUDA, ROCm, MTIA, XPU ...), in this order of precedence:
  1. **compute** — the device is busy with kernels, copies or memsets other than collectives (on any stream);
  2. **communication** — only collective kernels run (NCCL, RCCL: the *exposed* communication, which includes
     waiting for the slowest rank); collective time that overlaps compute is reported beside it
     (``overlapped_ms``) and is not counted again. Listed only when the trace holds collectives;
  3. **input** — the GPU is idle while the host waits in the DataLoader's ``__next__``;
  4. **host sync** — the GPU is idle after a synchronisation (``.item()``, ``.cpu()``, ``torch.cuda.synchronize()``:
     ``trace.sync_costs``), until the next GPU work, but no more than the host was blocked in the call: removing
     a sync lets the host work after it start that much sooner and no sooner (the rest is launch/overhead);
  5. **memory** — the GPU is idle while the host is in ``cudaMalloc`` / ``cudaFree`` (the caching allocator
     going back to the driver, typically after a retry near capacity);
  6. **launch/overhead** — the rest of the GPU's idle time: the host is busy launching (short kernels,
     Python, framework overhead) and the GPU waits for it.
CPU-only trace (no device work): there is no device to wait for, so host sync, GPU idle and device memory cannot
be judged (the verdict says so). The host's own time is split instead:
  1. **input** — in the DataLoader's ``__next__``;
  2. **communication** — a collective is in flight (gloo's ``gloo:all_reduce`` on its own threads, ``c10d::``
     operators) while the main thread runs no operator: it waits for the other ranks (exposed); collectives
     that overlap the main thread's operators are reported beside it. Listed only when the trace holds them;
  3. **compute** — in *large* top-level operators (median call ``TINY_OP_US`` or longer): the arithmetic;
  4. **launch/overhead** — the rest: tiny operators (shorter than ``TINY_OP_US``, where the ~10 µs of
     dispatch per op dominates) and the Python between operators.

A cause's ``ms`` is its time per average step: the most that fixing it could save (where FP32 GEMMs hold
``FP32_GEMM_SHARE`` of a GPU trace's kernel time, the compute advice names TF32 first). A cause below
``MIN_FINDING_SHARE`` of the step is no finding. ``Diagnosis.per_step``: each cause's ms step by step.
``Diagnosis.bound``: host-bound where the device idles ``IDLE_BOUND`` of the step or more, else device-bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from . import events as ev
from . import intervals as iv
from .kernels import kernel_dtype, uses_tensor_cores
from .gputime import compiled
from .load import load_trace
from .split import (
    MALLOC_APIS,
    SHORT_KERNEL_US,
    TINY_OP_US,
    Part,
    split_cpu,
    split_gpu,
    step_periods,
)

# --- thresholds (shown in notebook 05) -------------------------------------------------------------------------
# A cause worth a finding takes at least 5% of the step: torch-tb-profiler's own threshold for "DataLoader time
# is significant" (its performance recommendation), and nsys-ai's rule that tiny costs get no finding.
MIN_FINDING_SHARE = 0.05
# A step whose device idles at least this share of it waits on the host: host-bound (else device-bound).
IDLE_BOUND = 0.5
# Memory is "near capacity" when the peak reserved by the caching allocator is above this share of the device.
NEAR_CAPACITY = 0.90
# The compute advice names TF32 first when FP32 matrix products (FFMA/SIMT GEMMs: no tensor cores) hold at least
# this share of the steps' kernel time: ``torch.set_float32_matmul_precision("high")`` is one line and runs them on
# TF32 tensor cores (Ampere and later; the H100 reference's 8192² FP32 product ran at ~52 TFLOP/s with it off).
FP32_GEMM_SHARE = 0.5
# TINY_OP_US and SHORT_KERNEL_US live with the splitting code, in ``split``; they are shown from here.
__all__ = [
    "CAUSES",
    "Diagnosis",
    "DiagnosisError",
    "FP32_GEMM_SHARE",
    "IDLE_BOUND",
    "MALLOC_APIS",
    "MIN_FINDING_SHARE",
    "NEAR_CAPACITY",
    "SEE",
    "SEE_CPU",
    "SHORT_KERNEL_US",
    "TINY_OP_US",
    "advice",
    "diagnose",
]

PROFILED = (
    "op",
    "annotation",
    "python",
    "launch",
)  # host kinds that are the job's own work, not the profiler's
CAUSES = ("input", "host sync", "launch/overhead", "compute", "memory", "communication")
SEE = {
    "input": "02_data_pipeline: How many workers? A sweep from 0 to the core count (then Fix 1-3, DataLoader options)",
    "host sync": "03_backward_hooks: Measure again: determinism × method (syncs counted from the trace); "
    "CUDA only: torch.cuda.set_sync_debug_mode",
    "launch/overhead": "04_torch_compile: compile mode 'reduce-overhead' (CUDA graphs: the step's kernels "
    "replayed with one launch) and fusion; larger batches per step",
    "compute": "04_torch_compile: the model × precision × mode matrix (bf16 autocast, compile)",
    "memory": "04_torch_compile: peak GPU memory per cell; 01_profiler_basics: Memory and input shapes",
    "communication": "06_distributed: Diagnose (bucket_cap_mb) and Fix (no_sync): overlap the collectives with "
    "the backward (DDP launches a bucket's all-reduce as soon as its "
    "gradients are ready: bucket_cap_mb sets the bucket size, smaller buckets start sooner, larger "
    "ones cost fewer calls); accumulate gradients over several steps under model.no_sync() so only "
    "the last one communicates; if one rank is the straggler, the others wait for it: fix its own "
    "top cause first (the doctor's per-rank table)",
}
# On a CPU-only trace the host runs the ops itself: there are no launches to batch into a CUDA graph, so the advice
# is what shrinks host time (notebook 04: Inductor's CPU backend fuses ops into C++/OpenMP loops).
SEE_CPU = {
    **SEE,
    "launch/overhead": "04_torch_compile: on a CPU, fewer and larger ops: torch.compile (Inductor's CPU backend "
    "fuses elementwise ops into C++/OpenMP loops and removes the per-op dispatch), larger batches "
    "per step, less Python per op (vectorise loops over small tensors)",
    "compute": "04_torch_compile: the model × mode matrix (compile's CPU fusion); fewer FLOPs: a smaller model or "
    "input, or lower precision where the CPU has bf16 units",
}


TF32 = (
    'FP32 matrix products: first torch.set_float32_matmul_precision("high") (one line: they run on TF32 '
    "tensor cores, Ampere and later), then "
)


# A step that already replays CUDA/HIP graphs, or already runs compiled code, is not told to try them (issue 44).
SEE_GRAPHS = {
    "launch/overhead": "04_torch_compile: the step already replays CUDA/HIP graphs, so more graphs are not the fix: "
    "the idle left is the host's work before, between and after the replays (Python, scheduling, copies in and "
    "out): capture more of the step in one graph, move host work off the step's path, larger batches per replay",
    "compute": "04_torch_compile: the step already replays graphs: the kernels' own time is the fix (bf16 "
    "autocast or lower precision, fused or autotuned kernels: compile's 'max-autotune', a smaller batch or model)",
}
SEE_COMPILED = {
    "launch/overhead": "04_torch_compile: the step is already compiled: mode='reduce-overhead' (CUDA graphs: its "
    "kernels replayed with one launch) and fewer graph breaks (torch._dynamo.explain); larger batches per step",
    "compute": "04_torch_compile: the step is already compiled (Inductor, Triton kernels): mode='max-autotune' "
    "(autotuned Triton templates), bf16 autocast, fewer graph breaks (torch._dynamo.explain) so more is fused",
}


SEE_COMPILED_CPU = {
    "launch/overhead": "04_torch_compile: the step is already compiled (Inductor's CPU backend): fewer graph breaks "
    "(torch._dynamo.explain) so more ops are fused, larger batches per step, less Python around the compiled region",
    "compute": "04_torch_compile: the step is already compiled: fewer FLOPs (a smaller model or input), lower "
    "precision where the CPU has bf16 units, mode='max-autotune'",
}


def advice(
    cause: str, on_gpu: bool, fp32_gemm: bool = False, graphs: bool = False, compiled: bool = False
) -> str:
    """Where the fix for ``cause`` is taught (``SEE`` or ``SEE_CPU``); ``fp32_gemm``: name TF32 first; ``graphs`` /
    ``compiled``: the step already replays graphs / runs compiled code (``SEE_GRAPHS``, ``SEE_COMPILED``)."""
    text = (SEE if on_gpu else SEE_CPU)[cause]
    if on_gpu and graphs and cause in SEE_GRAPHS:
        text = SEE_GRAPHS[cause]
    elif compiled and cause in SEE_COMPILED:
        text = (SEE_COMPILED if on_gpu else SEE_COMPILED_CPU)[cause]
    return TF32 + text if cause == "compute" and on_gpu and fp32_gemm else text


def is_fp32_gemm(name: str) -> bool:
    """A plain-FP32 GPU matrix product (``kernel_dtype`` fp32, no tensor cores): ``…_ffma``, ``…sgemm…``, simt."""
    return (
        "gemm" in name.lower() and uses_tensor_cores(name) is False and kernel_dtype(name) == "fp32"
    )


def fp32_gemm_share(events: list, steps) -> float | None:
    """The share of the steps' kernel time in ``is_fp32_gemm`` kernels (None: no kernel in the steps)."""
    S = iv.merge(steps)
    total = fp32 = 0.0
    for e in events:
        if ev.is_device_work(e) and ev.kind(e) == "kernel":
            t = iv.length(iv.clip(S, *ev.span(e)))
            total += t
            fp32 += t if is_fp32_gemm(str(e.get("name", ""))) else 0.0
    return fp32 / total if total > 0 else None


class DiagnosisError(ValueError):
    """A trace that cannot be diagnosed (the message names the file and what to do)."""


@dataclass
class Diagnosis:
    """The causes of the average profiled step (see the module docstring for how time is split)."""

    steps: int
    step_ms: float
    on_gpu: bool
    causes: list[dict[str, Any]]  # {cause, ms, share, finding, evidence, see}, largest first
    cannot_judge: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    source: str | None = None
    trace_dir: Path | None = None  # set by diagnose_step: the folder its trace went to
    per_step: dict[str, list[float]] = field(default_factory=dict)  # cause -> ms in each step
    step_times: list[float] = field(default_factory=list)  # each step's ms
    host_ms: float | None = None  # the mean CPU span of a step (its ProfilerStep)
    device_ms: float | None = (
        None  # the mean span of the device work a step launched (None: none recorded)
    )
    damaged: bool = False  # every ProfilerStep had an impossible time: no cause is diagnosed
    compiled: dict[str, Any] | None = (
        None  # gputime.compiled: the step's compiled code (None: none)
    )
    nothing: bool = (
        False  # nothing was profiled (no operator, no device work): no cause is diagnosed
    )
    # GPU traces: (the step windows split, {cause: its intervals in µs}), for gaps.idle_causes to refine, not redo
    split: Any = field(default=None, repr=False, compare=False)

    @property
    def gpu_idle_share(self) -> float | None:
        """The share of the step the device is idle (neither computing nor communicating); None CPU-only."""
        if not self.on_gpu or not self.step_ms or self.damaged:
            return None
        busy = (self.ms("compute") or 0.0) + (self.ms("communication") or 0.0)
        return max(0.0, 1 - busy / self.step_ms)

    @property
    def bound(self) -> str | None:
        """``"host-bound"`` when the device idles ``IDLE_BOUND`` of the step or more, else ``"device-bound"``; None
        without the step's CPU and device spans. Not the longer span: a loop that synchronises every step makes
        the CPU span cover the device's, however busy the device was."""
        if self.host_ms is None or self.device_ms is None or self.gpu_idle_share is None:
            return None
        return "host-bound" if self.gpu_idle_share >= IDLE_BOUND else "device-bound"

    @property
    def top(self) -> str | None:
        """The cause with the most milliseconds (None when nothing was judged)."""
        judged = [c for c in self.causes if c["ms"] is not None]
        return judged[0]["cause"] if judged else None

    @property
    def whole_trace(self) -> bool:
        """The trace had no ``ProfilerStep`` marks, so its one "step" is the whole trace (see ``notes``)."""
        return any(n.startswith("no ProfilerStep") for n in self.notes)

    @property
    def findings(self) -> list[dict[str, Any]]:
        return [c for c in self.causes if c["finding"]]

    def ms(self, cause: str) -> float | None:
        return next((c["ms"] for c in self.causes if c["cause"] == cause), None)

    def to_list(self) -> list[dict[str, Any]]:
        """The JSON's ``diagnosis``: ``{cause, ms, share, finding, evidence, see}`` (+ ``exposed_ms``, and on compute
        ``graph_replays``, ``graph_ms`` and ``unattributed_idle_ms`` where the steps replay graphs)."""
        keys = (
            *("cause", "ms", "share", "finding", "evidence", "see", "exposed_ms", "overlapped_ms"),
            *("graph_replays", "graph_ms", "unattributed_idle_ms"),
        )
        return [{k: c[k] for k in keys if k in c} for c in self.causes]

    def summary(self) -> str:
        """A few lines: the verdict, then one line per cause."""
        kind = "GPU" if self.on_gpu else "CPU-only"
        if self.nothing:
            head = self.notes[0] + "."
        elif self.damaged:
            head = (
                f"the trace's ProfilerSteps all have impossible times: the whole trace ({self.step_ms:.2f} ms, "
                f"{kind}) is one window and no cause is diagnosed."
            )
        elif self.whole_trace:
            head = (
                f"no ProfilerStep marks: the whole trace ({self.step_ms:.2f} ms, {kind}) is one window, not a "
                f"training step. Top cause: {self.top or 'none'}."
            )
        else:
            bound = (
                f", {self.bound}: the GPU idles {self.gpu_idle_share:.0%} of the step"
                if self.bound
                else ""
            )
            head = (
                f"{self.steps} step(s), {self.step_ms:.2f} ms per step ({kind} trace{bound}). "
                f"Top cause: {self.top or 'none'}."
            )
        lines = [head]
        for c in self.causes:
            if c["ms"] is None:
                lines.append(f"  - {c['cause']}: cannot judge. {c['evidence']}")
            else:
                lines.append(
                    f" {'*' if c['finding'] else ' '}- {c['cause']}: {c['ms']:.2f} ms ({c['share']:.0%}). "
                    f"{c['evidence']} See {c['see']}."
                )
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:  # pragma: no cover - convenience
        return self.summary()


def damaged_steps(trace) -> int:
    """How many ``ProfilerStep#N`` host events have an impossible time (negative, missing, NaN ...): left out."""
    return sum(
        1
        for e in ev.events(trace)
        if ev.is_mapping(e)
        and e.get("ph") == "X"
        and ev.is_host(e)
        and str(e.get("name", "")).startswith(ev.STEP_PREFIX)
        and not ev.valid_time(e)
    )


def _steps(
    trace, events: list, name: str
) -> tuple[list[tuple[float, float]], Any, list[str], list, list]:
    """The steps to split (``split.step_periods``, or the whole trace), the main thread, their CPU and device µs."""
    steps = ev.step_events(events)
    if steps:
        wins, host, dev = step_periods(
            events, [(a, b) for _, a, b in ev.step_windows(trace, events)]
        )
        return wins, steps[0].get("tid"), [], host, dev
    spans = [ev.span(e) for e in events]
    if not spans:
        raise DiagnosisError(
            f"{name}: the trace holds no timed events; profile at least one step "
            f"(torch.profiler with a schedule and prof.step())."
        )
    notes = [
        "no ProfilerStep in this trace: the whole trace, from its first event to its last, was analysed as "
        "one step, so its 'step time' is the trace's length (start-up, data loading and idle gaps included), "
        "not a training step's (profile with a schedule and call prof.step() after each step to get "
        "per-step figures)"
    ]
    host = [e for e in events if ev.is_host(e)]
    tid = max(host, key=lambda e: float(e.get("dur", 0) or 0)).get("tid") if host else None
    return [(min(a for a, _ in spans), max(b for _, b in spans))], tid, notes, [], []


def _cause(
    part: Part, n: int, step_ms: float, steps, on_gpu: bool
) -> tuple[dict[str, Any], list[float]]:
    ms = iv.length(part.ivs) / n / 1000.0
    share = ms / step_ms if step_ms else 0.0
    c = {
        "cause": part.cause,
        "ms": round(ms, 3),
        "share": round(share, 4),
        "finding": bool(share >= MIN_FINDING_SHARE if part.finding is None else part.finding),
        "evidence": part.evidence,
        "see": advice(part.cause, on_gpu),
        **part.extra,
    }
    return c, [round(iv.length(iv.clip(part.ivs, a, b)) / 1000.0, 4) for a, b in steps]


def _cannot(name, why):
    return {
        "cause": name,
        "ms": None,
        "share": None,
        "finding": False,
        "evidence": why,
        "see": advice(name, False),
    }


@ev.memoizing
def diagnose(
    trace: Mapping[str, Any] | str | Path,
    *,
    capacity_bytes: float | None = None,
    alloc_retries: int | None = None,
    loop_syncs: bool | None = None,
) -> Diagnosis:
    """Split the average profiled step of ``trace`` (a dict or a path) into causes. ``capacity_bytes`` /
    ``alloc_retries`` add memory evidence the trace may lack. ``loop_syncs``: the loop synchronised at the end of each
    step (``profile_steps(sync=True)``): that sync is not the step's (None: ``events.loop_synced`` reads the trace)."""
    source = None if isinstance(trace, Mapping) else str(trace)
    if source is not None:
        trace = load_trace(trace)
    loop_syncs = ev.loop_synced(trace) if loop_syncs is None else loop_syncs
    name = source or "trace"
    events = ev.complete(trace)
    steps, main_tid, notes, host, dev = _steps(trace, events, name)
    n = len(steps)
    step_us = sum(b - a for a, b in steps)
    step_ms = step_us / n / 1000.0
    if not step_ms > 0:
        raise DiagnosisError(
            f"{name}: its profiled steps last 0 µs in all; the trace's times are not usable "
            f"(profile again, and give the file torch.profiler wrote)"
        )
    on_gpu = any(ev.is_device_work(e) for e in events)
    bad = damaged_steps(trace) if not host else 0
    if bad:  # ProfilerSteps were recorded, none with a usable time: the window is no step, so judge no cause
        why = (
            f"all {bad} ProfilerStep(s) have impossible times (negative, missing, NaN): no step to attribute, so "
            f"no cause is diagnosed (the trace is damaged: export it again)"
        )
        judged = [c for c in CAUSES if c != "communication"]
        return Diagnosis(
            steps=n,
            step_ms=round(step_ms, 3),
            on_gpu=on_gpu,
            causes=[_cannot(c, why) for c in judged],
            cannot_judge=judged,
            notes=[why],
            source=source,
            step_times=[round(step_ms, 4)],
            damaged=True,
        )
    if not on_gpu and not any(
        ev.kind(e) in PROFILED and not str(e.get("name", "")).startswith(ev.STEP_PREFIX)
        for e in events
    ):
        why = (
            "nothing was profiled: the trace holds no operator, no launch and no device work (only the "
            "profiler's own spans: exported after the schedule's active steps?), so no cause is diagnosed "
            "(profile inside the schedule's active steps, calling prof.step() each step)"
        )
        judged = [c for c in CAUSES if c != "communication"]
        return Diagnosis(
            steps=n,
            step_ms=round(step_ms, 3),
            on_gpu=False,
            causes=[_cannot(c, why) for c in judged],
            cannot_judge=judged,
            notes=[why],
            source=source,
            step_times=[round(step_ms, 4)],
            nothing=True,
        )
    per = lambda us: us / n / 1000.0  # noqa: E731 - µs over all steps -> ms per step

    cannot: list[str] = []
    if on_gpu:
        parts = split_gpu(
            trace,
            events,
            steps,
            per,
            loop_syncs=loop_syncs,
            peak=_peak_reserved(trace),
            cap=capacity_bytes or _capacity(trace),
            alloc_retries=alloc_retries,
            near_capacity=NEAR_CAPACITY,
            min_share=MIN_FINDING_SHARE,
        )
    else:
        cannot = ["host sync", "GPU idle", "memory (device capacity)"]
        parts = split_cpu(events, steps, main_tid, per)
    causes, per_step = [], {}
    fp32 = fp32_gemm_share(events, steps) if on_gpu else None
    own = ev.own_work(events)[0]
    comp = compiled(events, own, steps)
    graphs = bool(parts and parts[0].extra.get("graph_replays"))
    for part in parts:
        c, each = _cause(part, n, step_ms, steps, on_gpu)
        if part.cause == "compute" and fp32 is not None:
            c["fp32_gemm_share"] = round(fp32, 4)
        c["see"] = advice(
            part.cause, on_gpu, bool(fp32 and fp32 >= FP32_GEMM_SHARE), graphs, comp is not None
        )
        causes.append(c)
        per_step[part.cause] = each
    if not on_gpu:
        causes.append(
            _cannot(
                "host sync",
                "CPU-only trace: there is no device to wait for, so synchronisations "
                "cannot be judged (profile on a GPU).",
            )
        )
        causes.append(
            _cannot("memory", "CPU-only trace: no device capacity or allocator retries to judge.")
        )
    causes.sort(key=lambda c: -1.0 if c["ms"] is None else c["ms"], reverse=True)
    return Diagnosis(
        compiled=comp,
        steps=n,
        step_ms=round(step_ms, 3),
        on_gpu=on_gpu,
        causes=causes,
        cannot_judge=cannot,
        notes=notes,
        source=source,
        per_step=per_step,
        split=(steps, {p.cause: p.ivs for p in parts}) if on_gpu else None,
        step_times=[round((b - a) / 1000.0, 4) for a, b in steps],
        host_ms=round(sum(host) / len(host) / 1000.0, 3) if host else None,
        device_ms=(
            round(sum(d or 0.0 for d in dev) / len(dev) / 1000.0, 3)
            if on_gpu and any(d is not None for d in dev)
            else None
        ),
    )


def _capacity(trace: Mapping[str, Any]) -> float | None:
    props = trace.get("deviceProperties") or []
    caps = [
        p.get("totalGlobalMem") for p in props if isinstance(p, Mapping) and p.get("totalGlobalMem")
    ]
    caps = [float(c) for c in caps if isinstance(c, (int, float)) and math.isfinite(c) and c > 0]
    return caps[0] if caps else None


def _peak_reserved(trace: Mapping[str, Any]) -> float | None:
    """Peak bytes the caching allocator reserved on a GPU, from ``[memory]`` events (``profile_memory=True``)."""
    peak = None
    for e in ev.events(trace):
        if ev.is_mapping(e) and e.get("name") == "[memory]":
            a = ev.args(e)
            r = a.get("Total Reserved")
            if a.get("Device Type") == 1 and isinstance(r, (int, float)) and math.isfinite(r):
                peak = max(peak or 0.0, float(r))
    return peak
