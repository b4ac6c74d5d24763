"""Notebook 05's harness around the planted steps (``make_step(kind, size, item=True)``, written in the notebook):
validation, profiled cases as rows, plants against fixes, claims beside savings."""

import contextlib
import gzip
import numbers
import os
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from ...measure.compare import resolved
from ...measure.profiling import diagnose_step
from ...measure.profiling import trace_files
from ...measure.timing import interleaved_times
from ...measure.validate import InvalidValue, validate_choice, validate_positive

PLANTED = ("none", "input", "launch/overhead", "compute", "host sync")
# the largest sizes, where a profile of ~10 steps takes minutes (64 x 100 ms: 6.4 s a step)
LIMITS = {
    "input": (100, "ms per sample"),
    "launch/overhead": (20_000, "tiny ops"),
    "compute": (16_384, "as a matrix side"),
    "host sync": (5_000, "ms per step"),
}
FIXED = "nothing planted"


def validate_size(kind: str, size: Any) -> int | float:
    """A plant's size: positive, within ``LIMITS``, whole where it counts ops or a side (``InvalidValue``)."""
    validate_positive(size, "the size")
    whole = kind in ("launch/overhead", "compute")
    if whole and size != int(size):
        raise InvalidValue(
            f"the size of a {kind} plant counts ops or a matrix side: a whole number, not {size!r}."
        )
    if kind in LIMITS and size > LIMITS[kind][0]:
        raise InvalidValue(
            f"a {kind} plant above {LIMITS[kind][0]:,} {LIMITS[kind][1]} takes hours or GBs; go lower."
        )
    return int(size) if whole else float(size)


def validate_panel(values: Mapping[str, Any], on_gpu: bool) -> dict[str, Any]:
    """The panel's values: a known plant, a valid size, no host-sync plant without a GPU."""
    kind = validate_choice(values["kind"], PLANTED, "planted bottleneck")
    size = validate_size(kind, values["size"])
    if kind == "host sync" and not on_gpu:
        raise InvalidValue(
            "a host sync needs a GPU to wait for; on a CPU choose another bottleneck."
        )
    return {"kind": kind, "size": size}


def case_name(kind: Any, size: Any, item: bool = True) -> str:
    """A case's row name (``planted compute (size 768)``); never raises, whatever the values."""
    if not isinstance(kind, str) or kind not in PLANTED:
        return f"unknown bottleneck {kind!r}"
    shown = (
        f"{size:g}" if isinstance(size, numbers.Real) and not isinstance(size, bool) else repr(size)
    )
    return f"planted {kind} (size {shown})" + ("" if item else " without .item()")


def fix_name(kind: str, size: Any) -> str:
    """What a plant is timed against: the step with nothing planted; for the host sync, its step without ``.item()``."""
    return case_name(kind, size, item=False) if kind == "host sync" else FIXED


def causes_metrics(d) -> dict[str, Any]:
    """A diagnosis as a row's metrics: mean step, top cause, ms of each judged cause, their sum, the trace folder."""
    judged = {f"{c['cause']}_ms": c["ms"] for c in d.causes if c["ms"] is not None}
    m = {
        "step_ms_mean": d.step_ms,
        "top_cause": d.top,
        **judged,
        "causes_ms_sum": round(sum(judged.values()), 3),
    }
    see = next((c.get("see") for c in d.causes if c["cause"] == d.top), None)
    if see:  # the doctor's advice for its top cause (it depends on the trace: GPU or CPU-only)
        m["top_see"] = see
    if d.gpu_idle_share is not None:  # a GPU trace: the bound label read from the GPU's idle time
        m |= {"gpu_idle_share": round(d.gpu_idle_share, 4), "bound": d.bound}
    return m | ({"trace_dir": str(d.trace_dir)} if d.trace_dir is not None else {})


def record_diagnosis(
    results, name: str, config: Mapping[str, Any], diagnosed: Callable[[], Any], budget=None
):
    """``diagnosed()`` as the row ``name`` (a failure or the budget: a failed row); it, or None."""
    out = {}

    def experiment():
        out["d"] = diagnosed()
        return causes_metrics(out["d"])

    run = budget.wrap(experiment) if budget is not None else experiment
    return out.get("d") if results.record(name, config, run)["status"] == "ok" else None


def run_case(
    results,
    make_step: Callable,
    kind: Any,
    size: Any,
    item: bool = True,
    *,
    budget=None,
    **profile,
):
    """Plant one bottleneck, profile and diagnose it (``diagnose_step(**profile)``) as a results row (bad input: a
    failed row); or None."""
    device = profile["device"]
    config = {"planted": kind, "size": size, "device": str(getattr(device, "type", device))}
    if not item:
        config["item"] = False

    def diagnosed():
        step = make_step(
            validate_choice(kind, PLANTED, "planted bottleneck"),
            validate_size(kind, size),
            item=item,
        )
        return diagnose_step(step, name=f"05_diagnose/{kind}", **profile)

    return record_diagnosis(results, case_name(kind, size, item), config, diagnosed, budget)


def time_steps(
    results, steps: Mapping[str, Callable], *, rounds: int, untimed: int, device, budget=None
):
    """``steps`` timed unprofiled in interleaved rounds as rows ``timed: <name>`` ({} past the budget)."""
    from ...notebook.budget import OverBudget

    # on a CPU timed by CPU time, which other load does not stretch
    config = {"rounds": rounds, "profiled": False}
    try:
        with budget.limit() if budget is not None else contextlib.nullcontext():
            timed = interleaved_times(steps, rounds, device=device, warmup=untimed, cpu_time=True)
    except OverBudget as exc:
        for n in steps:
            results.add(f"timed: {n}", config, status="failed", error=f"OverBudget: {exc}")
        return {}
    for n, t in timed.items():
        results.add(f"timed: {n}", config, t.metrics())  # the step statistics every notebook writes
    return timed


def measure_fixes(
    results,
    make_step: Callable,
    sizes: Mapping[str, Any],
    *,
    rounds: int,
    untimed: int,
    device,
    budget=None,
):
    """Time each plant and its fix (``time_steps``) and compare them: ``{kind: comparison}`` ({}: budget spent)."""
    steps, pairs = {}, {}
    for kind, size in sizes.items():
        pairs[kind] = a, b = case_name(kind, size), fix_name(kind, size)
        steps[a] = make_step(kind, size)
        if b not in steps:
            steps[b] = (
                make_step(kind, size, item=False) if kind == "host sync" else make_step("none", 1)
            )
    timed = time_steps(results, steps, rounds=rounds, untimed=untimed, device=device, budget=budget)
    return (
        {
            kind: results.compare_times(a, b, timed[a].times_ms, timed[b].times_ms)
            for kind, (a, b) in pairs.items()
        }
        if timed
        else {}
    )


def measure_split(
    results,
    make_step: Callable[..., Callable],
    plants: Mapping[str, Any],
    diagnosed: Callable[[], Any],
    *,
    rounds: int,
    untimed: int,
    device,
    budget=None,
):
    """The mixed plant's split: ``diagnosed()`` (its profile) as the row ``mixed plant: input + compute``, then the
    step ``make_step(**plants)`` timed against itself without its input and without its product (interleaved rounds,
    no profiler), each compared (a = the mixed step) and set beside the doctor's shares with ``saved_vs_claimed``;
    noted as ``mixed_split``. ``(table or None, the diagnosis or None)``."""
    config = dict(plants, device=str(getattr(device, "type", device)))
    mixed = record_diagnosis(results, "mixed plant: input + compute", config, diagnosed, budget)
    without = {"input": "mixed without input", "compute": "mixed without compute"}
    steps = {
        "mixed": make_step(**plants),
        without["input"]: make_step(**dict(plants, input_ms=0)),
        without["compute"]: make_step(**dict(plants, matmul=0)),
    }
    timed = time_steps(results, steps, rounds=rounds, untimed=untimed, device=device, budget=budget)
    if not timed or mixed is None:
        return None, mixed
    split = {
        c: results.compare_times("mixed", b, timed["mixed"].times_ms, timed[b].times_ms)
        for c, b in without.items()
    }
    table = saved_vs_claimed({c: mixed for c in split}, split)
    results.note("mixed_split", table.round(3).to_dict("records"))
    return table, mixed


def fix_and_measure(
    results, make_step: Callable, planted: Mapping[str, Any], sizes: Mapping[str, Any], **timing
):
    """Each plant that ran timed against its fix (``measure_fixes``) and its saving beside the doctor's claim
    (``saved_vs_claimed``, noted as ``claimed_vs_measured_saving``): ``(comparisons, that table)``."""
    ran = {k: sizes[k] for k, d in planted.items() if d is not None}
    fixes = measure_fixes(results, make_step, ran, **timing)
    saved = saved_vs_claimed(planted, fixes)
    results.note("claimed_vs_measured_saving", saved.round(3).to_dict("records"))
    return fixes, saved


def time_guard(params: Mapping[str, Any]):
    """The time guard of a full-scale run (``helpers.notebook.budget``; ``$PERF_TIME_BUDGET_S`` wins)."""
    from ...notebook.budget import Budget

    return Budget.from_env(params["budget_s"], reserve_s=params["reserve_s"])


def as_slowdown(c: Mapping[str, Any]) -> dict[str, Any]:
    """A plant-against-fix comparison turned round, to read as what the plant does ("... 43× slower")."""
    head, _, tail = str(c.get("verdict", "")).partition(",")
    return dict(
        c,
        a=c["b"],
        b=c["a"],
        ratio=1 / c["ratio"],
        low=1 / c["high"],
        high=1 / c["low"],
        verdict={"faster": "slower", "slower": "faster"}.get(head, head)
        + ("," + tail if tail else ""),
    )


def baseline_readings(metric: Callable[[str, str], Any]) -> dict[str, float | None]:
    """The unplanted step profiled and timed (mean, median); ``profiled_over_timed`` < 1: profiled was faster."""
    prof, mean = (
        metric(case_name("none", 1), "step_ms_mean"),
        metric(f"timed: {FIXED}", "step_ms_mean"),
    )
    return {
        "profiled_ms": prof,
        "timed_mean_ms": mean,
        "timed_median_ms": metric(f"timed: {FIXED}", "step_ms_median"),
        "profiled_over_timed": prof / mean if prof and mean else None,
    }


SAVED = [
    "planted",
    "claimed (ms)",
    "claimed share",
    "verdict",
    "saved (ms)",
    "saved share",
    "saved share low",
    "saved share high",
    "agrees",
    "rule",
]


def saved_vs_claimed(
    planted: Mapping[str, Any], fixes: Mapping[str, Mapping[str, Any]], agree: float = 0.10
):
    """Per plant: the doctor's claim (ms, share of the profiled step) and, where resolved, the unprofiled saving with
    its interval; ``agrees``: the claim within ``agree`` of that interval; ``rule``: the band it must lie in."""
    rows = []
    for kind, c in fixes.items():
        d = planted.get(kind)
        if d is None:
            continue
        claim = d.ms(kind) or 0.0
        row = dict.fromkeys(SAVED) | {
            "planted": kind,
            "claimed (ms)": claim,
            "claimed share": claim / d.step_ms,
            "verdict": c["verdict"],
        }
        if resolved(c):
            low, high = 1 - 1 / c["low"], 1 - 1 / c["high"]
            row |= {
                "saved (ms)": float(np.mean(c["samples"]["a"]) - np.mean(c["samples"]["b"])),
                "saved share": 1 - 1 / c["ratio"],
                "saved share low": low,
                "saved share high": high,
                "agrees": bool(low - agree <= row["claimed share"] <= high + agree),
                "rule": f"{max(low - agree, 0):.0%}–{min(high + agree, 1):.0%}",
            }
        rows.append(row)
    return pd.DataFrame(rows, columns=SAVED)


def gpu_idle_vs_hta(d, trace) -> dict[str, float]:
    """GPU idle % inside the steps by the doctor beside HTA's temporal breakdown."""
    from perf_doctor.views import open_trace, quiet

    with quiet():
        hta = open_trace(Path(trace)).gpu_breakdown()
    return {"doctor": round(100 * d.gpu_idle_share, 2), "hta": hta["idle_pct"]}


def reference_traces(root: Path | str) -> list[Path]:
    """The reference traces of this notebook under ``root``, sorted; none when missing."""
    root = Path(root)
    packed = (
        p
        for p in root.glob("*/05_diagnose/traces/**/*")
        if p.name.endswith((".pt.trace.json", ".json.gz"))
    )
    return sorted({*root.glob("*/05_diagnose/*.json.gz"), *packed})


def write_bad_inputs(folder: Path | str, trace_dir: Path | str | None = None) -> dict[str, Path]:
    """The appendix's bad inputs in ``folder``: a non-trace JSON, a truncated ``.gz``, an empty folder; their paths
    relative to the current folder (a notebook's), as the doctor's messages then name them."""
    folder = Path(folder)
    (folder / "empty").mkdir(parents=True, exist_ok=True)
    notes, cut = folder / "notes.json", folder / "cut.json.gz"
    notes.write_text("these are my notes, not a trace")
    files = trace_files(trace_dir) if trace_dir is not None else []
    whole = gzip.compress((files[-1] if files else notes).read_bytes())
    cut.write_bytes(whole[: len(whole) // 2])
    bad = {"not a trace": notes, "truncated gz": cut, "empty folder": folder / "empty"}
    return {what: Path(os.path.relpath(path)) for what, path in bad.items()}
