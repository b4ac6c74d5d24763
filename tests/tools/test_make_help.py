"""`make` alone is `make help`: it lists every target of the Makefile and installs nothing (issue 33)."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_make_alone_lists_every_target_and_starts_nothing():
    p = subprocess.run(["make", "-s", "--no-print-directory"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    listed = {line.split()[0] for line in p.stdout.splitlines()[1:] if line.strip()}
    assert set(phony) - {"help"} <= listed, p.stdout
    assert "GB" in p.stdout.splitlines()[0]  # what the first install costs, before anyone starts it
