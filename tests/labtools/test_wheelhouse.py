"""helpers.wheelhouse: the target's platform tags, what is left out, and the build backend it brings along."""
import subprocess
import sys

from labtools import wheelhouse as wh


def test_manylinux_tag_covers_older_glibc_wheels():
    tags = wh.expand_platform("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64"
    # matplotlib, pandas etc. ship manylinux_2_17 / manylinux2014 wheels that a 2_28 machine runs
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert not any(t.startswith("manylinux_2_29") for t in tags)
    assert wh.expand_platform("macosx_14_0_arm64") == ["macosx_14_0_arm64"]


def test_target_args():
    assert wh.target_args(None, None) == ["--only-binary=:all:"]
    args = wh.target_args("3.12", ["manylinux_2_17_aarch64"])
    assert args[:5] == ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    assert "manylinux2014_aarch64" in args


def test_leaving_out_torch_leaves_out_its_cuda_wheels():
    pats = wh.excluded_names(["torch", "torchvision"])
    for name in ("torch", "torchvision", "nvidia-cublas", "nvidia_cudnn_cu13", "cuda-bindings", "triton"):
        assert wh.is_excluded(name, pats), name
    for name in ("timm", "torch-tb-profiler", "numpy", "jupyterlab", "traceinsight"):
        assert not wh.is_excluded(name, pats), name
    assert wh.excluded_names([]) == []


def test_build_backend_goes_into_the_wheelhouse():
    assert any(r.startswith("setuptools") for r in wh.build_requires())


def test_cli_help_names_the_gpu_options():
    out = subprocess.run([sys.executable, "-m", "labtools.wheelhouse", "--help"], capture_output=True, text=True,
                         cwd=wh.ROOT, check=True).stdout
    for opt in ("--python-version", "--platform", "--exclude", "--gpu-machine", "--dest"):
        assert opt in out
