"""Label a module's backward pass in the profiler with full backward hooks.

Taught in ``03_backward_hooks``. ``record_function`` cannot wrap a backward op (the
autograd engine runs it, not your code), but a module's *full backward hooks* run at
the edges of its backward: the pre-hook when the gradient w.r.t. its outputs is ready,
the hook when the gradient w.r.t. its inputs has been computed. Each hook emits a tiny
``record_function`` range ("before backward of <class>[: details]" and "after backward
of <class>[: details]"), as in the source article; the module's backward lies between
the end of the first and the start of the second, on the same thread.

- ``backward_hook_wrapper``: the article's wrapper for one module.
- ``label_modules``: label every named module with its qualified name (``blocks.3.attn``).
- ``label_all_modules_globally``: ``register_module_full_backward_hook`` (class names only).
- ``backward_table``: label pairs in ``prof.events()`` -> a per-module backward-time DataFrame.
- ``HookError``: the clear message for modules that cannot be hooked (in-place op downstream,
  ``torch.compile``).
"""
from __future__ import annotations

import contextlib
from typing import Iterable, Iterator

import torch
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


def _emit(name: str) -> None:
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


def backward_hook_wrapper(module: nn.Module, details: str | None = None, wait_for_params: bool = True) -> list:
    """The article's wrapper: mark the start and end of ``module``'s backward in the profiler.

    Registers ``register_full_backward_pre_hook`` (emits "before backward of <class>[: details]")
    and ``register_full_backward_hook`` (emits "after backward of <class>[: details]").
    With ``wait_for_params`` (see ``end_after_param_grads``) a module whose inputs need no
    gradient gets a second, later "after" marker. Returns the hook handles (``remove(handles)``).
    """
    refuse_compiled(module)
    before = label(BEFORE, module, details)
    after = label(AFTER, module, details)

    def pre_hook(mod, grad_output):
        _emit(before)
        return None  # leave the gradients unchanged

    def post_hook(mod, grad_input, grad_output):
        _emit(after)
        return None

    handles = [module.register_full_backward_pre_hook(pre_hook), module.register_full_backward_hook(post_hook)]
    if wait_for_params:
        handles += end_after_param_grads(module, after)
    return handles


def end_after_param_grads(module: nn.Module, after: str) -> list:
    """A later "after" marker for a module whose inputs need no gradient (the model itself, the patch embedding).

    Its full backward hook then fires as soon as the gradient w.r.t. its *outputs* is ready,
    before its own backward has run (PyTorch warns "Full backward hook is firing when gradients
    are computed with respect to module outputs"). So a forward pre-hook notes whether any input
    needs a gradient; if none does, the backward pre-hook arms a counter of the module's
    trainable parameters, and each parameter's post-accumulate-grad hook counts down: when
    the last gradient is accumulated, ``after`` is emitted again. ``label_pairs`` ends a span
    at its last "after" marker.
    """
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        return []
    state = {"no_input_grad": False, "pending": 0}

    def fwd_pre(mod, args):
        state["no_input_grad"] = not any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)

    def arm(mod, grad_output):
        state["pending"] = len(params) if state["no_input_grad"] else 0

    def count(p):
        if state["pending"] > 0:
            state["pending"] -= 1
            if state["pending"] == 0:
                _emit(after)

    return ([module.register_forward_pre_hook(fwd_pre), module.register_full_backward_pre_hook(arm)]
            + [p.register_post_accumulate_grad_hook(count) for p in params])


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


def label_modules(model: nn.Module, names: Iterable[str] | None = None, *, leaves_only: bool = False,
                  example_inputs: tuple | None = None) -> list:
    """Label the backward of each named submodule with its qualified name (``blocks.3.attn``).

    ``names`` picks some (``["patch_embed", "blocks"]``; ``""`` is the model itself), by
    default all of ``model.named_modules()``; ``leaves_only`` keeps modules without children.
    With ``example_inputs`` a probe forward runs first, so a module that cannot be hooked
    (in-place op downstream) is reported now, clearly, and the hooks are removed again.
    Returns the hook handles: ``remove(handles)`` undoes everything.
    """
    refuse_compiled(model)
    mods = dict(model.named_modules())
    wanted = list(mods) if names is None else list(names)
    unknown = [n for n in wanted if n not in mods]
    if unknown:
        raise KeyError(f"no submodule named {unknown}; try one of {list(mods)[:12]} ...")
    handles = []
    for name in wanted:
        mod = mods[name]
        if leaves_only and next(mod.children(), None) is not None:
            continue
        handles += backward_hook_wrapper(mod, name or ROOT_NAME)
    if example_inputs is not None:
        try:
            probe(model, *example_inputs)
        except BaseException:
            remove(handles)
            raise
    return handles


def label_all_modules_globally(details: str | None = None) -> list:
    """Label *every* module's backward (in every model) with one call: class names only.

    Uses ``torch.nn.modules.module.register_module_full_backward_pre_hook`` and
    ``register_module_full_backward_hook``. A global hook sees the module object but not
    its name, so two instances of one class (``blocks.0.attn`` and ``blocks.1.attn``) get
    the same label. Remove the handles when done: global hooks affect all models.
    """
    from torch.nn.modules import module as module_mod

    def pre_hook(mod, grad_output):
        _emit(label(BEFORE, mod, details))

    def post_hook(mod, grad_input, grad_output):
        _emit(label(AFTER, mod, details))

    return [module_mod.register_module_full_backward_pre_hook(pre_hook),
            module_mod.register_module_full_backward_hook(post_hook)]


def remove(handles: Iterable) -> None:
    for h in handles:
        h.remove()


def _split(name: str) -> tuple[str, str, str] | None:
    """``"before backward of Attention: blocks.3.attn"`` -> ("before", "Attention", "blocks.3.attn")."""
    for kind, prefix in (("before", BEFORE), ("after", AFTER)):
        if name.startswith(prefix):
            rest = name[len(prefix):]
            cls, _, details = rest.partition(": ")
            return kind, cls, details
    return None


def _host(events) -> list:
    """Host-side (CPU) events only: on CUDA a label can also be drawn on the GPU timeline."""
    return [e for e in events if str(getattr(e, "device_type", "CPU")).endswith("CPU")]


def label_pairs(events) -> list[dict]:
    """Match "before"/"after" markers (per label and thread) into spans, in the order they closed.

    A span ends at the last "after" marker before the label's next "before".

    ``events`` is ``prof.events()`` (``FunctionEvent`` objects, times in microseconds).
    Each span: module (details or class), cls, start_us, end_us, thread.
    """
    marks = []
    for e in _host(events):
        parts = _split(e.name)
        if parts is not None:
            marks.append((e.time_range.start, e.time_range.end, parts, getattr(e, "thread", 0)))
    marks.sort(key=lambda m: m[0])
    open_: dict[tuple, list] = {}
    last: dict[tuple, dict] = {}
    spans = []
    for start, end, (kind, cls, details), thread in marks:
        key = (cls, details, thread)
        if kind == "before":
            open_.setdefault(key, []).append(end)
            last.pop(key, None)
        elif open_.get(key):
            begun = open_[key].pop()
            last[key] = {"module": details or cls, "cls": cls, "start_us": begun, "end_us": start, "thread": thread}
            spans.append(last[key])
        elif key in last:  # a later "after" of the same span (end_after_param_grads): the span ends there
            last[key]["end_us"] = start
    return spans


def label_order(events, kind: str = "before") -> list[str]:
    """The modules in the order their "before"/"after" markers fired (first backward only is up to the caller)."""
    out = []
    for e in sorted(_host(events), key=lambda e: e.time_range.start):
        parts = _split(e.name)
        if parts is not None and parts[0] == kind:
            out.append(parts[2] or parts[1])
    return out


def backward_table(prof, steps: int | None = None):
    """Per-module backward time from the label pairs in ``prof.events()``, as a DataFrame.

    Columns: module, cls, depth (dots in the qualified name), calls, backward_ms (CPU span
    between the markers, per step), device_ms (self device time of the ops launched inside
    the span, per step; 0 on the CPU), share (of the whole backward: the ``backward``
    ``record_function`` label when present, else the widest span). Sorted by backward_ms.
    """
    import pandas as pd

    events = _host(prof.events())
    spans = label_pairs(events)
    n_steps = steps or max(1, sum(1 for e in events if e.name.startswith("ProfilerStep")))
    ops_by_thread: dict = {}
    for e in events:
        if _split(e.name) is None and not e.name.startswith("ProfilerStep"):
            ops_by_thread.setdefault(getattr(e, "thread", 0), []).append(e)
    rows: dict[str, dict] = {}
    for s in spans:
        dev = 0.0
        for e in ops_by_thread.get(s["thread"], []):
            if s["start_us"] <= e.time_range.start and e.time_range.end <= s["end_us"]:
                dev += getattr(e, "self_device_time_total", 0.0) or 0.0
        r = rows.setdefault(s["module"], {"module": s["module"], "cls": s["cls"], "calls": 0, "cpu_us": 0.0, "dev_us": 0.0})
        r["calls"] += 1
        r["cpu_us"] += max(0.0, s["end_us"] - s["start_us"])
        r["dev_us"] += dev
    df = pd.DataFrame(list(rows.values()), columns=["module", "cls", "calls", "cpu_us", "dev_us"])
    df["depth"] = [0 if m == ROOT_NAME else m.count(".") + 1 for m in df["module"]]
    df["backward_ms"] = df.pop("cpu_us") / 1000.0 / n_steps
    df["device_ms"] = df.pop("dev_us") / 1000.0 / n_steps
    bwd = [e for e in events if e.name == "backward"]
    total = sum(e.time_range.end - e.time_range.start for e in bwd) / 1000.0 / n_steps if bwd else 0.0
    if total <= 0 and len(df):
        total = float(df["backward_ms"].max())
    df["share"] = df["backward_ms"] / total if total > 0 else 0.0
    df = df.sort_values("backward_ms", ascending=False).reset_index(drop=True)
    return df[["module", "cls", "depth", "calls", "backward_ms", "device_ms", "share"]]


def forward_completion_order(model: nn.Module, *inputs, names: Iterable[str] | None = None) -> list[str]:
    """Qualified names in the order their forward *finished* (children before their parent).

    Its reverse is the order in which the backward reaches the modules of a chain, i.e. the
    order the "before backward" markers should fire. Runs one forward without gradients.
    """
    wanted = set(names) if names is not None else None
    order: list[str] = []
    handles = []
    for n, m in model.named_modules():
        if wanted is None or n in wanted:
            handles.append(m.register_forward_hook(lambda mod, i, o, n=n: order.append(n or ROOT_NAME)))
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        remove(handles)
    return order
