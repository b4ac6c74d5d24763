"""Notebook 04's runs: a cell timed (first steps apart, then steady), the matrix under the time budget with interleaved
eager/compiled rounds and comparisons, derived figures, the profiled pair."""

import functools
import gc
import math
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ...measure import device as dv
from ...measure.compare import equal_outputs, resolved
from ...measure.timing import interleaved_times, time_steps
from .dynamo import compile_seconds, dynamo_times, graph_counters, tf32_settings


def cell_name(model: str, precision: str, mode: str, batch_size: int) -> str:
    return f"{model} {precision} {mode} bs={batch_size}"


def _above(peak: float | None, base: float | None) -> float | None:
    return None if peak is None else round(peak - (base or 0.0), 1)


def run_cell(
    step: Callable[[], torch.Tensor],
    *,
    steps: int,
    compile_steps: int = 2,
    device=None,
    compiled: bool = True,
) -> dict[str, Any]:
    """A cell's ``step`` (returns the loss) timed: ``compile_steps`` first steps apart, then ``steps`` steady ones; peak
    memory above the allocation at the start, each part apart; ``step.scaler`` (fp16): its skipped steps."""
    from torch._dynamo.utils import counters
    from torch._inductor import config as inductor_config

    counters.clear()
    base = round(torch.cuda.memory_allocated(device) / 2**20, 1) if dv.is_cuda(device) else None
    losses: list[torch.Tensor] = []
    dv.reset_peak_memory(device)
    before, first_ms = dynamo_times(), []
    for _ in range(compile_steps):  # torch.compile is lazy: the first call compiles
        dv.synchronize(device)
        t0 = time.perf_counter()
        losses.append(step())
        dv.synchronize(device)
        first_ms.append((time.perf_counter() - t0) * 1000.0)
    first_peak = _above(dv.peak_memory_mb(device), base), _above(dv.peak_reserved_mb(device), base)
    graphs = graph_counters()
    dv.reset_peak_memory(device)
    times = time_steps(lambda: losses.append(step()), steps=steps, warmup=0, device=device)
    m: dict[str, Any] = {
        **times.metrics(),
        "first_steps_ms": [round(t, 3) for t in first_ms],
        "first_steps_s": round(sum(first_ms) / 1000.0, 3),
        "first_steps_peak_mem_mb": first_peak[0],
        "first_steps_peak_reserved_mb": first_peak[1],
        "steady_peak_mem_mb": _above(dv.peak_memory_mb(device), base),
        "steady_peak_reserved_mb": _above(dv.peak_reserved_mb(device), base),
        "fallback_random": bool(inductor_config.fallback_random),
        **tf32_settings(),
    }
    if compiled:
        dyn = compile_seconds(before, dynamo_times())
        m["compile_s"] = dyn if dyn is not None else round((first_ms[0] - times.median) / 1000.0, 3)
        m.update(graphs)
        # recompiles in the steady steps
        m["steady_graphs"] = graph_counters()["graphs"] - graphs["graphs"]
    scaler = getattr(step, "scaler", None)
    m["grad_scaler"] = scaler is not None
    if scaler is not None:  # GradScaler halves its scale at each skipped (overflowing) step
        m["scaler_skipped_steps"] = round(math.log2(2.0**16 / float(scaler.get_scale())))
    m["losses"] = [float(v) for v in torch.stack(losses).float().cpu()]
    m["step_times_ms"] = [round(t, 3) for t in times.times_ms]
    return m


def break_even_whole_run(
    eager_first_ms: Sequence[float],
    eager_ms: float,
    compiled_first_ms: Sequence[float],
    compiled_ms: float,
) -> int | str:
    """The fewest steps at which the compiled run takes no longer than eager; ``"never"`` if its step is not faster."""
    n0 = len(compiled_first_ms)
    extra_ms, saving_ms = sum(compiled_first_ms) - sum(eager_first_ms), eager_ms - compiled_ms
    if extra_ms <= 0 and saving_ms >= 0:
        return n0
    return "never" if saving_ms <= 0 else n0 + math.ceil(extra_ms / saving_ms)


def derive(eager: Mapping[str, Any], m: dict[str, Any], c: Mapping[str, Any], rtol: float) -> None:
    """Into a compiled row's ``m``: ``speedup`` (interval, verdict), loss parity within ``rtol``, the break-even."""
    p = equal_outputs(eager["losses"], m["losses"], rtol=rtol)
    m.update(
        speedup=c["ratio"],
        speedup_low=c["low"],
        speedup_high=c["high"],
        verdict=c["verdict"],
        loss_match=bool(p["close"]),
        max_rel_loss_diff=p["max_rel_diff"],
    )
    stat = np.median if c["metric"].endswith("median") else np.mean
    a, b = (float(stat(c["samples"][k])) for k in ("a", "b"))
    m["break_even_steps"] = "not resolved"
    if resolved(c):
        m["break_even_steps"] = break_even_whole_run(
            eager["first_steps_ms"], a, m["first_steps_ms"], b
        )


def interleave(
    results,
    kept: Mapping[str, Callable[[], Any]],
    rounds: int,
    pairs: Sequence[tuple[str, str]],
    device=None,
) -> tuple[int, list[dict[str, Any]]]:
    """``kept`` re-timed in interleaved rounds, ``pairs`` compared (by the median where graphs were compiled meanwhile):
    ``(those graphs, comparisons)``."""
    from torch._dynamo.utils import counters

    g0 = counters["stats"].get("unique_graphs", 0)
    # on a CPU: CPU time, unstretched by other load
    times = interleaved_times(dict(kept), rounds, device, cpu_time=True)
    recompiled = counters["stats"].get("unique_graphs", 0) - g0
    kw = {"metric": "step_ms_median", "statistic": np.median} if recompiled else {}
    for n, t in times.items():
        results.get(n)["metrics"].update(
            interleaved_ms_mean=round(t.mean, 3), interleaved_ms_median=round(t.median, 3)
        )
    return recompiled, [
        results.compare_times(a, b, times[a].times_ms, times[b].times_ms, **kw)
        for a, b in pairs
        if a in times and b in times
    ]


def run_matrix(
    results,
    cells: Sequence[Sequence[str]],
    make_step: Callable[..., Callable],
    batch_size: int,
    steps: int,
    *,
    rounds: int,
    rtol: Mapping[str, float],
    budget=None,
    later_s: float | None = None,
    together: bool = False,
    pairs: Sequence[tuple[str, str]] = (),
    device=None,
    compile_steps: int = 2,
    note: str | None = None,
) -> dict[str, Any]:
    """Run ``cells`` (``(model, precision, mode)``, most important first) as rows, grouped by (model, precision) (or
    together): each group re-timed interleaved, compiled compared with eager (and ``pairs``), derived, freed.
    ``later_s`` of ``budget`` is kept for the lessons after; ``note`` records ``{names, recompiles}`` under that
    name (the claims read it). Returns ``{names, recompiles, comparisons, losses}`` (``losses``: each cell that ran,
    its loss at every step)."""
    groups: dict[Any, list] = {}
    for c in cells:
        groups.setdefault(0 if together else tuple(c[:2]), []).append(tuple(c))
    names = [cell_name(*c, batch_size) for c in cells]
    out: dict[str, Any] = {"names": names, "recompiles": 0, "comparisons": []}
    for group in groups.values():
        kept: dict[str, Callable] = {}
        for model, precision, mode in group:
            name, t0 = cell_name(model, precision, mode, batch_size), time.perf_counter()
            cfg = dict(model=model, precision=precision, mode=mode, batch_size=batch_size)
            cfg.update(steps=steps, matmul_precision=torch.get_float32_matmul_precision())
            left = None if later_s is None or budget is None else budget.left() - later_s
            if left is not None and left <= 0:
                why = f"the last {later_s:g} s of the time budget are kept for later lessons"
                results.add(name, cfg, status="failed", error=f"OverBudget: skipped: {why}")
                continue
            make = functools.partial(make_step, model, precision, mode, batch_size)
            timing = dict(steps=steps, compile_steps=compile_steps, compiled=mode != "eager")
            row = _timed_row(results, kept, name, cfg, make, budget, left, device=device, **timing)
            error = f"  {row['error']}" if row["error"] else ""
            print(f"{name:<34} {row['status']:<6} {time.perf_counter() - t0:6.1f} s{error}")
        cfgs = {n: results.get(n)["config"] for n in kept}
        eager = {(c["model"], c["precision"]): n for n, c in cfgs.items() if c["mode"] == "eager"}
        vs_eager = [
            (eager[c["model"], c["precision"]], n)
            for n, c in cfgs.items()
            if c["mode"] != "eager" and (c["model"], c["precision"]) in eager
        ]
        recompiled, found = 0, []  # no rounds: no comparison
        if rounds and len(kept) >= 2:
            recompiled, found = interleave(results, kept, rounds, vs_eager + list(pairs), device)
        for c in found:
            if (c["a"], c["b"]) in vs_eager:
                a, b = results.get(c["a"]), results.get(c["b"])
                derive(a["metrics"], b["metrics"], c, rtol[b["config"]["precision"]])
        out["recompiles"] += recompiled
        out["comparisons"] += found
        if kept:
            kept.clear()
            release(device)
    ran = [n for n in names if results.get(n) and results.get(n)["status"] == "ok"]
    out["losses"] = {n: results.get(n)["metrics"]["losses"] for n in ran}
    if note:
        results.note(note, {"names": names, "recompiles": out["recompiles"]})
    results.save()
    return out


def _timed_row(results, kept, name, cfg, make, budget, limit_s=None, **timing) -> dict[str, Any]:
    """A row of ``run_cell`` on ``make()``'s step (refused there, a bad cell makes a failed row before any
    reset), under ``budget``; the step kept in ``kept`` for the rounds if it ran."""

    def run():
        step = make()
        if not kept:  # forget earlier graphs (the previous group's were released at its end)
            torch._dynamo.reset()
        kept[name] = step
        return run_cell(step, **timing)

    row = results.record(
        name, cfg, run if budget is None else budget.wrap(run, limit_s), verbose=False
    )
    if row["status"] != "ok":
        kept.pop(name, None)
    return row


def run_variants(
    results,
    variants: Mapping[str, tuple[Mapping[str, Any], Callable[[], Callable]]],
    *,
    steps: int,
    rounds: int,
    compile_steps: int = 2,
    budget=None,
    device=None,
) -> dict[str, Any]:
    """``variants`` (``{name: (config, make)}``, ``make()`` returns a step; the first is the baseline) as rows timed
    by ``run_cell``, each built and compiled with Inductor's caches off (every compile cold), then re-timed in
    ``rounds`` interleaved rounds, each compared with the first. Returns ``{names, comparisons}``."""
    import logging
    import warnings

    from torch._inductor import config as inductor_config

    # expected here: a compiled optimizer step skips record_function; caches off disable Dynamo's PGO
    logging.getLogger("torch._dynamo.variables.ctx_manager").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")
    kept: dict[str, Callable] = {}
    timing = dict(steps=steps, compile_steps=compile_steps, device=device)
    with inductor_config.patch(force_disable_caches=True):
        for name, (cfg, make) in variants.items():
            _timed_row(results, kept, name, {"what": "lever", **cfg}, make, budget, **timing)
    names = list(variants)
    pairs = [(names[0], n) for n in names[1:]]
    found = interleave(results, kept, rounds, pairs, device)[1] if len(kept) >= 2 else []
    kept.clear()
    release(device)
    results.save()
    return {"names": names, "comparisons": found}


def release(device=None) -> None:
    """Free a finished group on a GPU: Dynamo's graphs and CUDA-graph pools, the objects, the cached blocks."""
    if dv.is_cuda(device):
        torch._dynamo.reset()
        gc.collect()
        torch.cuda.empty_cache()


def whole_run(
    eager: Mapping[str, Any], compiled: Mapping[str, Any], c: Mapping[str, Any], run_s: float
) -> dict[str, Any] | None:
    """Eager's time over compiled's (interval, verdict) over ``steps`` lasting ``run_s`` s eager; None if unresolved."""
    if not resolved(c):
        return None
    k, ef = len(eager["first_steps_ms"]), sum(eager["first_steps_ms"])
    cf = sum(compiled["first_steps_ms"])
    stat = np.median if "median" in c["metric"] else np.mean
    if c.get("samples"):
        e_ms = float(stat(c["samples"]["a"]))
    else:  # a reference run's comparison keeps no samples
        e_ms = float(eager[c["metric"].replace("_sequential", "")])
    n = max(k, round(run_s * 1000.0 / e_ms))
    whole = {
        w: (ef + (n - k) * e_ms) / (cf + (n - k) * e_ms / c[w]) for w in ("ratio", "low", "high")
    }
    verdict = "faster" if whole["low"] > 1 else "slower" if whole["high"] < 1 else "no difference"
    return {**{w: round(v, 3) for w, v in whole.items()}, "steps": n, "verdict": verdict}


def profile_pair(
    results,
    make_step: Callable[..., Callable],
    model: str,
    precision: str,
    batch_size: int,
    *,
    budget=None,
    device=None,
    active: int = 3,
) -> dict[str, dict[str, Any]]:
    """Profile ``active`` steady steps of a cell, eager and compiled, as rows: op and kernel calls per step."""
    from ...measure.profiling import fresh_trace_dir, profile_steps
    from perf_doctor.views import open_trace

    def run(mode):
        torch._dynamo.reset()
        step = make_step(model, precision, mode, batch_size)
        for _ in range(2):
            step()
        tdir = fresh_trace_dir(f"04_torch_compile/{model}-{mode}")
        profile_steps(step, wait=0, warmup=1, active=active, device=device, trace_dir=tdir)
        t = open_trace(tdir)
        n = max(len(t.step_times()), 1)
        kernels = round(float(t.kernels().calls.sum()) / n, 1) if t.has_gpu else None
        return {
            "trace_dir": str(tdir),
            "steps_recorded": len(t.step_times()),
            "trace_step_ms_mean": round(float(t.step_times().step_ms.mean()), 3),
            "op_calls_per_step": round(float(t.operators().calls.sum()) / n, 1),
            "kernel_calls_per_step": kernels,
        }

    out = {}
    for mode in ("eager", "default"):
        cfg = dict(
            what="profile", model=model, precision=precision, mode=mode, batch_size=batch_size
        )
        fn = functools.partial(run, mode)
        row = results.record(
            f"profiled {model} {precision} {mode}", cfg, fn if budget is None else budget.wrap(fn)
        )
        if row["status"] == "ok":
            out[mode] = row["metrics"]
    return out


def refusals(check: Callable[[dict], Any], values: Mapping[str, Any], changes) -> dict[str, Any]:
    """``check`` on ``values`` with each of ``changes`` (``{label: {name: bad value}}``): ``{label: its one-line
    refusal, or None where accepted}``, each printed."""
    from ...measure.validate import InvalidValue

    out = {}
    for label, change in changes.items():
        try:
            check({**values, **change})
            out[label] = None
        except InvalidValue as exc:
            out[label] = str(exc)
        print(f"panel, {label:<32} -> {out[label] or 'accepted'}")
    return out
