"""Notebook 04's matrix: ``models``, ``cells`` (one training run per model × precision × mode), ``dynamo`` (compile
time, counters, logs, caches), ``tables`` (speed-ups, parity, break-even), ``starts`` (cold and warm fresh processes),
``harness`` (the matrix under its time budget, interleaved re-timing, explain, the profiled pair, TensorBoard logging),
``report`` (the notebook's tables from its rows), ``charts`` (its figures)."""

from .models import (
    MODELS, MINI, ClampMLP, GatedMLP, validate_model, build_model, build_small, synthetic_batches,
)
from .dynamo import (
    COMPILE_TIMERS, dynamo_times, compile_seconds, graph_counters, use_inductor_cache, tf32_settings,
    random_parity, dynamo_logs, quiet_known_noise, explain_summary,
)
from .cells import (
    CompileFailed, check_cell, run_cell, profile_cell, cell_name, record_cell,
)
from .tables import (
    break_even_steps, break_even_whole_run, whole_run_s, loss_parity, speedup_table,
)
from .starts import (
    start_run, cold_warm_start,
)
from .harness import (
    run_matrix, progress_line, interleave, explain_model, record_explains, profile_metrics, profile_pair,
    record_starts, log_to_tensorboard,
)
from .report import (
    ARTICLE, summary_frame, timing_basis, matrix_view, compiled_cells, best_cell_line, compile_time_frame,
    memory_frame, memory_line, graph_break_frame, graph_break_lines, speedup_comparison, profiled_line, ARTICLE_SOURCE, explain_frame, explain_reasons, starts_frame,
    starts_line, profiled_frame, article_side_table, final_view,
)
from .charts import (
    matrix_chart, article_chart,
)
