"""The arithmetic of ``04_torch_compile``'s tables: break-even steps, whole-run time, loss parity, and the
per-cell speed-up table (each compiled cell against the eager cell of the same model, precision and batch)."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from ...measure.compare import compare

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
    """Compare two loss curves step by step (``measure.compare``): ``|a - b| <= atol + rtol * |a|`` at every step."""
    if len(reference) != len(other) or not reference:
        return {"match": False, "max_abs_diff": None, "max_rel_diff": None,
                "why": f"curves differ in length ({len(reference)} vs {len(other)})"}
    c = compare(list(reference), list(other), rtol=rtol, atol=atol)
    return {"match": c["close"], "max_abs_diff": c["max_abs_diff"], "max_rel_diff": c["max_rel_diff"], "why": ""}


def speedup_table(rows: Sequence[Mapping[str, Any]], rtol: float, atol: float = 0.0) -> list[dict[str, Any]]:
    """Per cell: speed-up over the eager cell of the same model/precision/batch, parity, break-even."""
    def meds(base, m):
        """Eager and cell median step times (the statistic the notebook's comparisons take the ratio of): from the
        same interleaved window when measured, else the sequential ones."""
        for e_key, c_key in (("interleaved_eager_ms_median", "interleaved_ms_median"),):
            if e_key in m and c_key in m:
                return m[e_key], m[c_key]
        for key in ("interleaved_ms_median", "step_ms_median"):
            if key in base and key in m:
                return base[key], m[key]
        raise KeyError("no step time on both sides")

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
            s.update(step_ms=m["step_ms_median"], step_mean_ms=m.get("step_ms_mean"), iqr_ms=round(m["step_ms_p75"] - m["step_ms_p25"], 3))
            if "interleaved_ms_median" in m:
                s.update(interleaved_ms=m["interleaved_ms_median"], interleaved_mean_ms=m.get("interleaved_ms_mean"),
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


