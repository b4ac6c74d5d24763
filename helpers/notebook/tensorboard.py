"""TensorBoard: per-experiment scalars and hparams, and an inline view that is checked. Importing it changes nothing:
``prepare()`` (called by ``inline`` and ``start``) points TensorBoard's launcher at this environment's and stops
the servers this process starts at exit."""

from __future__ import annotations

import atexit
import contextlib
import datetime as _dt
import itertools
import json
import os
import random
import re
import signal
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from .env import runs_dir
from .reference import shown

HOST = "127.0.0.1"
_started_pids: set[int] = set()
_prepared = False
_logged: list[str] = []  # the notebooks whose experiments log_experiment wrote in this process


def free_port(preferred: int = 6006) -> int:
    """``preferred`` when it is free, else a free port the OS picks; says so when it moves."""
    with socket.socket() as s:
        try:
            s.bind((HOST, preferred))
        except OSError:
            s.bind((HOST, 0))
        port = s.getsockname()[1]
    if port == preferred:
        return port
    if preferred:
        print(
            f"Port {preferred} on {HOST} is busy (another TensorBoard?); using port {port} instead."
        )
    return port


def notebook_logdir(notebook: str, clear: bool = False) -> Path:
    """A folder of one notebook's runs alone, ``runs/tensorboard_<NN>`` (emptied with ``clear``): logged there and
    served (``inline``), its runs keep their own names and TensorBoard's tables show no other notebook's."""
    import shutil

    folder = runs_dir() / f"tensorboard_{notebook.split('_', 1)[0]}"
    if clear and folder.is_dir():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


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
    """Write one experiment to ``runs/<notebook>/<name>-<n>``: scalars ``step/time_ms``, ``step/samples_per_s`` (with
    ``batch_size``) and ``train/loss``, and an hparams entry (config and final metrics) for the HParams dashboard."""
    from torch.utils.tensorboard import SummaryWriter

    base = Path(root) if root is not None else runs_dir() / notebook
    base.mkdir(parents=True, exist_ok=True)
    if notebook not in _logged:
        _logged.append(notebook)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    logdir = next(
        base / f"{safe}-{n}" for n in itertools.count() if not (base / f"{safe}-{n}").exists()
    )
    writer = SummaryWriter(log_dir=str(logdir))
    try:
        for i, t in enumerate(step_times_ms or []):
            writer.add_scalar("step/time_ms", float(t), i)
            if batch_size:
                writer.add_scalar("step/samples_per_s", batch_size / (float(t) / 1000.0), i)
        for i, loss in enumerate(losses or []):
            writer.add_scalar("train/loss", float(loss), i)
        hp = {
            k: v if isinstance(v, (int, float, str, bool)) else "none" if v is None else str(v)
            for k, v in config.items()
        }
        mets = {
            f"hparam/{k}": float(v)
            for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
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
    logdir: str | None = None

    def __str__(self) -> str:
        return self.message


def prepare(preferred: int = 6006) -> int:
    """Get ready to show TensorBoard: ``$TENSORBOARD_BINARY`` (unless set) names this environment's ``tensorboard``,
    the servers this process starts are stopped at exit; returns ``free_port(preferred)``."""
    global _prepared
    if not _prepared:
        exe = Path(sys.executable).with_name("tensorboard")
        if "TENSORBOARD_BINARY" not in os.environ and exe.exists():
            os.environ["TENSORBOARD_BINARY"] = str(exe)
        atexit.register(stop_started)
        _prepared = True
    return free_port(preferred)


def api(
    port: int, path: str, params: Mapping[str, str] | None = None, timeout_s: float = 10.0
) -> Any:
    """GET ``path`` from the TensorBoard HTTP API on ``port`` and return the decoded JSON."""
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    url = f"http://{HOST}:{port}{path}{query}"
    with urllib.request.urlopen(url, timeout=timeout_s) as r:  # noqa: S310 - loopback only
        return json.loads(r.read().decode("utf-8"))


def served_logdir(port: int) -> str | None:
    """The logdir the TensorBoard on ``port`` serves, or None when nothing (or no TensorBoard) answers."""
    try:
        data = api(port, "/data/logdir", timeout_s=2)
    except (urllib.error.URLError, ConnectionError, OSError, ValueError):
        return None
    return data.get("logdir") if isinstance(data, dict) else None


def wait_until_answering(port: int, timeout_s: float = 30.0) -> bool:
    """Poll TensorBoard's HTTP API until it answers (True) or ``timeout_s`` passes (False)."""
    deadline = time.time() + timeout_s
    while served_logdir(port) is None:
        if time.time() >= deadline:
            return False
        time.sleep(0.5)
    return True


def start(
    logdir: str | Path | None = None,
    port: int | None = None,
    timeout_s: float = 60.0,
) -> TensorBoardStatus:
    """Start a TensorBoard for ``logdir`` on 127.0.0.1 (``port`` or a free one), stopped by ``stop_started()`` (also at
    exit)."""
    from tensorboard import manager

    logdir = Path(logdir) if logdir is not None else runs_dir()
    port = port or prepare(0)
    args = ["--logdir", str(logdir), "--host", HOST, "--port", str(port)]
    result = manager.start(args, timeout=_dt.timedelta(seconds=timeout_s))
    info = getattr(result, "info", None)
    if info is not None and wait_until_answering(info.port, timeout_s):
        if isinstance(result, manager.StartLaunched):
            _started_pids.add(info.pid)
        url = f"http://{HOST}:{info.port}/"
        msg = f"TensorBoard answered at {url} with the runs in {shown(logdir)}."
        print(msg)
        return TensorBoardStatus(info.port, url, True, msg, str(logdir))
    pid = getattr(result, "pid", None)
    if pid:  # timed out: it may still come up later; stop it rather than leave it behind
        _started_pids.add(pid)
        stop(pid)
    lines = (getattr(result, "stderr", "") or "").strip().splitlines()
    detail = lines[-1] if lines else type(result).__name__
    msg = f"Could not start TensorBoard on port {port} ({detail})."
    return TensorBoardStatus(port, f"http://{HOST}:{port}/", False, msg, str(logdir))


def own_runs(logdir: Path | str) -> str | None:
    """This notebook's runs in ``logdir`` (the folders ``log_experiment`` wrote in this process, else the one written
    last), for ``frame_path``; None when there is none or ``logdir`` holds the runs themselves."""
    if _logged:
        inside = [n for n in _logged if (Path(logdir) / n).is_dir()]
        if not inside and Path(logdir).is_dir():
            return None
        return "|".join(inside or _logged)
    try:
        folders = [p for p in Path(logdir).iterdir() if p.is_dir()]
    except OSError:
        return None
    return max(folders, key=lambda p: p.stat().st_mtime).name if folders else None


def frame_path(runs: str | None = None, dashboard: str | None = None) -> str:
    """The path the inline frame opens: TensorBoard's ``runFilter`` (a regex over run names, its deep link) set to
    the runs under ``runs`` (``a|b``: folders), and ``#dashboard`` (``hparams``, ``timeseries``, ...)."""
    query = ""
    if runs:
        pattern = "^(" + "|".join(re.escape(r) for r in runs.split("|")) + ")/"
        query = "?" + urllib.parse.urlencode({"runFilter": pattern})
    return "/" + query + (f"#{dashboard}" if dashboard else "")


def inline(
    logdir: str | Path | None = None,
    preferred: int = 6006,
    timeout_s: float = 60.0,
    dashboard: str | None = None,
) -> TensorBoardStatus:
    """TensorBoard inside the notebook, checked, in one call: what ``%tensorboard --logdir runs --host 127.0.0.1``
    shows, on ``preferred`` or a free port (``prepare``), the frame listing this notebook's runs only (``own_runs``)
    and open on ``dashboard``. The status's message says what to do when it did not answer."""
    want = Path(logdir) if logdir is not None else runs_dir()
    status = start(want, port=prepare(preferred), timeout_s=timeout_s)
    if status.answered:
        _display_inline(status.port, frame_path(own_runs(want), dashboard))
    else:
        print(f"{status.message} {_by_hand(want)}")
    return status


def _by_hand(logdir: Path) -> str:
    return (
        f"Start it by hand from the project folder with `tensorboard --logdir {logdir} --host {HOST}` and open the "
        "address it prints. Everything the lesson needs is also in this notebook's tables and plots."
    )


_FRAME = """<iframe id="{id}" width="100%" height="{height}" frameborder="0"></iframe>
<script>(function() {{ const url = new URL({path}, window.location); url.port = {port};
  document.getElementById({jid}).src = url; }})();</script>"""


def _display_inline(port: int, path: str = "/") -> None:
    """TensorBoard's own inline frame (``tensorboard.notebook.display``: the page's host, TensorBoard's port), opened
    at ``path`` (``frame_path``)."""
    try:
        if os.environ.get("TENSORBOARD_PROXY_URL") or path == "/":
            from tensorboard import notebook

            notebook.display(port=port, height=800)
            return
        from IPython.display import HTML, display

        fid = f"tensorboard-frame-{random.getrandbits(64):016x}"
        display(
            HTML(
                _FRAME.format(
                    id=fid, jid=json.dumps(fid), height=800, path=json.dumps(path), port=port
                )
            )
        )
    except Exception as exc:  # noqa: BLE001 - no notebook front end (plain Python): the URL was printed
        print(f"(Not shown inline: {exc})")


def scalar_runs(port: int) -> list[str]:
    """The runs TensorBoard's own dashboards (scalars, hparams) list: ``/data/runs``."""
    return list(api(port, "/data/runs"))


def profiler_runs(port: int, timeout_s: float = 60.0) -> dict[str, list[str]]:
    """``{run: [view, ...]}`` as the profiler plugin's API lists them, once it has finished loading (or ``timeout_s``
    passed); ``RuntimeError`` when the plugin (torch-tb-profiler) is not installed."""
    base = "/data/plugin/pytorch_profiler"
    deadline = time.time() + timeout_s
    while True:
        try:
            data = api(port, f"{base}/runs")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise RuntimeError(
                    "TensorBoard has no profiler plugin: `pip install torch-tb-profiler`."
                ) from exc
            raise
        runs = list(data.get("runs", []))
        if (runs and not data.get("loading")) or time.time() >= deadline:
            return {run: list(api(port, f"{base}/views", {"run": run})) for run in runs}
        time.sleep(1.0)


def stop(pid: int, timeout_s: float = 10.0) -> bool:
    """Stop one TensorBoard this process started (SIGTERM, then SIGKILL); True when it is gone."""
    if pid not in _started_pids:
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        _started_pids.discard(pid)
        return True
    except PermissionError:
        return False
    deadline = time.time() + timeout_s
    gone = False
    while time.time() < deadline and not gone:
        try:
            gone = os.waitpid(pid, os.WNOHANG)[0] == pid  # reap our child so it leaves no zombie
        except ChildProcessError:  # not our child: poll whether it still exists
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                gone = True
        if not gone:
            time.sleep(0.1)
    if not gone:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    _started_pids.discard(pid)
    return True


def stop_started() -> list[int]:
    """Stop every TensorBoard server this process started (also run at exit); returns their pids."""
    pids = sorted(_started_pids)
    for pid in pids:
        stop(pid)
    return pids
