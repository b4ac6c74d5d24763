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


def test_setups_install_line_is_whole_online_and_offline(tmp_path):
    """The install line names both packages with their extras, whether it goes through uv or a wheel folder (a
    comma inside make's $(if ...) once split the line and left an unterminated quote)."""
    stamp = ".venv/.installed-stamp"
    for wheels in ("", str(tmp_path)):
        p = subprocess.run(["make", "-n", "-B", stamp, f"WHEELS={wheels}"], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        install = [ln for ln in p.stdout.splitlines() if "install" in ln][0]
        assert install.count('"') % 2 == 0 and install.count("'") % 2 == 0, install
        if wheels:
            assert '"./doctor[full]"' in install and '".[lab,test]"' in install, install
        else:
            assert "labtools.install" in install, install
