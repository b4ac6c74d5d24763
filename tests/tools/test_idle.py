"""helpers.tools.idle (the lowest CPU priority) and make test's use of it: the trace tests beside the notebooks."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def idle(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "helpers.tools.idle", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_the_command_and_what_it_starts_run_at_the_lowest_priority():
    report = "import os; print(os.sched_getscheduler(0) if hasattr(os, 'sched_getscheduler') else -1, os.nice(0))"
    probe = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {report!r}])\n"
    p = idle(sys.executable, "-c", probe)
    assert p.returncode == 0, p.stderr
    policy, nice = map(int, p.stdout.split())
    if hasattr(os, "SCHED_IDLE"):
        assert policy == os.SCHED_IDLE   # inherited by the grandchild, as by pytest's own subprocesses
    else:  # pragma: no cover - not Linux
        assert nice == 19


def test_a_missing_command_is_one_line_and_127():
    p = idle("no-such-command-here")
    assert p.returncode == 127 and p.stderr.strip().count("\n") == 0 and "no-such-command-here" in p.stderr
    assert "Traceback" not in p.stderr


def test_no_command_prints_the_usage_and_fails():
    p = idle()
    assert p.returncode == 2 and "COMMAND" in p.stdout


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
    under helpers.tools.idle just before nbmake runs the BESIDE_NOTEBOOKS, after the ones that run alone (02's
    workers and 06's ranks use both cores), and are waited for and left out of the unit phase, so each runs once."""
    plan = make_plan()
    assert sorted(executed(plan)) == NOTEBOOKS, executed(plan)
    beside = re.search(r"helpers\.tools\.idle \S+ -m pytest (.*?) > \S+beside-notebooks\.log", plan)
    assert beside, plan
    files = [a for a in beside.group(1).split() if a.startswith("tests/")]
    assert files and all((ROOT / f).exists() for f in files), files
    after = executed(plan[beside.end():])
    assert after and "02_data_pipeline" not in after and "06_distributed" not in after, after
    assert plan.index("wait $beside || rc=1") < plan.index("--dist worksteal tests")  # a failure there fails make test
    unit = plan[plan.index("--dist worksteal tests"):].split(";")[0]
    assert sorted(re.findall(r"--ignore=(\S+)", unit)) == sorted(files)
    # none of them times anything: what they assert does not depend on the CPU they get
    for f in [p for f in files for p in ([ROOT / f] if (ROOT / f).is_file() else sorted((ROOT / f).rglob("*.py")))]:
        text = f.read_text()
        assert "compare_times" not in text and "interleaved_times" not in text and "time.sleep" not in text, f


@needs_make
def test_without_overlap_tests_everything_runs_as_before():
    plan = make_plan("OVERLAP_TESTS=")
    assert executed(plan) == NOTEBOOKS and "helpers.tools.idle" not in plan and "--ignore=" not in plan
