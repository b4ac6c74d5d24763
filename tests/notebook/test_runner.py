"""helpers.runner (`make run`): executed copies without Kineto lines, kernels without the unencrypted-TCP warning."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.notebook import env, runner

ROOT = Path(__file__).resolve().parents[2]
CELL = ("import torch\n"
        "from torch.profiler import profile, ProfilerActivity\n"
        "with profile(activities=[ProfilerActivity.CPU]):\n"
        "    (torch.randn(16, 16) @ torch.randn(16, 16)).sum()\n"
        "print('profiled')\n")


def test_kernel_manager_provisions_encryption_when_it_can():
    import zmq

    km = runner.kernel_manager_class()(kernel_name="python3")
    if zmq.has("curve"):
        assert km.transport_encryption == "auto"


@pytest.mark.skipif(env.cuda_available(), reason="with a GPU Kineto's errors are kept on purpose")
def test_make_run_output_is_clean(tmp_path):
    nb = {"cells": [{"cell_type": "code", "id": "c1", "execution_count": None, "metadata": {}, "outputs": [],
                     "source": [CELL]}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "tiny.ipynb"
    path.write_text(json.dumps(nb))
    e = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    e.update(PERF_RESULTS_DIR=str(tmp_path / "results"), PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "helpers.runner", str(path)], env=e, cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "without encryption" not in p.stderr, p.stderr
    executed = json.loads((tmp_path / "results" / "tiny" / "tiny.ipynb").read_text())
    text = "".join("".join(o.get("text", "")) for o in executed["cells"][0]["outputs"])
    assert "profiled" in text
    assert "gpuGetDeviceCount" not in text and "profiler_start" not in text, text
    assert "gpuGetDeviceCount" not in p.stderr and "profiler_start" not in p.stderr, p.stderr


def test_runner_kernels_draw_figures_inline(monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    assert runner.inline_figures() and "MPLBACKEND" not in os.environ
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    assert not runner.inline_figures() and os.environ["MPLBACKEND"].startswith("module://")
