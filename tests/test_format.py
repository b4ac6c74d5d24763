"""The code is formatted, not squeezed: ruff formats the notebooks' code cells (it reads .ipynb itself),
``helpers``, ``labtools``, the doctor and the benchmarks at 100 columns (pyproject.toml's ``[tool.ruff]``), and its
linter finds no joined statement (E701, E702), no lambda bound to a name (E731) and no statement that does nothing
(B018). A notebook's code lines are also at most 100 characters (E501: the formatter does not split strings or
comments), since a learner reads them in a 100-column cell."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORMATTED = ["helpers", "labtools", "doctor/perf_doctor", "benchmarks", "notebooks"]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
def ruff() -> list[str]:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: make setup installs it (the test extra)")
    return [found]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*ruff(), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_code_is_formatted_at_100_columns():
    done = run("format", "--check", *FORMATTED)
    assert done.returncode == 0, (
        "not formatted (run `ruff format` on these):\n" + done.stdout + done.stderr
    )


def test_no_joined_statements_or_named_lambdas_in_the_packages():
    done = run("check", "helpers", "labtools", "doctor/perf_doctor", "benchmarks")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda n: n.stem)
def test_a_notebooks_code_is_not_squeezed(nb):
    done = run("check", "--extend-select", "E501", str(nb.relative_to(ROOT)))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_check_finds_a_squeezed_cell(tmp_path):
    """The linter's rules are on: a joined statement and a named lambda in a notebook are found."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1; y = 2\nf = lambda v: v\n")]
    path = tmp_path / "squeezed.ipynb"
    nbformat.write(nb, path)
    done = subprocess.run(
        [*ruff(), "check", "--config", str(ROOT / "pyproject.toml"), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "E702" in done.stdout and "E731" in done.stdout
