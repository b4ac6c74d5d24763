"""make test's trace tests beside the notebooks, at the lowest CPU priority (the system's ``chrt --idle 0``, else
``nice -n 19``: the Makefile's IDLE), read from make's plan (``make -n``)."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BESIDE = re.compile(r"(chrt --idle 0|nice -n 19) \S+ -m pytest (.*?) > \S+beside-notebooks\.log")


def make_plan(*args: str) -> str:
    return subprocess.run(["make", "-n", "test", "SETUP=", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60).stdout.replace("\\\n", " ")


def executed(plan: str) -> list[str]:
    """The notebooks nbmake executes in ``plan``, in order (one entry per execution)."""
    return re.findall(r"/([0-9][0-9]_\w+)\.ipynb", " ".join(line.split("--nbmake", 1)[1] for line in
                                                           re.split(r";|\n", plan) if "--nbmake " in line))


NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
needs_make = pytest.mark.skipif(subprocess.run(["make", "--version"], capture_output=True).returncode != 0,
                                reason="no make")


@needs_make
def test_make_test_runs_each_trace_test_once_beside_some_notebooks():
    """``make test``'s plan (``make -n``): every notebook is executed once; the OVERLAP_TESTS files exist and start
    at the lowest priority just before nbmake runs the BESIDE_NOTEBOOKS, after the ones that run alone (02's
    workers and 06's ranks use both cores), are left out of the unit phase, which starts
    beside what is left of them, and are waited for after it, so each runs once."""
    plan = make_plan()
    assert sorted(executed(plan)) == NOTEBOOKS, executed(plan)
    beside = BESIDE.search(plan)
    assert beside, plan
    files = [a for a in beside.group(2).split() if a.startswith("tests/")]
    assert files and all((ROOT / f).exists() for f in files), files
    after = executed(plan[beside.end():])
    assert after and "02_data_pipeline" not in after and "06_distributed" not in after, after
    # the unit phase starts beside what is left of them, and they are waited for after it: a failure fails make test
    assert plan.index("--dist worksteal tests") < plan.index("wait $beside || rc=1") < plan.index("exit $rc")
    unit = plan[plan.index("--dist worksteal tests"):].split(";")[0]
    assert sorted(re.findall(r"--ignore=(\S+)", unit)) == sorted(files)
    # none of them times anything: what they assert does not depend on the CPU they get
    for f in [p for f in files for p in ([ROOT / f] if (ROOT / f).is_file() else sorted((ROOT / f).rglob("*.py")))]:
        text = f.read_text()
        assert "compare_times" not in text and "interleaved_times" not in text and "time.sleep" not in text, f


@needs_make
def test_without_overlap_tests_everything_runs_as_before():
    plan = make_plan("OVERLAP_TESTS=")
    assert executed(plan) == NOTEBOOKS and not BESIDE.search(plan) and "--ignore=" not in plan


@needs_make
def test_the_trace_tests_and_what_they_start_run_at_the_lowest_priority():
    """The prefix make's plan puts before them (``chrt --idle 0`` where it may set SCHED_IDLE, else ``nice -n 19``)
    runs a command whose own child is at that priority too, as pytest's subprocesses are."""
    prefix = shlex.split(BESIDE.search(make_plan()).group(1))
    report = "import os; print(os.sched_getscheduler(0) if hasattr(os, 'sched_getscheduler') else -1, os.nice(0))"
    probe = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {report!r}])\n"
    p = subprocess.run([*prefix, sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    policy, nice = map(int, p.stdout.split())
    if prefix[0] == "chrt":
        assert policy == os.SCHED_IDLE   # inherited by the grandchild
    else:  # no chrt, or it may not set SCHED_IDLE here
        assert nice == 19


@needs_make
def test_without_chrt_the_prefix_is_nice(tmp_path):
    """Where util-linux's chrt is missing (a PATH without it here), the plan falls back to ``nice -n 19``."""
    import shutil

    env = {**os.environ, "PATH": str(tmp_path)}
    plan = subprocess.run([shutil.which("make"), "-n", "test", "SETUP="], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=60).stdout.replace("\\\n", " ")
    assert BESIDE.search(plan).group(1) == "nice -n 19"
