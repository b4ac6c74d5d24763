"""Notebook 03's backward labels: ``markers`` (the before/after markers, ``HookError``), ``labels`` (full backward
hooks, ``label_modules``), ``graph_labels`` (autograd graph hooks), ``spans`` (markers to spans and tables),
``patch_dropout`` (the fix: kept patches by indexing), ``determinism`` (what deterministic mode changed in a
profile)."""

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
)
from .determinism import (
    op_diff,
)
