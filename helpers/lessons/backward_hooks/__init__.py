"""The helpers of notebook ``03_backward_hooks``: ``experiment`` (runs), ``views`` (tables, chart), ``checks`` (its
claims) and ``patch_dropout`` (the fix). The hooks and deterministic switch are in the notebook's cells."""

from .experiment import MATRIX, Lab, matrix_name, trace_metrics, validate_config
from .patch_dropout import METHODS, IndexingPatchDropout
from .views import (
    PREFIX,
    article_rows,
    matrix_counts,
    matrix_table,
    module_table,
    ops_under,
    results_chart,
    runs_table,
    stack_line,
    trace_diff,
    two_clocks,
)

__all__ = [
    "MATRIX",
    "Lab",
    "matrix_name",
    "trace_metrics",
    "validate_config",
    "METHODS",
    "IndexingPatchDropout",
    "PREFIX",
    "article_rows",
    "matrix_counts",
    "matrix_table",
    "module_table",
    "ops_under",
    "results_chart",
    "runs_table",
    "stack_line",
    "trace_diff",
    "two_clocks",
]
