"""``python -m helpers.doctor PATH`` and ``python -m helpers.doctor compare BEFORE AFTER`` (also ``perf-doctor``):
one trace diagnosed (``helpers.traces.doctor``), or two traces' steps compared (``helpers.measure.trace_compare``).
``--version``; the exit statuses are in ``--help`` (``doctor.EXIT_CODES``); Ctrl-C: one line, status 130.

``compare BEFORE AFTER [--json] [--fail-if-slower PCT]``: the ratio of mean steps with its 95% interval, the noise
floor, a verdict and each cause's change in ms. ``--fail-if-slower PCT``: status 1 when AFTER is slower beyond the
noise by PCT% of BEFORE's step or more, or when the doctor cannot tell (a gate that cannot see does not pass). Not
comparable (other devices, models) or inconclusive (under 3 steps a side, other shapes): the reasons, status 3, gate
or not; ``--force`` compares anyway. Bad input: one line, status 2."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .measure.compare import direction
from .measure.trace_compare import compare, compare_text
from .traces import doctor
from .traces.quality import finite
from .traces.report import SCHEMA_VERSION, DoctorError

EXIT_SLOWER = 1          # --fail-if-slower: slower by PCT% or more, or cannot tell
EXIT_NOT_COMPARABLE = 3  # the two sides cannot be compared (or too few steps to tell): the reasons on stderr


def compare_main(argv: list[str]) -> int:
    ap = doctor.Parser(prog=f"{doctor.prog()} compare", epilog=doctor.EXIT_CODES + ".",
                                 description="Did AFTER get faster than BEFORE, beyond the step-to-step noise?")
    ap.add_argument("before", help="a trace or a trace folder (before the change)")
    ap.add_argument("after", help="a trace or a trace folder (after the change)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--force", action="store_true",
                    help="compare even when the two sides are not comparable (other models, devices, shapes) or "
                         "too few steps make it inconclusive (otherwise: exit status 3 with the reasons)")
    ap.add_argument("--fail-if-slower", type=doctor.pct_arg, metavar="PCT",
                    help="exit status 1 when AFTER is slower beyond noise by PCT%% of BEFORE's step or more, or "
                         "when there are too few steps to tell")
    args = ap.parse_args(argv)
    try:
        cmp = compare(args.before, args.after, force=args.force)
    except DoctorError as exc:
        print(f"doctor: {exc}", file=sys.stderr)
        return doctor.EXIT_BAD_INPUT
    doctor.emit(json.dumps(finite({"schema_version": SCHEMA_VERSION, **cmp}), indent=1, allow_nan=False)
                if args.json else compare_text(cmp))
    able = cmp["comparability"]
    if able["verdict"] != "comparable" and not args.force:
        print(f"doctor: {able['verdict']}: " + "; ".join(able["reasons"]) + " (--force compares anyway)",
              file=sys.stderr)
        return EXIT_NOT_COMPARABLE
    limit = args.fail_if_slower
    if limit is None:
        return 0
    if cmp["comparison"] is None:
        print(f"doctor: cannot tell with {cmp['steps'][0]} and {cmp['steps'][1]} steps: the gate fails "
              f"(profile at least 2 steps a side)", file=sys.stderr)
        return EXIT_SLOWER
    pct = cmp["step"]["change_pct"]
    if direction(cmp["comparison"]) == "slower" and pct >= limit:
        print(f"doctor: slower by {pct:.1f}% (limit {limit:g}%)", file=sys.stderr)
        return EXIT_SLOWER
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command (``perf-doctor``): a report, or ``compare``; Ctrl-C is one line on stderr and status 130."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["compare"] and not Path("compare").exists():
            return compare_main(argv[1:])
        return doctor.main(argv)
    except KeyboardInterrupt:
        print("doctor: interrupted (Ctrl-C): no report", file=sys.stderr)
        return doctor.EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
