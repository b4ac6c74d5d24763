"""helpers.measure.device."""
import torch

from helpers.measure import device as env


def test_is_cuda_accepts_devices_and_strings():
    assert env.is_cuda(torch.device("cuda", 0)) and env.is_cuda("cuda:1") and env.is_cuda("cuda")
    assert not env.is_cuda(torch.device("cpu")) and not env.is_cuda("cpu") and not env.is_cuda(None)


def test_peak_memory_is_none_on_a_cpu():
    assert env.peak_memory_mb("cpu") is None and env.peak_reserved_mb("cpu") is None
