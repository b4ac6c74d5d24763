"""Notebook 02's time guard on a CPU with a tiny budget (structure, never timings): the row running at the deadline is
stopped, every later measurement is a skipped row, and the notebook's results, checks and figures still run on what is
left (a check about a skipped row comes out false, never a traceback)."""
import math
import multiprocessing


from helpers.lessons import data_pipeline as pl
from helpers.notebook.budget import Budget
from helpers.notebook.results import Results
from tests.lessons.test_data_pipeline_lab import TINY, _runs  # noqa: F401 - the same tiny sizes; _runs: autouse

def test_a_tiny_budget_stops_the_running_row_skips_the_rest_and_the_results_still_run(tmp_path):
    results = Results("02_data_pipeline", "smoke", root=tmp_path / "results")
    lab = pl.Lab("cpu", **TINY, results=results, budget=Budget(600.0, reserve_s=1.0))
    ceiling = lab.ceiling_ms()                         # within the budget: measured
    lab.measure("baseline", "baseline", num_workers=0)
    lab.budget = Budget(3.0, reserve_s=1.0)            # now 2 s are left for experiments
    # an interleaved pair whose second row would run for many minutes: stopped at the deadline, in its first round
    lab.measure_interleaved({"sweep nw=0": dict(variant="baseline", num_workers=0),
                             "sweep nw=1": dict(variant="baseline", num_workers=1, steps=200_000)})
    assert lab.budget.spent()
    # everything after: skipped before it starts
    lab.measure_interleaved({"ceiling (rounds)": dict(variant="ceiling", num_workers=0), "crop_first": dict(variant="crop_first")})
    prof = lab.reprofile("crop_first")
    idle = lab.idle_shares(["baseline", "crop_first"])
    decode_ms = lab.guarded("decode", lambda: pl.per_sample_ms(lambda: pl.load_image(lab.paths[0]), 3))
    again = lab.remeasure_ceiling()

    status = {e["name"]: (e["status"], e["error"] or "") for e in results.experiments}
    assert status["ceiling"][0] == status["baseline"][0] == "ok" and ceiling > 0
    assert status["sweep nw=1"][1].startswith("OverBudget: stopped: over the time budget")
    assert status["sweep nw=0"][1].startswith("OverBudget: skipped: the time budget ran out in round 1 of 2")
    for name in ("ceiling (rounds)", "crop_first", "profile crop_first nw=0", "idle share baseline",
                 "idle share crop_first", "ceiling (re-measured)"):
        assert status[name][0] == "failed" and status[name][1].startswith("OverBudget: skipped: the notebook's"), name
    assert prof is None and idle == {} and math.isnan(decode_ms) and math.isnan(again)
    assert multiprocessing.active_children() == []     # the stopped row's worker is gone

    # the notebook's results, checks and figures on what is left: NaN and None, never a traceback
    assert math.isnan(lab.ms("crop_first")) and math.isnan(lab.stage("crop_first", "mask"))
    assert lab.compare("baseline", "crop_first") is None and lab.compare("ceiling (rounds)", "baseline") is None
    sweep = lab.sweep_table({0: "sweep nw=0", 1: "sweep nw=1"}, lab.ms("pipeline only"), [])
    assert sweep["samples_per_s"].isna().all()
    assert "Measured ÷ predicted" in lab.bound_sentence(sweep)
    lab.plot_sweep(sweep, {0: "sweep nw=0", 1: "sweep nw=1"})
    assert "failed" in lab.waves_sentence("sweep nw=1", 1)
    lab.plot_stages()
    assert lab.slowest_stages() == {} and "did not run" in lab.changed("baseline", "crop_first", ["mask"])
    fixes = lab.fixes_table(["baseline", "crop_first"], {"baseline": float("nan"), "crop_first": float("nan")})
    assert fixes["step_ms_mean"].isna().tolist() == [False, True]
    assert lab.options_table("crop_first").empty and lab.idle_table(idle).empty
    assert list(lab.summary(["baseline", "crop_first"]).index) == ["ceiling", "baseline"]
    lab.plot_variants(["baseline", "crop_first"])
    assert lab.article_table({0: "sweep nw=0", 1: "sweep nw=1"})["this_run_verdict"].isna().all()
    results.check("re-profiling after the fix: the mask costs less", lab.stage("crop_first", "mask") < 1e9)
    results.check("the variant is faster (verdict)", bool(lab.compare("baseline", "crop_first")))
    assert results.checks == {"re-profiling after the fix: the mask costs less": False,
                              "the variant is faster (verdict)": False}
    assert (results.dir / "results.json").exists()


def test_the_panel_runs_the_readers_rows_whatever_is_left_of_the_notebooks_budget(tmp_path):
    """The "try it yourself" panel runs after the notebook, when its budget may be long spent: not under it."""
    lab = pl.Lab("cpu", **TINY, results=Results("02_data_pipeline", "smoke", root=tmp_path / "results"),
                 budget=Budget(1.0, start=-1e9))   # spent long ago
    assert lab.budget.spent()
    lab.panel_row("crop_first", num_workers=0)
    assert lab.results.get("panel crop_first nw=0 bs=2")["status"] == "ok"
    assert lab.budget.spent()   # the notebook's budget is back
