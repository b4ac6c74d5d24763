"""What the notebooks' own text claims, checked against its sources."""
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_notebook_version_claims_name_their_source():
    """Issue 11: a statement about a PyTorch version names its source (a link in the same cell) or is removed,
    and the pull request the notebook quotes is quoted by its real title."""
    nb = json.loads((ROOT / "notebooks" / "03_backward_hooks.ipynb").read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        for m in re.finditer(r"(PyTorch|torch) \d+\.\d+", text):
            assert "https://" in text, f"unsourced version claim {m.group(0)!r} in: {text[:80]!r}"
        if "pull/55573" in text:
            assert "deterministic code path for gather_backward for dim = 1" in text
