import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.notebook import env


def test_scale_explicit_and_env(monkeypatch):
    assert env.get_scale("smoke") == "smoke"
    assert env.get_scale("FULL") == "full"
    monkeypatch.setenv("PERF_SCALE", "smoke")
    assert env.get_scale() == "smoke"


def test_scale_default_follows_cuda(monkeypatch):
    monkeypatch.delenv("PERF_SCALE", raising=False)
    assert env.get_scale() == ("full" if torch.cuda.is_available() else "smoke")


def test_bad_scale_is_refused_clearly(monkeypatch):
    monkeypatch.setenv("PERF_SCALE", "huge")
    with pytest.raises(ValueError, match="PERF_SCALE='huge'.*smoke, full"):
        env.get_scale()


def test_params_picks_row_and_adds_scale():
    p = env.params({"smoke": {"a": 1}, "full": {"a": 2}}, scale="full")
    assert p == {"a": 2, "scale": "full"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_requested_without_gpu_says_so():
    with pytest.raises(RuntimeError, match="no usable GPU"):
        env.get_device("cuda")


def test_deterministic_restores_state():
    before = torch.are_deterministic_algorithms_enabled()
    with env.deterministic(True):
        assert torch.are_deterministic_algorithms_enabled()
    assert torch.are_deterministic_algorithms_enabled() == before


def test_seed_makes_randn_repeat():
    env.seed_everything(3)
    a = torch.randn(4)
    env.seed_everything(3)
    assert torch.equal(a, torch.randn(4))


def test_env_info_has_contract_keys():
    info = env.env_info()
    for k in ("python", "torch", "device", "cpu_count"):
        assert k in info
    line = env.env_summary()
    assert "torch " + torch.__version__ in line and "scale" in line


def test_runs_dir_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("PERF_RUNS_DIR", str(tmp_path))
    assert env.runs_dir() == tmp_path


def test_project_root_is_the_checkout_from_any_folder(tmp_path, monkeypatch):
    root = Path(env.__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)  # e.g. a notebook copy under build/test/notebooks
    assert env.project_root() == root and (env.project_root() / "data" / "images").is_dir()


def test_setup_prints_the_summary_and_names_the_device(capsys, monkeypatch):
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    device, on_gpu = env.setup(prefer="cpu")
    assert device.type == "cpu" and on_gpu is False and os.environ["KINETO_LOG_LEVEL"]
    assert "device cpu" in capsys.readouterr().out


def _fresh_python(code: str) -> list[str]:
    """The stdout lines of ``code`` run in a new Python process from the project folder (what it imports is its own)."""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def test_versions_are_read_without_importing_the_packages(tmp_path):
    """env_info's torchvision and timm versions are their ``__version__`` (torchvision's with its build, as
    ``0.29.1+cu130``), read without importing them in a process that has not (importing them costs ~3 s), and None
    for a package that is not installed."""
    code = ("import sys\nfrom helpers.notebook import env\ni = env.env_info()\n"
            "print(i['torchvision'], i['timm'], 'torchvision' in sys.modules, 'timm' in sys.modules, "
            "env.package_version('no_such_package_here'))\n"
            "import torchvision, timm\nprint(torchvision.__version__, timm.__version__)")
    read, imported = _fresh_python(code)[-2:]
    tv, tm, tv_in, tm_in, missing = read.split()
    assert (tv_in, tm_in, missing) == ("False", "False", "None")
    assert f"{tv} {tm}" == imported


def test_cuda_available_without_a_driver_needs_no_torch(tmp_path):
    """No GPU driver on the machine: False without importing torch (in a process that has not), and the same answer
    torch gives. With a driver path present (or torch already imported) it is torch's own answer."""
    code = ("import sys\nfrom helpers.notebook import env\nno_driver = env.no_gpu_driver()\n"
            "a = env.cuda_available()\nprint(no_driver, a, 'torch' in sys.modules)\n"
            "import torch\nprint(torch.cuda.is_available())")
    first, torch_says = _fresh_python(code)[-2:]
    no_driver, answer, imported = first.split()
    assert answer == torch_says
    if no_driver == "True":
        assert imported == "False"
    assert env.no_gpu_driver(()) and env.no_gpu_driver((str(tmp_path / "none"),))
    assert not env.no_gpu_driver((str(tmp_path),))   # a path that exists: a driver, so torch is asked
    assert env.cuda_available() == torch.cuda.is_available()   # torch imported here: its own answer
