import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")


def pytest_configure(config):
    """Quiet library logs at their source (Kineto's $KINETO_LOG_LEVEL) before any profile or kernel starts:
    the kernels nbmake starts inherit it, so the executed notebooks show no Kineto lines."""
    from helpers.notebook import env

    env.quiet_logs()


# The long tests start first (the runner's signal and stale-results runs, the doctor on real traces): with
# pytest-xdist the workers then share out the many short ones instead of one worker finishing a long test alone at the
# end. Only the order changes; every test runs as before. (The browser sessions are WAITERS, below.)
LONG_FIRST = ("tests/labtools/test_runner.py", "tests/traces/test_doctor.py")
# The tests that mostly wait (a runner sleeping out its budget, JupyterLab and Chromium starting), longest first. Each
# starts a different worker's share, so that they wait side by side while the others compute: in one worker's share
# (the order above alone) they ran one after another, and the last one (~100 s) ended ~25 s after every other test,
# the machine idle meanwhile.
WAITERS = ("tests/labtools/test_runner.py::test_budgets_guard_inside_and_stop_from_outside",
           "tests/notebooks/test_browser_e2e.py::test_jupyterlab_notebook_widgets",
           "tests/notebooks/test_browser_e2e.py::test_saved_outputs_fit_the_view")


def _rank(nodeid: str) -> int:
    return next((i for i, prefix in enumerate(LONG_FIRST) if nodeid.startswith(prefix)), len(LONG_FIRST))


def shares(n: int, workers: int) -> list[int]:
    """The sizes of the contiguous shares pytest-xdist's ``worksteal`` first sends its workers (``check_schedule``:
    each idle worker gets ``len(pending) // workers_left``)."""
    out = []
    for i in range(workers):
        out.append(n // (workers - i))
        n -= out[-1]
    return out


def spread(items: list, heads: list, workers: int) -> list:
    """``items`` (``heads`` among them) reordered so that ``heads[i]`` opens worker ``i``'s share; the rest keep their
    order. More heads than workers: the extra ones stay where they were."""
    heads = heads[:workers]
    rest = [it for it in items if it not in heads]
    out = []
    for i, size in enumerate(shares(len(items), workers)):
        take = size - (1 if i < len(heads) else 0)
        out += ([heads[i]] if i < len(heads) else []) + rest[:take]
        rest = rest[take:]
    return out + rest


@pytest.hookimpl(trylast=True)   # after -k/-m deselection: the shares are of the tests that run
def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: _rank(item.nodeid))   # stable: the rest keep their order
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        heads = [next(it for it in items if it.nodeid.startswith(w)) for w in WAITERS
                 if any(it.nodeid.startswith(w) for it in items)]
        items[:] = spread(items, heads, workers)
