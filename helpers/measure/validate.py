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


class Whole:
    """A whole number from ``low`` to ``high`` (``what`` names it in the message)."""

    def __init__(self, low: int, high: int, what: str | None = None):
        self.low, self.high, self.what = low, high, what

    def __call__(self, value: Any, name: str) -> int:
        what = self.what or name.replace("_", " ")
        if validate_whole(value, what) < self.low or value > self.high:
            raise InvalidValue(f"{what} must be from {self.low} to {self.high}, not {value}.")
        return value


class Choice:
    """One of ``options`` (a tuple, or a mapping's keys)."""

    def __init__(self, options, what: str | None = None):
        self.options, self.what = tuple(options), what

    def __call__(self, value: Any, name: str) -> Any:
        return validate_choice(value, self.options, self.what or name.replace("_", " "))


# The rules a spec may name by a word, for the settings every panel shares.
NAMED = {
    "precision": validate_precision,
    "compile_mode": validate_compile_mode,
    "num_workers": validate_num_workers,
}


def check_values(values: dict, spec: dict, device=None) -> dict:
    """A panel's values checked against one spec (``{name: Whole(...) | Choice(...) | "precision" | ...}``) before
    anything runs: an unknown name or a bad value is refused in one line (``InvalidValue``); returns the values."""
    unknown = sorted(set(values) - set(spec))
    if unknown:
        raise InvalidValue(f"unknown setting {unknown[0]!r}; the settings are: {', '.join(spec)}.")
    for name, value in values.items():
        rule = spec[name]
        if rule in ("precision", "compile_mode"):
            NAMED[rule](value, device)
        elif rule == "num_workers":
            validate_num_workers(value)
        elif rule is bool:
            validate_bool(value, name.replace("_", " "))
        else:
            rule(value, name)
    return values
