"""Evaluating ``torch.compile``: one training run per (model, precision, mode) cell.

Taught in ``04_torch_compile``. ``run_cell`` builds a model from a fixed seed, optionally
compiles it, trains it on fixed synthetic batches with RAdam, and returns the cell's
metrics: compile time (Dynamo's own metrics, the first step apart), steady-state step
time (median and spread), peak memory, the loss curve. ``record_cell`` turns any
failure (bad mode or model, a mode that does not apply here, a compile error, out of
memory) into a ``failed`` row so the matrix goes on. Also here: break-even arithmetic,
loss parity (with inductor's ``fallback_random`` on CUDA), a short ``torch._dynamo.explain``
summary and Dynamo's graph-break/recompile logs, the TF32 settings a row ran with, and cold vs
warm starts in fresh processes (``python -m helpers.compile_lab``: one compiled cell, JSON out).
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import nn

from . import timing, training
from .env import is_cuda
from .widgets import COMPILE_MODES, InvalidValue, validate_compile_mode

MODELS = ("vit_tiny", "vit_mini", "swin_t", "swin_b", "convnext_large", "swin_mini", "convnext_mini", "mlp",
          "mlp_break", "mlp_fixed")
# small torchvision configurations of the article's models (see build_small): their code, fewer and narrower blocks
MINI = {"swin_mini": "swin_t", "convnext_mini": "convnext_large"}
# Dynamo's timers that together cover a training compile: the traced frames (which compile
# the forward graph) and the backward graph, compiled lazily at the first backward().
COMPILE_TIMERS = ("_compile.compile_inner", "compile_fx.<locals>.bw_compiler")


class CompileFailed(RuntimeError):
    """torch.compile (or the first compiled step) raised; the message says which cell."""


# -- models -------------------------------------------------------------------------------
class ClampMLP(nn.Module):
    """Two linear layers with a clamp on the hidden activations.

    ``fixed=False`` checks the activations with ``.item()`` and a Python ``if``: a
    data-dependent branch that Dynamo cannot trace, so the graph breaks there.
    ``fixed=True`` clamps unconditionally, which computes the same values in one graph.
    """

    def __init__(self, in_features: int = 3 * 32 * 32, hidden: int = 256, num_classes: int = 10,
                 fixed: bool = True, limit: float = 6.0):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)
        self.fixed, self.limit = fixed, limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(torch.flatten(x, 1)))
        if self.fixed:
            h = h.clamp(max=self.limit)
        elif h.max().item() > self.limit:  # .item() + Python if: a graph break
            h = h.clamp(max=self.limit)
        return self.fc2(h)


def validate_model(name: Any) -> str:
    if name not in MODELS:
        raise InvalidValue(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}.")
    return name


def build_model(name: str, image_size: int = 224, num_classes: int = 10, hidden: int = 256) -> nn.Module:
    """A randomly initialised model by name (no downloads: ``pretrained=False`` / ``weights=None``)."""
    validate_model(name)
    if name == "vit_tiny":
        import timm

        return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=image_size,
                                 num_classes=num_classes)
    if name in MINI:
        return build_small(MINI[name], num_classes)
    if name == "vit_mini":  # ViT-Tiny's width with two blocks and drop path on: a cheap compile for a CPU
        import timm

        return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=image_size, depth=2,
                                 drop_path_rate=0.1, num_classes=num_classes)
    if name in ("swin_t", "swin_b", "convnext_large"):
        import torchvision

        return torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    return ClampMLP(3 * image_size * image_size, hidden, num_classes, fixed=(name != "mlp_break"))


def build_small(name: str, num_classes: int = 10) -> nn.Module:
    """A small torchvision Swin or ConvNeXt: the same classes and code paths (stochastic depth included) as
    ``swin_t``/``swin_b``/``convnext_large``, with fewer and narrower blocks, for graph-break hunting on a CPU."""
    from torchvision.models import convnext, swin_transformer

    if name in ("swin_t", "swin_b"):
        return swin_transformer.SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                                                window_size=[4, 4], stochastic_depth_prob=0.2,
                                                num_classes=num_classes)
    if name == "convnext_large":
        return convnext.ConvNeXt([convnext.CNBlockConfig(32, 64, 2), convnext.CNBlockConfig(64, None, 2)],
                                 stochastic_depth_prob=0.2, num_classes=num_classes)
    raise InvalidValue(f"no small configuration of {name!r}; choose swin_t, swin_b or convnext_large.")


def synthetic_batches(n: int, batch_size: int, image_size: int, num_classes: int = 10, seed: int = 0,
                      device=None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` fixed random (images, labels) batches: the same data for every cell of the matrix."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randn(batch_size, 3, image_size, image_size, generator=g)
        y = torch.randint(0, num_classes, (batch_size,), generator=g)
        out.append((x.to(device), y.to(device)))
    return out


# -- compile-time bookkeeping -----------------------------------------------------------
def dynamo_times() -> dict[str, float]:
    """Dynamo's cumulative compile-time metrics (seconds per timer) so far in this process."""
    try:
        from torch._dynamo.utils import compile_times

        headers, values = compile_times(repr="csv", aggregate=True)
        return {h: float(v) for h, v in zip(headers, values)}
    except Exception:  # noqa: BLE001 - an API that moved: the caller falls back to wall time
        return {}


def compile_seconds(before: Mapping[str, float], after: Mapping[str, float]) -> float | None:
    """Compile time between two ``dynamo_times()`` snapshots; None when Dynamo reported nothing."""
    total, seen = 0.0, False
    for key in COMPILE_TIMERS:
        if key in after:
            seen = True
            total += after[key] - before.get(key, 0.0)
    return round(total, 3) if seen and total > 0 else None


def graph_counters() -> dict[str, int]:
    """Graphs, graph breaks, extern calls, FX-graph cache hits/misses and CUDA-graph skips since Dynamo's
    counters were cleared.

    ``cudagraph_skips``: graphs that ``reduce-overhead`` ran *without* CUDA graphs (Inductor logs "skipping
    cudagraphs due to ..." — a mutated input, a CPU tensor in the graph, dynamic shapes); such a cell is timed as
    plain ``default`` code, so the notebook checks it is zero for its ``reduce-overhead`` cells.
    """
    from torch._dynamo.utils import counters

    ind = counters["inductor"]
    return {"graphs": int(counters["stats"].get("unique_graphs", 0)),
            "graph_breaks": int(sum(counters["graph_break"].values())),
            "cudagraph_skips": int(ind.get("cudagraph_skips", 0)),
            # ops inductor handed to external libraries (GEMM/conv: the same kernels eager calls)
            "extern_calls": int(ind.get("extern_calls", 0)),
            "fx_graph_cache_hits": int(ind.get("fxgraph_cache_hit", 0)),
            "fx_graph_cache_misses": int(ind.get("fxgraph_cache_miss", 0))}


def use_inductor_cache(path: str | os.PathLike, clear: bool = True) -> Path:
    """Point inductor at ``path`` (``TORCHINDUCTOR_CACHE_DIR``); ``clear`` empties it first.

    Also forgets Dynamo's compiled frames and inductor's in-process code caches, so the next
    compile really starts cold (or warm from this folder only).
    """
    import shutil

    p = Path(path)
    if clear and p.exists():
        shutil.rmtree(p)
    p.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(p)
    os.environ.pop("TRITON_CACHE_DIR", None)  # set by Inductor at the first Triton kernel: re-derived from ``p`` now
    torch._dynamo.reset()
    try:
        from torch._inductor import codecache

        for name in ("PyCodeCache", "CppCodeCache", "CppPythonBindingsCodeCache", "CppWrapperCodeCache"):
            cls = getattr(codecache, name, None)
            if cls is not None and hasattr(cls, "cache_clear"):
                cls.cache_clear()
    except Exception:  # noqa: BLE001 - best effort: in-process caches are an optimisation detail
        pass
    return p


def tf32_settings() -> dict[str, Any]:
    """What fp32 matrix products and convolutions may use on this process (TF32 on Ampere/Hopper GPUs).

    ``float32_matmul_precision`` 'highest' keeps fp32 GEMMs in fp32; 'high' lets them use TF32
    (``torch.backends.cuda.matmul.allow_tf32`` follows it). cuDNN convolutions have their own switch,
    on by default. Recorded in every row so fp32 cells are compared under the same settings.
    """
    return {"float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32)}


@contextlib.contextmanager
def random_parity(device):
    """On CUDA, compile with ``torch._inductor.config.fallback_random = True`` (restored on exit).

    Stochastic depth (Swin, ConvNeXt) draws random numbers in training. On CUDA inductor generates
    its own random numbers, so compiled and eager losses differ whatever compile does; with
    ``fallback_random`` it calls eager's random kernels and the draws match. On a CPU inductor already
    falls back to eager's ``bernoulli_``, so nothing is changed there. Yields whether it is on.
    """
    from torch._inductor import config as inductor_config

    if not is_cuda(device):
        yield bool(inductor_config.fallback_random)
        return
    old = inductor_config.fallback_random
    inductor_config.fallback_random = True
    try:
        yield True
    finally:
        inductor_config.fallback_random = old


_LOG_KINDS = {"__graph_breaks": "graph_break", "__recompiles": "recompile"}


def _log_kind(record: logging.LogRecord) -> str | None:
    """``graph_break``/``recompile`` for the TORCH_LOGS artifacts; ``graph_break_warning`` for Dynamo's own
    warning about a break (e.g. the ``Tensor.item()`` hint), which repeats what ``explain`` reports."""
    kind = next((k for suffix, k in _LOG_KINDS.items() if record.name.endswith(suffix)), None)
    if kind is None and record.name.startswith("torch._dynamo") and record.levelno >= logging.WARNING \
            and record.getMessage().lstrip().startswith("Graph break"):
        kind = "graph_break_warning"
    return kind


class _ArtifactFilter(logging.Filter):
    def filter(self, record):  # keep torch's own handlers from printing what we capture
        return _log_kind(record) is None


@contextlib.contextmanager
def dynamo_logs():
    """``TORCH_LOGS=graph_breaks,recompiles`` in-process, captured: yields a list of ``{"kind", "message"}``.

    The records (and Dynamo's own "Graph break ..." warnings) are collected instead of printed: each is a
    long stack, shown by the caller as counts and first lines. Other torch log output is untouched.
    """
    import torch._logging

    records: list[dict[str, str]] = []
    seen: set[int] = set()

    class Catch(logging.Handler):
        def emit(self, record):
            kind = _log_kind(record)
            if kind and id(record) not in seen:
                seen.add(id(record))
                records.append({"kind": kind, "message": record.getMessage().strip()})

    user_logs = bool(os.environ.get("TORCH_LOGS"))  # then torch ignores set_logs: the user's settings stay as they are
    if not user_logs:
        torch._logging.set_logs(graph_breaks=True, recompiles=True)
    # torch's loggers have their own stderr handlers (and do not propagate): catch there, print nothing of ours
    loggers = [lg for name, lg in logging.root.manager.loggerDict.items()
               if isinstance(lg, logging.Logger) and name.split(".")[0] == "torch" and lg.handlers]
    catch, filt = Catch(), _ArtifactFilter()
    handlers = {h for lg in loggers for h in lg.handlers}
    for h in handlers:
        h.addFilter(filt)
    for lg in loggers:
        lg.addHandler(catch)
    try:
        yield records
    finally:
        for lg in loggers:
            lg.removeHandler(catch)
        for h in handlers:
            h.removeFilter(filt)
        if not user_logs:
            torch._logging.set_logs()  # back to the defaults


class _KnownNoise(logging.Filter):
    """Drops one log line that is not the lesson: cpp_extension's "No CUDA runtime is found" on a machine
    whose CUDA-built torch runs without a GPU (inductor imports it to compile C++ kernels). Nothing else."""

    def filter(self, record):
        return not record.getMessage().startswith("No CUDA runtime is found")


def quiet_known_noise() -> None:
    """Install ``_KnownNoise`` on ``torch.utils.cpp_extension``'s logger (once)."""
    lg = logging.getLogger("torch.utils.cpp_extension")
    if not any(isinstance(f, _KnownNoise) for f in lg.filters):
        lg.addFilter(_KnownNoise())


# -- arithmetic ---------------------------------------------------------------------------
def break_even_steps(compile_s: float | None, eager_ms: float, compiled_ms: float) -> int | str:
    """Steps needed for the per-step saving to pay back the compile: ``ceil(compile / saving)``.

    Returns ``"never"`` when compiled steps are not faster than eager ones.
    """
    saving_ms = eager_ms - compiled_ms
    if compile_s is None or saving_ms <= 0:
        return "never"
    return max(1, math.ceil(compile_s * 1000.0 / saving_ms))


def break_even_whole_run(eager_first_ms: Sequence[float], eager_ms: float,
                         compiled_first_ms: Sequence[float], compiled_ms: float) -> int | str:
    """Smallest run length (steps) at which the compiled run's whole wall time is no longer than eager's.

    Both runs pay their measured first steps (``*_first_ms``: compile, CUDA-graph recording,
    autotuning, warm-up), then steady steps at their medians. Returns ``"never"`` when the compiled
    steady step is not faster and its first steps cost more.
    """
    n0 = len(compiled_first_ms)
    if n0 != len(eager_first_ms) or n0 < 1:
        raise ValueError("both runs need the same number (at least one) of first steps")
    extra_ms = sum(compiled_first_ms) - sum(eager_first_ms)
    saving_ms = eager_ms - compiled_ms
    if extra_ms <= 0 and saving_ms >= 0:
        return n0
    if saving_ms <= 0:
        return "never"
    return n0 + math.ceil(extra_ms / saving_ms)


def whole_run_s(first_ms: Sequence[float], step_ms: float, n_steps: int) -> float:
    """Wall time of a run of ``n_steps``: its measured first steps, then steady steps at ``step_ms``."""
    return (sum(first_ms) + max(0, n_steps - len(first_ms)) * step_ms) / 1000.0


def loss_parity(reference: Sequence[float], other: Sequence[float], rtol: float, atol: float = 0.0) -> dict[str, Any]:
    """Compare two loss curves step by step: ``|a - b| <= atol + rtol * |a|`` at every step."""
    if len(reference) != len(other) or not reference:
        return {"match": False, "max_abs_diff": None, "max_rel_diff": None,
                "why": f"curves differ in length ({len(reference)} vs {len(other)})"}
    diffs = [abs(a - b) for a, b in zip(reference, other)]
    rels = [d / abs(a) if a else d for d, a in zip(diffs, reference)]
    ok = all(d <= atol + rtol * abs(a) for d, a in zip(diffs, reference)) and all(map(math.isfinite, other))
    return {"match": bool(ok), "max_abs_diff": max(diffs), "max_rel_diff": max(rels), "why": ""}


def explain_summary(fn: Callable, *args, **kwargs) -> dict[str, Any]:
    """``torch._dynamo.explain(fn)(*args)`` boiled down: graph count, break count, each reason + place.

    Runs with Dynamo's ``graph_breaks``/``recompiles`` logs captured (``dynamo_logs``): ``logged`` counts
    their records by kind, ``first_log`` is the first one's opening line.
    """
    torch._dynamo.reset()
    with dynamo_logs() as logs:
        out = torch._dynamo.explain(fn)(*args, **kwargs)
    reasons = []
    for r in out.break_reasons:
        where = ""
        if r.user_stack:
            f = r.user_stack[-1]
            where = f"{Path(f.filename).name}:{f.lineno} `{(f.line or '').strip()}`"
        reasons.append({"reason": str(r.reason).strip().splitlines()[0][:200], "where": where})
    torch._dynamo.reset()
    logged = {k: sum(1 for r in logs if r["kind"] == k) for k in _LOG_KINDS.values()}
    artifacts = [r for r in logs if r["kind"] in _LOG_KINDS.values()]
    warned = [r for r in logs if r["kind"] == "graph_break_warning"]
    return {"graphs": out.graph_count, "graph_breaks": out.graph_break_count, "ops": out.op_count,
            "reasons": reasons, "logged": logged,
            "first_log": artifacts[0]["message"].splitlines()[0][:200] if artifacts else "",
            "warnings": [" ".join(ln.strip() for ln in w["message"].splitlines()[:6] if ln.strip())[:300]
                         for w in warned]}


# -- one cell -----------------------------------------------------------------------------
def check_cell(model_name: Any, precision: Any, mode: Any, batch_size: Any, device) -> None:
    """Refuse a cell before any work: unknown model/mode/precision, a bad batch size, a mode for another device."""
    from .widgets import validate_batch_size, validate_precision

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
    from .env import seed_everything

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
    train = training.labelled_step(run_model, opt, nn.CrossEntropyLoss(), precision=precision, label=False,
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
        timing.reset_peak_memory(device)
        before = dynamo_times()
        first_ms: list[float] = []
        for i in range(compile_steps):  # the compiling step (torch.compile is lazy) and the next few, each apart
            timing.synchronize(device)
            t0 = time.perf_counter()
            try:
                step()
                timing.synchronize(device)
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
        first_peak = (timing.peak_memory_mb(device), _peak_reserved_mb(device))
        timing.reset_peak_memory(device)
        times = timing.time_steps(step, steps=steps, warmup=0, device=device)
        after = dynamo_times()
        steady_peak = (timing.peak_memory_mb(device), _peak_reserved_mb(device))
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


def _peak_reserved_mb(device) -> float | None:
    return round(torch.cuda.max_memory_reserved(device) / 2**20, 1) if is_cuda(device) else None


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
    from .profiling import fresh_trace_dir, profile_steps

    keep: dict[str, Any] = {}
    m = run_cell(model_name, precision, mode, batch_size, steps=1, keep=keep, keep_losses=False, **kwargs)
    tdir = Path(trace_dir) if trace_dir is not None else fresh_trace_dir(f"04_torch_compile/{model_name}-{mode}")
    device = torch.device(kwargs.get("device") or "cpu")
    profile_steps(keep["step"], wait=0, warmup=1, active=active, device=device, trace_dir=tdir)
    return {"trace_dir": str(tdir), "compile_s": m.get("compile_s")}


def cell_name(model_name: str, precision: str, mode: str, batch_size: int) -> str:
    return f"{model_name} {precision} {mode} bs={batch_size}"


def record_cell(results, model_name: str, precision: str, mode: str, batch_size: int, steps: int, *,
                name: str | None = None, extra_config: Mapping[str, Any] | None = None, **kwargs) -> dict[str, Any]:
    """``run_cell`` as a row of ``results`` (a ``helpers.results.Results``); a failure is a ``failed`` row."""
    cfg = {"model": model_name, "precision": precision, "mode": mode, "batch_size": batch_size, "steps": steps,
           **(extra_config or {})}
    name = name or cell_name(model_name, precision, mode, batch_size)
    return results.record(name, cfg, lambda: run_cell(model_name, precision, mode, batch_size, steps, **kwargs))


def summarise(rows: Sequence[Mapping[str, Any]], rtol: float, atol: float = 0.0) -> list[dict[str, Any]]:
    """Per cell: speed-up over the eager cell of the same model/precision/batch, parity, break-even."""
    def meds(base, m):
        """Eager and cell medians: from the same interleaved window when measured, else sequential."""
        if "interleaved_eager_ms_median" in m:
            return m["interleaved_eager_ms_median"], m["interleaved_ms_median"]
        key = "interleaved_ms_median" if "interleaved_ms_median" in base and "interleaved_ms_median" in m \
            else "step_ms_median"
        return base[key], m[key]

    eager = {}
    for r in rows:
        c = r["config"]
        if r["status"] == "ok" and c["mode"] == "eager":
            eager[(c["model"], c["precision"], c["batch_size"])] = r["metrics"]
    out = []
    for r in rows:
        c, m = r["config"], r["metrics"]
        s = {"cell": r["name"], **{k: c[k] for k in ("model", "precision", "mode", "batch_size")},
             "status": r["status"], "error": r["error"] or ""}
        base = eager.get((c["model"], c["precision"], c["batch_size"]))
        if r["status"] == "ok":
            s.update(step_ms=m["step_ms_median"], iqr_ms=round(m["step_ms_p75"] - m["step_ms_p25"], 3))
            if "interleaved_ms_median" in m:
                s.update(interleaved_ms=m["interleaved_ms_median"],
                         interleaved_iqr_ms=round(m["interleaved_ms_p75"] - m["interleaved_ms_p25"], 3))
            s.update(peak_mem_mb=m.get("peak_mem_mb"), peak_reserved_mb=m.get("peak_reserved_mb"),
                     compile_s=m.get("compile_s"), first_steps_s=m.get("first_steps_s"))
            if base is not None:
                b_ms, c_ms = meds(base, m)
                s["speedup"] = round(b_ms / c_ms, 3)
                if c["mode"] != "eager":
                    p = loss_parity(base["losses"], m["losses"], rtol, atol)
                    s["loss_match"], s["max_rel_loss_diff"] = p["match"], p["max_rel_diff"]
                    if m.get("scaler_skipped_steps") is not None or base.get("scaler_skipped_steps") is not None:
                        # fp16: steps GradScaler skipped (overflow), eager / compiled; unequal counts explain a gap
                        s["scaler_skipped_steps"] = f"{base.get('scaler_skipped_steps')} / {m.get('scaler_skipped_steps')}"
                    if "first_steps_ms" in m and "first_steps_ms" in base and \
                            len(m["first_steps_ms"]) == len(base["first_steps_ms"]):
                        # whole-run time: each run's measured first steps, then its steady median
                        s["break_even_steps"] = break_even_whole_run(base["first_steps_ms"], b_ms,
                                                                     m["first_steps_ms"], c_ms)
                        s["break_even_basis"] = "whole run"
                    else:
                        s["break_even_steps"] = break_even_steps(m.get("compile_s"), b_ms, c_ms)
                        s["break_even_basis"] = "compile time"
        out.append(s)
    return out


# -- cold and warm starts in fresh processes --------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]


def start_run(cache_dir: str | os.PathLike, model_name: str = "mlp_fixed", precision: str = "fp32",
              mode: str = "default", *, timeout: float = 600, **cell: Any) -> dict[str, Any]:
    """One compiled cell in a fresh Python process whose inductor cache is ``cache_dir``.

    Runs ``python -m helpers.compile_lab`` with ``TORCHINDUCTOR_CACHE_DIR=cache_dir``: nothing is
    shared with this process, so what a second run saves comes from the on-disk caches only. Returns
    the child's metrics plus ``process_s`` (the whole process, interpreter start and imports included);
    raises ``CompileFailed`` with the child's last error line when it fails.
    """
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("TORCH_LOGS", None)
    # Inductor sets TRITON_CACHE_DIR in os.environ at this process's first Triton kernel (a GPU run), pointing into
    # this process's cache; inherited, the "cold" child would find its Triton kernels there. Unset, the child keeps
    # them under its own TORCHINDUCTOR_CACHE_DIR.
    env.pop("TRITON_CACHE_DIR", None)
    spec = {"model_name": model_name, "precision": precision, "mode": mode, **cell}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "helpers.compile_lab", json.dumps(spec)], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise CompileFailed(f"the fresh process did not finish in {timeout:.0f} s") from exc
    process_s = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        err = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise CompileFailed(f"the fresh process failed (exit {proc.returncode}): {err[-1][:300] if err else 'no output'}")
    out = json.loads(lines[-1])
    out["process_s"] = round(process_s, 3)
    return out


def cold_warm_start(cache_dir: str | os.PathLike, **kwargs: Any) -> dict[str, dict[str, Any]]:
    """``start_run`` twice on one cache folder, emptied first: ``{"cold": ..., "warm": ...}``."""
    import shutil

    p = Path(cache_dir)
    if p.exists():
        shutil.rmtree(p)
    p.mkdir(parents=True)
    return {"cold": start_run(p, **kwargs), "warm": start_run(p, **kwargs)}


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """The fresh process's work: one cell from a cold interpreter (imports timed apart)."""
    m = run_cell(spec.pop("model_name"), spec.pop("precision"), spec.pop("mode"), spec.pop("batch_size", 16),
                 spec.pop("steps", 4), keep_losses=False, **spec)
    keys = ("compile_s", "first_step_ms", "first_steps_s", "first_steps_excess_s", "step_ms_median",
            "fx_graph_cache_hits", "fx_graph_cache_misses", "graphs", "final_loss")
    return {k: m.get(k) for k in keys}


if __name__ == "__main__":  # python -m helpers.compile_lab '{"model_name": ..., ...}'
    import warnings

    warnings.filterwarnings("ignore")  # the parent reads one JSON line; the child's warnings are not the lesson
    _t0 = time.perf_counter()
    _spec = json.loads(sys.argv[1])
    _spec.setdefault("device", "cpu")
    _res = _child(_spec)
    _res["in_process_s"] = round(time.perf_counter() - _t0, 3)
    print(json.dumps(_res))
