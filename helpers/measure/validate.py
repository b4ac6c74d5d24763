"""Validation of experiment settings: a bad value is refused with a message a reader can act on (``InvalidValue``,
a ``ValueError``), before anything runs. Used by the experiments themselves and by the panels that call them."""

from __future__ import annotations

import math
import numbers
import os
from typing import Any

from .device import is_cuda

COMPILE_MODES = ("eager", "default", "reduce-overhead", "max-autotune")
PRECISIONS = ("fp32", "bf16", "fp16")


class InvalidValue(ValueError):
    """A control value that the panel refuses (the message is shown to the reader)."""


def validate_whole(value: Any, what: str) -> int:
    """A whole number (an ``int``, not a bool); returned as is."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidValue(f"{what} must be a whole number, not {value!r}.")
    return value


def validate_num_workers(n: Any, max_workers: int | None = None) -> int:
    cores = max_workers if max_workers is not None else (os.cpu_count() or 1)
    if validate_whole(n, "num_workers") < 0:
        raise InvalidValue(
            f"num_workers cannot be negative (got {n}); use 0 to load in the main process."
        )
    if n > cores:
        raise InvalidValue(
            f"num_workers={n} is more than this machine's {cores} CPU cores; choose 0..{cores}."
        )
    return n


def validate_batch_size(b: Any, maximum: int = 4096) -> int:
    if validate_whole(b, "batch size") < 1:
        raise InvalidValue(f"batch size must be at least 1 (got {b}).")
    if b > maximum:
        raise InvalidValue(f"batch size {b} is above this panel's limit of {maximum}.")
    return b


def validate_bool(value: Any, what: str) -> bool:
    """A yes/no setting (``deterministic``, say) must be True or False: ``bool("abc")`` is True, so a string, a
    number or None is refused rather than read as a truth value. NumPy's booleans count as booleans."""
    import numpy as np

    if not isinstance(value, (bool, np.bool_)):
        raise InvalidValue(f"{what} must be True or False, not {value!r}.")
    return bool(value)


def validate_positive(value: Any, what: str) -> float:
    """A positive, finite number (a bool, a string, NaN, inf, 0 or less is refused with a message); returned as is."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or not value > 0
    ):
        raise InvalidValue(f"{what} must be a positive, finite number, not {value!r}.")
    return value


def validate_choice(value: Any, choices, what: str) -> Any:
    if value not in choices:
        raise InvalidValue(
            f"unknown {what} {value!r}; choose one of: {', '.join(map(str, choices))}."
        )
    return value


def validate_compile_mode(mode: Any, device=None) -> str:
    validate_choice(mode, COMPILE_MODES, "compile mode")
    if mode == "reduce-overhead" and not is_cuda(device):
        raise InvalidValue(
            "compile mode 'reduce-overhead' uses CUDA graphs and needs a GPU; this run is on the CPU."
        )
    return mode


def validate_precision(p: Any, device=None) -> str:
    validate_choice(p, PRECISIONS, "precision")
    if p == "fp16" and not is_cuda(device):
        raise InvalidValue("fp16 autocast is meant for GPUs; on the CPU choose fp32 or bf16.")
    return p
