"""TensorBoard: per-experiment scalars and hparams, and an inline view that is checked.

Taught in ``01_profiler_basics``; every notebook logs to one ``runs/`` folder.
"""
from __future__ import annotations

import atexit
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from .env import runs_dir

HOST = "127.0.0.1"
_started_pids: set[int] = set()


def port_is_free(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(preferred: int = 6006, host: str = HOST) -> int:
    """``preferred`` when it is free, else a free port the OS picks; says so when it moves."""
    if preferred and port_is_free(preferred, host):
        return preferred
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port = s.getsockname()[1]
    if preferred:
        print(f"Port {preferred} on {host} is busy (another TensorBoard?); using port {port} instead.")
    return port


def _scalar(v: Any) -> float | int | str | bool | None:
    if isinstance(v, (int, float, str, bool)):
        return v
    if v is None:
        return "none"
    return str(v)


def log_experiment(
    notebook: str,
    name: str,
    config: Mapping[str, Any],
    metrics: Mapping[str, Any],
    *,
    step_times_ms: Iterable[float] | None = None,
    losses: Iterable[float] | None = None,
    batch_size: int | None = None,
    root: Path | str | None = None,
) -> Path:
    """Write one experiment to ``runs/<notebook>/<name>-<n>``: per-step scalars and an hparams entry.

    Scalars: ``step/time_ms``, ``step/samples_per_s`` (when ``batch_size`` is given)
    and ``train/loss``. The hparams entry holds the experiment's config and its final
    metrics, so TensorBoard's HParams dashboard compares configurations side by side.
    """
    from torch.utils.tensorboard import SummaryWriter

    base = Path(root) if root is not None else runs_dir() / notebook
    base.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    n = 0
    while (base / f"{safe}-{n}").exists():
        n += 1
    logdir = base / f"{safe}-{n}"
    writer = SummaryWriter(log_dir=str(logdir))
    try:
        for i, t in enumerate(step_times_ms or []):
            writer.add_scalar("step/time_ms", float(t), i)
            if batch_size:
                writer.add_scalar("step/samples_per_s", batch_size / (float(t) / 1000.0), i)
        for i, loss in enumerate(losses or []):
            writer.add_scalar("train/loss", float(loss), i)
        hp = {k: _scalar(v) for k, v in config.items()}
        mets = {f"hparam/{k}": float(v) for k, v in metrics.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}
        writer.add_hparams(hp, mets, run_name=".")
    finally:
        writer.close()
    return logdir


@dataclass
class TensorBoardStatus:
    port: int
    url: str
    answered: bool
    message: str

    def __str__(self) -> str:
        return self.message


def wait_until_answering(port: int, timeout_s: float = 30.0, host: str = HOST) -> bool:
    """Poll TensorBoard's HTTP API until it answers (True) or ``timeout_s`` passes (False)."""
    deadline = time.time() + timeout_s
    url = f"http://{host}:{port}/data/logdir"
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - loopback only
                if r.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.5)
    return False


def check(port: int, timeout_s: float = 30.0) -> TensorBoardStatus:
    """Say plainly whether the TensorBoard on ``port`` answered, and what to do if not."""
    _remember_started(port)
    url = f"http://{HOST}:{port}/"
    ok = wait_until_answering(port, timeout_s)
    if ok:
        msg = f"TensorBoard answered at {url}. The frame above shows it; open that address in a browser tab for more room."
    else:
        msg = (f"TensorBoard did not answer at {url} within {timeout_s:.0f} s. Start it by hand from the project "
               f"folder with `tensorboard --logdir runs --host {HOST}` and open the address it prints. Everything "
               "the lesson needs is also in this notebook's tables and plots.")
    print(msg)
    return TensorBoardStatus(port=port, url=url, answered=ok, message=msg)


def _remember_started(port: int) -> None:
    try:
        from tensorboard import manager

        for info in manager.get_all():
            if info.port == port:
                _started_pids.add(info.pid)
    except Exception:  # noqa: BLE001 - best effort only
        pass


def stop_started() -> None:
    """Stop the TensorBoard servers this kernel started (also run at exit)."""
    for pid in list(_started_pids):
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        _started_pids.discard(pid)


atexit.register(stop_started)
