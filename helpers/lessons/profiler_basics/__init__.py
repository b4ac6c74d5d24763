"""Notebook 01's lesson code. The profiler idiom itself (``torch.profiler.profile`` and ``key_averages().table()``)
stays in the notebook, where it is taught.

- ``model``     the small CNN and the labelled step it profiles (``build``); the ops each call of a step runs
- ``readings``  labels vs operators, the phase table, sentence and chart (with each phase's spread over the recorded
                steps), the backward's wait chain, the top operator, the ``profiled_step`` metrics, the results table
- ``tables``    ``key_averages()`` tables that do not wrap (text where it fits, else a DataFrame); the three orders
                of one table, with each top row's level in the call tree, and what they put on top
- ``costs``     the profiler's overhead and the two timers, each measured in alternation; every step time the
                notebook shows, side by side, and why they differ
- ``panel``     the panel's validator and experiment (``run_profiled_step``)
"""
from .model import SmallCNN, build, count_parameters, ops_per_step
from .readings import (
    CHAIN, PHASES, chain_table, is_label, phase_calls, phase_chart, phase_sentence, phase_view, profiled_step_metrics,
    results_view, top_op,
)
from .tables import (
    NAME_WIDTH, WIDTH, averages_frame, call_levels, fits, orders_claims, orders_sentence, ordinal, show_table,
    three_orders,
)
from .costs import (
    async_reference, figures_sentence, figures_table, overhead_rounds, round_clock, timer_chart, timer_metrics,
    timer_rounds,
)
from .panel import NOTEBOOK, run_profiled_step, validate_panel
