"""Each lesson's claims (``helpers/lessons/<lesson>/checks.py``) are data, tested without running a notebook: their
ids are unique and valid, and on the recorded GPU reference (``data/reference/<gpu>/<notebook>/results.json``) every
claim that applies there and reads only figures the reference recorded holds. A reference recorded before a claim's
figure existed leaves that claim unmeasured there, counted and named, and at least one claim of each lesson must be
measured on the reference, or the test says the reference is stale."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from helpers.notebook import checks

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted(p.parent.name for p in (ROOT / "helpers" / "lessons").glob("*/checks.py"))
REFERENCES = sorted(p for p in (ROOT / "data" / "reference").glob("*") if p.is_dir())


def claims_of(lesson: str):
    return importlib.import_module(f"helpers.lessons.{lesson}.checks")


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_lessons_claims_are_data_with_unique_ids(lesson):
    mod = claims_of(lesson)
    ids = [c.id for c in mod.CLAIMS]
    assert ids and len(ids) == len(set(ids)), ids
    assert all(isinstance(c, checks.Claim) and c.sentence.strip() for c in mod.CLAIMS)
    assert (ROOT / "notebooks" / f"{mod.NOTEBOOK}.ipynb").exists()


@pytest.mark.parametrize("lesson", LESSONS)
@pytest.mark.parametrize("ref", REFERENCES, ids=lambda p: p.name)
def test_every_claim_measured_on_the_gpu_reference_holds(lesson, ref):
    mod = claims_of(lesson)
    path = ref / mod.NOTEBOOK / "results.json"
    if not path.exists():
        pytest.skip(f"no {ref.name} reference of {mod.NOTEBOOK} yet")
    rows = checks.judge(json.loads(path.read_text()), mod.CLAIMS)
    measured = [r for r in rows if r["holds"] is not None and not r["why"]]
    false = [f"{r['id']}: {r['claim']}" for r in measured if not r["holds"]]
    assert not false, f"false on the {ref.name} reference: {false}"
    assert measured, (
        f"none of {mod.NOTEBOOK}'s claims is measured on the {ref.name} reference: "
        + "; ".join(f"{r['id']} ({r['why']})" for r in rows)
    )
