"""A job too big for one machine: its ranks read on a Dask cluster (``dask.distributed``, the ``[dask]`` extra).

``diagnose_job(folder, rank_map=...)`` hands its per-rank map (``job``'s reader, one call a rank) to an engine and
reduces what comes back to the same job report as its local processes give::

    with dask_ranks("tcp://10.0.0.5:8786") as rank_map:  # or "local": a LocalCluster on 127.0.0.1, closed after
        job = diagnose_job("/shared/runs/ddp", rank_map=rank_map)

(``perf-doctor job FOLDER --scheduler ADDRESS``, or ``--scheduler local`` with ``--jobs`` workers.) The cluster is
reached on the first map, so a single trace starts none. The ranks travel as paths and their reports come back:
on an existing cluster every worker must see the folder at the same path and have perf-doctor installed. A worker
reads one rank at a time (``one_rank_at_a_time``: the doctor's memo is one per process), whatever its threads. A
rank that fails on its worker (a corrupt trace, a worker that died reading it: Dask gives it to another, then gives
up with ``KilledWorker``) comes back as its error's line, a failed rank in the report; the others go on. Without
Dask, or a scheduler that cannot be reached: ``DoctorError``, one line (the command's exit status 2).

The local processes' map is here too (``process_ranks``, what ``diagnose_job(folder, workers=N)`` uses): forked
processes, and a rank whose process dies (killed, out of memory) is a failed rank as on a cluster.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from .report import DoctorError

LOCAL = "local"  # --scheduler local: a LocalCluster started and closed by the doctor
INSTALL = "pip install 'perf-doctor[dask]'"
CONNECT_S = 10.0  # seconds to reach a scheduler before saying it cannot be reached
# a LocalCluster's rank whose worker died is given to one more worker, then failed
LOCAL_RETRIES = 1
_reading = threading.Lock()  # one rank at a time in a worker process


def need_dask():
    """``distributed``, or the one line that says what to install."""
    try:
        import distributed
    except ImportError:
        raise DoctorError(
            f"--scheduler needs Dask, which is not installed: {INSTALL} (or 'dask[distributed]')"
        ) from None
    return distributed


def one_rank_at_a_time(fn: Callable, job: tuple) -> Any:
    """``fn(job)`` on a worker, one at a time in its process (the doctor's memo of events is one per process)."""
    with _reading:
        return fn(job)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def lost(path, exc: BaseException) -> str:
    """A rank its worker could not read, in one line."""
    if type(exc).__name__ == "KilledWorker":
        return (
            f"{path}: its workers died reading it (Dask's KilledWorker: out of memory, or killed); the "
            f"other ranks are read"
        )
    return f"{path}: failed on its worker ({first_line(exc)})"


def _result(fut, path) -> tuple[Any, bool]:
    """A local process's answer for one rank, or its failure's line; and whether its process died."""
    import concurrent.futures.process as cfp

    try:
        return fut.result(), False
    except cfp.BrokenProcessPool:
        return (
            f"{path}: its process died reading it (killed, or out of memory); the other ranks are read",
            True,
        )
    except Exception as exc:  # a reader's error, not a DoctorError: this rank fails, not the job
        return f"{path}: failed in its process ({first_line(exc)})", False


def process_ranks(workers: int) -> Callable:
    """The local processes' rank map: ``workers`` forked processes share the ranks; when one dies (killed, out of
    memory), the pool is broken and the ranks it had not answered are read again, each in a process of its own
    (``workers`` at a time), so that only the rank that kills its process fails."""
    import concurrent.futures as cf
    import multiprocessing as mp

    ctx = mp.get_context("fork")

    def rank_map(fn: Callable, jobs: list[tuple]) -> list:
        out: list = [None] * len(jobs)
        pool = cf.ProcessPoolExecutor(min(workers, len(jobs)), mp_context=ctx)
        lost = []
        try:
            futures = {pool.submit(fn, job): i for i, job in enumerate(jobs)}
            for fut in cf.as_completed(futures):
                i = futures[fut]
                out[i], broken = _result(fut, jobs[i][2])
                if broken:  # this rank, or another in the pool, killed its process
                    lost.append(i)
        finally:
            pool.shutdown(cancel_futures=True)
        running: dict = {}
        lost.sort()
        while lost or running:  # the ranks lost with the pool, each alone
            while lost and len(running) < workers:
                i = lost.pop(0)
                alone = cf.ProcessPoolExecutor(1, mp_context=ctx)
                running[alone.submit(fn, jobs[i])] = (i, alone)
            done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                i, alone = running.pop(fut)
                out[i] = _result(fut, jobs[i][2])[0]
                alone.shutdown()
        return out

    return rank_map


class DaskRanks:
    """The rank map on a Dask cluster: ``rank_map(fn, jobs)`` is ``[fn(job) or its error's line, ...]`` in order.

    ``scheduler``: an address (``tcp://host:8786``, or anything ``distributed.Client`` takes) or ``"local"``: a
    ``LocalCluster`` of ``workers`` processes, one thread each, bound to 127.0.0.1 with no dashboard."""

    def __init__(self, scheduler: str, workers: int = 2, connect_s: float = CONNECT_S):
        self.scheduler, self.workers, self.connect_s = scheduler, max(int(workers), 1), connect_s
        self.client: Any = None
        self.cluster: Any = None

    def connect(self):
        """The client, connected on the first call (a LocalCluster started first)."""
        if self.client is not None:
            return self.client
        distributed = need_dask()
        import dask

        try:
            if self.scheduler == LOCAL:
                with (
                    dask.config.set({"distributed.scheduler.allowed-failures": LOCAL_RETRIES}),
                    warnings.catch_warnings(),
                ):
                    # its HTTP endpoint (health, metrics; no dashboard) on another port when 8787 is taken
                    warnings.filterwarnings("ignore", "Port .* is already in use", UserWarning)
                    self.cluster = distributed.LocalCluster(
                        n_workers=self.workers,
                        threads_per_worker=1,
                        processes=True,
                        host="127.0.0.1",
                        dashboard_address=None,
                        worker_dashboard_address=None,
                        silence_logs=50,  # logging.CRITICAL: the report says what went wrong
                    )
                self.client = distributed.Client(self.cluster, timeout=self.connect_s)
            else:
                self.client = distributed.Client(self.scheduler, timeout=self.connect_s)
        except Exception as exc:  # refused, timed out, a bad address, a worker that cannot start
            self.close()
            what = (
                "cannot start a local Dask cluster"
                if self.scheduler == LOCAL
                else "cannot reach the Dask scheduler"
            )
            raise DoctorError(f"--scheduler {self.scheduler}: {what} ({first_line(exc)})") from None
        return self.client

    def __call__(self, fn: Callable, jobs: list[tuple]) -> list:
        """Every job's ``fn(job)``, in order; a job that failed on the cluster: ``lost``'s line for its path."""
        distributed = need_dask()
        client = self.connect()
        futures = client.map(one_rank_at_a_time, [fn] * len(jobs), jobs, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        out: list = [None] * len(jobs)
        for fut in distributed.as_completed(
            futures
        ):  # fetched as they finish: the worker frees each
            i = index[fut.key]
            try:
                out[i] = fut.result()
            except Exception as exc:  # its worker died, its trace broke the reader: a failed rank
                out[i] = lost(jobs[i][2], exc)
            fut.release()
        return out

    def close(self) -> None:
        for thing in (self.client, self.cluster):
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.close()
        self.client = self.cluster = None

    def __enter__(self) -> DaskRanks:
        need_dask()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def dask_ranks(
    scheduler: str | None, workers: int = 2, connect_s: float = CONNECT_S
) -> Iterator[DaskRanks | None]:
    """A ``DaskRanks`` for ``scheduler`` (closed, with its LocalCluster, at the end), or None (no scheduler: the
    job's own processes); without Dask, ``DoctorError`` before anything is read."""
    if not scheduler:
        yield None
        return
    with DaskRanks(scheduler, workers, connect_s) as ranks:
        yield ranks
