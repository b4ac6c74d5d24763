"""The project around the lab, for ``measure`` and ``notebook`` alike (``notebook.env`` re-exports it): its folder
(``project_root``), where runs and traces go (``runs_dir``; ``folder``), torch's spurious profiler warning quieted
(``quiet_profiler_warning``)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path


def project_root() -> Path:
    """The project folder: the checkout that holds this package (``make`` installs it editable), so data/ is found
    from a notebook copied anywhere (``make test`` runs copies under build/); otherwise the parent of notebooks/
    when running inside it, else the cwd."""
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file() and (checkout / "data").is_dir():
        return checkout
    here = Path.cwd()
    return here.parent if here.name == "notebooks" else here


def folder(env: str, *default: str) -> Path:
    """``$env`` when set, else ``default`` under the project folder."""
    value = os.environ.get(env, "").strip()
    return Path(value) if value else project_root().joinpath(*default)


def runs_dir() -> Path:
    """Where TensorBoard runs and profiler traces go: ``$PERF_RUNS_DIR`` or ``runs/``."""
    return folder("PERF_RUNS_DIR", "runs")


# torch 2.10 and 2.11 warn this on every profile (pytorch/pytorch#180348); only its text without the spaces is matched,
# so a later torch that warns because events really were cleared still says so
SPURIOUS_PROFILER_WARNING = r"Warning: Profiler clears events at the end of each cycle\.Only events"


def quiet_profiler_warning() -> None:
    """Ignore torch 2.10/2.11's spurious profiler warning (``SPURIOUS_PROFILER_WARNING``) in this process;
    idempotent."""
    warnings.filterwarnings("ignore", message=SPURIOUS_PROFILER_WARNING, category=UserWarning)
