"""The exit statuses of the lab's own commands (``labtools``: the runner, the set-up, the GPU kit and its
simulation), in one place; the trace doctor's are its own (``perf_doctor.cli.EXIT_CODES``).

A ``SystemExit`` with a message (pip failed, a kit over its budget) exits ``FAILED`` too: Python's own status 1."""

import signal

OK = 0
FAILED = 1  # a notebook failed (the runner), the simulation was not ok (gpusim)
BAD_INPUT = (
    2  # a bad option or value, a missing notebook or package: one line on stderr, nothing touched
)
SIGNALLED = (
    128  # + the signal: a run stopped by SIGTERM (143) or Ctrl-C (130), as a shell reports it
)


def signalled(signum: int | None) -> int:
    """The status of a run stopped by ``signum`` (SIGTERM when it is unknown): 128 + the signal."""
    return SIGNALLED + int(signum or signal.SIGTERM)
