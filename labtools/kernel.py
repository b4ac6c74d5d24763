"""One notebook executed headless in a kernel of this Python, that the runner can stop (``labtools.runner``).

The kernel is this interpreter's ipykernel (``kernel_manager_class``). ``NotebookRun(path, env).execute()`` runs
every cell; ``stop(reason)`` interrupts the running cell, lets no further cell start, and kills the kernel
``kill_after_s`` later. Errors are one plain line: ``cell 7: ValueError: ...``."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def plain(text: str, limit: int = 500) -> str:
    """Text without ANSI escape codes, its first non-empty line, at most ``limit`` characters."""
    lines = [ln.strip() for ln in ANSI.sub("", str(text)).splitlines() if ln.strip()]
    return (lines[0] if lines else "")[:limit]


def kernel_manager_class():
    """A kernel manager (asynchronous: with a blocking one nbclient never saw a kernel die mid-cell) whose ``python3``
    is this interpreter's ipykernel (a machine's own kernelspec may point at a Python without the kit), with encrypted
    channels where kernelspec and pyzmq allow (``transport_encryption="auto"``; else a TCP warning at start-up)."""
    import zmq
    from ipykernel.kernelspec import RESOURCES, get_kernel_dict
    from jupyter_client import AsyncKernelClient, AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

    encrypt = zmq.has("curve") and "transport_encryption" in AsyncKernelManager.class_trait_names()

    class NoHeartbeatClient(
        AsyncKernelClient
    ):  # the manager says whether the kernel lives; no thread to join
        def start_channels(self, shell=True, iopub=True, stdin=True, hb=False, control=True):
            super().start_channels(shell, iopub, stdin, hb, control)

    class OwnPythonSpecs(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            if kernel_name != "python3":
                return super().get_kernel_spec(kernel_name)
            names = set(KernelSpec.class_trait_names())
            return KernelSpec(
                resource_dir=RESOURCES, **{k: v for k, v in get_kernel_dict().items() if k in names}
            )

    class OwnKernelManager(AsyncKernelManager):
        def __init__(self, **kw):
            kw.setdefault("kernel_spec_manager", OwnPythonSpecs())
            kw.setdefault("client_factory", NoHeartbeatClient)
            if encrypt:
                kw.setdefault("transport_encryption", "auto")
            super().__init__(**kw)

    return OwnKernelManager


class Stopped(Exception):
    """No further cell is started: the run was asked to stop."""


def stoppable_client_class():
    from nbclient import NotebookClient

    class StoppableClient(NotebookClient):
        """nbclient's client that starts no cell once ``stop_reason`` is set and leaves SIGINT/SIGTERM to ``on_signal``
        (nbclient's own handler would only shut the kernel down, leaving the run to go on)."""

        stop_reason: str | None = None
        on_signal: Callable[[int], None] | None = None
        cell_index: int | None = None
        finished = False  # every cell ran: only the kernel's shutdown is left

        async def async_start_new_kernel(self, **kwargs):
            if self.stop_reason:
                raise Stopped(self.stop_reason)
            if self.on_signal is not None:
                import asyncio

                loop = asyncio.get_running_loop()
                handler = self.on_signal
                for signum in (signal.SIGINT, signal.SIGTERM):
                    with contextlib.suppress(RuntimeError, ValueError, NotImplementedError):
                        loop.remove_signal_handler(
                            signum
                        )  # nbclient's (it restores the default handler)
                        signal.signal(signum, lambda n, frame: handler(n))
            return await super().async_start_new_kernel(**kwargs)

        async def async_execute_cell(
            self, cell, cell_index, execution_count=None, store_history=True
        ):
            if self.stop_reason:
                raise Stopped(self.stop_reason)
            self.cell_index = cell_index
            out = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
            self.finished = cell_index == len(self.nb.cells) - 1
            return out

    return StoppableClient


class NotebookRun:
    """Execute ``path`` in a fresh kernel with environment ``env``; ``timeout`` per cell, ``limit_s`` the whole
    notebook's (then stopped from outside), ``on_signal(signum)`` on SIGINT/SIGTERM."""

    def __init__(
        self,
        path: Path,
        env: dict[str, str],
        timeout: int = 1800,
        limit_s: float | None = None,
        on_signal: Callable[[int], None] | None = None,
        kill_after_s: float = 10.0,
    ):
        import nbformat

        self.path = Path(path)
        self.env = env
        doc = json.loads(self.path.read_text(encoding="utf-8"))
        if (doc.get("nbformat"), doc.get("nbformat_minor", 0)) >= (
            4,
            5,
        ):  # 4.5 cells need an id: nbformat warns,
            for i, cell in enumerate(doc.get("cells", [])):  # and will refuse
                cell.setdefault("id", f"cell-{i}")
        self.nb = nbformat.reads(json.dumps(doc), as_version=4)
        self.limit_s = limit_s
        self.kill_after_s = kill_after_s
        self.client = stoppable_client_class()(
            self.nb,
            kernel_manager_class=kernel_manager_class(),
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(self.path.parent.resolve())}},
        )
        self.client.on_signal = on_signal
        self.stop_reason: str | None = (
            None  # set by stop() (a signal or the limit), not by a failing cell
        )
        self._done = threading.Event()

    # -- stopping ----------------------------------------------------------------------------------------------
    def _kernel_group(self) -> int | None:
        prov = getattr(getattr(self.client, "km", None), "provisioner", None)
        ids = (getattr(prov, "pgid", None), getattr(prov, "pid", None))
        return next((v for v in ids if isinstance(v, int) and v > 0), None)

    def _signal_kernel(self, signum: int) -> None:
        group = self._kernel_group()
        if group is None or self._done.is_set():
            return
        try:
            os.killpg(group, signum)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(OSError):
                os.kill(group, signum)

    def stop(self, reason: str) -> None:
        """Interrupt the running cell and start no other; kill the kernel ``kill_after_s`` later if it still runs.
        A second call kills it at once. Once every cell has run (the kernel shutting down) there is nothing to stop."""
        if self.client.finished:
            return
        first = self.stop_reason is None
        if first:
            self.stop_reason = self.client.stop_reason = reason
        if not first or self.client.cell_index is None:
            # a second call; or no cell has started: nothing to save, and a SIGINT would print the starting
            # kernel's KeyboardInterrupt traceback; end it at once (a kernel not yet spawned is never started)
            self._signal_kernel(signal.SIGKILL)
            return
        self._signal_kernel(signal.SIGINT)
        killer = threading.Timer(self.kill_after_s, self._signal_kernel, (signal.SIGKILL,))
        killer.daemon = True
        killer.start()

    # -- running -----------------------------------------------------------------------------------------------
    def execute(self) -> dict[str, Any]:
        """Run the notebook; returns ``{"status": ok|failed|interrupted, "error": one line or None, "wall_s"}``.
        ``failed`` when a cell raised (or the kernel died), ``interrupted`` when ``stop()`` stopped it."""
        from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

        if (
            self.stop_reason
        ):  # stopped before it started (a signal while the run was setting up): start nothing
            self._done.set()
            return {
                "status": "interrupted",
                "error": f"stopped before its kernel started: {self.stop_reason}",
                "wall_s": 0.0,
            }
        watchdog = None
        if self.limit_s is not None:
            watchdog = threading.Timer(
                self.limit_s, self.stop, (f"over its time limit of {self.limit_s:g} s",)
            )
            watchdog.daemon = True
            watchdog.start()
        t0 = time.perf_counter()
        error = None
        try:
            self.client.execute(env=self.env)
        except Stopped:
            pass
        except CellExecutionError as exc:
            error = (
                f"{exc.ename}: {plain(exc.evalue)}"
                if exc.ename
                else plain(str(exc)) or "a cell failed"
            )
        except CellTimeoutError as exc:
            error = f"a cell ran past the per-cell timeout: {plain(str(exc))}"
        except DeadKernelError as exc:
            error = f"the kernel died: {plain(str(exc))}"
        except Exception as exc:  # noqa: BLE001 - a kernel that would not start, ...: report and go on
            error = f"{type(exc).__name__}: {plain(str(exc))}"
        finally:
            self._done.set()
            if watchdog is not None:
                watchdog.cancel()
            # nbclient registers a clean-up at exit and unregisters it only once the kernel has started; a kernel
            # that died while starting (stopped then) would leave it to fail at exit with an AssertionError
            import atexit

            atexit.unregister(self.client._cleanup_kernel)
        wall_s = round(time.perf_counter() - t0, 1)
        where = f"cell {self.client.cell_index}: " if self.client.cell_index is not None else ""
        if self.stop_reason is not None:
            return {
                "status": "interrupted",
                "error": f"{where}stopped: {self.stop_reason}",
                "wall_s": wall_s,
            }
        return {
            "status": "failed" if error else "ok",
            "error": error and f"{where}{error}",
            "wall_s": wall_s,
        }


def python_path(project: Path, environ: dict[str, str] | None = None) -> str:
    """``PYTHONPATH`` for a kernel: the project first (so ``import helpers`` works from notebooks/ without an
    install), then what was there."""
    environ = os.environ if environ is None else environ
    rest = [
        p
        for p in environ.get("PYTHONPATH", "").split(os.pathsep)
        if p and Path(p).resolve() != project.resolve()
    ]
    return os.pathsep.join([str(project), *rest])


def missing_packages() -> list[str]:
    """What the runner itself needs and this Python lacks (the kit, or ``make setup``, brings them)."""
    import importlib.util

    return [
        m
        for m in ("nbclient", "nbformat", "ipykernel", "jupyter_client", "zmq")
        if importlib.util.find_spec(m) is None
    ]
