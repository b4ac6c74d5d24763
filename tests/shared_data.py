"""Where the tests find others' traces: ``../shared/`` beside the project's checkout (``traces/``: the set of
real traces from other projects, its README gives origin and licence; ``gpu-traces/``: the A100 traces). They are
others' data and never part of the project: CI has the folder, a fresh clone does not, and the tests that need it
skip with the reason. ``PERF_SHARED_DIR`` names another place (a git worktree, whose ``../`` is not the clone's)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(os.environ.get("PERF_SHARED_DIR") or Path(__file__).resolve().parents[1].parent / "shared")


def shared_path(*parts: str) -> Path:
    """``SHARED/parts...``, or skip the test saying why it is absent."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} is absent: others' traces are not part of the project (a fresh clone); CI has "
                    f"../shared beside the checkout (or set PERF_SHARED_DIR)")
    return p


def gpu_trace(name: str) -> Path:
    """One of the A100 traces in ``../shared/gpu-traces/``."""
    return shared_path("gpu-traces", name)


def other_trace(name: str) -> Path:
    """One of the traces of ``../shared/traces/`` (a file or a folder)."""
    return shared_path("traces", name)
