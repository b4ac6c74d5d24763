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
    return Whole(1, maximum, "batch size")(b)


def validate_bool(value: Any, what: str) -> bool:
    """A yes/no setting (``deterministic``, say) must be True or False: ``bool("abc")`` is True, so a string, a
    number or None is refused rather than read as a truth value. NumPy's booleans count as booleans."""
    import numpy as np

    if not isinstance(value, (bool, np.bool_)):
        raise InvalidValue(f"{what} must be True or False, not {value!r}.")
    return bool(value)


def validate_positive(value: Any, what: str) -> float:
    """A positive, finite number (a bool, a string, NaN, inf, 0 or less is refused with a message); returned as is."""
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not (real and math.isfinite(value) and value > 0):
        raise InvalidValue(f"{what} must be a positive, finite number, not {value!r}.")
    return value


def validate_choice(value: Any, choices, what: str) -> Any:
    return Choice(choices, what)(value)


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


class Whole:
    """A whole number from ``low`` to ``high`` (no upper bound when None; ``what`` names it in the message)."""

    def __init__(self, low: int, high: int | None = None, what: str | None = None):
        self.low, self.high, self.what = low, high, what

    def __call__(self, value: Any, name: str = "value", device=None) -> int:
        what = self.what or name.replace("_", " ")
        if validate_whole(value, what) < self.low:
            raise InvalidValue(f"{what} must be at least {self.low} (got {value}).")
        if self.high is not None and value > self.high:
            raise InvalidValue(f"{what} {value} is above this panel's limit of {self.high}.")
        return value


class Choice:
    """One of ``options`` (a tuple, or a mapping's keys)."""

    def __init__(self, options, what: str | None = None):
        self.options, self.what = tuple(options), what

    def __call__(self, value: Any, name: str = "value", device=None) -> Any:
        if value not in self.options:
            what = self.what or name.replace("_", " ")
            choices = ", ".join(map(str, self.options))
            raise InvalidValue(f"unknown {what} {value!r}; choose one of: {choices}.")
        return value


# The rules a spec may name by a word or a type, for the settings every panel shares: each is called as
# ``rule(value, name, device)``, as ``Whole`` and ``Choice`` are; the ``validate_*`` functions above are these pieces.
NAMED = {
    "precision": lambda value, name, device: validate_precision(value, device),
    "compile_mode": lambda value, name, device: validate_compile_mode(value, device),
    "num_workers": lambda value, name, device: validate_num_workers(value),
    bool: lambda value, name, device: validate_bool(value, name.replace("_", " ")),
    float: lambda value, name, device: validate_positive(value, name.replace("_", " ")),
}


def check_values(values: dict, spec: dict, device=None) -> dict:
    """A panel's values checked against one spec (``{name: Whole(...) | Choice(...) | "precision" | bool | ...}``,
    ``float`` for a positive number) before anything runs: an unknown name or a bad value is refused in one line
    (``InvalidValue``); returns the values."""
    unknown = sorted(set(values) - set(spec))
    if unknown:
        raise InvalidValue(f"unknown setting {unknown[0]!r}; the settings are: {', '.join(spec)}.")
    for name, value in values.items():
        rule = spec[name]
        NAMED.get(rule, rule)(value, name, device)
    return values
