"""Notebook 03's claims, data beside the lesson (docs/results.md, "checks"): each an id, a sentence and a rule over
the figures a run recorded. The notebook's closing cell evaluates them; ``tests/lessons/test_claims.py`` evaluates
them on the H100 reference."""

from __future__ import annotations

from ...notebook.checks import Claim, Facts, NotMeasured, on_gpu
from .experiment import MATRIX, matrix_name

NOTEBOOK = "03_backward_hooks"


def on_cpu(facts: Facts) -> bool:
    return not facts.gpu


def rows(facts: Facts, methods=("gather", "indexing")) -> list:
    """The matrix profiles' metrics (``NotMeasured`` if one failed)."""
    return [facts.row(matrix_name(d, m))["metrics"] for d, m in MATRIX if m in methods]


def labelled_once(facts: Facts) -> bool:
    ranges, ran = facts.note("module_ranges_per_step"), facts.note("modules_run_forward")
    return set(ranges) == set(ran) | {"loss"} and all(n == 1 for n in ranges.values())


def ops_under(facts: Facts) -> dict:
    under = facts.note("gather_backward_ops")
    if not under.get("default"):
        raise NotMeasured("no GatherBackward0 in the default-mode profile")
    return under


def fix_small(facts: Facts, allowed: tuple) -> bool:
    small = facts.comparison("det gather", "det indexing")["verdict"].endswith("small")
    return facts.direction("det gather", "det indexing") in allowed or small


def alike(facts: Facts) -> bool:
    means = facts.note("det_gather_step_ms").values()
    if len(means) < 2:
        raise NotMeasured("fewer than two timings of the deterministic gather step")
    return max(means) / min(means) <= 1.5


def bad_rows(facts: Facts) -> bool:
    bad = [r for r in facts.doc.get("experiments", []) if r["name"].startswith("expected failure")]
    if not bad:
        raise NotMeasured("no bad-input rows")
    return all(r["status"] == "failed" and r["error"] and "\n" not in r["error"] for r in bad)


CLAIMS = [
    Claim(
        "full_hooks_refuse_inplace_downstream",
        "on torchvision's ResNet-18 full backward hooks fail in backward "
        "(an in-place op downstream); the labels on tensors give every module call one range",
        lambda f: (
            f.note("inplace_outcome")["full hooks"].startswith("RuntimeError")
            and f.note("inplace_outcome")["tensor hooks"] == "labelled"
        ),
    ),
    Claim(
        "every_module_labelled_once_per_step",
        "every module of the ViT that ran forward has exactly one backward range per profiled step",
        labelled_once,
    ),
    Claim(
        "with_stack_links_gather_to_timm",
        "with_stack links GatherBackward0 to aten::gather in timm's patch_dropout.py",
        lambda f: (
            f.note("gather_backward_origin")["forward_op"] == "aten::gather"
            and str(f.note("gather_backward_origin")["call_from"]).startswith(
                "timm/layers/patch_dropout.py"
            )
        ),
    ),
    Claim(
        "indexing_matches_gather_loss_and_grads",
        "indexing PatchDropout gives the same loss and gradients as timm's",
        lambda f: all(
            f.metric("equivalence gather vs indexing", k) is True
            for k in ("loss_close", "grads_close")
        ),
    ),
    Claim(
        "gather_gone_from_fixed_backward",
        "GatherBackward gone from the fixed model's backward (IndexBackward0 instead)",
        lambda f: all(
            m["gather_backward_calls"] == 0 < m["index_backward_calls"]
            for m in rows(f, ("indexing",))
        ),
    ),
    Claim(
        "one_backward_label_per_profiled_step",
        "every matrix trace holds one host-side `backward` label per profiled step",
        lambda f: all(m["backward_phases"] == f.note("profiled_steps") for m in rows(f)),
    ),
    Claim(
        "fix_syncs_no_more_than_gather_det",
        "in deterministic mode the indexing fix synchronises no more often per backward than timm's gather",
        lambda f: (
            f.metric("det indexing", "syncs_per_step") <= f.metric("det gather", "syncs_per_step")
        ),
        applies=on_gpu,
    ),
    Claim(
        "no_sync_in_cpu_traces",
        "no host-device synchronisation in any of the four CPU traces",
        lambda f: all(m["syncs_per_step"] == 0 == m["sync_gpu_idle_per_step_ms"] for m in rows(f)),
        applies=on_cpu,
    ),
    Claim(
        "det_mode_changes_op_counts",
        "deterministic mode changed the calls or time of at least one op in the gather model's trace",
        lambda f: len(f.note("deterministic_changed")) > 0,
    ),
    Claim(
        "det_mode_reroutes_gather_backward",
        "deterministic mode reroutes GatherBackward0 on the GPU (other ops under it, fills aside)",
        lambda f: ops_under(f)["default"] != ops_under(f)["deterministic"],
        applies=on_gpu,
    ),
    Claim(
        "cpu_gather_backward_same_ops_fills_aside",
        "on a CPU GatherBackward0 runs the same ops in both modes (fills aside)",
        lambda f: ops_under(f)["default"] == ops_under(f)["deterministic"],
        applies=on_cpu,
    ),
    Claim(
        "det_fix_not_slower",
        "in deterministic mode the indexing fix makes the step no more than a little slower than gather",
        lambda f: fix_small(f, ("faster", None)),
        applies=on_gpu,
    ),
    Claim(
        "det_fix_no_difference_on_cpu",
        "on a CPU the fix makes no difference beyond a small one in deterministic mode (no sync to remove)",
        lambda f: fix_small(f, (None,)),
        applies=on_cpu,
    ),
    Claim(
        "cpu_same_step_reads_alike",
        "on process CPU time the deterministic gather step reads within 50% in the three sections that time it",
        alike,
        applies=on_cpu,
    ),
    Claim(
        "bad_input_becomes_failed_row",
        "bad input becomes a failed row with a one-line message",
        bad_rows,
    ),
]
