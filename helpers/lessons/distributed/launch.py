"""Starting the ranks from a notebook with ``torchrun``, never hanging the kernel or leaving a process."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ...measure.validate import InvalidValue, validate_whole


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


def torchrun_command(script: Path | str, out: Path | str, world: int) -> list[str]:
    """``torchrun --standalone --nproc-per-node WORLD script OUT OUT/plan.json``, each rank's output to its own files
    under ``OUT/logs`` (``--redirects 3``). ``--standalone``: a rendezvous on this machine, on a free port."""
    out = Path(out)
    # each rank's output in its own files
    logs = ["--log-dir", str(out / "logs"), "--redirects", "3"]
    args = [str(script), str(out), str(out / "plan.json")]
    return [*TORCHRUN, "--standalone", "--nproc-per-node", str(world), *logs, *args]


TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]  # the torchrun command of this Python


def start(script: Path | str, out: Path | str, world: int, plan: dict) -> subprocess.Popen:
    """torchrun in its own session (its ranks with it), one intra-op thread per rank unless the script sets more;
    its own output to ``OUT/torchrun.log``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(plan))
    env = dict(os.environ, OMP_NUM_THREADS="1", KINETO_LOG_LEVEL="5")
    with open(out / "torchrun.log", "w") as log:
        return subprocess.Popen(
            torchrun_command(script, out, world),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (Linux's /proc), none when it has ended."""
    with contextlib.suppress(OSError, ValueError):
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def stop(proc: subprocess.Popen, pids: list[int] = ()) -> None:
    """torchrun and every rank it started: its session, and the ranks' pids (torchrun starts each in a session of
    its own, which killing torchrun's would miss)."""
    for pid in {*pids, *children(proc.pid)} - {proc.pid}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # a rank that leads its own session, and what it started
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def rank_log(out: Path, rank: int) -> str:
    """What rank ``rank`` wrote to stderr (torchrun's ``--log-dir``), else ""."""
    for f in sorted(Path(out).glob(f"logs/*/attempt_*/{rank}/stderr.log")):
        with contextlib.suppress(OSError):
            return f.read_text(errors="replace")
    return ""


def failed_rank(out: Path) -> tuple[int, str] | None:
    """The rank torchrun reports as the root cause (its error summary: ``rank: N``, ``exitcode: C``), or None."""
    with contextlib.suppress(OSError):
        text = (Path(out) / "torchrun.log").read_text(errors="replace")
        # the first failure
        text = text[text.find("Root Cause") :] if "Root Cause" in text else text
        found = re.search(r"rank\s*:\s*(\d+)[^\n]*\n[^\n]*exitcode\s*:\s*(-?\d+)", text)
        if found:
            return int(found.group(1)), found.group(2)
    return None


def wait(
    proc: subprocess.Popen,
    out: Path | str,
    world: int,
    timeout_s: float,
    pids: list[int] | None = None,
) -> list[dict[str, Any]]:
    """Wait at most ``timeout_s`` for torchrun; a row per rank. Past the timeout every rank is stopped; the ranks'
    pids seen meanwhile are added to ``pids``."""
    out, t0 = Path(out), time.monotonic()
    seen = pids if pids is not None else []
    try:
        while proc.poll() is None and time.monotonic() - t0 <= timeout_s:
            seen.extend(c for c in children(proc.pid) if c not in seen)
            time.sleep(0.05)
        timed_out = proc.poll() is None
    finally:
        stop(proc, seen)
    failed = None if timed_out or proc.returncode == 0 else failed_rank(out)
    rows = []
    for r in range(world):
        error = _error(r, proc, out, timeout_s if timed_out else None, failed)
        status = "failed" if error else "ok"
        code = proc.returncode
        rows.append(
            {"rank": r, "pid": proc.pid, "status": status, "error": error, "returncode": code}
        )
    return rows


def _error(r: int, proc, out: Path, timed_out_s: float | None, failed) -> str | None:
    """Rank ``r``'s error line: past the timeout, dead, stopped for another's death, or torchrun's failure."""
    if timed_out_s is not None:
        return f"rank {r} did not finish within {timed_out_s:.0f} s: stopped"
    if failed is not None and failed[0] == r:
        last = [ln.strip() for ln in rank_log(out, r).splitlines() if ln.strip()]
        return f"rank {r} died (exit code {failed[1]}): {last[-1][:300] if last else 'no message'}"
    if failed is not None:
        return f"rank {r} stopped because rank {failed[0]} died"
    if proc.returncode != 0:
        return f"torchrun ended with exit code {proc.returncode} (see its log)"
    return None
