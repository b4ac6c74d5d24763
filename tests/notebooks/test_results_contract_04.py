"""After nbmake has executed 04_torch_compile (``make test`` runs the notebooks first), its comparisons are
consistent with its rows and its claims: structure, never timings."""
import os

import pytest

from helpers.measure.compare import VERDICTS
from helpers.notebook import results

NB = "04_torch_compile"
GAIN_CLAIM = "a compiled matrix cell is faster than its eager cell (95% interval above 1)"


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
        if c["verdict"] == "no difference":  # derived figures only where the interval resolves the difference
            assert m["break_even_steps"] == "not resolved"
            assert m.get("whole_run_speedup_article_length") is None


def test_smoke_comparisons_come_from_interleaved_rounds(doc):
    if doc["scale"] != "smoke":
        pytest.skip("full scale times each cell sequentially (metric step_ms_mean_sequential)")
    assert all(c["metric"] in ("step_ms_mean", "step_ms_median") and c["n_a"] == c["n_b"] >= 20 for c in doc["comparisons"])
    bs = next(e["config"]["batch_size"] for e in doc["experiments"] if e["config"].get("model") == "mlp_fixed")
    fix = _comparison(doc, f"mlp_break fp32 default bs={bs}", f"mlp_fixed fp32 default bs={bs}")
    assert fix is not None and fix["verdict"] in VERDICTS  # the graph-break fix: a comparison, not two medians


def test_the_gain_claim_follows_the_verdicts(doc):
    assert GAIN_CLAIM in doc["checks"]
    rows = _training_rows(doc)
    matrix_verdicts = [c["verdict"] for c in doc["comparisons"]
                       if rows.get(c["b"], {}).get("config", {}).get("model") not in ("mlp_break", "mlp_fixed")]
    assert doc["checks"][GAIN_CLAIM] == ("faster" in matrix_verdicts)


def test_profiled_pair_and_article_figures_recorded(doc):
    profiled = [e for e in doc["experiments"] if e["config"].get("what") == "profile"]
    assert {e["config"]["mode"] for e in profiled} == {"eager", "default"}
    assert all(e["status"] == "ok" and e["metrics"]["op_calls_per_step"] > 0 for e in profiled)
