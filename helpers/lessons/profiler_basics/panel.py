"""Notebook 01's panel: its values checked before anything runs (``validate_panel``) and the experiment it re-runs
with them (``run_profiled_step``: one step configuration timed and profiled, a results row; bad input a failed row)."""
from __future__ import annotations

from typing import Any, Mapping

from ...measure import device as dev
from ...measure import profiling, timing
from ...measure.validate import validate_batch_size, validate_bool, validate_precision
from ...notebook import env, tensorboard
from .model import build
from .readings import top_op

NOTEBOOK = "01_profiler_basics"


def validate_panel(values: Mapping[str, Any], device) -> dict[str, Any]:
    """The panel's values, checked before anything runs: a batch size of 1..4096, a precision this device runs
    (fp16 autocast only on a GPU), deterministic a real bool. Raises ``InvalidValue`` with the reader's message."""
    return {"batch_size": validate_batch_size(values["batch_size"]),
            "precision": validate_precision(values["precision"], device),
            "deterministic": validate_bool(values["deterministic"], "deterministic")}


def run_profiled_step(results, device, batch_size: int, precision: str = "fp32", deterministic: bool = False, *,
                      steps: int, warmup: int, image_size: int, width: int, blocks: int,
                      seed: int = 0) -> dict[str, Any]:
    """Time and profile one configuration of the step (``build``): its step statistics, peak memory and top
    operator with its share, recorded in ``results`` and logged for TensorBoard. Bad input (``validate_panel``) or
    a failure is a failed row with a one-line message; returns the row."""
    det = " det" if deterministic is True else ("" if deterministic is False else f" det={deterministic!r}")
    name = f"step bs={batch_size} {precision}{det}"
    cfg = {"batch_size": batch_size, "precision": precision, "deterministic": deterministic}

    def experiment():
        v = validate_panel(cfg, device)
        with env.deterministic(v["deterministic"]):
            _, step = build(device, v["batch_size"], image_size=image_size, width=width, blocks=blocks,
                            precision=v["precision"], seed=seed)
            dev.reset_peak_memory(device)
            t = timing.time_steps(step, steps=steps, warmup=warmup, device=device)
            p = profiling.profile_steps(step, wait=0, warmup=1, active=2, device=device)
        op, share = top_op(profiling.events_frame(p), dev.is_cuda(device))
        m = {**t.metrics(v["batch_size"]), "peak_mem_mb": dev.peak_memory_mb(device), "top_op": op,
             "top_op_share": round(share, 4)}
        tensorboard.log_experiment(NOTEBOOK, name, v, m, step_times_ms=t.times_ms, batch_size=v["batch_size"])
        return m

    return results.record(name, cfg, experiment)
