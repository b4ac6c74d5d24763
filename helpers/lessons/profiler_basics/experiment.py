"""Notebook 01's runs: the profiler's overhead and the two timers, each measured in alternation (``overhead_rounds``,
``timer_rounds``), and the panel's experiment (``run_profiled_step``, its values checked by ``validate_panel``)."""

import contextlib
import time
from typing import Any, Callable, Mapping

from ...measure import device as dev
from ...measure import profiling, timing, training
from ...measure.validate import Whole, check_values
from ...notebook import env, reference, tensorboard
from ...notebook.budget import Budget

NOTEBOOK = "01_profiler_basics"
PANEL = {
    "batch_size": Whole(1, 4096, "batch size"),
    "precision": "precision",
    "deterministic": bool,
}


def time_guard(params: Mapping[str, Any]) -> Budget:
    """The notebook's time guard from its sizes (``$PERF_TIME_BUDGET_S``, the runner's, wins)."""
    return Budget.from_env(params["budget_s"], reserve_s=params["reserve_s"])


def reference_run(notebook: str = NOTEBOOK):
    """The GPU reference of ``notebook`` (or None), with one line saying which machine it ran on."""
    ref, _ = reference.lookup(notebook)
    where = ref and f"{ref.source()}; its numbers were measured there, not in this run"
    print(f"Reference run beside yours: {where}." if ref else "No reference GPU run here.")
    return ref


def overhead_rounds(
    step: Callable[[], Any], rounds: int, steps: int, device
) -> dict[str, list[float]]:
    """The profiler's cost on ``step``: ``rounds`` rotating rounds of ``steps`` steps unprofiled and profiled, GC
    paused; on a GPU wall time (synchronised), on a CPU process time. ``{"unprofiled": [ms], "profiled": [ms]}``."""
    import torch

    if steps < 1:
        raise ValueError("steps must be at least 1")
    env.quiet_profiler_warning()
    clock = time.perf_counter if dev.is_cuda(device) else time.process_time
    out: dict[str, list[float]] = {"unprofiled": [], "profiled": []}

    def block() -> list[float]:
        step()
        dev.synchronize(device)
        times = []
        for _ in range(steps):
            t0 = clock()
            step()
            dev.synchronize(device)
            times.append((clock() - t0) * 1000.0)
        return times

    with timing.gc_paused():
        for _, name in timing.rotation(list(out), rounds):
            with (
                torch.profiler.profile(activities=profiling.activities(device))
                if name == "profiled"
                else contextlib.nullcontext()
            ):
                out[name] += block()
    return out


def timer_rounds(
    fn: Callable[[], Any], timers: Mapping[str, Callable[[Callable], float]], rounds: int, device
) -> dict[str, list[float]]:
    """Each timer reads ``fn`` once per rotating round, the device idle before each: ``{name: [ms]}``."""
    out: dict[str, list[float]] = {name: [] for name in timers}
    for _, name in timing.rotation(list(timers), rounds):
        dev.synchronize(device)
        out[name].append(timers[name](fn))
    dev.synchronize(device)
    return out


def is_label(name: str) -> bool:
    """A ``record_function`` label of the step (a phase or ``ProfilerStep#N``), not an operator."""
    return name in training.PHASES or name.startswith("ProfilerStep")


def top_op(ev, on_gpu: bool) -> tuple[str, float]:
    """The operator (not a label) with the most self time (device on a GPU) and its share of all operators'."""
    col = "self_device_ms" if on_gpu else "self_cpu_ms"
    ops = ev[~ev["name"].map(is_label)].sort_values(col, ascending=False, kind="stable")
    return str(ops.iloc[0]["name"]), float(
        ops.iloc[0][col] / ops.loc[ops["on_device"] == on_gpu, col].sum()
    )


def kernel_times(doc) -> dict[str, int]:
    """A trace's kernel count and how many have no duration (as ``export_chrome_trace`` wrote on an H100)."""
    kernels = [
        e for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("cat") == "kernel"
    ]
    return {"kernels": len(kernels), "zero_duration": sum(1 for e in kernels if not e.get("dur"))}


def validate_panel(values: Mapping[str, Any], device) -> dict[str, Any]:
    """The panel's values: batch size 1..4096, a precision this device runs, a bool (``InvalidValue``)."""
    return check_values(dict(values), PANEL, device)


def run_profiled_step(
    results,
    device,
    make_step: Callable[[int, str], Callable[[], Any]],
    batch_size: int,
    precision: str = "fp32",
    deterministic: bool = False,
    *,
    steps: int,
    warmup: int,
    budget=None,
) -> dict[str, Any]:
    """``make_step(batch_size, precision)``'s step timed and profiled as a results row (bad input, failure: failed)."""
    name = f"step bs={batch_size} {precision}"
    if deterministic is not False:
        name += " det" if deterministic is True else f" det={deterministic!r}"
    cfg = {"batch_size": batch_size, "precision": precision, "deterministic": deterministic}

    def experiment():
        v = validate_panel(cfg, device)
        # the time guard starts once the values are checked
        guard = budget.limit() if budget is not None else contextlib.nullcontext()
        with guard, env.deterministic(v["deterministic"]):
            step = make_step(v["batch_size"], v["precision"])
            dev.reset_peak_memory(device)
            t = timing.time_steps(step, steps=steps, warmup=warmup, device=device)
            p = profiling.profile_steps(step, wait=0, warmup=1, active=2, device=device)
        op, share = top_op(profiling.events_frame(p), dev.is_cuda(device))
        m = {
            **t.metrics(v["batch_size"]),
            "peak_mem_mb": dev.peak_memory_mb(device),
            "top_op": op,
            "top_op_share": round(share, 4),
        }
        tensorboard.log_experiment(
            NOTEBOOK, name, v, m, step_times_ms=t.times_ms, batch_size=v["batch_size"]
        )
        return m

    return results.record(name, cfg, experiment)
