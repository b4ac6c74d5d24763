"""environment.yml, pyproject.toml and constraints.txt stay in step."""
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_environment_yml_matches_pyproject():
    proj = _pyproject()
    wanted = {_name(r): r.replace(" ", "") for r in proj["dependencies"] + proj["optional-dependencies"]["test"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    have = {_name(r): r.replace(" ", "") for r in pip_section}
    assert have == wanted, f"environment.yml pip list differs from pyproject.toml: {set(have) ^ set(wanted)}"


def test_required_packages_declared():
    names = {_name(r) for r in _pyproject()["dependencies"]}
    for pkg in ("torch", "timm", "torchvision", "jupyterlab", "ipywidgets", "tensorboard", "torch-tb-profiler",
                "scipy", "pillow"):
        assert pkg in names


def test_constraints_pin_every_dependency_exactly():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, ver = line.partition("==")
            assert ver, f"constraints.txt line {line!r} is not an exact pin"
            pins[_name(name)] = ver
    proj = _pyproject()
    for req in proj["dependencies"] + proj["optional-dependencies"]["test"]:
        assert _name(req) in pins, f"{_name(req)} has no exact pin in constraints.txt"
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
