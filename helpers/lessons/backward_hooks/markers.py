"""The markers around a module's backward, and the errors labelling can meet (taught in ``03_backward_hooks``).

A labelled module's backward lies between two tiny ``record_function`` ranges, "before backward of <class>[:
details]" and "after backward of <class>[: details]" (``BEFORE``, ``AFTER``): ``labels.py`` and ``graph_labels.py``
emit them, ``spans.py`` pairs them back into spans. ``HookError`` is the clear message for what cannot be labelled
(a module whose backward was not seen, in-place ops with full hooks, ``torch.compile``).
"""
from __future__ import annotations

import contextlib
from typing import Iterable, Iterator

from torch import nn
from torch.profiler import record_function

BEFORE = "before backward of "
AFTER = "after backward of "
ROOT_NAME = "(model)"
_INPLACE_HINTS = ("is being modified inplace", "BackwardHookFunction")


class HookError(RuntimeError):
    """A module whose backward cannot be labelled with full backward hooks (the reason is the message)."""


def label(prefix: str, module: nn.Module, details: str | None = None) -> str:
    """``"<prefix><class>[: details]"``, the label the hooks emit."""
    text = f"{prefix}{type(module).__qualname__}"
    return f"{text}: {details}" if details else text


def emit(name: str) -> None:
    """An instant range: enough for a marker in the trace and a timestamp in ``prof.events()``."""
    with record_function(name):
        pass


def is_compiled(module: nn.Module) -> bool:
    """True for a ``torch.compile``'d model (``OptimizedModule``) or one compiled in place (``.compile()``)."""
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except Exception:  # noqa: BLE001 - dynamo unavailable on this build
        OptimizedModule = ()  # type: ignore[assignment]
    for m in module.modules():
        if (OptimizedModule and isinstance(m, OptimizedModule)) or getattr(m, "_compiled_call_impl", None) is not None:
            return True
    return False


def refuse_compiled(module: nn.Module) -> None:
    if is_compiled(module):
        raise HookError(
            f"{type(module).__name__} is (or contains) a torch.compile'd module. Full backward hooks do not survive "
            "torch.compile: the compiled graph runs its own fused backward, so per-module labels would be missing or "
            "misplaced. Label the eager model (before torch.compile), find the bottleneck there, then compile.")



def inplace_modules(model: nn.Module) -> list[str]:
    """``"<qualified name> (<class>)"`` of each submodule configured to work in place (``inplace=True``)."""
    return [f"{n or ROOT_NAME} ({type(m).__name__})" for n, m in model.named_modules()
            if getattr(m, "inplace", False) is True]


def explain(exc: BaseException, model: nn.Module | None = None) -> BaseException:
    """Turn autograd's view+inplace error from a hooked module into a ``HookError`` (others unchanged)."""
    msg = str(exc)
    if isinstance(exc, RuntimeError) and all(h in msg for h in _INPLACE_HINTS):
        suspects = inplace_modules(model) if model is not None else []
        where = f" In-place modules in this model: {', '.join(suspects)}." if suspects else ""
        return HookError(
            "a hooked module's output is modified in place downstream (for example by ReLU(inplace=True) or "
            "x += ...). Full backward hooks wrap the output in a custom autograd Function, and autograd forbids "
            f"in-place changes to it.{where} Fix: make that op out-of-place (inplace=False), or do not hook the "
            "module that feeds it.")
    return exc


@contextlib.contextmanager
def clear_hook_errors(model: nn.Module | None = None) -> Iterator[None]:
    """Re-raise autograd's hook/in-place error as a ``HookError`` with a clear message."""
    try:
        yield
    except RuntimeError as exc:
        new = explain(exc, model)
        if new is exc:
            raise
        raise new from None


def probe(model: nn.Module, *example_inputs) -> None:
    """One forward with gradients on, to surface a hook error up front (as a ``HookError``)."""
    with clear_hook_errors(model):
        model(*example_inputs)


def select_modules(model: nn.Module, names: Iterable[str] | None, leaves_only: bool) -> list[tuple[str, nn.Module]]:
    mods = dict(model.named_modules())
    wanted = list(mods) if names is None else list(names)
    unknown = [n for n in wanted if n not in mods]
    if unknown:
        raise KeyError(f"no submodule named {unknown}; try one of {list(mods)[:12]} ...")
    return [(n, mods[n]) for n in wanted if not (leaves_only and next(mods[n].children(), None) is not None)]



def remove(handles: Iterable) -> None:
    for h in handles:
        h.remove()


