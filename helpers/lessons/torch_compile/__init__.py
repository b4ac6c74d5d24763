"""Notebook ``04_torch_compile``'s harness: ``experiment`` (cells timed, the matrix with interleaved rounds and
comparisons, a profiled pair), ``dynamo`` (compile-time and cache bookkeeping, ``explain``, fresh-process starts),
``views`` (tables, chart)."""

from .dynamo import (
    ARTICLE_MODELS,
    article_model,
    cold_warm_start,
    compile_seconds,
    dynamo_times,
    explain_model,
    graph_counters,
    tf32_settings,
    use_inductor_cache,
)
from .experiment import (
    break_even_whole_run,
    cell_name,
    derive,
    profile_pair,
    run_cell,
    run_matrix,
    whole_run,
)
from .views import (
    ARTICLE,
    chart_data,
    compute_share,
    matrix_table,
    memory_entry,
    rows_table,
    speedup_chart,
    starts_table,
    whole_run_rows,
)

__all__ = [
    "ARTICLE_MODELS",
    "article_model",
    "cold_warm_start",
    "compile_seconds",
    "dynamo_times",
    "explain_model",
    "graph_counters",
    "tf32_settings",
    "use_inductor_cache",
    "break_even_whole_run",
    "cell_name",
    "derive",
    "profile_pair",
    "run_cell",
    "run_matrix",
    "whole_run",
    "ARTICLE",
    "chart_data",
    "compute_share",
    "matrix_table",
    "memory_entry",
    "rows_table",
    "speedup_chart",
    "starts_table",
    "whole_run_rows",
]
