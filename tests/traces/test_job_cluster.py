"""A job's ranks read on a Dask cluster (perf_doctor.cluster, issue 44 item 6): a LocalCluster of 2 workers on
127.0.0.1 gives the same job report as the local processes, from Python and from ``perf-doctor job FOLDER
--scheduler local``; a corrupt rank and a rank whose worker dies are failed ranks and the others go on, on a cluster
and in the local processes; an unreachable scheduler and a missing Dask are one line and exit status 2. Skipped where
Dask is not installed (the ``[dask]`` extra), but for the local processes and the missing-Dask line."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from perf_doctor import job
from tests.traces.test_straggler import RANKS, write_job

ROOT = Path(__file__).resolve().parents[2]
try:
    import distributed  # noqa: F401

    HAVE_DASK = True
except ImportError:
    HAVE_DASK = False
needs_dask = pytest.mark.skipif(not HAVE_DASK, reason="dask.distributed is not installed (perf-doctor[dask])")


def public(rep):
    return {k: v for k, v in rep.items() if not k.startswith("_")}


def cli(*args, code=None):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "doctor")])}
    argv = ["-c", code] if code else ["-m", "perf_doctor"]
    return subprocess.run([sys.executable, *argv, *map(str, args)], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """``RANKS`` GPU ranks (test_straggler's: NCCL all-reduces), rank 1 15% slower in its compute."""
    return write_job(tmp_path_factory.mktemp("ranks"), slow=1, slow_by="compute")


@pytest.fixture(scope="module")
def local():
    from perf_doctor import cluster

    with cluster.dask_ranks("local", 2) as rank_map:
        yield rank_map


@needs_dask
def test_a_local_cluster_gives_the_process_pools_job(folder, local):
    pool = public(job.diagnose_job(folder, workers=2))
    dask = public(job.diagnose_job(folder, rank_map=local))
    assert dask == pool
    assert len(dask["ranks"]) == RANKS and dask["straggler"]["rank"] == 1
    assert local.cluster is not None and len(local.client.scheduler_info()["workers"]) == 2
    # bound to this machine: the scheduler and its workers listen on 127.0.0.1, with no dashboard
    assert local.cluster.scheduler_address.startswith("tcp://127.0.0.1:")
    assert all(w.startswith("tcp://127.0.0.1:") for w in local.client.scheduler_info()["workers"])


def test_the_map_hook_takes_any_engine(folder):
    """``diagnose_job(rank_map=...)`` is a map over the ranks: a plain ``map`` gives the same job; a rank the engine
    lost (its error's line in its place) is a failed rank."""
    one = public(job.diagnose_job(folder, workers=1))
    assert public(job.diagnose_job(folder, rank_map=lambda fn, jobs: list(map(fn, jobs)))) == one

    def losing(fn, jobs):
        return [f"{j[2]}: lost" if j[0] == 3 else fn(j) for j in jobs]

    rep = job.diagnose_job(folder, rank_map=losing, views=False)
    assert rep["ranks"][3]["error"].endswith(": lost") and rep["ranks"][3]["step_ms"] is None
    assert [r["rank"] for r in rep["ranks"] if "error" not in r] == [0, 1, 2]


def dies_on_rank_2(j):
    """``job``'s rank reader, but its process dies on rank 2 (as one killed for its memory)."""
    if j[0] == 2:
        os._exit(1)
    return job._one_rank(j)


def test_a_local_process_that_dies_is_a_failed_rank(folder):
    """The local processes (``--jobs``): the pool a dying process breaks is not the job's end; the ranks it had not
    answered are read again, each alone, and only rank 2 fails."""
    from perf_doctor import cluster

    rep = job.diagnose_job(folder, views=False,
                           rank_map=lambda fn, jobs: cluster.process_ranks(2)(dies_on_rank_2, jobs))
    by = {r["rank"]: r for r in rep["ranks"]}
    assert "its process died" in by[2]["error"] and by[2]["step_ms"] is None
    assert all("error" not in by[r] and by[r]["steps"] == 6 for r in (0, 1, 3))
    assert rep["straggler"]["rank"] == 1 and rep["verdict"].startswith("3 ranks")
    assert public(job.diagnose_job(folder, workers=2)) == public(job.diagnose_job(folder, workers=1))


@needs_dask
def test_a_corrupt_rank_and_a_dying_worker_are_failed_ranks(tmp_path, local):
    write_job(tmp_path, slow=1, slow_by="compute")
    (tmp_path / f"worker{RANKS}.1.pt.trace.json").write_text('{"traceEvents": [')  # cut short

    def dying(fn):
        def read(j):
            if j[0] == 2:
                os._exit(1)  # the worker process dies reading rank 2 (as one killed for its memory)
            return fn(j)

        return read

    rep = job.diagnose_job(tmp_path, rank_map=lambda fn, jobs: local(dying(fn), jobs), views=False)
    by = {r["rank"]: r for r in rep["ranks"]}
    assert sorted(by) == list(range(RANKS + 1))
    assert "workers died" in by[2]["error"] and "KilledWorker" in by[2]["error"]
    assert f"worker{RANKS}" in by[RANKS]["error"] and by[RANKS]["step_ms"] is None
    assert all("error" not in by[r] and by[r]["steps"] == 6 for r in (0, 1, 3))
    assert {q["rank"] for q in rep["quality"] if q["check"] == "unreadable"} == {2, RANKS}
    assert rep["verdict"].startswith("3 ranks") and rep["straggler"]["rank"] == 1
    assert all("\n" not in by[r]["error"] for r in (2, RANKS))
    # the cluster goes on: the next job is read whole
    assert len(job.diagnose_job(tmp_path, rank_map=local, views=False)["ranks"]) == RANKS + 1


@needs_dask
def test_the_command_line_on_a_local_cluster(folder):
    pool = cli(folder, "--json", "--jobs", "2")
    dask = cli("job", folder, "--json", "--scheduler", "local", "--jobs", "2")
    assert pool.returncode == 0 and dask.returncode == 0, dask.stderr[-2000:]
    assert json.loads(dask.stdout) == json.loads(pool.stdout)
    assert dask.stderr == ""


@needs_dask
def test_an_unreachable_scheduler_is_one_line(folder):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = cli("job", folder, "--scheduler", f"tcp://127.0.0.1:{port}")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "cannot reach the Dask scheduler" in p.stderr, p.stderr
    p = cli("job", folder, "--scheduler", "nonsense")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--scheduler nonsense" in p.stderr


def test_without_dask_scheduler_says_what_to_install(folder):
    code = ("import sys; sys.modules['distributed'] = None; from perf_doctor.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    p = cli("job", folder, "--scheduler", "local", code=code)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "pip install 'perf-doctor[dask]'" in p.stderr, p.stderr
    assert cli(folder, "--jobs", "1", code=code).returncode == 0  # no scheduler: no Dask needed
