"""Notebook ``05_diagnose`` teaches the doctor on planted bottlenecks (written in its cells). Here: ``experiment``
(validation, profiled cases, plants against fixes, claims against savings) and ``views``."""
from .experiment import (FIXED, LIMITS, PLANTED, advice_named_for_device, as_slowdown, baseline_readings, case_name,
                         causes_metrics, fix_name, gpu_idle_vs_hta, measure_fixes, record_diagnosis, reference_traces,
                         run_case, saved_vs_claimed, sync_found, time_steps, validate_panel, validate_size,
                         write_bad_inputs)
from .views import planted_table, results_view, verdicts_chart, verdicts_table

__all__ = ["FIXED", "LIMITS", "PLANTED", "advice_named_for_device", "as_slowdown", "baseline_readings", "case_name",
           "causes_metrics", "fix_name", "gpu_idle_vs_hta", "measure_fixes", "planted_table", "record_diagnosis",
           "reference_traces", "results_view", "run_case", "saved_vs_claimed", "sync_found", "time_steps",
           "validate_panel", "validate_size", "verdicts_chart", "verdicts_table", "write_bad_inputs"]
