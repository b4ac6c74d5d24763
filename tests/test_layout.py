"""The packages' layout, checked: ``helpers`` (what the notebooks share), ``labtools`` (the lab's commands) and
``perf_doctor`` (the trace doctor, ``doctor/``): no import cycle between modules or between packages, no module over 600 formatted lines, no module reaching into another's private names, every module named in its
package's index (``__init__.py``) and in CONTRIBUTING.md's layout section; the doctor imports nothing from the lab."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "helpers"
TOOLS = ROOT / "labtools"
DOCTOR = ROOT / "doctor" / "perf_doctor"
PACKAGES = (PKG, TOOLS, DOCTOR)
OURS = ("helpers", "labtools", "perf_doctor")
MAX_LINES = 600  # formatted lines (ruff, 100 columns: tests/test_format.py); 450 before the formatter


def modules(packages=PACKAGES) -> dict[str, Path]:
    """``{dotted name: file}`` of every module of the packages (a package is its ``__init__``)."""
    out = {}
    for pkg in packages:
        for f in sorted(pkg.rglob("*.py")):
            parts = f.relative_to(pkg.parent).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


def _resolve(mod: str, is_pkg: bool, level: int, target: str | None) -> str:
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Every import (module level or inside a function) from one module of ``mods`` of another: ``{a: {b, ...}}``."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_pkg, node.level, node.module) if node.level else (node.module or "")
                # ``from pkg import submodule`` imports the submodule; ``from pkg import name``, pkg itself
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                while t and t not in mods:  # helpers.x.y.name -> the module helpers.x.y
                    t = t.rpartition(".")[0]
                if t and t != mod and t.split(".")[0] in OURS:
                    graph[mod].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None. A package's ``__init__`` importing its own
    submodules is no cycle; a submodule importing its package's ``__init__`` is counted."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (c := visit(n)):
                return c
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_no_import_cycle_inside_helpers_or_the_doctor():
    cycle = find_cycle(imports(modules()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def packages_of(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph seen a package at a time: ``helpers.measure``, ``helpers.notebook``, each
    ``helpers.lessons.X``, and ``labtools`` and ``perf_doctor`` whole (a module directly in ``helpers`` is its own)."""

    def package(mod: str) -> str:
        parts = mod.split(".")
        if parts[0] != "helpers":
            return parts[0]
        return ".".join(parts[:3] if parts[1:2] == ["lessons"] else parts[:2])

    out: dict[str, set[str]] = {}
    for mod, targets in graph.items():
        out.setdefault(package(mod), set()).update(package(t) for t in targets)
    for pkg, targets in out.items():
        targets.discard(pkg)
    for pkg in {t for targets in out.values() for t in targets}:
        out.setdefault(pkg, set())
    return out


def test_no_import_cycle_between_packages():
    """helpers -> perf_doctor, labtools -> helpers and perf_doctor, lessons -> notebook -> measure: one way each
    (``helpers.measure`` <-> ``helpers.notebook`` was the last cycle; a package's ``__init__`` counts as it)."""
    cycle = find_cycle(packages_of(imports(modules())))
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle)


def test_the_package_graph_sees_a_cycle_between_packages():
    graph = {"helpers.measure.a": {"helpers.notebook.b"}, "helpers.notebook.b": set(),
             "helpers.notebook.c": {"helpers.measure.d"}, "helpers.measure.d": set(),
             "labtools.x": {"helpers.notebook.b"}, "perf_doctor.y": {"labtools.x"}}
    pk = packages_of(graph)
    assert find_cycle(pk) == ["helpers.measure", "helpers.notebook", "helpers.measure"]
    assert pk["perf_doctor"] == {"labtools"} and pk["labtools"] == {"helpers.notebook"}


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_is_over_600_lines():
    long = {m: n for m, f in modules().items() if (n := len(f.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concern): {long}"


def test_no_module_uses_another_modules_private_names():
    mods = modules()
    bad = []
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        aliases = {}   # local name -> helpers module it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = (_resolve(mod, path.name == "__init__.py", node.level, node.module) if node.level
                        else node.module or "")
                for a in node.names:
                    if f"{base}.{a.name}" in mods:
                        aliases[a.asname or a.name] = f"{base}.{a.name}"
                    elif a.name.startswith("_") and base.split(".")[0] in OURS and base != mod:
                        bad.append(f"{mod}: from {base} import {a.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append(f"{mod}: {node.value.id}.{node.attr}")
    assert not bad, "private names used across modules: " + "; ".join(bad)


def layout_section() -> str:
    """CONTRIBUTING.md's "## Layout" section, up to the next section (the README links to it)."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    m = re.search(r"^## Layout\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, "CONTRIBUTING.md has no '## Layout' section"
    return m.group(1)


def test_the_index_and_the_layout_name_every_module():
    readme = layout_section()
    mods = modules()
    missing_index, missing_readme = [], []
    for mod in mods:
        parts = mod.split(".")
        if len(parts) < 2 or parts[-1] == "__main__":
            continue
        # a module is named (``name``) in the index of the package that holds it
        index = mods[".".join(parts[:-1])].read_text()
        if f"``{parts[-1]}``" not in index and f"``{mod}``" not in index:
            missing_index.append(mod)
        if len(parts) == 2 and parts[0] in ("helpers", "labtools"):
            named = any(
                n in readme for n in (f"{parts[1]}/", f"{parts[1]}.py", f"{parts[0]}.{parts[1]}")
            )
        else:   # the doctor's modules, named in its entry's prose
            named = len(parts) > 2 or re.search(rf"\b{parts[1]}\b", readme) is not None
        if not named:
            missing_readme.append(mod)
    assert not missing_index, f"modules their package's index does not name: {missing_index}"
    assert not missing_readme, f"top-level packages and modules CONTRIBUTING.md's layout does not name: {missing_readme}"


def test_the_layout_names_every_top_level_folder_of_python():
    """``helpers/``, ``doctor/`` (its ``perf_doctor``), ``benchmarks/``, ``tests/``, ``data/``: each in the layout."""
    readme = layout_section()
    tops = [d for d in ROOT.iterdir()   # not into .venv, build/ and the run folders (a walk of .venv took 18 s)
            if d.is_dir() and not d.name.startswith((".", "build", "lab", "results", "runs"))]
    folders = {d.name for d in tops if next(d.glob("**/*.py"), None) is not None}
    missing = sorted(f for f in folders if f"{f}/" not in readme)
    assert not missing, f"folders of Python CONTRIBUTING.md's layout does not name: {missing}"
    assert "perf_doctor" in readme


def test_the_doctor_imports_nothing_from_the_lab():
    """``perf_doctor`` stands alone (it reads a trace from any job, installed without torch): it imports nothing from
    ``helpers``, at module level or inside a function. The lab imports it (``helpers.measure.compare`` its statistics,
    ``helpers.measure.timing`` its ``gc_paused``); ``helpers.notebook.display`` hands ``perf_doctor.show`` its
    renderers."""
    graph = imports(modules())
    bad = {m: sorted(t for t in targets if t.split(".")[0] == "helpers")
           for m, targets in graph.items() if m.split(".")[0] == "perf_doctor"}
    bad = {m: t for m, t in bad.items() if t}
    assert not bad, f"the doctor imports from the lab: {bad}"


def test_the_layer_check_sees_a_lazy_import():
    """The check above reads function-level imports too (``imports`` walks the whole tree)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        doc = Path(d) / "doctor" / "perf_doctor"
        doc.mkdir(parents=True)
        (doc / "__init__.py").write_text("")
        (doc / "x.py").write_text("def f():\n    from helpers.measure.timing import StepTimes\n")
        lab = Path(d) / "helpers"
        (lab / "measure").mkdir(parents=True)
        for f in (lab / "__init__.py", lab / "measure" / "__init__.py", lab / "measure" / "timing.py"):
            f.write_text("")
        mods = modules((lab, doc))
        assert set(mods) == {"helpers", "helpers.measure", "helpers.measure.timing", "perf_doctor", "perf_doctor.x"}
        assert imports(mods)["perf_doctor.x"] == {"helpers.measure.timing"}
