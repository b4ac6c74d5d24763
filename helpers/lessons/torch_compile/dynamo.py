"""Dynamo and Inductor bookkeeping for notebook 04: compile time, graph and cache counters, a fresh Inductor cache, TF32
settings, ``explain`` on the article's models, cold and warm starts in fresh processes."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ...notebook.env import project_root

# Dynamo's timers that together cover a training compile: the traced frames (the forward graph) and the backward
# graph, compiled lazily at the first backward()
COMPILE_TIMERS = ("_compile.compile_inner", "compile_fx.<locals>.bw_compiler")
ARTICLE_MODELS = ("swin_t", "swin_b", "convnext_large", "swin_mini", "convnext_mini")


def dynamo_times() -> dict[str, float]:
    """Dynamo's cumulative compile-time metrics (seconds per timer) so far in this process ({} if the API moved)."""
    try:
        from torch._dynamo.utils import compile_times

        headers, values = compile_times(repr="csv", aggregate=True)
        return {h: float(v) for h, v in zip(headers, values)}
    except Exception:  # noqa: BLE001
        return {}


def compile_seconds(before: dict[str, float], after: dict[str, float]) -> float | None:
    """Compile time between two ``dynamo_times()`` snapshots; None when Dynamo reported nothing."""
    total = sum(after[k] - before.get(k, 0.0) for k in COMPILE_TIMERS if k in after)
    return round(total, 3) if total > 0 else None


def graph_counters() -> dict[str, int]:
    """Since Dynamo's counters were cleared: graphs, breaks, FX cache hits and misses, cudagraph skips."""
    from torch._dynamo.utils import counters

    ind = counters["inductor"]
    return {
        "graphs": int(counters["stats"].get("unique_graphs", 0)),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "cudagraph_skips": int(ind.get("cudagraph_skips", 0)),
        "fx_graph_cache_hits": int(ind.get("fxgraph_cache_hit", 0)),
        "fx_graph_cache_misses": int(ind.get("fxgraph_cache_miss", 0)),
    }


def use_inductor_cache(path: str | os.PathLike) -> Path:
    """Point Inductor at ``path``, emptied, forgetting compiled code: the next compile starts cold."""
    p = Path(path)
    shutil.rmtree(p, ignore_errors=True)
    p.mkdir(parents=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(p)
    # Inductor sets it at its first Triton kernel: re-derived from p
    os.environ.pop("TRITON_CACHE_DIR", None)
    torch._dynamo.reset()
    from torch._inductor import codecache

    names = ("PyCodeCache", "CppCodeCache", "CppPythonBindingsCodeCache", "CppWrapperCodeCache")
    for name in names:  # the compiled code this process holds in memory
        getattr(getattr(codecache, name, None), "cache_clear", lambda: None)()
    return p


def tf32_settings() -> dict[str, Any]:
    """What fp32 matrix products and convolutions may use (TF32 on Ampere/Hopper), recorded in every row."""
    return {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
    }


def article_model(name: str, num_classes: int = 10) -> torch.nn.Module:
    """The article's models (random weights), or ``swin_mini`` / ``convnext_mini`` of the same classes."""
    import torchvision
    from torchvision.models import convnext, swin_transformer

    if name == "swin_mini":
        return swin_transformer.SwinTransformer(
            [4, 4], 32, [2, 2], [2, 4], [4, 4], stochastic_depth_prob=0.2, num_classes=num_classes
        )
    if name == "convnext_mini":
        return convnext.ConvNeXt(
            [convnext.CNBlockConfig(32, 64, 2), convnext.CNBlockConfig(64, None, 2)],
            stochastic_depth_prob=0.2,
            num_classes=num_classes,
        )
    if name not in ARTICLE_MODELS:
        raise ValueError(f"unknown article model {name!r}; choose one of {ARTICLE_MODELS}")
    return torchvision.models.get_model(name, weights=None, num_classes=num_classes)


def explain_model(name: str, image_size: int, device=None, batch_size: int = 2) -> dict[str, Any]:
    """``torch._dynamo.explain`` of a model's forward: graphs, breaks, ops, each break's reason and line."""
    t0 = time.perf_counter()
    model = article_model(name).to(device).train()
    torch._dynamo.reset()
    x = torch.randn(batch_size, 3, image_size, image_size, device=device)
    out = torch._dynamo.explain(model)(x)
    torch._dynamo.reset()
    reasons = []
    for r in out.break_reasons:
        reason = str(r.reason).strip().splitlines()[0][:160]
        where = r.user_stack[-1] if r.user_stack else None
        reasons.append(
            f"{reason} at {Path(where.filename).name}:{where.lineno}" if where else reason
        )
    return {
        "graphs": out.graph_count,
        "graph_breaks": out.graph_break_count,
        "ops": out.op_count,
        "reasons": reasons,
        "explain_s": round(time.perf_counter() - t0, 2),
    }


# -- cold and warm starts in fresh processes ---------------------------------------------------------------------
def start_child(spec: dict[str, Any]) -> dict[str, Any]:
    """One fresh process's work: a small MLP's compiled step, first steps timed; compile time, cache counters."""
    from torch._dynamo.utils import counters

    device = torch.device(spec.get("device", "cpu"))
    torch.manual_seed(0)
    d, h, b = 3 * spec["image_size"] ** 2, spec["hidden"], spec["batch_size"]
    model = torch.nn.Sequential(torch.nn.Linear(d, h), torch.nn.ReLU(), torch.nn.Linear(h, 10))
    model = torch.compile(model.to(device))
    opt = torch.optim.RAdam(model.parameters())
    x, y = torch.randn(b, d, device=device), torch.randint(0, 10, (b,), device=device)
    counters.clear()
    before, first = dynamo_times(), []
    for _ in range(spec["compile_steps"]):
        t0 = time.perf_counter()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        first.append(time.perf_counter() - t0)
    g = graph_counters()
    return {
        "compile_s": compile_seconds(before, dynamo_times()),
        "first_steps_s": round(sum(first), 3),
        "fx_graph_cache_hits": g["fx_graph_cache_hits"],
        "fx_graph_cache_misses": g["fx_graph_cache_misses"],
    }


def start_run(cache_dir: str | os.PathLike, timeout: float = 600, **spec: Any) -> dict[str, Any]:
    """``start_child`` in a new process with its own Inductor cache, plus ``process_s`` (whole process)."""
    root = project_root()
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(cache_dir),
        "PYTHONPATH": os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    # an inherited Triton cache would make the cold start warm
    for k in ("TORCH_LOGS", "TRITON_CACHE_DIR"):
        env.pop(k, None)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "helpers.lessons.torch_compile", json.dumps(spec)],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        err = [ln for ln in proc.stderr.splitlines() if ln.strip()] or ["no output"]
        raise RuntimeError(f"the fresh process failed (exit {proc.returncode}): {err[-1][:300]}")
    return {**json.loads(lines[-1]), "process_s": round(time.perf_counter() - t0, 3)}


def cold_warm_start(cache_dir: str | os.PathLike, **spec: Any) -> dict[str, Any]:
    """``start_run`` twice on one cache folder, emptied first: the metrics suffixed ``_cold`` and ``_warm``."""
    p = Path(cache_dir)
    shutil.rmtree(p, ignore_errors=True)
    p.mkdir(parents=True)
    return {
        f"{k}_{which}": v for which in ("cold", "warm") for k, v in start_run(p, **spec).items()
    }
