"""``python -m helpers.tools.idle COMMAND [ARGS ...]``: run COMMAND at the lowest CPU priority there is.

On Linux that is the ``SCHED_IDLE`` policy: the command (and every process and thread it starts, which inherit the
policy) runs only on CPU time that nothing else wants, and any normal process that wakes up takes the CPU back at
once. Elsewhere it is ``nice`` 19. ``make test`` runs the unit tests that only read traces this way beside the
notebooks, which run at normal priority and compare timings: the tests take the core the notebooks leave idle
instead of adding to the time of the unit-test phase after them."""

import os
import sys


def lowest_priority() -> str:
    """Put this process at the lowest CPU priority this platform offers; says which it got."""
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return "SCHED_IDLE"
        except OSError:
            pass
    try:
        os.nice(19 - os.nice(0))
    except OSError:
        return "normal (the priority could not be lowered)"
    return "nice 19"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    lowest_priority()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"helpers.tools.idle: cannot run {argv[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    raise SystemExit(main())
