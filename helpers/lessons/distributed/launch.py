"""Starting the ranks from a notebook as ``torchrun`` would, never hanging the kernel or leaving a process."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ...measure.validate import InvalidValue, validate_whole
from ...notebook import tensorboard as tb

DEFAULT_PORT = 29500  # torchrun's default MASTER_PORT


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_ranks(ranks: Any, threads: int = 1, cores: int | None = None, gpus: int = 0) -> int:
    """The number of ranks, or ``InvalidValue``: not whole and >= 2, or more than the GPUs (or cores)."""
    cores = cores or os.cpu_count() or 1
    if validate_whole(ranks, "ranks") < 2:
        raise InvalidValue(f"ranks must be at least 2 for data-parallel training (got {ranks}).")
    if gpus and ranks > gpus:
        raise InvalidValue(f"{ranks} ranks but {gpus} GPU(s): NCCL runs one rank per GPU.")
    if not gpus and ranks * max(threads, 1) > cores:
        raise InvalidValue(
            f"{ranks} ranks × {max(threads, 1)} thread(s) is more than this machine's {cores} CPU "
            f"cores: choose at most {cores // max(threads, 1)}."
        )
    return ranks


def free_port() -> int:
    """A free port the system hands out (``tensorboard.free_port`` with no preference)."""
    return tb.free_port(0)


def pick_port(preferred: int = DEFAULT_PORT) -> tuple[int, str]:
    """``(port, note)``: the preferred port when free, else one the system hands out (the note says which)."""
    if tb.port_is_free(preferred):
        return preferred, f"port {preferred} is free"
    port = free_port()
    return port, f"port {preferred} is in use: took port {port}"


def rank_env(rank: int, world: int, port: int) -> dict[str, str]:
    """torchrun's variables for one rank (one intra-op thread unless the script sets more)."""
    return dict(
        os.environ,
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
        KINETO_LOG_LEVEL="5",
    )


def start(
    script: Path | str, out: Path | str, world: int, plan: dict, port: int
) -> list[subprocess.Popen]:
    """``python script OUT OUT/plan.json`` per rank in its own session, output to ``OUT/rank<r>.log``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(plan))
    procs = []
    for r in range(world):
        with open(out / f"rank{r}.log", "w") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(script), str(out), str(out / "plan.json")],
                    env=rank_env(r, world, port),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)


def log_text(out: Path, rank: int) -> str:
    with contextlib.suppress(OSError):
        return (out / f"rank{rank}.log").read_text(errors="replace")
    return ""


def port_taken(out: Path | str, world: int) -> bool:
    """Whether a rank's log says the rendezvous port was taken (bound by another program after ``pick_port``)."""
    return any("EADDRINUSE" in log_text(Path(out), r) for r in range(world))


def wait(procs: list[subprocess.Popen], out: Path | str, timeout_s: float) -> list[dict[str, Any]]:
    """Wait at most ``timeout_s``; a row per rank. The first failure, or the timeout, stops every rank."""
    out, t0 = Path(out), time.monotonic()
    try:
        while (
            any(p.poll() is None for p in procs)
            and time.monotonic() - t0 <= timeout_s
            and not any(p.poll() not in (None, 0) for p in procs)
        ):
            time.sleep(0.05)
        first = next((r for r, p in enumerate(procs) if p.poll() not in (None, 0)), None)
        timed_out = first is None and any(p.poll() is None for p in procs)
    finally:
        stop(procs)
    rows = []
    for r, p in enumerate(procs):
        row = {
            "rank": r,
            "pid": p.pid,
            "status": "failed",
            "error": None,
            "returncode": p.returncode,
        }
        if r == first:
            last = [ln.strip() for ln in log_text(out, r).splitlines() if ln.strip()]
            row["error"] = (
                f"rank {r} died (exit code {p.returncode}): {last[-1][:300] if last else 'no message'}"
            )
        elif timed_out:
            row["error"] = f"rank {r} did not finish within {timeout_s:.0f} s: stopped"
        elif first is not None:
            row["error"] = f"rank {r} stopped because rank {first} died"
        else:
            row["status"] = "ok"
        rows.append(row)
    return rows
