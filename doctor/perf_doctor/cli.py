"""``perf-doctor PATH`` (or ``python -m perf_doctor PATH``): what kind of bottleneck does this profiler trace show?

The command line, also ``perf-doctor compare BEFORE AFTER``: did a change make the step faster?

PATH is a ``.json`` / ``.json.gz`` Chrome trace or a ``tensorboard_trace_handler`` folder, from any job: the quality
checks, the Overview, the GPU's breakdown, the top operators and kernels and the diagnosis (``report``); a folder of
ranks rank by rank, with the straggler and one verdict (``job``). ``--json``: one strict JSON object (NaN as null).
Bad input gets one line naming the file and what to do, and exit status 2. ``--version``; the exit statuses are in
``--help`` (``EXIT_CODES``); Ctrl-C: one line, status 130. Taught in ``05_diagnose``.

``compare BEFORE AFTER [--json] [--fail-if-slower PCT]`` (``compare.compare_traces``): the ratio of mean steps with its 95%
interval, the noise floor, a verdict and each cause's change in ms. ``--fail-if-slower PCT``: status 1 when AFTER is
slower beyond the noise by PCT% of BEFORE's step or more, or when the doctor cannot tell (a gate that cannot see does
not pass). Not comparable (other devices, models) or inconclusive (under 3 steps a side, other shapes): the reasons,
status 3, gate or not; ``--force`` compares anyway.

``job FOLDER`` is the report of a folder of ranks by name; ``--scheduler ADDRESS`` reads its ranks on a Dask cluster
(``tcp://host:8786``), ``--scheduler local`` on ``--jobs`` workers started on 127.0.0.1 and closed after
(``cluster``, the ``[dask]`` extra: without it, one line says what to install, status 2).
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

from .compare import compare_text, compare_traces
from .job import diagnose_job, job_text
from .stats import direction
from .stream import progress_to
from .cluster import dask_ranks
from .quality import finite
from .report import SCHEMA_VERSION, DoctorError, trace_text

# The exit statuses, all of them here (issue 42 item 3): what each means is EXIT_CODES, printed by --help.
EXIT_OK = 0  # the report was printed (compare: no gate failed)
EXIT_SLOWER = 1  # compare --fail-if-slower: slower by PCT% or more, or cannot tell
EXIT_BAD_INPUT = 2  # bad input or bad arguments: one line on stderr
EXIT_NOT_COMPARABLE = (
    3  # compare abstains: not comparable, or too few steps to tell (the reasons on stderr)
)
EXIT_INTERRUPTED = 130  # Ctrl-C: one line on stderr, no traceback
EXIT_CODES = (
    f"exit status: {EXIT_OK} the report was printed (compare: no gate failed); {EXIT_SLOWER} compare "
    f"--fail-if-slower: AFTER slower by PCT% or more, or cannot tell; {EXIT_BAD_INPUT} bad input or bad "
    f"arguments (one line on stderr); {EXIT_NOT_COMPARABLE} compare: the two sides are not comparable or too "
    f"few steps to tell (the reasons on stderr; --force compares anyway); {EXIT_INTERRUPTED} interrupted (Ctrl-C)"
)
__all__ = [
    "DoctorError",
    "EXIT_BAD_INPUT",
    "EXIT_CODES",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_COMPARABLE",
    "EXIT_OK",
    "EXIT_SLOWER",
    "compare_main",
    "emit",
    "json_report",
    "main",
    "pct_arg",
    "report",
    "report_main",
    "text_report",
]


def report(
    path: Path | str, *, views: bool = True, workers: int = 1, rank_map=None
) -> dict[str, Any]:
    """Everything the command prints, as one JSON-ready dict: a trace's or a folder of ranks' report (its ranks read
    by ``workers`` processes, or ``rank_map``: ``cluster.dask_ranks``)."""
    return diagnose_job(path, views=views, workers=workers, rank_map=rank_map)


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
            raise argparse.ArgumentTypeError(
                f"not a{' whole' if kind is int else ''} number: {text!r}"
            ) from None
        if not ((0 <= x) if zero else (0 < x)) or not x < high:
            raise argparse.ArgumentTypeError(f"{need}, not {text!r}")
        return x

    return parse


pct_arg = positive(float, 1e6, zero=True, need="a percentage from 0 up")


def prog() -> str:
    """The command as invoked: ``perf-doctor`` (the installed script) or ``python -m perf_doctor``."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name.startswith("perf-doctor") else "python -m perf_doctor"


def version() -> str:
    """The package's version: its installed metadata, else ``pyproject.toml`` beside the package."""
    try:
        return metadata.version("perf-doctor")
    except metadata.PackageNotFoundError:
        text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
        m = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
        return m.group(1) if m else "unknown"


def emit(text: str) -> None:
    """Print, quietly stopping when the reader has gone (``| head``)."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def report_main(argv: list[str]) -> int:
    """``perf-doctor PATH``: one trace's or a folder of ranks' report."""
    ap = Parser(
        prog=prog(),
        description=__doc__.splitlines()[0].split(": ", 1)[-1],
        epilog=f"{prog()} compare BEFORE AFTER [--json] [--fail-if-slower PCT]: did a change help? (--help "
        f"after compare for more). {EXIT_CODES}.",
    )
    ap.add_argument(
        "path", help="a .json / .json.gz profiler trace or a tensorboard_trace_handler folder"
    )
    ap.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (with schema_version and verdict)",
    )
    ap.add_argument(
        "--top",
        type=positive(int),
        default=10,
        help="rows of the operator and kernel tables (default 10)",
    )
    ap.add_argument(
        "--max-mb",
        type=positive(float),
        help="the reading limit in MiB (default $PERF_TRACE_MAX_MB or 512)",
    )
    ap.add_argument(
        "--jobs",
        type=positive(int),
        default=min(os.cpu_count() or 1, 4),
        help="a folder of ranks: ranks read at once, one process each (default: the cores, at most 4; "
        "with --scheduler local, the cluster's workers)",
    )
    ap.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="a folder of ranks: read them on a Dask cluster, its scheduler's address (tcp://host:8786; every "
        "worker sees the folder at the same path), or 'local' for --jobs workers on 127.0.0.1 (Dask: pip "
        "install 'perf-doctor[dask]')",
    )
    ap.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    args = ap.parse_args(argv)
    if args.max_mb:
        os.environ["PERF_TRACE_MAX_MB"] = str(args.max_mb)
    try:
        # issue 32 item 7: a read over ~2 s shows a bar on a terminal's stderr
        with progress_to(sys.stderr), dask_ranks(args.scheduler, args.jobs) as rank_map:
            rep = report(args.path, workers=args.jobs, rank_map=rank_map)
    except DoctorError as exc:
        print(f"doctor: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    emit(json_report(rep) if args.json else text_report(rep, top=args.top))
    return EXIT_OK


def compare_main(argv: list[str]) -> int:
    """``perf-doctor compare BEFORE AFTER``: the comparison, and the gate's exit status."""
    ap = Parser(
        prog=f"{prog()} compare",
        epilog=EXIT_CODES + ".",
        description="Did AFTER get faster than BEFORE, beyond the step-to-step noise?",
    )
    ap.add_argument("before", help="a trace or a trace folder (before the change)")
    ap.add_argument("after", help="a trace or a trace folder (after the change)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--force",
        action="store_true",
        help="compare even when the two sides are not comparable (other models, devices, shapes) or "
        "too few steps make it inconclusive (otherwise: exit status 3 with the reasons)",
    )
    ap.add_argument(
        "--fail-if-slower",
        type=pct_arg,
        metavar="PCT",
        help="exit status 1 when AFTER is slower beyond noise by PCT%% of BEFORE's step or more, or "
        "when there are too few steps to tell",
    )
    args = ap.parse_args(argv)
    try:
        cmp = compare_traces(args.before, args.after, force=args.force)
    except DoctorError as exc:
        print(f"doctor: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    emit(
        json.dumps(finite({"schema_version": SCHEMA_VERSION, **cmp}), indent=1, allow_nan=False)
        if args.json
        else compare_text(cmp)
    )
    able = cmp["comparability"]
    if able["verdict"] != "comparable" and not args.force:
        print(
            f"doctor: {able['verdict']}: "
            + "; ".join(able["reasons"])
            + " (--force compares anyway)",
            file=sys.stderr,
        )
        return EXIT_NOT_COMPARABLE
    limit = args.fail_if_slower
    if limit is None:
        return EXIT_OK
    if cmp["comparison"] is None:
        print(
            f"doctor: cannot tell with {cmp['steps'][0]} and {cmp['steps'][1]} steps: the gate fails "
            f"(profile at least 2 steps a side)",
            file=sys.stderr,
        )
        return EXIT_SLOWER
    pct = cmp["step"]["change_pct"]
    if direction(cmp["comparison"]) == "slower" and pct >= limit:
        print(f"doctor: slower by {pct:.1f}% (limit {limit:g}%)", file=sys.stderr)
        return EXIT_SLOWER
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """The command (``perf-doctor``): a report, or ``compare``; Ctrl-C is one line on stderr and status 130."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["compare"] and not Path("compare").exists():
            return compare_main(argv[1:])
        if argv[:1] == ["job"] and not Path("job").exists():  # perf-doctor job FOLDER
            return report_main(argv[1:])
        return report_main(argv)
    except KeyboardInterrupt:
        print("doctor: interrupted (Ctrl-C): no report", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
