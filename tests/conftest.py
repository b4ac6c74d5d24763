import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")


def pytest_configure(config):
    """Quiet library logs at their source (Kineto's $KINETO_LOG_LEVEL) before any profile or kernel starts:
    the kernels nbmake starts inherit it, so the executed notebooks show no Kineto lines."""
    from helpers.notebook import env

    env.quiet_logs()


# The longest tests start first (the browser sessions, the runner's budget and signal runs, the doctor on real
# traces): with pytest-xdist the workers then share out the many short ones instead of one worker finishing a
# minutes-long test alone at the end. Only the order changes; every test runs as before.
LONG_FIRST = ("tests/notebooks/test_browser_e2e.py::test_jupyterlab_notebook_widgets",
              "tests/notebooks/test_browser_e2e.py", "tests/notebook/test_runner.py", "tests/traces/test_doctor.py")


def _rank(nodeid: str) -> int:
    return next((i for i, prefix in enumerate(LONG_FIRST) if nodeid.startswith(prefix)), len(LONG_FIRST))


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: _rank(item.nodeid))   # stable: the rest keep their order
