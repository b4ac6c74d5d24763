"""Where am I running? Device, scale, seeding, determinism and a one-line summary (every set-up cell)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import platform
import random
import re
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping

from ..measure.device import is_cuda
from ..project import (  # noqa: F401 (re-exported: env.runs_dir() in the notebooks)
    SPURIOUS_PROFILER_WARNING,
    project_root,
    quiet_profiler_warning,
    runs_dir,
)

SCALES = ("smoke", "full")
SCALE_ENV = "PERF_SCALE"
SIZES_ENV = "PERF_SIZES"


# Where a GPU driver shows itself: NVIDIA's /proc entry and device files, WSL 2's GPU device, ROCm's kernel driver
GPU_DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/dev/kfd")


def no_gpu_driver(paths: tuple[str, ...] = GPU_DRIVER_PATHS) -> bool:
    """True when none of ``paths`` exists: this machine has no GPU driver that torch could use."""
    return not any(os.path.exists(p) for p in paths)


def cuda_available() -> bool:
    """``torch.cuda.is_available()``, without importing torch (~3 s) where it is not imported yet and the machine has
    no GPU driver at all (``no_gpu_driver``)."""
    if "torch" not in sys.modules and no_gpu_driver():
        return False
    import torch

    return torch.cuda.is_available()


def get_device(prefer: str | None = None):
    """The device experiments run on: ``prefer``, else ``cuda`` when present, else ``cpu``. ``prefer="cuda"`` without
    a GPU raises a ``RuntimeError`` that says so, instead of failing deep inside CUDA."""
    import torch

    if prefer is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(prefer)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            "A CUDA device was asked for, but this machine has no usable GPU "
            "(torch.cuda.is_available() is False). Run on the CPU instead (smoke scale)."
        )
    return dev


def get_scale(value: str | None = None) -> str:
    """The run's scale, ``smoke`` (minutes on a CPU) or ``full`` (the articles' sizes on a GPU): ``value``, else
    ``$PERF_SCALE``, else ``full`` when CUDA is available and ``smoke`` otherwise."""
    raw = (value if value is not None else os.environ.get(SCALE_ENV, "")).strip().lower()
    if not raw:
        return "full" if cuda_available() else "smoke"
    if raw not in SCALES:
        raise ValueError(
            f"{SCALE_ENV}={raw!r} is not a scale this package knows; use one of {', '.join(SCALES)}."
        )
    return raw


def params(
    sizes: Mapping[str, Mapping[str, Any]],
    scale: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A notebook's sizes for the current scale from ``{"smoke": {...}, "full": {...}}``. ``$PERF_SIZES`` (a JSON
    object, e.g. ``{"rounds": 2}``) overrides some, for a test that needs the notebook to run, not its numbers (the
    browser test); the keys it changed are listed under ``"overrides"``. An unknown key or a non-object is refused."""
    s = get_scale(scale)
    out = dict(sizes[s])
    raw = (os.environ if environ is None else environ).get(SIZES_ENV, "").strip()
    if raw:
        try:
            extra = json.loads(raw)
        except ValueError:
            extra = None
        if not isinstance(extra, dict):
            raise ValueError(
                f"{SIZES_ENV}={raw!r} is not a JSON object of sizes, e.g. '{{\"rounds\": 2}}'"
            )
        unknown = sorted(set(extra) - set(out))
        if unknown:
            raise ValueError(
                f"{SIZES_ENV}: {', '.join(map(repr, unknown))} not among this notebook's sizes "
                f"({', '.join(out)})"
            )
        out.update(extra)
        out["overrides"] = sorted(extra)
    out["scale"] = s
    return out


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch (all devices)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@contextlib.contextmanager
def deterministic(enabled: bool = True, warn_only: bool = False) -> Iterator[None]:
    """Run a block with ``torch.use_deterministic_algorithms(enabled)``, then restore; sets
    ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` while enabled, as cuBLAS requires for deterministic results on CUDA."""
    import torch

    was = torch.are_deterministic_algorithms_enabled()
    was_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    old_cfg = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if enabled:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=was_warn)
        if old_cfg is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = old_cfg


def device_name(device=None) -> str:
    import torch

    dev = device if device is not None else get_device()
    if is_cuda(dev):
        return torch.cuda.get_device_name(dev)
    return platform.processor() or platform.machine() or "cpu"


_VERSION = re.compile(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", re.M)


def package_version(name: str) -> str | None:
    """An installed package's ``__version__`` without importing it (torchvision and timm take ~3 s): from the
    ``version.py`` an import would find (torchvision's carries its build, ``+cu130``), else from its distribution's
    metadata; None when it is not installed."""
    m = sys.modules.get(name)
    if m is not None:
        return getattr(m, "__version__", None)

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or []:
        f = Path(folder) / "version.py"
        if f.is_file():
            found = _VERSION.search(f.read_text(errors="replace"))
            if found:
                return found.group(1)
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def env_info(device=None) -> dict[str, Any]:
    """The environment as a dict, for results.json."""
    import torch

    dev = device if device is not None else get_device()
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(dev),
        "device_name": device_name(dev),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "scale": get_scale(),
    }
    info.update({mod: package_version(mod) for mod in ("torchvision", "timm")})
    if dev.type == "cuda":
        info["cuda"] = torch.version.cuda
        info["gpu_memory_gb"] = round(torch.cuda.get_device_properties(dev).total_memory / 2**30, 1)
    return info


def setup(prefer: str | None = None):
    """Every notebook's set-up cell in one call: keep library log lines out (``quiet_logs``), pick the device
    (``get_device``), print versions, device, cores and scale (``env_summary``). Returns ``(DEVICE, ON_GPU)``:
    the device experiments run on and whether it is a CUDA GPU (the one name every notebook uses for that)."""
    quiet_logs()
    device = get_device(prefer)
    from .display import wrapped

    print(wrapped(env_summary(device)))
    return device, is_cuda(device)


def env_summary(device=None) -> str:
    """One line: versions, device and scale (printed by every notebook's set-up cell)."""
    i = env_info(device)
    parts = [f"Python {i['python']}", f"torch {i['torch']}"]
    parts += [f"{mod} {i[mod]}" for mod in ("torchvision", "timm") if i.get(mod)]
    parts += [
        f"device {i['device']} ({i['device_name']})",
        f"{i['cpu_count']} CPU cores",
        f"scale {i['scale']}",
    ]
    return " | ".join(parts)


KINETO_LOG_ENV = "KINETO_LOG_LEVEL"
# Kineto's severities (a message shows when its severity >= the level): 0 verbose, 1 info, 2 warning, 3 stage,
# 4 error, 5 USDT probe markers ("profiler_start/stop")
KINETO_LEVEL_CPU = 6  # no GPU: every line is noise (its failed GPU probe, the probe markers)
KINETO_LEVEL_GPU = 4  # a GPU: keep Kineto's errors (CUPTI failures explain a trace without kernels)


def kineto_log_level(cuda: bool | None = None) -> int:
    """The Kineto log level the lessons use: silent on a CPU-only machine, errors shown with a GPU (there the USDT
    probe markers stay visible: Kineto ranks them above errors, so no level drops them and keeps its errors)."""
    return KINETO_LEVEL_GPU if (cuda_available() if cuda is None else cuda) else KINETO_LEVEL_CPU


def quiet_logs(cuda: bool | None = None) -> dict[str, str]:
    """Silence library log lines that are not part of a lesson: torch's spurious profiler warning, the C++ extension
    loader's "No CUDA runtime is found" (a CUDA wheel on a CPU machine, at Inductor's first compile) and, unless
    already set, ``$KINETO_LOG_LEVEL``, which Kineto reads when the process's first profile starts (call this before
    profiling). Returns the variables it set."""
    import logging

    quiet_profiler_warning()
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    if os.environ.get(KINETO_LOG_ENV, "").strip():
        return {}
    value = str(kineto_log_level(cuda))
    os.environ[KINETO_LOG_ENV] = value
    return {KINETO_LOG_ENV: value}
