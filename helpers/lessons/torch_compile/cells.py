"""One cell of ``04_torch_compile``'s matrix: a training run per (model, precision, mode).

``run_cell`` builds a model from a fixed seed, optionally compiles it, trains it on fixed synthetic batches with
RAdam, and returns the cell's metrics: compile time (Dynamo's own metrics, the first steps apart), steady-state step
time (median and spread), peak memory, the loss curve. ``record_cell`` turns any failure (bad mode or model, a mode
that does not apply here, a compile error, out of memory) into a ``failed`` row so the matrix goes on.
"""
from __future__ import annotations

import contextlib
import math
import os
import time
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from ...measure import device as dv
from ...measure.timing import time_steps
from ...measure.training import labelled_step
from ...measure.validate import validate_batch_size, validate_compile_mode, validate_precision
from ...notebook.env import seed_everything
from .dynamo import compile_seconds, dynamo_logs, dynamo_times, graph_counters, quiet_known_noise, random_parity, tf32_settings
from .models import build_model, synthetic_batches, validate_model

class CompileFailed(RuntimeError):
    """torch.compile (or the first compiled step) raised; the message says which cell."""



# -- one cell -----------------------------------------------------------------------------
def check_cell(model_name: Any, precision: Any, mode: Any, batch_size: Any, device) -> None:
    """Refuse a cell before any work: unknown model/mode/precision, a bad batch size, a mode for another device."""
    validate_model(model_name)
    validate_compile_mode(mode, device)  # unknown mode; reduce-overhead (CUDA graphs) off a GPU
    validate_precision(precision, device)
    validate_batch_size(batch_size)


def run_cell(model_name: str, precision: str = "fp32", mode: str = "eager", batch_size: int = 16,
             steps: int = 8, *, compile_steps: int = 2, image_size: int = 64, num_classes: int = 10,
             n_batches: int = 4, seed: int = 0, lr: float = 1e-3, device=None, backend: str = "inductor",
             hidden: int = 256, keep_losses: bool = True, keep: dict | None = None,
             parity: bool = True) -> dict[str, Any]:
    """Train one cell: ``compile_steps`` first steps (the first compiles; each timed apart), then ``steps`` timed ones.

    ``mode="eager"`` runs without ``torch.compile``; any other mode compiles the model
    (only the model, as the source article did) with ``torch.compile(model, mode=...)``.
    ``fp16`` trains with a ``GradScaler`` (as the article's AMP runs did); ``bf16`` needs none.
    With ``parity`` (default) a compiled cell on CUDA runs under ``random_parity``, so its stochastic
    depth draws the same random numbers as eager. Returns metrics; raises with a clear message on bad
    input or a failed compile. Pass a dict as ``keep`` to get the cell's training step back
    (``keep["step"]``) for ``timing.interleaved_times``; Dynamo is then not reset, so earlier kept
    steps stay compiled.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    check_cell(model_name, precision, mode, batch_size, device)
    quiet_known_noise()
    if compile_steps < 1:
        raise ValueError("compile_steps must be at least 1: the first step is the one that compiles")
    if keep is None:  # free the previous cells' graphs (a kept step must stay compiled, so no reset then)
        torch._dynamo.reset()
    if device.type == "cuda":
        import gc

        gc.collect()
        torch.cuda.empty_cache()  # the previous cell's memory (CUDA-graph pools included) is not this cell's peak
    from torch._dynamo.utils import counters

    counters.clear()
    seed_everything(seed)
    model = build_model(model_name, image_size, num_classes, hidden).to(device)
    opt = torch.optim.RAdam(model.parameters(), lr=lr)
    scaler_init = 2.0 ** 16  # GradScaler's default initial scale
    scaler = torch.amp.GradScaler(device.type, init_scale=scaler_init) if precision == "fp16" else None
    data = synthetic_batches(n_batches, batch_size, image_size, num_classes, seed, device)
    run_model = model
    if mode != "eager":
        try:
            run_model = torch.compile(model, mode=None if mode == "default" else mode, backend=backend)
        except Exception as exc:  # noqa: BLE001 - reported as a failed row by record_cell
            raise CompileFailed(f"torch.compile(mode={mode!r}) of {model_name} failed: "
                                f"{type(exc).__name__}: {str(exc).strip()[:300]}") from exc
    train = labelled_step(run_model, opt, nn.CrossEntropyLoss(), precision=precision, label=False,
                                   scaler=scaler)
    losses: list[torch.Tensor] = []
    state = {"i": 0}

    def step() -> None:
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        losses.append(train(x, y))

    parity_ctx = random_parity(device) if parity and mode != "eager" else contextlib.nullcontext(False)
    with parity_ctx as fallback_random, dynamo_logs() as logs:
        if keep is not None:  # later (interleaved) steps run outside this block: keep the setting for them
            keep["fallback_random"] = bool(fallback_random)
        dv.reset_peak_memory(device)
        before = dynamo_times()
        first_ms: list[float] = []
        for i in range(compile_steps):  # the compiling step (torch.compile is lazy) and the next few, each apart
            dv.synchronize(device)
            t0 = time.perf_counter()
            try:
                step()
                dv.synchronize(device)
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception as exc:  # noqa: BLE001
                if mode == "eager":
                    raise
                msg = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
                raise CompileFailed(f"compiling {model_name} with mode={mode!r} failed at step {i + 1}: "
                                    f"{type(exc).__name__}: {msg}") from exc
            first_ms.append((time.perf_counter() - t0) * 1000.0)
        # the first steps' peak (compile-time benchmarking, CUDA-graph warm-up and recording) apart from the steady
        # steps' peak: a one-off must not stand in for what training holds
        first_peak = (dv.peak_memory_mb(device), dv.peak_reserved_mb(device))
        dv.reset_peak_memory(device)
        times = time_steps(step, steps=steps, warmup=0, device=device)
        after = dynamo_times()
        steady_peak = (dv.peak_memory_mb(device), dv.peak_reserved_mb(device))
    m: dict[str, Any] = {**times.metrics(batch_size), "first_step_ms": round(first_ms[0], 3),
                         "first_steps_ms": [round(t, 3) for t in first_ms],
                         "first_steps_s": round(sum(first_ms) / 1000.0, 3),
                         # what the first steps cost beyond as many steady steps: compile, CUDA-graph recording,
                         # autotuning, lazy initialisation; compare with Dynamo's compile timer
                         "first_steps_excess_s": round((sum(first_ms) - len(first_ms) * times.median) / 1000.0, 3),
                         "peak_mem_mb": _max_or_none(first_peak[0], steady_peak[0]),  # the whole run's peaks
                         "peak_reserved_mb": _max_or_none(first_peak[1], steady_peak[1]),
                         "first_steps_peak_mem_mb": first_peak[0], "first_steps_peak_reserved_mb": first_peak[1],
                         "steady_peak_mem_mb": steady_peak[0], "steady_peak_reserved_mb": steady_peak[1],
                         "grad_scaler": scaler is not None, "fallback_random": bool(fallback_random),
                         **tf32_settings()}
    if mode != "eager":
        dyn = compile_seconds(before, after)
        m["compile_s"] = dyn if dyn is not None else round((first_ms[0] - times.median) / 1000.0, 3)
        m["compile_time_source"] = "dynamo metrics" if dyn is not None else "first-step wall time minus a steady step"
        m.update(graph_counters())
        m["logged_recompiles"] = sum(1 for r in logs if r["kind"] == "recompile")
    if scaler is not None:
        # GradScaler skips the optimizer step where fp16 gradients overflow and halves its scale (it grows only every
        # 2000 clean steps): eager and compiled runs that skip different steps have different loss curves for a
        # reason that is not compile's numerics. One sync, after the timing.
        scale = float(scaler.get_scale())
        m["grad_scale_final"] = scale
        n_steps = compile_steps + steps
        m["scaler_skipped_steps"] = (round(math.log2(scaler_init / scale))
                                     if scale > 0 and n_steps < scaler.get_growth_interval() else None)
    curve = [float(v) for v in torch.stack(losses).float().cpu()]
    m["final_loss"] = round(curve[-1], 6)
    if keep_losses:
        m["losses"] = curve
    m["step_times_ms"] = [round(t, 3) for t in times.times_ms]
    if keep is not None:
        keep["step"] = step
    return m


def _max_or_none(*vals):
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


def profile_cell(model_name: str, precision: str = "fp32", mode: str = "eager", batch_size: int = 16,
                 trace_dir: str | os.PathLike | None = None, *, active: int = 3, **kwargs: Any) -> dict[str, Any]:
    """Profile ``active`` steady training steps of one cell into ``trace_dir`` (taught in notebook 04's
    offline trace views: what compiling changes in the trace).

    The cell is built and run as ``run_cell`` does (its first steps compile, outside the profiler: a compile in
    the trace would swamp the steady steps), then one warm-up and ``active`` recorded steps follow, each
    synchronised on CUDA. Returns ``{"trace_dir", "compile_s"}``; raises like ``run_cell`` on bad input.
    """
    from ...measure.profiling import fresh_trace_dir, profile_steps

    keep: dict[str, Any] = {}
    m = run_cell(model_name, precision, mode, batch_size, steps=1, keep=keep, keep_losses=False, **kwargs)
    tdir = Path(trace_dir) if trace_dir is not None else fresh_trace_dir(f"04_torch_compile/{model_name}-{mode}")
    device = torch.device(kwargs.get("device") or "cpu")
    profile_steps(keep["step"], wait=0, warmup=1, active=active, device=device, trace_dir=tdir)
    return {"trace_dir": str(tdir), "compile_s": m.get("compile_s")}


def cell_name(model_name: str, precision: str, mode: str, batch_size: int) -> str:
    return f"{model_name} {precision} {mode} bs={batch_size}"


def record_cell(results, model_name: str, precision: str, mode: str, batch_size: int, steps: int, *,
                name: str | None = None, extra_config: Mapping[str, Any] | None = None, guard=None,
                **kwargs) -> dict[str, Any]:
    """``run_cell`` as a row of ``results`` (a ``helpers.notebook.results.Results``); a failure is a ``failed`` row.
    ``guard``: wraps the run (the matrix's time guard: ``harness.guarded``)."""
    cfg = {"model": model_name, "precision": precision, "mode": mode, "batch_size": batch_size, "steps": steps,
           **(extra_config or {})}
    name = name or cell_name(model_name, precision, mode, batch_size)
    fn = lambda: run_cell(model_name, precision, mode, batch_size, steps, **kwargs)  # noqa: E731
    return results.record(name, cfg, fn if guard is None else guard(fn))


