import os
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
    with pytest.raises(KeyError):
        env.params({"smoke": {}}, scale="smoke")


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
