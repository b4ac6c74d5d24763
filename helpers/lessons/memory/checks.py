"""Notebook 07's claims, judged on a run's recorded figures (``helpers.notebook.checks``, docs/results.md)."""

from helpers.notebook.checks import Claim, NotMeasured

NOTEBOOK = "07_memory"
# The optimizer's implementation is a time lever: it does not change what the step holds at its peak.
TIME_LEVERS = ("lever adam foreach", "lever adam fused")


def _savers(f) -> bool:
    comps = f.doc.get("comparisons", [])
    found = [
        c["b"] for c in comps if c.get("a") == "lever baseline" and c.get("metric") == "peak_mb"
    ]
    found = [b for b in found if b not in TIME_LEVERS]
    if len(found) < 5:
        raise NotMeasured(f"{len(found)} memory levers compared with the baseline, not 5 or more")
    return all(f.direction("lever baseline", b, "peak_mb") == "faster" for b in found)


def _swin_measured(f) -> bool:
    return f.has("prediction swin_b") and bool(f.row("prediction swin_b")["metrics"].get("h100_mb"))


def _part(f, category: str) -> float:  # MB of one category at the baseline's peak
    return f.metric("baseline breakdown", "phases_mb")["peak"][category]


def _peak(f, row: str) -> float:
    return f.metric(row, "peak_mb")


CLAIMS = [
    Claim(
        "prediction_within_10pct",
        "the fake-tensor prediction is within 10% of the allocator's reading of the same step",
        lambda f: abs(f.metric("prediction smoke", "error_pct")) <= 10,
    ),
    Claim(
        "swin_prediction_within_15pct",
        "Swin-B's prediction is within 15% of the H100's measured peak",
        lambda f: abs(f.metric("prediction swin_b", "error_pct")) <= 15,
        applies=_swin_measured,
    ),
    Claim(
        "activations_dominate_peak",
        "activations are a larger part of the baseline's peak than parameters",
        lambda f: _part(f, "ACT") > _part(f, "PARAM"),
    ),
    Claim(
        "every_saving_lever_saves_memory",
        "each lever but the optimizer's implementation lowers the measured peak",
        _savers,
    ),
    Claim(
        "checkpointing_costs_time",
        "whole-block checkpointing makes the step slower beyond noise",
        lambda f: f.direction("lever baseline", "lever checkpoint blocks") == "slower",
    ),
    Claim(
        "selective_keeps_more_than_blocks",
        "selective checkpointing peaks above whole-block checkpointing: it keeps the matmuls' outputs",
        lambda f: _peak(f, "lever checkpoint selective") > _peak(f, "lever checkpoint blocks"),
    ),
    Claim(
        "optimizer_in_backward_frees_gradients",
        "the optimizer step in backward lowers the peak below the baseline's",
        lambda f: (
            f.direction("lever baseline", "lever optimizer in backward", "peak_mb") == "faster"
        ),
    ),
    Claim(
        "in_backward_beats_set_to_none_at_small_batch",
        "where the gradients outweigh the activations, the step in backward peaks below set_to_none",
        lambda f: (
            _peak(f, "small batch optimizer in backward") < _peak(f, "small batch set_to_none")
        ),
    ),
    Claim(
        "bad_inputs_refused_in_one_line",
        "each bad input is refused with one line",
        lambda f: all(v and "\n" not in v for v in f.note("refusals").values()),
    ),
]
