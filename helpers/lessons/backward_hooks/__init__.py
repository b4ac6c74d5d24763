"""Notebook 03's backward labels: ``markers`` (the before/after markers, ``HookError``), ``labels`` (full backward
hooks, ``label_modules``), ``graph_labels`` (autograd graph hooks), ``spans`` (markers to spans and tables),
``patch_dropout`` (the fix: kept patches by indexing; where timm selects them), ``determinism`` (what deterministic
mode changed in a profile; the ops under a backward node, nested), ``harness`` (the ViT step built, timed and
profiled per configuration, its trace read; the matrix profiled and timed in interleaved rounds; equivalence before
timing), ``readings`` (the two-clocks, per-module, matrix and results tables, the matrix's comparisons and the
results chart), ``findings`` (this run's findings in words, whether the article's hotspot is this machine's, and a
reference GPU run's figures), ``demos`` (where hooks stop working; the CUDA sync-debug warnings)."""

from .markers import (
    BEFORE, AFTER, ROOT_NAME, HookError, label, emit, is_compiled, refuse_compiled, inplace_modules, explain,
    clear_hook_errors, probe, select_modules, remove,
)
from .labels import (
    backward_hook_wrapper, end_after_param_grads, label_modules, label_all_modules_globally,
)
from .graph_labels import (
    GraphLabels,
)
from .spans import (
    label_pairs, label_order, backward_table, forward_completion_order,
)
from .patch_dropout import (
    METHODS, keep_indices, select_by_gather, select_by_index, IndexingPatchDropout, set_patch_dropout,
    timm_selection_code,
)
from .determinism import (
    op_diff, ops_under, ops_tree, format_tree, same_ops_fills_aside,
)
from .harness import (
    SELECT_NODE, MATRIX, Lab, validate_config, config_name, matrix_name, trace_metrics, under_deterministic,
)
from .readings import (
    DEVICE_ONLY_COLS, MATRIX_COLS, MATRIX_DEVICE_COLS, KIND_COLS, FIX_PAIR, GPU_PAIRS, two_clocks, node_clocks,
    label_pair_check, top_modules, describe_origin, gather_from_timm, module_view, informative, matrix_frame,
    interleaved_frame, compare_matrix, results_table, runs_table, results_chart,
)
from .findings import (
    clocks_finding, children_finding, hot_path, path_finding, comparison_lines, reference_line, gpu_only,
)
from .demos import (
    HOOK_DEMOS, inplace_model, try_hook, sync_debug_warnings,
)
