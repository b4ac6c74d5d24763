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
