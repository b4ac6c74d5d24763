"""``make run``: execute every notebook headless and keep the executed copy beside its results.

Usage: ``python -m helpers.runner [NOTEBOOK ...]`` (default: every ``notebooks/[0-9]*.ipynb``).
A failing notebook is reported and the others still run; the exit status is non-zero
when any failed. Each notebook writes ``results/<stem>/results.json`` itself; this
runner adds ``results/<stem>/<stem>.ipynb`` (executed, with outputs) and
``results/<stem>/run.json`` (wall time, status).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .env import quiet_logs
from .results import atomic_write_text, results_root


def kernel_manager_class():
    """A kernel manager class whose kernels' channels are encrypted (CurveZMQ keys it provisions).

    Without keys the kernel warns "Kernel is running over TCP without encryption" at start-up;
    ``transport_encryption="auto"`` gives it keys when its kernelspec says it supports them
    (ipykernel's does) and pyzmq has CurveZMQ, and leaves plain TCP otherwise.
    """
    import zmq
    from jupyter_client.manager import KernelManager

    if not zmq.has("curve") or "transport_encryption" not in KernelManager.class_trait_names():
        return KernelManager

    class EncryptedKernelManager(KernelManager):
        def __init__(self, **kw):
            kw.setdefault("transport_encryption", "auto")
            super().__init__(**kw)

    return EncryptedKernelManager


def run_one(path: Path, timeout: int, kernel: str) -> dict:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    out_dir = results_root() / path.stem
    out_dir.mkdir(parents=True, exist_ok=True)
    client = NotebookClient(nb, kernel_manager_class=kernel_manager_class(), timeout=timeout, kernel_name=kernel,
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    t0 = time.perf_counter()
    status, error = "ok", None
    try:
        client.execute()
    except CellExecutionError as exc:
        status = "failed"
        error = str(exc).strip().splitlines()[-1][:500] if str(exc).strip() else "cell failed"
    except Exception as exc:  # noqa: BLE001 - a dead kernel, a timeout: report and go on
        status, error = "failed", f"{type(exc).__name__}: {exc}"[:500]
    wall = time.perf_counter() - t0
    atomic_write_text(out_dir / f"{path.stem}.ipynb", nbformat.writes(nb))
    info = {"notebook": path.stem, "status": status, "error": error, "wall_s": round(wall, 1)}
    atomic_write_text(out_dir / "run.json", json.dumps(info, indent=2) + "\n")
    return info


def inline_figures() -> bool:
    """Let the kernels embed figures in the executed copies: a non-interactive ``MPLBACKEND`` inherited from the
    shell (``Agg``, as CI sets it) would make every ``plt.show()`` draw nothing. Returns whether it was removed."""
    if os.environ.get("MPLBACKEND", "").lower() in ("agg", "pdf", "svg", "ps", "cairo", "template"):
        del os.environ["MPLBACKEND"]
        return True
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--timeout", type=int, default=1800, help="per-cell timeout in seconds")
    ap.add_argument("--kernel", default="python3")
    args = ap.parse_args(argv)
    paths = args.notebooks or sorted(Path("notebooks").glob("[0-9]*.ipynb"))
    if not paths:
        print("No notebooks found (run from the project folder).", file=sys.stderr)
        return 2
    quiet_logs()  # the kernels inherit it: no Kineto log lines in the executed notebooks
    inline_figures()
    failed = 0
    for p in paths:
        if not p.exists():
            print(f"{p}: no such notebook", file=sys.stderr)
            failed += 1
            continue
        print(f"running {p} ...", flush=True)
        info = run_one(p, args.timeout, args.kernel)
        line = f"  {info['status']} in {info['wall_s']} s"
        if info["error"]:
            line += f": {info['error']}"
        print(line, flush=True)
        failed += info["status"] != "ok"
    print(f"{len(paths) - failed} notebooks ran, {failed} failed; results in {results_root()}/")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
