"""Claims as data (helpers/notebook/checks.py): a rule reads a run's figures; a missing or failed figure makes the
claim false and says why; a GPU's claim does not apply on a CPU; the closing cell records what applies."""

from __future__ import annotations

import pytest

from helpers.notebook import checks
from helpers.notebook.results import Results


def run(tmp_path, device="cpu"):
    r = Results("07_memory", "smoke", {"device": device}, root=tmp_path)
    r.add("baseline", {}, {"peak_mb": 10.0})
    r.add("broken", {}, {}, status="failed", error="out of memory")
    r.note("error_pct", 4.0)
    return r


CLAIMS = [
    checks.Claim("small_error", "the error is under 10%", lambda f: abs(f.note("error_pct")) <= 10),
    checks.Claim(
        "big_peak", "the peak is over 100 MB", lambda f: f.metric("baseline", "peak_mb") > 100
    ),
    checks.Claim("broken_ran", "the broken row ran", lambda f: f.metric("broken", "peak_mb") > 0),
    checks.Claim(
        "gpu_only", "a GPU's figure", lambda f: f.note("gpu_mb") > 0, applies=checks.on_gpu
    ),
]


def test_rules_read_the_runs_figures(tmp_path):
    rows = {r["id"]: r for r in checks.judge(run(tmp_path).to_dict(), CLAIMS)}
    assert rows["small_error"]["holds"] is True
    assert rows["big_peak"]["holds"] is False and rows["big_peak"]["why"] == ""
    assert rows["broken_ran"]["holds"] is False
    assert "failed: out of memory" in rows["broken_ran"]["why"]
    assert rows["gpu_only"]["holds"] is None


def test_a_gpu_claim_applies_on_a_gpu_and_needs_its_figure(tmp_path):
    rows = {r["id"]: r for r in checks.judge(run(tmp_path, "cuda:0").to_dict(), CLAIMS)}
    assert rows["gpu_only"]["holds"] is False
    assert "no note 'gpu_mb'" in rows["gpu_only"]["why"]


def test_the_closing_cell_records_what_applies(tmp_path):
    r = run(tmp_path)
    table = checks.evaluate(r, CLAIMS)
    assert r.checks == {"small_error": True, "big_peak": False, "broken_ran": False}
    assert r.claims["small_error"] == "the error is under 10%"
    assert "gpu_only" not in r.checks
    assert "why" in table.columns


def test_an_id_is_lower_snake_case():
    with pytest.raises(ValueError, match="lower_snake_case"):
        checks.Claim("Not An Id", "x", checks.always)
