"""`make lab` opens working copies (lab/, git-ignored): the tracked notebooks never take a learner's outputs."""
import subprocess
from pathlib import Path

from labtools import labcopy

ROOT = Path(__file__).resolve().parents[2]


def test_copies_follow_their_notebook_until_the_learner_changes_them(tmp_path):
    src, dest = tmp_path / "notebooks", tmp_path / "lab"
    src.mkdir()
    (src / "01_a.ipynb").write_text("v1")
    (src / "02_b.ipynb").write_text("v1")
    (src / "notes.ipynb").write_text("not a lesson")
    assert all("copied" in line for line in labcopy.sync(src, dest))
    assert sorted(p.name for p in dest.glob("*.ipynb")) == ["01_a.ipynb", "02_b.ipynb"]
    assert all(line.endswith("yours") for line in labcopy.sync(src, dest))
    (dest / "01_a.ipynb").write_text("v1 with my outputs")      # the learner ran and saved it
    (src / "01_a.ipynb").write_text("v2")                       # and the project changed both notebooks
    (src / "02_b.ipynb").write_text("v2")
    lines = labcopy.sync(src, dest)
    assert "kept (you changed it)" in lines[0] and (dest / "01_a.ipynb").read_text() == "v1 with my outputs"
    assert "updated" in lines[1] and (dest / "02_b.ipynb").read_text() == "v2"
    (dest / "01_a.ipynb").unlink()                              # deleting a copy brings the new notebook
    assert "copied" in labcopy.sync(src, dest)[0] and (dest / "01_a.ipynb").read_text() == "v2"


def test_make_lab_serves_the_copies_and_git_ignores_them():
    dry = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    assert "labtools.labcopy" in dry and "cd lab &&" in dry and "cd notebooks" not in dry
    ignored = subprocess.run(["git", "check-ignore", "lab/01_profiler_basics.ipynb"], cwd=ROOT, capture_output=True)
    assert ignored.returncode == 0
