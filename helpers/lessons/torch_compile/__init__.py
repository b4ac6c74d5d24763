"""Notebook ``04_torch_compile``'s harness: ``experiment`` (cells timed, the matrix with interleaved rounds and
comparisons, the next levers, a profiled pair), ``dynamo`` (compile-time and cache bookkeeping, ``explain``,
fresh-process starts), ``views`` (tables, the article's table), ``checks`` (the lesson's claims)."""

from .dynamo import ARTICLE_MODELS, article_model, cold_warm_start, explain_model, tf32_settings
from .dynamo import use_inductor_cache
from .experiment import cell_name, profile_pair, refusals, run_matrix, run_variants
from .views import article_rows, matrix_table, profiled_vs_timed, rows_table, starts_table
from .views import swin_t_reversal

__all__ = [
    "ARTICLE_MODELS",
    "article_model",
    "cold_warm_start",
    "explain_model",
    "tf32_settings",
    "use_inductor_cache",
    "cell_name",
    "profile_pair",
    "refusals",
    "run_matrix",
    "run_variants",
    "article_rows",
    "matrix_table",
    "profiled_vs_timed",
    "rows_table",
    "starts_table",
    "swin_t_reversal",
]
