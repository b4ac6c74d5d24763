"""env.quiet_logs silences Kineto's log lines at their source ($KINETO_LOG_LEVEL), and only when unset."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.notebook import env

ROOT = Path(__file__).resolve().parents[2]
KINETO_NOISE = ("gpuGetDeviceCount failed", "] profiler_start", "] profiler_stop")
PROFILE = """
import torch
from torch.profiler import profile, ProfilerActivity
x = torch.randn(32, 32)
with profile(activities=[ProfilerActivity.CPU]):
    (x @ x).sum()
print("profiled")
"""


def _profile_stderr(prelude: str, extra_env: dict) -> str:
    e = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    e.update(extra_env, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", prelude + PROFILE], env=e, capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert p.returncode == 0 and "profiled" in p.stdout, p.stderr[-2000:]
    return p.stderr


def test_level_policy():
    assert env.kineto_log_level(cuda=False) == 6  # above every Kineto severity: silent
    assert env.kineto_log_level(cuda=True) == 4   # Kineto's errors (CUPTI) stay visible on a GPU


def test_quiet_logs_respects_an_explicit_setting(monkeypatch):
    monkeypatch.setenv("KINETO_LOG_LEVEL", "0")
    assert env.quiet_logs(cuda=False) == {}
    assert os.environ["KINETO_LOG_LEVEL"] == "0"
    monkeypatch.delenv("KINETO_LOG_LEVEL")
    assert env.quiet_logs(cuda=False) == {"KINETO_LOG_LEVEL": "6"}
    assert os.environ["KINETO_LOG_LEVEL"] == "6"


@pytest.mark.skipif(env.cuda_available(), reason="CPU-only policy: with a GPU Kineto's errors are kept")
def test_a_cpu_profile_after_quiet_logs_prints_no_kineto_lines():
    """Called after `import torch` (as in a set-up cell), before the first profile: Kineto reads it then.
    (Without it this torch 2.14.1 build prints all three lines on a CPU; test_runner and
    test_executed_notebooks check the same in kernels.)"""
    quiet = _profile_stderr("import torch\nfrom helpers.notebook import env\nenv.quiet_logs()\n", {})
    assert not [n for n in KINETO_NOISE if n in quiet], quiet[-2000:]


# torch 2.11.0's text, verbatim (torch/profiler/profiler.py), and the fixed releases' text (pytorch/pytorch#180387)
SPURIOUS_211 = ("Warning: Profiler clears events at the end of each cycle.Only events from the current cycle will be "
                "reported.To keep events across cycles, set acc_events=True.")
MEANINGFUL = ("Warning: Profiler clears events at the end of each cycle. Only events from the current cycle will be "
              "reported. To keep events across cycles, set acc_events=True.")


def test_quiet_logs_silences_only_torch_211s_spurious_profiler_warning(monkeypatch):
    import warnings

    monkeypatch.setenv("KINETO_LOG_LEVEL", "0")  # set already: quiet_logs still installs the warning filter
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.quiet_logs(cuda=False)
        warnings.warn(SPURIOUS_211, UserWarning)
        warnings.warn(MEANINGFUL, UserWarning)
        warnings.warn("another UserWarning", UserWarning)
    assert [str(w.message) for w in caught] == [MEANINGFUL, "another UserWarning"]


def test_profile_steps_silences_it_without_quiet_logs():
    """A script that never calls quiet_logs: profile_steps installs the filter itself (checked on the filter list,
    since the torch installed here may not emit the warning)."""
    code = ("import warnings\nfrom helpers.measure import profiling\n"
            "profiling.profile_steps(lambda: None, wait=0, warmup=0, active=1)\n"
            "from helpers.notebook import env\n"
            "print(any(f[1] is not None and f[1].pattern == env.SPURIOUS_PROFILER_WARNING for f in warnings.filters))\n")
    e = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    e.update(PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "True"


def test_the_cpp_extension_loaders_cuda_home_warning_is_kept_out():
    import logging

    from helpers.notebook import env

    logger = logging.getLogger("torch.utils.cpp_extension")
    before = logger.level
    try:
        logger.setLevel(logging.NOTSET)
        env.quiet_logs()
        assert not logger.isEnabledFor(logging.WARNING)
    finally:
        logger.setLevel(before)
