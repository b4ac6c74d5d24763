"""helpers.notebook.tensorboard against a real TensorBoard on 127.0.0.1 (one logged experiment, one profiler trace)."""
import os
from pathlib import Path

import pytest

from helpers.measure import profiling
from helpers.notebook import tensorboard as tb


def _tiny_step():
    import torch

    x = torch.randn(32, 32)
    return lambda: (x @ x).relu_().sum()


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tb_runs")
    tb.log_experiment("nb", "exp", {"batch_size": 8, "precision": "fp32", "note": None},
                      {"step_ms_median": 1.5, "samples_per_s": 5000.0, "top_op": "aten::mm"},
                      step_times_ms=[1.0, 2.0, 1.5], losses=[0.9, 0.8, 0.7], batch_size=8, root=root / "nb")
    trace_dir = root / "traces" / "tiny"
    profiling.profile_steps(_tiny_step(), wait=0, warmup=1, active=1, trace_dir=trace_dir)
    assert len(profiling.trace_files(trace_dir)) == 1
    return root


@pytest.fixture(scope="module")
def server(logdir):
    status = tb.start(logdir, timeout_s=120)
    try:
        assert status.answered, status.message
        yield status
    finally:
        tb.stop_started()
    assert tb.served_logdir(status.port) is None, "the server was not stopped"


def test_importing_changes_nothing_and_prepare_points_at_this_environments_tensorboard():
    """The package has no import-time side effects: ``prepare()`` (the notebooks' TensorBoard cell) is what sets
    ``$TENSORBOARD_BINARY``, without which the %tensorboard magic would look for `tensorboard` on $PATH."""
    import subprocess
    import sys

    code = ("import atexit, os; import helpers.notebook.tensorboard as tb; before = os.environ.get('TENSORBOARD_BINARY'); "
            "tb.prepare(0); print(before, os.environ.get('TENSORBOARD_BINARY'), sep='|')")
    env = {k: v for k, v in os.environ.items() if k != "TENSORBOARD_BINARY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    before, after = out.stdout.strip().split("|")
    assert before == "None" and after and Path(after).exists(), out.stderr[-500:]


def test_scalars_and_hparams_are_served(server):
    runs = tb.scalar_runs(server.port)
    assert "nb/exp-0" in runs, runs
    tags = tb.api(server.port, "/data/plugin/scalars/tags")
    assert {"step/time_ms", "step/samples_per_s", "train/loss"} <= set(tags["nb/exp-0"]), tags
    listing = tb.api(server.port, "/data/plugins_listing")
    assert listing["hparams"]["enabled"] and listing["scalars"]["enabled"]
    assert tb.served_logdir(server.port) == str(server.logdir)


def test_profiler_plugin_lists_the_run_and_its_views(server):
    runs = tb.profiler_runs(server.port, timeout_s=120)
    assert list(runs) == ["traces/tiny"], runs
    assert "Overview" in runs["traces/tiny"], runs


def test_stop_leaves_servers_it_did_not_start_alone():
    assert tb.stop(os.getppid()) is False


def test_inline_starts_checks_and_is_stopped(logdir, capsys):
    status = tb.inline(logdir, preferred=0, timeout_s=120)
    try:
        assert status.answered and tb.served_logdir(status.port) is not None, status.message
    finally:
        tb.stop_started()
    assert tb.served_logdir(status.port) is None


def test_the_inline_frame_opens_on_this_notebooks_runs(tmp_path, monkeypatch):
    """Issue 33: the frame lists this notebook's runs only (TensorBoard's ``runFilter`` deep link), not the other
    notebooks' first, and opens on the dashboard the text names."""
    import urllib.parse

    path = tb.frame_path("04_torch_compile", "hparams")
    query, _, dash = path[2:].partition("#")
    assert path.startswith("/?") and dash == "hparams"
    assert urllib.parse.parse_qs(query) == {"runFilter": ["^(04_torch_compile)/"]}
    assert tb.frame_path(None, None) == "/" and tb.frame_path("a|b.c").endswith("%28a%7Cb%5C.c%29%2F")
    monkeypatch.setattr(tb, "_logged", [])
    for name in ("02_data_pipeline", "03_backward_hooks"):
        (tmp_path / name).mkdir()
        os.utime(tmp_path / name, (1, 1) if name.startswith("02") else None)
    assert tb.own_runs(tmp_path) == "03_backward_hooks"   # no experiment logged: the folder written last
    tb.log_experiment("04_torch_compile", "exp", {"x": 1}, {"m": 1.0}, root=tmp_path / "04_torch_compile")
    assert tb.own_runs(tmp_path) == "04_torch_compile" and tb.own_runs(tmp_path / "none") == "04_torch_compile"
    monkeypatch.setattr(tb, "_logged", [])
    assert tb.own_runs(tmp_path / "none") is None
    html = tb._FRAME.format(id="tensorboard-frame-1", jid='"tensorboard-frame-1"', height=800, port=6006,
                            path='"' + path + '"')
    assert 'id="tensorboard-frame-1"' in html and "url.port = 6006" in html and path in html


def test_a_notebooks_own_logdir_holds_its_runs_under_their_own_names(tmp_path, monkeypatch):
    """Issue 43: a notebook's runs in a folder of their own (``notebook_logdir``), served alone: the HParams table,
    which ``runFilter`` does not reach, lists no other notebook's runs, and a run is named ``<cell>-0``, not
    ``<notebook>/<cell>-0`` (which TensorBoard's run columns cut to the notebook's name); the frame needs no filter."""
    monkeypatch.setenv("PERF_RUNS_DIR", str(tmp_path))
    monkeypatch.setattr(tb, "_logged", [])
    folder = tb.notebook_logdir("04_torch_compile")
    assert folder == tmp_path / "tensorboard_04" and folder.is_dir()
    run = tb.log_experiment("04_torch_compile", "gated_mlp fp32 eager bs=256", {"x": 1}, {"m": 1.0}, root=folder)
    assert run.parent == folder and run.name == "gated_mlp_fp32_eager_bs_256-0"
    assert tb.own_runs(folder) is None and tb.frame_path(tb.own_runs(folder), "hparams") == "/#hparams"
    assert tb.notebook_logdir("04_torch_compile", clear=True) == folder and not any(folder.iterdir())
