"""The package's layout, checked: no import cycle inside ``helpers``, no module over 450 lines, no module reaching
into another's private names, every module named in the index (``helpers/__init__.py``) and in CONTRIBUTING.md's
layout section."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "helpers"
MAX_LINES = 450


def modules() -> dict[str, Path]:
    """``{dotted name: file}`` of every module of the package (a package is its ``__init__``)."""
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        parts = f.relative_to(ROOT).with_suffix("").parts
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
    """Every import (module level or inside a function) from one ``helpers`` module of another: ``{a: {b, ...}}``."""
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
                if t and t != mod and t.startswith("helpers"):
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


def test_no_import_cycle_inside_helpers():
    cycle = find_cycle(imports(modules()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_is_over_450_lines():
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
                    elif a.name.startswith("_") and base.startswith("helpers") and base != mod:
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
    missing_index, missing_readme = [], []
    for mod in modules():
        parts = mod.split(".")
        if len(parts) < 2 or parts[-1] == "__main__":
            continue
        # a module is named (``name``) in the index of the package that holds it
        index = (PKG.joinpath(*parts[1:-1]) / "__init__.py").read_text()
        if f"``{parts[-1]}``" not in index and f"``{mod}``" not in index:
            missing_index.append(mod)
        if len(parts) == 2 and not any(n in readme for n in (f"{parts[1]}/", f"{parts[1]}.py", f"helpers.{parts[1]}")):
            missing_readme.append(mod)
    assert not missing_index, f"modules their package's index does not name: {missing_index}"
    assert not missing_readme, f"top-level packages and modules CONTRIBUTING.md's layout does not name: {missing_readme}"


def test_the_trace_toolkit_imports_nothing_from_measure_or_notebook():
    """``helpers.traces`` stands alone (the doctor reads a trace from any job): it imports neither ``helpers.measure``
    nor ``helpers.notebook``, at module level or inside a function. What needs both lives above it
    (``helpers.measure.trace_compare``, ``helpers.doctor``); ``helpers.notebook.display`` hands ``traces.show`` its
    renderers."""
    graph = imports(modules())
    bad = {m: sorted(t for t in targets if t.split(".")[:2] in (["helpers", "measure"], ["helpers", "notebook"]))
           for m, targets in graph.items() if m.split(".")[:2] == ["helpers", "traces"]}
    bad = {m: t for m, t in bad.items() if t}
    assert not bad, f"the trace toolkit imports from measure/notebook: {bad}"


def test_the_layer_check_sees_a_lazy_import():
    """The check above reads function-level imports too (``imports`` walks the whole tree)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        pkg = Path(d) / "helpers" / "traces"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "x.py").write_text("def f():\n    from ..measure.timing import gc_paused\n")
        (Path(d) / "helpers" / "__init__.py").write_text("")
        (Path(d) / "helpers" / "measure").mkdir()
        (Path(d) / "helpers" / "measure" / "__init__.py").write_text("")
        (Path(d) / "helpers" / "measure" / "timing.py").write_text("")
        mods = {"helpers": Path(d) / "helpers" / "__init__.py", "helpers.traces": pkg / "__init__.py",
                "helpers.traces.x": pkg / "x.py", "helpers.measure": Path(d) / "helpers" / "measure" / "__init__.py",
                "helpers.measure.timing": Path(d) / "helpers" / "measure" / "timing.py"}
        assert imports(mods)["helpers.traces.x"] == {"helpers.measure.timing"}
