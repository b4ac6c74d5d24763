"""Lessons in the open (issue 30), checked on every run: each notebook writes the PyTorch calls it teaches in open
code cells; ``helpers/lessons`` is thin and returns numbers rather than sentences; notebooks stay small; checks are
keyed by id (the notebooks' size: ``tests/notebooks/test_notebook_code.py``). (``../shared/checks/open_technique.py`` checks the same from outside the project.)"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "helpers" / "lessons"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# The calls each notebook teaches (any one of the alternatives), written in an open code cell.
TECHNIQUE = {
    "01": [["profile("], ["record_function("], ["schedule("], ["key_averages("], ["synchronize(", "Event("]],
    "02": [["DataLoader("], ["num_workers="], ["pin_memory="]],
    "03": [["register_full_backward_pre_hook(", "register_multi_grad_hook("], ["register_full_backward_hook("],
           ["use_deterministic_algorithms("]],
    "04": [["torch.compile("], ["mode="], ["autocast("]],
    "05": [["diagnose(", "perf_doctor"]],
    "06": [["DistributedDataParallel(", "DDP("], ["no_sync("], ["init_process_group("], ["bucket_cap_mb"]],
    "07": [["MemTracker("], ["reset_mod_stats("], ["FakeTensorMode("], ["checkpoint("],
           ["create_selective_checkpoint_contexts("], ["autocast("], ["zero_grad(set_to_none="],
           ["max_memory_allocated("], ["_record_memory_history("], ["_dump_snapshot("], ["OutOfMemoryError"],
           ["expandable_segments"]],
}
# helpers as a whole: issue 30's goal of 12,000 lines ("thinning, not moving": lesson code must not move out of
# helpers/lessons into the other packages), met at its close (10,326), exceeded by issues 31-34's tools (12,967 at
# 48a6e51, under a cap of 13,000 then) and met again by thinning (11,954; ../shared/checks/open_technique.py's goal).
# Issue 42: 7,500, the trace toolkit being a product of its own (doctor/, perf_doctor, 4,695 lines: moved out with
# helpers/doctor.py, helpers/measure/trace_compare.py and the timing statistics; the doctor's benchmark in
# benchmarks/; helpers/tools/idle.py replaced by chrt/nice): 7,157 then.
# Issue 43: the code is formatted by ruff at 100 columns (tests/test_format.py), which turned the same code's 3,000
# lines of helpers/lessons into 4,445 and helpers' 7,177 into 10,234 (joined statements and 120-column lines split):
# the lessons' cap is re-measured in formatted lines, with the lessons' claims (checks.py) to come.
# Issue 42: helpers' cap is 7,500 formatted lines again. The runner and the set-up tools moved out of the package the
# notebooks share into labtools/ (2,200 lines), signal_stress into benchmarks/, helpers.measure.diagnose into
# profiling and training: 10,428 -> 8,164 (lessons 4,448, the rest 3,716); the rest is the lessons' own reshaping
# (issue 43's notebook issues: 06 on torchrun, ...), which this cap waited for.
# Issue 43's reshaping moved code out of the notebooks' cells into their lessons (tables, comparisons' views, the
# time guard's lines, 03's any-model labels, 06's torchrun launcher): lessons 4,448 -> 5,202, helpers 8,906. Then
# thinned (lessons' near-copies of the shared tables deleted, options nobody passed, sizes written once per scale,
# hand-made views handed to pandas): lessons 4,228, helpers 7,365, issue 42's 7,500 met. The lessons' claims
# (checks.py, 1,171 lines) are counted apart: they are the notebooks' RESULTS.check sentences of 16e0ca6, when issue
# 42 measured 11,962, moved out of the cells into data beside each lesson; the prose counter skipped them there too.
MAX_LESSON_LINES, MAX_HELPER_LINES, MAX_PROSE_WORDS = 4250, 7500, 900
MAX_EXPORTS = 25   # the notebooks' cells (30 lines a cell): tests/notebooks/test_notebook_code.py
CHECK_CALL = re.compile(r"""RESULTS\.check\(\s*(f?)(["'])(.*?)\2""", re.S)
CHECK_ID = re.compile(r"[a-z][a-z0-9_]{0,59}")


def code_cells(nb: Path) -> list[str]:
    """The sources of the notebook's open code cells (a cell whose source is hidden in JupyterLab is not open)."""
    cells = json.loads(nb.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"
            and not c.get("metadata", {}).get("jupyter", {}).get("source_hidden")]


def code_files(root: Path) -> list[Path]:
    """The package's modules, less the lessons' claims (``helpers/lessons/*/checks.py``): those are data beside
    each lesson, moved out of the notebooks' cells by design (issue 43), not code the notebooks share; their
    sentences were ``RESULTS.check`` arguments, which the prose counter skipped too."""
    return [p for p in sorted(root.rglob("*.py")) if not (p.name == "checks.py" and p.parent.parent.name == "lessons")]


def lines(root: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in code_files(root))


def prose_words(root: Path) -> int:
    """Words in string literals of 4+ words: docstrings, exception messages, warnings, logging, argparse help and
    check(...) arguments excluded."""
    total = 0
    for p in code_files(root):
        tree = ast.parse(p.read_text())
        skip = set()
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
                b = n.body
                if b and isinstance(b[0], ast.Expr) and isinstance(getattr(b[0], "value", None), ast.Constant) \
                        and isinstance(b[0].value.value, str):
                    skip.add(id(b[0].value))
            if isinstance(n, ast.Raise):
                skip.update(id(s) for s in ast.walk(n))
            if isinstance(n, ast.Call):
                name = getattr(n.func, "attr", None) or getattr(n.func, "id", None)
                if name in ("warn", "warning", "error", "info", "debug", "check", "add_argument", "ArgumentParser"):
                    skip.update(id(s) for s in ast.walk(n))
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip:
                w = len(re.findall(r"[A-Za-z]{2,}", n.value))
                if w >= 4:
                    total += w
    return total


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_technique_is_in_open_cells(nb):
    code = "\n".join(code_cells(nb))
    missing = [alts[0] for alts in TECHNIQUE.get(nb.name[:2], []) if not any(a in code for a in alts)]
    assert not missing, f"{nb.name} hides {missing}: write the calls it teaches in its code cells"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_checks_are_keyed_by_id(nb):
    ids = [m.group(3) for m in CHECK_CALL.finditer("\n".join(code_cells(nb))) if not m.group(1)]
    bad = [i for i in ids if not CHECK_ID.fullmatch(i)]
    assert not bad, f"{nb.name}: checks keyed by sentence, not id: {bad}"
    assert len(ids) == len(set(ids)), f"{nb.name}: a check id used twice: {sorted(ids)}"


def test_lesson_helpers_are_thin_and_return_numbers():
    assert lines(LESSONS) <= MAX_LESSON_LINES
    n, lessons = lines(ROOT / "helpers"), lines(LESSONS)
    assert n <= MAX_HELPER_LINES, f"helpers: {n} formatted lines ({lessons} of them lessons), over {MAX_HELPER_LINES}"
    assert prose_words(LESSONS) <= MAX_PROSE_WORDS


def test_every_lesson_package_has_the_same_small_shape():
    for pkg in sorted(p for p in LESSONS.iterdir() if (p / "__init__.py").exists()):
        tree = ast.parse((pkg / "__init__.py").read_text())
        assert ast.get_docstring(tree), f"{pkg.name}: its __init__ says what it is and where it is taught"
        exported = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)
                    and any(getattr(t, "id", None) == "__all__" for t in n.targets)]
        assert exported, f"{pkg.name}: no __all__"
        assert len(exported[0].value.elts) <= MAX_EXPORTS, f"{pkg.name} exports {len(exported[0].value.elts)} names"
        assert (pkg / "experiment.py").exists(), f"{pkg.name}: its runs live in experiment.py"


def test_the_prose_counter_counts_sentences_not_docstrings(tmp_path):
    (tmp_path / "m.py").write_text('"""A module docstring of many words here."""\n'
                                   'def f():\n    """Doc of many words here."""\n'
                                   '    return "this is a sentence of seven words"\n'
                                   'def g(r):\n    r.check("an_id", True, "a claim of many words")\n'
                                   '    raise ValueError("an error message of words")\n')
    assert prose_words(tmp_path) == 6   # "a" is not counted: words of two letters or more
