"""Notebooks read as lessons: no code cell is over 30 lines (harness code lives in helpers, where it is tested);
imports take a few short lines. There is no cap on a notebook's code lines (one squeezed its code to fit it, with
joined statements): the reader's time is measured instead (../shared/checks/reader.py)."""
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAX_CELL = 30


def code_cells(path):
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def budget(cells):
    """Lines per code cell, as a reader counts them (blank lines included), and the cells over ``MAX_CELL``."""
    n = [len(src.splitlines()) for src in cells]
    return sum(n), [(i, k) for i, k in enumerate(n) if k > MAX_CELL]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_a_reader_wades_through(path):
    _, big = budget(code_cells(path))
    assert not big, f"{path.name}: code cells over {MAX_CELL} lines (cell index, lines): {big}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_imports_in_a_few_short_lines(path):
    lines = [ln for src in code_cells(path) for ln in src.splitlines()
             if ln.startswith(("from helpers", "import helpers"))]
    assert 1 <= len(lines) <= 8 and all(len(ln) <= 120 for ln in lines), lines


def test_the_budget_counts_what_a_reader_sees():
    assert budget(["a\nb", "\n".join(["x"] * 31)]) == (33, [(1, 31)])
    assert budget(["\n".join(["x"] * 31)]) == (31, [(0, 31)])
