"""The runner never hangs on a signal (issue 33): a SIGTERM before, during and right after a kernel's start, and
during packing, ends the run with its status, run.json and run-summary.json, and no traceback. The stress command
(``python -m benchmarks.signal_stress``) tries 40 moments by hand; these are the targeted cases."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from labtools import headless as rn
from benchmarks import signal_stress

from tests.labtools.test_runner import RESULTS, ROOT, notebook, run_env

SLOW_PACK = """
import sys, time
from labtools import headless as runner, pack
real = pack.pack
def slow(*a, **kw):
    print("<pack starts>", flush=True)
    time.sleep(4)
    return real(*a, **kw)
pack.pack = slow
sys.argv = ["labtools.runner", *sys.argv[1:]]
sys.exit(runner.main())
"""


def _start(tmp_path, *args, script=None):
    """The runner with its kernels' temporary files (the connection file among them) and Jupyter's runtime folder in
    ``tmp_path/tmp``, where ``signal_stress.leftovers`` looks."""
    cmd = [sys.executable, "-c", script, *map(str, args)] if script else \
        [sys.executable, "-m", "labtools.runner", *map(str, args)]
    tag = f"runner-signals-{os.getpid()}-{time.time_ns()}"
    (tmp_path / "tmp").mkdir()
    env = run_env(tmp_path, **{signal_stress.TAG_ENV: tag, "TMPDIR": str(tmp_path / "tmp"),
                               "JUPYTER_RUNTIME_DIR": str(tmp_path / "tmp")})
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    return proc, tag


def _signal_after(proc, text: str, delay: float, signum=signal.SIGTERM) -> str:
    """Read the runner's stdout until a line holds ``text``, wait ``delay`` s, signal its process group."""
    seen = []
    deadline = time.time() + 240
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            break
        assert time.time() < deadline, "".join(seen)
    time.sleep(delay)
    os.killpg(proc.pid, signum)
    return "".join(seen)


def _ended(proc, tag, out: Path, seen: str):
    t0 = time.time()
    stdout, stderr = proc.communicate(timeout=60)
    took = time.time() - t0
    time.sleep(0.3)
    assert not signal_stress.tagged_processes(tag), "a kernel was left running"
    assert "Traceback" not in stderr, stderr
    assert took < 30, f"the run took {took:.1f} s to end after the signal"
    summary = json.loads((out / "run-summary.json").read_text())
    return summary, seen + stdout, stderr


def test_a_signal_before_any_notebook_starts_writes_the_summary(tmp_path, capsys):
    a = notebook(tmp_path / "a.ipynb", "print('a ran')\n")
    out = tmp_path / "out"
    rc = rn.main(["--out", str(out), str(a)], early_signals=[signal.SIGTERM])
    assert rc == 143
    summary = json.loads((out / "run-summary.json").read_text())
    assert summary["interrupted"] and summary["signal"] == "SIGTERM" and summary["not_run"] == ["a"]
    assert not (out / "a").exists()
    assert "stopped by SIGTERM" in capsys.readouterr().err


def test_sigterm_while_the_kernel_starts(tmp_path):
    out = tmp_path / "out"
    a = notebook(tmp_path / "a.ipynb", "print('a ran')\n")
    b = notebook(tmp_path / "b.ipynb", "print('b ran')\n")
    proc, tag = _start(tmp_path, "--out", out, a, b)
    seen = _signal_after(proc, "running", 0.15)
    summary, log, stderr = _ended(proc, tag, out, seen)
    assert proc.returncode in (0, 143), stderr
    if proc.returncode == 143:
        assert summary["interrupted"] and "b" in summary["not_run"]
        assert json.loads((out / "a" / "run.json").read_text())["status"] in ("interrupted", "ok")
    assert "b ran" not in log


def test_sigterm_while_packing_ends_after_the_pack(tmp_path):
    out = tmp_path / "out"
    a = notebook(tmp_path / "a.ipynb", "print('a ran')\n")
    b = notebook(tmp_path / "b.ipynb", "print('b ran')\n")
    proc, tag = _start(tmp_path, "--out", out, a, b, script=SLOW_PACK)
    seen = _signal_after(proc, "<pack starts>", 0.5)
    summary, log, stderr = _ended(proc, tag, out, seen)
    assert proc.returncode == 143, stderr
    assert json.loads((out / "a" / "run.json").read_text())["status"] == "ok"
    assert (out / "a.tar.gz").exists() and summary["not_run"] == ["b"] and summary["signal"] == "SIGTERM"


ABANDON = """
import sys, threading, time
from pathlib import Path
from labtools import headless as runner
run = runner.Run(abandon_s=1.0)
class Stuck:  # a notebook whose wait never returns, whatever is signalled
    client = None
    def stop(self, reason): pass
    def _signal_kernel(self, signum): pass
run.current = Stuck()
run.finish = lambda reason: Path(sys.argv[1]).write_text(reason)
run.on_signal(15)
time.sleep(60)
"""


def test_a_run_that_does_not_end_after_a_signal_is_abandoned_with_what_it_has(tmp_path):
    marker = tmp_path / "finished"
    t0 = time.time()
    p = subprocess.run([sys.executable, "-c", ABANDON, str(marker)], cwd=ROOT, env=run_env(tmp_path),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 143 and time.time() - t0 < 30
    assert "abandoned" in marker.read_text()
    assert p.stderr.strip().count("\n") == 0 and "abandoned" in p.stderr and "Traceback" not in p.stderr


def test_sigterm_with_a_kernel_that_ignores_sigint_ends_by_the_normal_path(tmp_path):
    """The kernel ignores its SIGINT and is killed 10 s later, a zombie until reaped: the run sees it dead and ends
    as usual (with the blocking kernel manager it waited for the kernel's output until the watchdog abandoned it)."""
    out, marker = tmp_path / "out", tmp_path / "deaf"
    a = notebook(tmp_path / "a.ipynb", RESULTS.format(stem="a"),
                 "import pathlib, signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                 f"pathlib.Path({str(marker)!r}).write_text('SIGINT ignored')\ntime.sleep(120)\n")
    b = notebook(tmp_path / "b.ipynb", "print('b ran')\n")
    proc, tag = _start(tmp_path, "--out", out, a, b)
    deadline = time.time() + 240
    while not marker.exists():
        assert proc.poll() is None and time.time() < deadline, "notebook a never reached its second cell"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGTERM)
    summary, log, stderr = _ended(proc, tag, out, "")
    assert proc.returncode == 143, stderr
    assert "abandoned" not in summary and "abandoned" not in stderr, summary
    assert summary["not_run"] == ["b"] and [n["status"] for n in summary["notebooks"]] == ["interrupted"]
    assert signal_stress.leftovers(out, summary) == []  # run.json, pack, results.json interrupted, no connection file


def test_a_kernel_killed_mid_cell_fails_its_notebook_and_the_run_goes_on(tmp_path):
    """No signal to the runner: the kernel is killed -9 inside a cell. The notebook fails (the kernel died), its
    connection file is removed, the next notebook runs (the blocking kernel manager waited for ever)."""
    out = tmp_path / "out"
    a = notebook(tmp_path / "a.ipynb", RESULTS.format(stem="a"), "import os\nos.kill(os.getpid(), 9)\n",
                 "print('after')\n")
    b = notebook(tmp_path / "b.ipynb", "print('b ran')\n")
    proc, tag = _start(tmp_path, "--out", out, a, b)
    try:
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, stdout + stderr
    summary = json.loads((out / "run-summary.json").read_text())
    assert [n["status"] for n in summary["notebooks"]] == ["failed", "ok"], summary
    assert summary["notebooks"][0]["error"].startswith("cell 1: the kernel died"), summary
    assert signal_stress.leftovers(out, summary) == [f"a failed: {summary['notebooks'][0]['error']}"]
    assert not signal_stress.tagged_processes(tag) and "Traceback" not in stderr
