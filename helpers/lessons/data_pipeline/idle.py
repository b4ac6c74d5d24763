"""How long the training loop waits for data, read from profiler traces: ``Lab.idle_shares`` (notebook 02).

Each variant is profiled with its workers in ``profile_rounds`` windows, the variants in turns (baseline, best,
baseline, best ...), so that a burst of other load on a shared machine falls on each variant's windows rather than
on one variant's only. Each window skips the first worker cycle (the start-up burst) and records ``profile_cycles``
full cycles: the batches come in waves, one long wait per cycle, so a window of few cycles reads a share that depends
on where in the wave it starts (over 2 cycles the best pipeline once read a longer wait than the baseline). The share
is the time inside the DataLoader's ``__next__`` summed over every window's steps, against those steps' time; on a GPU
also Holistic Trace Analysis' idle share (the windows' mean).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping

from ...measure import profiling
from ...notebook.budget import OverBudget
from ...traces import dataloader_wait_share, load_trace
from . import loop


def idle_shares(lab, variants: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{variant: {"trace_dir" (the first window's), "share", "next_ms", "step_ms", "windows",
    ["gpu_idle_share"]}}`` and a row ``idle share <variant>`` each; a variant whose profile cannot run (in any window)
    is a failed row and left out."""
    variants = list(dict.fromkeys(variants))
    sums = {v: {"next_ms": 0.0, "step_ms": 0.0, "shares": [], "dirs": [], "gpu": []} for v in variants}
    failed: dict[str, BaseException] = {}
    for _ in range(max(1, lab.profile_rounds)):
        for variant in (v for v in variants if v not in failed):
            tdir = profiling.fresh_trace_dir(f"{lab.notebook}/{variant}_nw{lab.num_workers}")
            try:
                with lab.budget.limit():
                    loop.profile_loop(variant, lab.num_workers, lab.batch_size, crop=lab.crop, trace_dir=tdir,
                                      device=lab.device, active=lab.profile_steps, cycles=lab.profile_cycles,
                                      stand_in_ms=lab.stand_in_ms)
            except (Exception, OverBudget) as exc:  # noqa: BLE001 - a profile that cannot run: failed row
                failed[variant] = exc
                continue
            s = sums[variant]
            w = dataloader_wait_share(load_trace(profiling.trace_files(tdir)[0]))
            s["next_ms"] += w["next_ms"]
            s["step_ms"] += w["step_ms"]
            s["shares"].append(w["share"])
            s["dirs"].append(tdir)
            if lab.on_gpu:
                try:
                    share = loop.gpu_idle_share(tdir)  # HTA's temporal breakdown, quiet (None: no GPU activity)
                    s["gpu"] += [] if share is None else [share]
                except Exception as exc:  # noqa: BLE001 - analysis is optional; the CPU-side share stands
                    print(f"HTA could not analyse {tdir}: {exc}")
    idle: dict[str, dict[str, Any]] = {}
    for variant in variants:
        if variant in failed:
            lab.results.record(f"idle share {variant}", lab._row_config(variant), failing(failed[variant]))
            continue
        s = sums[variant]
        idle[variant] = {"trace_dir": str(s["dirs"][0]), "next_ms": s["next_ms"], "step_ms": s["step_ms"],
                         "share": s["next_ms"] / s["step_ms"] if s["step_ms"] else math.nan,
                         "window_shares": s["shares"],
                         "windows": len(s["dirs"]),
                         **({"gpu_idle_share": sum(s["gpu"]) / len(s["gpu"])} if s["gpu"] else {})}
    for v, d in idle.items():
        lab.results.record(f"idle share {v}", lab._row_config(v), lambda d=d, v=v: {
            "trace_wait_share": round(d["share"], 4), "timed_wait_share": lab.ms(v, "data_wait_share"),
            "next_ms": round(d["next_ms"], 3), "profiled_step_ms": round(d["step_ms"], 3),
            "profiled_windows": d["windows"], "cycles_per_window": lab.profile_cycles,
            **({"gpu_idle_share": round(d["gpu_idle_share"], 4)} if "gpu_idle_share" in d else {})})
    return idle


def failing(exc: BaseException) -> Callable[[], Mapping[str, Any]]:
    """A ``Results.record`` function that raises ``exc``: the row records the failure with its message."""
    def fn():
        raise exc
    return fn
