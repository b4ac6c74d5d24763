"""A folder of ranks read by local processes and by a Dask LocalCluster, timed: ``python benchmarks/cluster_bench.py
[--ranks 16] [--mb 100] [--workers 2] [--repeat 1]`` (issue 44 item 6; needs psutil, and Dask for the cluster).

By hand, never by ``make test``. It writes ``--ranks`` rank traces of ``--mb`` MB (``doctor_bench.tile``, from the
A100 trace where it is) in a temporary folder, then runs ``python -m perf_doctor job FOLDER --json --jobs W`` in a
fresh process, once as it is (W forked processes) and once with ``--scheduler local`` (a LocalCluster of W workers),
``--repeat`` times each, alternating. Each run: its wall time, ranks per second, CPU time, and the peak resident
memory of the doctor's process and of each worker (its process tree sampled every ``SAMPLE_S``), beside the
machine's load (the 1-minute load average before and after, and the CPU time other processes took meanwhile). The
two engines' reports must be equal. The folder is deleted at the end."""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doctor_bench as db  # noqa: E402

SAMPLE_S = 0.1  # how often the process tree's memory is read


def watch(pid: int, stop: threading.Event, peaks: dict) -> None:
    """Until ``stop``: ``peaks[pid] = [peak RSS bytes, role]`` for ``pid`` and every process under it."""
    root = psutil.Process(pid)
    while not stop.is_set():
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            break
        for p in procs:
            try:
                rss = p.memory_info().rss
                if p.pid not in peaks:
                    cmd = " ".join(p.cmdline())
                    role = (
                        "doctor"
                        if p.pid == pid
                        else "tracker"
                        if "resource_tracker" in cmd
                        else "worker"
                    )
                    peaks[p.pid] = [0, role]
                peaks[p.pid][0] = max(peaks[p.pid][0], rss)
            except psutil.Error:
                continue
        stop.wait(SAMPLE_S)


def busy_s() -> float:
    """The machine's CPU time so far, all cores, every process."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def run(folder: Path, workers: int, scheduler: str | None) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "perf_doctor",
        "job",
        str(folder),
        "--json",
        "--jobs",
        str(workers),
    ]
    if scheduler:
        cmd += ["--scheduler", scheduler]
    env = dict(os.environ, PYTHONPATH=str(db.DOCTOR))
    load0, busy0, kids0 = os.getloadavg()[0], busy_s(), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    stop, peaks = threading.Event(), {}
    w = threading.Thread(target=watch, args=(p.pid, stop, peaks), daemon=True)
    w.start()
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    stop.set()
    w.join()
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (kids.ru_utime - kids0.ru_utime) + (kids.ru_stime - kids0.ru_stime)
    if p.returncode != 0:
        raise SystemExit(
            f"cluster_bench: the doctor failed (exit {p.returncode}): {err.strip()[-800:]}"
        )
    rep = json.loads(out)
    mb = 1024.0 * 1024.0
    return {
        "engine": f"LocalCluster, {workers} workers" if scheduler else f"{workers} processes",
        "wall_s": wall,
        "ranks_per_s": len(rep["ranks"]) / wall,
        "cpu_s": cpu,
        "doctor_mb": max(v[0] for v in peaks.values() if v[1] == "doctor") / mb,
        "worker_mb": sorted((v[0] / mb for v in peaks.values() if v[1] == "worker"), reverse=True),
        "load_before": load0,
        "load_after": os.getloadavg()[0],
        "others_cpu_s": max(busy_s() - busy0 - cpu, 0.0),
        "report": {k: v for k, v in rep.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python benchmarks/cluster_bench.py", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--ranks", type=int, default=16, help="rank traces to write (default 16)")
    ap.add_argument("--mb", type=float, default=100.0, help="MB per rank trace (default 100)")
    ap.add_argument(
        "--workers", type=int, default=2, help="processes or cluster workers (default 2)"
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs of each engine, alternating")
    ap.add_argument(
        "--source", type=Path, help="a trace whose steps are tiled (default: hta_control)"
    )
    args = ap.parse_args(argv)
    sys.path.insert(0, str(db.DOCTOR))
    from perf_doctor.load import load_trace

    src = args.source or (db.DEFAULT_SOURCE if db.DEFAULT_SOURCE.exists() else None)
    source = load_trace(src) if src else db.synthetic_steps()
    folder = Path(tempfile.mkdtemp(prefix="cluster_bench_"))
    try:
        first = folder / "worker0.1700000000000.pt.trace.json"
        t0 = time.perf_counter()
        n, steps = db.tile(source, first, args.mb, rank=0)
        for r in range(1, args.ranks):
            db.with_rank(first, folder / f"worker{r}.1700000000000.pt.trace.json", r)
        print(
            f"wrote {args.ranks} rank traces of {first.stat().st_size / 1e6:.0f} MB ({n:,} events, {steps} "
            f"steps each, from {src or 'a synthetic trace'}) in {time.perf_counter() - t0:.0f} s; "
            f"{os.cpu_count()} cores",
            flush=True,
        )
        runs = []
        for _ in range(max(args.repeat, 1)):
            for scheduler in (None, "local"):
                runs.append(run(folder, args.workers, scheduler))
                r = runs[-1]
                print(
                    f"{r['engine']}: {r['wall_s']:.1f} s, {r['ranks_per_s']:.3f} ranks/s, {r['cpu_s']:.0f} s of "
                    f"CPU; peak RSS: doctor {r['doctor_mb']:.0f} MB, workers "
                    + ", ".join(f"{m:.0f}" for m in r["worker_mb"])
                    + f" MB; load {r['load_before']:.1f} -> {r['load_after']:.1f}, other processes "
                    f"{r['others_cpu_s']:.0f} s of CPU meanwhile",
                    flush=True,
                )
        reports = [r.pop("report") for r in runs]
        same = all(x == reports[0] for x in reports)
        print(f"the job reports are {'equal' if same else 'DIFFERENT'} ({len(reports)} runs)")
        print(json.dumps(runs))
        return 0 if same else 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
