"""``make wheelhouse``: every wheel the project needs, for an offline machine (not used by the notebooks).

Usage (from the project folder, on a machine with internet)::

    python -m helpers.tools.wheelhouse [--dest build/wheelhouse] [--python-version 3.12]
                                 [--platform manylinux_2_28_x86_64] [--exclude torch torchvision]

1. pip resolves ``.[test]`` with ``constraints.txt`` for the target Python and platform (default:
   the running ones) without installing anything (``pip install --dry-run --report``);
2. the packages the target already has are left out (``--exclude``; leaving out ``torch`` also
   leaves out the CUDA wheels that come with it: ``nvidia-*``, ``cuda-*``, ``triton``);
3. the rest, plus the build backend that ``pip install -e .`` needs (setuptools), are downloaded
   as wheels (``--only-binary=:all:``: the offline machine needs no compiler);
4. ``requirements.txt`` in the wheelhouse lists what is in it.

On the offline machine: ``make setup WHEELS=<wheelhouse>`` (see docs/gpu.md, "Offline install"). pip evaluates
environment markers such as ``sys_platform`` for the machine it runs on, so build the wheelhouse
on the same operating system and architecture as the target (the Python version may differ).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "pytorch-performance-lab"
# Leaving one of these out leaves out the wheels that only it needs.
COMES_WITH = {"torch": ("nvidia-*", "cuda-*", "triton")}
GPU_PRESET = {"python_version": "3.12", "platform": ["manylinux_2_28_x86_64"], "exclude": ["torch", "torchvision"]}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def excluded_names(exclude: list[str]) -> list[str]:
    """The name patterns to leave out: ``exclude`` plus what comes with each of them."""
    pats = [canonical(e) for e in exclude]
    for e in list(pats):
        pats += COMES_WITH.get(e, ())
    return pats


def is_excluded(name: str, patterns: list[str]) -> bool:
    n = canonical(name)
    return any(fnmatch.fnmatchcase(n, p) for p in patterns)


LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def expand_platform(tag: str) -> list[str]:
    """``manylinux_2_28_x86_64`` -> itself and every older manylinux tag of that architecture.

    pip's ``--platform`` takes tags literally, so a wheel tagged only ``manylinux_2_17`` (most of
    them) would not count for a ``manylinux_2_28`` machine, which runs it fine.
    """
    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", tag)
    if not m:
        return [tag]
    glibc, arch = int(m.group(1)), m.group(2)
    tags = [f"manylinux_2_{g}_{arch}" for g in range(glibc, 4, -1)]
    tags += [f"{LEGACY_MANYLINUX[g]}_{arch}" for g in sorted(LEGACY_MANYLINUX, reverse=True) if g <= glibc]
    return tags


def target_args(python_version: str | None, platforms: list[str] | None) -> list[str]:
    args = ["--only-binary=:all:"]
    if python_version:
        args += ["--python-version", python_version, "--implementation", "cp"]
    for p in platforms or []:
        for tag in expand_platform(p):
            args += ["--platform", tag]
    return args


def build_requires(root: Path = ROOT) -> list[str]:
    """The ``[build-system] requires`` of pyproject.toml (what ``pip install -e .`` builds with)."""
    text = (root / "pyproject.toml").read_text()
    m = re.search(r"^\[build-system\][^\[]*?requires\s*=\s*\[(.*?)\]", text, re.S | re.M)
    return re.findall(r"[\"']([^\"']+)[\"']", m.group(1)) if m else ["setuptools"]


def resolve(python: str, tgt: list[str], root: Path = ROOT) -> list[tuple[str, str]]:
    """(name, version) of every package ``.[test]`` needs on the target, from pip's resolver."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
               "--target", str(Path(tmp) / "t"), *tgt, "-c", str(root / "constraints.txt"), f"{root}[test]"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise SystemExit(f"pip could not resolve the project's packages for this target:\n{tail}")
        data = json.loads(report.read_text())
    pins = [(item["metadata"]["name"], item["metadata"]["version"]) for item in data["install"]]
    return sorted((n, v) for n, v in pins if canonical(n) != PROJECT)


def download(python: str, tgt: list[str], reqs: list[str], dest: Path) -> None:
    cmd = [python, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(dest), *tgt, *reqs]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise SystemExit(f"pip download failed:\n{tail}")


def size_mb(dest: Path) -> float:
    return sum(p.stat().st_size for p in dest.glob("*.whl")) / 2**20


def build(dest: Path, python_version: str | None = None, platforms: list[str] | None = None,
          exclude: list[str] | None = None, python: str = sys.executable, root: Path = ROOT) -> dict:
    t0 = time.perf_counter()
    tgt = target_args(python_version, platforms)
    pins = resolve(python, tgt, root)
    pats = excluded_names(exclude or [])
    keep = [(n, v) for n, v in pins if not is_excluded(n, pats)]
    left_out = [f"{n}=={v}" for n, v in pins if is_excluded(n, pats)]
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    reqs = [f"{n}=={v}" for n, v in keep]
    download(python, tgt, reqs + build_requires(root), dest)
    (dest / "requirements.txt").write_text(
        "# made by `make wheelhouse` (helpers/wheelhouse.py); install with\n"
        f"#   pip install --no-index --find-links {dest.name} -e '.[test]'\n"
        f"# target: python {python_version or 'as built'}, platform {' '.join(platforms or []) or 'as built'}\n"
        + (f"# left out (the target has them): {' '.join(left_out)}\n" if left_out else "")
        + "\n".join(reqs) + "\n")
    return {"dest": str(dest), "wheels": len(list(dest.glob("*.whl"))), "size_mb": round(size_mb(dest), 1),
            "left_out": left_out, "seconds": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Download every wheel the project needs, for an offline install.")
    ap.add_argument("--dest", type=Path, default=ROOT / "build" / "wheelhouse")
    ap.add_argument("--python-version", help="target Python, e.g. 3.12 (default: this one)")
    ap.add_argument("--platform", nargs="*", default=None,
                    help="target platform tag(s), e.g. manylinux_2_28_x86_64 (default: this machine)")
    ap.add_argument("--exclude", nargs="*", default=[],
                    help="packages the target already has, e.g. torch torchvision (torch also drops nvidia-*, "
                         "cuda-*, triton)")
    ap.add_argument("--gpu-machine", action="store_true",
                    help=f"preset for the reference GPU machines: {GPU_PRESET} (the whole environment, tests and "
                         "JupyterLab included; a headless run needs only the GPU kit: make gpu-kit)")
    args = ap.parse_args(argv)
    pv, plat, exc = args.python_version, args.platform, args.exclude
    if args.gpu_machine:
        pv, plat = pv or GPU_PRESET["python_version"], plat or GPU_PRESET["platform"]
        exc = exc or GPU_PRESET["exclude"]
    info = build(args.dest, pv, plat, exc)
    print(f"{info['wheels']} wheels, {info['size_mb']} MB in {info['dest']} ({info['seconds']} s)")
    if info["left_out"]:
        print(f"left out (the target has them): {', '.join(info['left_out'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
