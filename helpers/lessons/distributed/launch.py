"""Starting the ranks from a notebook, as ``torchrun`` would, and never hanging the kernel.

- ``check_ranks``: more ranks than this machine can run at once (CPU cores for gloo ranks × their threads, GPUs for
  NCCL) is refused with the reason, before anything starts;
- ``pick_port``: the rendezvous port; when the preferred one is in use, a free one is taken and the note says so;
- ``start``: ``python -m helpers.lessons.distributed.train`` once per rank with torchrun's environment variables,
  each rank in a session of its own; ``wait`` polls them with a timeout. A rank that exits with an error, or a job
  past its timeout, stops every rank (their process groups killed) and gives a failed row naming the rank;
- ``torchrun_command``: the same job as one ``torchrun`` command line.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ...measure.validate import InvalidValue

MODULE = "helpers.lessons.distributed.train"
DEFAULT_PORT = 29500          # torchrun's default MASTER_PORT
MARKER = "PERF_LAB_DDP_JOB"   # in every rank's environment: a test finds leftover ranks by it


def gpu_count() -> int:
    """CUDA GPUs on this machine (0 without torch's CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cores() -> int:
    return os.cpu_count() or 1


def check_ranks(ranks: Any, threads: int = 1, cores: int | None = None, gpus: int = 0) -> int:
    """The number of ranks, or ``InvalidValue`` with the reason: not a whole number ≥ 2 (DDP needs two to
    communicate), more NCCL ranks than GPUs, or more gloo ranks × threads than CPU cores."""
    cores = cores if cores is not None else (os.cpu_count() or 1)
    if isinstance(ranks, bool) or not isinstance(ranks, int):
        raise InvalidValue(f"ranks must be a whole number, not {ranks!r}.")
    if ranks < 2:
        raise InvalidValue(f"ranks must be at least 2 for data-parallel training (got {ranks}).")
    if gpus:
        if ranks > gpus:
            raise InvalidValue(f"{ranks} ranks but {gpus} GPU(s): NCCL runs one rank per GPU.")
        return ranks
    if ranks * max(threads, 1) > cores:
        raise InvalidValue(f"{ranks} ranks × {max(threads, 1)} thread(s) is more than this machine's {cores} CPU "
                           f"cores: ranks would take turns on a core, and every all-reduce waits for the rank "
                           f"that is descheduled; choose at most {cores // max(threads, 1)}.")
    return ranks


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(preferred: int = DEFAULT_PORT, host: str = "127.0.0.1") -> tuple[int, str]:
    """``(port, note)``: the preferred port when it is free, else one the system hands out, and a note saying so."""
    if port_free(preferred, host):
        return preferred, f"port {preferred} is free: the ranks meet there"
    port = free_port(host)
    return port, f"port {preferred} is in use (another job?): took port {port} instead"


def free_port(host: str = "127.0.0.1") -> int:
    """A port the system hands out as free now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def rank_env(rank: int, world: int, port: int, marker: str) -> dict[str, str]:
    """torchrun's variables for one rank, the project on ``PYTHONPATH``, the job's marker."""
    root = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1", KINETO_LOG_LEVEL="5")
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env[MARKER] = marker
    return env


def start(out: Path | str, world: int, plan: dict, port: int) -> list[subprocess.Popen]:
    """Start ``world`` ranks of ``train`` writing into ``out``; each in a new session (so it can be killed with
    everything it started). ``plan`` goes to ``out/plan.json``; stdout and stderr to ``out/rank<r>.log``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(plan))
    procs = []
    for r in range(world):
        log = open(out / f"rank{r}.log", "w")
        procs.append(subprocess.Popen([sys.executable, "-m", MODULE, "--out", str(out), "--plan", str(out / "plan.json")],
                                      env=rank_env(r, world, port, str(out.resolve())), stdout=log,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
        log.close()
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    """Kill every rank's process group still running, and reap them."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def port_taken(out: Path | str, world: int) -> bool:
    """Whether a rank's log says the rendezvous port was in use (rank 0 could not bind it)."""
    for r in range(world):
        try:
            text = (Path(out) / f"rank{r}.log").read_text(errors="replace")
        except OSError:
            continue
        if "address already in use" in text.lower() or "EADDRINUSE" in text:
            return True
    return False


def wait(procs: list[subprocess.Popen], out: Path | str, timeout_s: float) -> list[dict[str, Any]]:
    """Wait for the ranks at most ``timeout_s``; one row per rank: ``{"rank", "pid", "status", "error"}``. The first
    rank to fail (or the timeout) stops the others: a job of ranks cannot go on without one of them."""
    out, t0, first = Path(out), time.monotonic(), None
    try:
        while any(p.poll() is None for p in procs):
            dead = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            if dead or time.monotonic() - t0 > timeout_s:
                first = dead[0] if dead else None
                break
            time.sleep(0.05)
        else:
            dead = [r for r, p in enumerate(procs) if p.returncode != 0]
            first = dead[0] if dead else None
    finally:
        timed_out = any(p.poll() is None for p in procs) and first is None
        stop(procs)
    rows = []
    for r, p in enumerate(procs):
        row = {"rank": r, "pid": p.pid, "status": "ok", "error": None, "returncode": p.returncode}
        if r == first:
            row.update(status="failed", error=f"rank {r} died (exit code {p.returncode}): "
                                              f"{last_line(out / f'rank{r}.log') or 'no message'}")
        elif timed_out:
            row.update(status="failed", error=f"rank {r} did not finish within {timeout_s:.0f} s: stopped")
        elif first is not None:
            row.update(status="failed", error=f"rank {r} stopped because rank {first} died")
        rows.append(row)
    return rows


def torchrun_command(out: str, world: int, plan_file: str | None = None, on_gpu: bool = False) -> str:
    """The same job under torchrun (one node; ``--standalone`` picks a free rendezvous port itself)."""
    plan = f" --plan {plan_file}" if plan_file else ""
    return (f"torchrun --standalone --nproc-per-node {world} -m {MODULE} --out {out}{plan}"
            + ("   # NCCL, one GPU per rank" if on_gpu else "   # gloo, CPU processes"))
