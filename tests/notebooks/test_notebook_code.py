"""Notebooks read as lessons: imports take a few short lines. There is no cap on a notebook's code lines, nor on a
cell's (notebooks squeezed their code to fit such caps, with joined statements): the code is formatted instead
(tests/test_format.py) and the reader's time is measured (../shared/checks/reader.py)."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def code_cells(path):
    return [
        "".join(c["source"])
        for c in json.loads(path.read_text())["cells"]
        if c["cell_type"] == "code"
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_imports_in_a_few_short_lines(path):
    lines = [
        ln
        for src in code_cells(path)
        for ln in src.splitlines()
        if ln.startswith(("from helpers", "import helpers"))
    ]
    assert 1 <= len(lines) <= 8 and all(len(ln) <= 100 for ln in lines), lines
