"""Notebook 03's claims, data beside the lesson (docs/results.md, "checks"): each an id, a sentence and a rule over
the figures a run recorded. The notebook's closing cell evaluates them; ``tests/lessons/test_claims.py`` evaluates
them on the H100 reference."""

from __future__ import annotations

from ...notebook.checks import Claim, Facts, NotMeasured, on_gpu
from .experiment import MATRIX, matrix_name

NOTEBOOK = "03_backward_hooks"


def on_cpu(facts: Facts) -> bool:
    return not facts.gpu


def matrix(facts: Facts) -> list:
    """The four matrix profiles' metrics (``NotMeasured`` if one failed)."""
    return [facts.row(matrix_name(d, m))["metrics"] for d, m in MATRIX]


def fixed(facts: Facts) -> list:
    return [facts.row(matrix_name(d, "indexing"))["metrics"] for d in (True, False)]


def labelled_once(facts: Facts) -> bool:
    ranges = facts.note("module_ranges_per_step")
    return set(ranges) == set(facts.note("modules_run_forward")) | {"loss"} and all(
        n == 1 for n in ranges.values()
    )


def inplace(facts: Facts) -> bool:
    outcome = facts.note("inplace_outcome")
    return (
        outcome["full hooks"].startswith("RuntimeError") and outcome["tensor hooks"] == "labelled"
    )


def with_stack(facts: Facts) -> bool:
    origin = facts.note("gather_backward_origin")
    call_from = str(origin.get("call_from"))
    return origin["forward_op"] == "aten::gather" and call_from.startswith(
        "timm/layers/patch_dropout.py"
    )


def equivalent(facts: Facts) -> bool:
    row = "equivalence gather vs indexing"
    return facts.metric(row, "loss_close") is True and facts.metric(row, "grads_close") is True


def gather_gone(facts: Facts) -> bool:
    return all(
        f["gather_backward_calls"] == 0 and f["index_backward_calls"] > 0 for f in fixed(facts)
    )


def one_label(facts: Facts) -> bool:
    steps = facts.note("profiled_steps")
    return all(f["backward_phases"] == steps for f in matrix(facts))


def fix_syncs(facts: Facts) -> bool:
    det = {m: facts.metric(matrix_name(True, m), "syncs_per_step") for m in ("gather", "indexing")}
    return det["indexing"] <= det["gather"]


def no_cpu_sync(facts: Facts) -> bool:
    return all(
        f["syncs_per_step"] == 0 and f["sync_gpu_idle_per_step_ms"] == 0 for f in matrix(facts)
    )


def det_changes(facts: Facts) -> bool:
    return len(facts.note("deterministic_changed")) > 0


def ops_under(facts: Facts) -> dict:
    under = facts.note("gather_backward_ops")
    if not under.get("default"):
        raise NotMeasured("no GatherBackward0 in the default-mode profile")
    return under


def rerouted(facts: Facts) -> bool:
    under = ops_under(facts)
    return under["default"] != under["deterministic"]


def same_ops(facts: Facts) -> bool:
    under = ops_under(facts)
    return under["default"] == under["deterministic"]


def fix_cmp(facts: Facts) -> dict:
    return facts.comparison("det gather", "det indexing")


def fix_not_slower(facts: Facts) -> bool:
    c = fix_cmp(facts)
    return facts.direction("det gather", "det indexing") != "slower" or c["verdict"].endswith(
        "small"
    )


def fix_no_difference(facts: Facts) -> bool:
    c = fix_cmp(facts)
    return facts.direction("det gather", "det indexing") is None or c["verdict"].endswith("small")


def same_step_alike(facts: Facts) -> bool:
    means = facts.note("det_gather_step_ms").values()
    if len(means) < 2:
        raise NotMeasured("fewer than two timings of the deterministic gather step")
    return max(means) / min(means) <= 1.4


def bad_input(facts: Facts) -> bool:
    rows = [r for r in facts.doc.get("experiments", []) if r["name"].startswith("expected failure")]
    if not rows:
        raise NotMeasured("no bad-input rows")
    return all(r["status"] == "failed" and r["error"] and "\n" not in r["error"] for r in rows)


CLAIMS = [
    Claim(
        "full_hooks_refuse_inplace_downstream",
        "on torchvision's ResNet-18 full backward hooks fail in backward (an in-place op downstream); "
        "the labels on tensors give every module call of the same model one range",
        inplace,
    ),
    Claim(
        "every_module_labelled_once_per_step",
        "every module of the ViT that ran forward has exactly one backward range per profiled step",
        labelled_once,
    ),
    Claim(
        "with_stack_links_gather_to_timm",
        "with_stack links GatherBackward0 to aten::gather in timm's patch_dropout.py",
        with_stack,
    ),
    Claim(
        "indexing_matches_gather_loss_and_grads",
        "indexing PatchDropout gives the same loss and gradients as timm's",
        equivalent,
    ),
    Claim(
        "gather_gone_from_fixed_backward",
        "GatherBackward gone from the fixed model's backward (IndexBackward0 instead)",
        gather_gone,
    ),
    Claim(
        "one_backward_label_per_profiled_step",
        "every matrix trace holds one host-side `backward` label per profiled step",
        one_label,
    ),
    Claim(
        "fix_syncs_no_more_than_gather_det",
        "in deterministic mode the indexing fix synchronises no more often per backward than timm's gather",
        fix_syncs,
        applies=on_gpu,
    ),
    Claim(
        "no_sync_in_cpu_traces",
        "no host-device synchronisation in any of the four CPU traces",
        no_cpu_sync,
        applies=on_cpu,
    ),
    Claim(
        "det_mode_changes_op_counts",
        "deterministic mode changed the calls or time of at least one op in the gather model's trace",
        det_changes,
    ),
    Claim(
        "det_mode_reroutes_gather_backward",
        "deterministic mode reroutes GatherBackward0 on the GPU (other ops under it, fills aside)",
        rerouted,
        applies=on_gpu,
    ),
    Claim(
        "cpu_gather_backward_same_ops_fills_aside",
        "on a CPU GatherBackward0 runs the same ops in both modes (fills aside)",
        same_ops,
        applies=on_cpu,
    ),
    Claim(
        "det_fix_not_slower",
        "in deterministic mode the indexing fix makes the step no more than a little slower than gather",
        fix_not_slower,
        applies=on_gpu,
    ),
    Claim(
        "det_fix_no_difference_on_cpu",
        "on a CPU the fix makes no difference beyond a small one in deterministic mode (no sync to remove)",
        fix_no_difference,
        applies=on_cpu,
    ),
    Claim(
        "cpu_same_step_reads_alike",
        "on process CPU time the deterministic gather step reads within 40% in the three sections that time it",
        same_step_alike,
        applies=on_cpu,
    ),
    Claim(
        "bad_input_becomes_failed_row",
        "bad input becomes a failed row with a one-line message",
        bad_input,
    ),
]
