"""Replay tests: the lessons' GPU analyses, tables, verdicts and views run on the recorded H100 run in
``data/reference/h100/`` (results.json, traces), so the GPU branch of each lesson's code runs on every commit without
a GPU. The reference is the project's own data and ships with it: these tests never skip for want of it."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers.notebook import reference

ROOT = Path(__file__).resolve().parents[2]
REF_ROOT = ROOT / "data" / "reference"
GPU = "h100"


def h100(notebook: str) -> reference.Reference:
    """The H100 reference of ``notebook`` (fails, never skips, when it is missing)."""
    ref, line = reference.lookup(notebook, gpu=GPU, root=REF_ROOT)
    if ref is None:
        pytest.fail(line, pytrace=False)
    return ref


def h100_trace(notebook: str, contains: str) -> Path:
    """The first gzipped H100 trace of ``notebook`` whose path under ``traces/`` contains ``contains``."""
    found = h100(notebook).traces(contains)
    if not found:
        pytest.fail(f"no H100 trace of {notebook} matching {contains!r} in {REF_ROOT / GPU / notebook / 'traces'}",
                    pytrace=False)
    return found[0]


@pytest.fixture
def ref():
    return h100


@pytest.fixture
def trace():
    return h100_trace
