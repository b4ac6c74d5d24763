"""Notebook 04 (``04_torch_compile``): the harness behind its open cells. ``experiment`` times a cell's training
step (first steps apart, steady steps), runs the matrix under the time budget with interleaved eager/compiled rounds
and their comparisons, and profiles an eager/compiled pair; ``dynamo`` holds compile-time and cache bookkeeping,
``explain`` on the article's models and the fresh-process starts; ``views`` the tables and the chart."""

from .dynamo import (
    ARTICLE_MODELS, article_model, cold_warm_start, compile_seconds, dynamo_times, explain_model, graph_counters,
    tf32_settings, use_inductor_cache,
)
from .experiment import break_even_whole_run, cell_name, derive, profile_pair, run_cell, run_matrix, whole_run
from .views import (
    ARTICLE, chart_data, compute_share, matrix_table, memory_entry, rows_table, speedup_chart, starts_table,
    whole_run_rows,
)

__all__ = ["ARTICLE_MODELS", "article_model", "cold_warm_start", "compile_seconds", "dynamo_times", "explain_model",
           "graph_counters", "tf32_settings", "use_inductor_cache", "break_even_whole_run", "cell_name", "derive",
           "profile_pair", "run_cell", "run_matrix", "whole_run", "ARTICLE", "chart_data", "compute_share",
           "matrix_table", "memory_entry", "rows_table", "speedup_chart", "starts_table", "whole_run_rows"]
