"""Notebook 01's lesson code: the small CNN it profiles and the step it builds, the readings of the profile that it
shows (the three orders, the phase table and chart, the backward wait chain, the profiled step's metrics) and the
experiment its panel re-runs (``run_profiled_step``, with ``validate_panel``). The profiler idiom itself
(``torch.profiler.profile`` and ``key_averages().table()``) stays in the notebook, where it is taught."""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from ..measure import device as dev
from ..measure import profiling, timing, training
from ..measure.validate import validate_batch_size, validate_bool, validate_precision
from ..notebook import env, tensorboard
from ..notebook.display import readable

NOTEBOOK = "01_profiler_basics"
PHASES = training.PHASES
CHAIN = ("autograd::engine::evaluate_function: ConvolutionBackward0", "ConvolutionBackward0",
         "aten::convolution_backward")
COLUMNS = ["step_ms_median", "step_ms_p25", "step_ms_p75", "first_step_ms", "samples_per_s", "peak_mem_mb",
           "naive_ms", "profiled_step_ms_mean", "label_coverage", "top_op"]


class SmallCNN(nn.Module):
    """Conv + batch-norm blocks and a linear head: the model profiled in ``01_profiler_basics``.

    ``width`` channels after the stem, ``blocks`` (conv 3x3, BN, ReLU, max-pool) blocks,
    then global average pooling and a linear layer to ``num_classes``.
    """

    def __init__(self, in_channels: int = 3, width: int = 32, blocks: int = 3, num_classes: int = 10):
        super().__init__()
        layers: list[nn.Module] = []
        c = in_channels
        for i in range(blocks):
            out = width * (2 ** i)
            layers += [nn.Conv2d(c, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True),
                       nn.MaxPool2d(2)]
            c = out
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.features(x)), 1))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# --- the step ---------------------------------------------------------------------------------------------------
def build(device, batch_size: int, *, image_size: int, width: int, blocks: int, precision: str = "fp32",
          seed: int = 0):
    """A fresh SmallCNN, SGD with momentum and one fixed random batch on ``device``; returns ``(model, step)``,
    ``step()`` being the labelled training step (``training.make_train_step``)."""
    env.seed_everything(seed)
    model = SmallCNN(width=width, blocks=blocks).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch_size, 3, image_size, image_size, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)
    return model, training.make_train_step(model, opt, nn.CrossEntropyLoss(), x, y, precision=precision)


def is_label(name: str) -> bool:
    """A ``record_function`` label of the step (a phase or ``ProfilerStep#N``), not an operator."""
    return name in PHASES or name.startswith("ProfilerStep")


# --- readings of the profile --------------------------------------------------------------------------------------
def tops_by_order(avgs, keys: Mapping[str, str]) -> dict[str, Any]:
    """The top row of ``key_averages()`` in each order of ``keys`` (``profiling.sort_keys``): ``{order: event}``."""
    return {order: max(avgs, key=lambda e, k=key: getattr(e, k)) for order, key in keys.items()}


def phase_view(pt, on_gpu: bool):
    """``profiling.phase_times`` as the table the notebook shows: calls and time per call (CPU; with a GPU also GPU
    time per call and the share of it the GPU was busy)."""
    view = pt.assign(gpu_busy_pct=100 * pt["gpu_busy_ms"] / pt["gpu_ms"]).reset_index()
    view = view[["label", "calls", "cpu_ms_per_call"] + (["gpu_ms_per_call", "gpu_busy_pct"] if on_gpu else [])]
    return readable(view.rename(columns={"cpu_ms_per_call": "cpu_per_call_ms", "gpu_ms_per_call": "gpu_per_call_ms"})
                    .round(3))


def phase_sentence(pt, on_gpu: bool) -> str:
    """One sentence (markdown) with this run's forward and step times: GPU and CPU time on a GPU."""
    f, s = pt.loc["forward"], pt.loc["ProfilerStep*"]
    if not on_gpu:
        return (f"One forward: **{f['cpu_ms_per_call']:.2f} ms** (CPU: no GPU timeline here). "
                f"One step: {s['cpu_ms_per_call']:.2f} ms.")
    return (f"One forward: **{f['gpu_ms_per_call']:.2f} ms** on the GPU, queued in {f['cpu_ms_per_call']:.2f} ms of "
            f"CPU time ({f['gpu_ms'] / f['cpu_ms']:.1f}×). One step: {s['gpu_ms_per_call']:.2f} ms GPU "
            f"({s['gpu_busy_ms'] / s['gpu_ms']:.0%} busy), {s['cpu_ms_per_call']:.2f} ms CPU. "
            f"GPU times from {pt.attrs['gpu_source']}.")


def chain_table(ev, on_gpu: bool):
    """The backward's wait chain (``CHAIN``) from ``profiling.events_frame``: ``(table, nests)``, ``nests`` True when
    all three rows are there and their total times nest (CPU; and device time on a GPU)."""
    cols = ["calls", "self_cpu_ms", "cpu_total_ms"] + (["self_device_ms", "device_total_ms"] if on_gpu else [])
    df = ev[~ev["on_device"]].set_index("name").reindex(list(CHAIN))[cols]

    def nests(col: str) -> bool:
        return bool(df[col].iloc[0] >= df[col].iloc[1] >= df[col].iloc[2])

    ok = bool(df["calls"].notna().all()) and nests("cpu_total_ms") and (not on_gpu or nests("device_total_ms"))
    return df.reset_index().round(3), ok


def top_op(ev, on_gpu: bool) -> tuple[str, float]:
    """The operator (not a label) with the most self time, device time on a GPU; and its share of all operators'
    (on a GPU: of the kernels' rows, which sum to the GPU's busy time)."""
    col = "self_device_ms" if on_gpu else "self_cpu_ms"
    ops = ev[~ev["name"].map(is_label)].sort_values(col, ascending=False, kind="stable")
    top = ops.iloc[0]
    return str(top["name"]), float(top[col] / ops.loc[ops["on_device"] == on_gpu, col].sum())


def profiled_step_metrics(pt, steps, *, on_gpu: bool, active: int, coverage: float, top: tuple[str, float],
                          self_total_ms: float, busy_ms: float) -> dict[str, Any]:
    """The ``profiled_step`` row's metrics: the mean profiled step, each phase per step (GPU time on a GPU, with the
    CPU's queueing time beside it), the labels' coverage, the top operator and the footer's totals."""
    time_col = "gpu_ms" if on_gpu else "cpu_ms"
    m = {"profiled_step_ms_mean": round(steps[time_col].sum() / len(steps), 3),
         **{f"{p}_ms_per_step": round(pt.loc[p, time_col] / active, 3) for p in PHASES}}
    if on_gpu:
        m |= {f"{p}_cpu_ms_per_step": round(pt.loc[p, "cpu_ms"] / active, 3) for p in PHASES}
    return m | {"step_cpu_ms_mean": round(steps["cpu_ms"].mean(), 3), "label_coverage": round(coverage, 4),
                "top_op": top[0], "top_op_share": round(top[1], 4), "self_cpu_total_ms": round(self_total_ms, 3),
                "gpu_busy_ms": round(busy_ms, 3) if on_gpu else None}


def ops_per_step(step, n: int, device) -> list[set[str]]:
    """The ``aten::`` operators each of ``n`` calls of ``step`` ran, each call profiled on its own."""
    out = []
    for _ in range(n):
        with torch.profiler.profile(activities=profiling.activities(device)) as p:
            step()
            dev.synchronize(device)
        out.append({e.key for e in p.key_averages() if e.key.startswith("aten::")})
    return out


def phase_chart(pt, on_gpu: bool, active: int, title: str):
    """Where one step goes, per phase: GPU time (runs) beside CPU time (queues) on a GPU, CPU time on a CPU."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 3))
    y = np.arange(len(PHASES))
    if on_gpu:
        ax.barh(y - 0.2, [pt.loc[p, "gpu_ms"] / active for p in PHASES], 0.4, label="GPU time (runs)", color="#4c72b0")
        ax.barh(y + 0.2, [pt.loc[p, "cpu_ms"] / active for p in PHASES], 0.4, label="CPU time (queues)",
                color="#dd8452")
        ax.legend()
    else:
        ax.barh(y, [pt.loc[p, "cpu_ms"] / active for p in PHASES], color=["#4c72b0", "#dd8452", "#55a868"])
    ax.set_yticks(y, PHASES)
    ax.invert_yaxis()
    ax.set_xlabel(f"{'GPU' if on_gpu else 'CPU'} time per step (ms)")
    ax.set_title(title)
    return fig


def results_view(results):
    """The results table with the columns a reader compares (timed rows first, failed rows last)."""
    df = results.table(COLUMNS)
    keep = [c for c in ["experiment", "batch_size", "precision", *COLUMNS, "status", "error"] if c in df.columns]
    return readable(df[keep].dropna(axis=1, how="all"))


# --- the panel's experiment -------------------------------------------------------------------------------------
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
    operator, recorded in ``results`` and logged for TensorBoard. Bad input (``validate_panel``) or a failure is a
    failed row with a one-line message; returns the row."""
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
        m = {**t.metrics(v["batch_size"]), "peak_mem_mb": dev.peak_memory_mb(device),
             "top_op": top_op(profiling.events_frame(p), dev.is_cuda(device))[0]}
        tensorboard.log_experiment(NOTEBOOK, name, v, m, step_times_ms=t.times_ms, batch_size=v["batch_size"])
        return m

    return results.record(name, cfg, experiment)
