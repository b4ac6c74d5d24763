"""Harness of notebook ``01_profiler_basics``, which teaches ``torch.profiler``: the profiler calls, the labelled
step and the timers are written in its cells; here are the model (``model``), the runs timed in alternation and the
panel's experiment (``experiment``), and its tables and charts (``views``)."""
from .model import SmallCNN
from .experiment import (
    NOTEBOOK, busy_within_span, is_label, kernel_times, kernels_intact, overhead_rounds, run_profiled_step,
    timer_rounds, top_op, validate_panel,
)
from .views import (
    NAME_WIDTH, WIDTH, averages_frame, call_levels, fits, orders_table, phase_calls, phase_chart, results_view,
    show_table, timer_chart,
)

__all__ = ["SmallCNN", "NOTEBOOK", "busy_within_span", "is_label", "kernel_times", "kernels_intact",
           "overhead_rounds", "run_profiled_step", "timer_rounds", "top_op", "validate_panel", "NAME_WIDTH", "WIDTH",
           "averages_frame", "call_levels", "fits", "orders_table", "phase_calls", "phase_chart", "results_view",
           "show_table", "timer_chart"]
