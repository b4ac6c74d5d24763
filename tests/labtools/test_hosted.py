"""The hosted notebook's install (labtools.hosted, ``make hosted-sim`` runs it for real: a venv with a given torch, the
lab on top, the torch kept): README's line is the one simulated, and the notebooks' first cell says what to run."""

import json
import subprocess
import sys
from pathlib import Path

from labtools import hosted

ROOT = Path(__file__).resolve().parents[2]


def test_readme_gives_the_line_that_is_simulated():
    assert f"`%{hosted.LINE}`" in (ROOT / "README.md").read_text()
    assert "make hosted-sim" in (ROOT / "README.md").read_text()


def test_the_first_cell_says_what_to_run_without_the_lab():
    # -I -S: no site-packages (no lab, no doctor), no working folder on the path
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", hosted.FIRST_CELL], capture_output=True, text=True)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines == [lines[-1]] and f"%{hosted.LINE}" in lines[-1], proc.stderr


def test_the_first_cell_is_silent_with_the_lab():
    proc = subprocess.run([sys.executable, "-c", hosted.FIRST_CELL], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and not proc.stdout and not proc.stderr


def test_every_notebooks_first_cell_says_what_to_run_without_the_lab():
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        first = "".join(next(c for c in cells if c["cell_type"] == "code")["source"])
        assert first.startswith(hosted.FIRST_CELL), f"{nb.name}'s first code cell lacks the hosted-notebook lines"
