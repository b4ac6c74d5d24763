"""Notebook 05's results after nbmake executed it (``make test`` runs the notebooks first): the fix of each plant
compared in interleaved rounds (one ``comparisons`` entry per plant, a verdict), the checks that claim a gain agreeing
with their comparisons, savings given only where resolved, and the advice that depends on the trace."""
import os

import pytest

from helpers.lessons import diagnose as dx
from helpers.measure.compare import VERDICTS, direction, resolved
from helpers.notebook import results


@pytest.fixture(scope="module")
def doc():
    if "PERF_RESULTS_DIR" not in os.environ:
        pytest.fail("run through `make test`, which executes the notebooks first and sets PERF_RESULTS_DIR")
    return results.load("05_diagnose")


def _planted(doc):
    return {e["config"]["planted"]: e for e in doc["experiments"]
            if e["name"].startswith("planted ") and e["config"].get("planted") not in (None, "none")
            and e["config"].get("item", True) and e["status"] == "ok"}


def _fixes(doc):   # the plants' comparisons (not the mixed plant's, nor your step against its fix)
    return [c for c in doc["comparisons"] if c["a"] not in ("mixed", "your step")]


def test_each_plant_is_compared_with_its_fix_in_interleaved_rounds(doc):
    planted = _planted(doc)
    on_gpu = str(doc["env"]["device"]).startswith("cuda")
    assert {"input", "launch/overhead", "compute"} <= set(planted) and ("host sync" in planted) == on_gpu
    rows = {e["name"]: e for e in doc["experiments"]}
    assert len(_fixes(doc)) == len(planted)
    for kind, e in planted.items():
        c = next(c for c in doc["comparisons"] if c["a"] == e["name"])
        assert c["b"] == dx.fix_name(kind, e["config"]["size"]) and c["metric"] == "step_ms_mean"
        assert c["role"] == "change"   # a = the plant, b = its fix: "nothing planted: 0.05× the planted ... step"
        assert c["verdict"] in VERDICTS and c["low"] <= c["ratio"] <= c["high"]
        for side in ("a", "b"):   # the samples are the timed rows': interleaved, without the profiler
            timed = rows[f"timed: {c[side]}"]
            assert timed["config"]["profiled"] is False and timed["metrics"]["steps_timed"] == c[f"n_{side}"]
            assert timed["config"]["rounds"] == c[f"n_{side}"] >= 10


def test_a_gain_is_claimed_only_where_the_comparisons_say_so(doc):
    gain = doc["checks"]["removing_each_plant_made_the_step_faster"]
    assert gain == all(direction(c) == "faster" for c in _fixes(doc))
    saved = doc["notes"]["claimed_vs_measured_saving"]
    by_kind = {c["a"]: c for c in _fixes(doc)}
    planted = _planted(doc)
    assert {r["planted"] for r in saved} == set(planted)
    for r in saved:
        c = by_kind[planted[r["planted"]]["name"]]
        assert r["verdict"] == c["verdict"]
        if not resolved(c):   # nothing derived from an unresolved comparison
            assert r["saved (ms)"] is None and r["agrees"] is None
        else:
            assert isinstance(r["saved (ms)"], float) and isinstance(r["agrees"], bool)
            assert r["saved share"] == pytest.approx(1 - 1 / c["ratio"], abs=1e-3)


def test_the_advice_and_the_gpu_only_lesson_follow_the_machine(doc):
    assert doc["checks"]["launch_advice_fits_the_trace"]
    on_gpu = str(doc["env"]["device"]).startswith("cuda")
    assert ("cpu_trace_cannot_judge_host_sync" in doc["checks"]) != on_gpu
    assert ("host_sync_plant_is_a_finding" in doc["checks"]) == on_gpu
    for e in _planted(doc).values():   # on a CPU the host-sync and memory causes are not judged: no figures
        assert on_gpu or ("host sync_ms" not in e["metrics"] and "memory_ms" not in e["metrics"])
    assert "trace_without_steps_is_analysed_whole" in doc["checks"]


def test_the_mixed_plant_is_split_by_the_doctor_and_timed_without_it(doc):
    """05-3: two causes in one step; each found within 10 points of its planted share (timed removal)."""
    row = next(e for e in doc["experiments"] if e["name"] == "mixed plant: input + compute")
    assert row["status"] == "ok"
    m = row["metrics"]
    split = {r["planted"]: r for r in doc["notes"]["mixed_split"]}
    assert set(split) == {"input", "compute"}
    for cause, r in split.items():
        c = next(c for c in doc["comparisons"] if c["a"] == "mixed" and c["b"] == f"mixed without {cause}")
        # the doctor's ms as a share of its profiled step (both from one profile), as for the single plants
        assert r["claimed share"] == pytest.approx(m[f"{cause}_ms"] / m["step_ms_mean"], abs=2e-3)
        assert r["verdict"] == c["verdict"]
        if resolved(c):
            assert r["saved share"] == pytest.approx(1 - 1 / c["ratio"], abs=1e-3)
    assert doc["checks"]["mixed_plant_is_split"] == all(r["agrees"] is True for r in split.values())
