"""After nbmake has executed the notebooks (``make test`` runs them first), their results
honour the contract and every structural claim holds."""
import os
from pathlib import Path

import pytest

from helpers import results

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _doc(stem):
    if "PERF_RESULTS_DIR" not in os.environ:
        pytest.fail("run through `make test`, which executes the notebooks first and sets PERF_RESULTS_DIR")
    return results.load(stem)


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_results_json_matches_contract(stem):
    doc = _doc(stem)
    assert results.validate(doc) == []
    assert doc["notebook"] == stem
    assert doc["checks"], "a notebook states at least one claim"


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_every_check_holds(stem):
    doc = _doc(stem)
    failed = [k for k, v in doc["checks"].items() if not v]
    assert not failed, f"{stem}: these claims did not hold in this run: {failed}"


def test_profiler_basics_structure():
    doc = _doc("01_profiler_basics")
    names = [e["name"] for e in doc["experiments"]]
    assert {"train_step", "async_timing", "profiled_step"} <= set(names)
    prof = next(e for e in doc["experiments"] if e["name"] == "profiled_step")
    assert prof["status"] == "ok"
    for phase in ("forward", "backward", "optimizer_step"):
        assert prof["metrics"][f"{phase}_ms_per_step"] > 0
