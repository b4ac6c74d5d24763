"""Harness of notebook ``01_profiler_basics`` (the profiler calls are in its cells): ``model``, ``experiment``
(alternating runs, the panel's experiment), ``views`` (tables, charts) and ``checks`` (the lesson's claims)."""

from .model import SmallCNN
from .experiment import *  # noqa: F403 - the tests also reach is_label
from .views import *  # noqa: F403 - and averages_frame, call_levels, NAME_WIDTH, WIDTH
from . import experiment, views

__all__ = [  # what the notebook calls
    "SmallCNN",
    "NOTEBOOK",
    "kernel_times",
    "overhead_rounds",
    "reference_run",
    "run_profiled_step",
    "time_guard",
    "timer_rounds",
    "top_op",
    "validate_panel",
    "article_table",
    "orders_table",
    "phase_calls",
    "phase_chart",
    "reference_timers",
    "results_view",
    "fits",
    "show_table",
    "step_figures",
]
