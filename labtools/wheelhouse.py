"""``make wheelhouse``: every wheel the project needs, for an offline machine (not used by the notebooks).

    python -m labtools.wheelhouse [--dest build/wheelhouse] [--python-version 3.12]
                                 [--platform manylinux_2_28_x86_64] [--exclude torch torchvision]

pip resolves ``./doctor[full]`` and ``.[lab,test]`` with ``constraints.txt`` for the target (``--dry-run --report``),
leaves out what the target has (``--exclude``; torch takes its CUDA wheels with it), downloads the rest and
setuptools as wheels and lists them in ``requirements.txt``; the doctor and the lab install from the checkout. Build
on the target's OS and architecture (docs/gpu.md, "Offline install")."""

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

from . import exits

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "pytorch-performance-lab"
DOCTOR = "perf-doctor"  # doctor/: installed from the checkout beside the project, never downloaded
# Leaving one of these out leaves out the wheels that only it needs.
COMES_WITH = {"torch": ("nvidia-*", "cuda-*", "triton")}
GPU_PRESET = {
    "python_version": "3.12",
    "platform": ["manylinux_2_28_x86_64"],
    "exclude": ["torch", "torchvision"],
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def excluded_names(exclude: list[str]) -> list[str]:
    """The name patterns to leave out: ``exclude`` plus what comes with each of them."""
    pats = [canonical(e) for e in exclude]
    return pats + [p for e in pats for p in COMES_WITH.get(e, ())]


def is_excluded(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(canonical(name), p) for p in patterns)


LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def expand_platform(tag: str) -> list[str]:
    """``manylinux_2_28_x86_64`` and every older manylinux tag of its architecture (pip's ``--platform`` is literal)."""
    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", tag)
    if not m:
        return [tag]
    glibc, arch = int(m.group(1)), m.group(2)
    tags = [f"manylinux_2_{g}_{arch}" for g in range(glibc, 4, -1)]
    tags += [
        f"{LEGACY_MANYLINUX[g]}_{arch}"
        for g in sorted(LEGACY_MANYLINUX, reverse=True)
        if g <= glibc
    ]
    return tags


def target_args(python_version: str | None, platforms: list[str] | None) -> list[str]:
    args = ["--only-binary=:all:"]
    if python_version:
        args += ["--python-version", python_version, "--implementation", "cp"]
    return args + [
        x for p in platforms or [] for tag in expand_platform(p) for x in ("--platform", tag)
    ]


def build_requires(root: Path = ROOT) -> list[str]:
    """The ``[build-system] requires`` of pyproject.toml and doctor/pyproject.toml (what ``pip install -e .`` and
    ``-e ./doctor`` build with)."""
    out = []
    for project in (root, root / "doctor"):
        text = (project / "pyproject.toml").read_text()
        m = re.search(r"^\[build-system\][^\[]*?requires\s*=\s*\[(.*?)\]", text, re.S | re.M)
        found = re.findall(r"[\"']([^\"']+)[\"']", m.group(1)) if m else ["setuptools"]
        out += [r for r in found if r not in out]
    return out


def pip(python: str, args: list[str], failed: str) -> None:
    """``python -m pip ARGS``; ``SystemExit`` with ``failed`` and pip's last lines when it fails."""
    proc = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise SystemExit(f"{failed}:\n{tail}")


def report(python: str, tgt: list[str], args: list[str], failed: str) -> list[dict]:
    """pip's resolution of ``args`` for the target (``--dry-run --report``): the report's ``install`` items."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        pip(
            python,
            [
                "install",
                "--dry-run",
                "--ignore-installed",
                "--quiet",
                "--report",
                str(out),
                "--target",
                str(Path(tmp) / "t"),
                *tgt,
                *args,
            ],
            failed,
        )
        return json.loads(out.read_text())["install"]


def resolve(python: str, tgt: list[str], root: Path = ROOT) -> list[tuple[str, str]]:
    """(name, version) of every package ``./doctor[full]`` and ``.[lab,test]`` need on the target, from pip's resolver."""
    items = report(
        python,
        tgt,
        ["-c", str(root / "constraints.txt"), f"{root / 'doctor'}[full]", f"{root}[lab,test]"],
        "pip could not resolve the project's packages for this target",
    )
    pins = [(item["metadata"]["name"], item["metadata"]["version"]) for item in items]
    return sorted((n, v) for n, v in pins if canonical(n) not in (PROJECT, DOCTOR))


def build(
    dest: Path,
    python_version: str | None = None,
    platforms: list[str] | None = None,
    exclude: list[str] | None = None,
    python: str = sys.executable,
    root: Path = ROOT,
) -> dict:
    t0 = time.perf_counter()
    tgt = target_args(python_version, platforms)
    pins = resolve(python, tgt, root)
    pats = excluded_names(exclude or [])
    left_out = [f"{n}=={v}" for n, v in pins if is_excluded(n, pats)]
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    reqs = [f"{n}=={v}" for n, v in pins if not is_excluded(n, pats)]
    pip(
        python,
        [
            "download",
            "--no-deps",
            "--quiet",
            "--dest",
            str(dest),
            *tgt,
            *reqs,
            *build_requires(root),
        ],
        "pip download failed",
    )
    (dest / "requirements.txt").write_text(
        "# made by `make wheelhouse` (helpers/wheelhouse.py); install with\n"
        f"#   pip install --no-index --find-links {dest.name} -e './doctor[full]' -e '.[lab,test]'\n"
        f"# target: python {python_version or 'as built'}, platform {' '.join(platforms or []) or 'as built'}\n"
        + (f"# left out (the target has them): {' '.join(left_out)}\n" if left_out else "")
        + "\n".join(reqs)
        + "\n"
    )
    mb = sum(p.stat().st_size for p in dest.glob("*.whl")) / 2**20
    return {
        "dest": str(dest),
        "wheels": len(list(dest.glob("*.whl"))),
        "size_mb": round(mb, 1),
        "left_out": left_out,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Download every wheel the project needs, for an offline install."
    )
    ap.add_argument("--dest", type=Path, default=ROOT / "build" / "wheelhouse")
    ap.add_argument("--python-version", help="target Python, e.g. 3.12 (default: this one)")
    ap.add_argument(
        "--platform",
        nargs="*",
        default=None,
        help="target platform tag(s), e.g. manylinux_2_28_x86_64 (default: this machine)",
    )
    ap.add_argument(
        "--exclude",
        nargs="*",
        default=[],
        help="packages the target already has, e.g. torch torchvision (torch also drops nvidia-*, "
        "cuda-*, triton)",
    )
    ap.add_argument(
        "--gpu-machine",
        action="store_true",
        help=f"preset for the reference GPU machines: {GPU_PRESET} (the whole environment, tests and "
        "JupyterLab included; a headless run needs only the GPU kit: make gpu-kit)",
    )
    args = ap.parse_args(argv)
    preset = GPU_PRESET if args.gpu_machine else {}
    info = build(
        args.dest,
        args.python_version or preset.get("python_version"),
        args.platform or preset.get("platform"),
        args.exclude or preset.get("exclude"),
    )
    print(f"{info['wheels']} wheels, {info['size_mb']} MB in {info['dest']} ({info['seconds']} s)")
    if info["left_out"]:
        print(f"left out (the target has them): {', '.join(info['left_out'])}")
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
