"""Notebook 02's time guard on a CPU with a tiny budget (structure, never timings): the row running at the deadline is
stopped, every later measurement is a skipped row, and the notebook's results, checks and figures still run on what is
left (a figure it could not measure is no row of a table, a check about it comes out false, never a traceback)."""
import math
import multiprocessing

import pandas as pd

from helpers.lessons.data_pipeline import experiment as ex, views
from helpers.measure import compare as cmp
from helpers.notebook.budget import Budget
from tests.lessons.test_data_pipeline_lab import _runs, measure, results, tiny_run  # noqa: F401 - _runs: autouse


def test_a_tiny_budget_stops_the_running_row_skips_the_rest_and_the_results_still_run(tmp_path):
    res = results(tmp_path)
    measure(res, {"ceiling": dict(variant="ceiling", num_workers=0)}, budget=Budget(600.0, reserve_s=1.0))
    measure(res, {"baseline": dict(num_workers=0)}, budget=Budget(600.0, reserve_s=1.0))
    budget = Budget(3.0, reserve_s=1.0)   # 2 s left for experiments
    # an interleaved pair whose second row would run for many minutes: stopped at the deadline, in its first round
    measure(res, {"sweep nw=0": dict(num_workers=0), "sweep nw=1": dict(num_workers=1, steps=200_000,
                                                                         dataset_size=400_000)}, rounds=2, budget=budget)
    assert budget.spent()
    measure(res, {"ceiling (rounds)": dict(variant="ceiling", num_workers=0), "crop_first": {}}, budget=budget)
    idle = ex.idle_shares(res, tiny_run, ["baseline", "crop_first"], num_workers=1, windows=2, cycles=1, device="cpu",
                          budget=budget)
    res.record("decode bound", {}, budget.wrap(lambda: {"bound_step_ms": 1.0}))

    status = {e["name"]: (e["status"], e["error"] or "") for e in res.experiments}
    assert status["ceiling"][0] == status["baseline"][0] == "ok"
    assert status["sweep nw=1"][1].startswith("OverBudget: stopped: over the time budget")
    assert status["sweep nw=0"][1].startswith("OverBudget: skipped: the time budget ran out in round 1 of 2")
    for name in ("ceiling (rounds)", "crop_first", "idle share baseline", "idle share crop_first"):
        assert status[name][0] == "failed" and status[name][1].startswith("OverBudget: skipped: the notebook's"), name
    assert idle == {} and math.isnan(views.ms(res, "decode bound", "bound_step_ms"))
    assert multiprocessing.active_children() == []     # the stopped row's worker is gone

    # the notebook's results, checks and figures on what is left: NaN and None, never a traceback
    assert math.isnan(views.ms(res, "crop_first"))
    assert ex.compare(res, "baseline", "crop_first") is None and ex.compare(res, "ceiling (rounds)", "baseline") is None
    assert cmp.not_measured("crop_first against the baseline") == "crop_first against the baseline: not measured (skipped for time)"
    sweep = views.sweep_table(res, {0: "sweep nw=0", 1: "sweep nw=1"}, "pipeline only", views.ms(res, "ceiling"), 2)
    assert sweep.empty   # points that did not run: no rows of NaN (listed once, in views.skipped)
    assert views.skipped(res) == ["sweep nw=0", "sweep nw=1", "ceiling (rounds)", "crop_first", "idle share baseline",
                                  "idle share crop_first", "decode bound"]
    views.plot_sweep(res, sweep, {0: "sweep nw=0", 1: "sweep nw=1"}, views.ms(res, "ceiling"), 2, 2)
    views.plot_stages(res, pd.DataFrame())
    views.plot_variants(res, [("baseline", "crop_first")])
    views.show_results(res, [("baseline", "crop_first")])   # the skipped rows said once, in one box
    fixes = views.fixes_table(res, ["baseline", "crop_first"], {}, 1, views.ms(res, "ceiling"), 2)
    assert fixes["variant"].tolist() == ["baseline"] and views.best(res, ["crop_first"]) is None
    assert list(views.summary(res)["experiment"]) == ["ceiling", "baseline"]
    assert all(r["this_run"] is None for r in views.article_rows(res, None, ("sweep nw=0", "sweep nw=1")))
    res.check("variant_faster", bool(ex.compare(res, "baseline", "crop_first")), "the variant is faster (verdict)")
    assert res.checks == {"variant_faster": False} and (res.dir / "results.json").exists()


def test_the_panel_runs_the_readers_rows_whatever_is_left_of_the_notebooks_budget(tmp_path):
    """The "try it yourself" panel runs after the notebook, when its budget may be long spent: not under it."""
    res, spent = results(tmp_path), Budget(1.0, start=-1e9)
    assert spent.spent()
    ex.panel_row(res, lambda name, v: measure(res, {name: v}, budget=None), 2, False,
                 variant="crop_first", num_workers=0, batch_size=2, persistent_workers=False)
    assert res.get("panel crop_first nw=0 bs=2")["status"] == "ok"
