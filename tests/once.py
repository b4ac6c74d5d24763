"""``built_once``: an expensive fixture's folder built once per test session, whichever pytest-xdist worker asks
first. A module-scoped fixture runs once per worker that runs one of its tests; with ``--dist worksteal`` a module's
tests land on several workers, and each would build the same thing again (notebook 01's smoke run through the
runner: ~20 s a time on a loaded 2-core machine)."""
from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import Callable


def built_once(tmp_path_factory, key: str, build: Callable[[Path], None]) -> Path:
    """The folder ``build(folder)`` filled, shared by the session's workers: the first takes a lock and builds, the
    others wait for it and reuse the folder. A build that raised leaves no folder behind: the next asker tries
    again and sees the failure itself."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base   # the session's folder, not one worker's
    dest = root / f"once-{key}"
    with open(root / f"once-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (dest / ".built").exists():
                shutil.rmtree(dest, ignore_errors=True)
                dest.mkdir()
                try:
                    build(dest)
                except BaseException:
                    shutil.rmtree(dest, ignore_errors=True)
                    raise
                (dest / ".built").touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return dest
