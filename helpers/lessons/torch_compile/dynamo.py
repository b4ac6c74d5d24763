"""Dynamo and Inductor bookkeeping for ``04_torch_compile``: compile time from Dynamo's own timers, graph and
cache counters, a fresh Inductor cache, the TF32 settings a row ran with, random-number parity on CUDA, the
``graph_breaks``/``recompiles`` logs captured, and ``explain`` boiled down."""
from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from ...measure.device import is_cuda

# Dynamo's timers that together cover a training compile: the traced frames (which compile
# the forward graph) and the backward graph, compiled lazily at the first backward().
COMPILE_TIMERS = ("_compile.compile_inner", "compile_fx.<locals>.bw_compiler")


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


