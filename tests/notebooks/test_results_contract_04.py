"""After nbmake has executed 04_torch_compile (``make test`` runs the notebooks first), its comparisons are
consistent with its rows and its checks (by id): structure, never timings."""
import os

import pytest

from helpers.measure.compare import VERDICTS, direction
from helpers.notebook import results

NB = "04_torch_compile"


@pytest.fixture(scope="module")
def doc():
    if "PERF_RESULTS_DIR" not in os.environ:
        pytest.fail("run through `make test`, which executes the notebooks first and sets PERF_RESULTS_DIR")
    return results.load(NB)


def _training_rows(doc):
    """The rows of training cells (matrix and graph-break cells): a mode, and neither explain, profile nor start."""
    return {e["name"]: e for e in doc["experiments"] if "mode" in e["config"] and "what" not in e["config"]}


def _comparison(doc, a, b):
    found = [c for c in doc["comparisons"] if c["a"] == a and c["b"] == b]
    return found[-1] if found else None


def test_every_compiled_cell_is_compared_with_its_eager_cell(doc):
    rows = _training_rows(doc)
    compiled = [e for e in rows.values() if e["status"] == "ok" and e["config"]["mode"] != "eager"]
    assert compiled, "no compiled cell ran"
    for e in compiled:
        cfg = e["config"]
        eager = f"{cfg['model']} {cfg['precision']} eager bs={cfg['batch_size']}"
        if rows.get(eager, {}).get("status") != "ok":
            continue
        c = _comparison(doc, eager, e["name"])
        assert c is not None, f"{e['name']}: no comparison with {eager}"
        assert c["verdict"] in VERDICTS and c["low"] <= c["ratio"] <= c["high"]
        m = e["metrics"]
        assert m["speedup"] == c["ratio"] and m["verdict"] == c["verdict"]  # the table shows the comparison
        # the break-even only where the interval resolves the difference
        assert (m["break_even_steps"] == "not resolved") == (direction(c) is None)


def test_comparisons_come_from_interleaved_rounds_mean_unless_recompiled(doc):
    assert doc["comparisons"]
    for c in doc["comparisons"]:  # the median only where graphs compiled during the rounds, and then it says so
        assert c["metric"] in ("step_ms_mean", "step_ms_median") and c["n_a"] == c["n_b"] >= 20
    bs = next(e["config"]["batch_size"] for e in doc["experiments"] if e["config"].get("model") == "mlp_fixed")
    fix = _comparison(doc, f"mlp_break fp32 default bs={bs}", f"mlp_fixed fp32 default bs={bs}")
    assert fix is not None and fix["verdict"] in VERDICTS  # the graph-break fix: a comparison, not two means
    assert doc["checks"]["fixed_faster_than_broken"] == (direction(fix) == "faster")


def test_the_gain_check_follows_the_verdicts(doc):
    rows = _training_rows(doc)
    matrix = [c for c in doc["comparisons"] if c["b"] in rows  # training cells: not the levers' rows
              and rows[c["b"]]["config"]["model"] not in ("mlp_break", "mlp_fixed")]
    assert doc["checks"]["compiled_cell_faster_than_eager"] == any(direction(c) == "faster" for c in matrix)


def test_checks_by_id(doc):
    expected = {"compiled_cell_faster_than_eager", "every_matrix_cell_ran", "no_graphs_compiled_after_first_steps",
                "compiled_loss_matches_eager", "fallback_random_on_cuda_only", "first_steps_cover_compile_time",
                "compiled_records_fewer_op_calls", "break_variant_breaks_fixed_does_not", "fixed_faster_than_broken",
                "explain_ran_on_article_families", "warm_start_hit_cache_and_compiled_faster",
                "panel_refuses_invalid_values", "bad_cells_became_failed_rows",
                "compiled_optimizer_step_faster"}
    assert expected <= set(doc["checks"]) and set(doc["checks"]) == set(doc["claims"])


def test_the_next_levers_are_compared_with_the_compiled_model(doc):
    """Item 8 of issue 43: the optimizer step compiled and the repeated block compiled, each a row beside the
    compiled model, compared with it in interleaved rounds (a ratio with its interval and verdict)."""
    levers = {e["config"]["compiled"]: e for e in doc["experiments"] if e["config"].get("what") == "lever"}
    assert set(levers) == {"model", "model and optimizer", "repeated block"}
    base = levers["model"]["name"]
    for what in ("model and optimizer", "repeated block"):
        c = _comparison(doc, base, levers[what]["name"])
        assert c is not None and c["verdict"] in VERDICTS and c["low"] <= c["ratio"] <= c["high"], what
    assert levers["repeated block"]["metrics"]["compile_s"] > 0


def test_profiled_pair_recorded(doc):
    profiled = [e for e in doc["experiments"] if e["config"].get("what") == "profile"]
    assert {e["config"]["mode"] for e in profiled} == {"eager", "default"}
    assert all(e["status"] == "ok" and e["metrics"]["op_calls_per_step"] > 0 for e in profiled)
