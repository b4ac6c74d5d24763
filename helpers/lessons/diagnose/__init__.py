"""Notebook ``05_diagnose`` teaches the doctor on planted bottlenecks (written in its cells). Here: ``experiment``
(validation, profiled cases, plants against fixes, claims against savings), ``views`` and ``checks`` (its claims)."""

from . import checks
from .experiment import (
    FIXED,
    LIMITS,
    PLANTED,
    as_slowdown,
    baseline_readings,
    case_name,
    causes_metrics,
    fix_and_measure,
    fix_name,
    gpu_idle_vs_hta,
    measure_fixes,
    measure_split,
    record_diagnosis,
    reference_traces,
    run_case,
    saved_vs_claimed,
    time_guard,
    time_steps,
    validate_panel,
    validate_size,
    write_bad_inputs,
)
from .views import bound_table, planted_table, results_view, shares_view
from .views import verdicts_chart, verdicts_table

# the notebook's names (the rest, for the tests, are importable too)
__all__ = [
    "LIMITS",
    "PLANTED",
    "as_slowdown",
    "baseline_readings",
    "bound_table",
    "causes_metrics",
    "checks",
    "fix_and_measure",
    "gpu_idle_vs_hta",
    "measure_split",
    "planted_table",
    "record_diagnosis",
    "reference_traces",
    "results_view",
    "run_case",
    "shares_view",
    "time_guard",
    "time_steps",
    "validate_panel",
    "verdicts_chart",
    "verdicts_table",
    "write_bad_inputs",
]
