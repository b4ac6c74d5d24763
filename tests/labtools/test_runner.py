"""labtools.runner (`make run`): no set-up, clean outputs, stopped by SIGTERM / Ctrl-C / its budget, nothing stale.

Tiny notebooks written here run in real kernels (a few seconds each); the notebooks' own runs are nbmake's."""
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from helpers.notebook import env
from labtools import kernel

ROOT = Path(__file__).resolve().parents[2]
CELL = ("import torch\n"
        "from torch.profiler import profile, ProfilerActivity\n"
        "with profile(activities=[ProfilerActivity.CPU]):\n"
        "    (torch.randn(16, 16) @ torch.randn(16, 16)).sum()\n"
        "print('profiled')\n")
RESULTS = ("from helpers.notebook.results import Results\n"
           "R = Results({stem!r}, 'smoke', {{'python': '3', 'torch': 't', 'device': 'cpu', 'cpu_count': 1}})\n"
           "R.record('first', {{}}, lambda: {{'x': 1}})\n")


def notebook(path: Path, *cells: str, ids: bool = True) -> Path:
    nb = {"cells": [{"cell_type": "code", **({"id": f"c{i}"} if ids else {}), "execution_count": None, "metadata": {},
                     "outputs": [], "source": [src]} for i, src in enumerate(cells)],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return path


def run_env(tmp_path: Path, **extra) -> dict:
    e = {k: v for k, v in os.environ.items()
         if k not in ("KINETO_LOG_LEVEL", "PYTHONPATH", "PERF_RESULTS_DIR", "PERF_RUNS_DIR", "PERF_SCALE",
                      "PERF_TIME_BUDGET_S")}
    e.update(extra)
    return e


def runner(tmp_path, *args, wait=True, **extra):
    """``python -m labtools.runner`` from the project folder with no PYTHONPATH (as a user types it), umask 022."""
    cmd = [sys.executable, "-m", "labtools.runner", *map(str, args)]
    kw = dict(env=run_env(tmp_path, **extra), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
              umask=0o022)
    if not wait:
        return subprocess.Popen(cmd, **kw)
    p = subprocess.run(cmd, timeout=600, **kw)
    return p


def test_kernel_manager_provisions_encryption_and_uses_this_python():
    import zmq

    km = kernel.kernel_manager_class()(kernel_name="python3")
    if zmq.has("curve"):
        assert km.transport_encryption == "auto"
    assert km.kernel_spec.argv[0] == sys.executable


def test_errors_are_plain_text():
    assert kernel.plain("\x1b[0;31mValueError\x1b[0m: bad\nTraceback ...") == "ValueError: bad"
    assert kernel.python_path(ROOT, {"PYTHONPATH": f"/kit{os.pathsep}{ROOT}"}) == f"{ROOT}{os.pathsep}/kit"


@pytest.mark.skipif(env.cuda_available(), reason="with a GPU Kineto's errors are kept on purpose")
def test_make_run_output_is_clean_and_needs_no_install(tmp_path):
    """From the project folder with no PYTHONPATH: the kernel imports this checkout's helpers (the runner puts the
    project first on its path), prints no Kineto line and no unencrypted-TCP warning."""
    path = notebook(tmp_path / "tiny.ipynb", CELL, "import helpers\nprint(helpers.__file__)\n")
    p = runner(tmp_path, path, "--out", tmp_path / "results")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "without encryption" not in p.stderr, p.stderr
    executed = json.loads((tmp_path / "results" / "tiny" / "tiny.ipynb").read_text())
    text = "".join("".join(o.get("text", "")) for o in executed["cells"][0]["outputs"])
    assert "profiled" in text
    assert "gpuGetDeviceCount" not in text and "profiler_start" not in text, text
    assert "gpuGetDeviceCount" not in p.stderr and "profiler_start" not in p.stderr, p.stderr
    where = "".join(executed["cells"][1]["outputs"][0]["text"]).strip()
    assert Path(where).resolve() == (ROOT / "helpers" / "__init__.py").resolve()
    info = json.loads((tmp_path / "results" / "tiny" / "run.json").read_text())
    assert info["status"] == "ok" and info["scale"] == "smoke"
    assert (tmp_path / "results" / "tiny.tar.gz").exists() and (tmp_path / "results" / "run-summary.json").exists()


def test_runner_kernels_draw_figures_inline(monkeypatch):
    from labtools import headless as rn

    monkeypatch.setenv("MPLBACKEND", "Agg")
    assert rn.inline_figures() and "MPLBACKEND" not in os.environ
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    assert not rn.inline_figures() and os.environ["MPLBACKEND"].startswith("module://")


def _interrupted_run(tmp_path, popen_cmd, signum):
    """Notebook a saves a row, then blocks in its second cell; notebook b must never start."""
    out = tmp_path / "out"
    marker = tmp_path / "started"
    a = notebook(tmp_path / "a.ipynb", RESULTS.format(stem="a"),
                 f"import os, pathlib, time\npathlib.Path({str(marker)!r}).write_text(str(os.getpid()))\n"
                 "time.sleep(300)\n",
                 "R.record('never', {}, lambda: {'x': 2})\n")
    b = notebook(tmp_path / "b.ipynb", "print('b ran')\n")
    proc = popen_cmd(out, a, b)
    deadline = time.time() + 240
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "notebook a never reached its second cell"
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    return proc, out, int(marker.read_text()), stdout + stderr


def _check_interrupted(out: Path, kernel_pid: int, signame: str, log: str):
    doc = json.loads((out / "a" / "results.json").read_text())
    assert doc["interrupted"] is True and signame in doc["interruption"], doc
    assert [e["name"] for e in doc["experiments"]] == ["first"]  # saved up to the interruption, nothing after
    info = json.loads((out / "a" / "run.json").read_text())
    assert info["status"] == "interrupted" and "\x1b" not in info["error"] and signame in info["error"], info
    assert info["error"].startswith("cell 1: stopped")
    summary = json.loads((out / "run-summary.json").read_text())
    assert summary["interrupted"] and summary["signal"] == signame and summary["not_run"] == ["b"], summary
    assert not (out / "b").exists() and "b ran" not in log
    assert (out / "a.tar.gz").exists()
    for f in ("results.json", "run.json", "a.ipynb"):
        assert (out / "a" / f).stat().st_mode & 0o777 == 0o644, f
    assert (out / "a.tar.gz").stat().st_mode & 0o777 == 0o644
    with pytest.raises(ProcessLookupError):  # the kernel is gone, not left running
        for _ in range(50):
            os.kill(kernel_pid, 0)
            time.sleep(0.2)


def test_sigterm_to_make_run_stops_the_whole_run(tmp_path):
    def start(out, a, b):
        args = f"--out {out} {a} {b}"
        return subprocess.Popen(["make", "-s", "--no-print-directory", "run", "SETUP=", f"RUN_PYTHON={sys.executable}",
                                 f"RUN_ARGS={args}"], cwd=ROOT, env=run_env(tmp_path), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, umask=0o022)

    proc, out, pid, log = _interrupted_run(tmp_path, start, signal.SIGTERM)
    assert proc.returncode != 0, log
    _check_interrupted(out, pid, "SIGTERM", log)


def test_ctrl_c_stops_the_run_with_status_130(tmp_path):
    proc, out, pid, log = _interrupted_run(
        tmp_path, lambda out, a, b: runner(tmp_path, "--out", out, a, b, wait=False), signal.SIGINT)
    assert proc.returncode == 130, log
    _check_interrupted(out, pid, "SIGINT", log)


def test_a_notebook_failing_before_its_results_leaves_no_stale_results(tmp_path):
    out = tmp_path / "out"
    (out / "a").mkdir(parents=True)
    (out / "a" / "results.json").write_text('{"old": true}\n')
    a = notebook(tmp_path / "a.ipynb", "raise ValueError('PERF_SCALE is wrong')\n", RESULTS.format(stem="a"), ids=False)
    p = runner(tmp_path, "--out", out, a)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "MissingIDField" not in p.stderr  # cells without ids get one in the executed copy
    assert all(c["id"] for c in json.loads((out / "a" / "a.ipynb").read_text())["cells"])
    assert not (out / "a" / "results.json").exists()
    assert json.loads((out / "a.previous" / "results.json").read_text()) == {"old": True}
    info = json.loads((out / "a" / "run.json").read_text())
    assert info["status"] == "failed" and info["error"] == "cell 0: ValueError: PERF_SCALE is wrong", info


def test_a_bogus_scale_is_refused_before_anything_runs(tmp_path):
    out = tmp_path / "out"
    (out / "a").mkdir(parents=True)
    (out / "a" / "results.json").write_text('{"old": true}\n')
    a = notebook(tmp_path / "a.ipynb", RESULTS.format(stem="a"))
    for args, extra in (((), {"PERF_SCALE": "bogus"}), (("--scale", "bogus"), {})):
        p = runner(tmp_path, "--out", out, *args, a, **extra)
        assert p.returncode == 2 and "bogus" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert sorted(x.name for x in out.iterdir()) == ["a"]  # nothing ran, nothing replaced
        assert sorted(x.name for x in (out / "a").iterdir()) == ["results.json"]


def test_budgets_guard_inside_and_stop_from_outside(tmp_path):
    """--budget 40 (kernel start-up counts, and g prints it: up to 7 s measured on this 2-core machine under a load of
    6, but more than 17 s once in a full make test, where this test starts beside both browser tests; a grace of 10 s,
    as 2 s once ended g between its stopped row and the next): notebook g's own guard (helpers.notebook.budget, SIGALRM in the kernel) stops its slow experiment and skips
    the next, and the notebook finishes; notebook h has no guard and is stopped by the runner at budget + grace, its
    results marked interrupted; notebook i still runs. g runs in a runner of its own beside the runner of h and i
    (each waits out its budget: one after the other they took ~100 s of make test's unit phase)."""
    out, out_g = tmp_path / "out", tmp_path / "out-g"
    guard = ("import time\nfrom helpers.notebook import budget\n"
             "B = budget.Budget.from_env(None, reserve_s=0.5)\n"
             "print(B.seconds, f'{B.elapsed():.1f} s used before the guard')\n"
             "R.record('slow', {}, lambda: time.sleep(120), budget=B)\n"
             "R.record('next', {}, lambda: {'x': 3}, budget=B)\n"
             "R.check('went_on', True)\n")
    g = notebook(tmp_path / "g.ipynb", RESULTS.format(stem="g"), guard)
    h = notebook(tmp_path / "h.ipynb", RESULTS.format(stem="h"), "import time\ntime.sleep(120)\n")
    i = notebook(tmp_path / "i.ipynb", "print('i ran')\n")
    t0 = time.time()
    pg = runner(tmp_path, "--out", out_g, "--budget", "40", "--grace", "10", g, wait=False)
    p = runner(tmp_path, "--out", out, "--budget", "40", "--grace", "10", h, i)
    g_out, g_err = pg.communicate(timeout=600)
    assert p.returncode == 1, p.stdout + p.stderr
    assert pg.returncode == 0, g_out + g_err
    assert time.time() - t0 < 200
    doc = json.loads((out_g / "g" / "results.json").read_text())
    rows = {e["name"]: e for e in doc["experiments"]}
    assert "slow" in rows, f"g did not reach its slow experiment within the budget: {rows}; {g_out[-2000:]}"
    assert rows["slow"]["error"].startswith("OverBudget: stopped: over the time budget"), rows
    assert rows["next"]["error"].startswith("OverBudget: skipped:"), rows
    assert doc["checks"] == {"went_on": True} and "interrupted" not in doc
    assert json.loads((out_g / "g" / "run.json").read_text())["status"] == "ok"
    info = json.loads((out / "h" / "run.json").read_text())
    assert info["status"] == "interrupted" and "time limit of 50 s" in info["error"], info
    assert json.loads((out / "h" / "results.json").read_text())["interrupted"] is True
    assert json.loads((out / "i" / "run.json").read_text())["status"] == "ok"
    summary = json.loads((out / "run-summary.json").read_text())
    assert [n["notebook"] for n in summary["notebooks"]] == ["h", "i"] and not summary["interrupted"]
    with tarfile.open(out_g / "g.tar.gz") as tar:
        names = tar.getnames()
    assert {"g/results.json", "g/run.json", "g/g.ipynb", "g/pack.json"} <= set(names), names
