"""labtools.gpusim (make gpu-sim): what it carries and how it reads a run (the simulation itself is run by hand,
offline, with `make gpu-sim`: minutes, and a few GB for torch 2.11's CUDA wheels)."""
import json
import subprocess
import sys

from labtools import gpusim


def test_carry_copies_the_project_and_the_kit(tmp_path):
    kit = gpusim.ROOT / "build" / "test-gpusim-kit"
    kit.mkdir(parents=True, exist_ok=True)
    (kit / "demo-1.0-py3-none-any.whl").write_bytes(b"x" * 1000)
    try:
        dest, mib = gpusim.carry(kit, tmp_path / "carry")
    finally:
        (kit / "demo-1.0-py3-none-any.whl").unlink()
        kit.rmdir()
    assert (dest / "labtools" / "runner.py").is_file() and (dest / "gpu-kit.txt").is_file()
    assert (dest / "build" / "test-gpusim-kit" / "demo-1.0-py3-none-any.whl").is_file()
    assert not (dest / ".venv").exists() and not (dest / "results").exists()  # ignored files stay behind
    assert 0 < mib < gpusim.CARRY_LIMIT_MIB


def test_figures_say_ok_only_when_every_notebook_and_check_is(tmp_path):
    pack = tmp_path / "build" / "gpu-pack"
    pack.mkdir(parents=True)
    nb = {"notebook": "01_x", "status": "ok", "wall_s": 50.0, "checks_true": 3, "checks": 3, "checks_false": [],
          "experiments_failed": 0, "pack_bytes": 10, "error": None}
    (pack / "run-summary.json").write_text(json.dumps({"scale": "smoke", "notebooks": [nb], "not_run": []}))
    res = tmp_path / "build" / "gpu-run" / "01_x"
    res.mkdir(parents=True)
    (res / "results.json").write_text(json.dumps({"env": {"timm": "1.0.31", "torch": "2.11.0", "python": "3.12.1"}}))
    good = gpusim.figures(tmp_path, 19.6, 38, 22.5, 0, 60.0)
    assert good["ok"] and good["notebooks"][0]["timm"] == "1.0.31"
    nb.update(checks_true=2, checks_false=["a claim"])
    (pack / "run-summary.json").write_text(json.dumps({"scale": "smoke", "notebooks": [nb], "not_run": []}))
    assert not gpusim.figures(tmp_path, 19.6, 38, 22.5, 1, 60.0)["ok"]


def test_cli_help():
    out = subprocess.run([sys.executable, "-m", "labtools.gpusim", "--help"], capture_output=True, text=True,
                         cwd=gpusim.ROOT, check=True).stdout
    for opt in ("--python", "--machine-timm", "--scale", "--budget", "--fresh"):
        assert opt in out
