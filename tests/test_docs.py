"""The README stays short and its first screen complete; the docs' relative links resolve; every notebook is named in
the README (issue 33: the README's detail lives in docs/ and CONTRIBUTING.md)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) or [text](target "title"); images too
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def test_the_readme_is_at_most_10000_characters():
    n = len(README.read_text(encoding="utf-8"))
    assert n <= 10_000, f"README.md is {n} characters; move detail into docs/ or CONTRIBUTING.md"


def test_the_readme_first_screen_says_the_commands_what_they_need_and_the_doctor():
    first = "\n".join(README.read_text(encoding="utf-8").splitlines()[:25])
    missing = [w for w in ("make lab", "make test", "GB", "minutes", "perf-doctor") if w not in first]
    assert not missing, f"the README's first 25 lines do not mention {missing}"


def test_the_docs_exist():
    names = {p.name for p in DOCS}
    assert {"README.md", "CONTRIBUTING.md", "notebooks.md", "gpu.md", "doctor.md", "results.md"} <= names, names
    assert (ROOT / "LICENSE").is_file()


def links(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)   # code blocks hold no links
    text = re.sub(r"`[^`\n]*`", "", text)              # nor does inline code
    return LINK.findall(text)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_that_exists(doc):
    assert links(README), "no links found in README.md: the pattern is wrong"
    broken = []
    for target in links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue   # a URL (https:, mailto:) or an anchor in the same page
        path = target.split("#", 1)[0]
        if not (doc.parent / path).exists():
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)}: links to files that do not exist: {broken}"


def test_every_notebook_is_named_in_the_readme():
    readme = README.read_text(encoding="utf-8")
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert notebooks
    missing = [nb for nb in notebooks if nb not in readme]
    assert not missing, f"notebooks the README does not name: {missing}"
