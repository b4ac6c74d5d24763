"""The helpers of notebook ``03_backward_hooks``: ``experiment`` (the article's ViT step built, timed and profiled
per configuration; the matrix timed in interleaved rounds; equivalence before timing), ``views`` (the per-module,
two-clocks, what-deterministic-mode-changed and results tables, the with_stack line, the chart) and
``patch_dropout`` (the fix: kept patches selected by indexing). The hooks, the deterministic switch and the two
selections are written in the notebook's cells."""

from .experiment import MATRIX, SELECT_NODE, Lab, config_name, matrix_name, trace_metrics, validate_config
from .patch_dropout import METHODS, IndexingPatchDropout, select_by_index, set_patch_dropout
from .views import (PREFIX, matrix_table, module_table, ops_tree, reread, results_chart, runs_table, stack_line,
                    trace_diff,
                    two_clocks)

__all__ = ["MATRIX", "SELECT_NODE", "Lab", "config_name", "matrix_name", "trace_metrics", "validate_config",
           "METHODS", "IndexingPatchDropout", "select_by_index", "set_patch_dropout",
           "PREFIX", "matrix_table", "module_table", "ops_tree", "reread", "results_chart", "runs_table", "stack_line",
           "trace_diff", "two_clocks"]
