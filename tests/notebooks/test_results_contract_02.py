"""Notebook 02's results after nbmake executed it (``make test`` runs the notebooks first): its structure, its
comparisons (interleaved rounds, a ratio with an interval and a verdict), and checks that claim a gain only where the
comparison's verdict says so. Timings are never asserted: only what was measured and how."""
import os

import pytest

from helpers.measure import compare
from helpers.notebook import results

NB = "02_data_pipeline"
PLANNED = ("baseline", "bool_dilation", "crop_first", "batch_collate", "uint8_device")


@pytest.fixture(scope="module")
def doc():
    if "PERF_RESULTS_DIR" not in os.environ:
        pytest.fail("run through `make test`, which executes the notebooks first and sets PERF_RESULTS_DIR")
    return results.load(NB)


@pytest.fixture(scope="module")
def rows(doc):
    return {e["name"]: e for e in doc["experiments"]}


def rows_of(doc):
    return {e["name"]: e for e in doc["experiments"]}


def comparison(doc, a, b):
    found = [c for c in doc["comparisons"] if (c["a"], c["b"]) == (a, b)]
    assert len(found) == 1, f"no single comparison of {b} with {a}: {[(c['a'], c['b']) for c in doc['comparisons']]}"
    return found[0]


def test_data_pipeline_structure(doc, rows):
    for name in (*PLANNED, "ceiling", "dilation per sample", "decode bound"):
        assert rows[name]["status"] == "ok", f"{name}: {rows[name]['error']}"
    dil = rows["dilation per sample"]["metrics"]
    assert dil["dilate_convolve_ms_256"] > 0 and dil["dilate_shift_ms_256"] > 0 and dil["speedup_256"] >= 3
    # every training-loop row: mean (the comparison), median, samples/s, x_ceiling, and which device step
    ceiling = rows["ceiling"]["metrics"]["step_ms_mean"]
    loop = [e for e in doc["experiments"] if e["status"] == "ok" and e["config"].get("model") is True
            and "timed_steps" in e["config"]]
    assert len(loop) >= 8, [e["name"] for e in loop]
    for e in loop:
        m = e["metrics"]
        for key in ("step_ms_mean", "step_ms_median", "samples_per_s"):
            assert isinstance(m.get(key), (int, float)), (e["name"], key)
        assert isinstance(e["config"].get("stand_in"), bool), e["name"]
        if e["config"]["batch_size"] == rows["ceiling"]["config"]["batch_size"]:   # one ceiling for every row
            assert m["ceiling_ms"] == ceiling and abs(m["x_ceiling"] - m["step_ms_mean"] / ceiling) < 1e-2, e["name"]
        n = e["config"]["num_workers"]
        if n > 0:   # at least 3 full worker cycles timed, one cycle of warm-up apart
            assert m["steps_timed"] >= 3 * n and m["steps_timed"] % n == 0 and e["config"]["warmup_steps"] >= n, e["name"]
    assert rows["ceiling (re-measured)"]["metrics"]["step_ms_median"] > 0   # a separate row, not the ceiling's
    stand_in = doc["env"]["device"] == "cpu"
    assert all(e["config"]["stand_in"] is stand_in for e in loop)
    expected_failures = [e for e in doc["experiments"] if e["name"].startswith("expected failure")]
    assert len(expected_failures) >= 4
    assert all(e["status"] == "failed" and e["error"] and not e["error"].startswith("OverBudget")   # never skipped
               for e in expected_failures)


def test_the_rows_use_at_least_two_workers_and_each_round_is_one_loader_run(rows):
    for v in PLANNED:
        r = rows[v]
        assert r["config"]["num_workers"] >= 2, v                 # waves (and the sawtooth) need 2 workers or more
        m = r["metrics"]
        assert r["config"]["rounds"] == m["rounds"] == len(m["round_times_ms"]) >= 2, v
        assert sum(len(t) for t in m["round_times_ms"]) == m["steps_timed"], v   # the pooled steps are the rounds'
        assert all(len(t) % r["config"]["num_workers"] == 0 for t in m["round_times_ms"]), v   # whole cycles each
    sweep = [r for n, r in rows.items() if n.startswith("sweep nw=")]
    assert {r["config"]["num_workers"] for r in sweep} >= {0, 1, 2}
    assert all("round_times_ms" in r["metrics"] for r in sweep)


def test_t_batch_is_measured_in_the_same_rounds_as_what_it_predicts(doc, rows):
    for name in ("pipeline only baseline nw=0 (sweep)", *(f"pipeline only {v} nw=0" for v in PLANNED)):
        r = rows[name]
        assert r["status"] == "ok" and r["config"]["model"] is False and r["config"]["rounds"] >= 2, name
    assert rows["ceiling (rounds)"]["config"]["rounds"] == rows["baseline"]["config"]["rounds"]
    assert sum(e["name"] == "pipeline only baseline nw=0" for e in doc["experiments"]) == 1   # one row per name


def test_variants_are_compared_with_an_interval_and_a_verdict(doc):
    for c in doc["comparisons"]:
        assert c["verdict"] in compare.VERDICTS and c["metric"] == "step_ms_mean"
        assert c["low"] <= c["ratio"] <= c["high"] and c["n_a"] >= 2 and c["n_b"] >= 2 and c["floor"] >= 0
        assert (compare.direction(c) == "faster") == (c["low"] > 1 and c["ratio"] >= 1 + c["floor"])
        assert (compare.direction(c) == "slower") == (c["high"] < 1 and c["ratio"] <= 1 / (1 + c["floor"]))
    for v in PLANNED[1:]:
        comparison(doc, "baseline", v)
    for a, b in zip(PLANNED[1:3], PLANNED[2:4]):   # the article's fixes, each against the one before (its table)
        comparison(doc, a, b)
    comparison(doc, "ceiling (rounds)", "baseline")
    best, final = doc["notes"]["best_variant"], doc["notes"]["final_variant"]
    comparison(doc, "ceiling (rounds)", final)    # fixed pairs: the same comparisons in every run
    comparison(doc, "sweep nw=0", f"sweep nw={rows_of(doc)['baseline']['config']['num_workers']}")
    assert doc["notes"]["speedup_best_vs_baseline"] == comparison(doc, "baseline", best)["ratio"]
    options = [c for c in doc["comparisons"] if c["a"].endswith(" (options)")]
    assert {c["a"] for c in options} == {"uint8_device (options)"} and len(options) >= 2   # a fixed choice


def test_checks_are_by_id_and_those_that_claim_a_gain_follow_their_verdicts(doc):
    checks, best = doc["checks"], doc["notes"]["best_variant"]
    assert {"profile_shows_every_transform_label", "dilations_identical", "bool_dilation_3x_cheaper",
            "trace_baseline_waits_longer_than_best", "sweep_respects_prediction", "mask_cheaper_after_dilation_fix",
            "baseline_input_bound", "best_faster_than_baseline", "bad_inputs_failed_rows"} <= set(checks)
    assert set(doc["claims"]) == set(checks)
    assert not checks["best_faster_than_baseline"] or compare.direction(comparison(doc, "baseline", best)) == "faster"
    # the sweep's gain is a comparison (0 workers against the best count), not a claim a loaded machine can break;
    # the claim is that the prediction is a bound this run respects
    assert sum(c["a"] == "sweep nw=0" for c in doc["comparisons"]) == 1
    assert checks["baseline_input_bound"] == (compare.direction(comparison(doc, "ceiling (rounds)", "baseline")) == "slower")
    # the idle share is pooled from profiled windows taken in turns, several worker cycles each
    idle = rows_of(doc)["idle share baseline"]["metrics"]
    assert idle["windows"] >= 1 and idle["cycles_per_window"] >= 1 and 0 <= idle["trace_wait_share"] <= 1


def test_the_panel_turns_bad_values_into_failed_rows(rows):
    # the appendix's bad values are expected failures, kept out of the reader's panel table
    panel_failed = [r for n, r in rows.items() if n.startswith("expected failure: panel ") and r["status"] == "failed"]
    assert len(panel_failed) >= 3 and all(r["error"] and "\n" not in r["error"] for r in panel_failed)
