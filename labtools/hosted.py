"""``make hosted-sim``: a hosted notebook (Colab, Kaggle) simulated here: does README's one line install the lab on
top of the torch a learner already has, and keep it?

As ``gpusim`` makes its machine: a venv of ``--python`` with ``--torch`` and ``--torchvision`` installed by pip (from
the index or the wheels pip's own configuration names, offline where those are local; made once, ``--fresh``
again), the project copied as a clone has it (``gpusim.carry``), then in that folder the notebooks' first cell
(``FIRST_CELL``: it must say what to run), ``pip install ./doctor .`` (``LINE``, README's ``%pip`` line), the first
cell again (silent now) and a check in a fresh process (``CHECK``): torch's and torchvision's versions as before, the
lab and the doctor import from the install (run in the clone's notebooks/, as a notebook is), no JupyterLab, HTA or
pytest came with it. Report in ``build/hosted-sim/report.json``;
exit 0 only when all of it holds. Each run starts from the venv as torch left it (what a run installed is uninstalled first).

Usage: ``python -m labtools.hosted [--torch 2.13.0+cpu] [--torchvision 0.28.0] [--python python3] [--fresh]``"""

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import exits
from .gpusim import carry, sh

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "build" / "hosted-sim"
LINE = "pip install ./doctor ."  # README: `%pip install ./doctor .` in the clone's folder
# The lines a notebook's first code cell starts with: without the lab, one line says what to run.
FIRST_CELL = """try:
    import helpers  # noqa: F401
    import perf_doctor  # noqa: F401
except ModuleNotFoundError:
    raise SystemExit("No lab here: in its folder run  %pip install ./doctor .  (README)") from None
"""
CHECK = """import importlib.metadata, importlib.util, json, torch
import helpers, perf_doctor
from helpers.measure import compare, timing
from helpers.notebook import env, results
absent = [m for m in ("jupyterlab", "hta", "pytest") if importlib.util.find_spec(m)]
print(json.dumps({"torch": torch.__version__, "torchvision": importlib.metadata.version("torchvision"),
                  "helpers": helpers.__file__, "project_root": str(env.project_root()),
                  "unwanted": absent}))
"""


def machine(python: str, torch: str, torchvision: str, fresh: bool) -> Path:
    """The hosted notebook's Python: a venv with the given torch and torchvision (made once), brought back to what it
    held then (everything installed since uninstalled)."""
    venv = SIM / "venv"
    want = [f"torch=={torch}", f"torchvision=={torchvision}"]
    stamp = venv / "machine.json"
    if fresh and venv.exists():
        shutil.rmtree(venv)
    py = venv / "bin" / "python"
    if not (stamp.exists() and json.loads(stamp.read_text()).get("packages") == want):
        sh(python.split() + ["-m", "venv", "--clear", str(venv)], f"making a venv with {python}")
        print(f"installing {' '.join(want)} into {venv} ...", flush=True)
        sh([str(py), "-m", "pip", "install", "--quiet", *want], "installing the notebook's torch")
        stamp.write_text(json.dumps({"packages": want, "holds": sorted(versions(py))}) + "\n")
    since = sorted(set(versions(py)) - set(json.loads(stamp.read_text())["holds"]))
    if since:
        sh(
            [str(py), "-m", "pip", "uninstall", "--yes", "--quiet", *since],
            "uninstalling the last run's",
        )
    return py


def versions(py: Path) -> dict[str, str]:
    """``{name: version}`` of what ``py``'s environment holds (``pip list``)."""
    out = sh([str(py), "-m", "pip", "list", "--format", "json"], "pip list").stdout
    return {p["name"].lower(): p["version"] for p in json.loads(out)}


def first_cell(py: Path, clone: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(py), "-c", FIRST_CELL], cwd=clone / "notebooks", capture_output=True, text=True
    )


def simulate(py: Path, clone: Path) -> dict:
    """The first cell, README's line, the first cell again and ``CHECK``, in the clone; what each showed."""
    before = versions(py)
    guard = first_cell(py, clone)
    t0 = time.perf_counter()
    proc = subprocess.run([str(py), "-m", *LINE.split()], cwd=clone, capture_output=True, text=True)
    install_s = time.perf_counter() - t0
    after = versions(py)
    again = first_cell(py, clone)
    check = subprocess.run(
        [str(py), "-c", CHECK], cwd=clone / "notebooks", capture_output=True, text=True
    )
    seen = json.loads(check.stdout) if check.returncode == 0 else {}
    kept = {n: (before.get(n), after.get(n)) for n in ("torch", "torchvision")}
    report = {
        "line": LINE,
        "install_s": round(install_s, 1),
        "install_status": proc.returncode,
        "torch_before_after": kept,
        "installed": sorted(set(after) - set(before)),
        "first_cell_without_the_lab": (guard.stderr.strip().splitlines() or [""])[-1],
        "first_cell_with_it": again.returncode,
        "check": seen or check.stderr.strip()[-500:],
    }
    report["ok"] = (
        proc.returncode == 0
        and all(a == b and a is not None for a, b in kept.values())
        and guard.returncode == 1
        and "%pip install ./doctor ." in report["first_cell_without_the_lab"]
        and again.returncode == 0
        and bool(seen)
        and not seen.get("unwanted")
    )
    if proc.returncode != 0:
        report["pip_tail"] = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="the Python to make the venv with")
    ap.add_argument(
        "--torch", default="2.13.0+cpu", help="the torch the notebook has (default 2.13.0+cpu)"
    )
    ap.add_argument("--torchvision", default="0.28.0", help="its torchvision (default 0.28.0)")
    ap.add_argument("--fresh", action="store_true", help="make the venv again")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    py = machine(args.python, args.torch, args.torchvision, args.fresh)
    clone, mib = carry(None, SIM / "clone")
    report = simulate(py, clone) | {"clone_mib": round(mib, 1)}
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    (SIM / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    kept = ", ".join(f"{n} {a} -> {b}" for n, (a, b) in report["torch_before_after"].items())
    print(
        f"{'ok' if report['ok'] else 'NOT OK'}: `{LINE}` in {report['install_s']} s ({kept}); "
        f"{report['wall_s']} s in all; report in {SIM / 'report.json'}"
    )
    return exits.OK if report["ok"] else exits.FAILED


if __name__ == "__main__":
    sys.exit(main())
