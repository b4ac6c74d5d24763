"""``python -m labtools.runner`` (``make run``): execute the notebooks headless, from the project folder, with no
set-up beyond a Python that has the packages (``make setup``'s .venv, or the GPU kit on ``PYTHONPATH``).

    python -m labtools.runner [NOTEBOOK ...] [--scale smoke|full] [--out DIR] [--pack DIR] [--budget S] [--grace S]

Default: every ``notebooks/[0-9]*.ipynb``, in kernels of this Python with the project on ``PYTHONPATH``. A bad
``--scale`` (else ``$PERF_SCALE``) is one line and exit 2. ``--out DIR``: ``DIR/<stem>/`` gets results.json, the
executed copy and ``run.json``; earlier outputs move to ``DIR/<stem>.previous/``. ``--pack DIR``: a ``<stem>.tar.gz``
each (``labtools.pack``) and ``run-summary.json``. ``--budget S``: each notebook's own time guard
(``helpers.notebook.budget``); ``--grace`` seconds past it the notebook is stopped from outside and marked interrupted.
SIGTERM or Ctrl-C stops the run (results saved, marked interrupted, packed; exit 128 + the signal); else exit 1
when a notebook failed, else 0."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from helpers.notebook.env import SCALE_ENV, get_scale, quiet_logs
from helpers.notebook.results import RESULTS_ENV, atomic_write_text

from . import exits
from . import kernel as kn
from . import pack as pk

PROJECT = Path(__file__).resolve().parents[1]
SUMMARY = "run-summary.json"
ABANDON_S = (
    20.0  # after a signal, the run ends within this (the kernel is killed 10 s after its SIGINT)
)


def inline_figures() -> bool:
    """Let the kernels embed figures in the executed copies: a non-interactive ``MPLBACKEND`` inherited from the
    shell (``Agg``, as CI sets it) would make every ``plt.show()`` draw nothing. Returns whether it was removed."""
    if os.environ.get("MPLBACKEND", "").lower() in ("agg", "pdf", "svg", "ps", "cairo", "template"):
        del os.environ["MPLBACKEND"]
        return True
    return False


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number of seconds")
    return value


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m labtools.runner", description=__doc__.splitlines()[0]
    )
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument(
        "--scale", help="smoke or full (default: $PERF_SCALE, else full with CUDA, smoke without)"
    )
    ap.add_argument(
        "--out", type=Path, help="results folder (default: $PERF_RESULTS_DIR, else results/)"
    )
    ap.add_argument(
        "--pack",
        type=Path,
        help="where the per-notebook archives and run-summary.json go "
        "(default: the results folder)",
    )
    ap.add_argument("--budget", type=_positive, help="each notebook's time budget in seconds")
    ap.add_argument(
        "--grace",
        type=_positive,
        default=30.0,
        help="seconds past the budget before a notebook is stopped from outside (default 30)",
    )
    ap.add_argument(
        "--timeout", type=int, default=1800, help="per-cell timeout in seconds (default 1800)"
    )
    return ap.parse_args(argv)


class Run:
    """The whole run: the signal that stopped it and the notebook running now. After the first signal, ``abandon_s``
    later it kills the kernel, writes what it knows (``finish``) and exits 128 + signal."""

    def __init__(self, abandon_s: float = ABANDON_S):
        self.signum: int | None = None
        self.current: kn.NotebookRun | None = None
        self.abandon_s = abandon_s
        self.finish: Callable[[str], None] | None = (
            None  # set by main: write run.json(s) and the summary
        )
        self.finish_notebook: Callable[[str], dict] | None = (
            None  # set while a notebook runs: its run.json
        )
        self.ended = threading.Event()

    def on_signal(self, signum: int, frame=None) -> None:
        first = self.signum is None
        self.signum = self.signum or signum
        if first:
            timer = threading.Timer(self.abandon_s, self.abandon)
            timer.daemon = True
            timer.start()
        if self.current is not None:
            self.current.stop(f"{signal.Signals(signum).name} (the run was stopped)")
        elif first:
            print(f"\n{signal.Signals(signum).name}: stopping before the next notebook", flush=True)

    def abandon(self) -> None:
        if self.ended.is_set():
            return
        name = signal.Signals(self.signum).name if self.signum else "a signal"
        reason = f"{name}: the run had not ended {self.abandon_s:g} s after it; abandoned"
        if self.current is not None:
            self.current.stop(reason)
            self.current._signal_kernel(signal.SIGKILL)
            if getattr(
                self.current.client, "km", None
            ):  # its connection file holds the kernel's key
                self.current.client.km.cleanup_connection_file()
        try:
            if self.finish is not None:
                self.finish(reason)
        finally:
            print(
                f"stopped by {name}; {reason} (its kernel killed, what ran is saved)",
                file=sys.stderr,
                flush=True,
            )
            os._exit(exits.signalled(self.signum))

    def install(self) -> None:
        """(Re)install the handlers: nbclient removes its own after each notebook, leaving the defaults."""
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, self.on_signal)


def kernel_env(scale: str, out: Path, runs: Path, budget: float | None) -> dict[str, str]:
    env = {
        **os.environ,
        SCALE_ENV: scale,
        RESULTS_ENV: str(out),
        "PERF_RUNS_DIR": str(runs),
        "PYTHONPATH": kn.python_path(PROJECT, os.environ),
        "PERF_NOTEBOOK_START": f"{time.time():.3f}",
    }
    env.pop("PERF_TIME_BUDGET_S", None)
    return env | ({"PERF_TIME_BUDGET_S": f"{budget:g}"} if budget is not None else {})


def checks_of(results_dir: Path) -> dict:
    try:
        doc = json.loads((results_dir / "results.json").read_text())
    except (OSError, ValueError):
        return {"results": False}
    exps = doc.get("experiments", [])
    checks = doc.get("checks", {})
    return {
        "results": True,
        "scale": doc.get("scale"),
        "interrupted": bool(doc.get("interrupted")),
        "experiments_ok": sum(e.get("status") == "ok" for e in exps),
        "experiments_failed": sum(e.get("status") != "ok" for e in exps),
        "checks_true": sum(v is True for v in checks.values()),
        "checks": len(checks),
        "checks_false": [k for k, v in checks.items() if v is not True],
    }


def run_notebook(
    path: Path, run: Run, args, scale: str, out: Path, runs: Path, pack_dir: Path
) -> dict:
    stem = path.stem
    pk.set_aside(out, stem)
    results_dir = out / stem
    results_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    limit = args.budget + args.grace if args.budget else None
    nb = kn.NotebookRun(
        path,
        kernel_env(scale, out, runs, args.budget),
        timeout=args.timeout,
        limit_s=limit,
        on_signal=run.on_signal,
    )
    run.current = nb
    if run.signum is not None:  # the signal came while the notebook was being set up: start nothing
        nb.stop(f"{signal.Signals(run.signum).name} (the run was stopped)")
    t0 = time.perf_counter()

    def write_run_json(info: dict) -> dict:
        import nbformat

        atomic_write_text(results_dir / f"{stem}.ipynb", nbformat.writes(nb.nb))
        if info["status"] == "interrupted":
            pk.mark_interrupted(results_dir, info["error"] or "interrupted")
        info = {
            "notebook": stem,
            **info,
            "scale": scale,
            "budget_s": args.budget,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        }
        atomic_write_text(results_dir / "run.json", json.dumps(info, indent=2) + "\n")
        return info

    run.finish_notebook = lambda reason: write_run_json(
        {
            "status": "interrupted",
            "error": f"cell {nb.client.cell_index}: stopped: {reason}",
            "wall_s": round(time.perf_counter() - t0, 1),
        }
    )
    try:
        info = nb.execute()
    finally:
        run.current = None
        run.finish_notebook = None
        run.install()
    info = write_run_json(info)
    manifest = pk.pack(
        results_dir, pack_dir / f"{stem}.tar.gz", pk.new_traces(runs, started), runs / "traces"
    )
    return {
        **info,
        **checks_of(results_dir),
        "pack": f"{stem}.tar.gz",
        "pack_bytes": manifest["bytes"],
        "traces_packed": len(manifest["traces"]),
        "traces_left_out": len(manifest["traces_left_out"]),
    }


def report_line(info: dict) -> str:
    line = f"  {info['status']} in {info['wall_s']} s"
    if info.get("results"):
        line += f"; checks {info['checks_true']}/{info['checks']} true"
        if info["checks_false"]:
            line += f" (false: {'; '.join(info['checks_false'])})"
        if info["experiments_failed"]:
            line += f"; {info['experiments_failed']} failed or skipped rows"
    else:
        line += "; no results.json"
    return line + (f": {info['error']}" if info["error"] else "")


def main(argv: list[str] | None = None, early_signals: list[int] | None = None) -> int:
    args = parse(argv)
    try:
        scale = get_scale(args.scale)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return exits.BAD_INPUT
    if missing := kn.missing_packages():
        print(
            f"this Python ({sys.executable}) lacks {', '.join(missing)}: run `make setup`, or put the GPU kit on "
            "PYTHONPATH (docs/gpu.md, 'the GPU kit')",
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    paths = args.notebooks or sorted((PROJECT / "notebooks").glob("[0-9]*.ipynb"))
    absent = [str(p) for p in paths if not p.is_file()]
    if not paths or absent:
        print(
            f"no such notebook: {', '.join(absent)}" if absent else "no notebooks found",
            file=sys.stderr,
        )
        return exits.BAD_INPUT
    out = (args.out or Path(os.environ.get(RESULTS_ENV) or PROJECT / "results")).resolve()
    runs = Path(
        os.environ.get("PERF_RUNS_DIR") or (out / "runs" if args.out else PROJECT / "runs")
    ).resolve()
    pack_dir = (args.pack or out).resolve()
    quiet_logs()  # the kernels inherit it: no Kineto log lines in the executed notebooks
    inline_figures()
    run = Run()
    run.install()
    for signum in early_signals or []:
        run.on_signal(signum)
    t0 = time.perf_counter()
    done: list[dict] = []

    def summarise(abandoned: str | None = None) -> dict:
        finished = list(done)
        hook = run.finish_notebook
        if abandoned and hook is not None:
            finished.append(hook(abandoned))
        summary = {
            "scale": scale,
            "wall_s": round(time.perf_counter() - t0, 1),
            "out": str(out),
            "interrupted": run.signum is not None,
            "signal": signal.Signals(run.signum).name if run.signum else None,
            "not_run": [p.stem for p in paths[len(finished) :]],
            "notebooks": finished,
        }
        if abandoned:
            summary["abandoned"] = abandoned
        pack_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(pack_dir / SUMMARY, json.dumps(summary, indent=2) + "\n")
        return summary

    run.finish = summarise
    for p in paths:
        if run.signum is not None:
            break
        print(
            f"running {p} ({scale}{f', budget {args.budget:g} s' if args.budget else ''}) ...",
            flush=True,
        )
        done.append(run_notebook(p, run, args, scale, out, runs, pack_dir))
        print(report_line(done[-1]), flush=True)
    run.ended.set()
    failed = sum(i["status"] != "ok" for i in done)
    summary = summarise()
    print(
        f"{len(done) - failed} of {len(paths)} notebooks ran ok, {failed} did not"
        + (f", {len(summary['not_run'])} not started" if summary["not_run"] else "")
        + f"; results in {out}/, packs in {pack_dir}/"
    )
    if run.signum is not None:
        print(f"stopped by {summary['signal']}", file=sys.stderr)
        return exits.signalled(run.signum)
    return exits.FAILED if failed else exits.OK


if __name__ == "__main__":
    sys.exit(main())
