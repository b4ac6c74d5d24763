"""Signal a short run of the runner at many moments and report any that hangs:
``python -m helpers.tools.signal_stress [--offsets 40] [--deadline 30]``.

By hand (~40 runs of a few seconds; ``make test`` keeps targeted cases in tests/notebook/test_runner_signals.py).
Two tiny notebooks (``a`` saves a row, works ``--work`` s with torch, saves another; ``b`` prints) run once
unsignalled, then ``--offsets`` times, the runner's process group sent SIGTERM or SIGINT (in turn) at offsets from
0.2 s to past the unsignalled run's end: around the kernel's start, inside the cells, while packing. A trial passes
when the runner exits within ``--deadline`` s of the signal with 128 + the signal (0 if it had finished), with
``run-summary.json``, a ``run.json`` per started notebook, no kernel left (found by an environment tag the kernels
inherit) and no traceback on stderr. Exit status 1 when a trial failed."""

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TAG_ENV = "PERF_SIGNAL_STRESS_TAG"


def _notebook(path: Path, *cells: str) -> Path:
    nb = {"cells": [{"cell_type": "code", "id": f"c{i}", "execution_count": None, "metadata": {}, "outputs": [],
                     "source": [src]} for i, src in enumerate(cells)],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return path


def notebooks(folder: Path, work_s: float) -> list[Path]:
    results = ("from helpers.notebook.results import Results\n"
               "R = Results('a', 'smoke', {'python': '3', 'torch': 't', 'device': 'cpu', 'cpu_count': 1})\n"
               "R.record('first', {}, lambda: {'x': 1})\n")
    work = (f"import time, torch\nt0 = time.time()\nwhile time.time() - t0 < {work_s}:\n"
            "    (torch.randn(64, 64) @ torch.randn(64, 64)).sum()\n"
            "R.record('second', {}, lambda: {'x': 2})\n")
    return [_notebook(folder / "a.ipynb", results, work), _notebook(folder / "b.ipynb", "print('b ran')\n")]


def tagged_processes(tag: str) -> list[int]:
    """Processes whose environment holds ``TAG_ENV=tag`` (the runner's kernels inherit it)."""
    found, needle = [], f"{TAG_ENV}={tag}".encode()
    for d in (d for d in Path("/proc").iterdir() if d.name.isdigit()):
        with contextlib.suppress(OSError):
            if needle in (d / "environ").read_bytes().split(b"\0"):
                found.append(int(d.name))
    return found


def trial(nbs: list[Path], out: Path, offset: float | None, signum: int, deadline: float) -> dict:
    """One run, signalled ``offset`` seconds after its start (None: not signalled)."""
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PERF_RESULTS_DIR", "PERF_RUNS_DIR",
                                                            "PERF_TIME_BUDGET_S")}
    env.update({TAG_ENV: tag, "PERF_SCALE": "smoke"})
    cmd = [sys.executable, "-m", "helpers.runner", "--out", str(out), *map(str, nbs)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    sent, hung = None, False
    if offset is not None:
        try:
            proc.wait(timeout=offset)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signum)
            sent = time.perf_counter()
    try:
        stdout, stderr = proc.communicate(timeout=deadline if sent else 600)
    except subprocess.TimeoutExpired:
        hung = True
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
    end = time.perf_counter()
    time.sleep(0.5)
    left = tagged_processes(tag)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    summary_path = out / "run-summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    started = [n["notebook"] for n in (summary or {}).get("notebooks", [])]
    missing_run_json = [s for s in started if not (out / s / "run.json").is_file()]
    expected = {0, 128 + signum} if sent else {0}
    problems = [what for bad, what in (
        (hung, f"hung: still running {deadline:g} s after the signal"), (summary is None, "no run-summary.json"),
        (missing_run_json, f"no run.json for {', '.join(missing_run_json)}"),
        (left, f"{len(left)} kernel process(es) left running"), ("Traceback" in stderr, "a traceback on stderr"),
        (not hung and proc.returncode not in expected, f"exit status {proc.returncode}")) if bad]
    return {"offset_s": offset, "signal": signal.Signals(signum).name if sent else None,
            "exit": None if hung else proc.returncode, "run_s": round(end - t0, 2),
            "after_signal_s": round(end - sent, 2) if sent else None, "notebooks_started": started,
            "statuses": [n.get("status") for n in (summary or {}).get("notebooks", [])],
            "problems": problems, "stderr_tail": stderr.strip().splitlines()[-3:] if problems else []}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m helpers.tools.signal_stress", description=__doc__.splitlines()[0])
    ap.add_argument("--offsets", type=int, default=40, help="signalled runs (default 40)")
    ap.add_argument("--deadline", type=float, default=30.0, help="seconds a run may take after its signal (30)")
    ap.add_argument("--work", type=float, default=3.0, help="seconds notebook a works (default 3)")
    ap.add_argument("--json", type=Path, help="write every trial to this file")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="signal-stress-") as tmp:
        tmp = Path(tmp)
        nbs = notebooks(tmp, args.work)
        calib = trial(nbs, tmp / "calibration", None, signal.SIGTERM, args.deadline)
        if calib["problems"] or calib["exit"] != 0:
            print(f"the unsignalled run failed: {calib}", file=sys.stderr)
            return 1
        span = calib["run_s"] * 1.05
        print(f"unsignalled run: {calib['run_s']} s; signalling {args.offsets} runs at 0.2 .. {span:.1f} s")
        trials = []
        for i in range(args.offsets):
            offset = round(0.2 + (span - 0.2) * i / max(1, args.offsets - 1), 2)
            signum = signal.SIGTERM if i % 2 == 0 else signal.SIGINT
            t = trial(nbs, tmp / f"t{i}", offset, signum, args.deadline)
            trials.append(t)
            flag = "FAIL " + "; ".join(t["problems"]) if t["problems"] else "ok"
            print(f"  {offset:6.2f} s {signal.Signals(signum).name:7s} exit {t['exit']} after "
                  f"{t['after_signal_s'] if t['after_signal_s'] is not None else '-'} s, "
                  f"started {t['notebooks_started'] or 'none'} {t['statuses']}: {flag}", flush=True)
            for line in t["stderr_tail"]:
                print(f"         stderr: {line[:160]}")
    bad = [t for t in trials if t["problems"]]
    slowest = max((t["after_signal_s"] or 0) for t in trials)
    hangs = sum(any(p.startswith("hung") for p in t["problems"]) for t in bad)
    print(f"{len(trials) - len(bad)} of {len(trials)} signalled runs ended cleanly; the slowest "
          f"{slowest:.1f} s after its signal; hangs: {hangs}")
    if args.json:
        args.json.write_text(json.dumps({"calibration": calib, "trials": trials}, indent=2) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
