"""Signal a short run of the runner at many random moments and report any that does not end cleanly:
``python -m benchmarks.signal_stress [--offsets 40] [--deadline 12]`` (by hand: ~40 runs of a few seconds).
Two tiny notebooks (``a`` saves a row, works ``--work`` s with torch, saves another; ``b`` prints) run once
unsignalled, then ``--offsets`` times, sent SIGTERM or SIGINT in turn, to the runner's process group or (every other
pair) the runner, at a random moment in each of ``--offsets`` slices of 0.2 s to past the unsignalled run's end.

A run that ended before its signal, or that it reached too late to stop (summary not interrupted; exit 0, or killed
as the interpreter exits), is counted apart. A signalled run is clean when it exits 128 + the signal within
--deadline s by its normal path (the runner's watchdog, "abandoned" in run-summary.json, is a failure), with
run-summary.json, a run.json and a pack per started notebook, none failed, each interrupted one's results.json (if
any) saying interrupted, no kernel (found by an environment tag) and nothing in its own TMPDIR (its runtime dir
too: a connection file, a temporary folder) left and no traceback on stderr. Else exit status 1."""

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
TAG_ENV = "PERF_SIGNAL_STRESS_TAG"


def notebooks(folder: Path, work_s: float) -> list[Path]:
    results = (
        "from helpers.notebook.results import Results\n"
        "R = Results('a', 'smoke', {'python': '3', 'torch': 't', 'device': 'cpu', 'cpu_count': 1})\n"
        "R.record('first', {}, lambda: {'x': 1})\n"
    )
    work = (
        f"import time, torch\nt0 = time.time()\nwhile time.time() - t0 < {work_s}:\n"
        "    (torch.randn(64, 64) @ torch.randn(64, 64)).sum()\n"
        "R.record('second', {}, lambda: {'x': 2})\n"
    )
    for path, cells in (
        (folder / "a.ipynb", (results, work)),
        (folder / "b.ipynb", ("print('b ran')\n",)),
    ):
        nbformat.write(
            nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in cells]), path
        )
    return [folder / "a.ipynb", folder / "b.ipynb"]


def tagged_processes(tag: str) -> list[int]:
    """Processes whose environment holds ``TAG_ENV=tag`` (the runner's kernels inherit it)."""
    found, needle = [], f"{TAG_ENV}={tag}".encode()
    for d in (d for d in Path("/proc").iterdir() if d.name.isdigit()):
        with contextlib.suppress(OSError):
            if needle in (d / "environ").read_bytes().split(b"\0"):
                found.append(int(d.name))
    return found


def leftovers(out: Path, summary: dict) -> list[str]:
    """What a finished run in ``out`` lacks, or left in the folder ``tmp`` beside ``out``."""
    problems = [f"left behind: {p.name}" for p in sorted((out.parent / "tmp").iterdir())]
    problems += (
        [f"ended by the watchdog: {summary['abandoned']}"] if summary.get("abandoned") else []
    )
    for n in summary["notebooks"]:
        stem, status, results = n["notebook"], n["status"], out / n["notebook"] / "results.json"
        missing = [
            p.name for p in (out / stem / "run.json", out / f"{stem}.tar.gz") if not p.is_file()
        ]
        problems += [f"no {name} for {stem}" for name in missing]
        problems += (
            [f"{stem} {status}: {n['error']}"] if status not in ("ok", "interrupted") else []
        )
        if (
            status == "interrupted"
            and results.is_file()
            and not json.loads(results.read_text()).get("interrupted")
        ):
            problems.append(f"{stem}'s results.json does not say interrupted")
    return problems


def trial(
    nbs: list[Path], folder: Path, offset: float | None, signum: int, deadline: float, group=True
) -> dict:
    """One run in ``folder``, sent ``signum`` ``offset`` s after its start (None: never), to its group or not."""
    tag, out, tmp = uuid.uuid4().hex, folder / "out", folder / "tmp"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PERF_RESULTS_DIR", "PERF_RUNS_DIR", "PERF_TIME_BUDGET_S")
    }
    env.update(
        {TAG_ENV: tag, "PERF_SCALE": "smoke", "TMPDIR": str(tmp), "JUPYTER_RUNTIME_DIR": str(tmp)}
    )
    tmp.mkdir(parents=True)
    cmd = [sys.executable, "-m", "labtools.runner", "--out", str(out), *map(str, nbs)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    sent, hung = None, False
    if offset is not None:
        try:
            proc.wait(timeout=offset)
        except subprocess.TimeoutExpired:
            (os.killpg if group else os.kill)(proc.pid, signum)
            sent = time.perf_counter()
    try:  # past the deadline: long enough to see the runner's watchdog (20 s) end it
        stdout, stderr = proc.communicate(timeout=deadline + 20 if sent else 600)
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
    summary = (
        json.loads((out / "run-summary.json").read_text())
        if (out / "run-summary.json").is_file()
        else None
    )
    late = (
        not hung
        and proc.returncode in (0, -signum)
        and not (summary or {}).get("interrupted", True)
    )
    signalled, after = sent is not None and not late, round(end - sent, 2) if sent else None
    problems = [
        what
        for bad, what in (
            (hung, f"hung: still running {deadline + 20:g} s after the signal"),
            (signalled and not hung and after > deadline, f"ended {after} s after its signal"),
            (left, f"{len(left)} kernel process(es) left running"),
            ("Traceback" in stderr, "a traceback on stderr"),
            (
                not hung
                and proc.returncode not in ((128 + signum,) if signalled else (0, -signum)),
                f"exit status {proc.returncode}",
            ),
        )
        if bad
    ] + (leftovers(out, summary) if summary else ["no run-summary.json"])
    started = (summary or {}).get("notebooks", [])
    return {
        "offset_s": offset,
        "signal": signal.Signals(signum).name if sent else None,
        "signalled": signalled,
        "abandoned": bool((summary or {}).get("abandoned")),
        "exit": None if hung else proc.returncode,
        "run_s": round(end - t0, 2),
        "after_signal_s": after,
        "notebooks_started": [n["notebook"] for n in started],
        "statuses": [n["status"] for n in started],
        "problems": problems,
        "stderr_tail": stderr.strip().splitlines()[-3:] if problems else [],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.signal_stress",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawTextHelpFormatter,
    )
    ap.add_argument("--offsets", type=int, default=40, help="runs to signal (default 40)")
    ap.add_argument(
        "--deadline", type=float, default=12.0, help="seconds a run may take after its signal (12)"
    )
    ap.add_argument("--work", type=float, default=3.0, help="seconds notebook a works (default 3)")
    ap.add_argument("--json", type=Path, help="write every trial to this file")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="signal-stress-") as tmp:
        tmp = Path(tmp)
        nbs = notebooks(tmp, args.work)
        calib = trial(nbs, tmp / "calibration", None, signal.SIGTERM, args.deadline)
        if calib["problems"] or calib["exit"] != 0:
            sys.exit(f"the unsignalled run failed: {calib}")
        span = calib["run_s"] * 1.05
        print(
            f"unsignalled run: {calib['run_s']} s; signalling {args.offsets} runs at 0.2 .. {span:.1f} s"
        )
        trials = []
        for i in range(args.offsets):
            offset = round(0.2 + (span - 0.2) * (i + random.random()) / args.offsets, 2)
            signum, to = (
                (signal.SIGTERM if i % 2 == 0 else signal.SIGINT),
                "group" if i % 4 < 2 else "runner",
            )
            t = trial(nbs, tmp / f"t{i}", offset, signum, args.deadline, group=to == "group")
            trials.append(t)
            flag = (
                "FAIL " + "; ".join(t["problems"])
                if t["problems"]
                else "ok"
                if t["signalled"]
                else "ended before"
            )
            print(
                f"  {offset:6.2f} s {signum.name:7s} to {to:6s} exit {t['exit']} after {t['after_signal_s']} s, "
                f"started {t['notebooks_started'] or 'none'} {t['statuses']}: {flag}",
                flush=True,
            )
            for line in t["stderr_tail"]:
                print(f"         stderr: {line[:160]}")
    signalled, bad = [t for t in trials if t["signalled"]], [t for t in trials if t["problems"]]
    print(
        f"{len(signalled)} runs signalled, {sum(not t['problems'] for t in signalled)} of them ended cleanly; "
        f"{len(trials) - len(signalled)} finished before their signal; {sum(t['abandoned'] for t in trials)} ended "
        f"by the watchdog; {len(bad)} failed; the slowest {max([0] + [t['after_signal_s'] for t in signalled])} s"
    )
    if args.json:
        args.json.write_text(json.dumps({"calibration": calib, "trials": trials}, indent=2) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
