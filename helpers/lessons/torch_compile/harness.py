"""Running ``04_torch_compile``'s experiments as rows of a ``Results``: the matrix in order under a time budget, the
kept training steps re-timed in alternation (interleaved), ``explain`` on a model, the profiled eager/compiled pair,
the fresh-process starts, and the rows logged to TensorBoard.

Each function records rows (a failure is a ``failed`` row; the rest go on) and prints one progress line per cell;
the tables and charts built from the rows are in ``report``.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from ...measure.timing import interleaved_times
from .cells import cell_name, profile_cell, record_cell
from .dynamo import explain_summary
from .models import build_model
from .starts import cold_warm_start


def guarded(budget, fn: Callable[[], Any], limit_s: float | None = None) -> Callable[[], Any]:
    """``fn`` under ``budget`` (a ``helpers.notebook.budget.Budget``): skipped once it is spent, stopped when it runs
    past it (or past ``limit_s``); ``fn`` itself without a budget."""
    return fn if budget is None else budget.wrap(fn, limit_s)


def run_matrix(results, cells: Sequence[Sequence[str]], batch_size: int, steps: int, *,
               budget=None, matrix_s: float | None = None, keep_steps: bool = False,
               extra_config: Mapping[str, Any] | None = None, **cell_kw: Any
               ) -> tuple[list[str], dict[str, Callable[[], None]]]:
    """Run ``cells`` (``(model, precision, mode)``, the most important first) as rows of ``results``.

    The time guard (``budget``, a ``helpers.notebook.budget.Budget`` counting notebook time): a cell starts only while
    the budget has time left and, with ``matrix_s``, before ``matrix_s`` seconds of notebook time (the matrix's share:
    what follows it needs the rest); a cell still running at that point (or when the whole budget is spent) is stopped.
    A skipped or stopped cell is a ``failed`` row with the reason, so the claim "every matrix cell ran" comes out false
    and the notebook still ends in time. ``budget=None``: no guard.
    With ``keep_steps`` each successful cell's training step is kept (``run_cell(keep=...)``) for ``interleave``.
    ``cell_kw`` goes to ``run_cell``. Returns the cells' row names (in order) and the kept steps by name.
    """
    if matrix_s is not None and budget is None:
        raise ValueError("a matrix share (matrix_s) needs the notebook's budget (helpers.notebook.budget.Budget)")
    step_fns: dict[str, Callable[[], None]] = {}
    for model_name, precision, mode in cells:
        name = cell_name(model_name, precision, mode, batch_size)
        left = None if matrix_s is None else matrix_s - budget.elapsed()
        if budget is not None and (budget.spent() or (left is not None and left <= 0)):
            why = (budget.skipped_message() if budget.spent() else
                   f"skipped: the matrix's share of the time budget ({matrix_s:g} s of notebook time) was spent")
            results.add(name, {"model": model_name, "precision": precision, "mode": mode, "batch_size": batch_size,
                               "steps": steps}, status="failed", error=f"OverBudget: {why}")
            print(f"{name:<40} skipped (budget)")
            continue
        t0 = time.perf_counter()
        keep: dict[str, Any] | None = {} if keep_steps else None
        row = record_cell(results, model_name, precision, mode, batch_size, steps, keep=keep,
                          extra_config=extra_config, guard=lambda fn: guarded(budget, fn, left), **cell_kw)
        if keep is not None and row["status"] == "ok":
            step_fns[row["name"]] = keep["step"]
        print(progress_line(row, time.perf_counter() - t0))
    return [cell_name(*c, batch_size) for c in cells], step_fns


def progress_line(row: Mapping[str, Any], wall_s: float) -> str:
    """One line per matrix cell: status, wall time, and the step median and compile times, or the reason it failed."""
    m = row["metrics"]
    extra = f", compile {m['compile_s']:.1f} s, first steps {m['first_steps_s']:.1f} s" if "compile_s" in m else ""
    return (f"{row['name']:<40} {row['status']:<6} {wall_s:6.1f} s wall"
            + (f"; step median {m['step_ms_median']:.1f} ms{extra}" if row["status"] == "ok" else f"; {row['error']}"))


def interleave(results, step_fns: Mapping[str, Callable[[], None]], rounds: int, device=None,
               pairs: Sequence[tuple[str, str]] = (), statistic: str = "median"):
    """Re-time the kept steps in alternation (``timing.interleaved_times``, ``rounds`` rounds) and store each row's
    interleaved mean, median and quartiles, with the same window's eager mean and median beside each compiled cell's
    (``interleaved_eager_ms_*``: same model, precision and batch size).

    Each compiled cell is compared with its eager cell (``results.compare``: ratio of median step times, 95% interval,
    verdict; into results.json's ``comparisons``), and so is each ``(a, b)`` of ``pairs`` (row names) that ran.
    ``statistic``: ``"median"`` (metric ``step_ms_median``; the default: robust to the bursts of a loaded shared
    machine, where one step held up by other work moves a mean by tens of per cent) or ``"mean"`` (``step_ms_mean``).
    Returns ``(recompiles, table)``: the graphs Dynamo compiled during the re-timing (a kept compiled step should
    compile none), and a DataFrame of sequential against interleaved medians and IQRs per cell; ``(0, None)`` when
    off (``rounds`` 0, or fewer than two steps kept).
    """
    import numpy as np
    import pandas as pd
    from torch._dynamo.utils import counters

    if statistic not in ("mean", "median"):
        raise ValueError(f"statistic must be 'mean' or 'median', not {statistic!r}")
    cmp_kw = {"metric": f"step_ms_{statistic}", "statistic": np.median if statistic == "median" else None}
    if not rounds or len(step_fns) < 2:
        print("interleaved timing: off")
        return 0, None
    graphs_before = counters["stats"].get("unique_graphs", 0)
    times = interleaved_times(dict(step_fns), rounds, device)
    recompiles = counters["stats"].get("unique_graphs", 0) - graphs_before
    rows = []
    for name, t in times.items():
        row = results.get(name)
        m, c = row["metrics"], row["config"]
        m.update(interleaved_ms_mean=round(t.mean, 3), interleaved_ms_median=round(t.median, 3),
                 interleaved_ms_p25=round(t.p25, 3), interleaved_ms_p75=round(t.p75, 3))
        eager = [n for n in times if results.get(n)["config"]["mode"] == "eager" and all(
                 results.get(n)["config"][k] == c[k] for k in ("model", "precision", "batch_size"))]
        if c["mode"] != "eager" and eager:
            m["interleaved_eager_ms_median"] = round(times[eager[0]].median, 3)
            m["interleaved_eager_ms_mean"] = round(times[eager[0]].mean, 3)
            results.compare(eager[0], name, times[eager[0]].times_ms, t.times_ms, **cmp_kw)
        rows.append({"cell": name, "sequential_ms_median": m["step_ms_median"],
                     "sequential_iqr_ms": round(m["step_ms_p75"] - m["step_ms_p25"], 2),
                     "interleaved_ms_median": round(t.median, 2), "interleaved_iqr_ms": round(t.p75 - t.p25, 2)})
    for a, b in pairs:
        if a in times and b in times:
            results.compare(a, b, times[a].times_ms, times[b].times_ms, **cmp_kw)
    results.save()
    print(f"{rounds} rounds; graphs compiled during the interleaved timing: {recompiles}")
    return recompiles, pd.DataFrame(rows)


def explain_model(name: str, image_size: int, device=None, batch_size: int = 2) -> dict[str, Any]:
    """``explain_summary`` of one model of ``models.MODELS`` (training mode, random input) as a row's metrics:
    graphs, breaks, ops, the logged graph-break and recompile records, each break's reason with its source line."""
    import torch

    t0 = time.perf_counter()
    model = build_model(name, image_size).to(device).train()
    x = torch.randn(batch_size, 3, image_size, image_size, device=device)
    e = explain_summary(model, x)
    return {"graphs": e["graphs"], "graph_breaks": e["graph_breaks"], "ops": e["ops"],
            "logged_graph_breaks": e["logged"]["graph_break"], "logged_recompiles": e["logged"]["recompile"],
            "reasons": [f"{r['reason']} at {r['where']}" for r in e["reasons"]],
            "explain_s": round(time.perf_counter() - t0, 2)}


def record_explains(results, names: Sequence[str], image_size: int, device=None, budget=None) -> list[dict[str, Any]]:
    """``explain_model`` for each of ``names`` as a row ``explain <name>`` (a failure, or one skipped or stopped by
    ``budget``, is a failed row)."""
    return [results.record(f"explain {n}", {"model": n, "image_size": image_size, "what": "explain"},
                           guarded(budget, lambda n=n: explain_model(n, image_size, device)), verbose=False)
            for n in names]


def profile_metrics(model_name: str, precision: str, mode: str, batch_size: int, *, active: int = 3,
                    **cell_kw: Any) -> dict[str, Any]:
    """Profile ``active`` steady steps of one cell (``profile_cell``) and read the trace back (``traces.open_trace``):
    steps recorded, the trace's mean step, operator calls per step and (with a GPU) kernel calls per step."""
    from ...traces.views import open_trace

    out = profile_cell(model_name, precision, mode, batch_size, active=active, **cell_kw)
    t = open_trace(out["trace_dir"])
    steps = t.step_times()
    ops = t.operators()
    kern = t.kernels() if t.has_gpu else None
    n = max(len(steps), 1)
    return {"trace_dir": out["trace_dir"], "steps_recorded": len(steps),
            "trace_step_ms_mean": round(float(steps.step_ms.mean()), 3),
            "op_calls_per_step": round(float(ops.calls.sum()) / n, 1),
            "kernel_calls_per_step": (round(float(kern.calls.sum()) / n, 1)
                                      if kern is not None and len(kern) else None)}


def profile_pair(results, model_name: str, precision: str, batch_size: int, *,
                 modes: Sequence[str] = ("eager", "default"), budget=None, **cell_kw: Any) -> dict[str, dict[str, Any]]:
    """``profile_metrics`` per mode as rows ``profiled <model> <precision> <mode>`` (``"what": "profile"``: no matrix
    cell), under ``budget`` when given. Returns the successful modes' metrics by mode."""
    profiled = {}
    for mode in modes:
        cfg = {"what": "profile", "model": model_name, "precision": precision, "mode": mode, "batch_size": batch_size}
        row = results.record(f"profiled {model_name} {precision} {mode}", cfg,
                             guarded(budget, lambda mode=mode: profile_metrics(model_name, precision, mode, batch_size,
                                                                               **cell_kw)))
        if row["status"] == "ok":
            profiled[mode] = row["metrics"]
    return profiled


def record_starts(results, cache_dir, device=None, budget=None, **cell: Any) -> dict[str, Any]:
    """The cold and warm fresh-process starts (``starts.cold_warm_start``) as one row, their metrics suffixed
    ``_cold`` / ``_warm``; under ``budget`` when given (a stopped start kills its process: ``subprocess.run``)."""
    def run() -> dict[str, Any]:
        runs = cold_warm_start(cache_dir, device=str(device or "cpu"), **cell)
        return {f"{k}_{which}": v for which, r in runs.items() for k, v in r.items()}

    return results.record("fresh-process start: cold vs warm cache", {"what": "start", **cell}, guarded(budget, run),
                          verbose=False)


def log_to_tensorboard(results, notebook: str = "04_torch_compile", root=None) -> list[str]:
    """Every successful training row (one with per-step times) to ``runs/<notebook>/``: per-step time, throughput,
    the loss curve and an hparams entry (``notebook.tensorboard.log_experiment``). Returns the rows logged."""
    from ...notebook.tensorboard import log_experiment

    logged = []
    for e in results.experiments:
        if e["status"] == "ok" and "step_times_ms" in e["metrics"]:
            log_experiment(notebook, e["name"], e["config"], e["metrics"], step_times_ms=e["metrics"]["step_times_ms"],
                           losses=e["metrics"].get("losses"), batch_size=e["config"]["batch_size"], root=root)
            logged.append(e["name"])
    return logged
