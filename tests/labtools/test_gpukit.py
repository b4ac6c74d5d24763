"""labtools.gpukit and gpu-kit.txt: the GPU kit's list and its size budget, checked with no network."""
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from labtools import kernel
from labtools import gpukit
from labtools.wheelhouse import canonical

ROOT = Path(__file__).resolve().parents[2]
LOCK = gpukit.read_lock(ROOT / "gpu-kit.txt")
KIT = {w["name"]: w for w in LOCK["wheels"]}
# importable name -> distribution, where they differ
DISTRIBUTION = {"IPython": "ipython", "PIL": "pillow", "hta": "traceinsight", "zmq": "pyzmq", "yaml": "pyyaml",
                "torch_tb_profiler": "torch-tb-profiler", "sklearn": "scikit-learn"}
# what only JupyterLab, the tests or the browser need, and what the machine has
NOT_IN_KIT = re.compile(r"^(jupyterlab|jupyter-server.*|jupyter-lsp|notebook.*|nbconvert|playwright|pyee|greenlet|"
                        r"pytest.*|nbmake|setuptools|torch|torchvision|triton|nvidia-.*|cuda-.*|pandas|matplotlib|"
                        r"scipy|tensorboard|numpy)$")


def test_the_kit_fits_its_budget():
    total = sum(w["bytes"] for w in LOCK["wheels"])
    assert 0 < total <= gpukit.BUDGET_MIB * 2**20, f"{total / 2**20:.1f} MiB"
    # the header states the same figures
    head = next(h for h in LOCK["header"] if "wheels," in h)
    assert f"{len(LOCK['wheels'])} wheels, {total / 2**20:.1f} MiB" in head


def test_every_wheel_runs_on_the_machine_and_is_pinned_with_its_hash():
    for w in LOCK["wheels"]:
        tags = w["file"][:-4].split("-")[-3:]  # python, abi, platform
        assert canonical(w["file"].split("-")[0]) == w["name"] and w["file"].split("-")[1] == w["version"]
        assert tags[0] in ("py3", "py2.py3") or re.fullmatch(r"cp3(\d+)", tags[0].split(".")[0]), w["file"]
        if tags[1] != "none":
            assert tags[1] in ("cp312", "abi3") and int(tags[0].split(".")[0][3:]) <= 12, w["file"]
        assert tags[2] == "any" or ("manylinux" in tags[2] and tags[2].endswith("x86_64")), w["file"]
        assert len(w["sha256"]) == 64


def test_nothing_only_the_lab_the_tests_or_the_browser_need():
    bad = sorted(n for n in KIT if NOT_IN_KIT.match(n) or n in gpukit.NOT_IMPORTED)
    assert not bad, f"the kit carries {bad}"


def test_timm_is_pinned_to_what_the_notebooks_need():
    pins = gpukit.constraint_pins(ROOT)
    assert KIT["timm"]["version"] == pins["timm"]
    # the pinned release has what notebook 03 uses (this environment installs the same pin)
    import importlib
    import timm

    assert timm.__version__ == pins["timm"]
    mod, attr = gpukit.TIMM_NEEDS.split(":")
    assert hasattr(importlib.import_module(mod), attr)


def test_versions_are_constraints_txts():
    pins = gpukit.constraint_pins(ROOT)
    differ = {n: (w["version"], pins[n]) for n, w in KIT.items() if n in pins and pins[n] != w["version"]}
    assert not differ, differ


# what of labtools runs on the GPU machine: the runner, and the kit's own install
ON_THE_MACHINE = ("runner", "headless", "kernel", "pack", "gpukit", "wheelhouse")
# the doctor's optional engines, imported only when asked for (perf_doctor.cluster: --scheduler, the [dask] extra);
# a notebook's run never reads a job on a cluster
OPTIONAL = ("dask", "distributed")


def _third_party_imports() -> set[str]:
    mods = set()

    def scan(src: str):
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Import):
                mods.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods.add(node.module.split(".")[0])

    for path in (ROOT / "helpers").rglob("*.py"):
        scan(path.read_text())
    for name in ON_THE_MACHINE:   # labtools' set-up tools (install, devsetup, labcopy, gpusim) never run there
        scan((ROOT / "labtools" / f"{name}.py").read_text())
    for path in (ROOT / "doctor" / "perf_doctor").rglob("*.py"):   # the doctor the notebooks import
        scan(path.read_text())
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] == "code":
                scan("\n".join(ln for ln in "".join(cell["source"]).splitlines()
                               if not ln.lstrip().startswith(("%", "!"))))
    # the project's own: helpers and labtools from the checkout, perf_doctor from the kit's wheel (doctor_wheel); pip
    # the machine's (the kit's install runs it; its vendored packaging only for `lock`, here)
    return {m for m in mods if m not in sys.stdlib_module_names
            and m not in ("helpers", "labtools", "perf_doctor", "pip", *OPTIONAL)}


def test_every_import_of_a_run_is_in_the_kit_or_on_the_machine():
    have = set(KIT) | set(LOCK["machine"])
    missing = sorted(m for m in _third_party_imports() if canonical(DISTRIBUTION.get(m, m)) not in have)
    assert not missing, f"imported by helpers or the notebooks, in neither the kit nor the machine's set: {missing}"
    assert {canonical(n) for n in gpukit.NEEDS} <= set(KIT)
    assert {"nbclient", "nbformat", "ipykernel", "jupyter-client", "pyzmq"} <= set(KIT)  # what the runner needs
    assert set(kernel.missing_packages()) == set()  # and this environment has them


def test_closure_follows_markers_and_extras_and_skips_what_is_not_imported():
    requires = {"a": ["b", "c; sys_platform == 'win32'", "d[x]", "e; extra == 'docs'", "lab"],
                "d": ["f; extra == 'x'", "g"], "lab": ["server"]}
    assert gpukit.closure(["a"], requires, {"lab": "never imported"}) == {"a", "b", "d", "f", "g"}


def test_cli_names_its_commands():
    out = subprocess.run([sys.executable, "-m", "labtools.gpukit", "--help"], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    for word in ("lock", "build", "install", "--kit"):
        assert word in out


def test_install_without_a_kit_says_what_to_do(tmp_path):
    with pytest.raises(SystemExit, match="make gpu-kit"):
        gpukit.install(tmp_path)
