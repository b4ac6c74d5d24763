"""Notebook 06's claims (``LESSON``, then the appendix's ``APPENDIX``), as data (``helpers.notebook.checks``): each
reads the rows, comparisons and notes the cells recorded; ``tests/lessons/test_claims.py`` judges them on the H100
reference (its CPU fallback: 2 gloo ranks)."""

from __future__ import annotations

from ...notebook.checks import Claim, NotMeasured

NOTEBOOK = "06_distributed"
STRAGGLER = "DDP with a straggler"
NO_SYNC = "accumulation under no_sync"


def _comparison_to(facts, b):
    found = [c for c in facts.doc.get("comparisons", []) if c.get("b") == b]
    if not found:
        raise NotMeasured(f"no comparison of {b!r}")
    return facts.direction(found[-1]["a"], b)


def _straggler_resolved(facts):
    """On a loaded machine the rounds' interval often spans 1 (docs/lessons/06_distributed.md): the claim is then
    not made, as a derived figure is not; the traces' waits (``others_wait_for_the_straggler``) still show it."""
    try:
        return _comparison_to(facts, STRAGGLER) is not None
    except NotMeasured:
        return True


def _split(facts):
    m = facts.row("ddp overhead split")["metrics"]
    single = m.get("single_exposed_ms")
    if single is None:
        raise NotMeasured("the single process's exposed communication was not recorded")
    return m["exposed_comm_ms"] + m["overlapped_comm_ms"] > 0 and single == 0


def _buckets(facts):
    sweep = facts.note("bucket_sweep")  # the column was named "all-reduces per step" before
    counts = [r.get("all-reduces/step", r.get("all-reduces per step")) for r in sweep]
    if None in counts:
        raise NotMeasured("the bucket sweep has no all-reduce counts")
    return counts[0] > counts[-1]


def _no_sync_counts(facts):
    rows = facts.note("all_reduces_per_optimizer_step")
    if any("accum" not in r for r in rows):
        raise NotMeasured("the accumulation factor was not recorded beside the counts")
    return all(
        r["accum no_sync"] > 0 and r["accum sync"] == r["accum"] * r["accum no_sync"] for r in rows
    )


def _plant_shows(facts):
    """On a loaded machine the ranks' own delays can drown the planted one: the doctor's claims are made where the
    traces resolve it (the planted rank's lateness at the collectives, its 95% interval above 0; views.lateness)."""
    try:
        low = facts.row("straggler doctor")["metrics"].get("planted_late_low_ms", 1.0)
    except NotMeasured:
        return True
    return low is not None and low > 0


def _named(facts):
    row = facts.row("straggler doctor")
    return row["metrics"]["named_rank"] == row["config"]["planted_rank"]


def _others_wait(facts):
    row = facts.row("straggler doctor")
    wait, own = row["metrics"].get("others_min_wait_ms"), row["metrics"].get("straggler_wait_ms")
    if wait is None or own is None:
        raise NotMeasured("the ranks' waits were not recorded")
    return wait > own


def _share(facts):
    return 0.10 <= facts.note("straggler")["share_of_step"] <= 0.20


def _leads(facts):
    return facts.note("straggler")["report_leads_with_it"] is True


def _clocks(facts):
    c = facts.note("clocks")
    if c.get("profiled, perf_counter") is None:
        raise NotMeasured("the profiled steps' wall clock was not recorded")
    return abs(c["trace span"] / c["profiled, perf_counter"] - 1) <= 0.10


def _refused(facts):
    return "cores" in facts.note("appendix")["too_many_ranks"]


def _dead(facts):
    rows = [
        e
        for e in facts.doc.get("experiments", [])
        if e.get("name", "").startswith("expected failure: rank 1 dies: rank ")
    ]
    if len(rows) < 2:
        raise NotMeasured("no job with a dead rank")
    one = next(e for e in rows if e["name"].endswith("rank 1"))
    return "rank 1 died" in (one.get("error") or "") and all(e["status"] == "failed" for e in rows)


LESSON = [  # evaluated in Results
    Claim(
        "ddp_traces_hold_split_communication",
        "the DDP traces hold communication, split into exposed and overlapped; the single process's none",
        _split,
    ),
    Claim(
        "smaller_buckets_more_all_reduces",
        "smaller buckets, more all-reduces per step (the bucket sweep's first and last, from the traces)",
        _buckets,
    ),
    Claim(
        "no_sync_divides_all_reduces_by_accum",
        "no_sync divides the all-reduces per optimizer step by the accumulation factor (traces, every rank)",
        _no_sync_counts,
    ),
    Claim(
        "no_sync_accumulation_faster",
        "accumulating under no_sync is faster than syncing every micro-batch (interleaved rounds)",
        lambda facts: _comparison_to(facts, NO_SYNC) == "faster",
    ),
    Claim(
        "straggler_slows_the_job",
        "a planted straggler slows the whole job's step (interleaved rounds, where their interval resolves it)",
        lambda facts: _comparison_to(facts, STRAGGLER) == "slower",
        _straggler_resolved,
    ),
    Claim(
        "straggler_is_a_fraction_of_the_step",
        "the planted delay is 10-20% of the straggler's step (a straggler as jobs meet it, not a stalled rank)",
        _share,
    ),
    Claim(
        "doctor_names_the_straggler",
        "the doctor names the planted straggler (where the traces resolve its lateness)",
        _named,
        _plant_shows,
    ),
    Claim(
        "report_leads_with_the_straggler",
        "the job's report (perf-doctor job FOLDER) opens with the planted rank as the straggler",
        _leads,
        _plant_shows,
    ),
    Claim(
        "others_wait_for_the_straggler",
        "every other rank waits longer per step in collectives than the planted straggler",
        _others_wait,
        _plant_shows,
    ),
    Claim(
        "profiled_clock_agrees_with_wall_clock",
        "the trace's ProfilerStep spans and perf_counter around the same profiled steps agree within 10%",
        _clocks,
    ),
]
APPENDIX = [  # evaluated at the end of the appendix
    Claim("too_many_ranks_refused", "more ranks than cores is refused with the reason", _refused),
    Claim(
        "dead_rank_is_a_failed_row",
        "a rank that dies becomes a failed row naming it, and every rank is stopped",
        _dead,
    ),
]
CLAIMS = LESSON + APPENDIX
