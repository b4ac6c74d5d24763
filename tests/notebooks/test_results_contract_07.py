"""After ``make test`` has executed 07_memory: its results hold the lesson's structure (never timings): the
prediction row and its check agree, every lever is compared with the baseline in memory and time, and the checks
follow the comparisons they summarise."""
import os

import pytest

from helpers.measure.compare import VERDICTS, direction
from helpers.notebook import results

NB = "07_memory"
CHECKS = {"prediction_within_10pct", "every_saving_lever_saves_memory", "checkpointing_costs_time",
          "activations_dominate_peak", "bad_inputs_refused_in_one_line", "swin_prediction_within_15pct",
          "selective_keeps_more_than_blocks", "optimizer_in_backward_frees_gradients",
          "in_backward_beats_set_to_none_at_small_batch"}


@pytest.fixture(scope="module")
def doc():
    if "PERF_RESULTS_DIR" not in os.environ:
        pytest.fail("run through `make test`, which executes the notebooks first and sets PERF_RESULTS_DIR")
    return results.load(NB)


def _row(doc, name):
    found = [e for e in doc["experiments"] if e["name"] == name]
    assert found, f"no row {name!r}"
    return found[-1]


def test_checks_are_recorded_with_claims(doc):
    assert CHECKS <= set(doc["checks"]) and set(doc["checks"]) <= set(doc["claims"])


def test_prediction_row_follows_its_check(doc):
    m = _row(doc, "prediction smoke")["metrics"]
    assert m["predicted_mb"] > 0 and m["measured_mb"] > 0
    assert m["error_pct"] == pytest.approx(100 * (m["predicted_mb"] - m["measured_mb"]) / m["measured_mb"], abs=0.1)
    assert doc["checks"]["prediction_within_10pct"] == (abs(m["error_pct"]) <= 10)


def test_breakdown_has_phases_and_categories(doc):
    phases = _row(doc, "baseline breakdown")["metrics"]["phases_mb"]
    assert {"start", "forward", "backward", "optimizer", "peak"} <= set(phases)
    peak = phases["peak"]
    assert peak["total"] >= max(p["total"] for p in phases.values()) - 1e-6  # the peak is at least any phase
    assert doc["checks"]["activations_dominate_peak"] == (peak["ACT"] > peak["PARAM"])


def test_every_lever_is_compared_in_memory_and_time(doc):
    levers = [e for e in doc["experiments"] if e["name"].startswith("lever ") and e["name"] != "lever baseline"]
    assert len(levers) >= 6
    assert any(e["name"] == "lever optimizer in backward" for e in levers)
    for e in levers:
        timed = "step_ms_mean" in e["metrics"]  # bf16 is not timed on a CPU without bf16 units
        assert timed or e["name"] == "lever bf16 autocast", e["name"]
        for metric in ("peak_mb", "step_ms_mean") if timed else ("peak_mb",):
            c = [c for c in doc["comparisons"] if c["a"] == "lever baseline" and c["b"] == e["name"]
                 and c["metric"] == metric]
            assert c, f"{e['name']}: no {metric} comparison"
            c = c[-1]
            assert c["verdict"] in VERDICTS and c["low"] <= c["ratio"] <= c["high"]
            if metric == "step_ms_mean":
                assert c["n_a"] == c["n_b"] >= 5  # interleaved rounds, one step each
    blocks = [c for c in doc["comparisons"] if c["b"] == "lever checkpoint blocks" and c["metric"] == "step_ms_mean"]
    assert doc["checks"]["checkpointing_costs_time"] == (direction(blocks[-1]) == "slower")


def test_the_doctor_reads_the_step_peak_from_the_notebooks_memory_trace(doc):
    """The trace the notebook writes with profile_memory=True (issue 34 item 5): the doctor's step peak on the CPU is
    the measured step's peak above what was live at its start (measured_mb minus the breakdown's start), within 10%."""
    from pathlib import Path

    from perf_doctor import cli as doctor
    trace = Path(os.environ["PERF_RUNS_DIR"]) / NB / "baseline_memory.json"
    assert trace.is_file(), f"the notebook wrote no memory trace at {trace}"
    mem = doctor.report(trace, views=False)["memory"]
    cpu = next(d for d in mem["devices"] if d["device"] == "cpu")
    measured = _row(doc, "prediction smoke")["metrics"]["measured_mb"]
    live = _row(doc, "baseline breakdown")["metrics"]["phases_mb"]["start"]["total"]
    assert cpu["peak_mb"] == pytest.approx(measured - live, rel=0.1)
    assert mem["top_ops"] and mem["top_ops"][0]["op"].startswith("aten::")


def test_the_swin_prediction_is_set_against_the_h100(doc):
    """Issue 34: the full-size Swin-B fp16 batch-64 step predicted on fake tensors at every scale, its error against
    the H100 reference's measured peak printed and checked."""
    m = _row(doc, "prediction swin_b")["metrics"]
    assert m["h100_mb"] == pytest.approx(10519.4) and m["predicted_mb"] > 1000
    assert m["error_pct"] == pytest.approx(100 * (m["predicted_mb"] - m["h100_mb"]) / m["h100_mb"], abs=0.1)
    assert doc["checks"]["swin_prediction_within_15pct"] == (abs(m["error_pct"]) <= 15)
