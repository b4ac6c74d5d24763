"""``python -m helpers.doctor PATH``: what kind of bottleneck does this profiler trace show?

PATH is a ``.json`` / ``.json.gz`` Chrome trace or a ``tensorboard_trace_handler`` folder, from any job (also
``perf-doctor``): the quality checks, the Overview, the GPU's breakdown, the top operators and kernels and the
diagnosis (``report``); a folder of ranks rank by rank, with the straggler and one verdict (``job``). ``--json``: one
strict JSON object (NaN as null). ``compare BEFORE AFTER`` is ``helpers.doctor``'s (``helpers.measure`` needed).
Bad input gets one line naming the file and what to do, and exit status 2. Taught in ``05_diagnose``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from .job import diagnose_job, job_text
from .stream import progress_to
from .quality import finite
from .report import SCHEMA_VERSION, DoctorError, trace_text

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130     # Ctrl-C: one line on stderr, no traceback
EXIT_CODES = ("exit status: 0 the report was printed (compare: no gate failed); 1 compare --fail-if-slower: AFTER "
              "slower by PCT% or more, or cannot tell; 2 bad input or bad arguments (one line on stderr); 3 compare: "
              "the two sides are not comparable or too few steps to tell (the reasons on stderr; --force compares "
              "anyway); 130 interrupted (Ctrl-C)")
__all__ = ["DoctorError", "EXIT_BAD_INPUT", "emit", "json_report", "main", "pct_arg", "report", "text_report"]


def report(path: Path | str, *, views: bool = True, workers: int = 1) -> dict[str, Any]:
    """Everything the command prints, as one JSON-ready dict: a trace's or a folder of ranks' report."""
    return diagnose_job(path, views=views, workers=workers)


def json_report(rep: dict[str, Any]) -> str:
    """Strict JSON: private keys left out, NaN and infinities as null (``allow_nan=False`` proves it)."""
    body = {k: v for k, v in rep.items() if not k.startswith("_")}
    body = {"schema_version": SCHEMA_VERSION, "verdict": body.pop("verdict", None), **body}
    return json.dumps(finite(body), indent=1, allow_nan=False)


def text_report(rep: dict[str, Any], top: int = 10) -> str:
    return job_text(rep) if rep.get("ranks") else trace_text(rep, top=top)


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error said in one line (status 2), not the usage block."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message} (--help for the usage)\n")


def positive(kind: type, high: float = 1e9, zero: bool = False, need: str = "must be above 0"):
    """An argparse type: a number of ``kind`` above 0 (``zero``: from 0) and under ``high`` (``--top 0`` is refused)."""
    def parse(text: str):
        try:
            x = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a{' whole' if kind is int else ''} number: {text!r}") from None
        if not ((0 <= x) if zero else (0 < x)) or not x < high:
            raise argparse.ArgumentTypeError(f"{need}, not {text!r}")
        return x
    return parse


pct_arg = positive(float, 1e6, zero=True, need="a percentage from 0 up")


def prog() -> str:
    """The command as invoked: ``perf-doctor`` (the installed script) or ``python -m helpers.doctor``."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name.startswith("perf-doctor") else "python -m helpers.doctor"


def version() -> str:
    """The package's version: its installed metadata, else ``pyproject.toml`` beside the package."""
    try:
        return metadata.version("pytorch-performance-lab")
    except metadata.PackageNotFoundError:
        text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
        m = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
        return m.group(1) if m else "unknown"


def emit(text: str) -> None:
    """Print, quietly stopping when the reader has gone (``| head``)."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = Parser(prog=prog(), description=__doc__.splitlines()[0].split(": ", 1)[-1],
                epilog=f"{prog()} compare BEFORE AFTER [--json] [--fail-if-slower PCT]: did a change help? (--help "
                       f"after compare for more). {EXIT_CODES}.")
    ap.add_argument("path", help="a .json / .json.gz profiler trace or a tensorboard_trace_handler folder")
    ap.add_argument("--json", action="store_true", help="print one JSON object (with schema_version and verdict)")
    ap.add_argument("--top", type=positive(int), default=10, help="rows of the operator and kernel tables (default 10)")
    ap.add_argument("--max-mb", type=positive(float),
                    help="the reading limit in MiB (default $PERF_TRACE_MAX_MB or 512)")
    ap.add_argument("--jobs", type=positive(int), default=min(os.cpu_count() or 1, 4),
                    help="a folder of ranks: ranks read at once, one process each (default: the cores, at most 4)")
    ap.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    args = ap.parse_args(argv)
    if args.max_mb:
        os.environ["PERF_TRACE_MAX_MB"] = str(args.max_mb)
    try:
        with progress_to(sys.stderr):   # issue 32 item 7: a read over ~2 s shows its progress, on stderr only
            rep = report(args.path, workers=args.jobs)
    except DoctorError as exc:
        print(f"doctor: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    emit(json_report(rep) if args.json else text_report(rep, top=args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
