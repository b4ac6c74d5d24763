"""Evaluating ``torch.compile``: one training run per (model, precision, mode) cell.

Taught in ``04_torch_compile``. ``run_cell`` builds a model from a fixed seed, optionally
compiles it, trains it on fixed synthetic batches with RAdam, and returns the cell's
metrics: compile time (Dynamo's own metrics, the first step apart), steady-state step
time (median and spread), peak memory, the loss curve. ``record_cell`` turns any
failure (bad mode or model, a mode that does not apply here, a compile error, out of
memory) into a ``failed`` row so the matrix goes on. Also here: break-even arithmetic,
loss parity, a short ``torch._dynamo.explain`` summary, and a fresh inductor cache.
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import nn

from . import timing, training
from .widgets import COMPILE_MODES, InvalidValue, validate_compile_mode

MODELS = ("vit_tiny", "swin_t", "swin_b", "convnext_large", "mlp", "mlp_break", "mlp_fixed")
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
    if name in ("swin_t", "swin_b", "convnext_large"):
        import torchvision

        return torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    return ClampMLP(3 * image_size * image_size, hidden, num_classes, fixed=(name != "mlp_break"))


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
    """Graphs, graph breaks, extern calls and FX-graph cache hits/misses since Dynamo's counters were cleared."""
    from torch._dynamo.utils import counters

    ind = counters["inductor"]
    return {"graphs": int(counters["stats"].get("unique_graphs", 0)),
            "graph_breaks": int(sum(counters["graph_break"].values())),
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


# -- arithmetic ---------------------------------------------------------------------------
def break_even_steps(compile_s: float | None, eager_ms: float, compiled_ms: float) -> int | str:
    """Steps needed for the per-step saving to pay back the compile: ``ceil(compile / saving)``.

    Returns ``"never"`` when compiled steps are not faster than eager ones.
    """
    saving_ms = eager_ms - compiled_ms
    if compile_s is None or saving_ms <= 0:
        return "never"
    return max(1, math.ceil(compile_s * 1000.0 / saving_ms))


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
    """``torch._dynamo.explain(fn)(*args)`` boiled down: graph count, break count, each reason + place."""
    torch._dynamo.reset()
    out = torch._dynamo.explain(fn)(*args, **kwargs)
    reasons = []
    for r in out.break_reasons:
        where = ""
        if r.user_stack:
            f = r.user_stack[-1]
            where = f"{Path(f.filename).name}:{f.lineno} `{(f.line or '').strip()}`"
        reasons.append({"reason": str(r.reason).strip().splitlines()[0][:200], "where": where})
    torch._dynamo.reset()
    return {"graphs": out.graph_count, "graph_breaks": out.graph_break_count, "ops": out.op_count,
            "reasons": reasons}


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
             hidden: int = 256, keep_losses: bool = True, keep: dict | None = None) -> dict[str, Any]:
    """Train one cell: ``compile_steps`` warm-up steps (the first holds the compile), then ``steps`` timed ones.

    ``mode="eager"`` runs without ``torch.compile``; any other mode compiles the model
    (only the model, as the source article did) with ``torch.compile(model, mode=...)``.
    Returns metrics; raises with a clear message on bad input or a failed compile. Pass a dict
    as ``keep`` to get the cell's training step back (``keep["step"]``) for ``timing.interleaved_times``;
    Dynamo is then not reset, so earlier kept steps stay compiled.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    check_cell(model_name, precision, mode, batch_size, device)
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
    data = synthetic_batches(n_batches, batch_size, image_size, num_classes, seed, device)
    run_model = model
    if mode != "eager":
        try:
            run_model = torch.compile(model, mode=None if mode == "default" else mode, backend=backend)
        except Exception as exc:  # noqa: BLE001 - reported as a failed row by record_cell
            raise CompileFailed(f"torch.compile(mode={mode!r}) of {model_name} failed: "
                                f"{type(exc).__name__}: {str(exc).strip()[:300]}") from exc
    train = training.labelled_step(run_model, opt, nn.CrossEntropyLoss(), precision=precision, label=False)
    losses: list[torch.Tensor] = []
    state = {"i": 0}

    def step() -> None:
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        losses.append(train(x, y))

    timing.reset_peak_memory(device)
    before = dynamo_times()
    t0 = time.perf_counter()
    try:
        step()  # the compiling step (lazy: torch.compile compiles on the first call)
        timing.synchronize(device)
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as exc:  # noqa: BLE001
        if mode == "eager":
            raise
        raise CompileFailed(f"compiling {model_name} with mode={mode!r} failed at the first step: "
                            f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
                            ) from exc
    first_ms = (time.perf_counter() - t0) * 1000.0
    times = timing.time_steps(step, steps=steps, warmup=compile_steps - 1, device=device)
    after = dynamo_times()
    m: dict[str, Any] = {**times.metrics(batch_size), "first_step_ms": round(first_ms, 3),
                         "peak_mem_mb": timing.peak_memory_mb(device)}
    if mode != "eager":
        dyn = compile_seconds(before, after)
        m["compile_s"] = dyn if dyn is not None else round((first_ms - times.median) / 1000.0, 3)
        m["compile_time_source"] = "dynamo metrics" if dyn is not None else "first-step wall time minus a steady step"
        m.update(graph_counters())
    curve = [float(v) for v in torch.stack(losses).float().cpu()]
    m["final_loss"] = round(curve[-1], 6)
    if keep_losses:
        m["losses"] = curve
    m["step_times_ms"] = [round(t, 3) for t in times.times_ms]
    if keep is not None:
        keep["step"] = step
    return m


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
            s.update(peak_mem_mb=m.get("peak_mem_mb"), compile_s=m.get("compile_s"))
            if base is not None:
                b_ms, c_ms = meds(base, m)
                s["speedup"] = round(b_ms / c_ms, 3)
                if c["mode"] != "eager":
                    p = loss_parity(base["losses"], m["losses"], rtol, atol)
                    s["loss_match"], s["max_rel_loss_diff"] = p["match"], p["max_rel_diff"]
                    s["break_even_steps"] = break_even_steps(m.get("compile_s"), b_ms, c_ms)
        out.append(s)
    return out
