"""Notebook 03's demonstrations of where hooks stop working, and its CUDA sync-debug reader (``03_backward_hooks``).

``try_hook`` labels a small model whose first layer is followed by ``ReLU(inplace=True)``, three ways (the article's
full backward hooks, ``label_modules``'s graph hooks, hooks on a ``torch.compile``d model), and returns what happened.
``sync_debug_warnings`` runs a step once under ``torch.cuda.set_sync_debug_mode("warn")`` and reads the warnings
(CUDA only: the mode raises without an NVIDIA driver).
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Iterable

import torch
from torch import nn

from ...notebook import env
from .labels import backward_hook_wrapper, label_modules
from .markers import HookError, probe, remove

HOOK_DEMOS = ("article's wrapper + in-place", "label_modules + in-place", "torch.compile")
LABELLED = "labelled"


def inplace_model() -> nn.Sequential:
    """A layer followed by an in-place ReLU: what the article's full backward hooks refuse."""
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(inplace=True), nn.Linear(8, 2))


def try_hook(what: str) -> str:
    """Label ``inplace_model()`` the way ``what`` names (one of ``HOOK_DEMOS``) and run it.

    Returns ``"labelled"`` when forward and backward ran with every module labelled, else the ``HookError``'s
    one-line message (also printed); the hooks are removed either way.
    """
    if what not in HOOK_DEMOS:
        raise ValueError(f"unknown hook demo {what!r}; choose one of: {', '.join(HOOK_DEMOS)}")
    m, x = inplace_model(), torch.randn(2, 8)
    handles: Any = []
    try:
        if what == HOOK_DEMOS[0]:
            handles = backward_hook_wrapper(m[0], "0")
            probe(m, x)
        elif what == HOOK_DEMOS[1]:
            handles = label_modules(m, example_inputs=(x,))
            m(x).sum().backward()
            print(f"{what}: no error; forward and backward ran with every module labelled\n")
            return LABELLED
        else:
            handles = label_modules(torch.compile(m))
    except HookError as exc:
        print(f"{what}: HookError: {exc}\n")
        return str(exc)
    finally:
        remove(handles)
    return ""


def sync_debug_warnings(build_step: Callable[[str], Callable[[], Any]], methods: Iterable[str],
                        deterministic: bool = True) -> dict[str, dict[str, Any]]:
    """For each method: build its step (``build_step(method)``), run it once to warm up, then once more under
    ``torch.cuda.set_sync_debug_mode("warn")`` (reset to 0 afterwards, even on an error), in ``deterministic`` mode.

    Returns ``{method: {"count": synchronising calls warned about, "where": the file:line each warning names,
    relative to torch's parent folder}}``. A sync inside the backward happens on autograd's thread, so a line may be
    the ``backward()`` call rather than the op. CUDA only.
    """
    root = os.path.dirname(torch.__path__[0])
    out = {}
    for method in methods:
        s = build_step(method)
        with env.deterministic(deterministic):
            s()
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("warn")
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    s()
            finally:
                torch.cuda.set_sync_debug_mode(0)
        syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
        out[method] = {"count": len(syncs), "where": sorted({f"{os.path.relpath(w.filename, root)}:{w.lineno}"
                                                             for w in syncs})}
    return out
