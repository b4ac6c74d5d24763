"""Cold and warm starts of a compiled cell in fresh processes (``04_torch_compile``): two new Python processes on
one on-disk Inductor cache, so what the second saves comes from the disk only.

``python -m helpers.lessons.torch_compile '{"model_name": ...}'`` (``child_main``) runs one cell and prints one JSON
line.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ...notebook.env import project_root
from .cells import CompileFailed, run_cell

ROOT = project_root()


def start_run(cache_dir: str | os.PathLike, model_name: str = "mlp_fixed", precision: str = "fp32",
              mode: str = "default", *, timeout: float = 600, **cell: Any) -> dict[str, Any]:
    """One compiled cell in a fresh Python process whose inductor cache is ``cache_dir``.

    Runs ``python -m helpers.lessons.torch_compile`` with ``TORCHINDUCTOR_CACHE_DIR=cache_dir``: nothing is
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
        proc = subprocess.run([sys.executable, "-m", "helpers.lessons.torch_compile", json.dumps(spec)], env=env,
                              cwd=ROOT, capture_output=True, text=True, timeout=timeout)
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


def child_main(argv: list[str]) -> None:
    """The fresh process: ``argv[0]`` is the cell's JSON spec; prints the metrics as one JSON line."""
    import warnings

    warnings.filterwarnings("ignore")  # the parent reads one JSON line; the child's warnings are not the lesson
    t0 = time.perf_counter()
    spec = json.loads(argv[0])
    spec.setdefault("device", "cpu")
    res = _child(spec)
    res["in_process_s"] = round(time.perf_counter() - t0, 3)
    print(json.dumps(res))
