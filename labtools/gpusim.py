"""``make gpu-sim``: the GPU machine simulated here, before any GPU: does a full run start and finish offline?

A Python 3.12 venv with ``gpukit.MACHINE``'s packages (timm older, ``--machine-timm``, so the kit's must win; made
once, ``--fresh`` again), the kit built, the project and kit carried to ``build/gpu-sim/carry`` (size against 64 MiB),
then offline (``unshare -n``) the kit installed and a smoke run; each notebook's status, time, checks and executed
copy checked into ``build/gpu-sim/report.json``. Exit 0 only when every notebook ran ok with every check true.

Usage: ``python -m labtools.gpusim [--python python3.12] [--scale smoke] [--budget S] [--fresh]`` (root, or a
user that may make network namespaces)."""

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import exits, gpukit

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "build" / "gpu-sim"
CARRY_LIMIT_MIB = 64
NETWORK_PROBE = (
    "import socket\ntry:\n    socket.create_connection(('pypi.org', 443), timeout=5)\n"
    "except OSError as exc:\n    print('network: cut (' + str(exc) + ')')\n"
    "else:\n    raise SystemExit('network: reachable, this would not simulate an offline machine')\n"
)


def sh(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, text=True, capture_output=True, **kw)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise SystemExit(f"{what} failed ({proc.returncode}):\n{tail}")
    return proc


def machine(python: str, timm: str, fresh: bool) -> Path:
    """The simulated machine's Python (a venv with ``gpukit.MACHINE`` installed), made once."""
    venv = SIM / "machine"
    want = [*(m for m in gpukit.MACHINE if m != "timm"), f"timm=={timm}"]
    stamp = venv / "machine.json"
    if fresh and venv.exists():
        shutil.rmtree(venv)
    if stamp.exists() and json.loads(stamp.read_text()).get("packages") == want:
        return venv / "bin" / "python"
    sh(python.split() + ["-m", "venv", "--clear", str(venv)], f"making a venv with {python}")
    py = venv / "bin" / "python"
    print(
        f"installing the machine's packages into {venv} (torch 2.11 with its CUDA wheels: a few GB) ...",
        flush=True,
    )
    sh([str(py), "-m", "pip", "install", "--quiet", *want], "installing the machine's packages")
    stamp.write_text(json.dumps({"packages": want}) + "\n")
    return py


def carry(kit: Path | None, dest: Path = SIM / "carry") -> tuple[Path, float]:
    """Copy what a GPU machine is given (the project's files and the kit, unless None: a clone) to ``dest``; its
    size in MiB."""
    if dest.exists():
        shutil.rmtree(dest)
    files = sh(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        "listing the project's files",
        cwd=ROOT,
    ).stdout.split("\0")
    total = 0
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
            total += src.stat().st_size
    if kit is None:
        return dest, total / 2**20
    kit_dest = dest / kit.relative_to(ROOT)
    kit_dest.mkdir(parents=True)
    for whl in sorted(kit.glob("*.whl")):
        shutil.copy2(whl, kit_dest / whl.name)
        total += whl.stat().st_size
    return dest, total / 2**20


def offline(
    py: Path, project: Path, scale: str, budget: float | None
) -> subprocess.CompletedProcess:
    """Install the kit and run the notebooks in ``project`` with no network (a new network namespace)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        raise SystemExit(
            "the simulation needs `unshare` and `ip` (util-linux, iproute2) to cut the network"
        )
    run = f"{py} -m labtools.runner --scale {scale} --out build/gpu-run --pack build/gpu-pack"
    if budget:
        run += f" --budget {budget:g}"
    script = (
        f'set -e\nip link set lo up\ncd {project}\n{py} -c "$PROBE"\n'
        f"{py} -m labtools.gpukit install\nPYTHONPATH={project}/build/gpu-kit/site {run}\n"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PERF_", "PYTHON", "VIRTUAL_ENV", "KINETO", "MPLBACKEND", "PIP_"))
    }
    env["PROBE"] = NETWORK_PROBE
    print(f"offline (unshare -n): kit install and `{run}` ...", flush=True)
    return subprocess.run(
        ["unshare", "-n", "--", "bash", "-c", script], cwd=project, env=env, text=True
    )


def figures(
    project: Path, kit_mib: float, wheels: int, carry_mib: float, rc: int, wall: float
) -> dict:
    summary_path = project / "build" / "gpu-pack" / "run-summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {"notebooks": []}
    rows = []
    for nb in summary["notebooks"]:
        env = {}
        with contextlib.suppress(OSError, ValueError, KeyError):
            env = json.loads(
                (project / "build" / "gpu-run" / nb["notebook"] / "results.json").read_text()
            )["env"]
        rows.append(
            {
                k: nb.get(k)
                for k in (
                    "notebook",
                    "status",
                    "wall_s",
                    "checks_true",
                    "checks",
                    "checks_false",
                    "experiments_failed",
                    "pack_bytes",
                    "error",
                )
            }
            | {"timm": env.get("timm"), "torch": env.get("torch"), "python": env.get("python")}
        )
    ok = (
        bool(rows)
        and rc == 0
        and all(r["status"] == "ok" and r["checks"] and not r["checks_false"] for r in rows)
    )
    return {
        "ok": ok,
        "runner_exit_status": rc,
        "wall_s": round(wall, 1),
        "kit_wheels": wheels,
        "kit_mib": round(kit_mib, 1),
        "carried_mib": round(carry_mib, 1),
        "carry_limit_mib": CARRY_LIMIT_MIB,
        "scale": summary.get("scale"),
        "not_run": summary.get("not_run", []),
        "notebooks": rows,
    }


def check_outputs(project: Path) -> str:
    """The executed copies checked as ``make test`` checks its own (tests/notebooks/test_executed_notebooks.py: no
    library log lines, no stray Python warning such as torch 2.11's profiler one): pytest's last line."""
    import importlib.util

    if importlib.util.find_spec("pytest") is None:
        return "not checked (no pytest in this Python)"
    env = dict(
        os.environ, PERF_EXECUTED_NOTEBOOKS=str(project / "build" / "gpu-run"), PYTHONPATH=str(ROOT)
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/notebooks/test_executed_notebooks.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    lines = proc.stdout.strip().splitlines()
    return ("passed: " if proc.returncode == 0 else "FAILED: ") + (
        lines[-1] if lines else proc.stderr[-300:]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--python", default="python3.12", help="the Python 3.12 to make the machine's venv with"
    )
    ap.add_argument(
        "--machine-timm",
        default="1.0.15",
        help="the timm the simulated machine has (default 1.0.15)",
    )
    ap.add_argument("--scale", default="smoke", choices=("smoke", "full"))
    ap.add_argument("--budget", type=float, help="the runner's --budget for each notebook")
    ap.add_argument("--fresh", action="store_true", help="make the machine's venv again")
    args = ap.parse_args(argv)
    py = machine(args.python, args.machine_timm, args.fresh)
    kit = gpukit.build()
    project, carry_mib = carry(Path(kit["dest"]))
    print(
        f"kit: {kit['wheels']} wheels, {kit['mib']} MiB; carried: {carry_mib:.1f} MiB (limit {CARRY_LIMIT_MIB})"
    )
    t0 = time.perf_counter()
    proc = offline(py, project, args.scale, args.budget)
    report = figures(
        project, kit["mib"], kit["wheels"], carry_mib, proc.returncode, time.perf_counter() - t0
    )
    report["executed_copies"] = check_outputs(project)
    report["ok"] = report["ok"] and not report["executed_copies"].startswith("FAILED")
    (SIM / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n{'notebook':22} {'status':12} {'wall s':>7} {'checks':>7}  timm")
    for r in report["notebooks"]:
        print(
            f"{r['notebook']:22} {r['status']:12} {r['wall_s']:7.1f} {r['checks_true']!s:>3}/{r['checks']!s:<3}  "
            f"{r['timm']}"
            + (f"  false: {r['checks_false']}" if r["checks_false"] else "")
            + (f"  {r['error']}" if r["error"] else "")
        )
    print(
        f"executed copies (tests/notebooks/test_executed_notebooks.py): {report['executed_copies']}"
    )
    print(
        f"{'ok' if report['ok'] else 'NOT OK'}: runner exit {proc.returncode}, {report['wall_s']} s in all; "
        f"carried {report['carried_mib']} MiB of {CARRY_LIMIT_MIB}; report in {SIM / 'report.json'}"
    )
    return exits.OK if report["ok"] and carry_mib <= CARRY_LIMIT_MIB else exits.FAILED


if __name__ == "__main__":
    sys.exit(main())
