"""Committed notebooks are clean and follow the skeleton in shared/STYLE.md."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
EXPECTED = ["01_profiler_basics", "02_data_pipeline", "03_backward_hooks", "04_torch_compile", "05_diagnose"]


def test_notebooks_present_in_teaching_order():
    """The four lessons come first; later ones (05_diagnose, ...) continue the numbering without gaps."""
    stems = [p.stem for p in NOTEBOOKS]
    assert stems[:len(EXPECTED)] == EXPECTED, f"expected {EXPECTED} first, found {stems}"
    numbers = [int(s[:2]) for s in stems]
    assert numbers == list(range(1, len(stems) + 1)), f"notebook numbers must run 01, 02, ... without gaps: {stems}"


def _load(path):
    return json.loads(path.read_text())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_outputs_or_execution_counts(path):
    nb = _load(path)
    for i, c in enumerate(nb["cells"]):
        if c["cell_type"] == "code":
            assert not c.get("outputs"), f"{path.name} cell {i} has outputs: clear them before committing"
            assert c.get("execution_count") is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_cell_has_its_own_id(path):
    """nbformat 4.5 cells carry an id; JupyterLab gives one to a cell without, and so marks the notebook modified the
    moment it opens (issue 33)."""
    nb = _load(path)
    ids = [c.get("id") for c in nb["cells"]]
    assert (nb["nbformat"], nb["nbformat_minor"]) >= (4, 5) and all(ids), f"{path.name}: cells without an id"
    assert len(set(ids)) == len(ids), f"{path.name}: a cell id used twice"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_skeleton(path):
    nb = _load(path)
    cells = nb["cells"]
    md = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells if c["cell_type"] == "markdown"]
    assert cells[0]["cell_type"] == "markdown" and re.match(r"#\s+\S", "".join(cells[0]["source"])), "title first"
    text = "\n".join(md)
    assert "What you will learn" in "".join(cells[0]["source"]), "the title cell says what you will learn"
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1 and tagged[0]["cell_type"] == "code", "exactly one code cell tagged 'parameters'"
    assert re.search(r"^##\s+Set-up", text, re.M), "a set-up section"
    assert re.search(r"^##\s+Results", text, re.M), "a results section"
    assert re.search(r"^##\s+Takeaways", text, re.M), "a takeaways section"
    order = [text.find("## Set-up"), text.find("## Results"), text.find("## Takeaways")]
    assert order == sorted(order), "set-up, results, takeaways in that order"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_hub_downloads_or_exits(path):
    src = "\n".join("".join(c["source"]) for c in _load(path)["cells"] if c["cell_type"] == "code")
    assert "pretrained=True" not in src
    assert "sys.exit" not in src and "exit()" not in src
    assert "0.0.0.0" not in src
