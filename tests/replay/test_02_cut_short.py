"""Notebook 02's analyses and views on the H100 run, which the time budget cut short (5 of 10 checks): what did not
run is said once, as skipped for time, and never written up as a finding (no NaN, no "best" picked from NaN rows, no
empty table or chart)."""
import contextlib
import io
import math

import pandas as pd
import pytest

from helpers.lessons.data_pipeline import views
from helpers.notebook import reference
from helpers.notebook.results import Results

from .conftest import h100

NB = "02_data_pipeline"
PLANNED = ["baseline", "bool_dilation", "crop_first", "batch_collate", "uint8_device", "gpu_decode"]
TB_ROWS = {v: f"pipeline only {v} nw=0" for v in PLANNED if v != "gpu_decode"}
SWEEP = {0: "sweep nw=0", 4: "sweep nw=4", 8: "sweep nw=8"}


@pytest.fixture(scope="module")
def res(tmp_path_factory):
    doc = h100(NB).doc
    r = Results(NB, doc["scale"], doc["env"], root=tmp_path_factory.mktemp("r"), autosave=False)
    r.experiments, r.comparisons, r.notes = doc["experiments"], doc["comparisons"], doc["notes"]
    return r


def no_nan(obj, what):
    text = obj.to_string() if isinstance(obj, pd.DataFrame) else str(obj)
    assert "nan" not in text.lower().replace("nanosec", ""), f"{what} shows NaN:\n{text}"
    if isinstance(obj, pd.DataFrame):
        assert not obj.select_dtypes("number").isna().any().any(), f"{what} has NaN cells:\n{obj}"


def test_rows_that_never_ran_give_no_table_rows_and_no_chart(res, monkeypatch):
    shown = []
    monkeypatch.setattr(views, "_show", lambda fig, results, name: shown.append(name))
    fixes = views.fixes_table(res, PLANNED, TB_ROWS, 4, views.ms(res, "ceiling"), 256)
    assert fixes.empty, fixes            # the fixes never ran in the loop: no rows of NaN
    views.plot_variants(res, [("baseline", v) for v in PLANNED[1:]])
    assert "variants" not in shown       # no empty chart of comparisons that were never made


def test_the_cut_short_run_gives_no_nan_and_no_best_from_nan(res, monkeypatch):
    shown = []
    monkeypatch.setattr(views, "_show", lambda fig, results, name: shown.append(name))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ceiling = views.ms(res, "ceiling")
        sweep = views.sweep_table(res, SWEEP, "pipeline only baseline nw=0 (sweep)", ceiling, 256)
        fixes = views.fixes_table(res, PLANNED, TB_ROWS, 4, ceiling, 256)
        summary = views.summary(res)
        best = views.best(res, PLANNED[1:])
        views.plot_variants(res, [("baseline", v) for v in PLANNED[1:]])
        rows = views.article_rows(res, h100(NB), ("sweep nw=4", "sweep nw=8"), ("sweep nw=4", "sweep nw=8"))
        table = reference.article_table(rows)
    assert best is None                        # the old code: min over NaNs picked "bool_dilation"
    assert list(sweep.num_workers) == [0, 4, 8] and fixes.empty   # the fixes never ran in the loop: no rows of NaN
    assert "variants" not in shown              # no empty chart of comparisons that were never made
    for obj, what in ((sweep, "sweep"), (table, "article table"), (out.getvalue(), "output")):
        no_nan(obj, what)
    assert summary["step_ms_mean"].notna().all()   # (a column a row has no value in, e.g. the ceiling's wait: '–')
    assert not math.isnan(ceiling) and len(table) == len(views.ARTICLE)


def test_what_was_skipped_is_listed_once_as_skipped_for_time(res):
    skipped = views.skipped(res)
    assert len(skipped) == len(set(skipped))
    assert {"baseline", "bool_dilation", "ceiling (rounds)", "decode bound", "idle share baseline"} <= set(skipped)
    assert not {"ceiling", "sweep nw=4", "profile bool_dilation nw=0"} & set(skipped)   # measured rows are not


def test_the_article_table_reads_the_reference_figures_it_has(res):
    t = reference.article_table(views.article_rows(res, h100(NB), None, ("sweep nw=4", "sweep nw=8")))
    t = t.set_index("effect")
    assert "7.7×" in t.iloc[0]["H100 reference"] and "680.5 -> 339.6" in t.loc["4 -> 8 workers", "H100 reference"]
    assert "50x cheaper" in t.loc["boolean dilation", "H100 reference"]
    assert t.loc["4 -> 8 workers", "this run"] == reference.NOT_MEASURED
