"""Harness of notebook ``01_profiler_basics`` (the profiler calls are in its cells): ``model``, ``experiment``
(alternating runs, the panel's experiment) and ``views`` (tables, charts)."""

from .model import SmallCNN
from .experiment import (
    NOTEBOOK,
    busy_within_span,
    is_label,
    kernel_times,
    kernels_intact,
    overhead_rounds,
    run_profiled_step,
    timer_rounds,
    top_op,
    validate_panel,
)
from .views import (
    NAME_WIDTH,
    WIDTH,
    averages_frame,
    call_levels,
    fits,
    orders_table,
    phase_calls,
    phase_chart,
    results_view,
    show_table,
    timer_chart,
)

__all__ = [
    "SmallCNN",
    "NOTEBOOK",
    "busy_within_span",
    "is_label",
    "kernel_times",
    "kernels_intact",
    "overhead_rounds",
    "run_profiled_step",
    "timer_rounds",
    "top_op",
    "validate_panel",
    "NAME_WIDTH",
    "WIDTH",
    "averages_frame",
    "call_levels",
    "fits",
    "orders_table",
    "phase_calls",
    "phase_chart",
    "results_view",
    "show_table",
    "timer_chart",
]
