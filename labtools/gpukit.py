"""``make gpu-kit``: the few wheels that execute every notebook headless on a borrowed GPU machine, and nothing else.

The machine (``MACHINE``) has torch and the scientific stack; the kit is what the notebooks and the runner import
that it lacks (``NEEDS``) plus the timm notebook 03 needs, locked in ``gpu-kit.txt`` (hashes, sizes, at most
``BUDGET_MIB``), and the trace doctor (doctor/, built into a wheel from this checkout: ``doctor_wheel``). ``lock``
(online: resolve, rewrite gpu-kit.txt), ``build`` (online: download into build/gpu-kit, the doctor's wheel beside),
``install`` (offline, on the GPU machine: ``pip --no-index --no-deps --target build/gpu-kit/site``, then an import
check). See docs/gpu.md."""

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import exits
from .wheelhouse import canonical, pip, report, target_args

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "gpu-kit.txt"
KIT = ROOT / "build" / "gpu-kit"
BUDGET_MIB = 40
PYTHON_VERSION = "3.12"
PLATFORM = "manylinux_2_28_x86_64"
TARGET = target_args(PYTHON_VERSION, [PLATFORM])  # pip's options for the machine's wheels
# what the GPU machine has (its versions unknown, except torch's and torchvision's)
MACHINE = (
    "torch==2.11.0",
    "torchvision==0.26.0",
    "timm",
    "tensorboard",
    "pandas",
    "matplotlib",
    "scipy",
)
# what the notebooks and the runner import beyond it (module -> distribution in tests/tools/test_gpukit.py)
NEEDS = (
    "timm",
    "ipykernel",
    "ipython",
    "ipywidgets",
    "jupyter-client",
    "nbclient",
    "nbformat",
    "pyzmq",
    "torch-tb-profiler",
    "traceinsight",
    "psutil",
)
# declared dependencies that a headless run never imports (left out with what only they pull in)
NOT_IMPORTED = {
    "jupyterlab": "traceinsight (HTA) declares it for its demo notebooks; hta imports plotly, pydot, pandas, never it",
    "widgetsnbextension": "the classic Notebook's front-end files for ipywidgets, which never imports it",
    "debugpy": "ipykernel's debugger, imported inside a try: without it the kernel runs with no debugger",
    "jedi": "IPython's tab completion, imported when a completion is asked for (find_spec only at start-up)",
}
# the kit's own timm wins over the machine's (it is listed first on PYTHONPATH); the version is constraints.txt's
PINNED_OVER_MACHINE = ("timm",)
# importable names checked after install (a missing dependency of the machine shows here, not mid-notebook)
IMPORTS = (
    "timm",
    "ipykernel",
    "IPython",
    "ipywidgets",
    "jupyter_client",
    "nbclient",
    "nbformat",
    "zmq",
    "torch_tb_profiler",
    "hta",
    "psutil",
    "perf_doctor",
)
TIMM_NEEDS = "timm.layers.patch_dropout:patch_dropout_forward"
LINE = re.compile(
    r"^(?P<name>[A-Za-z0-9_.\-]+)==(?P<version>\S+)\s+--hash=sha256:(?P<sha>[0-9a-f]{64})"
    r"\s+#\s+(?P<bytes>\d+)\s+(?P<file>\S+\.whl)\s*$"
)


def constraint_pins(root: Path = ROOT) -> dict[str, str]:
    """constraints.txt as ``{canonical name: version}``."""
    pins = (
        line.strip().partition("==") for line in (root / "constraints.txt").read_text().splitlines()
    )
    return {canonical(name): ver for name, _, ver in pins if ver and not name.startswith("#")}


def read_lock(path: Path = LOCK) -> dict:
    """``{"wheels": [{name, version, sha256, bytes, file}], "machine": [names], "header": [...]}`` of gpu-kit.txt."""
    wheels, machine, header = [], [], []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            header.append(line)
            if line.startswith("# machine-closure:"):
                machine = line.split(":", 1)[1].split()
            continue
        m = LINE.match(line)
        if not m:
            raise ValueError(f"{path.name}: cannot read the line {raw!r}")
        wheels.append(
            {
                "name": canonical(m["name"]),
                "version": m["version"],
                "sha256": m["sha"],
                "bytes": int(m["bytes"]),
                "file": m["file"],
            }
        )
    return {"wheels": wheels, "machine": machine, "header": header}


def closure(
    starts: list[str], requires: dict[str, list[str]], skip: dict[str, str] | None = None
) -> set[str]:
    """The names ``starts`` need, following ``requires`` (``{name: [Requires-Dist]}``) with the machine's markers
    (Linux x86-64, CPython ``PYTHON_VERSION``; extras followed where asked for), never into ``skip``."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip vendors it
        from pip._vendor.packaging.requirements import Requirement
    target = {
        "python_version": PYTHON_VERSION,
        "python_full_version": f"{PYTHON_VERSION}.0",
        "os_name": "posix",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_version": "",
        "implementation_version": f"{PYTHON_VERSION}.0",
    }
    skip = skip or {}
    seen: set[tuple[str, str]] = set()
    todo = [(canonical(s), "") for s in starts]
    while todo:
        name, extra = todo.pop()
        if (name, extra) in seen or name in skip:
            continue
        seen.add((name, extra))
        for raw in requires.get(name, []):
            req = Requirement(raw)
            if req.marker is not None and not req.marker.evaluate({**target, "extra": extra}):
                continue
            dep = canonical(req.name)
            todo += [(dep, "")] + [(dep, canonical(e)) for e in req.extras]
    return {n for n, _ in seen}


def lock(python: str = sys.executable, root: Path = ROOT, dest: Path = KIT) -> dict:
    """Resolve the kit for the machine (pins from constraints.txt, less torch's), download it, write gpu-kit.txt."""
    pins = constraint_pins(root)
    drop = re.compile(r"^(torch|torchvision|triton|nvidia-.*|cuda-.*)$")
    with tempfile.TemporaryDirectory() as tmp:
        cons = Path(tmp) / "constraints.txt"
        cons.write_text("".join(f"{n}=={v}\n" for n, v in pins.items() if not drop.match(n)))
        resolved = [
            report(
                python, TARGET, ["-c", str(cons), *reqs], "pip's resolver failed"
            )  # install items
            for reqs in (MACHINE, (*MACHINE, *NEEDS))
        ]
    machine, full = {canonical(i["metadata"]["name"]) for i in resolved[0]}, resolved[1]
    versions = {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in full}
    requires = {
        canonical(i["metadata"]["name"]): i["metadata"].get("requires_dist", []) for i in full
    }
    needed = closure(list(NEEDS), requires, NOT_IMPORTED)
    kit = {n: versions[n] for n in needed if n not in machine or n in PINNED_OVER_MACHINE}
    wheels = download(sorted(f"{n}=={v}" for n, v in kit.items()), dest, python)
    total = sum(w["bytes"] for w in wheels)
    lines = [
        "# The GPU kit: what executes every notebook headless on the GPU machine beside what it has",
        f"# (labtools/gpukit.py). {len(wheels)} wheels, {total / 2**20:.1f} MiB (budget {BUDGET_MIB} MiB);"
        f" target cp{PYTHON_VERSION.replace('.', '')} {PLATFORM}.",
        "# Made by `python -m labtools.gpukit lock`; `make gpu-kit` downloads exactly these.",
        f"# machine: {' '.join(MACHINE)}",
        f"# machine-closure: {' '.join(sorted(machine))}",
        f"# left out (declared, not imported by a headless run): {' '.join(sorted(NOT_IMPORTED))}",
    ]
    lines += [
        f"{w['name']}=={w['version']} --hash=sha256:{w['sha256']}  # {w['bytes']} {w['file']}"
        for w in wheels
    ]
    (root / LOCK.name).write_text("\n".join(lines) + "\n")
    return {"wheels": len(wheels), "mib": round(total / 2**20, 1)}


def download(
    reqs: list[str], dest: Path, python: str = sys.executable, hashes: bool = False
) -> list[dict]:
    """Download ``reqs`` (no dependencies) as wheels for the machine into an emptied ``dest``; their facts."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        req_file = Path(tmp) / "requirements.txt"
        req_file.write_text("\n".join(reqs) + "\n")
        pip(
            python,
            [
                "download",
                "--no-deps",
                "--quiet",
                "--dest",
                str(dest),
                *TARGET,
                *(["--require-hashes"] if hashes else []),
                "-r",
                str(req_file),
            ],
            "pip download failed",
        )
    return [
        {
            "name": canonical(whl.name.split("-")[0]),
            "version": whl.name.split("-")[1],
            "file": whl.name,
            "bytes": whl.stat().st_size,
            "sha256": hashlib.sha256(whl.read_bytes()).hexdigest(),
        }
        for whl in sorted(dest.glob("*.whl"))
    ]


def doctor_wheel(dest: Path, python: str = sys.executable) -> dict:
    """The trace doctor (``doctor/``, perf-doctor, which the notebooks import) as a wheel in ``dest``, built from this
    checkout: it is on no index, and the machine has no index to fetch its build backend from. Its facts."""
    pip(
        python,
        ["wheel", "--no-deps", "--quiet", "--wheel-dir", str(dest), str(ROOT / "doctor")],
        "building the doctor's wheel failed",
    )
    whl = next(Path(dest).glob("perf_doctor-*.whl"))
    return {
        "name": "perf-doctor",
        "version": whl.name.split("-")[1],
        "file": whl.name,
        "bytes": whl.stat().st_size,
    }


def build(python: str = sys.executable, lock_path: Path = LOCK, dest: Path = KIT) -> dict:
    """Download exactly the locked wheels (hashes checked) into ``dest``, build the doctor's beside them; refuse a kit
    over the budget."""
    reqs = [
        f"{w['name']}=={w['version']} --hash=sha256:{w['sha256']}"
        for w in read_lock(lock_path)["wheels"]
    ]
    wheels = download(reqs, dest, python, hashes=True) + [doctor_wheel(dest, python)]
    total = sum(w["bytes"] for w in wheels)
    if total > BUDGET_MIB * 2**20:
        raise SystemExit(f"the kit is {total / 2**20:.1f} MiB, over its budget of {BUDGET_MIB} MiB")
    shutil.copyfile(lock_path, dest / "requirements.txt")
    return {"dest": str(dest), "wheels": len(wheels), "mib": round(total / 2**20, 1)}


def install(kit: Path = KIT, python: str = sys.executable) -> Path:
    """Offline: the kit's wheels into ``kit/site`` (no index, no dependencies resolved: the machine has the rest),
    then every kit module imported in a fresh process with ``kit/site`` first on its path. Returns ``kit/site``."""
    wheels = sorted(Path(kit).glob("*.whl"))
    if not wheels:
        raise SystemExit(
            f"no wheels in {kit}: build the kit first (`make gpu-kit`, online) and carry it over"
        )
    site = Path(kit) / "site"
    if site.exists():
        shutil.rmtree(site)
    pip(
        python,
        [
            "install",
            "--no-index",
            "--no-deps",
            "--quiet",
            "--disable-pip-version-check",
            "--target",
            str(site),
            *map(str, wheels),
        ],
        "pip install of the kit failed",
    )
    check_imports(site, python)
    return site


def check_imports(site: Path, python: str = sys.executable) -> None:
    mod, attr = TIMM_NEEDS.split(":")
    code = (
        f"import importlib\nfor m in {IMPORTS!r}: importlib.import_module(m)\n"
        f"assert hasattr(importlib.import_module({mod!r}), {attr!r}), 'timm lacks {TIMM_NEEDS}'\n"
        "import timm; print('timm', timm.__version__, 'from', timm.__file__)\n"
    )
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        ),
    )
    proc = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(
            "the kit does not import on this Python: "
            + (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        )
    print(proc.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=("lock", "build", "install"))
    ap.add_argument(
        "--kit", type=Path, default=KIT, help=f"the kit's folder (default {KIT.relative_to(ROOT)})"
    )
    args = ap.parse_args(argv)
    if args.command == "lock":
        info = lock(dest=args.kit)
        print(f"{LOCK.name}: {info['wheels']} wheels, {info['mib']} MiB")
    elif args.command == "build":
        info = build(dest=args.kit)
        print(
            f"{info['wheels']} wheels, {info['mib']} MiB (budget {BUDGET_MIB} MiB) in {info['dest']}"
        )
    else:
        site = install(args.kit)
        rel = os.path.relpath(site)
        print(
            f"kit installed in {rel}; run: PYTHONPATH={rel} {Path(sys.executable).name} -m labtools.runner "
            "--scale full --out build/gpu-run"
        )
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
