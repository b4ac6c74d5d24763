"""environment.yml, pyproject.toml, doctor/pyproject.toml and constraints.txt stay in step; the doctor's own install
needs no torch, JupyterLab or TensorBoard."""
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


DOCTOR = "perf-doctor"   # the project's own trace doctor (doctor/), installed from the checkout, never from an index


def _pyproject(folder: Path = ROOT):
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def _all_requirements() -> list[str]:
    """The lab's and its extras' requirements, and the doctor's with its full extra (the doctor itself aside)."""
    proj, doc = _pyproject(), _pyproject(ROOT / "doctor")
    extras = proj["optional-dependencies"]
    reqs = proj["dependencies"] + extras["lab"] + extras["test"] + doc["dependencies"]
    return [r for r in reqs + doc["optional-dependencies"]["full"] if _name(r) != DOCTOR]


def test_environment_yml_matches_pyproject():
    wanted = {_name(r): r.replace(" ", "") for r in _all_requirements()}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    have = {_name(r): r.replace(" ", "") for r in pip_section}
    assert have == wanted, f"environment.yml pip list differs from pyproject.toml: {set(have) ^ set(wanted)}"


def test_required_packages_declared():
    names = {_name(r) for r in _pyproject()["dependencies"]}
    for pkg in ("torch", "timm", "torchvision", "ipywidgets", "tensorboard", "torch-tb-profiler", "scipy", "pillow",
                DOCTOR):
        assert pkg in names
    lab = _pyproject()["optional-dependencies"]["lab"]
    assert "jupyterlab" in {_name(r) for r in lab}
    assert f"{DOCTOR}[full]" in lab   # make lab's notebooks show the library views (HTA declares JupyterLab)


def test_a_hosted_notebook_keeps_its_torch():
    """``%pip install ./doctor .`` on Colab or Kaggle: the base install bounds torch from below only and brings no
    JupyterLab, test tool or HTA (which declares JupyterLab); ``make hosted-sim`` installs it on a given torch."""
    base = _pyproject()["dependencies"]
    for req in base:
        if _name(req) in ("torch", "torchvision"):
            assert re.fullmatch(r"[a-z]+>=[0-9.]+", req.replace(" ", "")), f"{req}: a lower bound only"
    names = {_name(r) for r in base}
    test = {_name(r) for r in _pyproject()["optional-dependencies"]["test"]}
    assert not names & ({"jupyterlab", "traceinsight", "notebook"} | test)
    assert DOCTOR in base   # the doctor's base install: numpy, pandas, scipy, tqdm


def test_the_doctor_is_its_own_package_and_needs_no_torch():
    doc = _pyproject(ROOT / "doctor")
    assert doc["name"] == DOCTOR and doc["scripts"] == {"perf-doctor": "perf_doctor.cli:main"}
    base = {_name(r) for r in doc["dependencies"]}
    assert base == {"numpy", "pandas", "scipy", "tqdm"}
    full = {_name(r) for r in doc["optional-dependencies"]["full"]}
    assert {"traceinsight", "torch-tb-profiler"} <= full   # HTA declares JupyterLab, torch-tb-profiler TensorBoard
    assert not (base | full) & {"torch", "torchvision", "jupyterlab", "tensorboard", "pytorch-performance-lab"}


def test_constraints_pin_every_dependency_exactly():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, ver = line.partition("==")
            assert ver, f"constraints.txt line {line!r} is not an exact pin"
            pins[_name(name)] = ver
    for req in _all_requirements():
        assert _name(req) in pins, f"{_name(req)} has no exact pin in constraints.txt"
    assert DOCTOR not in pins   # installed from doctor/, whatever its version
    # torch 2.13's CPU build cannot load torchvision's ops; the pinned pair must match
    assert pins["torch"].startswith("2.14.1") and pins["torchvision"].startswith("0.29.1")


def test_servers_bind_to_loopback():
    mk = (ROOT / "Makefile").read_text()
    assert "HOST   := 127.0.0.1" in mk and "--ip $(HOST)" in mk


def test_importing_nbformat_and_jupyter_events_builds_no_iri_parsers():
    """constraints.txt's jsonschema (4.23) checks formats without rfc3987-syntax, whose import builds ~35 Earley
    parsers (2.4 s here) in every process that imports nbformat, nbclient or jupyter_server: pytest's workers, the
    runner, JupyterLab."""
    import subprocess
    import sys

    code = "import sys, nbformat, jupyter_events.validators; print('rfc3987_syntax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
