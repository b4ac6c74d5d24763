"""Notebook 05's claims (``LESSON``, then the appendix's ``APPENDIX``), as data (``helpers.notebook.checks``): each reads the rows, comparisons and notes the cells
recorded; the closing cell evaluates them, and ``tests/lessons/test_claims.py`` on the H100 reference."""

from __future__ import annotations

from perf_doctor.diagnosis import MIN_FINDING_SHARE

from ...notebook.checks import Claim, NotMeasured, on_gpu

NOTEBOOK = "05_diagnose"
SINGLE = ("input", "launch/overhead", "compute")


def planted_rows(facts, kinds=None) -> dict[str, dict]:
    """The planted cases that ran (``{kind: row}``: the latest of each; a host sync without ``.item()`` left out)."""
    rows = {}
    for e in facts.doc.get("experiments", []):
        config = e.get("config") or {}
        kind = config.get("planted")
        if not e.get("name", "").startswith("planted ") or kind in (None, "none"):
            continue
        if config.get("item", True) and (kinds is None or kind in kinds):
            rows[kind] = e
    failed = [k for k, e in rows.items() if e.get("status") != "ok"]
    if failed:
        raise NotMeasured(f"the planted {', '.join(failed)} case failed")
    return rows


def _top_cause(kind):
    def rule(facts):
        rows = planted_rows(facts, [kind])
        if kind not in rows:
            raise NotMeasured(f"no planted {kind} row")
        return rows[kind]["metrics"].get("top_cause") == kind

    return rule


def _host_sync_finding(facts):
    rows = planted_rows(facts, ["host sync"])
    if "host sync" not in rows:
        raise NotMeasured("no planted host sync row")
    m = rows["host sync"]["metrics"]
    return m.get("host sync_ms", 0) >= MIN_FINDING_SHARE * m["step_ms_mean"]


def _causes_add_up(facts):
    rows = planted_rows(facts)
    if not rows:
        raise NotMeasured("no planted rows")
    return all(
        e["metrics"]["causes_ms_sum"] <= e["metrics"]["step_ms_mean"] + 0.005 for e in rows.values()
    )


def _cpu_cannot_judge_sync(facts):
    rows = planted_rows(facts, SINGLE)
    if not rows:
        raise NotMeasured("no planted rows")
    return all("host sync_ms" not in e["metrics"] for e in rows.values())


def _each_fix_faster(facts):
    rows = planted_rows(facts)
    cs = [
        c
        for c in facts.doc.get("comparisons", [])
        if c.get("a") in {e["name"] for e in rows.values()}
    ]
    if not cs:
        raise NotMeasured("no plant was timed against its fix")
    return len(cs) == len(rows) and all(facts.direction(c["a"], c["b"]) == "faster" for c in cs)


def _agree(key, n=None):
    def rule(facts):
        records = facts.note(key)
        return (n is None or len(records) == n) and all(r.get("agrees") is True for r in records)

    return rule


def _mixed_split(facts):
    m = facts.row("mixed plant: input + compute")["metrics"]
    found = all(
        m.get(f"{c}_ms", 0) >= MIN_FINDING_SHARE * m["step_ms_mean"] for c in ("input", "compute")
    )
    return found and _agree("mixed_split", 2)(facts)


def _launch_advice(facts):
    rows = planted_rows(facts, ["launch/overhead"])
    if "launch/overhead" not in rows or "top_see" not in rows["launch/overhead"]["metrics"]:
        raise NotMeasured("no advice recorded for the planted launch/overhead case")
    see = rows["launch/overhead"]["metrics"]["top_see"]
    if facts.gpu:
        return "CUDA graph" in see
    return "CUDA graph" not in see and "torch.compile" in see and "CPU" in see


def _bound_from_idle(facts):
    rows = [
        e
        for e in facts.doc.get("experiments", [])
        if e.get("status") == "ok" and "gpu_idle_share" in (e.get("metrics") or {})
    ]
    busy = [e for e in rows if e["metrics"]["gpu_idle_share"] <= 0.1]
    idle = [e for e in rows if e["metrics"]["gpu_idle_share"] >= 0.9]
    if not busy or not idle:
        raise NotMeasured("no GPU trace busy 90% of its step and none idle 90% of it")
    return all(e["metrics"]["bound"] == "device-bound" for e in busy) and all(
        e["metrics"]["bound"] == "host-bound" for e in idle
    )


def _reference_rows(facts):
    return [
        e
        for e in facts.doc.get("experiments", [])
        if e.get("name", "").startswith("reference trace ")
    ]


def _bad_inputs(facts):
    rows = [
        e
        for e in facts.doc.get("experiments", [])
        if e.get("name", "").startswith("expected failure")
    ]
    if not rows:
        raise NotMeasured("no bad input was tried")
    return all(
        e["status"] == "failed"
        and e.get("error")
        and "\n" not in e["error"]
        and e["config"]["path"] in e["error"]
        for e in rows
    )


def _unknown_plant(facts):
    rows = [
        e for e in facts.doc.get("experiments", []) if e.get("name") == "unknown bottleneck 'disk'"
    ]
    if not rows:
        raise NotMeasured("no row for the unknown bottleneck")
    e = rows[-1]
    return e["status"] == "failed" and bool(e.get("error")) and "\n" not in e["error"]


def _refused(*keys):
    def rule(facts):
        return set(keys) <= set(facts.note("appendix")["panel_refusals"])

    return rule


def _your_fix_faster(facts):
    return facts.direction("your step", "your step, fixed") == "faster"


LESSON = [  # evaluated in Results
    *[
        Claim(
            f"{k.replace('/', '_')}_plant_is_top_cause",
            f"the planted {k} bottleneck is the doctor's top cause",
            _top_cause(k),
        )
        for k in SINGLE
    ],
    Claim(
        "host_sync_plant_is_a_finding",
        "the planted .item() is a host-sync finding (at least MIN_FINDING_SHARE of the step)",
        _host_sync_finding,
        applies=on_gpu,
    ),
    Claim(
        "causes_add_up_to_the_step",
        "in every case the causes add up to no more than the step (each ms counted once; 5 µs for rounding)",
        _causes_add_up,
    ),
    Claim(
        "cpu_trace_cannot_judge_host_sync",
        "on a CPU-only trace the doctor says it cannot judge host syncs (no figure for them)",
        _cpu_cannot_judge_sync,
        applies=lambda facts: not facts.gpu,
    ),
    Claim(
        "mixed_plant_is_split",
        "the mixed plant: the doctor finds input and compute, each found share within 10 points of its "
        "planted share's 95% interval",
        _mixed_split,
    ),
    Claim(
        "launch_advice_fits_the_trace",
        "the launch/overhead advice fits the trace: CUDA graphs only on a GPU trace, on a CPU-only trace "
        "torch.compile's CPU fusion",
        _launch_advice,
    ),
    Claim(
        "doctor_json_names_the_same_top_cause",
        "the command's JSON names the planted input as the top cause, as the notebook's call did",
        lambda facts: facts.note("cli")["top_cause"] == "input",
    ),
    Claim(
        "bound_label_follows_gpu_idle_time",
        "a GPU step whose GPU is busy 90% of it reads device-bound, one whose GPU idles 90% of it host-bound",
        _bound_from_idle,
    ),
    Claim(
        "reference_trace_shows_syncs",
        "on a reference GPU trace the doctor finds the syncs and the GPU idle time after them",
        lambda facts: any(e["metrics"].get("host sync_ms", 0) > 0 for e in _reference_rows(facts)),
        applies=lambda facts: bool(_reference_rows(facts)),
    ),
    Claim(
        "gpu_idle_is_mostly_the_planted_sync",
        "in the sync step the GPU's idle time is mostly after the host sync, as planted",
        lambda facts: (
            max(facts.note("gpu_idle_causes")["causes"], key=lambda c: c["ms"])["cause"]
            == "host sync"
        ),
    ),
    Claim(
        "removing_each_plant_made_the_step_faster",
        "removing each planted bottleneck made the step faster (interleaved rounds without the profiler)",
        _each_fix_faster,
    ),
    Claim(
        "saved_share_matches_claimed_share",
        "each claimed share lies within 10 points of the saving's 95% interval (the saved share of the step)",
        _agree("claimed_vs_measured_saving"),
    ),
    Claim(
        "your_step_fix_is_faster",
        "the fix the doctor's advice names for your step's top cause made it faster (interleaved rounds)",
        _your_fix_faster,
    ),
]
APPENDIX = [  # evaluated at the end of the appendix, whose bad inputs they read
    Claim(
        "trace_without_steps_is_analysed_whole",
        "a trace without ProfilerStep is analysed whole, and the doctor says so",
        lambda facts: facts.note("appendix")["no_steps"] == {"steps": 1, "whole_trace": True},
    ),
    Claim(
        "bad_inputs_give_one_line_failed_rows",
        "every bad input gave a failed row with a one-line message naming the file",
        _bad_inputs,
    ),
    Claim(
        "cpu_trace_has_no_gpu_breakdown",
        "a CPU-only trace gives no GPU breakdown (null), and says why",
        lambda facts: facts.note("cli")["gpu"] is None and facts.note("cli")["says_cpu_only"],
        applies=lambda facts: not facts.gpu,
    ),
    Claim(
        "panel_refuses_bad_size_and_plant",
        "the panel refuses a negative size and an unknown bottleneck",
        _refused("compute, size -1", "disk, size 1"),
    ),
    Claim(
        "panel_refuses_non_finite_size",
        "the panel refuses a size that is not a finite number ('abc', inf)",
        _refused("compute, size 'abc'", "compute, size inf"),
    ),
    Claim(
        "unknown_plant_gives_a_failed_row",
        "dx.run_case with an unknown bottleneck gives a failed row with a one-line message, not an exception",
        _unknown_plant,
    ),
]
CLAIMS = LESSON + APPENDIX
